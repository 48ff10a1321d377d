"""`barcast evaluate`: the model against two baselines on the same held-out windows.

Baselines: persistence (zero return; quantiles from the training label distribution, stored in
the checkpoint) and rolling empirical quantiles of each horizon's past returns over the last
`rolling_window` bars of the same symbol. Also reported: attention entropy, variable-selection
importances and the accuracy change of the INT8 model. Writes evaluation.json, calibration.png
and fan_chart.png.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from model import plots
from model.bars import data_fingerprint, load_bars
from model.covariates import FUTURE_NAMES, STATIC_NAMES
from model.dataset import Panel, Part, Split, build_panel, window_ends
from model.forecaster import ForecastBatch, Forecaster
from model.metrics import attention_entropy, coverage, summarize

ROLLING_WINDOW = 1380  # one CME Globex trading day of 1-minute bars
PARTS = ("test", "val", "all")


def evaluate(
    checkpoint_dir: Path,
    paths: list[Path],
    *,
    part: str = "test",
    cpu_precision: str = "fp32",
    device: str = "auto",
    out_dir: Path | None = None,
    rolling_window: int = ROLLING_WINDOW,
    batch_size: int = 256,
) -> dict[str, Any]:
    from features.engine import FEATURE_NAMES, FINGERPRINT

    model = Forecaster(
        checkpoint_dir, device=device, cpu_precision=cpu_precision, expected_fingerprint=FINGERPRINT
    )
    forecasters = {model.name: model}
    for precision in ("fp32", "int8"):  # the INT8 change is always measured on the CPU
        if f"cpu-{precision}" not in forecasters:
            forecasters[f"cpu-{precision}"] = Forecaster(
                checkpoint_dir,
                device="cpu",
                cpu_precision=precision,
                expected_fingerprint=FINGERPRINT,
            )
    config = model.config
    bars, data_report = load_bars(paths)
    panel = build_panel(bars, config.horizon)
    ends = evaluation_windows(
        panel, Split.from_dict(model.meta.data["split"]), part, config.lookback, config.horizon
    )
    y = panel.targets[ends]

    runs = {name: run_model(f, panel, ends, batch_size) for name, f in forecasters.items()}
    q, explain = runs[model.name]
    int8_q, fp32_q = runs["cpu-int8"][0], runs["cpu-fp32"][0]
    forecasts = {
        "tft": q,
        "persistence": persistence(model.meta.persistence_quantiles, len(ends)),
        "rolling_quantiles": rolling_quantiles(panel, ends, config.quantiles, rolling_window),
    }
    quantiles = config.quantiles
    results = {name: summarize(y, f, quantiles) for name, f in forecasts.items()}
    by_precision = {
        name: summarize(y, run[0], quantiles)["mean_pinball"] for name, run in runs.items()
    }
    int8, fp32 = by_precision["cpu-int8"], by_precision["cpu-fp32"]
    report = {
        "checkpoint": str(checkpoint_dir),
        "model_id": model.model_id,
        "feature_fingerprint": model.fingerprint,
        "device": model.name,
        "data": {
            "files": data_report["files"],
            "fingerprint": data_fingerprint(data_report),
            "trained_on": model.meta.data.get("fingerprint"),
            "corrections": data_report["corrections"],
        },
        "part": part,
        "n_windows": len(ends),
        "first_window_ts": _iso(panel.ts[ends].min()),
        "last_window_ts": _iso(panel.ts[ends].max()),
        "units": "basis points of cumulative log return",
        "rolling_window_bars": rolling_window,
        "model": results["tft"],
        "baselines": {k: v for k, v in results.items() if k != "tft"},
        "beats_rolling_quantiles": results["tft"]["mean_pinball"]
        < results["rolling_quantiles"]["mean_pinball"],
        "int8": {
            "fp32_mean_pinball": fp32,
            "int8_mean_pinball": int8,
            "change": int8 - fp32,
            "relative_change": (int8 - fp32) / fp32,
            "max_abs_quantile_diff_bp": float(np.abs(int8_q - fp32_q).max() * 1e4),
        },
        "mean_pinball_by_precision": by_precision,
        "attention_entropy": explain["attention_entropy"],
        "attention_entropy_uniform": explain["attention_entropy_uniform"],
        "importance": {
            "historical": _ranked(FEATURE_NAMES, explain["hist"]),
            "static": _ranked(STATIC_NAMES, explain["static"]),
            "future": _ranked(FUTURE_NAMES, explain["future"]),
            "n_historical_inputs": len(explain["hist"]),
        },
    }
    out_dir = out_dir or Path(checkpoint_dir) / "evaluation"
    write_report(out_dir, report, panel, ends, y, forecasts, model, quantiles)
    return report


def evaluation_windows(
    panel: Panel, split: Split, part: str, lookback: int, horizon: int
) -> np.ndarray:
    if part not in PARTS:
        raise ValueError(f"--split {part!r}; use one of {PARTS}")
    if part == "all":  # every window of the data, e.g. a file the model never saw
        start = int(panel.ts.min())
        split = replace(split, train_end=start, val_end=start)
    ends = window_ends(panel, split, Part.VAL if part == "val" else Part.TEST, lookback, horizon)
    if len(ends) == 0:
        raise ValueError(
            f"no complete {part} window in the data: the checkpoint's {part} period starts at "
            f"{_iso(split.val_end if part == 'test' else split.train_end)}; pass data covering "
            "it, or --split all for data the model was not trained on"
        )
    return ends


def run_model(
    forecaster: Forecaster, panel: Panel, ends: np.ndarray, batch_size: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """Quantile forecasts `(n, H, Q)` of every window, plus attention/selection summaries.

    Runs the worker's incremental path: every feature row is encoded once, then each window's
    encodings are gathered and forecast (`Forecaster.encode` + `predict_encoded`).
    """
    lookback = forecaster.config.lookback
    first, last = int(ends.min()) - lookback + 1, int(ends.max())
    row_symbol = panel.row_symbol
    encoded, weights = [], []
    for start in range(first, last + 1, batch_size * 8):
        rows = np.arange(start, min(start + batch_size * 8, last + 1))
        enc, w = forecaster.encode(
            [panel.symbols[i] for i in row_symbol[rows]], panel.features[rows, None, :]
        )
        encoded.append(enc[:, 0])
        weights.append(w[:, 0])
        _progress(f"{forecaster.name} encode", rows[-1] - first + 1, last - first + 1)
    all_encoded = torch.cat(encoded)
    hist = (torch.cat(weights)[torch.from_numpy(ends - first)]).mean(0).cpu().numpy()
    steps = np.arange(-lookback + 1, 1)
    out, static, future, entropy, uniform = [], 0.0, 0.0, 0.0, 0.0
    for start in range(0, len(ends), batch_size):
        t = ends[start : start + batch_size]
        batch = ForecastBatch(
            symbols=[panel.symbols[i] for i in row_symbol[t]],
            ts_event=panel.ts[t],
            close=panel.close[t],
        )
        result = forecaster.predict_encoded(
            batch, all_encoded[torch.from_numpy(t[:, None] + steps - first)], explain=True
        )
        out.append(result.quantiles)
        ex = result.explain
        assert ex is not None
        attention = ex.attention.float().cpu().numpy()
        n = len(t)
        entropy += attention_entropy(attention) * n
        uniform += float(np.log((attention > 0).sum(-1)).mean()) * n
        static += ex.static_weights.float().sum(0).cpu().numpy()
        future += ex.future_weights.float().mean(1).sum(0).cpu().numpy()
        _progress(f"{forecaster.name} forecast", start + n, len(ends))
    sys.stderr.write("\n")
    n = len(ends)
    return np.concatenate(out), {
        "attention_entropy": entropy / n,
        "attention_entropy_uniform": uniform / n,
        "hist": hist,
        "static": static / n,
        "future": future / n,
    }


def persistence(train_quantiles: np.ndarray, n: int) -> np.ndarray:
    """Zero-return median; the other quantiles from the training labels, per horizon."""
    q = train_quantiles.copy()
    q[:, q.shape[1] // 2] = 0.0
    return np.broadcast_to(q, (n, *q.shape)).copy()


def rolling_quantiles(
    panel: Panel, ends: np.ndarray, quantiles: tuple[float, ...], window: int
) -> np.ndarray:
    """Empirical quantiles of the k-bar returns that ended at or before each window's last bar,
    over the previous `window` bars of the same symbol; `(n, H, Q)`."""
    horizon = panel.targets.shape[1]
    out = np.empty((len(ends), horizon, len(quantiles)))
    for k in range(1, horizon + 1):
        # past_k[s] = the k-bar return realized at s = targets[s - k, k - 1]
        past = np.full(len(panel.ts), np.nan)
        past[k:] = panel.targets[:-k, k - 1]
        for i in range(len(panel.symbols)):
            lo = panel.offsets[i]
            past[lo : lo + k] = np.nan  # those would come from the previous symbol
        groups = pd.Series(past).groupby(panel.row_symbol)
        for j, level in enumerate(quantiles):
            rolled = groups.rolling(window, min_periods=window // 4).quantile(level)
            out[:, k - 1, j] = rolled.droplevel(0).sort_index().to_numpy()[ends]
    if np.isnan(out).any():
        raise ValueError(
            f"the rolling baseline needs {window // 4} past bars before the first "
            "window; evaluate on data with more history"
        )
    return out


def write_report(
    out_dir: Path,
    report: dict[str, Any],
    panel: Panel,
    ends: np.ndarray,
    y: np.ndarray,
    forecasts: dict[str, np.ndarray],
    model: Forecaster,
    quantiles: tuple[float, ...],
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "evaluation.json").write_text(json.dumps(report, indent=1))
    plots.calibration(
        out_dir / "calibration.png",
        quantiles,
        {name: coverage(y, f)[0] for name, f in forecasts.items()},
    )
    # Fan chart: the middle 240 bars of the first evaluated symbol, a fan every 20 bars.
    symbol_ends = ends[panel.row_symbol[ends] == panel.row_symbol[ends[0]]]
    mid = len(symbol_ends) // 2
    shown = symbol_ends[max(0, mid - 120) : mid + 120]
    rows = np.arange(shown[0], shown[-1] + model.config.horizon + 1)
    origins = shown[::20]
    prices = (
        np.exp(forecasts["tft"][np.searchsorted(ends, origins)]) * panel.close[origins, None, None]
    )
    plots.fan_chart(
        out_dir / "fan_chart.png",
        panel.ts[rows],
        panel.close[rows],
        origins - rows[0],
        prices,
        f"{panel.symbols[panel.row_symbol[ends[0]]]} from {_iso(panel.ts[rows[0]])}: "
        f"TFT q10-q90 forecasts vs realized close",
    )


def _ranked(names: Any, weights: np.ndarray) -> dict[str, float]:
    order = np.argsort(weights)[::-1]
    return {str(names[i]): float(weights[i]) for i in order}


def _iso(ts: int) -> str:
    return str(pd.Timestamp(int(ts), unit="ns", tz="UTC"))


def _progress(name: str, done: int, total: int) -> None:
    sys.stderr.write(f"\r{name}: {done}/{total} windows")
    sys.stderr.flush()
