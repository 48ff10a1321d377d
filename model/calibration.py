"""Interval calibration shared by the TFT and every baseline: one scale per horizon and quantile.

Each non-median quantile is moved along its gap from the median, q' = q50 + s (q - q50), with
the s > 0 that minimizes that quantile's pinball loss over held-out calibration windows. A scale,
not an additive offset (conformalized quantile regression), because intraday intervals differ
several-fold in width between the night and the US open: an offset sized for the average widens
the quiet minutes and narrows the busy ones. The minimizer is exact: with d = q - q50 and
u = (y - q50) / |d|, the loss is sum |d| * pinball(u - s) for an upper quantile (and of -s for a
lower one), so s is a |d|-weighted quantile of u. The median is left as forecast.

Before that, a checkpoint may pull its network's intervals toward its volatility scale's own
Gaussian ones (`toward_scale`), by a weight fitted on the same calibration windows: shrinkage
toward the baseline the network departs from, as far as those windows say the departures hold.
Then toward the Gaussian of a fast plain EWMA of the window's own squared returns
(`FastBlend`), by a share and half-life fitted there too: the scale and the network carry a
time-of-day profile and a long memory learned on the training years, and when a later month
moves away from both (a calm quarter after volatile training years), only the recent returns
say so; the calibration windows, the month before the forecasts, say how far to follow them.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from model.metrics import pinball_per_window

MIN_SCALE = 1e-3  # a scale at or below 0 would cross the median
SHRINK_WEIGHTS = tuple(w / 10 for w in range(11))  # the network's share; 1: no shrinkage
FAST_HALFLIVES = (5.0, 10.0, 20.0, 30.0, 60.0)  # bars: the fast EWMA's candidates
FAST_SHARES = tuple(w / 10 for w in range(11))  # the fast EWMA's share; 0: none


@dataclass(frozen=True)
class FastBlend:
    """The fast EWMA's half-life (bars) and its share of each interval (0: the checkpoint's
    intervals as they were before it existed)."""

    halflife: float = FAST_HALFLIVES[1]
    share: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {"halflife": self.halflife, "share": self.share}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> FastBlend:
        """ValueError naming the values if they are not a positive half-life and a share."""
        halflife, share = values.get("halflife"), values.get("share")
        if not (
            isinstance(halflife, int | float)
            and isinstance(share, int | float)
            and halflife > 0
            and 0 <= share <= 1
        ):
            raise ValueError(f"fast blend {values!r} is not a positive half-life and a share")
        return cls(float(halflife), float(share))


def weighted_quantile(values: np.ndarray, weights: np.ndarray, level: float) -> float:
    """The smallest v with weighted share of values <= v at least `level`."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, level * cumulative[-1]))
    return float(values[order][min(index, len(values) - 1)])


def fit_interval_scale(q: np.ndarray, y: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """`(H, Q)` scales (1 at the median) from forecasts `(n, H, Q)` and outcomes `(n, H)`."""
    if len(y) == 0:
        raise ValueError("no calibration window: give data covering the calibration split")
    m = quantiles.index(0.5)
    out = np.ones(q.shape[1:])
    for h in range(q.shape[1]):
        for j, level in enumerate(quantiles):
            if j == m:
                continue
            gap = np.abs(q[:, h, j] - q[:, h, m])
            ok = gap > 0
            if not ok.any():
                continue
            u = (y[ok, h] - q[ok, h, m]) / gap[ok]
            s = weighted_quantile(u, gap[ok], level)
            out[h, j] = max(s if j > m else -s, MIN_SCALE)
    return out


def apply_interval_scale(q: np.ndarray, scale: np.ndarray, median: int) -> np.ndarray:
    """Forecasts `(..., H, Q)` with each quantile's gap from the median scaled."""
    centre = q[..., median : median + 1]
    return centre + scale * (q - centre)


def toward_scale(
    q: np.ndarray, weight: float, quantiles: tuple[float, ...], ratio: np.ndarray | float = 1.0
) -> np.ndarray:
    """Quantiles `(..., H, Q)` in units of the volatility scale with each gap from the median
    a geometric blend of a Gaussian's gap (weight 1 - `weight`) and its own: the standard
    normal's, or with `ratio` `(..., H)` that of a volatility `ratio` times the scale."""
    if weight == 1.0:
        return q
    m = quantiles.index(0.5)
    z = np.abs([NormalDist().inv_cdf(level) for level in quantiles]) * np.expand_dims(ratio, -1)
    gap = np.abs(q - q[..., m : m + 1])
    blended = z ** (1.0 - weight) * gap**weight
    signs = np.sign(np.asarray(quantiles) - 0.5)
    return q[..., m : m + 1] + signs * blended


def calibrated_loss(q: np.ndarray, y: np.ndarray, quantiles: tuple[float, ...]) -> float:
    """Mean pinball loss of `q` `(n, H, Q)` once its interval scale is fitted on `y` `(n, H)`."""
    calibrated = apply_interval_scale(q, fit_interval_scale(q, y, quantiles), quantiles.index(0.5))
    return float(pinball_per_window(y, calibrated, quantiles).mean())


def fit_shrink(
    q: np.ndarray, y: np.ndarray, unit: np.ndarray, quantiles: tuple[float, ...]
) -> float:
    """The network's share (`SHRINK_WEIGHTS`) whose calibrated quantiles have the least mean
    pinball loss on these windows: q `(n, H, Q)` and y `(n, H)` in log-return units, `unit`
    `(n, H)` the windows' volatility scale. Of equals, the larger share."""
    best, best_loss = 1.0, np.inf
    for weight in sorted(SHRINK_WEIGHTS, reverse=True):
        shrunk = toward_scale(q / unit[..., None], weight, quantiles) * unit[..., None]
        loss = calibrated_loss(shrunk, y, quantiles)
        if loss < best_loss:
            best, best_loss = weight, loss
    return best


def fit_fast(
    q: np.ndarray,
    y: np.ndarray,
    unit: np.ndarray,
    ratios: dict[float, np.ndarray],
    quantiles: tuple[float, ...],
) -> FastBlend:
    """The fast EWMA's half-life and share (`FAST_SHARES`) whose calibrated quantiles have the
    least mean pinball loss on these windows: q `(n, H, Q)` (shrunk) and y `(n, H)` in
    log-return units, `unit` `(n, H)` the windows' volatility scale, `ratios` each candidate
    half-life's fast volatility over the scale `(n, H)`. Of equals, the smaller share."""
    best, best_loss = FastBlend(), calibrated_loss(q, y, quantiles)
    for halflife, ratio in ratios.items():
        for share in FAST_SHARES[1:]:
            blended = toward_scale(q / unit[..., None], 1.0 - share, quantiles, ratio)
            loss = calibrated_loss(blended * unit[..., None], y, quantiles)
            if loss < best_loss:
                best, best_loss = FastBlend(halflife, share), loss
    return best
