"""Incremental encoding equals full recomputation: over a long replay, after a restart and
after a hot reload."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from features import engine as feature_engine
from model.calibration import FastBlend
from model.checkpoint import CheckpointError
from model.serving.checkpoints import load_engine
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.programs import owned_rows
from streams.settings import Settings
from tests.checkpoints import make_checkpoint

SYMBOLS = ("6EH4", "ESU4", "NQU4")


def replay(
    engine: ForecastEngine, rows, start: int, stop: int, batch: int, incremental: bool = True
) -> np.ndarray:
    """Three symbols, each replaying the history from its own offset, interleaved by minute
    and forecast in batches of `batch` (so a batch often holds one symbol several times)."""
    requests = requests_of(rows, start, stop, engine.lookback)
    out = [
        engine.predict(requests[i : i + batch], incremental) for i in range(0, len(requests), batch)
    ]
    return np.concatenate(out)


def requests_of(rows, start: int, stop: int, lookback: int) -> list[WindowRequest]:
    """`replay`'s requests: minutes `start` to `stop` of each symbol, interleaved."""
    values, ts, close = rows
    return [
        WindowRequest(
            symbol,
            symbol.encode(),
            0,
            t + 1 + 7 * k,
            values[t + 7 * k + 1 - lookback : t + 7 * k + 1],
            int(ts[t]),
            float(close[t + 7 * k]),
            0,
        )
        for t in range(start, stop)
        for k, symbol in enumerate(SYMBOLS)
    ]


def test_incremental_equals_full_over_a_long_replay(tmp_path: Path, feature_rows) -> None:
    make_checkpoint(tmp_path / "a")
    cached = ForecastEngine(tmp_path / "a")
    full = ForecastEngine(tmp_path / "a")
    a = replay(cached, feature_rows, 60, 460, batch=7)
    b = replay(full, feature_rows, 60, 460, batch=7, incremental=False)
    assert a.shape == (1200, 10, 3)
    print("exact:", np.array_equal(a, b), np.abs(a - b).max())
    assert np.abs(a - b).max() <= 1e-5
    assert np.all(np.diff(a, axis=2) >= 0), "quantiles crossed"


def test_a_forecast_does_not_depend_on_its_micro_batch(tmp_path: Path, feature_rows) -> None:
    make_checkpoint(tmp_path / "a")
    one = replay(ForecastEngine(tmp_path / "a"), feature_rows, 60, 160, batch=1)
    many = replay(ForecastEngine(tmp_path / "a"), feature_rows, 60, 160, batch=64)
    assert np.array_equal(one, many)


def test_max_batch_1_runs_each_window_unpadded(tmp_path: Path, feature_rows) -> None:
    """With max_batch=1 every window runs alone, in chunks of one window and one step: exact
    between incremental and full encoding, and the padded chunks' forecasts to float rounding."""
    make_checkpoint(tmp_path / "a")
    lone = ForecastEngine.from_settings(tmp_path / "a", Settings(max_batch=1))
    assert (lone.served.programs.forward_rows, lone.served.programs.encode_rows) == (1, 1)
    a = replay(lone, feature_rows, 60, 75, batch=1)
    full = ForecastEngine(tmp_path / "a", padded=False)
    assert np.array_equal(a, replay(full, feature_rows, 60, 75, batch=1, incremental=False))
    padded = replay(ForecastEngine(tmp_path / "a"), feature_rows, 60, 75, batch=1)
    assert np.abs(a - padded).max() <= 1e-5


def test_a_serving_size_forecast_is_exact_in_any_batch(tmp_path: Path) -> None:
    """At the serving size the kernels take other code paths than in the small model: each
    window alone, all at once, shuffled into uneven batches, or fully encoded, agrees exactly."""
    make_checkpoint(tmp_path / "a", hidden=64, heads=4)
    rng = np.random.default_rng(0)
    n, lookback = 64, 60
    values = rng.normal(size=(n, lookback + 1, feature_engine.N_FEATURES))
    minute = 60_000_000_000

    def windows(step: int) -> list[WindowRequest]:
        return [
            WindowRequest(
                f"S{i}",
                b"",
                0,
                lookback + step,
                values[i, step : lookback + step],
                1_700_000_000_000_000_000 + step * minute,
                1.0,
                0,
            )
            for i in range(n)
        ]

    def forecast(sizes: list[int]) -> np.ndarray:
        """The second of two sliding windows per symbol (incremental), in batches of `sizes`."""
        engine = ForecastEngine(tmp_path / "a")
        order = rng.permutation(n)
        out = np.empty((n, 10, 3))
        for step in (0, 1):
            requests = windows(step)
            for chunk in np.split(order, np.cumsum(sizes)[:-1]):
                out[chunk] = engine.predict([requests[i] for i in chunk])
        return out

    whole = forecast([n])
    assert np.array_equal(forecast([1] * n), whole)
    assert np.array_equal(forecast([3, 29, 1, 17, 14]), whole)
    full = ForecastEngine(tmp_path / "a").predict(windows(1), incremental=False)
    assert np.array_equal(full, whole)


def test_restart_and_hot_reload_start_from_a_fresh_cache(tmp_path: Path, feature_rows) -> None:
    make_checkpoint(tmp_path / "a", seed=1)
    make_checkpoint(tmp_path / "b", seed=2)
    engine = ForecastEngine(tmp_path / "a")
    replay(engine, feature_rows, 60, 200, batch=16)
    restarted = ForecastEngine(tmp_path / "a")
    assert (
        np.abs(
            replay(engine, feature_rows, 200, 260, batch=5)
            - replay(restarted, feature_rows, 200, 260, batch=5)
        ).max()
        <= 1e-5
    )
    engine.swap(engine.prepare(tmp_path / "b"))
    reference = ForecastEngine(tmp_path / "b")
    after = replay(engine, feature_rows, 260, 320, batch=9)
    assert (
        np.abs(after - replay(reference, feature_rows, 260, 320, batch=9, incremental=False)).max()
        <= 1e-5
    )
    assert engine.model_id != restarted.model_id


def test_a_checkpoint_for_another_feature_set_is_refused(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "old", fingerprint="0" * 16)
    with pytest.raises(CheckpointError, match="feature set 0000000000000000"):
        ForecastEngine(tmp_path / "old")


@pytest.mark.parametrize("quantiles", [(0.05, 0.1, 0.5, 0.9, 0.95), (0.25, 0.5, 0.75)])
def test_a_checkpoint_of_other_quantiles_is_refused(
    tmp_path: Path, quantiles: tuple[float, ...]
) -> None:
    """It trains and evaluates (`barcast evaluate` loads it), but the worker's calibration and
    baselines take q10, q50 and q90: served, it would fail on its first forecast."""
    make_checkpoint(tmp_path / "other", quantiles=quantiles)
    assert ForecastEngine(tmp_path / "other").quantiles == quantiles
    with pytest.raises(CheckpointError, match=r"quantiles \(.*\), and the worker publishes"):
        load_engine(tmp_path / "other", Settings(), None, None)


def test_a_canary_of_another_horizon_is_refused(tmp_path: Path) -> None:
    """A canary's forecasts are scored against the serving model's horizon by horizon: one of
    another horizon beside it would fail the scoring stage on its first score, again at every
    restart. Alone (BARCAST_CANARY=off, or the first checkpoint) it serves."""
    make_checkpoint(tmp_path / "longer", horizon=12)
    with pytest.raises(CheckpointError, match="12 minutes ahead and the model serving 10"):
        load_engine(tmp_path / "longer", Settings(), None, None, horizon=10)
    assert load_engine(tmp_path / "longer", Settings(), None, None)[0].horizon == 12


@pytest.mark.parametrize("count", [180, 230])  # behind and ahead of the cached window's 200
def test_a_window_that_restarted_over_other_bars_is_not_served_from_the_cache(
    tmp_path: Path, feature_rows, count: int
) -> None:
    """A window stored by another feature set restarts empty, and its rows are numbered anew
    over other bars: a cache of the rows once numbered so would mix another timeline in."""
    make_checkpoint(tmp_path / "a")
    engine, full = ForecastEngine(tmp_path / "a"), ForecastEngine(tmp_path / "a")
    replay(engine, feature_rows, 60, 200, batch=16)  # 6EH4's cache: rows 141..200
    values, ts, close = feature_rows
    other = WindowRequest(
        "6EH4", b"6EH4", 0, count, values[500:560], int(ts[559]), float(close[559]), 0
    )
    assert engine.served.cache["6EH4"].count == 200
    # Every row encoded afresh, as a full recomputation encodes them: the very same numbers.
    assert np.array_equal(engine.predict([other], True), full.predict([other], False))


@pytest.mark.parametrize("encoder", ["window", "stream"])
def test_a_forecast_does_not_depend_on_the_inference_threads(
    tmp_path: Path, feature_rows, encoder: str
) -> None:
    """BARCAST_INFERENCE_THREADS runs a batch's chunks side by side, each on one core: the same
    forecasts bit for bit, cold (every row of 3 symbols' windows) and warm, many chunks each."""
    make_checkpoint(tmp_path / "a", encoder=encoder)
    one = ForecastEngine(tmp_path / "a")
    three = ForecastEngine.from_settings(tmp_path / "a", Settings(inference_threads=3))
    assert three.pool is not None and three.pool._max_workers == 3
    a = replay(one, feature_rows, 60, 140, batch=48)
    b = replay(three, feature_rows, 60, 140, batch=48)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("fast", [FastBlend(), FastBlend(5.0, 0.6)])
def test_a_scale_given_forecasts_the_same_and_cached_windows_own_their_memory(
    tmp_path: Path, feature_rows, fast: FastBlend
) -> None:
    """The worker computes a batch's volatility scale once, for the model and the shadow
    baselines; and copies each symbol's window into the cache without torch ops."""
    make_checkpoint(tmp_path / "a")
    given, alone = ForecastEngine(tmp_path / "a"), ForecastEngine(tmp_path / "a")
    for engine in (given, alone):  # with a fast blend, its EWMA reads the scale's inputs
        forecaster = engine.served.forecaster
        forecaster.meta = replace(forecaster.meta, fast=fast)
    batch = requests_of(feature_rows, 60, 64, given.lookback)
    for r in batch:
        r.variances = (1e-8, 2e-8)
    scale = given.scale(batch)
    assert np.array_equal(given.predict(batch, scale=scale), alone.predict(batch))
    assert np.array_equal(
        given.predict(batch[:3], scale=given.scale(batch[:3])), alone.predict(batch[:3])
    )
    for name, q in given.shadow(batch, scale).items():
        assert np.array_equal(q, alone.shadow(batch)[name], equal_nan=True), name
    for symbol, cached in given.served.cache.items():
        window = cached.encoded
        assert window.untyped_storage().nbytes() == window.nbytes, "a view of the batch"
        assert torch.equal(window, alone.served.cache[symbol].encoded)


def test_owned_rows_are_copies_of_any_dtype() -> None:
    for dtype in (torch.float32, torch.bfloat16):
        batch = torch.arange(24).to(dtype).view(4, 2, 3)
        rows = owned_rows(batch, [3, 1])
        assert [r.dtype for r in rows] == [dtype, dtype]
        assert torch.equal(rows[0], batch[3]) and torch.equal(rows[1], batch[1])
        batch.zero_()
        assert all(r.abs().sum() > 0 for r in rows), "the rows changed with the batch"
