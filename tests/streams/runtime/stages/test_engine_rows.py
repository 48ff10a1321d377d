"""The features stage's engine states live as rows of one array (EngineRows): each keeps its
values as the array grows, a forgotten symbol's row is reused without touching its state, and
the stage computes every symbol in its own row, across growth and a restore."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import numpy as np
import orjson
import pandas as pd

from features import engine
from features.corrections import correct_history
from features.corrections.history import bars_from_frame
from streams.runtime.commit import END
from streams.runtime.records import FeatureRow, Record
from streams.runtime.stages.engine_rows import FIRST_ROWS, EngineRows
from streams.runtime.stages.features import SymbolFeatures
from tests.bar_streams import expected_features
from tests.streams.runtime.stages.test_corrections_features import stages
from tests.streams.runtime.test_stores import MemoryChangelogs


def placed(rows: EngineRows, held: dict[bytes, SymbolFeatures], n: int, seed: int) -> dict:
    """n symbols of random states placed and held: key -> (symbol, its state before)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        key, symbol = b"%d-%d" % (seed, i), SymbolFeatures(vector=rng.random(engine.STATE_SIZE))
        held[key] = symbol
        out[key] = (symbol, symbol.vector.copy())
        rows.place(key, symbol)
    return out


def test_placed_states_keep_their_values_as_the_array_grows() -> None:
    held: dict[bytes, SymbolFeatures] = {}
    rows = EngineRows(lambda key, symbol: held.get(key) is symbol)
    symbols = placed(rows, held, 2 * FIRST_ROWS + 5, seed=0)
    assert len(rows.array) == 4 * FIRST_ROWS
    assert sorted(s.row for s, _ in symbols.values()) == list(range(len(symbols)))
    for key, (symbol, before) in symbols.items():
        assert np.array_equal(symbol.vector, before)
        assert np.shares_memory(symbol.vector, rows.array[symbol.row])
        assert rows.place(key, symbol) == symbol.row  # placed once


def test_a_forgotten_symbols_row_is_reused_and_its_state_kept() -> None:
    held: dict[bytes, SymbolFeatures] = {}
    rows = EngineRows(lambda key, symbol: held.get(key) is symbol)
    forgotten = placed(rows, held, FIRST_ROWS, seed=1)
    held.clear()  # partitions moved: the store forgot them
    kept = placed(rows, held, FIRST_ROWS, seed=2)
    assert len(rows.array) == FIRST_ROWS  # their rows reused, not grown
    for symbol, before in forgotten.values():
        assert symbol.row == -1 and not np.shares_memory(symbol.vector, rows.array)
        assert np.array_equal(symbol.vector, before)
    for symbol, before in kept.values():
        assert np.array_equal(symbol.vector, before)
        assert np.array_equal(rows.array[symbol.row], before)


def test_the_stage_computes_each_symbol_in_its_own_row(sixe_bars: pd.DataFrame) -> None:
    """More symbols than the array's first rows, each its own bars; half-way the store is
    flushed, forgotten and restored (partitions moved back), so every state is placed again."""
    n_symbols, n = FIRST_ROWS + 26, 30
    values = {
        b"S%d" % k: [
            orjson.dumps(b)
            for b in bars_from_frame(sixe_bars.iloc[7 * k : 7 * k + n], symbol=f"S{k}")
        ]
        for k in range(n_symbols)
    }
    interleaved = [(key, v[i]) for i in range(n) for key, v in values.items()]
    raw = [Record("bars.raw", 0, i, 0.0, k, v, []) for i, (k, v) in enumerate(interleaved)]
    corrections, features = stages(MemoryChangelogs())
    computed: dict[str, list[FeatureRow]] = defaultdict(list)
    for start in range(0, len(raw), 700):
        if start == 1400:
            store = features.store
            store.put_changed()
            asyncio.run(store.changelog.flush())
            store.forget()
            asyncio.run(store.restore(0, END))
        cleaned = corrections.run(raw[start : start + 700], now_ns=time.time_ns())
        for row in features.run(cleaned.items).rows:
            assert isinstance(row, FeatureRow)
            computed[row.symbol].append(row)
    assert len(computed) == n_symbols
    for key, symbol_values in values.items():
        expected, warm = expected_features(correct_history(symbol_values).clean)
        rows = computed[key.decode()]
        assert [r.values.tobytes() for r in rows] == [v.tobytes() for v in expected]
        assert [r.warm for r in rows] == list(warm)
