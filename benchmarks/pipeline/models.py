"""The pipeline benchmark's checkpoints: the product model trained, and random-weight ones.

The headline rows serve the product's default model (`TFTConfig()`) with
trained weights, and the encoders' rows that model and the same recipe with the stream encoder
(`TFTConfig(encoder="stream")`). `product_checkpoint` takes, in this order: the checkpoint
given; the newest checkpoint in `BARCAST_MODEL_DIR` whose architecture is the default with that
encoder (e.g. one `barcast train` wrote there); one this benchmark trained earlier with the same
recipe; else it trains one now with `RECIPE` on the 6EH4 month (a few minutes on 2 cores). It
says which, and the results record it. Random weights (`random_checkpoint`) serve only the
secondary rows: inference cost does not depend on the weights' values, but a trained model is
what the product serves.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model.config import TFTConfig
from streams.settings import Settings

# Short and fixed, so a fresh clone trains the same checkpoint in a few minutes; the model
# report (benchmarks/model_report/run.py) trains the product model in full.
RECIPE: dict[str, Any] = {"epochs": 2, "windows_per_epoch": 2048, "seed": 0}
ARCHITECTURE = (
    "lookback",
    "horizon",
    "hidden",
    "heads",
    "lstm_layers",
    "var_dim",
    "quantiles",
    "encoder",
)


@dataclass(frozen=True)
class ServedModel:
    path: Path
    source: str  # how this benchmark came by it, for the output and the results file
    trained: bool


def serve(
    settings: Settings,
    given: Path | None,
    hidden: int | None,
    heads: int,
    into: Path,
    encoder: str = TFTConfig.encoder,
) -> ServedModel:
    """Put the `encoder`'s headline model's checkpoint in `into`: the trained product model,
    or with `hidden` a random-weight model of that size (rehearsals, e.g.
    benchmarks/gpu/gpu.sh --dry-run)."""
    if hidden is not None:
        random_checkpoint(into, hidden, heads, encoder=encoder)
        return ServedModel(into, f"random weights, hidden {hidden}, heads {heads}", False)
    product = product_checkpoint(settings, given, encoder)
    shutil.copytree(product.path, into)
    return ServedModel(into, product.source, product.trained)


def saved_config(checkpoint: Path) -> TFTConfig:
    return TFTConfig.from_dict(json.loads((checkpoint / "config.json").read_bytes())["model"])


def architecture(config: TFTConfig | dict[str, Any]) -> dict[str, Any]:
    values = config if isinstance(config, dict) else config.to_dict()
    return {name: json.loads(json.dumps(values[name])) for name in ARCHITECTURE}


def product_checkpoint(settings: Settings, given: Path | None, encoder: str) -> ServedModel:
    """The trained product-default checkpoint with `encoder` (see the module doc)."""
    if given is not None:
        return ServedModel(given, f"given: {given}", trained=True)
    config = TFTConfig(encoder=encoder)
    reused = _default_in(settings.model_dir, config)
    if reused is not None:
        return ServedModel(reused, f"reused {reused} (BARCAST_MODEL_DIR, default config)", True)
    # The window encoder's name is the one it had before encoders were a choice: reused as is.
    named = RECIPE if encoder == "window" else RECIPE | {"encoder": encoder}
    recipe = json.dumps(named, sort_keys=True)
    out = settings.work_dir / "bench" / f"product-{hashlib.sha256(recipe.encode()).hexdigest()[:8]}"
    if _usable(out, config):
        return ServedModel(out, f"reused {out}, trained earlier by this benchmark ({recipe})", True)
    from model.train import TrainConfig, train
    from model.training_state import STATE_FILE
    from streams.ingest.convert import SIXE_CSV

    print(f"training the product model into {out} ({recipe}) ...", flush=True)
    recipe_config = TrainConfig(**RECIPE, progress=False)
    resume = (out / STATE_FILE).exists()  # an interrupted run of this recipe goes on
    train([settings.data_dir / SIXE_CSV], out, config, recipe_config, resume=resume)
    return ServedModel(out, f"trained here on {SIXE_CSV} ({recipe})", trained=True)


def _default_in(model_dir: Path, config: TFTConfig) -> Path | None:
    from model.serving.checkpoints import CheckpointWatcher

    newest = CheckpointWatcher(model_dir).newest()
    return newest if newest is not None and _usable(newest, config) else None


def _usable(directory: Path, config: TFTConfig) -> bool:
    """A checkpoint the worker would serve, with `config`'s architecture."""
    from features.engine import FINGERPRINT
    from model.checkpoint import CheckpointError, load

    try:
        _, meta, _ = load(directory, FINGERPRINT)
    except (CheckpointError, OSError, ValueError):
        return False
    return architecture(meta.config) == architecture(config)


def random_checkpoint(
    directory: Path, hidden: int, heads: int, seed: int = 0, encoder: str = "window"
) -> Path:
    """A TFT with random weights in the real checkpoint format (the secondary rows)."""
    from features import engine as feature_engine
    from model import checkpoint
    from model.covariates import SymbolVocab
    from model.normalization import Normalizer
    from model.tft import TemporalFusionTransformer

    torch.manual_seed(seed)
    vocab = SymbolVocab.from_symbols(["6EH4", "ESU4", "NQU4"])
    config = TFTConfig(
        hidden=hidden, heads=heads, n_symbols=vocab.size, dropout=0.0, encoder=encoder
    )
    rng = np.random.default_rng(seed)
    normalizer = Normalizer.fit(rng.normal(size=(256, config.n_hist)))
    meta = checkpoint.untrained_meta(config, vocab, normalizer, feature_engine.FINGERPRINT)
    checkpoint.save(directory, TemporalFusionTransformer(config).eval(), meta)
    return directory
