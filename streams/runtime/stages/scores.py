"""Scoring and online calibration in the forecast stage: each feature row's bar and each
forecast through its symbol's scoring and calibration states (streams.forecast.scoring,
conformal), stores keyed by symbol; the score records go to `forecasts.scores`.

A bar's writes are tagged with its row's source offset, a forecast's with that of its symbol's
latest row, which lies between the same two checkpoint marks as the forecast's own row (a
checkpoint drains the forecaster first). So a restore as of a mark holds exactly the bars and
forecasts of the records before it, and the replay publishes the same again: a score depends
on its forecast and its label's bars, a calibrated forecast on the scores due by its bar, never
on how bars and forecasts interleaved.
"""

from __future__ import annotations

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
        self.latest: dict[bytes, int] = {}  # key -> source offset of its latest row

    def bar(self, row: FeatureRow, out: Scores) -> None:
        """A row's bar into its symbol's labels; the forecasts it completes scored into `out`."""
        if not self.enabled:
            return
        self.latest[row.key] = row.offset
        state = self.scores.read(row.key, row.partition)
        records = state.add_bar(LabelBar(row.ts_event, row.close, row.synthetic))
        self.scores.write(row.key, row.partition, row.offset, state)
        self._scored(row.key, row.partition, row.offset, records, out)

    def forecasts(
        self, batch: Sequence[WindowRequest], values: Sequence[dict[str, Any]], out: Scores
    ) -> list[dict[str, Any]]:
        """A micro-batch's forecasts calibrated (if enabled), to publish; each then pending in its
        symbol's scoring state (scored into `out` if its bars are in already)."""
        if not self.enabled:
            return list(values)
        published = []
        for request, value in zip(batch, values, strict=True):
            key, partition = request.key, request.partition
            offset = self.latest[key]
            calibration = self.calibrations.read(key, partition)
            value = calibration.apply(value, self.config)
            if self.config.enabled:
                self.calibrations.write(key, partition, offset, calibration)
            state = self.scores.read(key, partition)
            records = state.add_forecast(value)
            self.scores.write(key, partition, offset, state)
            self._scored(key, partition, offset, records, out)
            published.append(value)
        return published

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
