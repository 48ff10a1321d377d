"""Checkpoints hold every weight, reload to identical predictions, and refuse to load wrong."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from features.engine import FINGERPRINT, N_FEATURES
from model import checkpoint
from model.calibration import FastBlend
from model.checkpoint import CheckpointError, CheckpointMeta
from model.config import TFTConfig
from model.covariates import SymbolVocab
from model.normalization import Normalizer
from model.tft import TemporalFusionTransformer
from tests.checkpoints import make_checkpoint, untrained_model

torch.set_num_threads(1)

CONFIG = TFTConfig(
    lookback=8, horizon=3, hidden=16, heads=2, lstm_layers=2, n_hist=227, var_dim=4, n_symbols=2
)


def meta(config: TFTConfig = CONFIG) -> CheckpointMeta:
    normalizer = Normalizer(np.zeros(config.n_hist), np.ones(config.n_hist))
    return checkpoint.untrained_meta(config, SymbolVocab(("ES",)), normalizer, "features-v1")


def inputs(config: TFTConfig = CONFIG) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (
        torch.tensor([0, 1, 1]),
        torch.randn(3, 9, generator=g),
        torch.randn(3, config.lookback, config.n_hist, generator=g),
        torch.randn(3, config.horizon, config.n_future, generator=g),
    )


@pytest.fixture()
def saved(tmp_path: Path) -> tuple[Path, TemporalFusionTransformer, str]:
    torch.manual_seed(0)
    model = untrained_model(CONFIG)
    model_id = checkpoint.save(tmp_path, model, meta())
    return tmp_path, model, model_id


def test_checkpoint_holds_every_parameter(
    saved: tuple[Path, TemporalFusionTransformer, str],
) -> None:
    directory, model, model_id = saved
    weights = directory / checkpoint.WEIGHTS
    assert weights.stat().st_size >= model.n_params() * 4  # float32: not a 16-byte stub
    stored = load_file(str(weights))
    assert set(stored) == set(model.state_dict())
    assert sum(t.numel() for t in stored.values()) >= model.n_params()  # + calibration buffer
    assert model_id == hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
    header_len = struct.unpack("<Q", weights.read_bytes()[:8])[0]
    assert weights.read_bytes()[8:9] == b"{" and header_len < weights.stat().st_size
    config = json.loads((directory / checkpoint.CONFIG).read_text())
    assert config["weights"]["n_params"] == model.n_params()
    assert config["feature_fingerprint"] == "features-v1"


def test_reload_gives_identical_predictions_without_pickle(
    saved: tuple[Path, TemporalFusionTransformer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, model, model_id = saved

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("checkpoint loading must not unpickle")

    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    loaded, loaded_meta, loaded_id = checkpoint.load(directory, "features-v1")
    assert loaded_id == model_id and not loaded.training
    assert loaded_meta.config == CONFIG
    assert loaded_meta.volatility.to_dict() == meta().volatility.to_dict()
    with torch.inference_mode():
        assert torch.equal(loaded(*inputs()).quantiles, model(*inputs()).quantiles)


def test_refuses_a_feature_set_mismatch(saved: tuple[Path, TemporalFusionTransformer, str]) -> None:
    with pytest.raises(CheckpointError, match=r"trained on feature set features-v1.*features-v2"):
        checkpoint.load(saved[0], "features-v2")


def test_refuses_a_model_on_part_of_the_engines_features(tmp_path: Path) -> None:
    """Under the feature engine's own fingerprint, a model must take every feature it computes
    (the report this product answers trained on 50 of 225)."""
    config = replace(CONFIG, n_hist=50)
    normalizer = Normalizer(np.zeros(50), np.ones(50))
    part = checkpoint.untrained_meta(config, SymbolVocab(("ES",)), normalizer, FINGERPRINT)
    checkpoint.save(tmp_path, untrained_model(config), part)
    with pytest.raises(CheckpointError, match=rf"takes 50 historical features.*{N_FEATURES}"):
        checkpoint.load(tmp_path, FINGERPRINT)
    assert checkpoint.load(tmp_path)[1].config.n_hist == 50  # no engine named: nothing to match


def test_refuses_a_normalizer_of_another_width(tmp_path: Path) -> None:
    normalizer = Normalizer(np.zeros(CONFIG.n_hist - 1), np.ones(CONFIG.n_hist - 1))
    checkpoint.save(tmp_path, untrained_model(CONFIG), replace(meta(), normalizer=normalizer))
    with pytest.raises(CheckpointError, match=r"normalizer holds 226 features.*takes 227"):
        checkpoint.load(tmp_path)


def _rewrite_weights(directory: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Replace the weights and record their hash, so only the tensor check can object."""
    weights = directory / checkpoint.WEIGHTS
    save_file(tensors, str(weights))
    config = json.loads((directory / checkpoint.CONFIG).read_text())
    config["weights"]["sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    (directory / checkpoint.CONFIG).write_text(json.dumps(config))


def test_refuses_a_missing_tensor(saved: tuple[Path, TemporalFusionTransformer, str]) -> None:
    directory, model, _ = saved
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    del tensors["head.proj.weight"]
    _rewrite_weights(directory, tensors)
    with pytest.raises(CheckpointError, match=r"missing tensors \['head.proj.weight'\]"):
        checkpoint.load(directory)


def test_refuses_a_shape_mismatch(saved: tuple[Path, TemporalFusionTransformer, str]) -> None:
    directory, model, _ = saved
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    tensors["head.proj.weight"] = torch.zeros(3, 17)
    _rewrite_weights(directory, tensors)
    with pytest.raises(CheckpointError, match=r"head.proj.weight has shape \(3, 17\)"):
        checkpoint.load(directory)


def test_refuses_weights_that_do_not_match_the_config(
    saved: tuple[Path, TemporalFusionTransformer, str],
) -> None:
    directory = saved[0]
    with (directory / checkpoint.WEIGHTS).open("ab") as f:
        f.write(b"\0")
    with pytest.raises(CheckpointError, match="does not match"):
        checkpoint.load(directory)


def test_refuses_a_missing_file(saved: tuple[Path, TemporalFusionTransformer, str]) -> None:
    (saved[0] / checkpoint.CONFIG).unlink()
    with pytest.raises(CheckpointError, match=r"config\.json is missing"):
        checkpoint.load(saved[0])


def test_the_shrink_share_is_kept_and_applied_and_a_bad_one_refused(tmp_path: Path) -> None:
    """The network's share of each interval travels with the checkpoint; serving applies it
    before the interval scales; a share outside [0, 1] is refused naming the fix."""
    torch.manual_seed(0)
    model = untrained_model(CONFIG)
    shrunk = replace(meta(), shrink=0.3)
    checkpoint.save(tmp_path, model, shrunk)
    _, loaded, _ = checkpoint.load(tmp_path)
    assert loaded.shrink == 0.3
    outputs = np.array([[[-3.0, 0.0, 0.5]] * CONFIG.horizon])
    ts = np.array([1_705_000_000_000_000_000])
    rows = np.full((1, CONFIG.lookback, 7), 1e-4)
    assert not np.allclose(
        loaded.to_returns(outputs, ts, rows), meta().to_returns(outputs, ts, rows)
    )
    config = json.loads((tmp_path / checkpoint.CONFIG).read_text())
    config["shrink"] = 1.5
    (tmp_path / checkpoint.CONFIG).write_text(json.dumps(config))
    with pytest.raises(checkpoint.CheckpointError, match="retrain the checkpoint"):
        checkpoint.load(tmp_path)


def test_the_fast_blend_is_kept_and_applied_and_a_bad_one_refused(tmp_path: Path) -> None:
    """The fast EWMA's half-life and share travel with the checkpoint; serving widens the
    intervals of windows whose recent returns run above the scale (a share of 0, or a
    checkpoint from before the blend, serves as before); a share outside [0, 1] is refused."""
    torch.manual_seed(0)
    checkpoint.save(tmp_path, untrained_model(CONFIG), replace(meta(), fast=FastBlend(5.0, 0.6)))
    _, loaded, _ = checkpoint.load(tmp_path)
    assert loaded.fast == FastBlend(5.0, 0.6)
    outputs = np.array([[[-1.2816, 0.0, 1.2816]] * CONFIG.horizon])  # the scale's Gaussian
    ts = np.array([1_705_000_000_000_000_000])
    rows = np.full((1, CONFIG.lookback, 7), 1e-4)
    rows[..., 3] = 0.0  # no gap between the rows
    rows[:, -3:, 0] = 3e-3  # the last three returns jump: the fast EWMA runs ahead of the scale
    plain, blended = meta().to_returns(outputs, ts, rows), loaded.to_returns(outputs, ts, rows)
    assert (blended[..., 2] - blended[..., 0] > plain[..., 2] - plain[..., 0]).all()
    config = json.loads((tmp_path / checkpoint.CONFIG).read_text())
    del config["fast"]
    (tmp_path / checkpoint.CONFIG).write_text(json.dumps(config))
    assert checkpoint.load(tmp_path)[1].fast == FastBlend()
    config["fast"] = {"halflife": 5.0, "share": 1.5}
    (tmp_path / checkpoint.CONFIG).write_text(json.dumps(config))
    with pytest.raises(checkpoint.CheckpointError, match="not a positive half-life and a share"):
        checkpoint.load(tmp_path)


def test_a_file_is_on_disk_before_it_replaces_the_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power loss leaves the old checkpoint or the whole new one: each file's bytes are
    synced before the rename that puts it in place, and the folder after it."""
    events: list[tuple[str, str]] = []
    replace_file = os.replace

    def sync(fd: int) -> None:
        events.append(("sync", os.readlink(f"/proc/self/fd/{fd}")))

    def replace_logged(tmp: Path, path: Path) -> None:
        events.append(("replace", str(path)))
        replace_file(tmp, path)

    monkeypatch.setattr(os, "fsync", sync)
    monkeypatch.setattr(os, "replace", replace_logged)
    make_checkpoint(tmp_path)
    weights, config = (str(tmp_path / name) for name in (checkpoint.WEIGHTS, checkpoint.CONFIG))
    assert events == [
        ("sync", weights[: -len(".safetensors")] + ".tmp"),
        ("replace", weights),
        ("sync", str(tmp_path)),
        ("sync", config + ".tmp"),
        ("replace", config),
        ("sync", str(tmp_path)),
    ]
