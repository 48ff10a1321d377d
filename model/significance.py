"""Is one forecaster's mean loss really lower? A moving-block bootstrap of the mean difference.

Window losses are serially dependent: neighbouring windows share most of their label bars and
volatility clusters for hours. Resampling whole blocks of consecutive windows (Künsch 1989)
keeps that dependence inside each block, so the interval is not the far too narrow one an i.i.d.
bootstrap would give.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BLOCK = 240  # consecutive windows per block: four hours of one symbol's minutes
REPLICATES = 2000


def block_bootstrap(
    diff: np.ndarray, block: int = BLOCK, replicates: int = REPLICATES, seed: int = 0
) -> dict[str, Any]:
    """Mean of `diff` (one value per window, in time order) and its 95 % percentile interval."""
    n = len(diff)
    if n == 0:
        raise ValueError("no window to compare")
    block = max(1, min(block, n))
    rng = np.random.default_rng(seed)
    k = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(replicates, k))
    # Block sums from prefix sums: memory replicates x k, not replicates x n.
    prefix = np.concatenate([[0.0], np.cumsum(diff, dtype=np.float64)])
    lengths = np.full(k, block)
    lengths[-1] = n - (k - 1) * block  # the last block is cut where n windows are reached
    means = (prefix[starts + lengths] - prefix[starts]).sum(axis=1) / n
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {
        "mean": float(diff.mean()),
        "ci95": [float(lo), float(hi)],
        "excludes_zero": bool(lo > 0 or hi < 0),
        "block": block,
        "replicates": replicates,
    }
