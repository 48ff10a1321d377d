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
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

MIN_SCALE = 1e-3  # a scale at or below 0 would cross the median
SHRINK_WEIGHTS = tuple(w / 10 for w in range(11))  # the network's share; 1: no shrinkage


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


def toward_scale(q: np.ndarray, weight: float, quantiles: tuple[float, ...]) -> np.ndarray:
    """Quantiles `(..., H, Q)` in units of the volatility scale with each gap from the median
    a geometric blend of the standard normal's gap (weight 1 - `weight`) and its own."""
    if weight == 1.0:
        return q
    m = quantiles.index(0.5)
    z = np.array([NormalDist().inv_cdf(level) for level in quantiles])
    gap = np.abs(q - q[..., m : m + 1])
    blended = np.abs(z) ** (1.0 - weight) * gap**weight
    return q[..., m : m + 1] + np.sign(z) * blended


def fit_shrink(
    q: np.ndarray, y: np.ndarray, unit: np.ndarray, quantiles: tuple[float, ...]
) -> float:
    """The network's share (`SHRINK_WEIGHTS`) whose calibrated quantiles have the least mean
    pinball loss on these windows: q `(n, H, Q)` and y `(n, H)` in log-return units, `unit`
    `(n, H)` the windows' volatility scale. Of equals, the larger share."""
    m = quantiles.index(0.5)
    levels = np.asarray(quantiles)
    best, best_loss = 1.0, np.inf
    for weight in sorted(SHRINK_WEIGHTS, reverse=True):
        shrunk = toward_scale(q / unit[..., None], weight, quantiles) * unit[..., None]
        calibrated = apply_interval_scale(shrunk, fit_interval_scale(shrunk, y, quantiles), m)
        err = y[..., None] - calibrated
        loss = float(np.maximum(levels * err, (levels - 1.0) * err).mean())
        if loss < best_loss:
            best, best_loss = weight, loss
    return best
