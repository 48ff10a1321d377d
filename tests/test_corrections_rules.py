"""Each corrections rule on hand-made bars: what it must change, and what it must leave alone."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from streams.corrections import (
    SYNTHETIC,
    Change,
    CorrectionConfig,
    CorrectionStats,
    Gap,
    History,
    Outcome,
    Reason,
    Rule,
    Status,
    SymbolState,
    correct,
    correct_history,
    flush,
)
from streams.corrections.parse import validate
from streams.schema import UNDEF_PRICE, end_of_interval

T0 = 1_704_150_000 * 10**9  # 2024-01-01 23:00 UTC, on the minute grid
MINUTE = 60 * 10**9
TICK = 50_000  # 6E: 0.00005
BASE = 1_100_000_000  # 1.1000
CONFIG = CorrectionConfig()


def bar(minute: int, o: Any, h: Any, low: Any, c: Any, **fields: Any) -> dict[str, Any]:
    """A bars.raw dict of symbol 6EH4 at T0 + minute."""
    return {
        "instrument_id": 42,
        "symbol": "6EH4",
        "ts_event": T0 + minute * MINUTE,
        "rtype": 33,
        "publisher_id": 1,
        "open": o,
        "high": h,
        "low": low,
        "close": c,
        "volume": 10,
        "source": "test",
        **fields,
    }


def flat(minute: int, price: int = BASE, **fields: Any) -> dict[str, Any]:
    return bar(minute, price, price + TICK, price - TICK, price, **fields)


def calm(n: int) -> list[dict[str, Any]]:
    """n quiet bars wobbling one tick around BASE: history for the robust statistics."""
    return [flat(i, BASE + (i % 2) * TICK) for i in range(n)]


def only(history: History, minute: int) -> Any:
    """The outcome of the input bar at T0 + minute."""
    found = [o for o in history.outcomes if _ts(o.value) == T0 + minute * MINUTE]
    assert len(found) == 1, found
    return found[0]


def _ts(value: Any) -> int | None:
    data = orjson.loads(value) if isinstance(value, bytes) else value
    return data.get("ts_event") if isinstance(data, dict) else None


def statuses(history: History) -> list[str]:
    return statuses_of(history.outcomes)


def statuses_of(outcomes: list[Outcome]) -> list[str]:
    return [o.status.value for o in outcomes]


# --- clean bars and the bars.clean contract ---------------------------------------------------


def test_clean_bar_keeps_every_field_and_adds_status() -> None:
    raw = flat(0)
    history = correct_history([orjson.dumps(raw)])
    (outcome,) = history.outcomes
    assert outcome.status is Status.CLEAN and outcome.changes == ()
    assert outcome.bar == {**raw, "status": "clean", "corrections": []}
    assert history.clean == [outcome.bar]


def test_dict_input_is_not_modified() -> None:
    raw = bar(0, BASE, BASE - TICK, BASE + TICK, BASE)  # inverted: will be corrected
    before = dict(raw)
    correct_history([raw])
    assert raw == before


# --- malformed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (b"\xff not json", "not JSON"),
        (b"[1, 2]", "JSON list"),
        (3.5, "neither JSON bytes nor a dict"),
        ({k: v for k, v in flat(0).items() if k != "close"}, "missing field(s) close"),
        ({**flat(0), "open": 1.1}, "convert with round(price * 1e9)"),
        ({**flat(0), "open": "1.1"}, "got str"),
        ({**flat(0), "volume": True}, "'volume' must be int"),
        ({**flat(0), "volume": -1}, "'volume'=-1 is outside"),
        ({**flat(0), "symbol": ""}, "'symbol' is empty"),
        ({**flat(0), "instrument_id": 2**32}, "'instrument_id'"),
        ({**flat(0), "open": 2**63}, "int64 fixed-point"),
        ({**flat(0), "rtype": 1}, "not an OHLCV record type"),
        ({**flat(0), "ts_event": 946_684_740 * 10**9}, "outside 2000-01-01"),  # 1999-12-31
        ({**flat(0), "ts_event": 4_102_444_800 * 10**9}, "outside 2000-01-01"),
        ({**flat(0), "ts_event": T0 + 1}, "not on the 60 s grid"),
        (end_of_interval(T0), "control record"),
    ],
)
def test_malformed_is_rejected_with_a_message(value: Any, words: str) -> None:
    stats = CorrectionStats()
    step = correct(value, SymbolState(), CONFIG, stats)
    (outcome,) = step.outcomes
    assert outcome.status is Status.REJECTED and outcome.reason is Reason.MALFORMED
    assert words in outcome.message
    assert outcome.value is value and outcome.bar is None and step.clean == []
    assert stats.rejections == {Reason.MALFORMED: 1}


def test_far_future_is_malformed_only_against_a_clock() -> None:
    value = flat(0)
    assert correct(value, SymbolState(), CONFIG, CorrectionStats()).outcomes[0].status is (
        Status.CLEAN
    )
    step = correct(value, SymbolState(), CONFIG, CorrectionStats(), now_ns=T0 - 2 * 86_400 * 10**9)
    assert step.outcomes[0].reason is Reason.MALFORMED
    assert "h in the future" in step.outcomes[0].message


def test_symbol_and_interval_must_match_the_state() -> None:
    state, stats = SymbolState(), CorrectionStats()
    correct(flat(0), state, CONFIG, stats)
    other = correct({**flat(1), "symbol": "6EM4"}, state, CONFIG, stats).outcomes[0]
    hourly = correct({**flat(60), "rtype": 34}, state, CONFIG, stats).outcomes[0]
    assert other.reason is Reason.MALFORMED and "'6EM4' given with the state of '6EH4'" in (
        other.message
    )
    assert hourly.reason is Reason.MALFORMED and "one bar interval per symbol" in hourly.message


# --- undefined prices ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prices", "fixed", "changed"),
    [
        # missing high: the narrowest envelope, max(open, close)
        ((BASE, UNDEF_PRICE, BASE - TICK, BASE + TICK), (BASE, BASE + TICK), ["high"]),
        # missing low (null in JSON, NaN in a dict)
        ((BASE, BASE + TICK, None, BASE - TICK), (BASE, BASE + TICK), ["low"]),
        ((BASE, BASE + TICK, float("nan"), BASE), (BASE, BASE + TICK), ["low"]),
        # only the close is known: the envelope pins all four
        ((None, UNDEF_PRICE, UNDEF_PRICE, BASE), (BASE, BASE), ["high", "low", "open"]),
        # open missing but high == low pins it
        ((UNDEF_PRICE, BASE, BASE, BASE), (BASE, BASE), ["open"]),
    ],
)
def test_undefined_prices_are_derived_when_the_bar_pins_them(
    prices: tuple[Any, ...], fixed: tuple[int, int], changed: list[str]
) -> None:
    outcome = correct_history([bar(0, *prices)]).outcomes[0]
    assert outcome.status is Status.CORRECTED
    assert [c.field for c in outcome.changes] == changed
    assert all(c.rule is Rule.UNDEFINED_PRICE and c.old is None for c in outcome.changes)
    assert outcome.bar is not None
    assert (outcome.bar["open"], outcome.bar["high"]) == fixed


@pytest.mark.parametrize(
    ("prices", "words"),
    [
        ((UNDEF_PRICE,) * 4, "all four prices are undefined"),
        ((None, None, None, float("nan")), "all four prices are undefined"),
        ((UNDEF_PRICE, BASE + TICK, BASE - TICK, BASE), "open is undefined"),
        ((BASE, BASE + TICK, BASE - TICK, None), "close is undefined"),
    ],
)
def test_undefined_prices_that_cannot_be_derived_are_rejected(
    prices: tuple[Any, ...], words: str
) -> None:
    outcome = correct_history([bar(0, *prices)]).outcomes[0]
    assert outcome.reason is Reason.UNDEFINED_PRICE and words in outcome.message


# --- zero and negative prices ----------------------------------------------------------------


@pytest.mark.parametrize("low", [0, -TICK])
def test_nonpositive_prices_are_rejected(low: int) -> None:
    outcome = correct_history([bar(0, BASE, BASE, low, BASE)]).outcomes[0]
    assert outcome.reason is Reason.NONPOSITIVE_PRICE and "allow_negative" in outcome.message


@pytest.mark.parametrize(
    ("symbol", "config"),
    [
        ("6EH4", CorrectionConfig(allow_negative=frozenset({"6EH4"}))),
        ("ESH4-ESM4", CONFIG),  # calendar spreads trade at or below zero
    ],
)
def test_negative_prices_pass_where_allowed(symbol: str, config: CorrectionConfig) -> None:
    values = [bar(0, -TICK, TICK, -2 * TICK, 0, symbol=symbol), flat(1, -TICK, symbol=symbol)]
    assert statuses(correct_history(values, config)) == ["clean", "clean"]


def test_symbol_no_longer_allowed_negative_is_judged_without_its_negative_reference() -> None:
    allowed = CorrectionConfig(allow_negative=frozenset({"6EH4"}))
    state, stats = SymbolState(), CorrectionStats()
    correct(flat(0, -TICK), state, allowed, stats)
    step = correct(flat(1, BASE), state, CONFIG, stats)  # the allowance was removed
    assert [o.status for o in step.outcomes] == [Status.CLEAN]


def test_allow_negative_must_be_a_set() -> None:
    with pytest.raises(ValueError, match=r"frozenset\(\{'ESH4-ESM4'\}\)"):
        CorrectionConfig(allow_negative="ESH4-ESM4")  # type: ignore[arg-type]


def test_invalid_thresholds_name_the_field() -> None:
    with pytest.raises(ValueError, match="spike_z=0"):
        CorrectionConfig(spike_z=0)


# --- fixed-point scale errors ----------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 4, 9])
def test_whole_bar_scaled_up_is_restored_exactly(k: int) -> None:
    good = flat(3, BASE + 3 * TICK)
    scaled = {**good, **{f: good[f] * 10**k for f in ("open", "high", "low", "close")}}
    outcome = only(correct_history([*calm(3), scaled]), 3)
    assert outcome.status is Status.CORRECTED and outcome.bar is not None
    assert {c.rule for c in outcome.changes} == {Rule.SCALE_ERROR}
    assert all(outcome.bar[f] == good[f] for f in ("open", "high", "low", "close"))


def test_one_field_scaled_down_is_restored_when_no_digit_was_lost() -> None:
    history = correct_history([*calm(3), bar(3, BASE, (BASE + TICK) // 1000, BASE - TICK, BASE)])
    outcome = only(history, 3)
    assert outcome.changes == (
        Change(Rule.SCALE_ERROR, "high", (BASE + TICK) // 1000, BASE + TICK),
    )


def test_scaled_down_price_that_lost_digits_below_a_tick_is_rejected() -> None:
    price = (BASE + 7 * TICK) // 10**6  # 1.10035 / 10^6 kept only 1.100: 7 ticks are gone
    outcome = only(correct_history([*calm(3), bar(3, price, price, price, price)]), 3)
    assert outcome.reason is Reason.SCALE_ERROR and "cannot restore" in outcome.message


def test_first_bar_field_off_by_a_power_of_ten_is_restored_from_the_bar_itself() -> None:
    outcome = correct_history([bar(0, BASE, BASE * 100, BASE - TICK, BASE)]).outcomes[0]
    assert outcome.changes == (Change(Rule.SCALE_ERROR, "high", BASE * 100, BASE),)


def test_a_factor_that_is_not_a_power_of_ten_is_no_scale_error() -> None:
    # Three times the reference: a spike candidate, never "rescaled" to something made up.
    history = correct_history([*calm(30), flat(30, 3 * BASE), flat(31, BASE)])
    assert only(history, 30).reason is Reason.SPIKE


# --- OHLC envelope ---------------------------------------------------------------------------


def test_inverted_high_and_low_are_swapped_back() -> None:
    outcome = correct_history([bar(0, BASE, BASE - TICK, BASE + TICK, BASE)]).outcomes[0]
    assert outcome.changes == (
        Change(Rule.ENVELOPE, "high", BASE - TICK, BASE + TICK),
        Change(Rule.ENVELOPE, "low", BASE + TICK, BASE - TICK),
    )


def test_close_above_high_widens_high_to_the_close() -> None:
    outcome = correct_history([bar(0, BASE, BASE + TICK, BASE - TICK, BASE + 3 * TICK)]).outcomes[0]
    assert outcome.changes == (Change(Rule.ENVELOPE, "high", BASE + TICK, BASE + 3 * TICK),)
    assert outcome.bar is not None and outcome.bar["close"] == BASE + 3 * TICK


def test_doji_and_touching_envelopes_are_clean() -> None:
    values = [bar(0, BASE, BASE, BASE, BASE), bar(1, BASE, BASE + TICK, BASE, BASE + TICK)]
    assert statuses(correct_history(values)) == ["clean", "clean"]


# --- spikes ----------------------------------------------------------------------------------


def test_spike_is_held_and_rejected_when_the_next_bar_reverts() -> None:
    state, stats = SymbolState(), CorrectionStats()
    for value in calm(30):
        correct(value, state, CONFIG, stats)
    spike = bar(30, BASE, BASE * 103 // 100, BASE, BASE * 103 // 100)  # +3 %
    held = correct(spike, state, CONFIG, stats)
    assert held.outcomes == [] and held.clean == [] and state.held is not None
    step = correct(flat(31), state, CONFIG, stats)
    assert [o.status for o in step.outcomes] == [Status.REJECTED, Status.CLEAN]
    rejected = step.outcomes[0]
    assert rejected.value is spike and rejected.reason is Reason.SPIKE
    assert "close 1.133 moved +3.00% from the reference close 1.10005" in rejected.message
    assert "next bar did not confirm" in rejected.message
    assert [b["ts_event"] for b in step.clean] == [T0 + 30 * MINUTE, T0 + 31 * MINUTE]
    assert step.clean[0]["status"] == SYNTHETIC  # the rejected minute is filled
    assert (stats.held, stats.confirmed) == (1, 0)


def test_fast_market_level_shift_is_confirmed_by_the_next_bar() -> None:
    shifted = BASE * 103 // 100 // TICK * TICK
    values = [*calm(30), flat(30, shifted), flat(31, shifted + TICK), flat(32, shifted)]
    history = correct_history(values)
    assert statuses(history) == ["clean"] * 33
    assert (history.stats.held, history.stats.confirmed) == (1, 1)


def test_wick_that_its_own_close_follows_is_accepted_without_waiting() -> None:
    state, stats = SymbolState(), CorrectionStats()
    for value in calm(30):
        correct(value, state, CONFIG, stats)
    # Low 1.5 % down, close 0.46 % down (below the minimum move, yet 30 % of the way to the
    # low): the market really went there.
    wick = bar(30, BASE, BASE, BASE * 985 // 1000, BASE * 9955 // 10000)
    step = correct(wick, state, CONFIG, stats)
    assert [o.status for o in step.outcomes] == [Status.CLEAN]
    assert (stats.held, stats.confirmed) == (0, 1)


def test_bad_high_print_is_rejected() -> None:
    values = [*calm(30), bar(30, BASE, BASE * 105 // 100, BASE - TICK, BASE), flat(31)]
    assert only(correct_history(values), 30).reason is Reason.SPIKE


def test_moves_below_the_minimum_are_never_spikes() -> None:
    # 0.4 % in one minute against a one-tick history: z is huge, the move is ordinary.
    move = BASE * 1004 // 1000 // TICK * TICK
    history = correct_history([*calm(30), flat(30, move), flat(31)])
    assert statuses(history) == ["clean"] * 32 and history.stats.held == 0


def test_held_candidate_waits_for_the_timeout_then_is_rejected() -> None:
    state, stats = SymbolState(), CorrectionStats()
    for value in calm(30):
        correct(value, state, CONFIG, stats)
    correct(flat(30, BASE * 2), state, CONFIG, stats)
    assert flush(state, CONFIG, stats, until_ts=T0 + 31 * MINUTE).outcomes == []  # 60 s < 120 s
    step = flush(state, CONFIG, stats, until_ts=T0 + 32 * MINUTE)
    assert [o.reason for o in step.outcomes] == [Reason.SPIKE] and state.held is None
    assert "no later bar came before the timeout" in step.outcomes[0].message


def test_history_flushes_on_control_records_and_at_the_end() -> None:
    timeout = "no later bar came before the timeout"
    control = end_of_interval(T0 + 40 * MINUTE)
    flushed = correct_history([*calm(30), flat(30, BASE * 2), control, flat(41)]).outcomes
    assert statuses_of(flushed[-2:]) == ["rejected", "clean"] and timeout in flushed[-2].message
    ended = correct_history([*calm(30), flat(30, BASE * 2)]).outcomes
    assert ended[-1].reason is Reason.SPIKE and timeout in ended[-1].message


def test_bar_that_gives_no_prices_leaves_the_candidate_held() -> None:
    state, stats = SymbolState(), CorrectionStats()
    for value in calm(30):
        correct(value, state, CONFIG, stats)
    correct(flat(30, BASE * 2), state, CONFIG, stats)
    step = correct(bar(31, *(UNDEF_PRICE,) * 4), state, CONFIG, stats)
    assert [o.reason for o in step.outcomes] == [Reason.UNDEFINED_PRICE]
    assert state.held is not None


# --- duplicates and late bars ----------------------------------------------------------------


def test_identical_resend_is_a_duplicate_and_a_changed_one_conflicts() -> None:
    values = [flat(0), flat(1), flat(1), {**flat(1), "volume": 11}, flat(2)]
    history = correct_history(values)
    assert statuses(history) == ["clean", "clean", "duplicate", "rejected", "clean"]
    assert history.outcomes[3].reason is Reason.CONFLICTING_DUPLICATE
    assert len(history.clean) == 3


def test_duplicate_of_a_held_candidate_is_recognised() -> None:
    spike = flat(30, BASE * 2)
    history = correct_history([*calm(30), spike, dict(spike), flat(31)])
    assert [o.status for o in history.outcomes[-3:]] == [
        Status.DUPLICATE,
        Status.REJECTED,
        Status.CLEAN,
    ]


def test_earlier_bar_is_late_and_forgotten_keys_become_late() -> None:
    config = CorrectionConfig(recent_keys=2)
    history = correct_history([flat(0), flat(2), flat(1), flat(3), flat(0)], config)
    assert statuses(history) == ["clean", "clean", "rejected", "clean", "rejected"]
    assert [o.reason for o in history.outcomes if o.reason] == [Reason.LATE, Reason.LATE]
    assert "60 s before" in history.outcomes[2].message


# --- gaps ------------------------------------------------------------------------------------


def test_missing_minutes_are_reported_and_filled_with_flagged_flat_bars() -> None:
    history = correct_history([flat(0, BASE + TICK), flat(4)])
    assert history.gaps == [Gap("6EH4", T0, 3, True)]
    fills = history.clean[1:4]
    assert [b["ts_event"] for b in fills] == [T0 + m * MINUTE for m in (1, 2, 3)]
    price = BASE + TICK
    for fill in fills:
        assert fill["status"] == SYNTHETIC and fill["volume"] == 0 and fill["corrections"] == []
        assert (fill["open"], fill["high"], fill["low"], fill["close"]) == (price,) * 4
        assert fill["symbol"] == "6EH4" and fill["instrument_id"] == 42
    stats = history.stats
    assert (stats.total, stats.clean, stats.gaps, stats.gap_bars, stats.synthetic) == (
        2,
        2,
        1,
        3,
        3,
    )


@pytest.mark.parametrize(
    "config", [CorrectionConfig(fill_gaps=False), CorrectionConfig(max_fill=2)]
)
def test_gaps_are_reported_but_not_filled_when_off_or_too_long(config: CorrectionConfig) -> None:
    history = correct_history([flat(0), flat(4)], config)
    assert history.gaps == [Gap("6EH4", T0, 3, False)] and len(history.clean) == 2
    assert history.stats.synthetic == 0


# --- counters --------------------------------------------------------------------------------


def test_stats_count_every_rule_and_print_one_line() -> None:
    values = [flat(0), bar(1, BASE, BASE - TICK, BASE + TICK, BASE), flat(1), b"{", flat(3)]
    stats = correct_history(values).stats
    assert stats.as_dict() == {
        **dict.fromkeys(stats.as_dict(), 0),
        "clean": 2,
        "corrected": 1,
        "duplicate": 0,
        "rejected": 2,
        "corrected.envelope": 1,
        "rejected.conflicting_duplicate": 1,
        "rejected.malformed": 1,
        "gaps": 1,
        "gap_bars": 1,
        "synthetic": 1,
    }
    assert stats.summary() == (
        "bars=5 clean=2 corrected=1 (envelope=1) duplicate=0 "
        "rejected=2 (conflicting_duplicate=1 malformed=1) gaps=1 (1 bars, 1 filled) "
        "spike_held=0 spike_confirmed=0"
    )


# --- state -----------------------------------------------------------------------------------


@pytest.mark.parametrize("encode", [orjson.dumps, lambda v: orjson.dumps(v).decode(), dict])
def test_state_with_a_held_candidate_round_trips_and_continues_alike(encode: Any) -> None:
    state, stats = SymbolState(), CorrectionStats()
    for value in calm(30):
        correct(encode(value), state, CONFIG, stats, ref=["bars.raw", 0, 1])
    spike = encode(flat(30, BASE * 2))
    correct(spike, state, CONFIG, stats, ref=["bars.raw", 0, 30])
    restored = SymbolState.from_bytes(state.to_bytes())
    assert restored == state and restored.held is not None and restored.held.value == spike
    after = [correct(encode(flat(31)), s, CONFIG, CorrectionStats()) for s in (state, restored)]
    assert after[0] == after[1]
    assert after[1].outcomes[0].value == spike and after[1].outcomes[0].ref == ["bars.raw", 0, 30]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"garbage", "not a SymbolState document"),
        (b"[1]", "not a SymbolState document"),
        (b'{"v": 99}', "reset the corrections table"),
        (b'{"v": 1, "symbol": "6EH4"}', "damaged"),
    ],
)
def test_foreign_state_bytes_are_refused_with_a_way_out(data: bytes, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        SymbolState.from_bytes(data)


def test_unencodable_ref_is_named_when_saving_the_state() -> None:
    state = SymbolState()
    for value in calm(30):
        correct(value, state, CONFIG, CorrectionStats())
    correct(flat(30, BASE * 2), state, CONFIG, CorrectionStats(), ref=object())
    with pytest.raises(ValueError, match="must be JSON-serializable"):
        state.to_bytes()


def test_duplicate_digest_is_pinned() -> None:
    # Restarted workers compare digests written by earlier ones: the value must never drift.
    parsed = validate(flat(0), None, CONFIG)
    assert not isinstance(parsed, str)
    assert parsed.digest == -7869612097839798426
