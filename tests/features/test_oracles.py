"""Oracles: TA-Lib 0.8.2 for the indicators it defines (bit-exact, NaN warm-up included), and
plain-Python references for the CUSUM filter and the decayed-count transition probabilities."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import talib

from features import core, cusum, engine, long_memory, regime

COLUMNS = ("ts_event", "open", "high", "low", "close", "volume")
INDEX = {name: i for i, name in enumerate(engine.FEATURE_NAMES)}


def batch(bars: dict[str, np.ndarray]) -> np.ndarray:
    return engine.compute_batch(*(bars[c] for c in COLUMNS))[0]


def as_dict(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    return {c: frame[c].to_numpy() for c in COLUMNS}


def with_flat_stretches(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Real bars with a flat start and a 600-bar flat stretch: true range decays below
    TA-Lib's zero band, exercising every TA_IS_ZERO branch."""
    real = as_dict(frame.iloc[:3000])
    level = real["close"][1999]
    n = 3640
    bars = {c: np.empty(n) for c in COLUMNS[1:]}
    pieces = [
        (slice(0, 40), None),
        (slice(40, 2040), slice(0, 2000)),
        (slice(2040, 2640), None),
        (slice(2640, 3640), slice(2000, 3000)),
    ]
    for dst, src in pieces:
        for c in COLUMNS[1:]:
            bars[c][dst] = real[c][src] if src else (level if c != "volume" else 10.0)
    bars["ts_event"] = real["ts_event"][0] + np.arange(n, dtype=np.int64) * 60_000_000_000
    return bars


def ta_lib_references(bars: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    h, lo, c = bars["high"], bars["low"], bars["close"]
    refs = {
        "plus_di_14": talib.PLUS_DI(h, lo, c, 14),
        "minus_di_14": talib.MINUS_DI(h, lo, c, 14),
        "dx_14": talib.DX(h, lo, c, 14),
        "adx_14": talib.ADX(h, lo, c, 14),
        "adxr_14": talib.ADXR(h, lo, c, 14),
    }
    for n in (7, 14, 28):
        refs[f"rsi_{n}"] = talib.RSI(c, n)
    for n in (5, 12, 26, 60):  # the features are C / EMA - 1 and C / SMA - 1
        refs[f"ema_{n}_dev"] = c / talib.EMA(c, n) - 1.0
    for n in (5, 10, 20, 60):
        refs[f"sma_{n}_dev"] = c / talib.SMA(c, n) - 1.0
    line, signal, hist = talib.MACD(c, 12, 26, 9)
    refs["macd_rel"], refs["macd_signal_rel"], refs["macd_hist_rel"] = (
        line / c,
        signal / c,
        hist / c,
    )
    return refs


@pytest.mark.parametrize("series", ["6EH4 month", "flat stretches"])
def test_ta_lib_indicators_are_bit_exact(sixe_bars: pd.DataFrame, series: str) -> None:
    bars = as_dict(sixe_bars) if series == "6EH4 month" else with_flat_stretches(sixe_bars)
    values = batch(bars)
    for name, ref in ta_lib_references(bars).items():
        got = values[:, INDEX[name]]
        assert np.isnan(got[: engine.WARMUPS[INDEX[name]]]).all()
        assert np.array_equal(got, ref, equal_nan=True), (
            f"{name}: {np.sum(got != ref)} bars differ, max |diff| {np.nanmax(np.abs(got - ref))}"
        )


def ewma_var_before(close: np.ndarray) -> list[tuple[float, float]]:
    """(r, bias-corrected EWMA of r² before the bar) per bar, as core.ewma_var defines it."""
    lam = core.EWMA_FAST
    total = weight = 0.0
    prev = math.log(close[0])
    out = []
    for t, c in enumerate(close):
        lc = math.log(c)
        r = lc - prev if t else 0.0
        prev = lc
        before = 0.0
        if t:
            before = total / weight if weight > 0.0 else 0.0
            total = lam * total + (1.0 - lam) * (r * r)
            weight = lam * weight + (1.0 - lam)
        out.append((r, before))
    return out


def cusum_reference(close: np.ndarray) -> np.ndarray:
    """The symmetric CUSUM filter of AFML snippet 2.4 with h = max(3σ, floor), in plain Python."""
    rows = []
    pos = neg = 0.0
    last = [0, 0, 0]  # bar + 1 of the last up, down, any event
    direction = 0.0
    events: list[tuple[int, int]] = []
    for t, (r, var) in enumerate(ewma_var_before(close)):
        h = max(cusum.CUSUM_K * math.sqrt(var), cusum.H_FLOOR)
        pos, neg = max(0.0, pos + r), min(0.0, neg + r)
        event = 0
        if neg < -h:
            neg, event = 0.0, -1
        elif pos > h:
            pos, event = 0.0, 1
        if event:
            last[0 if event > 0 else 1] = last[2] = t + 1
            direction = float(event)
        events.append((event > 0, event < 0))
        window = events[-60:]
        since = [min(t + 1 - x, cusum.SINCE_CAP) / cusum.SINCE_CAP for x in last]
        rows.append(
            [
                pos / h,
                neg / h,
                float(event),
                *since,
                sum(u for u, _ in window) / len(window),
                sum(d for _, d in window) / len(window),
                direction,
                h,
            ]
        )
    return np.array(rows)


def regime_reference(close: np.ndarray) -> np.ndarray:
    """Decayed transition counts of down/flat/up states and their smoothed probabilities."""
    counts = [[0.0] * 3 for _ in range(3)]
    prev_state = 0
    rows = []
    for t, (r, var) in enumerate(ewma_var_before(close)):
        flat = abs(r) <= regime.FLAT_K * math.sqrt(var)
        state = regime.FLAT if flat else (regime.UP if r > 0.0 else regime.DOWN)
        if t:
            counts = [[n * regime.DECAY for n in row] for row in counts]
            counts[prev_state][state] += 1.0
        prev_state = state
        totals = [row[0] + row[1] + row[2] + 3.0 * regime.PRIOR for row in counts]
        p = [(counts[state][j] + regime.PRIOR) / totals[state] for j in range(3)]
        entropy = -(p[0] * math.log(p[0]) + p[1] * math.log(p[1]) + p[2] * math.log(p[2]))
        stay = sum((counts[i][i] + regime.PRIOR) / totals[i] for i in range(3))
        rows.append([p[state], p[regime.UP], p[regime.DOWN], entropy / math.log(3.0), stay / 3.0])
    return np.array(rows)


def test_cusum_matches_the_plain_python_filter(sixe_bars: pd.DataFrame) -> None:
    bars = as_dict(sixe_bars)
    values = batch(bars)[:, cusum.FIRST : cusum.FIRST + 10]
    ref = cusum_reference(bars["close"])
    for j, spec in enumerate(cusum.SPECS):
        w = spec.warmup
        assert np.array_equal(values[w:, j], ref[w:, j]), spec.name
    events = values[:, 2]
    assert 100 < np.count_nonzero(events) < len(events) / 3  # the filter does fire, not always


def test_transition_probabilities_match_decayed_counts(sixe_bars: pd.DataFrame) -> None:
    bars = as_dict(sixe_bars)
    values = batch(bars)[:, regime.FIRST : regime.FIRST + 5]
    ref = regime_reference(bars["close"])
    w = regime.WARMUP
    assert np.array_equal(values[w:], ref[w:])
    assert ((values[w:, :3] > 0.0) & (values[w:, :3] < 1.0)).all()


@pytest.mark.parametrize(
    ("name", "decay"),
    [
        ("ewma_vol_slow", core.EWMA_SLOW),
        ("ewma_vol_day", long_memory.EWMA_DAY),
        ("ewma_vol_week", long_memory.EWMA_WEEK),
    ],
)
def test_slow_ewma_volatilities_leave_out_session_break_jumps(
    sixe_bars: pd.DataFrame, name: str, decay: float
) -> None:
    """ewma_vol_slow is the level the TFT's volatility scale starts from, and the day and week
    EWMAs its long memory: like the volatility baselines (`model.volatility.contiguous_returns`),
    they fold only returns of consecutive minutes, so the month's daily reopens and weekend gaps
    leave them as they were."""
    from model.volatility import contiguous_returns

    bars = as_dict(sixe_bars)
    got = batch(bars)[:, INDEX[name]]
    r = contiguous_returns(bars["ts_event"], bars["close"])
    breaks = np.count_nonzero(np.isnan(r[1:]))
    assert breaks >= 20  # the month has its daily halts and weekends
    ref = np.empty(len(r))
    total = weight = 0.0
    for t, x in enumerate(r):
        if math.isfinite(x):
            total = decay * total + (1.0 - decay) * x * x
            weight = decay * weight + (1.0 - decay)
        ref[t] = math.sqrt(total / weight) if weight > 0.0 else 0.0
    warm = engine.WARMUPS[INDEX[name]]
    np.testing.assert_allclose(got[warm:], ref[warm:], rtol=1e-12)
