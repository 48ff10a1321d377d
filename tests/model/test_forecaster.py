"""The worker's inference API: fp32 and the device choice, prices, the incremental path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from model import checkpoint
from model.checkpoint import CheckpointMeta
from model.config import TFTConfig
from model.covariates import SymbolVocab, future_covariates
from model.forecaster import ForecastBatch, Forecaster
from model.normalization import Normalizer
from model.volatility import TimeOfDayProfile, VolatilityScale
from tests.checkpoints import untrained_model

torch.set_num_threads(1)

CONFIG = TFTConfig(
    lookback=10,
    horizon=4,
    hidden=32,
    heads=4,
    lstm_layers=2,
    n_hist=40,
    var_dim=4,
    n_symbols=2,
    dropout=0.0,
)
START = 1_705_000_000_000_000_000


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = untrained_model(CONFIG)
    path = tmp_path_factory.mktemp("ckpt")
    rng = np.random.default_rng(0)
    meta = CheckpointMeta(
        config=CONFIG,
        feature_fingerprint="fp",
        normalizer=Normalizer(rng.normal(size=40), rng.uniform(0.5, 2.0, size=40)),
        volatility=VolatilityScale(TimeOfDayProfile.flat(), tuple(range(7)), floor=3e-4),
        interval_scale=np.ones((CONFIG.horizon, 3)),
        vocab=SymbolVocab(("ES",)),
        persistence_quantiles=np.zeros((4, 3)),
    )
    checkpoint.save(path, model, meta)
    return path


def window_batch(n: int = 6, steps: int | None = None, seed: int = 1) -> ForecastBatch:
    rng = np.random.default_rng(seed)
    return ForecastBatch(
        symbols=["ESH4", "NQH4"] * (n // 2),
        ts_event=START + np.arange(n) * 60_000_000_000,
        close=rng.uniform(4000, 5000, n),
        features=rng.normal(size=(n, steps or CONFIG.lookback, 40)) * 3,
    )


def test_fp32_predictions_equal_the_model_on_normalized_inputs(directory: Path) -> None:
    forecaster = Forecaster(directory, device="cpu")
    batch = window_batch()
    forecast = forecaster.predict(batch)
    model, meta, _ = checkpoint.load(directory)
    symbol, reals = meta.vocab.encode(batch.symbols)
    assert batch.features is not None
    with torch.inference_mode():
        outputs = model(
            torch.from_numpy(symbol),
            torch.from_numpy(reals),
            torch.from_numpy(meta.normalizer.apply(batch.features)),
            torch.from_numpy(future_covariates(batch.ts_event, CONFIG.horizon)),
        ).quantiles.numpy()
    inputs = batch.features[:, :, :7]
    expected = meta.to_returns(outputs.astype(np.float64), batch.ts_event, inputs)
    np.testing.assert_allclose(forecast.quantiles, expected, rtol=1e-6, atol=1e-12)
    assert forecast.quantiles.shape == (6, CONFIG.horizon, 3)
    np.testing.assert_allclose(
        forecast.prices, batch.close[:, None, None] * np.exp(forecast.quantiles)
    )
    assert np.all(np.diff(forecast.prices, axis=-1) >= 0)
    assert forecaster.name == "cpu-fp32" and len(forecaster.model_id) == 16


def replay(forecaster: Forecaster, bars: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Forecasts along a replay, from a cache of per-bar encodings and from full windows."""
    stream = window_batch(n=2, steps=bars, seed=5)
    assert stream.features is not None
    cache: list[torch.Tensor] = []
    cached, full = [], []
    for t in range(bars):
        encoded, weights = forecaster.encode(stream.symbols[:1], stream.features[:1, t : t + 1])
        assert encoded.shape == (1, 1, CONFIG.hidden) and weights.shape == (1, 1, 40)
        cache.append(encoded)
        if len(cache) < CONFIG.lookback:
            continue
        window = ForecastBatch(
            stream.symbols[:1],
            stream.ts_event[:1] + t * 60_000_000_000,
            stream.close[:1],
            stream.features[:1, t + 1 - CONFIG.lookback : t + 1],
        )
        encoded_window = torch.cat(cache[-CONFIG.lookback :], dim=1)
        # in the model's own units: divided by each window's volatility scale
        scale = forecaster.meta.volatility.scale(
            window.ts_event, window.features[:, :, :7], CONFIG.horizon
        )[..., None]
        cached.append(forecaster.predict_encoded(window, encoded_window).quantiles / scale)
        full.append(forecaster.predict(window).quantiles / scale)
    return np.concatenate(cached), np.concatenate(full)


def test_cached_encodings_equal_full_windows(directory: Path) -> None:
    """Encoding each bar once as it arrives and forecasting from the cache gives the full
    forward's quantiles (<= 1e-5 in model units) along a replay."""
    cached, full = replay(Forecaster(directory, device="cpu"))
    assert np.abs(cached - full).max() <= 1e-5


def test_bad_inputs_are_refused_with_clear_messages(directory: Path) -> None:
    forecaster = Forecaster(directory, device="cpu")
    with pytest.raises(ValueError, match=r"expected \(batch, 10, 40\)"):
        forecaster.predict(window_batch(steps=9))
    with pytest.raises(ValueError, match="lookback=10"):
        forecaster.predict_encoded(window_batch(), torch.zeros(6, 9, CONFIG.hidden))


def test_device_choice(directory: Path) -> None:
    if torch.cuda.is_available():
        forecaster = Forecaster(directory, device="auto")
        assert forecaster.name == "cuda-bf16"
        forecast = forecaster.predict(window_batch())
        assert np.all(np.isfinite(forecast.quantiles))
    else:
        assert Forecaster(directory, device="auto").name == "cpu-fp32"
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            Forecaster(directory, device="cuda")
