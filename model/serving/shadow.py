"""A symbol's shadow state: what the worker keeps per symbol to score the baselines beside every
forecast it publishes (model.serving.baselines), and to choose what it publishes
(model.serving.skill).

For each forecast of the model the symbol's baselines are formed too, each calibrated online by
a `SymbolCalibration` of its own (per horizon, as the model's), and wait, calibrated, until the
model's forecast is decided (model.serving.scoring_state): then each is scored on the same bars
with the same label rules, its score moves its calibration, and the horizons' losses go into
the symbol's skill window. The `source` of the forecast the symbol publishes is the serve
choice's (`ServeChoice`): the model's forecast, or a baseline's, calibrated likewise.

The state belongs to the serving checkpoint (`model_id`): the baselines are the checkpoint's
(its volatility scale, its time-of-day profile, their calibration), so another checkpoint starts
the symbol's EWMAs, calibrations, skill window and choice afresh, as the model's own calibration
does. Pure: the worker keeps each state in a store (streams.runtime.stages.scores) and
`shadow_offline` replays a history in one process, alike.
"""

from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import orjson

from model.serving.baselines import BASELINES, VOLATILITY_SCALE, ShadowBaselines, new_ewma
from model.serving.canary import CANARY, CanaryTrack
from model.serving.conformal import SCHEMA_VERSION, CalibrationConfig, SymbolCalibration
from model.serving.scoring import QUANTILES, Decided, ScoreValue
from model.serving.skill import MODEL, ServeChoice, ServeMode, SkillWindow
from model.serving.stored import framed, unframed

STATE_FORMAT = 1
Columns = tuple[list[float], ...]  # a forecast's quantiles: one list of horizons per quantile
DEFAULT_WINDOW = 240  # scored forecasts behind a symbol's skill (BARCAST_SCORE_WINDOW)


class Pending(NamedTuple):
    """A published forecast's source and its baselines' calibrated quantiles, flattened
    q10s + q50s + q90s per baseline, until the model's forecast of `ts_event` is decided."""

    ts_event: int
    source: str
    quantiles: dict[str, tuple[float, ...]]


@dataclass
class SymbolShadow:
    window_size: int = DEFAULT_WINDOW
    model_id: str | None = None  # the serving checkpoint these baselines are of
    ewma: list[float] = field(default_factory=new_ewma)
    calibrations: dict[str, SymbolCalibration] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)  # ts order
    window: SkillWindow = field(init=False)
    choice: ServeChoice = field(default_factory=ServeChoice)
    canary: CanaryTrack | None = None  # a shadow checkpoint's forecasts (model.serving.canary)

    def __post_init__(self) -> None:
        self.window = SkillWindow(self.window_size)

    def serve(self, model_id: str) -> None:
        """Baselines of checkpoint `model_id` from now on: another starts afresh (pending
        forecasts of the one before are still scored, but skill counts the new one's only)."""
        if model_id != self.model_id:
            self.model_id, self.ewma, self.calibrations = model_id, new_ewma(), {}
            self.window, self.choice = SkillWindow(self.window_size), ServeChoice()

    def resize(self, size: int) -> None:
        """A skill window of `size` forecasts, holding the newest of this one's that fit."""
        ordered = self.window.ordered()
        self.window_size, self.window = size, SkillWindow(size)
        for row in ordered[max(0, len(ordered) - size) :]:
            self.window.append(row)

    def row(
        self, baselines: ShadowBaselines, model_id: str, ts_event: int, values: np.ndarray
    ) -> tuple[float, float] | None:
        """A feature row into the EWMAs; their variances if both are defined."""
        self.serve(model_id)
        baselines.update(self.ewma, ts_event, values)
        return baselines.variances(self.ewma)

    def forecast(
        self,
        value: dict[str, Any],
        raw: dict[str, Columns],
        config: CalibrationConfig,
        mode: ServeMode,
        defer: bool = False,
    ) -> tuple[dict[str, Any], Pending]:
        """The value to publish for the model's (calibrated) `value`, given each defined
        baseline's quantiles `raw` (`columns_of`), and what waits for the scores. With `defer`,
        where the model's own forecast is published, the baselines are left uncalibrated in
        the pending entry: nothing published waits for them. `calibrate` them then, in their
        order, before the symbol's next `row` or forecast and before the entry is scored (the
        calibrations take the same scores then: one scored later is due later)."""
        ts = int(value["ts_event"])
        self.serve(value["model_id"])
        source = self.choice.at(ts, mode)
        if source != MODEL and source not in raw:  # its EWMAs restarted since
            source = VOLATILITY_SCALE if VOLATILITY_SCALE in raw else MODEL
        pending = Pending(ts, source, {})
        if source == MODEL:
            if not defer:
                self.calibrate(pending, raw, config)
            return value | {"source": MODEL}, pending
        calibrated = self.calibrate(pending, raw, config)[source]
        return baseline_value(value, source, raw[source], calibrated, config), pending

    def calibrate(
        self, pending: Pending, raw: dict[str, Columns], config: CalibrationConfig
    ) -> dict[str, Columns]:
        """Each baseline's quantiles `raw` of the forecast `pending` stands for, calibrated
        (if on) by the baseline's own calibration, into `pending` (flattened) and returned."""
        calibrated: dict[str, Columns] = {}
        for name in BASELINES:
            if name not in raw:
                continue
            low, median, high = raw[name]
            if config.enabled:
                state = self.calibrations.setdefault(name, SymbolCalibration())
                low, high = state.calibrate(name, pending.ts_event, median, low, high, config)
            calibrated[name] = (low, median, high)
            pending.quantiles[name] = (*low, *median, *high)
        return calibrated

    def canary_forecast(
        self, value: dict[str, Any], config: CalibrationConfig
    ) -> tuple[dict[str, Any], tuple[float, ...]]:
        """A canary's `forecasts` value calibrated by its own calibration (a new track for
        another checkpoint): the value for `forecasts.shadow`, and its quantiles to score."""
        ts, model_id = int(value["ts_event"]), value["model_id"]
        if self.canary is None or self.canary.model_id != model_id:
            self.canary = CanaryTrack(model_id, ts)
        if config.enabled:  # under its track's name: the model's id is the serving one's
            calibrated = self.canary.calibration.apply(value | {"model_id": CANARY}, config)
            value = calibrated | {"model_id": model_id}
        quantiles = tuple(v for name in QUANTILES for v in value[name])
        return value | {"source": CANARY}, quantiles

    def decided(self, decided: Decided) -> tuple[Pending | None, list[Decided]]:
        """The pending entry of a decided forecast of the model, and its baselines' forecasts
        decided on the same bars (model_id: the baseline's name)."""
        forecast, entry = decided.forecast, None
        while self.pending and self.pending[0].ts_event <= forecast.ts_event:
            entry = self.pending.pop(0)
        if entry is None or entry.ts_event != forecast.ts_event:
            return None, []
        h = len(forecast.horizons)
        shadows = [
            Decided(
                forecast._replace(model_id=name, q10=q[:h], q50=q[h : 2 * h], q90=q[2 * h :]),
                decided.bars,
            )
            for name, q in entry.quantiles.items()
        ]
        return entry, shadows

    def scored(
        self,
        record: ScoreValue,
        entry: Pending | None,
        shadows: list[ScoreValue],
        mode: ServeMode,
        *,
        calibrating: bool,
    ) -> None:
        """The model's score `record` (of a forecast `decided` returned `entry` for) with its
        baselines' `shadows`: the record names its source and carries their pinball, their
        calibrations and the skill window take them, and every BLOCK the choice is revisited."""
        by_name = {s["model_id"]: s for s in shadows}
        record["source"] = entry.source if entry is not None else MODEL
        canary = by_name.pop(CANARY, None)
        if canary is not None and self.canary is not None:
            self._canary_scored(record, canary, calibrating)
        # Not calibrating, no score is queued: calibrations restored from a run with it on
        # would hold every later one, never applied, in a state written after each score.
        for name, shadow in by_name.items():
            if calibrating and name in self.calibrations:
                self.calibrations[name].update(shadow)
        if record["unscored"] is not None:
            record["baselines"] = None
            return
        record["baselines"] = {
            name: by_name[name]["pinball"] if name in by_name else None for name in BASELINES
        }
        if record["model_id"] != self.model_id:
            return  # a forecast of the checkpoint before: its skill is not the new one's
        losses = [mean_losses(record["pinball"])]  # type: ignore[arg-type]
        for name in BASELINES:
            pinball = by_name[name]["pinball"] if name in by_name else None
            losses.append(
                np.full(len(losses[0]), np.nan) if pinball is None else mean_losses(pinball)
            )
        self.window.append(np.column_stack(losses))
        self.choice.revisit(self.window, mode, record["ts_event"], len(record["horizons"]))

    def _canary_scored(self, record: ScoreValue, canary: ScoreValue, calibrating: bool) -> None:
        """A canary's score beside the model's: into its calibration, its record and the pairs
        its verdict is taken on."""
        track = self.canary
        assert track is not None
        if canary["ts_event"] < track.since:
            return  # of the canary a newer one replaced: its pending forecasts outlive its track
        if calibrating:
            track.calibration.update(canary)
        if canary["unscored"] is None and record["unscored"] is None:
            model, own = mean_losses(record["pinball"]), mean_losses(canary["pinball"])  # type: ignore[arg-type]
            inside = canary["inside"] or []
            track.scored.append(
                (
                    record["ts_event"],
                    float(own.mean()),
                    float(model.mean()),
                    sum(inside),
                    len(inside),
                )
            )
            record["canary"] = {"model_id": track.model_id, "pinball": canary["pinball"]}

    def to_bytes(self) -> bytes:
        """STATE_FORMAT: a JSON header (the skill window's losses are in slots of their own,
        streams.runtime.stores), then the EWMAs and pending quantiles as little-endian doubles."""
        pending = [
            [p.ts_event, p.source, [[n, len(q)] for n, q in p.quantiles.items()]]
            for p in self.pending
        ]
        header = orjson.dumps({
            "window_size": self.window_size,
            "model_id": self.model_id,
            "calibrations": {name: c.__dict__ for name, c in self.calibrations.items()},
            "pending": pending,
            "window": [self.window.count, self.window.losses.shape[1]],
            "choice": [self.choice.source, self.choice.due],
            "canary": None if self.canary is None else self.canary.to_dict(),
        })  # fmt: skip
        floats = [*self.ewma, *(v for p in self.pending for q in p.quantiles.values() for v in q)]
        return framed(STATE_FORMAT, header, struct.pack(f"<{len(floats)}d", *floats))

    @classmethod
    def from_bytes(cls, data: bytes) -> SymbolShadow:
        """The state without its skill window's losses (`load_slot` them)."""
        header, floats = unframed(data, STATE_FORMAT, "shadow state")
        state = cls(header["window_size"], header["model_id"])
        state.ewma = list(itertools.islice(floats, len(state.ewma)))
        state.calibrations = {
            name: SymbolCalibration.from_bytes(orjson.dumps(values))
            for name, values in header["calibrations"].items()
        }
        state.pending = [
            Pending(ts, source, {n: tuple(itertools.islice(floats, k)) for n, k in tracks})
            for ts, source, tracks in header["pending"]
        ]
        state.window.count = header["window"][0]
        state.window.losses = np.full(
            (state.window_size, header["window"][1], 1 + len(BASELINES)), np.nan
        )
        source, due = header["choice"]
        state.choice = ServeChoice(source, [(ts, s) for ts, s in due])
        canary = header.get("canary")
        state.canary = None if canary is None else CanaryTrack.from_dict(canary)
        return state


def columns_of(baselines: dict[str, np.ndarray]) -> list[dict[str, Columns]]:
    """Per window of a batch, each baseline's quantiles `(B, H, Q)` as one list of horizons
    per quantile, those not defined (not finite) left out: a few numpy calls for the whole
    batch rather than a few per forecast on the event loop."""
    out: list[dict[str, Columns]] = []
    for name in BASELINES:
        q = baselines.get(name)
        if q is None:
            continue
        out += [{} for _ in range(len(q) - len(out))]
        finite = np.isfinite(q).all(axis=(1, 2)).tolist()
        for own, defined, columns in zip(out, finite, q.transpose(0, 2, 1).tolist(), strict=True):
            if defined:
                own[name] = tuple(columns)
    return out


def mean_losses(pinball: dict[str, list[float]]) -> np.ndarray:
    """`(H,)` a score's pinball averaged over its quantile fields, per horizon."""
    return np.array([pinball[name] for name in QUANTILES]).mean(axis=0)


def baseline_value(
    value: dict[str, Any],
    source: str,
    raw: Columns,
    calibrated: Columns,
    config: CalibrationConfig,
) -> dict[str, Any]:
    """The model's `forecasts` value with a baseline's quantiles in its place: calibrated (if
    calibration is on, with its raw ones beside them, as the model's), as prices too."""
    close, out = value["close"], dict(value)
    for name, q in zip(QUANTILES, calibrated, strict=True):
        out[name] = q
        out["price_" + name] = [close * math.exp(x) for x in q]
    if config.enabled:
        for name, q in zip(QUANTILES, raw, strict=True):
            out["raw_" + name] = list(q)
        out["schema_version"] = SCHEMA_VERSION
    out["source"] = source
    return out
