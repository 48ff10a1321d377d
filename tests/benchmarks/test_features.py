"""The feature benchmark's symbols are different series, each a real bar path transformed."""

from __future__ import annotations

import numpy as np

from benchmarks.features.series import GOLDEN, derived_series


def month(n: int = 240) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    close = 1.1 * np.exp(np.cumsum(rng.normal(0, 1e-4, n)))
    open_ = np.concatenate([[1.1], close[:-1]]) * np.exp(rng.normal(0, 2e-5, n))
    spread = np.abs(rng.normal(0, 5e-5, (2, n)))
    return {
        "ts_event": np.arange(n, dtype=np.int64) * 60_000_000_000,
        "open": open_,
        "high": np.maximum(open_, close) * (1 + spread[0]),
        "low": np.minimum(open_, close) * (1 - spread[1]),
        "close": close,
        "volume": rng.integers(1, 50, n).astype(float),
    }


def test_symbol_zero_is_the_month_and_the_others_differ() -> None:
    m = month()
    bars = derived_series(m, 8)
    for field in ("open", "high", "low", "close", "volume"):
        np.testing.assert_allclose(bars[field][:, 0], m[field], rtol=1e-12)
    closes = bars["close"].T
    assert all(not np.allclose(a, b) for i, a in enumerate(closes) for b in closes[i + 1 :])
    assert (bars["ts_event"] == m["ts_event"][:, None]).all()


def test_every_bar_keeps_a_bars_shape() -> None:
    bars = derived_series(month(), 16)
    for field in ("open", "close"):
        assert (bars["high"] >= bars[field]).all() and (bars["low"] <= bars[field]).all()


def test_a_symbols_returns_are_the_months_rotated_scaled_and_reflected() -> None:
    m, n, symbols, s = month(), 240, 4, 1
    bars = derived_series(m, symbols, minutes=100)
    start = s * n // symbols
    factor = -(2.0 ** (2.0 * ((s * GOLDEN + 0.5) % 1.0) - 1.0))  # odd: reflected
    source = np.diff(np.log(m["close"]))[start : start + 99]
    np.testing.assert_allclose(np.diff(np.log(bars["close"][:, s])), factor * source, atol=1e-12)
    np.testing.assert_allclose(bars["volume"][:, s], m["volume"][start : start + 100])
    assert bars["close"].shape == (100, symbols)
