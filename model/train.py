"""`barcast train`: bars -> corrections -> features (a float32 panel) -> time splits (by
fractions or dates) -> normalization and volatility scale (training rows only) -> the loop
(`model.loop`) -> interval calibration -> checkpoint.

Each completed epoch saves the loop's state (`model.training_state`): `resume=True` continues an
interrupted run from there and ends with the checkpoint the uninterrupted run would have written.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model import checkpoint, plots
from model.bar_files import BarSource, DataError, data_fingerprint, load_bars, parse_utc
from model.calibrated_baselines import fit_served
from model.calibration import (
    FAST_HALFLIVES,
    FastBlend,
    fit_fast,
    fit_interval_scale,
    fit_shrink,
    toward_scale,
)
from model.carry import carry_check
from model.config import TFTConfig, TrainConfig
from model.covariates import SymbolVocab
from model.dataset import (
    TRAINING_DTYPE,
    Panel,
    Part,
    Split,
    WindowData,
    WindowsOf,
    build_panel,
    calibration_windows,
    fit_normalizer,
    fit_profile,
    ignored_names,
    target_quantiles,
    window_ends,
    window_rows,
)
from model.forecaster import resolve_device
from model.guards import TrainingError, check_every_product_trains
from model.loop import fit, log, predict_windows, seed_everything
from model.normalization import Normalizer
from model.releases import release_calendar
from model.serving import baselines as served_baselines
from model.splits import check_fractions, check_order
from model.tft import TemporalFusionTransformer
from model.training_state import STATE_FILE, TrainingState
from model.volatility import SCALE_INPUTS, VolatilityScale, per_window


def train(
    sources: list[BarSource] | list[Path],
    out_dir: Path,
    model_config: TFTConfig,
    train_config: TrainConfig,
    resume: bool = False,
) -> dict[str, Any]:
    """`barcast train`: bars -> corrections -> features -> windows -> fit -> checkpoint."""
    from features.engine import FINGERPRINT

    check_resumable(out_dir, resume)
    split_dates(train_config)  # a wrong date or fraction fails now, not after reading the bars
    bars, report = load_bars(sources)
    seconds = report.pop("seconds")
    log(
        train_config,
        f"bars: {report['bars_per_symbol']} (read in {seconds['read']:.0f}s, corrected in "
        f"{seconds['corrections']:.0f}s); corrections: "
        f"{ {k: v for k, v in report['corrections'].items() if v} }",
    )
    panel = build_panel(bars, model_config.horizon, TRAINING_DTYPE)
    del bars  # the panel holds what training reads of them
    report["fingerprint"] = data_fingerprint(report)
    return train_on_panel(
        panel, out_dir, model_config, train_config, FINGERPRINT, report, resume=resume
    )


def check_resumable(out_dir: Path, resume: bool) -> None:
    """A run resumes a state that is there, and a new run never overwrites one."""
    path = Path(out_dir) / STATE_FILE
    if resume and not path.exists():
        raise TrainingError(
            f"--resume: {out_dir} holds no unfinished run ({STATE_FILE}); train without "
            "--resume to start one"
        )
    if not resume and path.exists():
        raise TrainingError(
            f"{out_dir} holds an unfinished run ({STATE_FILE}): pass --resume to continue it, "
            "or delete that file (or choose another --out) to start over"
        )


@dataclass(frozen=True)
class TrainingInputs:
    """The panel's windows in time and what scales the network's inputs and outputs, fitted
    before the network on training rows only."""

    split: Split
    ends: dict[Part, np.ndarray]  # each part's windows
    normalizer: Normalizer
    target_scale: float
    volatility: VolatilityScale
    vocab: SymbolVocab
    config: TFTConfig  # the model's, sized to the panel's symbols and features
    data: WindowData
    windows: dict[str, int]  # each part's number of windows
    left_out: list[str]  # features the normalizer ignores


def train_on_panel(
    panel: Panel,
    out_dir: Path,
    model_config: TFTConfig,
    cfg: TrainConfig,
    feature_fingerprint: str,
    data_report: dict[str, Any],
    resume: bool = False,
) -> dict[str, Any]:
    """Split, normalize (train rows only), fit, and write the checkpoint and metrics:

    1. Split the windows in time and fit the scales on the training rows (`fit_inputs`).
    2. Fit the network epoch by epoch (each saved for `resume`), keeping its best epoch.
    3. Calibrate its intervals on the calibration windows.
    4. Write the checkpoint and its history, then drop the saved state.
    """
    check_resumable(out_dir, resume)
    seed_everything(cfg.seed)
    # 1. The windows and the scales.
    inputs = fit_inputs(panel, model_config, cfg)
    ends = inputs.ends
    # 2. The network.
    device = resolve_device(cfg.device)
    model = TemporalFusionTransformer(inputs.config).to(device)
    state = TrainingState(out_dir, run_identity(inputs, cfg, feature_fingerprint, data_report))
    history, best_state = fit(
        model, inputs.data, ends[Part.TRAIN], ends[Part.VAL], cfg, device, state, resume
    )
    model.load_state_dict(best_state)
    # 3. Its intervals.
    ratios = fast_ratios(panel, inputs.volatility, ends[Part.CALIB], inputs.config)
    shrink, fast, interval_scale = calibrate(
        model, inputs.data, ends[Part.CALIB], ratios, cfg.batch_size * 4, device
    )
    metrics = run_metrics(
        history, model.n_params(), inputs.target_scale, interval_scale, device, cfg
    )
    metrics |= {"shrink": shrink, "fast": fast.to_dict()}
    if inputs.config.encoder == "stream":  # the state its calibration saw, against the served
        calib = ends[Part.CALIB]
        metrics["carry"] = carry_check(model, inputs.data, calib, cfg.batch_size * 4, device)
    # 4. The checkpoint.
    meta = checkpoint_meta(panel, inputs, feature_fingerprint, data_report, interval_scale, metrics)
    meta = replace(meta, shrink=shrink, fast=fast)
    model_id = write_checkpoint(out_dir, model, meta, panel, ends[Part.CALIB], history)
    state.remove()
    log(
        cfg,
        f"checkpoint {out_dir} (model id {model_id}): best epoch {metrics['best_epoch']}, "
        f"val pinball {metrics['val_pinball_bp']:.3f} bp",
    )
    return metrics | {"model_id": model_id}


def fit_inputs(panel: Panel, c: TFTConfig, cfg: TrainConfig) -> TrainingInputs:
    """The split and its windows, the normalizer and the target and volatility scales (fitted
    on training rows), and the model-ready windows they make."""
    split, ends = split_windows(panel, c, cfg)
    normalizer = fit_normalizer(panel, ends[Part.TRAIN], c.lookback)
    target_scale = float(np.std(panel.targets[ends[Part.TRAIN]]))
    if not target_scale > 0:
        raise TrainingError("every training label is the same return; the price never moved")
    # The scale's shape is chosen out of the profile's sample: on the training windows, the
    # profile fitted on them always looks best.
    chosen_on = ends[Part.VAL] if len(ends[Part.VAL]) else ends[Part.TRAIN]
    volatility = fit_volatility(panel, split, chosen_on, c.lookback)
    vocab = SymbolVocab.from_symbols(panel.symbols)
    config = replace(c, n_symbols=vocab.size, n_hist=panel.features.shape[1])
    calendar = release_calendar(c.releases)
    data = WindowData(
        panel, normalizer, vocab, c.lookback, c.horizon, target_scale, volatility, calendar
    )
    windows = {p.name.lower(): len(e) for p, e in ends.items()}
    left_out = ignored_names(panel, normalizer.ignored)
    log(cfg, f"windows {windows}; left out (constant, or a date cycle not spanned): {left_out}")
    return TrainingInputs(
        split, ends, normalizer, target_scale, volatility, vocab, config, data, windows, left_out
    )


def run_identity(
    inputs: TrainingInputs, cfg: TrainConfig, feature_fingerprint: str, data_report: dict[str, Any]
) -> dict[str, Any]:
    """What names the run in its saved state: a resume must match it. The data's by content
    and by name: the same files given as another product would train its embedding instead."""
    return {
        "model": inputs.config.to_dict(),
        "train": asdict(replace(cfg, progress=True)),
        "features": feature_fingerprint,
        "data": data_report.get("fingerprint"),
        "sources": data_report.get("sources"),
        "products": list(inputs.vocab.roots),
        "split": inputs.split.to_dict(),
        "windows": inputs.windows,
    }


def checkpoint_meta(
    panel: Panel,
    inputs: TrainingInputs,
    feature_fingerprint: str,
    data_report: dict[str, Any],
    interval_scale: np.ndarray,
    metrics: dict[str, Any],
) -> checkpoint.CheckpointMeta:
    """Everything the checkpoint holds besides the weights."""
    return checkpoint.CheckpointMeta(
        config=inputs.config,
        feature_fingerprint=feature_fingerprint,
        normalizer=inputs.normalizer,
        volatility=inputs.volatility,
        interval_scale=interval_scale,
        vocab=inputs.vocab,
        persistence_quantiles=target_quantiles(
            panel, inputs.ends[Part.TRAIN], inputs.config.quantiles
        ),
        data=data_report
        | {
            "split": inputs.split.to_dict(),
            "windows": inputs.windows,
            "ignored_features": inputs.left_out,
        },
        metrics=metrics,
    )


def write_checkpoint(
    out_dir: Path,
    model: TemporalFusionTransformer,
    meta: checkpoint.CheckpointMeta,
    panel: Panel,
    calib_ends: np.ndarray,
    history: list[dict[str, Any]],
) -> str:
    """The served baselines fitted on the calibration windows, the checkpoint and the training
    history in `out_dir`; the checkpoint's model id."""
    fitted, n_windows = fit_served(panel, calib_ends, meta)
    out_dir.mkdir(parents=True, exist_ok=True)
    calibrated_on = {"source": "the checkpoint's calibration split", "n_windows": n_windows}
    served_baselines.save(out_dir, fitted, calibrated_on)  # before config.json: it completes one
    model_id = checkpoint.save(out_dir, model, meta)
    write_history(out_dir, history)
    return model_id


def calibrate(
    model: TemporalFusionTransformer,
    data: WindowData,
    ends: np.ndarray,
    ratios: dict[float, np.ndarray],
    batch_size: int,
    device: torch.device,
) -> tuple[float, FastBlend, np.ndarray]:
    """On the calibration windows: the network's share of each interval against its scale's
    Gaussian one (`fit_shrink`), then the fast EWMA's share of what that leaves (`fit_fast`,
    `ratios` from `fast_ratios`), then the interval scales of the quantiles so blended."""
    quantiles = model.config.quantiles
    q, y = (
        x.numpy().astype(np.float64) for x in predict_windows(model, data, ends, batch_size, device)
    )
    unit = data.unit[torch.from_numpy(ends)].numpy().astype(np.float64)[..., None]
    shrink = fit_shrink(q, y, unit[..., 0], quantiles)
    shrunk = toward_scale(q / unit, shrink, quantiles) * unit
    fast = fit_fast(shrunk, y, unit[..., 0], ratios, quantiles)
    if fast.share > 0:
        ratio = ratios[fast.halflife]
        shrunk = toward_scale(shrunk / unit, 1.0 - fast.share, quantiles, ratio) * unit
    return shrink, fast, fit_interval_scale(shrunk, y, quantiles)


def fast_ratios(
    panel: Panel, volatility: VolatilityScale, ends: np.ndarray, c: TFTConfig
) -> dict[float, np.ndarray]:
    """Each of `FAST_HALFLIVES`' fast volatility over the scale `(n, H)` on windows `ends`, a
    chunk of windows at a time (a copy of every window's inputs would outgrow the panel)."""
    rows = window_rows(panel.features[:, list(volatility.columns)], c.lookback)

    def ratios(chunk: np.ndarray) -> np.ndarray:
        inputs = rows[chunk]
        scale = volatility.scale(panel.ts[chunk], inputs, c.horizon)
        fast = [volatility.fast(inputs, h, c.horizon) / scale for h in FAST_HALFLIVES]
        return np.stack(fast, axis=1)  # (n, halflives, H)

    stacked = per_window(ends, ratios)
    return {h: stacked[:, i] for i, h in enumerate(FAST_HALFLIVES)}


def run_metrics(
    history: list[dict[str, Any]],
    n_params: int,
    target_scale: float,
    interval_scale: np.ndarray,
    device: torch.device,
    cfg: TrainConfig,
) -> dict[str, Any]:
    """The run's figures, as of its best epoch (the weights kept)."""
    best = min(history, key=lambda h: h["val_loss"])
    return {
        "best_epoch": best["epoch"],
        "val_pinball": best["val_loss"],
        "val_pinball_bp": best["val_loss"] * target_scale * 1e4,
        "train_pinball": best["train_loss"],
        "epochs_run": len(history),
        "n_params": n_params,
        "peak_memory_mb": max(h["peak_memory_mb"] for h in history),
        "interval_scale": interval_scale.tolist(),
        "device": str(device),
        "train_config": asdict(cfg),
    }


def split_windows(
    panel: Panel, c: TFTConfig, cfg: TrainConfig
) -> tuple[Split, dict[Part, np.ndarray]]:
    """The time split (by dates if given, else by fractions) and each part's windows
    (calibration's without labels over gap fills); training, validation and calibration must
    have some."""
    embargo = cfg.embargo or c.lookback + c.horizon
    dates = split_dates(cfg)
    if dates is not None:
        split = Split.from_dates(panel.ts, *dates, embargo)
    else:
        split = Split.from_fractions(
            panel.ts, cfg.val_fraction, cfg.calib_fraction, cfg.test_fraction, embargo
        )
    ends = {part: window_ends(panel, split, part, c.lookback, c.horizon) for part in Part}
    ends[Part.CALIB] = calibration_windows(panel, ends[Part.CALIB], c.horizon)
    for part in (Part.TRAIN, Part.VAL, Part.CALIB):
        if len(ends[part]) == 0:
            raise TrainingError(
                f"the {part.name.lower()} split has no complete window; give more data or "
                "move its boundaries (--val-start/--calib-start/--test-start or the fractions)"
            )
    check_every_product_trains(panel.symbols, panel.row_symbol[ends[Part.TRAIN]])
    return split, ends


def split_dates(cfg: TrainConfig) -> tuple[int, int, int | None] | None:
    """The split dates as UTC ns (validation, calibration, test or None), or None when the
    split is by fractions; either checked before any bar is read."""
    if not (cfg.val_start or cfg.calib_start or cfg.test_start):
        check_fractions(cfg.val_fraction, cfg.calib_fraction, cfg.test_fraction)
        return None
    named = {"--val-start": cfg.val_start, "--calib-start": cfg.calib_start}
    missing = [name for name, value in named.items() if not value]
    if missing:
        raise DataError(f"split dates need {' and '.join(missing)} too (--test-start is optional)")
    named["--test-start"] = cfg.test_start
    at = {name: parse_utc(str(v), name) for name, v in named.items() if v}
    check_order(at)
    return at["--val-start"], at["--calib-start"], at.get("--test-start")


def fit_volatility(panel: Panel, split: Split, ends: np.ndarray, lookback: int) -> VolatilityScale:
    """The output scale: the profile from the training bars; its blend weight, both half-lives
    and floor from the windows `ends` (the validation windows: no test bar is read)."""
    missing = [name for name in SCALE_INPUTS if name not in panel.feature_names]
    if missing:
        raise TrainingError(
            f"the panel has no {missing} columns, the volatility scale's inputs; build it "
            "with the feature engine (model.dataset.build_panel)"
        )
    profile = fit_profile(panel, split.train_end)
    columns = [panel.feature_names.index(name) for name in SCALE_INPUTS]
    inputs = WindowsOf(window_rows(panel.features[:, columns], lookback), ends)
    return VolatilityScale.fit(
        profile, panel.feature_names, inputs, panel.ts[ends], panel.targets[ends]
    )


def write_history(out_dir: Path, history: list[dict[str, Any]]) -> None:
    """metrics.csv, metrics.json and training_curve.png next to the checkpoint."""
    with (out_dir / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(history[0]))
        writer.writeheader()
        writer.writerows(history)
    (out_dir / "metrics.json").write_text(json.dumps(history, indent=1))
    plots.training_curve(out_dir / "training_curve.png", history)
