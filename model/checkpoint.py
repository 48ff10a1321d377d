"""Checkpoints: `model.safetensors` (every weight) + `config.json` (everything else). No pickle.

The model id is the sha256 of `model.safetensors` (first 16 hex digits); `config.json` records
the full hash, so a checkpoint whose weights were swapped or half-written refuses to load.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from model.calibration import FastBlend, apply_interval_scale, toward_scale
from model.config import TFTConfig
from model.covariates import SymbolVocab
from model.normalization import Normalizer
from model.tft import TemporalFusionTransformer
from model.volatility import SCALE_INPUTS, TimeOfDayProfile, VolatilityScale

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT = "barcast-tft"
VERSION = 2  # 2: outputs in units of a volatility scale, interval calibration as scales
UNTRAINED_FLOOR = 1e-4  # log-return volatility floor of an untrained checkpoint


class CheckpointError(ValueError):
    """A checkpoint that must not be used; the message names the file and the fix."""


@dataclass
class CheckpointMeta:
    config: TFTConfig
    feature_fingerprint: str
    normalizer: Normalizer
    volatility: VolatilityScale  # model outputs x this scale = log returns
    interval_scale: np.ndarray  # (horizon, n_quantiles) from the calibration split
    vocab: SymbolVocab
    persistence_quantiles: np.ndarray  # (horizon, n_quantiles) training label quantiles
    data: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    shrink: float = 1.0  # the network's share of each interval, the scale's Gaussian the rest
    fast: FastBlend = field(default_factory=FastBlend)  # then the fast EWMA's share

    def to_returns(
        self, outputs: np.ndarray, ts_event: np.ndarray, scale_inputs: np.ndarray
    ) -> np.ndarray:
        """Model outputs `(B, H, Q)` -> calibrated quantiles of the cumulative log return, for
        windows ending at `ts_event` whose raw feature rows hold `scale_inputs` (the
        `volatility.columns` of every row, `(B, lookback, len(SCALE_INPUTS))`)."""
        ts = np.asarray(ts_event, dtype=np.int64)
        scale = self.volatility.scale(ts, scale_inputs, self.config.horizon)
        return self.scaled(outputs, scale, scale_inputs)

    def scaled(
        self, outputs: np.ndarray, scale: np.ndarray, scale_inputs: np.ndarray
    ) -> np.ndarray:
        """`to_returns` given the windows' volatility scale `(B, H)` too."""
        c = self.config
        shrunk = toward_scale(outputs, self.shrink, c.quantiles)
        if self.fast.share > 0:
            fast = self.volatility.fast(scale_inputs, self.fast.halflife, c.horizon)
            shrunk = toward_scale(shrunk, 1.0 - self.fast.share, c.quantiles, fast / scale)
        calibrated = apply_interval_scale(shrunk, self.interval_scale, c.quantiles.index(0.5))
        return calibrated * scale[..., None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "model": self.config.to_dict(),
            "feature_fingerprint": self.feature_fingerprint,
            "normalization": self.normalizer.to_dict(),
            "volatility": self.volatility.to_dict(),
            "interval_scale": self.interval_scale.tolist(),
            "shrink": self.shrink,
            "fast": self.fast.to_dict(),
            "symbols": list(self.vocab.roots),
            "persistence_quantiles": self.persistence_quantiles.tolist(),
            "data": self.data,
            "metrics": self.metrics,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> CheckpointMeta:
        return cls(
            config=TFTConfig.from_dict(values["model"]),
            feature_fingerprint=values["feature_fingerprint"],
            normalizer=Normalizer.from_dict(values["normalization"]),
            volatility=VolatilityScale.from_dict(values["volatility"]),
            interval_scale=np.asarray(values["interval_scale"], dtype=np.float64),
            vocab=SymbolVocab(tuple(values["symbols"])),
            persistence_quantiles=np.asarray(values["persistence_quantiles"], dtype=np.float64),
            data=values.get("data", {}),
            metrics=values.get("metrics", {}),
            shrink=_shrink(values.get("shrink", 1.0)),
            fast=_fast(values.get("fast")),
        )


def untrained_meta(
    config: TFTConfig, vocab: SymbolVocab, normalizer: Normalizer, fingerprint: str
) -> CheckpointMeta:
    """Metadata for a checkpoint of untrained weights (tests, benchmarks): a flat daily
    profile, uncalibrated intervals, zero persistence quantiles."""
    from features.engine import FEATURE_NAMES

    columns = tuple(list(FEATURE_NAMES).index(name) for name in SCALE_INPUTS)
    volatility = VolatilityScale(TimeOfDayProfile.flat(), columns, UNTRAINED_FLOOR)
    shape = (config.horizon, len(config.quantiles))
    return CheckpointMeta(
        config=config,
        feature_fingerprint=fingerprint,
        normalizer=normalizer,
        volatility=volatility,
        interval_scale=np.ones(shape),
        vocab=vocab,
        persistence_quantiles=np.zeros(shape),
    )


def durable_replace(tmp: Path, path: Path) -> None:
    """Move the written file `tmp` over `path`: its bytes onto the disk first, then the rename,
    then the folder's entry, so that a power loss leaves the old file or the whole new one,
    never an empty one (a rename can reach the disk before the data it names)."""
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def save(directory: Path, model: TemporalFusionTransformer, meta: CheckpointMeta) -> str:
    """Write weights, then config (each atomically); returns the model id."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {
        k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()
    }
    weights = directory / WEIGHTS
    tmp = weights.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"format": FORMAT})
    tmp.chmod(0o644)  # safetensors creates it owner-only; workers may run as another user
    durable_replace(tmp, weights)
    digest = file_sha256(weights)
    values = meta.to_dict() | {
        "weights": {
            "file": WEIGHTS,
            "sha256": digest,
            "n_params": model.n_params(),
            "n_tensors": len(tensors),
            "dtype": "float32",
        }
    }
    tmp = directory / (CONFIG + ".tmp")
    tmp.write_text(json.dumps(values, indent=1))
    durable_replace(tmp, directory / CONFIG)
    return digest[:16]


def load(
    directory: Path, expected_fingerprint: str | None = None
) -> tuple[TemporalFusionTransformer, CheckpointMeta, str]:
    """Load a checkpoint onto the CPU in eval mode; returns (model, meta, model id).

    Refuses (CheckpointError) a missing file, a feature-set fingerprint other than
    `expected_fingerprint`, weights whose hash differs from config.json, and any missing,
    unexpected or wrongly shaped tensor.
    """
    directory = Path(directory)
    config_path, weights = directory / CONFIG, directory / WEIGHTS
    for path in (config_path, weights):
        if not path.is_file():
            raise CheckpointError(
                f"checkpoint {directory}: {path.name} is missing; point "
                "--checkpoint at a directory written by `barcast train`"
            )
    values = _config(config_path)
    meta = _meta(values, config_path, expected_fingerprint)
    digest = file_sha256(weights)
    recorded = values.get("weights", {}).get("sha256")
    if digest != recorded:
        raise CheckpointError(
            f"{weights}: sha256 {digest[:16]} does not match {recorded!s:.16} "
            f"in {CONFIG}; the weights were replaced or partly written — "
            "copy the checkpoint directory again"
        )
    model = TemporalFusionTransformer(meta.config)
    model.load_state_dict(_tensors(weights, model.state_dict()), strict=True)
    return model.eval(), meta, digest[:16]


def _config(config_path: Path) -> dict[str, Any]:
    """config.json's values; CheckpointError if it is not a JSON object (one copied in by
    hand may be caught half-written)."""
    try:
        values = json.loads(config_path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"{config_path} is not JSON ({exc}); it may be partly copied — copy the checkpoint "
            f"directory again, {CONFIG} last"
        ) from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{config_path} is not a JSON object; retrain the checkpoint")
    return values


def _meta(
    values: dict[str, Any], config_path: Path, expected_fingerprint: str | None
) -> CheckpointMeta:
    """config.json's metadata, refused unless this barcast can serve it."""
    if values.get("format") != FORMAT:
        raise CheckpointError(
            f"{config_path}: not a barcast TFT checkpoint (format {values.get('format')!r})"
        )
    if values.get("version") != VERSION:
        raise CheckpointError(
            f"{config_path}: checkpoint format version {values.get('version')}, this barcast "
            f"reads version {VERSION}; retrain it with this barcast's `barcast train`"
        )
    try:
        meta = CheckpointMeta.from_dict(values)
    except (KeyError, TypeError, ValueError) as exc:  # ConfigError is a ValueError
        raise CheckpointError(
            f"{config_path}: {type(exc).__name__} {exc} reading its metadata; the file is "
            "incomplete or from another barcast version — copy it again or retrain"
        ) from None
    if expected_fingerprint is not None and meta.feature_fingerprint != expected_fingerprint:
        raise CheckpointError(
            f"checkpoint {config_path.parent} was trained on feature set "
            f"{meta.feature_fingerprint}, but the feature engine here computes "
            f"{expected_fingerprint}; retrain with `barcast train` on this feature engine (or "
            "run the features version it was trained with)"
        )
    _check_width(meta, config_path, expected_fingerprint)
    return meta


def _check_width(meta: CheckpointMeta, config_path: Path, expected_fingerprint: str | None) -> None:
    """A model, its normalizer and, for this feature engine's fingerprint, the engine agree on
    how many historical features a row holds: a checkpoint trained on part of the features
    (one once held 50 of 225) is refused here, not at its first forecast or never."""
    n_hist, normalized = meta.config.n_hist, len(meta.normalizer.center)
    if normalized != n_hist:
        raise CheckpointError(
            f"{config_path}: its normalizer holds {normalized} features and its model takes "
            f"{n_hist}; the checkpoint is inconsistent — retrain it with `barcast train`"
        )
    from features.engine import FINGERPRINT, N_FEATURES

    if expected_fingerprint == FINGERPRINT and n_hist != N_FEATURES:
        raise CheckpointError(
            f"checkpoint {config_path.parent} takes {n_hist} historical features, but the "
            f"feature engine here computes {N_FEATURES} under its fingerprint; retrain it with "
            "`barcast train`, which trains on every one"
        )


def _tensors(weights: Path, expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The stored tensors, refused unless they are exactly the model's names and shapes."""
    with safe_open(str(weights), framework="pt") as f:
        stored = set(f.keys())
        missing = sorted(set(expected) - stored)
        unexpected = sorted(stored - set(expected))
        if missing or unexpected:
            raise CheckpointError(
                f"{weights} does not match the model in {CONFIG}: missing tensors "
                f"{missing[:5]}{'...' if len(missing) > 5 else ''}, unexpected "
                f"{unexpected[:5]}{'...' if len(unexpected) > 5 else ''}; the checkpoint is "
                "from another barcast version or corrupt — retrain it"
            )
        tensors = {}
        for name, target in expected.items():
            tensor = f.get_tensor(name)
            if tensor.shape != target.shape:
                raise CheckpointError(
                    f"{weights}: tensor {name} has shape {tuple(tensor.shape)} but "
                    f"{CONFIG} builds {tuple(target.shape)}; retrain the checkpoint"
                )
            tensors[name] = tensor
    return tensors


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _shrink(value: Any) -> float:
    if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        raise CheckpointError(
            f"shrink {value!r} in {CONFIG} is not a share in [0, 1]; retrain the checkpoint"
        )
    return float(value)


def _fast(values: Any) -> FastBlend:
    """A checkpoint written before the fast blend has none (share 0)."""
    if values is None:
        return FastBlend()
    if not isinstance(values, dict):
        raise ValueError(f"fast blend {values!r} is not a mapping of half-life and share")
    return FastBlend.from_dict(values)
