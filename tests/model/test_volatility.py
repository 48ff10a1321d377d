"""model.volatility: the window EWMA the scale is built from."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from model.covariates import NS_PER_MIN
from model.dataset import WindowsOf, fit_profile, window_rows
from model.volatility import (
    MINUTES_PER_DAY,
    SCALE_INPUTS,
    VolatilityScale,
    _window_ewma,
    window_ewma,
)
from tests.model.test_baselines import START, scaled_panel


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_compiled_window_ewma_is_the_recursion_bit_for_bit(dtype: type) -> None:
    """Gaps and non-finite returns leave the variance as it was; numpy's promotion and
    rounding, step by step: checkpoints fitted before the kernel was compiled scale alike."""
    rng = np.random.default_rng(3)
    square = (rng.normal(size=(40, 60)) ** 2).astype(dtype)
    square[rng.random(square.shape) < 0.05] = np.nan
    square[rng.random(square.shape) < 0.02] = np.inf
    gap = (rng.random(square.shape) < 0.05).astype(dtype)
    start = (rng.random(40) + 0.1).astype(dtype)
    decay = 0.5 ** (1 / 30.0)
    expected = start
    for k in range(1, square.shape[1]):
        x = np.where((gap[:, k] > 0) | ~np.isfinite(square[:, k]), expected, square[:, k])
        expected = decay * expected + (1 - decay) * x
    got = window_ewma(square, gap, start, 30.0)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_kernel_is_compiled_before_any_call_for_windows_as_served(dtype: type) -> None:
    """Strided columns of a window (as `VolatilityScale.inputs` gives them) run on a kernel
    compiled when the module was imported: no forecast waits on a compilation."""
    compiled = list(_window_ewma.overloads)
    inputs = np.random.default_rng(0).random((8, 60, 7)).astype(dtype)
    got = window_ewma(inputs[..., 0] ** 2, inputs[..., 3], inputs[:, 0, 4] ** 2, 30.0)
    assert got.dtype == dtype and np.isfinite(got).all()
    assert list(_window_ewma.overloads) == compiled and len(compiled) == 2


def test_the_scale_fits_in_chunks_of_windows_as_on_a_copy_of_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`fit_volatility` hands the fit lazy windows (`WindowsOf`): a year of validation windows
    copied at once would outgrow the feature panel. The fit, chunk by chunk, is the same to the
    bit, and its peak memory is a fraction of one copy of the windows."""
    panel = scaled_panel(days=12, seed=1, daily=True)
    profile = fit_profile(panel, int(START + 10 * MINUTES_PER_DAY * NS_PER_MIN))
    ends = np.arange(100, len(panel.ts) - 10)
    rows = window_rows(panel.features, 60)
    args = (panel.ts[ends], panel.targets[ends])
    whole = VolatilityScale.fit(profile, SCALE_INPUTS, rows[ends], *args)
    monkeypatch.setattr("model.volatility.FIT_CHUNK", 1000)
    tracemalloc.start()
    chunked = VolatilityScale.fit(profile, SCALE_INPUTS, WindowsOf(rows, ends), *args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert chunked.to_dict() == whole.to_dict()
    assert peak < rows[ends].nbytes / 3, (peak, rows[ends].nbytes)
