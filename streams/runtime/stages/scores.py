"""Scoring and online calibration in the forecast stage (model.serving.scoring, scoring_state,
conformal): stores keyed by symbol; the score records go to `forecasts.scores`. A symbol's bars
and forecasts meet its scoring state in lockstep, as `calibrate_offline` replays them (bar t,
the forecast of t, bar t + 1): a bar waits in memory until the forecast of every earlier bar is
calibrated. So however far the model lags (a take() batch may hold thousands of one symbol's
rows, past the retention), the states are a function of the bars and forecasts alone.

Scoring runs in the quiet (`settle`: the checkpoint's drain, after the flush's forecasts):
nothing of it stands between a bar and its forecast. At a minute boundary every symbol's bar
comes at once, and its forecast is calibrated with the scores that bars before it decided (the
calibrator's rule, model.serving.conformal), so the bar only waits; the scores it decides,
their rolling figures and records follow once the minute's forecasts are out. Only a symbol
whose earlier bars still wait (a replay running ahead of the quiet) is advanced before its
forecast is calibrated. A checkpoint drains the forecaster and settles: nothing waits then, each
write is tagged with its own row's offset, and a replay from a mark publishes the same again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from model.serving.conformal import CalibrationConfig, SymbolCalibration
from model.serving.forecast_engine import WindowRequest
from model.serving.scoring import Decided, LabelBar, ScoreValue, encode_score, score_decided
from model.serving.scoring_state import SymbolScoring, pooled_figures
from streams.runtime.records import Control, FeatureRow, Out
from streams.runtime.stores import StateStore
from streams.schema import BAR_HEADERS, ControlKind, ControlRecord


@dataclass(slots=True)
class Scores:  # score records in the order they were decided, and the records publishing them
    values: list[ScoreValue] = field(default_factory=list)
    outputs: list[Out] = field(default_factory=list)


class WaitingBar(NamedTuple):
    """A bar not yet in its symbol's scoring state; `requested`: its forecast is to come. Or,
    with `control`, a ROLL or OUTAGE record for the state, in its place among the bars (its
    `bar` only orders it: just before the first bar it concerns)."""

    bar: LabelBar
    partition: int
    offset: int
    requested: bool
    control: ControlRecord | None = None


class Scoring:
    def __init__(
        self,
        scores: StateStore[SymbolScoring],
        calibrations: StateStore[SymbolCalibration],
        config: CalibrationConfig,
        topic: str,
        enabled: bool = True,  # False (BARCAST_ONLINE_SCORING): forecasts pass untouched
    ) -> None:
        self.scores, self.calibrations, self.config = scores, calibrations, config
        self.topic, self.enabled = topic, enabled
        self.stores: list[StateStore] = [scores, calibrations] if enabled else []
        self.waiting: dict[bytes, deque[WaitingBar]] = {}  # bars not applied yet, in order
        self.calibrated: dict[bytes, deque[dict[str, Any]]] = {}  # forecasts of waiting bars
        self.decided: list[tuple[bytes, int, int, Decided]] = []  # key, partition, offset: to score
        self.unsettled: set[bytes] = set()  # keys in `decided`

    def bar(self, row: FeatureRow, requested: bool) -> None:
        """A row's bar (`requested`: its forecast is on its way), to wait until the next
        `settle`, or a later forecast of its symbol, applies it."""
        if self.enabled:
            bar = LabelBar(row.ts_event, row.close, row.synthetic)
            waiting = WaitingBar(bar, row.partition, row.offset, requested)
            self.waiting.setdefault(row.key, deque()).append(waiting)

    def control(self, control: Control) -> None:
        """A ROLL for its symbol's state, or an OUTAGE for those of its partition, to apply in
        lockstep with their bars: after the bars before it, before those after."""
        if not self.enabled:
            return
        partition, decoded = control.partition, control.decoded
        if control.kind == ControlKind.ROLL:
            keys, before = {decoded["symbol"].encode()}, control.ts_event
        elif control.kind == ControlKind.OUTAGE:
            waiting = {k for k, bars in self.waiting.items() if bars[-1].partition == partition}
            keys, before = set(self.scores.keys_in(partition)) | waiting, decoded["end"]
        else:
            return
        marker = LabelBar(before - 1, 0.0, False)
        for key in sorted(keys):
            entry = WaitingBar(marker, partition, control.offset, False, decoded)
            self.waiting.setdefault(key, deque()).append(entry)

    def forecasts(
        self, batch: Sequence[WindowRequest], values: Sequence[dict[str, Any]], out: Scores
    ) -> list[dict[str, Any]]:
        """A micro-batch's forecasts calibrated (if enabled), to publish; each then waits with
        its bar for the next `settle` (scores some symbols' earlier bars decide go to `out`)."""
        if not self.enabled:
            return list(values)
        for request in batch:  # a replay's earlier bars, to score together before calibrating
            self._advance(request.key, request.ts_event)
        return [self._forecast(r, v, out) for r, v in zip(batch, values, strict=True)]

    def settle(self, out: Scores) -> None:
        """Every waiting bar and calibrated forecast into the scoring states (a bar whose
        forecast is still in the model waits on), and what they decide scored into `out`."""
        for key in list(self.waiting):
            self._advance(key, None)
        self._score(out)

    def _forecast(
        self, request: WindowRequest, value: dict[str, Any], out: Scores
    ) -> dict[str, Any]:
        key, partition = request.key, request.partition
        self._advance(key, request.ts_event)
        if key in self.unsettled:
            self._score(out)  # the calibration needs what its symbol's earlier bars decided
        offset = self.waiting[key][0].offset  # the row of this forecast, next to apply
        calibration = self.calibrations.read(key)
        value = calibration.apply(value, self.config)
        if self.config.enabled:
            self.calibrations.write(key, partition, offset, calibration)
        self.calibrated.setdefault(key, deque()).append(value)
        return value

    def _advance(self, key: bytes, before: int | None) -> None:
        """The symbol's waiting bars (those before ts `before`; None: all) and the calibrated
        forecasts of those that requested one into its scoring state, in lockstep."""
        waiting, calibrated = self.waiting[key], self.calibrated.get(key)
        while waiting and (before is None or waiting[0].bar.ts_event < before):
            bar, partition, offset, requested, control = waiting[0]
            if requested and not calibrated:
                break  # its forecast is still in the model
            waiting.popleft()
            state = self.scores.read(key)
            if control is not None:
                take(state, control)
                self.scores.write(key, partition, offset, state)
                continue
            decided = state.add_bar(bar)
            if requested:
                decided += state.add_forecast(calibrated.popleft())  # type: ignore[union-attr]
            self.scores.write(key, partition, offset, state)
            if decided:
                self.decided += [(key, partition, offset, d) for d in decided]
                self.unsettled.add(key)
        if not waiting:
            del self.waiting[key]
            self.calibrated.pop(key, None)

    def _score(self, out: Scores) -> None:
        """Score what was decided, into the rolling figures and the calibrations, and `out`."""
        if not self.decided:
            return
        decided, self.decided = self.decided, []
        self.unsettled.clear()
        scores = score_decided([d for *_, d in decided])
        for (key, partition, offset, _), (record, increments) in zip(decided, scores, strict=True):
            # The state was written when it decided, and a checkpoint settles before encoding.
            self.scores.states[key].rolling.add(record, increments)
            calibration = self.calibrations.read(key)
            calibration.update(record)
            if self.config.enabled:
                self.calibrations.write(key, partition, offset, calibration)
            out.values.append(record)
            value, ms = encode_score(record), record["ts_event"] / 1e6
            out.outputs.append(Out(self.topic, key, value, ms, BAR_HEADERS, partition))

    def figures(self) -> dict[tuple[int, str], float]:
        """Rolling coverage and pinball per horizon over the symbols this worker holds."""
        return pooled_figures([state.rolling for state in self.scores.states.values()])


def take(state: SymbolScoring, control: ControlRecord) -> None:
    """A ROLL or OUTAGE record into a symbol's scoring state."""
    if control["control"] == ControlKind.ROLL:
        state.roll(control["ts_event"], control["ratio"])
    else:
        state.outage(control["ts_event"], control["end"])
