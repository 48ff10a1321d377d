"""The timed runs of the feature benchmark: each feeds minutes of bars and returns this thread's
CPU seconds, so a competitor's cost never includes another process's time on the shared CPUs."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
from talib import stream
from talipp.indicators import ADX, EMA, MACD, RSI
from talipp.ohlcv import OHLCV

from benchmarks.features.series import COLUMNS
from features import engine
from streams.settings import REPO_ROOT

HISTORY = 100  # minutes fed before timing: TA-Lib handles open on this history
Feed = Callable[[range], float]


def barcast_minutes(states: np.ndarray, bars: dict[str, np.ndarray]) -> Feed:
    """One `update_many` per minute for every symbol, as the features agent calls it."""
    rows = np.arange(states.shape[0], dtype=np.int64)
    synthetic = np.zeros(states.shape[0], dtype=bool)
    ts, o, h, lo, c, v = (bars[k] for k in COLUMNS)

    def feed(minutes: range) -> float:
        start = time.thread_time()
        for i in minutes:
            engine.update_many(states, rows, ts[i], o[i], h[i], lo[i], c[i], v[i], synthetic)
        return time.thread_time() - start

    return feed


def barcast_bars(states: np.ndarray, bars: dict[str, np.ndarray]) -> Feed:
    """One `update_many` per bar (one symbol, one bar), its inputs 1-element views of the
    prepared columns: the cheapest way to hand it a single bar."""
    symbols = states.shape[0]
    rows = [np.array([s], dtype=np.int64) for s in range(symbols)]
    synthetic = np.zeros(1, dtype=bool)
    ts, o, h, lo, c, v = (bars[k] for k in COLUMNS)

    def feed(minutes: range) -> float:
        start = time.thread_time()
        for i in minutes:
            for s, row in enumerate(rows):
                j = slice(s, s + 1)
                engine.update_many(
                    states, row, ts[i, j], o[i, j], h[i, j], lo[i, j], c[i, j], v[i, j], synthetic
                )
        return time.thread_time() - start

    return feed


def talib_feeder(bars: dict[str, np.ndarray]) -> Feed:
    """TA-Lib's streaming ADX, RSI, EMA and MACD per symbol, opened on the first HISTORY
    minutes; each bar costs four Python calls, its inputs Python floats prepared beforehand."""
    symbols = bars["close"].shape[1]
    handles = [_talib_handles(bars, s) for s in range(symbols)]
    highs, lows, closes = (bars[k].tolist() for k in ("high", "low", "close"))

    def feed(minutes: range) -> float:
        start = time.thread_time()
        for i in minutes:
            for (adx, rsi, ema, macd), h, lo, c in zip(
                handles, highs[i], lows[i], closes[i], strict=True
            ):
                adx.update(h, lo, c)
                rsi.update(c)
                ema.update(c)
                macd.update(c)
        return time.thread_time() - start

    return feed


def _talib_handles(bars: dict[str, np.ndarray], symbol: int) -> tuple:
    h, lo, c = (bars[k][:HISTORY, symbol].copy() for k in ("high", "low", "close"))
    return stream.ADX(h, lo, c, 14), stream.RSI(c, 14), stream.EMA(c, 12), stream.MACD(c, 12, 26, 9)


def talipp_feeder(bars: dict[str, np.ndarray], minutes: int) -> Feed:
    """talipp's four indicators per symbol, on the first `minutes` minutes."""
    symbols = bars["close"].shape[1]
    indicators = [(ADX(14, 14), RSI(14), EMA(12), MACD(12, 26, 9)) for _ in range(symbols)]
    candles = [
        [OHLCV(*(float(bars[k][i, s]) for k in COLUMNS[1:])) for s in range(symbols)]
        for i in range(minutes)
    ]
    closes = bars["close"].tolist()

    def feed(span: range) -> float:
        start = time.thread_time()
        for i in span:
            for (adx, rsi, ema, macd), candle, c in zip(
                indicators, candles[i], closes[i], strict=True
            ):
                adx.add(candle)
                rsi.add(c)
                ema.add(c)
                macd.add(c)
        return time.thread_time() - start

    return feed


def alternate(feeds: Sequence[Feed], edges: np.ndarray, symbols: int) -> list[float]:
    """Median ns/bar of each feed over the slices between `edges`, every feed running each
    slice, the order rotating from one slice to the next: a load spike on this shared machine
    is an outlier for all alike and drops out of the medians, and no feed always runs right
    after another has evicted its state from the caches."""
    costs: list[list[float]] = [[] for _ in feeds]
    for k, (lo, hi) in enumerate(itertools.pairwise(edges)):
        bars = (hi - lo) * symbols
        for j in np.roll(np.arange(len(feeds)), -k):
            costs[j].append(feeds[j](range(lo, hi)) / bars * 1e9)
    return [float(np.median(c)) for c in costs]


def batch_bars_per_s(bars: dict[str, np.ndarray]) -> float:
    symbols = bars["close"].shape[1]
    columns = [np.ascontiguousarray(bars[k].T) for k in COLUMNS]
    start = time.thread_time()
    for s in range(symbols):
        engine.compute_batch(*(col[s] for col in columns))
    return columns[0].size / (time.thread_time() - start)


def jit_start_seconds(cache_dir: str) -> float:
    """Wall seconds for a fresh interpreter to import the engine and compute its first row."""
    snippet = (
        "import time; t = time.perf_counter(); import numpy as np; from features import engine; "
        "p = np.full(3, 1.1); engine.compute_batch(np.arange(3) * 60_000_000_000, p, p, p, p, p);"
        "print(time.perf_counter() - t)"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", snippet],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])
