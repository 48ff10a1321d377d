"""Scoring and online calibration in the forecast stage (model.serving.scoring, scoring_state,
conformal): stores keyed by symbol; the score records go to `forecasts.scores`. A symbol's bars
and forecasts meet its scoring state in lockstep, as `calibrate_offline` replays them (bar t,
the forecast of t, bar t + 1): a bar waits in memory until the forecast of every earlier bar is
calibrated. So however far the model lags (an agent's batch may hold thousands of one symbol's
rows, past the retention), the states are a function of the bars and forecasts alone.

Scoring runs in the quiet (`settle`: the checkpoint's drain, after the flush's forecasts):
nothing of it stands between a bar and its forecast. At a minute boundary every symbol's bar
comes at once, and its forecast is calibrated with the scores that bars before it decided (the
calibrator's rule, model.serving.conformal), so the bar only waits; the scores it decides,
their rolling figures and records follow once the minute's forecasts are out. Only a symbol
whose earlier bars still wait (a replay running ahead of the quiet) is advanced before its
forecast is calibrated. A checkpoint drains the forecaster and settles: nothing waits then, each
write is tagged with its own row's offset, and a replay from a mark publishes the same again.

With shadow baselines (model.serving.shadow, their state in the shadow store), every row moves
its symbol's baseline EWMAs as it arrives; each forecast's baselines are calibrated with it and
choose with it what is published (its `source`), and wait with it to be scored on the same
bars, their pinball on its record.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from model.serving.canary import CANARY
from model.serving.conformal import CalibrationConfig, SymbolCalibration
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.scoring import (
    Decided,
    LabelBar,
    ScoreValue,
    encode_score,
    score_all,
    score_decided,
)
from model.serving.scoring_state import STALE_NS, SymbolScoring, pooled_figures
from model.serving.shadow import Columns, Pending
from model.serving.skill import MODEL, TRACKS, ServeMode, Skill, pooled_skill
from streams.runtime.records import Control, FeatureRow, Out
from streams.runtime.stores import ShadowStore, StateStore
from streams.schema import BAR_HEADERS, ControlKind, ControlRecord


@dataclass(slots=True)
class Scores:  # score records in the order they were decided, and the records publishing them
    values: list[ScoreValue] = field(default_factory=list)
    outputs: list[Out] = field(default_factory=list)


class Calibrated(NamedTuple):
    """A forecast as the scoring state takes it (the model's, calibrated) and its baselines'."""

    value: dict[str, Any]
    shadow: Pending | None


class WaitingBar(NamedTuple):
    """A bar not yet in its symbol's scoring state; `requested`: its forecast is to come. Or,
    with `control`, a ROLL or OUTAGE record for the state, in its place among the bars (its
    `bar` only orders it: a ROLL's just before the first bar it concerns, an OUTAGE's just
    after its start)."""

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
        shadows: ShadowStore | None = None,  # None: no shadow baselines
        mode: ServeMode = ServeMode.MODEL,
    ) -> None:
        self.scores, self.calibrations, self.config = scores, calibrations, config
        self.topic, self.enabled = topic, enabled
        self.shadows = shadows if enabled else None
        self.mode = mode
        self.stores: list[StateStore] = [scores, calibrations] if enabled else []
        if self.shadows is not None:
            self.stores.append(self.shadows)
        self.waiting: dict[bytes, deque[WaitingBar]] = {}  # bars not applied yet, in order
        self.calibrated: dict[bytes, deque[Calibrated]] = {}  # forecasts of waiting bars
        self.decided: list[tuple[bytes, int, int, Decided]] = []  # key, partition, offset: to score
        self.unsettled: set[bytes] = set()  # keys in `decided`
        # A forecast's pending entry (with its row's partition and offset) until its canary's
        # forecast is in it (`canaries`), by id of its request
        self.canary_due: dict[int, tuple[Pending, int, int]] = {}
        # The baselines of published forecasts of the model, not calibrated yet: nothing
        # published waits for them (model.serving.shadow), per symbol in order, with their
        # row's partition and offset and their quantiles
        self.uncalibrated: dict[bytes, list[tuple[int, int, Pending, dict[str, Columns]]]] = {}

    def bar(
        self, row: FeatureRow, request: WindowRequest | None, engine: ForecastEngine | None
    ) -> None:
        """A row's bar (`request`: its forecast is on its way), to wait until the next
        `settle`, or a later forecast of its symbol, applies it; and into its symbol's
        baseline EWMAs (those of `engine`'s checkpoint), which the request then carries."""
        if not self.enabled:
            return
        bar = LabelBar(row.ts_event, row.close, row.synthetic)
        waiting = WaitingBar(bar, row.partition, row.offset, request is not None)
        self.waiting.setdefault(row.key, deque()).append(waiting)
        if self.shadows is not None and engine is not None:
            self._calibrate_baselines(row.key)  # before a new checkpoint's row starts afresh
            shadow = self.shadows.read(row.key)
            baselines, model_id = engine.served.baselines, engine.model_id
            variances = shadow.row(baselines, model_id, row.ts_event, row.values)
            self.shadows.write(row.key, row.partition, row.offset, shadow)
            if request is not None:
                request.variances = variances

    def control(self, control: Control) -> None:
        """A ROLL for its symbol's state, or an OUTAGE for those of its partition, to apply in
        lockstep with their bars: after the bars before it, before those after."""
        if not self.enabled:
            return
        partition, decoded = control.partition, control.decoded
        if control.kind == ControlKind.ROLL:
            keys, before = {decoded["symbol"].encode()}, control.ts_event
        elif control.kind == ControlKind.OUTAGE:
            # Just after its start, not before its end: bars of the minute before the end may
            # still come after the record (a gateway that skipped part of a minute)
            waiting = {k for k, bars in self.waiting.items() if bars[-1].partition == partition}
            keys, before = set(self.scores.keys_in(partition)) | waiting, decoded["ts_event"] + 1
        else:
            return
        marker = LabelBar(before - 1, 0.0, False)
        for key in sorted(keys):
            entry = WaitingBar(marker, partition, control.offset, False, decoded)
            self.waiting.setdefault(key, deque()).append(entry)

    def forecasts(
        self,
        batch: Sequence[WindowRequest],
        values: Sequence[dict[str, Any]],
        baselines: Sequence[dict[str, Columns]] | None,
        out: Scores,
        canaries: Sequence[bool] = (),
    ) -> list[dict[str, Any]]:
        """A micro-batch's forecasts calibrated (if enabled), to publish, from the model or a
        baseline (`baselines`: each one's quantiles per request, model.serving.baselines);
        each then waits with its bar for the next `settle` (scores some symbols' earlier bars
        decide go to `out`). Those of requests a canary forecasts too (`canaries`, per
        request) wait for its forecast as well (the `canaries` method)."""
        if not self.enabled:
            return list(values)
        for request in batch:  # a replay's earlier bars, to score together before calibrating
            self._advance(request.key, request.ts_event)
        out_values = []
        for i, (request, value) in enumerate(zip(batch, values, strict=True)):
            own = None if baselines is None else baselines[i]
            canary = bool(canaries) and canaries[i]
            out_values.append(self._forecast(request, value, own, out, canary))
        return out_values

    def canaries(
        self, forecasts: Sequence[tuple[WindowRequest, dict[str, Any]]]
    ) -> list[tuple[WindowRequest, dict[str, Any]]]:
        """The canary's forecasts of requests `forecasts` took, each calibrated by its
        symbol's canary calibration into its forecast's pending entry, to be scored with it:
        the values for `forecasts.shadow`. Each symbol's in the order of its forecasts, and
        before a bar that could decide them is applied: a canary calibration then takes the
        same scores whenever its forecasts come."""
        out = []
        for request, value in forecasts:
            due = self.canary_due.pop(id(request), None)
            if due is None:  # scoring off
                continue
            (pending, partition, offset), shadows = due, self.shadows
            assert shadows is not None  # a pending entry is the shadow store's
            shadow = shadows.read(request.key)
            shadowed, pending.quantiles[CANARY] = shadow.canary_forecast(value, self.config)
            shadows.write(request.key, partition, offset, shadow)
            out.append((request, shadowed))
        return out

    def settle(self, out: Scores) -> None:
        """Every waiting bar and calibrated forecast into the scoring states (a bar whose
        forecast is still in the model waits on), and what they decide scored into `out`."""
        for key in list(self.waiting):
            self._advance(key, None)
        self._score(out)

    def settled(self, partition: int) -> bool:
        """Whether everything the rows of source partition `partition` decide so far is in its
        symbols' states: none of their bars, forecasts or scores waits."""
        waits = any(bars[0].partition == partition for bars in self.waiting.values())
        return not waits and all(p != partition for _, p, _, _ in self.decided)

    def _forecast(
        self,
        request: WindowRequest,
        value: dict[str, Any],
        baselines: dict[str, Columns] | None,
        out: Scores,
        canary: bool,
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
        if self.shadows is None or baselines is None:
            self.calibrated.setdefault(key, deque()).append(Calibrated(value, None))
            return value
        shadow = self.shadows.read(key)
        # a canary's forecast joins the pending entry, after its baselines
        published, pending = shadow.forecast(value, baselines, self.config, self.mode, not canary)
        if canary:
            self.canary_due[id(request)] = (pending, partition, offset)
        elif pending.source == MODEL:
            self.uncalibrated.setdefault(key, []).append((partition, offset, pending, baselines))
        self.shadows.write(key, partition, offset, shadow)
        self.calibrated.setdefault(key, deque()).append(Calibrated(value, pending))
        return published

    def _advance(self, key: bytes, before: int | None) -> None:
        """The symbol's waiting bars (those before ts `before`; None: all) and the calibrated
        forecasts of those that requested one into its scoring state, in lockstep."""
        self._calibrate_baselines(key)  # a forecast's pending entry is complete once applied
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
                value, pending = calibrated.popleft()  # type: ignore[union-attr]
                last = state.last_forecast_ts
                decided += state.add_forecast(value)
                if pending is not None and state.last_forecast_ts != last:  # not a repeat
                    shadow = self.shadows.read(key)  # type: ignore[union-attr]
                    shadow.pending.append(pending)
                    self.shadows.write(key, partition, offset, shadow)  # type: ignore[union-attr]
            self.scores.write(key, partition, offset, state)
            if decided:
                self.decided += [(key, partition, offset, d) for d in decided]
                self.unsettled.add(key)
        if not waiting:
            del self.waiting[key]
            self.calibrated.pop(key, None)

    def _calibrate_baselines(self, key: bytes) -> None:
        """The baselines the symbol's published forecasts left uncalibrated, in order."""
        for partition, offset, pending, raw in self.uncalibrated.pop(key, ()):
            shadow = self.shadows.read(key)  # type: ignore[union-attr]
            shadow.calibrate(pending, raw, self.config)
            self.shadows.write(key, partition, offset, shadow)  # type: ignore[union-attr]

    def _score(self, out: Scores) -> None:
        """Score what was decided, into the rolling figures and the calibrations, and `out`."""
        if not self.decided:
            return
        decided, self.decided = self.decided, []
        self.unsettled.clear()
        scores = score_decided([d for *_, d in decided])
        shadows = self._shadows_decided(decided)
        for i, ((key, partition, offset, _), (record, increments)) in enumerate(
            zip(decided, scores, strict=True)
        ):
            # The state was written when it decided, and a checkpoint settles before encoding.
            self.scores.states[key].rolling.add(record, increments)
            if self.config.enabled:  # else a restored calibration would queue every score
                calibration = self.calibrations.read(key)
                calibration.update(record)
                self.calibrations.write(key, partition, offset, calibration)
            if shadows is not None:
                shadow, (pending, records) = self.shadows.read(key), shadows[i]  # type: ignore[union-attr]
                shadow.scored(record, pending, records, self.mode, calibrating=self.config.enabled)
                self.shadows.write(key, partition, offset, shadow)  # type: ignore[union-attr]
            out.values.append(record)
            value, ms = encode_score(record), record["ts_event"] / 1e6
            out.outputs.append(Out(self.topic, key, value, ms, BAR_HEADERS, partition))

    def _shadows_decided(
        self, decided: list[tuple[bytes, int, int, Decided]]
    ) -> list[tuple[Pending | None, list[ScoreValue]]] | None:
        """Per decided forecast of the model, its pending baselines' and their scores (one
        numpy pass for all of them, as the model's)."""
        if self.shadows is None:
            return None
        entries, owners, shadow_decided = [], [], []
        for i, (key, *_, d) in enumerate(decided):
            pending, baselines = self.shadows.read(key).decided(d)
            entries.append(pending)
            owners += [i] * len(baselines)
            shadow_decided += baselines
        records: list[list[ScoreValue]] = [[] for _ in decided]
        for i, record in zip(owners, score_all(shadow_decided), strict=True):
            records[i].append(record)
        return list(zip(entries, records, strict=True))

    def figures(self) -> dict[tuple[int, str], float]:
        """Rolling coverage and pinball per horizon over the symbols this worker holds that
        are trading (`trading`)."""
        trading = self.trading()
        return pooled_figures([s.rolling for k, s in self.scores.states.items() if k in trading])

    def skill(self) -> dict[tuple[int, str], Skill]:
        """The model's rolling skill over each baseline per horizon, over the symbols this
        worker holds that are trading, with its bootstrap interval (model.serving.skill)."""
        if self.shadows is None:
            return {}
        trading = self.trading()
        return pooled_skill([s.window for k, s in self.shadows.states.items() if k in trading])

    def sources(self) -> dict[str, int]:
        """How many trading symbols serve each source now (every source named, 0 for none)."""
        if self.shadows is None:
            return {}
        counts, trading = dict.fromkeys(TRACKS, 0), self.trading()
        for key, state in self.shadows.states.items():
            if key in trading:
                counts[state.choice.at(-1, self.mode)] += 1  # -1: no choice due in force
        return counts

    def trading(self) -> set[bytes]:
        """The symbols with a bar within `STALE_NS` of the newest bar of any: an expired
        contract's figures stop moving at its last hours, and would weigh on the pooled ones
        for as long as the worker runs."""
        last = {k: s.last_bar_ts for k, s in self.scores.states.items() if s.last_bar_ts}
        newest = max(last.values(), default=0)
        return {key for key, ts in last.items() if ts >= newest - STALE_NS}


def take(state: SymbolScoring, control: ControlRecord) -> None:
    """A ROLL or OUTAGE record into a symbol's scoring state."""
    if control["control"] == ControlKind.ROLL:
        state.roll(control["ts_event"], control["ratio"])
    else:
        state.outage(control["ts_event"], control["end"])
