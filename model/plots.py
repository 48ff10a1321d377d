"""PNG figures (matplotlib, Agg backend): training curve, calibration, forecast fan chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def training_curve(path: Path, history: list[dict[str, Any]]) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    epochs = [h["epoch"] for h in history]
    ax.plot(epochs, [h["train_loss"] for h in history], "o-", label="train")
    ax.plot(epochs, [h["val_loss"] for h in history], "s-", label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("pinball loss (target units)")
    ax.set_title("TFT training curve")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def calibration(path: Path, quantiles: tuple[float, ...], observed: dict[str, np.ndarray]) -> None:
    """Observed fraction of outcomes below each forecast quantile, per forecaster `(H, Q)`."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect")
    for (name, below), marker in zip(observed.items(), "os^v", strict=False):
        ax.plot(quantiles, below.mean(axis=0), marker + "-", label=f"{name} (mean)")
        for row in below:
            ax.plot(quantiles, row, marker, alpha=0.25, color=ax.lines[-1].get_color())
    ax.set_xlabel("nominal quantile")
    ax.set_ylabel("observed fraction below")
    ax.set_title("Calibration (dots: horizons 1..H)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fan_chart(
    path: Path,
    ts: np.ndarray,
    close: np.ndarray,
    origins: np.ndarray,
    prices: np.ndarray,
    title: str,
) -> None:
    """Realized close over `ts` (ns) and, from each origin index, the forecast price quantiles
    `(n_origins, H, Q)`: the outer quantiles shaded, the median drawn."""
    plt = _pyplot()
    minutes = (ts - ts[0]) / 60e9
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.plot(minutes, close, "k-", lw=1, label="close")
    horizon = prices.shape[1]
    for i, (origin, fan) in enumerate(zip(origins, prices, strict=True)):
        x = minutes[origin] + np.arange(0, horizon + 1)

        def anchored(values: np.ndarray, o: int = origin) -> np.ndarray:
            return np.concatenate([[close[o]], values])

        ax.fill_between(
            x,
            anchored(fan[:, 0]),
            anchored(fan[:, -1]),
            color="tab:blue",
            alpha=0.25,
            label="q10-q90" if i == 0 else None,
        )
        ax.plot(
            x,
            anchored(fan[:, fan.shape[1] // 2]),
            color="tab:blue",
            lw=1,
            label="median" if i == 0 else None,
        )
    ax.set_xlabel("minutes")
    ax.set_ylabel("price")
    ax.set_title(title)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
