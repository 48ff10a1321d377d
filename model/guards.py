"""The failures of the seed report's TFT run (a validation loss of exactly 0, a model that does
not learn, NaN losses), caught as they happen: training raises instead of reporting success."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from model.covariates import product_root


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


def check_every_product_trains(symbols: list[str], train_rows: np.ndarray) -> None:
    """Every product of `symbols` has a training window (`train_rows`: the symbol index of
    each), per product as the model's embedding is: a contract listed after the cut trains as
    its root. A split's boundaries are times over every product's bars together, so a product
    of a later period can fall whole after the training split, and never be trained on."""
    trained = {product_root(symbols[i]) for i in np.unique(train_rows).tolist()}
    untrained = sorted({product_root(s) for s in symbols} - trained)
    if untrained:
        raise TrainingError(
            f"{', '.join(untrained)}: no training window, so never trained on: the split's "
            "boundaries are times, over every product's bars together, and these products' "
            "bars all come after the training split; train on products of overlapping "
            "periods, or leave these out"
        )
