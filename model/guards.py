"""The failures of the seed report's TFT run (a validation loss of exactly 0, a model that does
not learn, NaN losses), caught as they happen: training raises instead of reporting success."""

from __future__ import annotations

import math
from typing import Any

import torch


class TrainingError(RuntimeError):
    """A training run that produced no trustworthy model; the message says what went wrong."""


def check_epoch(record: dict[str, Any], history: list[dict[str, Any]]) -> None:
    """An epoch's record (`epoch`, `train_loss`, `val_loss`) against the epochs before it."""
    if not math.isfinite(record["val_loss"]):
        raise TrainingError(f"epoch {record['epoch']}: validation loss is {record['val_loss']}")
    if record["val_loss"] == 0.0:
        raise TrainingError(
            f"epoch {record['epoch']}: validation loss is exactly 0 — the labels leak into the "
            "inputs or the metric is broken; no real forecast is perfect"
        )
    if history and math.isclose(record["train_loss"], history[-1]["train_loss"], rel_tol=1e-9):
        raise TrainingError(
            f"epoch {record['epoch']}: training loss {record['train_loss']} is the previous "
            "epoch's — the model is not learning (inputs ignored? loss detached?)"
        )


def check_weights_moved(epoch: int, before: list[torch.Tensor], after: list[torch.Tensor]) -> None:
    """`before`: copies of the parameters at the epoch's start."""
    if all(torch.equal(a, b) for a, b in zip(before, after, strict=True)):
        raise TrainingError(
            f"epoch {epoch}: no weight changed — the optimizer is not "
            "updating the model (learning rate 0? frozen parameters?)"
        )
