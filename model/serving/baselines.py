"""The shadow baselines: what a quant would forecast in ten lines, formed for every window the
worker forecasts and scored beside the model's forecast (model.serving.shadow).

Two of `barcast evaluate`'s baselines (model.calibrated_baselines), the best on the products and
months the model never saw:

- `volatility_scale`: the checkpoint's own volatility scale without the network
  (`meta.volatility.scale` of the window's rows), as Gaussian quantiles: what the TFT adds on
  top of the scale it starts from;
- `tod_ewma`: the time-of-day EWMA blend (model.baselines): an EWMA of the symbol's squared
  1-minute returns over the checkpoint's time-of-day profile, scaled forward by the profile of
  the minutes ahead, geometrically blended with a plain EWMA, as Gaussian quantiles. Its EWMAs
  run over every bar the worker saw of the symbol, not only the window's: a few floats per
  symbol (`EWMA_FLOATS`) in its shadow state, updated row by row, and undefined until each has
  seen `halflife` returns, as in `evaluate`.

Each is calibrated as `evaluate` calibrates it: an interval scale per horizon and quantile,
fitted with its EWMA half-lives and blend weight on the checkpoint's calibration windows by
`barcast train` (`FILE` beside the checkpoint's config.json); a checkpoint without one (trained
before, or untrained) gets unit scales and `DEFAULT_CHOICE`. The worker then tracks each one's
interval online like the model's (model.serving.conformal), per symbol and horizon.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from model.baselines import gaussian
from model.calibration import apply_interval_scale
from model.volatility import MINUTES_PER_DAY, minute_of_day

if TYPE_CHECKING:
    from model.checkpoint import CheckpointMeta

VOLATILITY_SCALE, TOD_EWMA = "volatility_scale", "tod_ewma"
BASELINES = (VOLATILITY_SCALE, TOD_EWMA)  # names on score records, metrics and the page
FILE = "baselines.json"
FORMAT = "barcast-baselines"
VERSION = 1
EWMA_FLOATS = 7  # a symbol's EWMA state: last ts, then (sum, weight, returns) of each EWMA
_RADIANS_TO_MINUTE = MINUTES_PER_DAY / (2 * math.pi)


@dataclass(frozen=True)
class EwmaChoice:
    """The time-of-day EWMA blend's settings (evaluate's `tod_ewma` choice)."""

    halflife: float  # bars: the EWMA of returns over the profile
    flat_halflife: float  # bars: the plain EWMA
    weight: float  # on the time-of-day EWMA (1: it alone)

    @classmethod
    def from_fitted(cls, fitted: dict[str, Any]) -> EwmaChoice:
        halflife = float(fitted["halflife_bars"])
        return cls(
            halflife,
            float(fitted.get("flat_halflife_bars", halflife)),
            float(fitted["profile_weight"]),
        )


DEFAULT_CHOICE = EwmaChoice(60.0, 60.0, 1.0)


@dataclass(frozen=True)
class BaselineSpec:
    """Each baseline's calibration: interval scales `(H, Q)` and the EWMA blend's settings."""

    interval_scales: dict[str, np.ndarray]
    ewma: EwmaChoice
    fitted: bool  # False: the defaults (no FILE beside the checkpoint)

    @classmethod
    def default(cls, horizon: int, n_quantiles: int) -> BaselineSpec:
        ones = np.ones((horizon, n_quantiles))
        return cls(dict.fromkeys(BASELINES, ones), DEFAULT_CHOICE, False)

    @classmethod
    def load(cls, directory: Path, horizon: int, n_quantiles: int) -> BaselineSpec:
        """The checkpoint directory's FILE, or the defaults if it has none; ValueError naming
        the file and the fix if it cannot be used."""
        path = Path(directory) / FILE
        if not path.is_file():
            return cls.default(horizon, n_quantiles)
        try:
            values = json.loads(path.read_text())
            fitted = values["baselines"]
            scales = {
                name: np.asarray(fitted[name]["interval_scale"], dtype=np.float64)
                for name in BASELINES
            }
            choice = EwmaChoice.from_fitted(fitted[TOD_EWMA])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"{path}: {type(exc).__name__} {exc}; it is not a baselines file this barcast "
                "reads: remove it (the baselines are then uncalibrated) or retrain"
            ) from None
        shape = (horizon, n_quantiles)
        if values.get("format") != FORMAT or any(s.shape != shape for s in scales.values()):
            raise ValueError(
                f"{path}: not a {FORMAT} file of {shape} interval scales; remove it or retrain"
            )
        return cls(scales, choice, True)


def save(directory: Path, fitted: dict[str, dict[str, Any]], calibrated_on: dict[str, Any]) -> None:
    """Write FILE: each baseline's fit as `evaluate` reports it (interval scale, choice)."""
    values = {
        "format": FORMAT,
        "version": VERSION,
        "calibrated_on": calibrated_on,
        "baselines": {name: fitted[name] for name in BASELINES},
    }
    path = Path(directory) / FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(values, indent=1))
    tmp.replace(path)


def new_ewma() -> list[float]:
    """A symbol's EWMA state before any row: no last ts, both EWMAs empty."""
    return [-1.0] + [0.0] * (EWMA_FLOATS - 1)


class ShadowBaselines:
    """A checkpoint's baselines: the EWMA states' update per feature row, and every baseline's
    quantiles of a batch of windows (pure numpy, in the inference thread)."""

    def __init__(self, meta: CheckpointMeta, spec: BaselineSpec) -> None:
        self.meta, self.spec = meta, spec
        self.quantiles = meta.config.quantiles
        self.horizon = meta.config.horizon
        # The scale's inputs start with the return, the minute of day and the gap
        self.ret, self.sin, self.cos, self.gap = meta.volatility.columns[:4]
        self.square = meta.volatility.profile.per_minute_square().tolist()
        choice = spec.ewma
        self.decays = (0.5 ** (1.0 / choice.halflife), 0.5 ** (1.0 / choice.flat_halflife))

    def update(self, ewma: list[float], ts_event: int, values: np.ndarray) -> bool:
        """A feature row into a symbol's EWMA state, in place; False for a row at or before
        the last one seen (a repeat after a restart). A return across a gap is a session's
        jump, not news: it leaves both EWMAs as they were (evaluate's NaN return)."""
        if ts_event <= ewma[0]:
            return False
        ewma[0] = float(ts_event)
        r, gap = float(values[self.ret]), float(values[self.gap])
        if gap > 0 or not math.isfinite(r):
            return True
        angle = math.atan2(float(values[self.sin]), float(values[self.cos]))
        minute = round(angle * _RADIANS_TO_MINUTE) % MINUTES_PER_DAY
        square = r * r
        tod, flat = self.decays
        ewma[1] = tod * ewma[1] + square / self.square[minute]
        ewma[2] = tod * ewma[2] + 1.0
        ewma[3] += 1.0
        ewma[4] = flat * ewma[4] + square
        ewma[5] = flat * ewma[5] + 1.0
        ewma[6] += 1.0
        return True

    def variances(self, ewma: list[float]) -> tuple[float, float] | None:
        """The EWMAs' bias-corrected variances, once each has seen `halflife` returns."""
        choice = self.spec.ewma
        if ewma[3] < choice.halflife or ewma[6] < choice.flat_halflife:
            return None
        return ewma[1] / ewma[2], ewma[4] / ewma[5]

    def forecast(
        self, ts_event: np.ndarray, scale: np.ndarray, variances: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Each baseline's calibrated quantiles `(B, H, Q)` of windows ending at `ts_event`:
        `scale` the windows' volatility scale `(B, H)` (`meta.volatility.scale`, which the
        model's forecasts are in units of), `variances` the EWMAs' `(B, 2)` (NaN: not defined
        yet, nor then the baseline)."""
        median, horizon = self.quantiles.index(0.5), self.horizon
        ahead = self.meta.volatility.profile.forward_rms(minute_of_day(ts_event), horizon)
        tod = np.sqrt(variances[:, :1]) * ahead
        flat = np.sqrt(variances[:, 1:]) * np.sqrt(np.arange(1, horizon + 1))
        weight = self.spec.ewma.weight
        sigma = {VOLATILITY_SCALE: scale, TOD_EWMA: flat ** (1.0 - weight) * tod**weight}
        return {
            name: apply_interval_scale(
                gaussian(s, self.quantiles), self.spec.interval_scales[name], median
            )
            for name, s in sigma.items()
        }
