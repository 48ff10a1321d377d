"""The streaming encoder (model.stream): its first forecast is the window encoder's, its state
carries, truncated backpropagation stops at a segment, and `barcast train` learns with it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from model.config import ConfigError, TFTConfig
from model.covariates import SymbolVocab
from model.dataset import Part, Split, WindowData, window_ends
from model.normalization import Normalizer
from model.stream import forward_sequences, sequences
from model.synthetic import synthetic_panel
from model.tft import TemporalFusionTransformer
from model.train import fit_volatility, train_on_panel
from tests.checkpoints import untrained_model
from tests.model.test_train import QUIET, TINY

torch.set_num_threads(1)

STREAM = replace(TINY, encoder="stream", lstm_layers=2, n_symbols=2)


def stream_data(n_bars: int = 900) -> tuple[WindowData, np.ndarray]:
    panel = synthetic_panel(n_bars=n_bars, n_features=16)
    panel.warm[:5] = False  # the stream starts at the first warm bar
    split = Split(panel.ts.max() + 1, panel.ts.max() + 1, panel.ts.max() + 1, 40)
    ends = window_ends(panel, split, Part.TRAIN, STREAM.lookback, STREAM.horizon)
    volatility = fit_volatility(panel, split, ends, STREAM.lookback)
    data = WindowData(
        panel,
        Normalizer(np.zeros(16), np.ones(16)),
        SymbolVocab(("ES",)),
        STREAM.lookback,
        STREAM.horizon,
        1e-4,
        volatility,
    )
    return data, ends


def test_the_encoder_is_a_config_choice_whose_default_is_the_stream_one() -> None:
    assert TFTConfig().encoder == "stream"
    assert TFTConfig.from_dict(STREAM.to_dict()) == STREAM
    window = replace(STREAM, encoder="window")
    saved_before_encoders = {k: v for k, v in window.to_dict().items() if k != "encoder"}
    assert TFTConfig.from_dict(saved_before_encoders) == window
    with pytest.raises(ConfigError, match="encoder"):
        TFTConfig(encoder="recurrent")


def test_a_streams_first_forecast_is_the_window_encoders_and_later_ones_carry_its_state() -> None:
    data, ends = stream_data(n_bars=300)
    torch.manual_seed(0)
    model = untrained_model(STREAM)
    window = TemporalFusionTransformer(replace(STREAM, encoder="window")).eval()
    window.load_state_dict(model.state_dict())
    first = int(data.run_start[ends[0]]) + STREAM.lookback - 1  # the first whole window
    assert first == ends[0]
    cpu = torch.device("cpu")
    with torch.no_grad():
        streamed = forward_sequences(
            model, sequences(data, ends, 200, ends), data.symbol_ids[:1].expand(len(ends)), cpu
        )
        batch = data.batch(ends)
        windowed = window(batch.symbol, batch.static_reals, batch.x_hist, batch.x_future).quantiles
    torch.testing.assert_close(streamed[0], windowed[0], rtol=1e-5, atol=1e-6)
    # a later window's stream has carried its state over earlier bars than the window's own
    assert not torch.allclose(streamed[-1], windowed[-1], rtol=1e-3, atol=1e-5)


def test_backpropagation_is_truncated_at_a_segment() -> None:
    data, ends = stream_data()
    lookback = STREAM.lookback
    torch.manual_seed(0)
    model = untrained_model(STREAM).train()
    last = ends[-1:]
    batch = sequences(data, last, 3 * lookback, None)
    batch.rows.requires_grad_(True)
    quantiles = forward_sequences(model, batch, batch.symbol, torch.device("cpu"))
    quantiles.sum().backward()
    assert batch.rows.grad is not None
    reach = batch.rows.grad[batch.index[0]].abs().sum(-1)  # the sequence's bars, in order
    # the last segment's own bars matter; the segment before sends only constants
    assert (reach[2 * lookback :] > 0).all()
    assert (reach[:lookback] == 0).all()


def test_training_a_streaming_model_learns_and_saves_its_encoder(tmp_path: Path) -> None:
    # One layer at a higher rate learns the signal in fewer bars and epochs; carrying two
    # layers' state is held by the exactness tests above.
    panel = synthetic_panel(n_bars=1000, n_features=16)
    config = replace(QUIET, epochs=6, lr=1e-2)
    model = replace(STREAM, n_symbols=1, lstm_layers=1)
    metrics = train_on_panel(panel, tmp_path, model, config, "synthetic", {"files": {}})
    history = json.loads((tmp_path / "metrics.json").read_text())
    assert history[-1]["train_loss"] < history[0]["train_loss"] / 2
    assert history[-1]["val_loss"] < history[0]["val_loss"] / 2
    assert metrics["val_pinball"] > 0
    carry = metrics["carry"]  # model.carry, on the calibration windows
    assert carry["windows"] > 0 and carry["max_difference_of_width"] >= 0
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["metrics"]["carry"] == carry
    assert (
        saved["model"]["encoder"] == "stream" if "model" in saved else saved["encoder"] == "stream"
    )
