"""Scoring and online calibration in the forecast stage: each feature row's bar and each
forecast through its symbol's scoring and calibration states (streams.forecast.scoring,
conformal), stores keyed by symbol; the score records go to `forecasts.scores`.

Bars and forecasts meet a symbol's states in lockstep, as `calibrate_offline` replays them: bar
t, then the forecast of t, then bar t + 1. A bar that comes while an earlier row's forecast is
still in the model waits (in memory) until that forecast is in. Why: however far the model lags
the input (a take() batch may hold thousands of one symbol's rows), the states then evolve as a
function of the bars and forecasts alone, the retention included (bars running ahead by more
than `retention` would otherwise make the lagging forecasts `late`). A checkpoint drains the
forecaster, so nothing waits at a checkpoint and every write is tagged with the source offset
of the row it applies (a forecast: its own row's); a restore as of a mark then holds exactly the
rows and forecasts before it, and the replay publishes the same again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
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


@dataclass(slots=True)
class Scores:
    """Score records in the order they were decided, and the records that publish them."""

    values: list[ScoreValue] = field(default_factory=list)
    outputs: list[Out] = field(default_factory=list)


def scoring_decoder(window: int) -> Any:
    """Decode a stored scoring state with the rolling window of this worker's setting."""

    def decode(data: bytes) -> SymbolScoring:
        state = SymbolScoring.from_bytes(data)
        state.window = state.rolling.window = window
        return state

    return decode


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
        self.applied: dict[bytes, int] = {}  # key -> source offset of its last bar applied
        self.waiting: dict[bytes, deque[tuple[FeatureRow, bool]]] = {}  # bars behind a forecast

    def bar(self, row: FeatureRow, requested: bool, out: Scores) -> None:
        """A row's bar into its symbol's labels (`requested`: its forecast is on its way); the
        forecasts it completes scored into `out`. It waits while an earlier forecast is out."""
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
        symbol's scoring state (scored into `out` if its bars are in already), and the bars that
        waited for it applied."""
        if not self.enabled:
            return list(values)
        published = []
        for request, value in zip(batch, values, strict=True):
            published.append(self._forecast(request, value, out))
            self._release(request.key, out)
        return published

    def _apply(self, row: FeatureRow, out: Scores) -> None:
        self.applied[row.key] = row.offset
        state = self.scores.read(row.key, row.partition)
        records = state.add_bar(LabelBar(row.ts_event, row.close, row.synthetic))
        self.scores.write(row.key, row.partition, row.offset, state)
        self._scored(row.key, row.partition, row.offset, records, out)

    def _forecast(
        self, request: WindowRequest, value: dict[str, Any], out: Scores
    ) -> dict[str, Any]:
        key, partition = request.key, request.partition
        offset = self.applied[key]  # its own row's: the last bar applied before it
        calibration = self.calibrations.read(key, partition)
        value = calibration.apply(value, self.config)
        if self.config.enabled:
            self.calibrations.write(key, partition, offset, calibration)
        state = self.scores.read(key, partition)
        records = state.add_forecast(value)
        self.scores.write(key, partition, offset, state)
        self._scored(key, partition, offset, records, out)
        return value

    def _release(self, key: bytes, out: Scores) -> None:
        """The bars that waited for a forecast of `key`, up to the next one requested."""
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

    def _scored(
        self, key: bytes, partition: int, offset: int, records: list[ScoreValue], out: Scores
    ) -> None:
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
