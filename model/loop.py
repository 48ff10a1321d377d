"""The training loop: AdamW, warm-up + cosine LR, gradient clipping, early stopping on the
validation pinball, windows drawn across the whole history each epoch, a tqdm progress bar.

Fails loudly instead of reporting success on a broken run (`model.guards`). Each completed
epoch can be saved (`model.training_state`), and a resumed loop goes on exactly as the
uninterrupted one: same window orders, dropout draws, LR steps and early stopping.
"""

from __future__ import annotations

import copy
import math
import random
import sys
import time
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from model.config import TrainConfig
from model.dataset import Batch, WindowData
from model.forecaster import autocast_for
from model.guards import TrainingError, check_epoch, check_weights_moved
from model.memory import peak_memory_mb
from model.stream import (
    BURN_IN,
    Sequences,
    evaluation_sequences,
    forward_sequences,
    training_sequences,
)
from model.tft import TemporalFusionTransformer
from model.training_state import Loop, TrainingState


def pinball_loss(pred: torch.Tensor, y: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Mean pinball loss of quantile forecasts `(B, H, Q)` against targets `(B, H)`."""
    err = y.unsqueeze(-1) - pred
    return torch.maximum(levels * err, (levels - 1.0) * err).mean()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def fit(
    model: TemporalFusionTransformer,
    data: WindowData,
    train_ends: np.ndarray,
    val_ends: np.ndarray,
    cfg: TrainConfig,
    device: torch.device,
    state: TrainingState | None = None,
    resume: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    """The training loop; returns per-epoch metrics and the best (lowest val loss) weights.
    With a `state`, each completed epoch is saved to it, and `resume` starts from it."""
    per_epoch = cfg.epoch_windows(len(train_ends))
    steps_per_epoch = math.ceil(per_epoch / cfg.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = warmup_cosine(optimizer, steps_per_epoch * cfg.epochs, cfg.warmup)
    loop = Loop(model, optimizer, schedule, np.random.default_rng(cfg.seed))
    if resume and state is not None:
        state.load(loop)
        log(cfg, f"resumed after epoch {loop.progress.epoch} from {state.path}")
    done = loop.progress
    for epoch in range(done.epoch + 1, cfg.epochs + 1):
        if done.stale >= cfg.patience:
            break
        record = run_epoch(loop, data, train_ends, val_ends, cfg, device, epoch, per_epoch)
        done.history.append(record)
        done.epoch = epoch
        if record["val_loss"] < done.best_val:
            done.best_val, done.stale = record["val_loss"], 0
            loop.best = copy.deepcopy(model.state_dict())
        else:
            done.stale += 1
        if state is not None:
            state.save(loop)
        if done.stale >= cfg.patience:
            log(cfg, f"early stop: no better validation loss for {done.stale} epochs")
    assert loop.best is not None  # the first epoch always sets it (val_loss < inf)
    return done.history, loop.best


def run_epoch(
    loop: Loop,
    data: WindowData,
    train_ends: np.ndarray,
    val_ends: np.ndarray,
    cfg: TrainConfig,
    device: torch.device,
    epoch: int,
    per_epoch: int,
) -> dict[str, Any]:
    """One epoch: `per_epoch` training windows drawn across the whole history, then the
    validation loss; its record, once every guard has passed."""
    model = loop.model
    model.train()
    started = time.perf_counter()
    before = [p.detach().clone() for p in model.parameters()]
    order = epoch_order(train_ends, cfg.chunk, loop.order)[:per_epoch]
    steps = [order[i : i + cfg.batch_size] for i in range(0, per_epoch, cfg.batch_size)]
    train_loss, grad_norm = train_epoch(
        model, data, steps, loop.optimizer, loop.schedule, cfg, device, epoch, train_ends
    )
    validating = time.perf_counter()
    val_loss = evaluate_loss(model, data, val_ends, cfg.batch_size * 4, device)
    record = {
        "epoch": epoch,
        "train_loss": train_loss,
        "val_loss": val_loss,
        "lr": loop.schedule.get_last_lr()[0],
        "grad_norm": grad_norm,
        "seconds": time.perf_counter() - started,
        "val_seconds": time.perf_counter() - validating,
        "peak_memory_mb": peak_memory_mb(device),
    }
    check_weights_moved(epoch, before, list(model.parameters()))
    check_epoch(record, loop.progress.history)
    log(
        cfg,
        f"epoch {epoch}: train {train_loss:.5f} val {val_loss:.5f} "
        f"({record['seconds']:.0f}s, peak {record['peak_memory_mb']:.0f} MB)",
    )
    return record


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
    train_ends: np.ndarray,
) -> tuple[float, float]:
    """One pass over `steps` (each a batch of window ends); mean loss and gradient norm.
    A streaming encoder trains on sequences ending at some of them (model.stream), scored
    at every one of `train_ends` they hold."""
    levels = torch.tensor(model.config.quantiles, device=device)
    loss_sum, grad_sum = 0.0, 0.0
    bar = tqdm(
        steps,
        desc=f"epoch {epoch}/{cfg.epochs}",
        unit="step",
        disable=None if cfg.progress else True,
    )
    for step, ends in enumerate(bar):
        streaming = model.config.encoder == "stream"
        batch = training_sequences(data, ends, train_ends) if streaming else data.batch(ends)
        with autocast_for(device):
            quantiles = forward_batch(
                model, batch, batch.symbols_dropped(cfg.symbol_dropout), device
            )
            pred = quantiles.float() * batch.unit.to(device).unsqueeze(-1)
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


def epoch_order(ends: np.ndarray, chunk: int, rng: np.random.Generator) -> np.ndarray:
    """Every window once, as runs of `chunk` consecutive windows in random order."""
    starts = rng.permutation(np.arange(0, len(ends), chunk))
    index = (starts[:, None] + np.arange(chunk)).ravel()
    return ends[index[index < len(ends)]]


def forward_batch(
    model: TemporalFusionTransformer,
    batch: Batch | Sequences,
    symbol: torch.Tensor,
    device: torch.device,
) -> torch.Tensor:
    """The quantiles of a batch's windows, or of the positions its sequences forecast."""
    if isinstance(batch, Sequences):
        return forward_sequences(model, batch, symbol, device)
    return model.forward_shared(
        symbol.to(device),
        batch.static_reals.to(device),
        batch.rows.to(device),
        batch.index.to(device),
        batch.row_window.to(device),
        batch.x_future.to(device),
    ).quantiles


@torch.inference_mode()
def predict_windows(
    model: TemporalFusionTransformer,
    data: WindowData,
    ends: np.ndarray,
    batch_size: int,
    device: torch.device,
    burn_in: int = BURN_IN,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantile forecasts `(n, H, Q)` and targets `(n, H)` of windows in target units
    (before interval calibration), in eval mode, on CPU; a streaming encoder's streams started
    `burn_in` lookbacks before each window. Written into arrays allocated up front: small
    results kept between each batch's large temporaries would fragment the heap until the
    process held gigabytes it does not use."""
    model.eval()
    c = model.config
    preds = torch.empty((len(ends), c.horizon, len(c.quantiles)))
    ys = torch.empty((len(ends), c.horizon))
    streaming = c.encoder == "stream"
    for start in range(0, len(ends), batch_size):
        part = ends[start : start + batch_size]
        batch = evaluation_sequences(data, part, burn_in) if streaming else data.batch(part)
        with autocast_for(device):
            quantiles = forward_batch(model, batch, batch.symbol, device)
        stop = start + len(batch.y)
        preds[start:stop] = quantiles.float().cpu() * batch.unit.unsqueeze(-1)
        ys[start:stop] = batch.y
    return preds, ys


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


def log(cfg: TrainConfig, message: str) -> None:
    """A line on stderr, unless the run is quiet."""
    if cfg.progress:
        print(message, file=sys.stderr, flush=True)
