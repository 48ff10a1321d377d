"""Each corrections rule on hand-made bars: what it must change, and what it must leave alone.

One bar at a time; spikes, duplicates, gaps, counters and state are in
test_corrections_sequences.py.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from features.bars import UNDEF_PRICE
from features.corrections import (
    Change,
    CorrectionConfig,
    CorrectionStats,
    Reason,
    Rule,
    Status,
    SymbolState,
    correct,
    correct_history,
)
from streams.schema import end_of_interval
from tests.correction_bars import (
    BASE,
    CONFIG,
    T0,
    TICK,
    bar,
    calm,
    flat,
    only,
    statuses,
)

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
        ({**flat(0), "symbol": "ES\0\1"}, "NUL character"),
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


def test_a_symbol_with_a_dash_is_no_spread_unless_its_legs_are_contracts() -> None:
    """BTC-PERP is a perpetual: a negative price of it is a fault, not a spread's."""
    assert CONFIG.allows_negative("ESZ24-ESH25") and CONFIG.allows_negative("CLF5-CLG5-CLH5")
    values = [bar(0, -TICK, TICK, -2 * TICK, 0, symbol="BTC-PERP")]
    assert statuses(correct_history(values, CONFIG)) == ["rejected"]


def test_symbol_no_longer_allowed_negative_is_judged_without_its_negative_reference() -> None:
    allowed = CorrectionConfig(allow_negative=frozenset({"6EH4"}))
    state, stats = SymbolState(), CorrectionStats()
    correct(flat(0, -TICK), state, allowed, stats)
    step = correct(flat(1, BASE), state, CONFIG, stats)  # the allowance was removed
    assert [o.status for o in step.outcomes] == [Status.CLEAN]


def test_allow_negative_must_be_a_set() -> None:
    with pytest.raises(ValueError, match=r"frozenset\(\{'ESH4-ESM4'\}\)"):
        CorrectionConfig(allow_negative="ESH4-ESM4")  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [("spike_z", 0), ("spike_min_move", 0.0)])
def test_invalid_thresholds_name_the_field(field: str, value: float) -> None:
    """A minimum move of 0 would make a price at the reference close a move to confirm, which
    the confirmation divides by."""
    with pytest.raises(ValueError, match=f"{field}={value!r}"):
        CorrectionConfig(**{field: value})


@pytest.mark.parametrize("first", [[BASE] * 4, [BASE, BASE + TICK, BASE, BASE + TICK]])
def test_a_spike_after_a_flat_first_bar_is_rejected(first: list[int]) -> None:
    """The tick learned from a flat first bar is its price (the gcd of its prices): as the
    scale's floor it would let a 50 % print pass as clean."""
    spike = BASE * 3 // 2
    history = correct_history(
        [bar(0, *first), bar(1, BASE, spike, BASE, spike), bar(2, *[BASE] * 4)]
    )
    assert [(o.status, o.reason) for o in history.outcomes] == [
        (Status.CLEAN, None),
        (Status.REJECTED, Reason.SPIKE),
        (Status.CLEAN, None),
    ]


def test_a_coarse_real_tick_stays_the_floor() -> None:
    """Corn at 400 cents trades in quarters, 6 bp: a wick of nine ticks in a quiet market is
    under ten ticks, an ordinary bar, though it passes the minimum move."""
    price, tick = 400_000_000_000, 250_000_000
    bars = [bar(0, price, price + tick, price, price)]  # the tick learned: one quarter
    bars += [bar(m, *[price] * 4) for m in range(1, 61)]
    bars += [bar(61, price, price + 9 * tick, price, price), bar(62, *[price] * 4)]
    assert {o.status for o in correct_history(bars).outcomes} == {Status.CLEAN}


# --- fixed-point scale errors ----------------------------------------------------------------


@pytest.mark.parametrize("first", [[BASE + 7 * TICK] * 4, [BASE + 7 * TICK, BASE + 8 * TICK] * 2])
def test_a_close_that_lost_digits_after_a_flat_first_bar_is_refused(first: list[int]) -> None:
    """The tick learned from a flat first bar is its price: a close divided by 10^6 that lost
    seven ticks would be restored against it, seven ticks off, not refused."""
    price = BASE + 7 * TICK
    bars = [bar(0, *first), bar(1, price, price, price - TICK, price // 10**6)]
    outcome = correct_history(bars).outcomes[1]
    assert (outcome.status, outcome.reason) == (Status.REJECTED, Reason.SCALE_ERROR)


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
