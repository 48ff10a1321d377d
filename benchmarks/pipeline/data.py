"""The pipeline benchmark's input: every symbol's bars on one minute grid, and the reference.

Each synthetic symbol is a different slice of the 6EH4 month, re-timed onto a common grid; the
reference is what the worker must publish by the offline rule (`model.serving.offline`), plus
the burst windows the engine-alone anchor forecasts in-process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import orjson

from features.bars import read_bar_csv
from features.corrections import bars_from_frame
from model.config import TFTConfig
from model.serving.forecast_engine import WindowRequest
from model.serving.offline import clean_history, window_requests
from streams.ingest.convert import SIXE_CSV
from streams.settings import Settings

MINUTE_NS = 60_000_000_000
LOOKBACK = TFTConfig().lookback
Key = tuple[str, int]  # (symbol, ts_event)


@dataclass
class Series:
    """Every symbol's raw bars on one minute grid: `values[k][m]` is symbol k's bar of minute m."""

    symbols: list[str]
    values: list[list[bytes]]
    t0: int

    def ts(self, minute: int) -> int:
        return self.t0 + minute * MINUTE_NS

    def messages(
        self, rows: Iterable[int], minutes: Iterable[int]
    ) -> tuple[list[bytes], list[bytes], list[int]]:
        """(values, keys, Kafka timestamps in ms), minute by minute, like a replay sends them."""
        rows = list(rows)
        values, keys, stamps = [], [], []
        for m in minutes:
            for k in rows:
                values.append(self.values[k][m])
                keys.append(self.symbols[k].encode())
                stamps.append(self.ts(m) // 1_000_000)
        return values, keys, stamps

    def keys(self, rows: Iterable[int], minutes: Iterable[int]) -> set[Key]:
        return {(self.symbols[k], self.ts(m)) for m in minutes for k in rows}


def build_series(settings: Settings, n_symbols: int, n_minutes: int) -> Series:
    month = read_bar_csv(settings.data_dir / SIXE_CSV)
    t0 = int(month["ts_event"].iloc[0])
    symbols = [f"S{k:04d}" for k in range(n_symbols)]
    grid = t0 + np.arange(n_minutes, dtype=np.int64) * MINUTE_NS
    values = []
    for k, symbol in enumerate(symbols):
        start = (k * 211) % (len(month) - n_minutes)
        frame = month.iloc[start : start + n_minutes].assign(ts_event=grid)
        bars = bars_from_frame(frame, symbol=symbol, instrument_id=1 + k, source="replay:bench")
        values.append([orjson.dumps(bar) for bar in bars])
    return Series(symbols, values, t0)


@dataclass
class Reference:
    """What the worker must publish (the offline rule), and the burst windows for the anchor."""

    keys: set[Key]
    anchor: dict[int, list[WindowRequest]]  # minute -> one window per burst symbol
    statuses: dict[str, int]


def reference(series: Series, burst_rows: range, anchor_minutes: list[int]) -> Reference:
    keys: set[Key] = set()
    anchor: dict[int, list[WindowRequest]] = {m: [] for m in anchor_minutes}
    statuses: dict[str, int] = {}
    for k, symbol in enumerate(series.symbols):
        clean = clean_history(series.values[k])[symbol]
        for bar in clean.bars:
            statuses[bar["status"]] = statuses.get(bar["status"], 0) + 1
        mine = []
        for request in window_requests(symbol, clean, LOOKBACK):
            keys.add((symbol, request.ts_event))
            if k in burst_rows and (request.ts_event - series.t0) // MINUTE_NS in anchor:
                mine.append(request)
        if mine:  # the anchor's windows overlap: one copy of their rows, each window a view
            rows = np.concatenate([mine[0].values, *(r.values[-1:] for r in mine[1:])])
            for i, request in enumerate(mine):
                request.values = rows[i : i + LOOKBACK]
                anchor[(request.ts_event - series.t0) // MINUTE_NS].append(request)
    return Reference(keys, anchor, statuses)
