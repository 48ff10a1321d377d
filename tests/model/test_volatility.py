"""model.volatility: the window EWMA the scale is built from."""

from __future__ import annotations

import numpy as np
import pytest

from model.volatility import _window_ewma, window_ewma


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
