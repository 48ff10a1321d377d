"""A learnable synthetic panel (tests, benchmarks): no feature engine, no data files; and
random-walk bars for the feature engine.

The close drifts with a slow cycle that features 0 and 1 (its sine and cosine) reveal, so a
working model can forecast it almost perfectly while a broken one cannot. Features 2..6 are the
volatility scale's inputs (`model.volatility.SCALE_INPUTS`) when there are that many.
"""

from __future__ import annotations

import numpy as np

from features.long_memory import EWMA_DAY, EWMA_WEEK
from model.bar_files import CleanBars
from model.covariates import NS_PER_MIN
from model.dataset import Panel, panel_from_arrays
from model.volatility import (
    MINUTES_PER_DAY,
    SCALE_INPUTS,
    SCALE_LAMBDA,
    ewma_variance,
    minute_of_day,
)

START_NS = 1_704_150_000_000_000_000  # 2024-01-01 23:00 UTC
SCALED = 2 + len(SCALE_INPUTS)  # panels at least this wide carry the scale's inputs


def synthetic_panel(
    n_bars: int = 3000,
    n_features: int = 16,
    horizon: int = 10,
    symbols: tuple[str, ...] = ("ESH4",),
    period: int = 240,
    drift: float = 1e-4,
    noise: float = 2e-6,
    seed: int = 0,
    dtype: type = np.float64,
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
        if n_features >= SCALED:
            features[:, 2:SCALED] = scale_inputs(ts, close)
        rows.append((ts, close, features, np.ones(n_bars, dtype=bool)))
    names = [f"synthetic_{j}" for j in range(n_features)]
    if n_features >= SCALED:
        names[2:SCALED] = SCALE_INPUTS
    return panel_from_arrays(list(symbols), rows, horizon, feature_names=tuple(names), dtype=dtype)


def scale_inputs(ts: np.ndarray, close: np.ndarray) -> np.ndarray:
    """The feature engine's `SCALE_INPUTS` columns for contiguous bars."""
    r = np.r_[0.0, np.diff(np.log(close))]
    angle = 2 * np.pi * minute_of_day(ts) / MINUTES_PER_DAY
    slow, day, week = (
        np.sqrt(ewma_variance(r, np.log(0.5) / np.log(decay)))
        for decay in (SCALE_LAMBDA, EWMA_DAY, EWMA_WEEK)
    )
    return np.stack([r, np.sin(angle), np.cos(angle), np.zeros(len(ts)), slow, day, week], axis=1)


def random_walk_bars(symbol: str, n: int, seed: int = 0) -> CleanBars:
    """`n` contiguous clean 1-minute bars of a random walk, for the feature engine."""
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0, 1e-3, n)))
    open_ = np.r_[close[0], close[:-1]]
    high = np.maximum(open_, close) * (1 + rng.uniform(0, 5e-4, n))
    low = np.minimum(open_, close) * (1 - rng.uniform(0, 5e-4, n))
    ts = START_NS + np.arange(n, dtype=np.int64) * NS_PER_MIN
    volume = rng.integers(1, 1000, n).astype(np.float64)
    return CleanBars(symbol, ts, open_, high, low, close, volume, np.zeros(n, dtype=bool))
