"""A learnable synthetic panel (tests, benchmarks): no feature engine, no data files.

The close drifts with a slow cycle that features 0 and 1 (its sine and cosine) reveal, so a
working model can forecast it almost perfectly while a broken one cannot. Feature 2 is the
volatility scale's input (`model.volatility.SCALE_FEATURE`): an EWMA of the squared returns.
"""

from __future__ import annotations

import numpy as np

from model.covariates import NS_PER_MIN
from model.dataset import Panel, panel_from_arrays
from model.volatility import SCALE_FEATURE, SCALE_LAMBDA, ewma_variance

START_NS = 1_704_150_000_000_000_000  # 2024-01-01 23:00 UTC


def synthetic_panel(
    n_bars: int = 3000,
    n_features: int = 16,
    horizon: int = 10,
    symbols: tuple[str, ...] = ("ESH4",),
    period: int = 240,
    drift: float = 1e-4,
    noise: float = 2e-6,
    seed: int = 0,
) -> Panel:
    rng = np.random.default_rng(seed)
    rows = []
    for i, _ in enumerate(symbols):
        t = np.arange(n_bars)
        phase = 2 * np.pi * (t + 37 * i) / period
        features = rng.normal(size=(n_bars, n_features))
        features[:, 0], features[:, 1] = np.sin(phase), np.cos(phase)
        returns = drift * np.sin(phase) + rng.normal(0.0, noise, n_bars)
        close = 100.0 * np.exp(np.concatenate([[0.0], np.cumsum(returns[:-1])]))
        halflife = np.log(0.5) / np.log(SCALE_LAMBDA)
        features[:, 2] = np.sqrt(ewma_variance(np.r_[np.nan, np.diff(np.log(close))], halflife))
        features[0, 2] = features[1, 2]
        ts = START_NS + t * NS_PER_MIN
        rows.append((ts, close, features, np.ones(n_bars, dtype=bool)))
    names = tuple(SCALE_FEATURE if j == 2 else f"synthetic_{j}" for j in range(n_features))
    return panel_from_arrays(list(symbols), rows, horizon, feature_names=names)
