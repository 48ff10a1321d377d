"""Rolls and outages in the corrections rules: a symbol's state carried over to its next contract
at the ratio of their prices, and no gap fill across minutes live ingest lost."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from features.bars import UNDEF_PRICE
from features.corrections import (
    CorrectionStats,
    Status,
    Step,
    SymbolState,
    correct,
    correct_history,
    expect_roll,
    outage,
)
from streams import schema
from tests.correction_bars import BASE, CONFIG, MINUTE, T0, TICK, bar, calm, flat

SPREAD = 1.02  # larger than the spike rule's 0.5 %: unrolled, the first new bar is a candidate


def new_contract(minute: int, price: int, **fields: Any) -> dict[str, Any]:
    return flat(minute, price, raw_symbol="6EM4", **fields)


def run(
    bars: list[dict[str, Any]], state: SymbolState | None = None
) -> tuple[list[Step], SymbolState]:
    state, stats = state or SymbolState(), CorrectionStats()
    return [correct(orjson.dumps(b), state, CONFIG, stats) for b in bars], state


def old_contract(n: int) -> list[dict[str, Any]]:
    return [{**b, "raw_symbol": "6EH4"} for b in calm(n)]


def test_a_new_contract_at_the_announced_ratio_is_no_spike_and_no_return() -> None:
    _, state = run(old_contract(80))
    close = state.last["close"]  # type: ignore[index]
    expect_roll(state, "6EM4", SPREAD)
    first = round(close * SPREAD)
    steps, state = run([new_contract(80, first)], state)
    [step] = steps
    assert [o.status for o in step.outcomes] == [Status.CLEAN] and state.held is None
    assert step.roll is not None and (step.roll.old, step.roll.new) == ("6EH4", "6EM4")
    assert (step.roll.ratio, step.roll.at, step.roll.ts) == (SPREAD, 0, T0 + 80 * MINUTE)
    assert step.clean[0]["raw_symbol"] == "6EM4" and step.clean[0]["status"] == "clean"
    assert abs(state.returns[-1]) < 1e-9, "the calendar spread is no return"
    assert state.roll is None


def test_a_new_contract_opening_below_zero_rolls_at_one() -> None:
    """A product that may trade below 0 (CL in April 2020): no ratio of a negative open, which
    the workers would refuse (a roll's ratio is above 0)."""
    config = replace(CONFIG, allow_negative=frozenset({"6EH4"}))
    state, stats = SymbolState(), CorrectionStats()
    for b in old_contract(80):
        correct(orjson.dumps(b), state, config, stats)
    step = correct(orjson.dumps(new_contract(80, -BASE)), state, config, stats)
    assert step.roll is not None and step.roll.ratio == 1.0


def test_without_an_announcement_the_ratio_is_the_new_open_over_the_last_close() -> None:
    _, state = run(old_contract(80))
    close = state.last["close"]  # type: ignore[index]
    first = round(close * SPREAD)
    [step], state = run([new_contract(80, first)], state)
    assert step.roll is not None and step.roll.ratio == first / close
    assert state.held is None and step.clean[0]["status"] == "clean"


@pytest.mark.parametrize("fault", ["scaled", "undefined"])
def test_an_unannounced_ratio_is_of_the_new_open_once_repaired(fault: str) -> None:
    """The new contract's first open slipped tenfold, or its open and close undefined: the
    ratio is of the repaired open (not 10, which would have corrected every later bar tenfold;
    not an error out of `correct`, which stalled the partition on the record)."""
    _, state = run(old_contract(80))
    close = state.last["close"]  # type: ignore[index]
    first = round(close * SPREAD)
    if fault == "scaled":
        bad = new_contract(80, first, open=first * 10)
    else:
        # open and close derive from high == low
        bad = bar(80, UNDEF_PRICE, first, first, UNDEF_PRICE, raw_symbol="6EM4")
    steps, state = run([bad, new_contract(81, first)], state)
    roll = steps[0].roll
    assert roll is not None and roll.ratio == pytest.approx(SPREAD, rel=1e-3)
    assert [o.status for o in steps[0].outcomes] == [Status.CORRECTED]
    assert steps[1].clean[0]["status"] == "clean" and steps[1].clean[0]["close"] == first


def test_unrolled_the_same_bar_is_a_spike_candidate() -> None:
    """Without a raw symbol the rules cannot tell a roll: the spread looks like a move (the
    test above can fail)."""
    _, state = run(calm(80))
    [step], state = run([flat(80, round(state.last["close"] * SPREAD))], state)  # type: ignore[index]
    assert state.held is not None and step.roll is None


def test_a_candidate_held_at_the_roll_is_decided_in_the_old_contracts_prices() -> None:
    """The last old bar jumps 1 % and stays there: the new contract's first bar, brought back
    to the old contract's prices, confirms it."""
    bars = old_contract(80)
    jump = BASE + 220 * TICK
    bars.append({**bar(80, BASE, jump, BASE, jump), "raw_symbol": "6EH4"})
    _, state = run(bars)
    assert state.held is not None
    expect_roll(state, "6EM4", SPREAD)
    [step], state = run([new_contract(81, round(jump * SPREAD))], state)
    assert [o.status for o in step.outcomes] == [Status.CLEAN, Status.CLEAN], "both accepted"
    assert [b["raw_symbol"] for b in step.clean] == ["6EH4", "6EM4"] and step.roll.at == 1  # type: ignore[union-attr]
    assert step.clean[1]["close"] == round(jump * SPREAD)
    assert state.last["close"] == round(jump * SPREAD)  # type: ignore[index]


def test_a_roll_announced_for_another_contract_is_not_taken() -> None:
    _, state = run(old_contract(80))
    close = state.last["close"]  # type: ignore[index]
    expect_roll(state, "6EU4", 1.5)
    [step], state = run([new_contract(80, round(close * SPREAD))], state)
    assert step.roll is not None and step.roll.ratio == round(close * SPREAD) / close


@pytest.mark.parametrize("lost", [False, True])
def test_a_gap_over_an_outage_is_a_session_break(lost: bool) -> None:
    _, state = run(calm(40))
    if lost:
        outage(state, T0 + 45 * MINUTE)
    [step], state = run([flat(50, BASE)], state)
    assert [g.filled for g in step.gaps] == [not lost]
    assert len(step.clean) == (1 if lost else 11)
    [step], state = run([flat(53, BASE)], state)
    assert [g.filled for g in step.gaps] == [True], "a gap after the outage is filled again"


def test_the_state_keeps_its_outage_and_announced_roll_and_reads_one_from_before() -> None:
    _, state = run(old_contract(3))
    outage(state, T0 + 9 * MINUTE)
    expect_roll(state, "6EM4", SPREAD)
    again = SymbolState.from_bytes(state.to_bytes())
    assert (again.outage_until, again.roll) == (T0 + 9 * MINUTE, ("6EM4", SPREAD))
    before = orjson.loads(state.to_bytes())
    del before["outage"], before["roll"]
    older = SymbolState.from_bytes(orjson.dumps(before))
    assert (older.outage_until, older.roll, older.last) == (0, None, state.last)


def test_a_raw_symbol_rides_into_bars_clean_and_a_bad_one_is_malformed() -> None:
    [step], _ = run([{**flat(0), "raw_symbol": "6EH4", "extra": 1}])
    assert list(step.clean[0])[:3] == ["instrument_id", "symbol", "raw_symbol"]
    assert "extra" not in step.clean[0]
    [step], _ = run([{**flat(0), "raw_symbol": 7}])
    assert step.outcomes[0].reason.value == "malformed"  # type: ignore[union-attr]
    assert "raw_symbol" in step.outcomes[0].message


def test_a_history_takes_outages_and_announced_rolls_as_the_agent_does() -> None:
    """`correct_history` (the offline reference and backtests) with control records among the
    bars: no gap fill across an outage, and a new contract at the announced ratio."""
    bars = old_contract(40)
    close = orjson.loads(orjson.dumps(bars[-1]))["close"]
    first = round(close * SPREAD)
    controls = [
        schema.encode(schema.outage(T0 + 41 * MINUTE, T0 + 45 * MINUTE)),
        schema.encode(schema.roll(T0 + 50 * MINUTE, "6EH4", "6EH4", "6EM4", SPREAD)),
    ]
    # it opens 3 ticks off the spread: a roll no record announced would take that as the ratio
    opened_away = bar(
        51, first + 3 * TICK, first + 4 * TICK, first - TICK, first, raw_symbol="6EM4"
    )
    history = correct_history([*bars, controls[0], flat(50, close, raw_symbol="6EH4"),
                               controls[1], opened_away])  # fmt: skip
    assert [g.filled for g in history.gaps] == [False], "the gap over the outage"
    rolled = [b for b in history.clean if b["raw_symbol"] == "6EM4"]
    assert [b["close"] for b in rolled] == [first] and history.stats.rolls == 1
    assert abs(history.states["6EH4"].returns[-1]) < 1e-9, "at the announced ratio: no return"
