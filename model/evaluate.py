"""`barcast evaluate`: the served forecasts against the baselines, on the same windows and terms.

The windows are those the worker forecasts (a real last bar, warm features; `model.dataset`),
and the TFT's quantiles come from the serving engine itself (`ForecastEngine`). Every
forecaster, the TFT and its own volatility scale without the network among them, is calibrated
the same way on the same calibration windows (`model.calibrated_baselines`): the checkpoint's
calibration split, or with `--split all` the first 20 % of the data's bars; the TFT's interval
scale is fitted there too, in place of the checkpoint's. With `--split all`, the time-of-day
baselines may also take a time-of-day profile fitted on those bars, as a user would on a
product or period the checkpoint never saw (the calibration windows choose). Each is also
scored as served: its calibrated quantiles through the worker's online calibration
(`model.as_served`), the TFT's from the engine with the checkpoint's own calibration, as the
worker publishes them. Windows whose labels run over gap fills are scored on a line of their
own and calibrate nobody; windows where some forecaster has too little history are left out for
all and counted.
Also reported, offline and as served: the TFT against the best baseline (block-bootstrap
interval, Diebold-Mariano test) and the model confidence set over every forecaster; attention
entropy and variable-selection importances.
Writes evaluation.json, losses.npz (every forecaster's loss per window), calibration.png and
fan_chart.png.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from model import plots
from model.as_served import SERVED_QUANTILES, online_calibrated
from model.bar_files import BarSource, data_fingerprint, iso_utc, load_bars
from model.calibrated_baselines import calibrated_forecasts
from model.calibration import apply_interval_scale
from model.comparison import compare, window_losses
from model.covariates import STATIC_NAMES
from model.dataset import Panel, build_panel, labels_over_gap_fills
from model.evaluation_windows import EvaluationWindows, choose_windows
from model.explain import explain_windows
from model.forecaster import Forecaster
from model.metrics import coverage, summarize
from model.releases import future_names

if TYPE_CHECKING:  # the engine module is imported when evaluating, not with this one
    from model.serving.forecast_engine import ForecastEngine

ROLLING_WINDOW = 1380  # one CME Globex trading day of 1-minute bars
LOSSES = "losses.npz"  # per-window losses, beside evaluation.json


def evaluate(
    checkpoint_dir: Path,
    sources: list[BarSource] | list[Path],
    *,
    part: str = "test",
    device: str = "auto",
    out_dir: Path | None = None,
    rolling_window: int = ROLLING_WINDOW,
    batch_size: int = 256,
) -> dict[str, Any]:
    """Evaluate the checkpoint on the bars of `sources` and write the report's files:

    1. Load the checkpoint into the serving engine and the bars into a feature panel.
    2. Choose the windows scored and those that calibrate (`model.evaluation_windows`).
    3. Every forecaster's quantiles there, calibrated alike, scored offline.
    4. The same forecasts scored as the worker would publish them.
    5. The report: evaluation.json, losses.npz and the figures.
    """
    from model.serving.forecast_engine import ForecastEngine

    # 1. The served model and the data.
    engine = ForecastEngine(checkpoint_dir, device)
    forecaster = engine.served.forecaster
    config = forecaster.config
    bars, data_report = load_bars(sources)
    panel = build_panel(bars, config.horizon)
    # 2. The windows.
    windows = choose_windows(panel, forecaster.meta, part, data_report["files"])
    ends = windows.scored
    # 3. Offline.
    forecasts, fitted, deployed, calibrated_on = every_forecaster(
        engine, panel, windows, rolling_window, batch_size
    )
    scored, scores, losses = score(panel, ends, forecasts, fitted, config.quantiles)
    # 4. As served.
    served_report, served_losses = as_served(
        panel, ends, scored, forecasts | {"tft": deployed}, config.quantiles
    )
    # 5. The report.
    report = {
        "checkpoint": str(checkpoint_dir),
        "model_id": forecaster.model_id,
        "feature_fingerprint": forecaster.fingerprint,
        "device": forecaster.name,
        "data": data_section(data_report, forecaster.meta.data),
        "part": part,
        "calibration": windows.source | calibrated_span(panel, calibrated_on, windows),
        "rolling_window_bars": rolling_window,
        **scores,
        "as_served": served_report,
        **importance(forecaster, panel, ends[scored], batch_size, checkpoint_dir),
    }
    out_dir = out_dir or Path(checkpoint_dir) / "evaluation"
    shown = {k: f[scored] for k, f in forecasts.items()}
    y = panel.targets[ends[scored]]
    write_report(out_dir, report, panel, ends[scored], y, shown, config.horizon, config.quantiles)
    write_losses(out_dir / LOSSES, panel, ends[scored], losses, served_losses)
    return report


def data_section(data_report: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """The bars evaluated (`load_bars`' report) beside the fingerprint of those the checkpoint
    was trained on (its `meta.data`)."""
    return {
        "files": data_report["files"],
        "fingerprint": data_fingerprint(data_report),
        "trained_on": trained.get("fingerprint"),
        "corrections": data_report["corrections"],
    }


def calibrated_span(
    panel: Panel, calibrated_on: np.ndarray, windows: EvaluationWindows
) -> dict[str, Any]:
    """How many of the calibration period's windows calibrated, and when they start and end."""
    return {
        "n_windows": len(calibrated_on),
        "n_windows_in_period": len(windows.calibration),
        "first_window_ts": iso_utc(panel.ts[calibrated_on].min()),
        "last_window_ts": iso_utc(panel.ts[calibrated_on].max()),
    }


def every_forecaster(
    engine: ForecastEngine,
    panel: Panel,
    windows: EvaluationWindows,
    rolling_window: int,
    batch_size: int,
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]], np.ndarray, np.ndarray]:
    """Every forecaster's offline quantiles on the scored windows and what was fitted for each,
    the TFT's as the engine serves them, and the calibration windows used. The engine runs on
    the calibration windows too: offline, the TFT is calibrated like every forecaster, from its
    quantiles before the checkpoint's interval scale (which `apply_interval_scale` with its
    inverse recovers)."""
    meta = engine.served.forecaster.meta
    ends, fit_ends = windows.scored, windows.calibration
    deployed = run_engine(engine, panel, np.concatenate([fit_ends, ends]), batch_size, "tft")
    median = meta.config.quantiles.index(0.5)
    tft = apply_interval_scale(deployed, 1.0 / meta.interval_scale, median)
    forecasts, fitted, calibrated_on = calibrated_forecasts(
        panel, ends, fit_ends, meta, rolling_window, tft, windows.selection, windows.profiles
    )
    return forecasts, fitted, deployed[len(fit_ends) :], calibrated_on


def score(
    panel: Panel,
    ends: np.ndarray,
    forecasts: dict[str, np.ndarray],
    fitted: dict[str, dict[str, Any]],
    quantiles: tuple[float, ...],
) -> tuple[np.ndarray, dict[str, Any], dict[str, np.ndarray]]:
    """Which windows are scored (every forecaster defined, no gap fill under the label), every
    figure of the report on them (the gap-fill windows on a line of their own), and each
    forecaster's loss per scored window (bp)."""
    y = panel.targets[ends]
    defined = np.all([np.isfinite(f).all(axis=(1, 2)) for f in forecasts.values()], axis=0)
    over_gap = labels_over_gap_fills(panel, ends, panel.targets.shape[1])
    scored = defined & ~over_gap
    if not scored.any():
        raise ValueError("no window where every forecaster is defined; give more history")
    results = {name: summarize(y[scored], f[scored], quantiles) for name, f in forecasts.items()}
    apart = defined & over_gap
    losses = window_losses(y[scored], {k: f[scored] for k, f in forecasts.items()}, quantiles)
    return (
        scored,
        {
            "n_windows": int(scored.sum()),
            "left_out": left_out_counts(forecasts, defined, over_gap),
            "first_window_ts": iso_utc(panel.ts[ends[scored]].min()),
            "last_window_ts": iso_utc(panel.ts[ends[scored]].max()),
            "units": "basis points of cumulative log return",
            "model": results["tft"] | fitted.get("tft", {}),
            "baselines": {k: v | fitted.get(k, {}) for k, v in results.items() if k != "tft"},
            "labels_over_gap_fills": {
                name: summarize(y[apart], f[apart], quantiles) for name, f in forecasts.items()
            }
            if apart.any()
            else {},
            "comparison": compare(losses),
        },
        losses,
    )


def as_served(
    panel: Panel,
    ends: np.ndarray,
    scored: np.ndarray,
    forecasts: dict[str, np.ndarray],
    quantiles: tuple[float, ...],
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Every forecaster scored as the worker would publish it: online calibration over every
    window where all are defined (the scorer skips labels over gap fills, as in the worker),
    scored on the windows of the offline figures; and each one's loss per window (bp)."""
    if quantiles != SERVED_QUANTILES:
        skipped = f"the worker publishes quantiles {SERVED_QUANTILES}, not {quantiles}"
        return {"skipped": skipped}, {}
    defined = np.all([np.isfinite(f).all(axis=(1, 2)) for f in forecasts.values()], axis=0)
    served = online_calibrated(panel, ends[defined], {k: f[defined] for k, f in forecasts.items()})
    keep = scored[defined]
    y = panel.targets[ends[defined][keep]]
    shown = {k: f[keep] for k, f in served.items()}
    results = {name: summarize(y, f, quantiles) for name, f in shown.items()}
    losses = window_losses(y, shown, quantiles)
    return {
        "tft": "the engine's quantiles with the checkpoint's own interval scale, as published",
        "online_calibration": "model.serving.conformal defaults, from each forecaster's first "
        "window (a checkpoint deployed when the scored period starts)",
        "n_windows": int(keep.sum()),
        "model": results["tft"],
        "baselines": {k: v for k, v in results.items() if k != "tft"},
        "comparison": compare(losses),
    }, losses


def importance(
    forecaster: Forecaster, panel: Panel, ends: np.ndarray, batch_size: int, checkpoint: Path
) -> dict[str, Any]:
    """Attention entropy and variable-selection importances over the scored windows. The
    selection weights depend on a bar's features and the symbol only, so they are every
    encoder's; the attention of a stream checkpoint depends on the state its stream carried
    in, which `explain_windows` (each window encoded from the static state) does not have."""
    from features.engine import FEATURE_NAMES

    explain = explain_windows(forecaster, panel, ends, batch_size)
    attention = {
        "attention_entropy": explain["attention_entropy"],
        "attention_entropy_uniform": explain["attention_entropy_uniform"],
    }
    if forecaster.config.encoder == "stream":
        attention = {
            "attention_entropy": None,
            "attention_skipped": f"{checkpoint} has the stream encoder: its attention "
            "depends on the state carried from earlier bars, which a window alone does not give; "
            "its variable-selection importances are exact. For attention figures, evaluate "
            "a window-encoder checkpoint of the same recipe",
        }
    return attention | {
        "importance": {
            "historical": _ranked(FEATURE_NAMES, explain["hist"]),
            "static": _ranked(STATIC_NAMES, explain["static"]),
            "future": _ranked(future_names(forecaster.config.releases), explain["future"]),
            "n_historical_inputs": len(explain["hist"]),
        },
    }


def run_engine(
    engine: ForecastEngine, panel: Panel, ends: np.ndarray, batch_size: int, name: str
) -> np.ndarray:
    """The serving engine's quantiles `(n, H, Q)` of every window, fed as the worker feeds it:
    each symbol's windows in order, so its step-encoding cache works as in a replay."""
    from model.serving.forecast_engine import WindowRequest

    lookback, lo = engine.lookback, panel.offsets[panel.row_symbol]
    requests = [
        WindowRequest(
            symbol=panel.symbols[panel.row_symbol[t]],
            key=b"",
            partition=0,
            count=int(t - lo[t] + 1),
            values=panel.features[t - lookback + 1 : t + 1],
            ts_event=int(panel.ts[t]),
            close=float(panel.close[t]),
            received_ns=0,
        )
        for t in ends
    ]
    out = []
    for start in tqdm(
        range(0, len(requests), batch_size), desc=f"{name} forecasts", unit="batch", disable=None
    ):
        out.append(engine.predict(requests[start : start + batch_size]))
    return np.concatenate(out)


def left_out_counts(
    forecasts: dict[str, np.ndarray], defined: np.ndarray, over_gap: np.ndarray
) -> dict[str, int]:
    """Why windows of the period are not on the main line."""
    counts = {
        f"{name}: too little history": int((~np.isfinite(f).all(axis=(1, 2))).sum())
        for name, f in forecasts.items()
    }
    return {k: v for k, v in counts.items() if v} | {
        "labels over gap fills (scored apart)": int((defined & over_gap).sum())
    }


def write_report(
    out_dir: Path,
    report: dict[str, Any],
    panel: Panel,
    ends: np.ndarray,
    y: np.ndarray,
    forecasts: dict[str, np.ndarray],
    horizon: int,
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
    rows = np.arange(shown[0], shown[-1] + horizon + 1)
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
        f"{panel.symbols[panel.row_symbol[ends[0]]]} from {iso_utc(panel.ts[rows[0]])}: "
        f"TFT q10-q90 forecasts vs realized close",
    )


def write_losses(
    path: Path,
    panel: Panel,
    ends: np.ndarray,
    offline: dict[str, np.ndarray],
    served: dict[str, np.ndarray],
) -> None:
    """Each forecaster's mean pinball (bp) per scored window, offline and as served, with the
    windows' symbols and times: what pooled comparisons over several evaluations resample."""
    np.savez_compressed(
        path,
        ts=panel.ts[ends],
        symbol=np.asarray(panel.symbols)[panel.row_symbol[ends]],
        **{f"offline/{k}": v for k, v in offline.items()},
        **{f"served/{k}": v for k, v in served.items()},
    )


def _ranked(names: Any, weights: np.ndarray) -> dict[str, float]:
    order = np.argsort(weights)[::-1]
    return {str(names[i]): float(weights[i]) for i in order}
