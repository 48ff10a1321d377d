"""Training: AdamW, warm-up + cosine LR, gradient clipping, early stopping on validation pinball.

Fails loudly instead of reporting success on a broken run: a NaN/inf loss, a validation loss of
exactly 0, or a training loss that is exactly the same two epochs running raise TrainingError.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from model import checkpoint, plots
from model.bar_files import data_fingerprint, load_bars
from model.calibrated_baselines import fit_served
from model.calibration import fit_interval_scale, fit_shrink, toward_scale
from model.config import TFTConfig
from model.covariates import SymbolVocab
from model.dataset import (
    Batch,
    Panel,
    Part,
    Split,
    WindowData,
    build_panel,
    calibration_windows,
    fit_normalizer,
    fit_profile,
    ignored_names,
    target_quantiles,
    window_ends,
    window_rows,
)
from model.forecaster import autocast_for, resolve_device
from model.guards import TrainingError, check_epoch, check_weights_moved
from model.memory import peak_memory_mb
from model.releases import release_calendar
from model.serving import baselines as served_baselines
from model.tft import TemporalFusionTransformer, TFTOutput
from model.volatility import SCALE_INPUTS, VolatilityScale


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 20
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup: float = 0.05  # fraction of all steps spent warming the LR up linearly
    clip_norm: float = 1.0
    patience: int = 4  # epochs without a better validation loss before stopping
    seed: int = 0
    val_fraction: float = 0.1  # early stopping
    calib_fraction: float = 0.1  # interval calibration
    test_fraction: float = 0.25
    embargo: int = 0  # bars between splits; 0 means lookback + horizon
    windows_per_epoch: int = 0  # random training windows per epoch; 0 means all
    chunk: int = 8  # batches are random runs of this many consecutive windows: they share
    # most feature rows, which the model then encodes once (~7x fewer rows at batch 64)
    symbol_dropout: float = 0.1  # trains embedding row 0, used for symbols unseen in training
    device: str = "auto"
    progress: bool = True


def pinball_loss(pred: torch.Tensor, y: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Mean pinball loss of quantile forecasts `(B, H, Q)` against targets `(B, H)`."""
    err = y.unsqueeze(-1) - pred
    return torch.maximum(levels * err, (levels - 1.0) * err).mean()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(
    paths: list[Path], out_dir: Path, model_config: TFTConfig, train_config: TrainConfig
) -> dict[str, Any]:
    """`barcast train`: bars -> corrections -> features -> windows -> fit -> checkpoint."""
    from features.engine import FINGERPRINT

    bars, report = load_bars(paths)
    _log(
        train_config,
        f"bars: {report['bars_per_symbol']}; corrections: "
        f"{ {k: v for k, v in report['corrections'].items() if v} }",
    )
    panel = build_panel(bars, model_config.horizon)
    report["fingerprint"] = data_fingerprint(report)
    return train_on_panel(panel, out_dir, model_config, train_config, FINGERPRINT, report)


def train_on_panel(
    panel: Panel,
    out_dir: Path,
    model_config: TFTConfig,
    cfg: TrainConfig,
    feature_fingerprint: str,
    data_report: dict[str, Any],
) -> dict[str, Any]:
    """Split, normalize (train rows only), fit, and write the checkpoint and metrics."""
    seed_everything(cfg.seed)
    c = model_config
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
    _log(cfg, f"windows {windows}; left out (constant, or a date cycle not spanned): {left_out}")

    device = resolve_device(cfg.device)
    model = TemporalFusionTransformer(config).to(device)
    history, best_state = fit(model, data, ends[Part.TRAIN], ends[Part.VAL], cfg, device)
    model.load_state_dict(best_state)
    shrink, interval_scale = calibrate(model, data, ends[Part.CALIB], cfg.batch_size * 4, device)

    metrics = run_metrics(history, model.n_params(), target_scale, interval_scale, device, cfg)
    metrics["shrink"] = shrink
    meta = checkpoint.CheckpointMeta(
        config=config,
        feature_fingerprint=feature_fingerprint,
        normalizer=normalizer,
        volatility=volatility,
        interval_scale=interval_scale,
        vocab=vocab,
        persistence_quantiles=target_quantiles(panel, ends[Part.TRAIN], c.quantiles),
        data=data_report
        | {"split": split.to_dict(), "windows": windows, "ignored_features": left_out},
        metrics=metrics,
        shrink=shrink,
    )
    fitted, n_windows = fit_served(panel, ends[Part.CALIB], meta)
    out_dir.mkdir(parents=True, exist_ok=True)
    calibrated_on = {"source": "the checkpoint's calibration split", "n_windows": n_windows}
    served_baselines.save(out_dir, fitted, calibrated_on)  # before config.json: it completes one
    model_id = checkpoint.save(out_dir, model, meta)
    write_history(out_dir, history)
    _log(
        cfg,
        f"checkpoint {out_dir} (model id {model_id}): best epoch {metrics['best_epoch']}, "
        f"val pinball {metrics['val_pinball_bp']:.3f} bp",
    )
    return metrics | {"model_id": model_id}


def calibrate(
    model: TemporalFusionTransformer,
    data: WindowData,
    ends: np.ndarray,
    batch_size: int,
    device: torch.device,
) -> tuple[float, np.ndarray]:
    """On the calibration windows: the network's share of each interval against its scale's
    Gaussian one (`fit_shrink`), then the interval scales of the quantiles so shrunk."""
    quantiles = model.config.quantiles
    q, y = (
        x.numpy().astype(np.float64) for x in predict_windows(model, data, ends, batch_size, device)
    )
    unit = data.unit[torch.from_numpy(ends)].numpy().astype(np.float64)
    shrink = fit_shrink(q, y, unit, quantiles)
    shrunk = toward_scale(q / unit[..., None], shrink, quantiles) * unit[..., None]
    return shrink, fit_interval_scale(shrunk, y, quantiles)


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
    """The time split and each part's windows (calibration's without labels over gap fills);
    training, validation and calibration must have some."""
    split = Split.from_fractions(
        panel.ts,
        cfg.val_fraction,
        cfg.calib_fraction,
        cfg.test_fraction,
        cfg.embargo or c.lookback + c.horizon,
    )
    ends = {part: window_ends(panel, split, part, c.lookback, c.horizon) for part in Part}
    ends[Part.CALIB] = calibration_windows(panel, ends[Part.CALIB], c.horizon)
    for part in (Part.TRAIN, Part.VAL, Part.CALIB):
        if len(ends[part]) == 0:
            raise TrainingError(
                f"the {part.name.lower()} split has no complete window; give more data or "
                "change --val-fraction/--calib-fraction/--test-fraction"
            )
    return split, ends


def fit(
    model: TemporalFusionTransformer,
    data: WindowData,
    train_ends: np.ndarray,
    val_ends: np.ndarray,
    cfg: TrainConfig,
    device: torch.device,
) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    """The training loop; returns per-epoch metrics and the best (lowest val loss) weights."""
    rng = np.random.default_rng(cfg.seed)
    per_epoch = min(len(train_ends), cfg.windows_per_epoch or len(train_ends))
    steps_per_epoch = math.ceil(per_epoch / cfg.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = warmup_cosine(optimizer, steps_per_epoch * cfg.epochs, cfg.warmup)
    history: list[dict[str, Any]] = []
    best_state, best_val, stale = None, math.inf, 0
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        started = time.perf_counter()
        before = [p.detach().clone() for p in model.parameters()]
        order = epoch_order(train_ends, cfg.chunk, rng)[:per_epoch]
        steps = [order[i : i + cfg.batch_size] for i in range(0, per_epoch, cfg.batch_size)]
        train_loss, grad_norm = train_epoch(
            model, data, steps, optimizer, schedule, cfg, device, epoch
        )
        val_loss = evaluate_loss(model, data, val_ends, cfg.batch_size * 4, device)
        record = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "lr": schedule.get_last_lr()[0],
            "grad_norm": grad_norm,
            "seconds": time.perf_counter() - started,
            "peak_memory_mb": peak_memory_mb(device),
        }
        check_weights_moved(epoch, before, list(model.parameters()))
        check_epoch(record, history)
        history.append(record)
        _log(
            cfg,
            f"epoch {epoch}: train {record['train_loss']:.5f} val {val_loss:.5f} "
            f"({record['seconds']:.0f}s, peak {record['peak_memory_mb']:.0f} MB)",
        )
        if val_loss < best_val:
            best_val, stale = val_loss, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            stale += 1
            if stale >= cfg.patience:
                _log(cfg, f"early stop: no better validation loss for {stale} epochs")
                break
    assert best_state is not None  # the first epoch always sets it (val_loss < inf)
    return history, best_state


def warmup_cosine(
    optimizer: torch.optim.Optimizer, total: int, warmup_fraction: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup_fraction` of the steps, then a cosine decay to 0."""
    warmup = max(1, int(warmup_fraction * total))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / warmup
            if s < warmup
            else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, total - warmup)))
        ),
    )


def train_epoch(
    model: TemporalFusionTransformer,
    data: WindowData,
    steps: list[np.ndarray],
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LambdaLR,
    cfg: TrainConfig,
    device: torch.device,
    epoch: int,
) -> tuple[float, float]:
    """One pass over `steps` (each a batch of window ends); mean loss and gradient norm."""
    levels = torch.tensor(model.config.quantiles, device=device)
    loss_sum, grad_sum = 0.0, 0.0
    bar = tqdm(
        steps,
        desc=f"epoch {epoch}/{cfg.epochs}",
        unit="step",
        disable=None if cfg.progress else True,
    )
    for step, ends in enumerate(bar):
        batch = data.batch(ends)
        symbol = batch.symbols_dropped(cfg.symbol_dropout)
        with autocast_for(device):
            out = forward_batch(model, batch, symbol, device)
            pred = out.quantiles.float() * batch.unit.to(device).unsqueeze(-1)
            loss = pinball_loss(pred, batch.y.to(device), levels)
        if not torch.isfinite(loss):
            raise TrainingError(
                f"epoch {epoch} step {step + 1}: training loss is "
                f"{loss.item()}; lower --lr or check the inputs for NaN"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        optimizer.step()
        schedule.step()
        loss_sum += loss.item()
        grad_sum += float(grad_norm)
        bar.set_postfix(loss=f"{loss_sum / (step + 1):.5f}", refresh=False)
    return loss_sum / len(steps), grad_sum / len(steps)


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
    inputs = window_rows(panel.features[:, columns], lookback)[ends]
    return VolatilityScale.fit(
        profile, panel.feature_names, inputs, panel.ts[ends], panel.targets[ends]
    )


def epoch_order(ends: np.ndarray, chunk: int, rng: np.random.Generator) -> np.ndarray:
    """Every window once, as runs of `chunk` consecutive windows in random order."""
    starts = rng.permutation(np.arange(0, len(ends), chunk))
    index = (starts[:, None] + np.arange(chunk)).ravel()
    return ends[index[index < len(ends)]]


def forward_batch(
    model: TemporalFusionTransformer, batch: Batch, symbol: torch.Tensor, device: torch.device
) -> TFTOutput:
    return model.forward_shared(
        symbol.to(device),
        batch.static_reals.to(device),
        batch.rows.to(device),
        batch.index.to(device),
        batch.row_window.to(device),
        batch.x_future.to(device),
    )


@torch.inference_mode()
def predict_windows(
    model: TemporalFusionTransformer,
    data: WindowData,
    ends: np.ndarray,
    batch_size: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantile forecasts `(n, H, Q)` and targets `(n, H)` of windows in target units
    (before interval calibration), in eval mode, on CPU."""
    model.eval()
    preds, ys = [], []
    for start in range(0, len(ends), batch_size):
        batch = data.batch(ends[start : start + batch_size])
        with autocast_for(device):
            out = forward_batch(model, batch, batch.symbol, device)
        preds.append(out.quantiles.float().cpu() * batch.unit.unsqueeze(-1))
        ys.append(batch.y)
    return torch.cat(preds), torch.cat(ys)


def evaluate_loss(
    model: TemporalFusionTransformer,
    data: WindowData,
    ends: np.ndarray,
    batch_size: int,
    device: torch.device,
) -> float:
    """Mean pinball loss over held-out windows (target units)."""
    q, y = predict_windows(model, data, ends, batch_size, device)
    return pinball_loss(q, y, torch.tensor(model.config.quantiles)).item()


def write_history(out_dir: Path, history: list[dict[str, Any]]) -> None:
    """metrics.csv, metrics.json and training_curve.png next to the checkpoint."""
    with (out_dir / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(history[0]))
        writer.writeheader()
        writer.writerows(history)
    (out_dir / "metrics.json").write_text(json.dumps(history, indent=1))
    plots.training_curve(out_dir / "training_curve.png", history)


def _log(cfg: TrainConfig, message: str) -> None:
    if cfg.progress:
        print(message, file=sys.stderr, flush=True)
