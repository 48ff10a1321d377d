"""Scoring and online calibration in the forecast stage (streams.forecast.scoring, scoring_state,
conformal): stores keyed by symbol; the score records go to `forecasts.scores`. A symbol's bars
and forecasts meet its states in lockstep, as `calibrate_offline` replays them (bar t, the
forecast of t, bar t + 1): a bar waits in memory while an earlier forecast is in the model. So
however far the model lags (a take() batch may hold thousands of one symbol's rows, past the
retention), the states are a function of the bars and forecasts alone. A checkpoint drains the
forecaster: nothing waits then, each write is tagged with its own row's offset, and a replay
from a mark publishes the same again.

Forecasts are decided as their bars come and scored together (`score_decided`) once the rows in hand
are all in (`settle`: the forecaster calls it while the model runs, streams.runtime.forecaster),
or before a forecast of a symbol with decided ones waiting is calibrated, so that a symbol's
calibration sees its scores in the order they were decided.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streams.forecast.conformal import CalibrationConfig, SymbolCalibration
from streams.forecast.engine import WindowRequest
from streams.forecast.scoring import Decided, LabelBar, ScoreValue, encode_score, score_decided
from streams.forecast.scoring_state import SymbolScoring, pooled_figures
from streams.runtime.records import FeatureRow, Out
from streams.runtime.stores import StateStore
from streams.schema import BAR_HEADERS

Add = Callable[[SymbolScoring], list[Decided]]


@dataclass(slots=True)
class Scores:  # score records in the order they were decided, and the records publishing them
    values: list[ScoreValue] = field(default_factory=list)
    outputs: list[Out] = field(default_factory=list)


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
        self.applied: dict[bytes, int] = {}  # key -> offset of its last bar applied (a forecast's)
        self.waiting: dict[bytes, deque[tuple[FeatureRow, bool]]] = {}  # bars behind a forecast
        self.decided: list[tuple[bytes, int, int, Decided]] = []  # key, partition, offset: to score
        self.unsettled: set[bytes] = set()  # keys in `decided`

    def bar(self, row: FeatureRow, requested: bool) -> None:
        """A row's bar (`requested`: its forecast is on its way) in, or waiting its turn; what
        it decides is scored by the next `settle`."""
        if not self.enabled:
            return
        waiting = self.waiting.get(row.key)
        if waiting is not None:
            waiting.append((row, requested))
            return
        self._apply(row)
        if requested:
            self.waiting[row.key] = deque()

    def forecasts(
        self, batch: Sequence[WindowRequest], values: Sequence[dict[str, Any]], out: Scores
    ) -> list[dict[str, Any]]:
        """A micro-batch's forecasts calibrated (if enabled), to publish; each then pending in its
        symbol's scoring state, and the bars that waited for it applied."""
        if not self.enabled:
            return list(values)
        calibrated = [self._forecast(r, v, out) for r, v in zip(batch, values, strict=True)]
        self.settle(out)
        return calibrated

    def settle(self, out: Scores) -> None:
        """Score what was decided, into the rolling figures and the calibrations, and `out`."""
        if not self.decided:
            return
        decided, self.decided = self.decided, []
        self.unsettled.clear()
        scores = score_decided([d for *_, d in decided])
        for (key, partition, offset, _), (record, increments) in zip(decided, scores, strict=True):
            # The state was written when it decided, and a checkpoint settles before encoding.
            self.scores.states[key].rolling.add(record, increments)
            calibration = self.calibrations.read(key, partition)
            calibration.update(record)
            if self.config.enabled:
                self.calibrations.write(key, partition, offset, calibration)
            out.values.append(record)
            value, ms = encode_score(record), record["ts_event"] / 1e6
            out.outputs.append(Out(self.topic, key, value, ms, BAR_HEADERS, partition))

    def _apply(self, row: FeatureRow) -> None:
        self.applied[row.key] = row.offset
        bar = LabelBar(row.ts_event, row.close, row.synthetic)
        self._scored(row.key, row.partition, row.offset, lambda state: state.add_bar(bar))

    def _forecast(
        self, request: WindowRequest, value: dict[str, Any], out: Scores
    ) -> dict[str, Any]:
        key, partition, offset = request.key, request.partition, self.applied[request.key]
        if key in self.unsettled:
            self.settle(out)
        calibration = self.calibrations.read(key, partition)
        value = calibration.apply(value, self.config)
        if self.config.enabled:
            self.calibrations.write(key, partition, offset, calibration)
        self._scored(key, partition, offset, lambda state: state.add_forecast(value))
        self._release(key)
        return value

    def _release(self, key: bytes) -> None:  # bars up to the next requested one
        waiting = self.waiting.pop(key, deque())
        while waiting:
            row, requested = waiting.popleft()
            self._apply(row)
            if requested:
                self.waiting[key] = waiting
                return

    def figures(self) -> dict[tuple[int, str], float]:
        """Rolling coverage and pinball per horizon over the symbols this worker holds."""
        return pooled_figures([state.rolling for state in self.scores.states.values()])

    def _scored(self, key: bytes, partition: int, offset: int, add: Add) -> None:
        """`add` on the symbol's scoring state; what it decides, to `settle`."""
        state = self.scores.read(key, partition)
        decided = add(state)
        self.scores.write(key, partition, offset, state)
        if decided:
            self.decided += [(key, partition, offset, d) for d in decided]
            self.unsettled.add(key)
