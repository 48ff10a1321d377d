"""A learnable synthetic panel (tests, benchmarks): no feature engine, no data files.

The close drifts with a slow cycle that features 0 and 1 (its sine and cosine) reveal, so a
working model can forecast it almost perfectly while a broken one cannot.
"""

from __future__ import annotations

import numpy as np

from model.covariates import NS_PER_MIN
from model.dataset import Panel, panel_from_arrays

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
        ts = START_NS + t * NS_PER_MIN
        rows.append((ts, close, features, np.ones(n_bars, dtype=bool)))
    return panel_from_arrays(list(symbols), rows, horizon)
