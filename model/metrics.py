"""Forecast metrics on numpy arrays: y `(n, H)` realized returns, q `(n, H, Q)` quantile forecasts.

Pinball loss, the TFT paper's q-risk, MAE of the median, coverage; attention entropy.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def pinball(y: np.ndarray, q: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Mean pinball (quantile) loss per horizon and quantile, `(H, Q)`."""
    return pinball_losses(y, q, quantiles).mean(axis=0)


def pinball_losses(y: np.ndarray, q: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Pinball loss of each window, horizon and quantile, `(n, H, Q)`: the worker's scores."""
    err = y[..., None] - q
    levels = np.asarray(quantiles)
    return np.maximum(levels * err, (levels - 1.0) * err)


def pinball_per_window(y: np.ndarray, q: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Pinball loss of each window `(n,)`, averaged over horizons and quantiles."""
    err = y[..., None] - q
    levels = np.asarray(quantiles)
    return np.maximum(levels * err, (levels - 1.0) * err).mean(axis=(1, 2))


def q_risk(y: np.ndarray, q: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Normalized quantile loss per quantile, `(Q,)`: 2 * sum(QL) / sum(|y|) (Lim et al. 2021)."""
    total = np.abs(y).sum()
    if total == 0:
        raise ValueError(
            "q-risk is undefined when every realized return is 0; evaluate on "
            "windows where the price moved"
        )
    return 2.0 * pinball(y, q, quantiles).sum(axis=0) * len(y) / total


def coverage(y: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of y at or below each quantile `(H, Q)`, and inside [lowest, highest] `(H,)`."""
    below = (y[..., None] <= q).mean(axis=0)
    inside = ((y >= q[..., 0]) & (y <= q[..., -1])).mean(axis=0)
    return below, inside


def summarize(
    y: np.ndarray, q: np.ndarray, quantiles: tuple[float, ...], unit: float = 1e4
) -> dict[str, Any]:
    """Every metric of one forecaster; losses in `unit`s of log return (1e4: basis points)."""
    median = quantiles.index(0.5)
    loss = pinball(y, q, quantiles) * unit
    below, inside = coverage(y, q)
    return {
        "mean_pinball": float(loss.mean()),
        "pinball_per_horizon": loss.mean(axis=1).tolist(),
        "pinball_per_quantile": dict(
            zip(map(str, quantiles), loss.mean(axis=0).tolist(), strict=True)
        ),
        "pinball": loss.tolist(),
        "q_risk": dict(zip(map(str, quantiles), q_risk(y, q, quantiles).tolist(), strict=True)),
        "mae_median": float(np.abs(y - q[..., median]).mean() * unit),
        "coverage_below": dict(zip(map(str, quantiles), below.mean(axis=0).tolist(), strict=True)),
        "coverage_interval": float(inside.mean()),
        "coverage_interval_per_horizon": inside.tolist(),
        "interval_nominal": quantiles[-1] - quantiles[0],
    }


def attention_entropy(weights: np.ndarray) -> float:
    """Mean entropy (nats) of attention distributions `(..., S)` (masked positions hold 0).

    0 means every query attends to a single position (collapsed attention).
    """
    p = np.clip(weights, 1e-12, 1.0)
    return float(-(weights * np.log(p)).sum(axis=-1).mean())
