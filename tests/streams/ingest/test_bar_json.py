"""The compiled bar encoder writes exactly what orjson would, for any record."""

from __future__ import annotations

from typing import get_type_hints

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from features import bars
from streams import schema
from streams.ingest.bar_json import encode_bars, source_json
from streams.ingest.dbn_source import OHLCV_DTYPE
from streams.ingest.symbols import SymbolBook

INT64 = st.integers(-(2**63), 2**63 - 1)
PRICE = st.one_of(INT64, st.just(bars.UNDEF_PRICE), st.integers(-(10**12), 10**14))
RECORD = st.fixed_dictionaries(
    {
        "instrument_id": st.integers(0, 2**32 - 1),
        "ts_event": st.integers(0, 2**64 - 1),
        "rtype": st.integers(0, 255),
        "publisher_id": st.integers(0, 2**16 - 1),
        "open": PRICE,
        "high": PRICE,
        "low": PRICE,
        "close": PRICE,
        "volume": st.integers(0, 2**64 - 1),
        "symbol": st.text(min_size=1, max_size=30),
        "raw_symbol": st.text(min_size=1, max_size=30),
    }
)


def expected_value(record: dict[str, int | str], source: str) -> bytes:
    bar = {name: record[name] for name in get_type_hints(schema.RawBar) if name != "source"}
    bar["source"] = source
    return orjson.dumps(bar)


@settings(max_examples=60, deadline=None)
@given(records=st.lists(RECORD, min_size=1, max_size=40), source=st.text(max_size=40))
def test_values_are_byte_identical_to_orjson(records: list[dict], source: str) -> None:
    book = SymbolBook()
    bars = np.zeros(len(records), OHLCV_DTYPE)
    index, raw = np.empty(len(records), np.int64), np.empty(len(records), np.int64)
    for i, record in enumerate(records):
        for name in OHLCV_DTYPE.names:
            if name in record:
                bars[name][i] = record[name]
        index[i] = book.index_of(record["symbol"])
        raw[i] = book.index_of(record["raw_symbol"])
    values, keys, timestamps = encode_bars(bars, index, book, source_json(source), raw)
    assert values == [expected_value(r, source) for r in records]
    assert keys == [r["symbol"].encode() for r in records]
    assert timestamps == [r["ts_event"] // 1_000_000 for r in records]


def test_value_keys_follow_the_schema_contract() -> None:
    book = SymbolBook()
    bars = np.zeros(1, OHLCV_DTYPE)
    values, _, _ = encode_bars(bars, np.array([book.index_of("ESU4")]), book, source_json("x"))
    assert list(orjson.loads(values[0])) == list(get_type_hints(schema.RawBar))
    assert orjson.loads(values[0])["raw_symbol"] == "ESU4", "its key's symbol, by default"


def test_empty_batch_encodes_to_nothing() -> None:
    book = SymbolBook()
    empty = np.zeros(0, OHLCV_DTYPE)
    assert encode_bars(empty, np.zeros(0, np.int64), book, source_json("x")) == ([], [], [])
