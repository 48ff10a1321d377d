"""The TFT against the baselines on the same windows: the best baseline, the difference's
bootstrap interval and Diebold-Mariano test, and the model confidence set over every forecaster
(`model.significance`). Losses in basis points of cumulative log return, per window."""

from __future__ import annotations

from typing import Any

import numpy as np

from model.metrics import pinball_per_window
from model.significance import block_bootstrap, diebold_mariano, model_confidence_set


def window_losses(
    y: np.ndarray, forecasts: dict[str, np.ndarray], quantiles: tuple[float, ...]
) -> dict[str, np.ndarray]:
    """Each forecaster's mean pinball per window `(n,)`, in basis points."""
    return {k: pinball_per_window(y, f, quantiles) * 1e4 for k, f in forecasts.items()}


def compare(loss: dict[str, np.ndarray]) -> dict[str, Any]:
    """The TFT against the baseline with the lowest mean pinball on these windows (chosen after
    the fact: conservative for a claim that the TFT is better): relative gain, a circular block
    bootstrap interval and the Diebold-Mariano test (HLN, a day of HAC lags) of the per-window
    difference (bp; > 0: TFT better); and the model confidence set over every forecaster."""
    best = min((k for k in loss if k != "tft"), key=lambda k: loss[k].mean())
    diff = loss[best] - loss["tft"]
    return {
        "best_baseline": best,
        "tft_mean_pinball": float(loss["tft"].mean()),
        "best_baseline_mean_pinball": float(loss[best].mean()),
        "relative_gain": float(1 - loss["tft"].mean() / loss[best].mean()),
        "gain_bootstrap": block_bootstrap(diff),
        "diebold_mariano": diebold_mariano(diff),
        "confidence_set": model_confidence_set(loss),
    }
