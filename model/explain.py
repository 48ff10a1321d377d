"""What the TFT looked at over a set of windows: attention entropy and mean variable-selection
weights (historical, static, known-future), from the model's own explain outputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from model.dataset import Panel
from model.forecaster import ForecastBatch, Forecaster
from model.metrics import attention_entropy


def explain_windows(
    forecaster: Forecaster, panel: Panel, ends: np.ndarray, batch_size: int
) -> dict[str, Any]:
    """Every feature row is encoded once, then each window's encodings are gathered. The rows'
    encodings are kept in host memory, and of their selection weights only the sum over the
    window ends: years of rows would not fit a GPU (a row's weights alone are 4 bytes a
    feature)."""
    lookback = forecaster.config.lookback
    first, last = int(ends.min()) - lookback + 1, int(ends.max())
    row_symbol = panel.row_symbol
    times_end = np.bincount(ends - first, minlength=last + 1 - first)  # a row's windows
    encoded, hist = [], np.zeros(panel.features.shape[1])
    for start in tqdm(
        range(first, last + 1, batch_size * 8), desc="explain encode", unit="rows", disable=None
    ):
        rows = np.arange(start, min(start + batch_size * 8, last + 1))
        enc, w = forecaster.encode(
            [panel.symbols[i] for i in row_symbol[rows]], panel.features[rows, None, :]
        )
        encoded.append(enc[:, 0].cpu())
        times = torch.from_numpy(times_end[rows - first]).to(w.device, torch.float64)
        hist += (w[:, 0].double() * times[:, None]).sum(0).cpu().numpy()
    all_encoded = torch.cat(encoded)
    hist /= len(ends)
    steps = np.arange(-lookback + 1, 1)
    static, future, entropy, uniform = 0.0, 0.0, 0.0, 0.0
    for start in tqdm(
        range(0, len(ends), batch_size), desc="explain forecast", unit="batch", disable=None
    ):
        t = ends[start : start + batch_size]
        batch = ForecastBatch(
            symbols=[panel.symbols[i] for i in row_symbol[t]],
            ts_event=panel.ts[t],
            close=panel.close[t],
            features=panel.features[t[:, None] + steps],
        )
        result = forecaster.predict_encoded(
            batch, all_encoded[torch.from_numpy(t[:, None] + steps - first)], explain=True
        )
        ex = result.explain
        assert ex is not None
        attention = ex.attention.float().cpu().numpy()
        n = len(t)
        entropy += attention_entropy(attention) * n
        uniform += float(np.log((attention > 0).sum(-1)).mean()) * n
        static += ex.static_weights.float().sum(0).cpu().numpy()
        future += ex.future_weights.float().mean(1).sum(0).cpu().numpy()
    n = len(ends)
    return {
        "attention_entropy": entropy / n,
        "attention_entropy_uniform": uniform / n,
        "hist": hist,
        "static": static / n,
        "future": future / n,
    }
