"""Forecasts as served: each forecaster's quantiles through the worker's online calibration.

The worker publishes the forecast engine's quantiles after its online calibration
(`model.serving.conformal`), which every scored forecast moves. To score every forecaster on the
same terms as the published TFT, each one's quantiles become `forecasts` values and go through
`calibrate_offline`: the worker's scorer and calibrator, bar by bar in the worker's order, so
each forecast is calibrated with exactly the scores the bars before it decided. A checkpoint
starts its calibration afresh at its first forecast (another model id), as each forecaster does
here at its first window: a checkpoint deployed when the scored period starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from features.bars import PRICE_SCALE
from model.dataset import Panel
from model.serving.conformal import CalibrationConfig, calibrate_offline
from model.serving.scoring import QUANTILES

SERVED_QUANTILES = tuple(QUANTILES.values())  # what a `forecasts` value holds


def online_calibrated(
    panel: Panel,
    ends: np.ndarray,
    forecasts: dict[str, np.ndarray],
    config: CalibrationConfig | None = None,
) -> dict[str, np.ndarray]:
    """Each forecaster's quantiles `(n, H, Q)` on windows `ends` (each symbol's in time order)
    as the worker would publish them after its online calibration."""
    config = config or CalibrationConfig()
    bars = clean_bars(panel, ends)
    return {name: served(panel, ends, q, bars, name, config) for name, q in forecasts.items()}


def served(
    panel: Panel,
    ends: np.ndarray,
    q: np.ndarray,
    bars: list[dict[str, Any]],
    model_id: str,
    config: CalibrationConfig,
) -> np.ndarray:
    """One forecaster's quantiles through `calibrate_offline`."""
    horizons = list(range(1, q.shape[1] + 1))
    values = [
        {
            "symbol": panel.symbols[panel.row_symbol[t]],
            "ts_event": int(panel.ts[t]),
            "close": float(panel.close[t]),
            "horizons": horizons,
            "model_id": model_id,
        }
        | {name: q[i, :, j].tolist() for j, name in enumerate(QUANTILES)}
        for i, t in enumerate(ends)
    ]
    out = calibrate_offline(values, bars, config)
    if len(out) != len(ends):
        raise ValueError("a window to calibrate online has no bar; windows come from the panel")
    return np.stack([np.column_stack([v[name] for name in QUANTILES]) for v in out])


def clean_bars(panel: Panel, ends: np.ndarray) -> list[dict[str, Any]]:
    """The `bars.clean` values a scorer needs of each symbol, from its first window in `ends`
    on, in time order (prices back in the bars' fixed point, as the feature engine read them)."""
    out = []
    row_symbol = panel.row_symbol
    for i, symbol in enumerate(panel.symbols):
        hi = int(panel.offsets[i + 1])
        mine = ends[row_symbol[ends] == i]
        if not len(mine):
            continue
        for t in range(int(mine.min()), hi):
            out.append(
                {
                    "symbol": symbol,
                    "ts_event": int(panel.ts[t]),
                    "close": round(panel.close[t] / PRICE_SCALE),
                    "status": "synthetic" if panel.synthetic[t] else "clean",
                }
            )
    return out
