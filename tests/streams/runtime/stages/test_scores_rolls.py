"""Scoring across rolls and outages: a label over minutes live ingest lost is unscored with reason
`outage`, and a roll rescales what a symbol's scoring state holds, in lockstep with its bars."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from model.covariates import NS_PER_MIN
from model.serving.forecast_engine import WindowRequest
from model.serving.scoring import LabelBar, score_all
from model.serving.scoring_state import SymbolScoring
from streams import schema
from streams.runtime.records import Control, FeatureRow, stage_control
from streams.runtime.stages.scores import Scores
from tests.streams.runtime.stages.test_scores import scoring
from tests.streams.runtime.test_stores import MemoryChangelogs

T = 1_705_500_000 * 10**9 // NS_PER_MIN * NS_PER_MIN
H = 3


def forecast(ts: int, close: float) -> dict[str, object]:
    q = [[-0.001] * H, [0.0] * H, [0.001] * H]
    names = ("q10", "q50", "q90")
    return {"symbol": "6E.c.0", "ts_event": ts, "close": close, "horizons": [1, 2, 3],
            "model_id": "m", **dict(zip(names, q, strict=True))}  # fmt: skip


def minute(k: int) -> int:
    return T + k * NS_PER_MIN


@pytest.mark.parametrize("lost", [False, True])
def test_a_label_over_an_outage_is_unscored_with_reason_outage(lost: bool) -> None:
    state = SymbolScoring()
    state.add_bar(LabelBar(minute(0), 1.0, False))
    state.add_forecast(forecast(minute(0), 1.0))
    state.add_bar(LabelBar(minute(1), 1.0, False))
    if lost:
        state.outage(minute(2), minute(3))
    [decided] = state.add_bar(LabelBar(minute(3), 1.0, False))
    [record] = score_all([decided])
    assert record["unscored"] == ("outage" if lost else "session_break")


def test_an_outage_no_forecast_can_reach_is_let_go_even_before_any_forecast() -> None:
    """A symbol not forecast yet holds its bars up to its retention; an outage older than them
    is let go (a forecast that old is late), one a forecast can still reach is kept."""
    state = SymbolScoring(retention=5)
    state.outage(minute(1), minute(2))
    state.outage(minute(8), minute(9))
    for k in (0, 2, 3, 4, 5, 6, 7, 9):
        state.add_bar(LabelBar(minute(k), 1.0, False))
    assert state.outages == [(minute(8), minute(9))]
    state.add_forecast(forecast(minute(7), 1.0))
    [decided] = state.add_bar(LabelBar(minute(10), 1.0, False))
    assert score_all([decided])[0]["unscored"] == "outage"


def test_outages_are_let_go_once_a_symbol_is_forecast_no_more() -> None:
    """Forecast once and then never again (its rows refused, say): the outages after it go
    once its bars leave the retention, as before any forecast."""
    state = SymbolScoring(retention=5)
    state.add_bar(LabelBar(minute(0), 1.0, False))
    state.add_forecast(forecast(minute(0), 1.0))
    for k in range(1, 40):
        if k % 10 == 5:
            state.outage(minute(k), minute(k + 1))
        else:
            state.add_bar(LabelBar(minute(k), 1.0, False))
    assert state.outages == [(minute(35), minute(36))] and not state.pending


def test_a_roll_rescales_the_closes_held_so_a_label_across_it_is_the_markets_move() -> None:
    """Old contract at 1.00 then 1.01; the new one trades 2 % over it: 1.0302 at minute 2."""
    state = SymbolScoring()
    state.add_bar(LabelBar(minute(0), 1.00, False))
    state.add_forecast(forecast(minute(0), 1.00))
    state.add_bar(LabelBar(minute(1), 1.01, False))
    state.roll(minute(2), 1.02)
    state.roll(minute(2), 1.02)  # the same roll again (re-published upstream): taken once
    assert state.pending[0].close == 1.02 and state.bars[minute(1)].close == 1.01 * 1.02
    state.add_bar(LabelBar(minute(2), 1.01 * 1.02, False))
    [decided] = state.add_bar(LabelBar(minute(3), 1.02 * 1.02, False))
    [record] = score_all([decided])
    assert record["realized"] == pytest.approx([np.log(1.01), np.log(1.01), np.log(1.02)])


def test_outages_and_the_last_roll_survive_a_restore_and_states_from_before_read() -> None:
    state = SymbolScoring()
    state.add_bar(LabelBar(minute(0), 1.0, False))
    state.add_forecast(forecast(minute(0), 1.0))
    state.outage(minute(1), minute(2))
    state.roll(minute(1), 1.5)
    again = SymbolScoring.from_bytes(state.to_bytes())
    assert again == state and (again.outages, again.rolled_at) == (
        [(minute(1), minute(2))],
        minute(1),
    )
    data = state.to_bytes()
    size = struct.unpack_from("<I", data, 1)[0]
    header = orjson.loads(data[5 : 5 + size])
    del header["outages"], header["rolled_at"]
    older = orjson.dumps(header)
    before = SymbolScoring.from_bytes(
        data[:1] + struct.pack("<I", len(older)) + older + data[5 + size :]
    )
    assert (before.outages, before.rolled_at, before.pending) == ([], None, state.pending)


def row(ts: int, close: float, offset: int) -> FeatureRow:
    return FeatureRow(b"6E.c.0", 0, offset, 0.0, None, "6E.c.0", ts, close, False, True,
                      np.zeros(0), "f")  # fmt: skip


def request(item: FeatureRow) -> WindowRequest:
    return WindowRequest("6E.c.0", item.key, 0, 1, np.zeros(0), item.ts_event, item.close, 0)


def outage_control(start: int, end: int, offset: int) -> Control:
    value = schema.outage(start, end)
    return Control("features", 0, offset, start / 1e6, schema.CONTROL_KEY, schema.encode(value),
                   schema.CONTROL_HEADERS, start, value)  # fmt: skip


def test_the_stage_applies_a_roll_after_a_forecast_still_in_the_model() -> None:
    """The forecast of minute 0 comes after the roll record: the stage holds the roll back
    until that forecast is in the state, so its close is rescaled with the bars'; an outage
    goes to the states of its partition in its place among the bars."""
    stage, out = scoring(MemoryChangelogs()), Scores()
    first = row(minute(0), 1.00, 0)
    stage.bar(first, request(first), None)
    stage.bar(row(minute(1), 1.01, 1), None, None)
    roll = schema.roll(minute(2), "6E.c.0", "6EH4", "6EM4", 1.02)
    stage.control(stage_control("features", 0, 2, b"6E.c.0", roll))
    stage.forecasts([request(first)], [forecast(minute(0), 1.00)], None, out)
    stage.bar(row(minute(2), 1.01 * 1.02, 3), None, None)
    stage.bar(row(minute(3), 1.02 * 1.02, 4), None, None)
    stage.control(outage_control(minute(4), minute(6), 5))
    stage.settle(out)
    [record] = out.values
    assert record["realized"] == pytest.approx([np.log(1.01), np.log(1.01), np.log(1.02)])
    state = stage.scores.read(b"6E.c.0")
    assert (state.rolled_at, state.outages) == (minute(2), [(minute(4), minute(6))])


def test_a_bar_of_the_minute_an_outage_ends_in_is_scored_in_its_place() -> None:
    """A gateway that skipped records of a slow reader resumed within minute 2: the outage
    [minute 1, minute 3) comes before that minute's bar. The bar, and then its forecast, go
    into the states at once, each stamped with its own offset, not the outage's."""
    stage, out = scoring(MemoryChangelogs()), Scores()
    first = row(minute(0), 1.0, 0)
    stage.bar(first, request(first), None)
    stage.forecasts([request(first)], [forecast(minute(0), 1.0)], None, out)
    stage.settle(out)
    stage.control(outage_control(minute(1), minute(3), 1))
    resumed = row(minute(2), 1.0, 2)
    stage.bar(resumed, request(resumed), None)
    stage.forecasts([request(resumed)], [forecast(minute(2), 1.0)], None, out)
    assert stage.calibrations.changed.get(b"6E.c.0") == (0, 2)
    stage.settle(out)
    state = stage.scores.read(b"6E.c.0")
    assert (state.last_forecast_ts, state.outages) == (minute(2), [(minute(1), minute(3))])
