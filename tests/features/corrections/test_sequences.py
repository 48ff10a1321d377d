"""Corrections rules that need a sequence of hand-made bars: spikes held for the next bar,
duplicates and late bars, gaps, the counters, and the per-symbol state across a save.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from features.bars import UNDEF_PRICE
from features.corrections import (
    SYNTHETIC,
    CorrectionConfig,
    CorrectionStats,
    Gap,
    Reason,
    Status,
    SymbolState,
    correct,
    correct_history,
    flush,
)
from features.corrections.parse import validate
from streams.schema import end_of_interval
from tests.correction_bars import (
    BASE,
    CONFIG,
    MINUTE,
    T0,
    TICK,
    bar,
    calm,
    flat,
    only,
    statuses,
    statuses_of,
)

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


def test_a_thin_markets_move_stands_from_its_second_bar() -> None:
    """Bars ten minutes apart, past the hold timeout: the first at a new level is rejected at
    its timeout; the next at that level is confirmed by it and the ones after are accepted. A
    timed-out bad print is no evidence once the market traded back at the old level."""
    shifted = BASE * 103 // 100 // TICK * TICK
    values: list[Any] = list(calm(30))
    for k, price in enumerate([shifted, shifted + TICK, shifted, shifted - TICK]):
        values += [flat(30 + 10 * k, price), end_of_interval(T0 + (35 + 10 * k) * MINUTE)]
    history = correct_history(values)
    real = [o for o in history.outcomes if o.value is not None and isinstance(o.value, dict)]
    assert statuses_of(real[30:]) == ["rejected", "clean", "clean", "clean"]
    assert (history.stats.held, history.stats.confirmed) == (1, 1)  # the second not held
    state, stats = SymbolState(), CorrectionStats()  # the evidence is kept with the state
    for value in values[:31]:
        correct(value, state, CONFIG, stats)
    flush(state, CONFIG, stats, until_ts=T0 + 35 * MINUTE)
    assert state.unconfirmed is not None and SymbolState.from_bytes(state.to_bytes()) == state
    reverted = [*calm(30), flat(30, shifted), end_of_interval(T0 + 35 * MINUTE), flat(40)]
    reverted += [flat(50, shifted), end_of_interval(T0 + 55 * MINUTE)]
    outcomes = correct_history(reverted).outcomes
    assert statuses_of([o for o in outcomes if isinstance(o.value, dict)][30:]) == [
        "rejected", "clean", "rejected"
    ]  # fmt: skip


def test_history_flushes_on_control_records_and_at_the_end() -> None:
    timeout = "no later bar came before the timeout"
    control = end_of_interval(T0 + 40 * MINUTE)
    flushed = correct_history([*calm(30), flat(30, BASE * 2), control, flat(41)]).outcomes
    assert statuses_of(flushed[-2:]) == ["rejected", "clean"] and timeout in flushed[-2].message
    ended = correct_history([*calm(30), flat(30, BASE * 2)]).outcomes
    assert ended[-1].reason is Reason.SPIKE and timeout in ended[-1].message


def test_a_history_rejects_a_control_record_the_stage_would_not_take() -> None:
    """Of an unknown kind, an OUTAGE without its end, a ROLL without its contracts: each one
    outcome, rejected malformed, as the stage decodes them (streams.schema.decode_control);
    none raises or passes for END_OF_INTERVAL."""
    bad = [
        {"control": "bogus", "ts_event": T0},
        {"control": "outage", "ts_event": T0},
        {"control": "roll", "ts_event": T0, "symbol": "6EH4"},
        {"control": [], "ts_event": T0},
    ]
    outcomes = correct_history([*calm(3), *bad]).outcomes
    assert statuses_of(outcomes) == ["clean"] * 3 + ["rejected"] * 4
    assert {o.reason for o in outcomes[3:]} == {Reason.MALFORMED}
    assert all("malformed control record: a control record is" in o.message for o in outcomes[3:])


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
        "spike_held=0 spike_confirmed=0 rolls=0"
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
        (b'{"v": 99}', "under a new BARCAST_APP_ID"),
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
