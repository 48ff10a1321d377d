"""The forecasts a quant would write first, scored on the TFT's windows: `(n, H, Q)` quantiles of
the cumulative log return, NaN where a baseline has too little history.

- persistence: zero median, the training labels' quantiles per horizon;
- rolling empirical quantiles of each horizon's past returns over the last day of bars;
- EWMA volatility (RiskMetrics): the variance of a k-bar return is the EWMA of squared 1-bar
  returns summed over the k bars, with Gaussian or empirical standardized-residual quantiles;
- time-of-day EWMA: the same EWMA on returns divided by the training time-of-day profile, scaled
  forward by the profile of the k minutes ahead, so it knows the US open is coming; geometrically
  blended with the plain EWMA at a half-life of its own (`profile_blend`: a slow daily-shaped
  level and a fast plain one), the weight and both half-lives chosen on the calibration split;
- with a release calendar, a forecast's variance at the minutes of known releases scaled by a
  factor (`release_scaled`), as a quant would widen a volatility forecast over an FOMC statement.

Each is then calibrated like the TFT (`model.calibration`) by `model.evaluate`.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pandas as pd

from model.dataset import Panel, one_bar_returns
from model.volatility import TimeOfDayProfile, ewma_variance, minute_of_day


def persistence(train_quantiles: np.ndarray, n: int) -> np.ndarray:
    """Zero-return median; the other quantiles from the training labels, per horizon."""
    q = train_quantiles.copy()
    q[:, q.shape[1] // 2] = 0.0
    return np.broadcast_to(q, (n, *q.shape)).copy()


def rolling_quantiles(
    panel: Panel, ends: np.ndarray, quantiles: tuple[float, ...], window: int
) -> np.ndarray:
    """Empirical quantiles of the k-bar returns that ended at or before each window's last bar,
    over the previous `window` bars of the same symbol (at least a quarter of them)."""
    horizon = panel.targets.shape[1]
    out = np.empty((len(ends), horizon, len(quantiles)))
    for k in range(1, horizon + 1):
        # past_k[s] = the k-bar return realized at s = targets[s - k, k - 1]
        past = np.full(len(panel.ts), np.nan)
        past[k:] = panel.targets[:-k, k - 1]
        for lo in panel.offsets[:-1]:
            past[lo : lo + k] = np.nan  # those would come from the previous symbol
        groups = pd.Series(past).groupby(panel.row_symbol)
        for j, level in enumerate(quantiles):
            rolled = groups.rolling(window, min_periods=window // 4).quantile(level)
            out[:, k - 1, j] = rolled.droplevel(0).sort_index().to_numpy()[ends]
    return out


def ewma_sigma(
    panel: Panel, ends: np.ndarray, profile: TimeOfDayProfile, halflife: float
) -> np.ndarray:
    """`(n, H)` volatility of each horizon's return: sqrt(EWMA of (r / profile)²) at the
    window's last bar times the forward profile; NaN before `halflife` returns were seen."""
    variance = deseasonalized_variance(panel, deseasonalized_returns(panel, profile), halflife)
    ahead = profile.forward_rms(minute_of_day(panel.ts[ends]), panel.targets.shape[1])
    return np.sqrt(variance[ends])[:, None] * ahead


def deseasonalized_returns(panel: Panel, profile: TimeOfDayProfile) -> np.ndarray:
    """(R,) each row's 1-bar return over the profile of its minute (NaN as `one_bar_returns`)."""
    return one_bar_returns(panel) / profile.at(panel.ts)


def deseasonalized_variance(panel: Panel, r: np.ndarray, halflife: float) -> np.ndarray:
    """(R,) the EWMA of `r`² up to each row, per symbol; NaN before `halflife` returns."""
    variance = np.full(len(r), np.nan)
    for lo, hi in zip(panel.offsets[:-1], panel.offsets[1:], strict=True):
        seen = np.cumsum(np.isfinite(r[lo:hi]))
        v = ewma_variance(r[lo:hi], halflife)
        variance[lo:hi] = np.where(seen >= halflife, v, np.nan)
    return variance


def profile_blend(flat: np.ndarray, tod: np.ndarray, weight: float) -> np.ndarray:
    """flat^(1 - weight) x tod^weight of the plain and the time-of-day EWMA's `ewma_sigma`: the
    profile's shape taken to the power `weight`, for when a few weeks of training bars overstate
    (or the day at hand does not follow) the daily shape; 1 is the time-of-day EWMA itself."""
    return flat ** (1.0 - weight) * tod**weight


def release_scaled(q: np.ndarray, at: np.ndarray, factor: float) -> np.ndarray:
    """Zero-median quantiles `q` `(n, H, Q)` of the cumulative return with the variance of each
    minute flagged in `at` `(n, H)` times `factor`. A minute's variance is its increment of the
    squared q10-q90 spread, which a variance adding up over the minutes (every EWMA and HAR
    here) makes proportional to the cumulative variance."""
    spread = (q[..., -1] - q[..., 0]) ** 2
    step = np.diff(spread, axis=1, prepend=0.0).clip(min=0.0)
    total, scaled = np.cumsum(step, axis=1), np.cumsum(step * (1 + (factor - 1) * at), axis=1)
    ratio = np.sqrt(np.divide(scaled, total, out=np.ones_like(total), where=total > 0))
    return q * ratio[..., None]


def gaussian(sigma: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Zero-mean Gaussian quantiles of the given volatilities `(n, H)`."""
    z = np.array([NormalDist().inv_cdf(level) for level in quantiles])
    return sigma[..., None] * z


def standardized_residuals(
    sigma: np.ndarray, sigma_fit: np.ndarray, y_fit: np.ndarray, quantiles: tuple[float, ...]
) -> np.ndarray:
    """Quantiles of y / sigma on fitting windows, per horizon, times each window's sigma: fat
    tails and price discreteness that a Gaussian misses."""
    ok = np.isfinite(sigma_fit).all(axis=1) & (sigma_fit > 0).all(axis=1)
    if not ok.any():
        raise ValueError("no fitting window with a defined volatility; give more history")
    z = np.quantile(y_fit[ok] / sigma_fit[ok], quantiles, axis=0).T  # (H, Q)
    return sigma[..., None] * z
