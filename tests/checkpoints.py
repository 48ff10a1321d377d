"""Small real checkpoints for worker tests: random weights, real format, real validation."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from features import engine as feature_engine
from model import checkpoint
from model.config import TFTConfig
from model.covariates import SymbolVocab
from model.normalization import Normalizer
from model.serving.programs import TORCH_THREADS
from model.tft import TemporalFusionTransformer

SCALE_FLOOR = 1e-6  # log return per minute: below 6E's quietest minutes (an untrained one's is not)


def untrained_model(config: TFTConfig) -> TemporalFusionTransformer:
    """A TFT with random weights everywhere, its quantile head too: a new model's head starts
    at fixed Gaussian quantiles whatever its input, and tests need forecasts that depend on
    the inputs as a trained model's do."""
    model = TemporalFusionTransformer(config).eval()
    with torch.no_grad():
        torch.nn.init.normal_(model.head.proj.weight, std=0.3)
    return model


def make_checkpoint(
    directory: Path,
    seed: int = 0,
    hidden: int = 16,
    heads: int = 2,
    fingerprint: str | None = None,
    symbols: tuple[str, ...] = ("6EH4", "ESU4", "NQU4"),
    median_shift: float | None = None,
    encoder: str = "window",
    quantiles: tuple[float, ...] = (0.1, 0.5, 0.9),
    horizon: int = 10,
) -> str:
    """Write a randomly initialised TFT checkpoint; returns its model id. With `median_shift`,
    its head is a new model's instead (Gaussian quantiles of its volatility scale whatever the
    input: the `volatility_scale` baseline's forecast, as good) with the median moved by that
    many units of the scale (0: that forecast itself)."""
    torch.manual_seed(seed)
    vocab = SymbolVocab.from_symbols(list(symbols))
    config = TFTConfig(
        hidden=hidden,
        heads=heads,
        var_dim=4,
        n_symbols=vocab.size,
        dropout=0.0,
        zero_median=median_shift is None or median_shift == 0,
        encoder=encoder,
        quantiles=quantiles,
        horizon=horizon,
    )
    if median_shift is None:
        model = untrained_model(config)
    else:
        model = TemporalFusionTransformer(config).eval()
        with torch.no_grad():
            model.head.proj.bias[model.head.median] = median_shift
    rng = np.random.default_rng(seed)
    normalizer = Normalizer.fit(rng.normal(size=(64, config.n_hist)))
    fingerprint = fingerprint or feature_engine.FINGERPRINT
    meta = checkpoint.untrained_meta(config, vocab, normalizer, fingerprint)
    if median_shift is not None:  # a scale that follows the market: the floor below its quiet
        meta = replace(meta, volatility=replace(meta.volatility, floor=SCALE_FLOOR))
    return checkpoint.save(directory, model, meta)


@contextlib.contextmanager
def torch_threads_of_a_worker() -> Iterator[int]:
    """torch runs on the forecast worker's thread count inside: forecasts computed here equal a
    worker's bit for bit only then (whatever other test modules set at import)."""
    before = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        yield TORCH_THREADS
    finally:
        torch.set_num_threads(before)
