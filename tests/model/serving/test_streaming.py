"""The served streaming encoder: a symbol's forecasts equal a recomputation of its stream from
the start bit for bit however its bars were batched or skipped, its state survives a round trip
through bytes (a restart) exactly, and that state's size does not grow with the bars streamed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from model.forecaster import Forecaster
from model.serving import forecast_engine
from model.serving.forecast_engine import ForecastEngine
from model.serving.streaming import SymbolStream
from model.tft import StaticContext
from tests.checkpoints import make_checkpoint
from tests.model.serving.test_forecast_engine import SYMBOLS, replay, requests_of


@pytest.fixture()
def stream_checkpoint(tmp_path: Path) -> Path:
    make_checkpoint(tmp_path / "s", encoder="stream")
    return tmp_path / "s"


def test_incremental_equals_a_full_recomputation_bit_for_bit(stream_checkpoint, feature_rows):
    requests = requests_of(feature_rows, 60, 160, lookback=60)
    requests = [r for i, r in enumerate(requests) if i % 5 != 3]  # bars not forecast: stepped
    full = ForecastEngine(stream_checkpoint).predict(requests)  # every stream in one call
    for batch in (1, 7, 64):
        engine = ForecastEngine(stream_checkpoint)
        parts = [engine.predict(requests[i : i + batch]) for i in range(0, len(requests), batch)]
        assert np.array_equal(np.concatenate(parts), full)
    assert np.all(np.diff(full, axis=2) >= 0), "quantiles crossed"


def test_a_streams_first_forecast_is_the_window_encoders_then_its_state_carries(
    tmp_path: Path, feature_rows
) -> None:
    make_checkpoint(tmp_path / "s", encoder="stream")
    make_checkpoint(tmp_path / "w")  # the same weights
    stream = replay(ForecastEngine(tmp_path / "s"), feature_rows, 60, 100, batch=3)
    window = replay(ForecastEngine(tmp_path / "w"), feature_rows, 60, 100, batch=3)
    first, size = len(SYMBOLS), np.abs(window).max()
    assert np.abs(stream[:first] - window[:first]).max() <= 1e-5 * size
    assert np.abs(stream[first:] - window[first:]).max() > 1e-4 * size
    cold = replay(ForecastEngine(tmp_path / "s"), feature_rows, 60, 100, 3, incremental=False)
    assert np.abs(cold - window).max() <= 1e-5 * size  # not incremental: each streamed anew


def test_a_restored_stream_goes_on_exactly_as_the_uninterrupted_one(
    stream_checkpoint, feature_rows
):
    requests = requests_of(feature_rows, 60, 200, lookback=60)
    never_stopped = ForecastEngine(stream_checkpoint)
    expected = [never_stopped.predict(requests[i : i + 9]) for i in range(0, len(requests), 9)]
    before = ForecastEngine(stream_checkpoint)
    cut = 9 * 11
    for i in range(0, cut, 9):
        before.predict(requests[i : i + 9])
    restarted = ForecastEngine(stream_checkpoint)
    device = restarted.device
    for symbol, stream in before.served.streams.items():
        restarted.served.streams[symbol] = SymbolStream.from_bytes(stream.to_bytes(), device)
    after = [restarted.predict(requests[i : i + 9]) for i in range(cut, len(requests), 9)]
    assert np.array_equal(np.concatenate(after), np.concatenate(expected[cut // 9 :]))


def test_a_symbols_state_is_bounded_whatever_it_has_streamed(stream_checkpoint, feature_rows):
    engine = ForecastEngine(stream_checkpoint)
    config = engine.served.forecaster.config
    sizes = []
    for stop in (70, 400):
        engine.predict(requests_of(feature_rows, stop - 10, stop, lookback=60))
        sizes.append(len(engine.served.streams[SYMBOLS[0]].to_bytes()))
    d_head = config.hidden // config.heads
    floats = 2 * config.lstm_layers * config.hidden + config.lookback * (config.hidden + d_head)
    assert sizes == [28 + 4 * floats + 8 * config.n_hist] * 2  # 28: the head's counts


def test_not_incremental_a_window_is_streamed_anew_whatever_shares_its_batch(
    stream_checkpoint, feature_rows
):
    """Without incremental encoding a forecast is its window's alone: a window of the same
    symbol before it in the batch does not carry into it."""
    first, second = requests_of(feature_rows, 60, 62, lookback=60)[:: len(SYMBOLS)]
    alone = ForecastEngine(stream_checkpoint).predict([second], incremental=False)
    batched = ForecastEngine(stream_checkpoint).predict([first, second], incremental=False)
    assert np.array_equal(batched[1:], alone)
    assert np.array_equal(alone, ForecastEngine(stream_checkpoint).predict([second]))


def test_a_stream_steps_under_the_gpus_lower_precision(
    stream_checkpoint, feature_rows, monkeypatch: pytest.MonkeyPatch
):
    """CUDA serves eager programs under bf16 autocast, where the static contexts (a LayerNorm
    last) come out in float32 and the step's keys and values in bf16; simulated on CPU, the
    streams keep their float32 and forecast as the fp32 engine does, to bf16's precision."""
    requests = requests_of(feature_rows, 60, 64, lookback=60)
    exact = ForecastEngine(stream_checkpoint).predict(requests)
    made, static = Forecaster.__init__, ForecastEngine._static

    def eager(self: Forecaster, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.precision = "bf16"  # as on CUDA: eager programs, not traced ones

    def float32(self: ForecastEngine, *args: Any) -> StaticContext:
        return StaticContext(*(t.float() for t in static(self, *args)))

    monkeypatch.setattr(Forecaster, "__init__", eager)
    monkeypatch.setattr(ForecastEngine, "_static", float32)
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    monkeypatch.setattr(forecast_engine, "autocast_for", lambda device: bf16)
    engine = ForecastEngine(stream_checkpoint)
    low = np.concatenate([engine.predict(requests[i : i + 5]) for i in range(0, len(requests), 5)])
    assert all(s.carried.dtype == torch.float32 for s in engine.served.streams.values())
    assert np.abs(low - exact).max() <= 0.05 * np.abs(exact).max()
