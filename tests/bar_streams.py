"""`bars.raw` test streams built from the real 6EH4 month with every kind of fault mixed in,
and the feature rows the features agent must publish for clean bars."""

from __future__ import annotations

import random
from itertools import chain
from typing import Any

import numpy as np
import orjson
import pandas as pd

from features import engine
from features.bars import UNDEF_PRICE, engine_columns
from features.corrections import bars_from_frame


def faulty_stream(
    bars: pd.DataFrame,
    n: int,
    seed: int = 7,
    symbol: str = "6EH4",
    instrument_id: int = 42005804,
) -> list[bytes]:
    """n real 6EH4 bars (as `symbol`) with every kind of fault mixed in, as `bars.raw` values."""
    rng = random.Random(seed)
    clean = bars_from_frame(
        bars.iloc[:n], symbol=symbol, instrument_id=instrument_id, source="test"
    )
    out: list[bytes] = []
    for i, bar in enumerate(clean):
        out.append(orjson.dumps(bar))
        kind = i % 97
        if kind == 10:
            out.append(orjson.dumps(bar))  # identical duplicate
        elif kind == 20:
            out.append(orjson.dumps({**bar, "volume": bar["volume"] + 1}))  # conflicting
        elif kind == 30 and i > 5:
            out.append(orjson.dumps(clean[i - 3]))  # replayed old bar
        elif kind == 40:
            out.append(b"not json at all")
        elif kind == 50:
            out.append(orjson.dumps({k: v for k, v in bar.items() if k != "close"}))
    # Faults on the bar itself: undefined high, inverted envelope, mis-scaled prices.
    for i in rng.sample(range(100, len(out) - 1), 12):
        if not out[i].startswith(b"{"):
            continue  # the non-JSON fault above
        bar = orjson.loads(out[i])
        if "close" not in bar:
            continue
        fault = rng.choice(["undef", "envelope", "scale"])
        if fault == "undef":
            bar["high"] = UNDEF_PRICE
        elif fault == "envelope":
            bar["high"], bar["low"] = bar["low"], bar["high"]
        else:
            bar = {**bar, **{f: bar[f] * 10 for f in ("open", "high", "low", "close")}}
        out[i] = orjson.dumps(bar)
    return out


def tiled_stream(bars: pd.DataFrame, n: int, symbols: list[str]) -> list[tuple[bytes, bytes]]:
    """(key, value) records: the first n bars as a faulty stream per symbol (a seed each),
    interleaved one message per symbol in turn as a live feed of several symbols would be."""
    streams = [
        [(symbol.encode(), value) for value in faulty_stream(bars, n, seed, symbol, 1000 + seed)]
        for seed, symbol in enumerate(symbols)
    ]
    return list(chain.from_iterable(zip(*streams, strict=True)))


def expected_features(bars: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """`compute_batch` over one symbol's `bars.clean` values: what the features agent must
    publish for them, bit for bit (converted by `engine_columns`, as in training)."""
    return engine.compute_batch(*engine_columns(bars))
