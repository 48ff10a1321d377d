"""Scoring and online calibration in the forecast stage (streams.forecast.scoring, conformal):
stores keyed by symbol; the score records go to `forecasts.scores`. A symbol's bars and
forecasts meet its states in lockstep, as `calibrate_offline` replays them (bar t, the forecast
of t, bar t + 1): a bar waits in memory while an earlier forecast is in the model. So however far
the model lags (a take() batch may hold thousands of one symbol's rows, past the retention), the
states are a function of the bars and forecasts alone. A checkpoint drains the forecaster: nothing
waits then, each write is tagged with its own row's offset, and a replay from a mark publishes the
same again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streams.forecast.conformal import CalibrationConfig, SymbolCalibration
from streams.forecast.engine import WindowRequest
from streams.forecast.scoring import (
    LabelBar,
    ScoreValue,
    SymbolScoring,
    encode_score,
    pooled_figures,
)
from streams.runtime.records import FeatureRow, Out
from streams.runtime.stores import StateStore
from streams.schema import BAR_HEADERS

Add = Callable[[SymbolScoring], list[ScoreValue]]


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

    def bar(self, row: FeatureRow, requested: bool, out: Scores) -> None:
        """A row's bar (`requested`: its forecast is on its way) in, or waiting its turn."""
        if not self.enabled:
            return
        waiting = self.waiting.get(row.key)
        if waiting is not None:
            waiting.append((row, requested))
            return
        self._apply(row, out)
        if requested:
            self.waiting[row.key] = deque()

    def forecasts(
        self, batch: Sequence[WindowRequest], values: Sequence[dict[str, Any]], out: Scores
    ) -> list[dict[str, Any]]:
        """A micro-batch's forecasts calibrated (if enabled), to publish; each then pending in its
        symbol's scoring state, and the bars that waited for it applied."""
        if not self.enabled:
            return list(values)
        return [self._forecast(r, value, out) for r, value in zip(batch, values, strict=True)]

    def _apply(self, row: FeatureRow, out: Scores) -> None:
        self.applied[row.key] = row.offset
        bar = LabelBar(row.ts_event, row.close, row.synthetic)
        self._scored(row.key, row.partition, row.offset, lambda state: state.add_bar(bar), out)

    def _forecast(
        self, request: WindowRequest, value: dict[str, Any], out: Scores
    ) -> dict[str, Any]:
        key, partition, offset = request.key, request.partition, self.applied[request.key]
        calibration = self.calibrations.read(key, partition)
        value = calibration.apply(value, self.config)
        if self.config.enabled:
            self.calibrations.write(key, partition, offset, calibration)
        self._scored(key, partition, offset, lambda state: state.add_forecast(value), out)
        self._release(key, out)
        return value

    def _release(self, key: bytes, out: Scores) -> None:  # bars up to the next requested one
        waiting = self.waiting.pop(key, deque())
        while waiting:
            row, requested = waiting.popleft()
            self._apply(row, out)
            if requested:
                self.waiting[key] = waiting
                return

    def figures(self) -> dict[tuple[int, str], float]:
        """Rolling coverage and pinball per horizon over the symbols this worker holds."""
        return pooled_figures([state.rolling for state in self.scores.states.values()])

    def _scored(self, key: bytes, partition: int, offset: int, add: Add, out: Scores) -> None:
        """`add` on the symbol's scoring state; what it decides into the calibration, `out`."""
        state = self.scores.read(key, partition)
        records = add(state)
        self.scores.write(key, partition, offset, state)
        if not records:
            return
        calibration = self.calibrations.read(key, partition)
        for record in records:
            calibration.update(record)
            out.values.append(record)
            value, ms = encode_score(record), record["ts_event"] / 1e6
            out.outputs.append(Out(self.topic, key, value, ms, BAR_HEADERS, partition))
        if self.config.enabled:
            self.calibrations.write(key, partition, offset, calibration)
