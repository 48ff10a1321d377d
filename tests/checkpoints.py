"""Small real checkpoints for worker tests: random weights, real format, real validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from features import engine as feature_engine
from model import checkpoint
from model.checkpoint import CheckpointMeta
from model.config import TFTConfig
from model.covariates import SymbolVocab
from model.normalization import Normalizer
from model.tft import TemporalFusionTransformer


def make_checkpoint(
    directory: Path,
    seed: int = 0,
    hidden: int = 16,
    heads: int = 2,
    fingerprint: str | None = None,
    symbols: tuple[str, ...] = ("6EH4", "ESU4", "NQU4"),
) -> str:
    """Write a randomly initialised TFT checkpoint; returns its model id."""
    torch.manual_seed(seed)
    vocab = SymbolVocab.from_symbols(list(symbols))
    config = TFTConfig(hidden=hidden, heads=heads, var_dim=4, n_symbols=vocab.size, dropout=0.0)
    model = TemporalFusionTransformer(config).eval()
    rng = np.random.default_rng(seed)
    meta = CheckpointMeta(
        config=config,
        feature_fingerprint=fingerprint or feature_engine.FINGERPRINT,
        normalizer=Normalizer.fit(rng.normal(size=(64, config.n_hist))),
        target_scale=1e-3,
        vocab=vocab,
        persistence_quantiles=np.zeros((config.horizon, len(config.quantiles))),
    )
    return checkpoint.save(directory, model, meta)
