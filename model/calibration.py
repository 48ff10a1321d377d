"""Interval calibration shared by the TFT and every baseline: one scale per horizon and quantile.

Each non-median quantile is moved along its gap from the median, q' = q50 + s (q - q50), with
the s > 0 that minimizes that quantile's pinball loss over held-out calibration windows. A scale,
not an additive offset (conformalized quantile regression), because intraday intervals differ
several-fold in width between the night and the US open: an offset sized for the average widens
the quiet minutes and narrows the busy ones. The minimizer is exact: with d = q - q50 and
u = (y - q50) / |d|, the loss is sum |d| * pinball(u - s) for an upper quantile (and of -s for a
lower one), so s is a |d|-weighted quantile of u. The median is left as forecast.
"""

from __future__ import annotations

import numpy as np

MIN_SCALE = 1e-3  # a scale at or below 0 would cross the median


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
