"""Encode arrays of OHLCV records into `bars.raw` messages: value, key and timestamp.

The value is exactly the bytes `orjson.dumps(RawBar)` would produce (same key order, same
integer and string formatting; a test holds the two equal), but written for a whole batch by
one compiled loop: building and dumping a dict per bar in Python costs more than the whole
per-message budget of a replay that keeps up with librdkafka.
"""

from __future__ import annotations

from itertools import pairwise

import numba
import numpy as np
import orjson

from streams.ingest.symbols import SymbolBook

_FIELDS = (
    "instrument_id",
    "symbol",
    "raw_symbol",
    "ts_event",
    "rtype",
    "publisher_id",
    "open",
    "high",
    "low",
    "close",
    "volume",
    "source",
)
_PREFIXES = [
    (b"{" if i == 0 else b",") + orjson.dumps(name) + b":" for i, name in enumerate(_FIELDS)
]
_LITERALS = np.frombuffer(b"".join(_PREFIXES), dtype=np.uint8)
_LITERAL_OFFSETS = np.cumsum([0] + [len(p) for p in _PREFIXES]).astype(np.int64)
_COLUMNS = (
    ("instrument_id", np.uint32),
    ("ts_event", np.uint64),
    ("rtype", np.uint8),
    ("publisher_id", np.uint16),
    ("open", np.int64),
    ("high", np.int64),
    ("low", np.int64),
    ("close", np.int64),
    ("volume", np.uint64),
)
_MAX_DIGITS = 21  # sign and 20 digits: any int64 or uint64


@numba.njit(cache=True, inline="always")
def _put(out: np.ndarray, pos: int, src: np.ndarray, start: int, stop: int) -> int:
    for i in range(start, stop):
        out[pos] = src[i]
        pos += 1
    return pos


@numba.njit(cache=True, inline="always")
def _put_uint(out: np.ndarray, pos: int, value: np.uint64) -> int:
    if value == 0:
        out[pos] = 48
        return pos + 1
    digits = 0
    probe = value
    while probe > 0:
        probe //= np.uint64(10)
        digits += 1
    end = pos + digits
    while value > 0:
        end -= 1
        out[end] = 48 + np.uint8(value % np.uint64(10))
        value //= np.uint64(10)
    return pos + digits


@numba.njit(cache=True, inline="always")
def _put_int(out: np.ndarray, pos: int, value: np.int64) -> int:
    if value < 0:
        out[pos] = 45  # '-'; -(value + 1) + 1 avoids overflowing on INT64_MIN
        return _put_uint(out, pos + 1, np.uint64(-(value + 1)) + np.uint64(1))
    return _put_uint(out, pos, np.uint64(value))


@numba.njit(cache=True)
def _encode(instrument_id, symbol, raw, ts_event, rtype, publisher_id, open_, high, low, close,
            volume, symbol_blob, symbol_offsets, source, literals, literal_offsets, out,
            offsets) -> int:  # fmt: skip
    pos = 0
    lit = literal_offsets
    for i in range(len(ts_event)):
        offsets[i] = pos
        pos = _put(out, pos, literals, lit[0], lit[1])
        pos = _put_uint(out, pos, np.uint64(instrument_id[i]))
        pos = _put(out, pos, literals, lit[1], lit[2])
        s = symbol[i]
        pos = _put(out, pos, symbol_blob, symbol_offsets[s], symbol_offsets[s + 1])
        pos = _put(out, pos, literals, lit[2], lit[3])
        s = raw[i]
        pos = _put(out, pos, symbol_blob, symbol_offsets[s], symbol_offsets[s + 1])
        pos = _put(out, pos, literals, lit[3], lit[4])
        pos = _put_uint(out, pos, np.uint64(ts_event[i]))
        pos = _put(out, pos, literals, lit[4], lit[5])
        pos = _put_uint(out, pos, np.uint64(rtype[i]))
        pos = _put(out, pos, literals, lit[5], lit[6])
        pos = _put_uint(out, pos, np.uint64(publisher_id[i]))
        pos = _put(out, pos, literals, lit[6], lit[7])
        pos = _put_int(out, pos, np.int64(open_[i]))
        pos = _put(out, pos, literals, lit[7], lit[8])
        pos = _put_int(out, pos, np.int64(high[i]))
        pos = _put(out, pos, literals, lit[8], lit[9])
        pos = _put_int(out, pos, np.int64(low[i]))
        pos = _put(out, pos, literals, lit[9], lit[10])
        pos = _put_int(out, pos, np.int64(close[i]))
        pos = _put(out, pos, literals, lit[10], lit[11])
        pos = _put_uint(out, pos, np.uint64(volume[i]))
        pos = _put(out, pos, literals, lit[11], lit[12])
        pos = _put(out, pos, source, 0, len(source))
    offsets[len(ts_event)] = pos
    return pos


def source_json(source: str) -> np.ndarray:
    """The `source` value and the closing brace, pre-encoded once per file or session."""
    return np.frombuffer(orjson.dumps(source) + b"}", dtype=np.uint8)


def encode_bars(
    bars: np.ndarray,
    symbol_index: np.ndarray,
    book: SymbolBook,
    source: np.ndarray,
    raw_index: np.ndarray | None = None,
) -> tuple[list[bytes], list[bytes], list[int]]:
    """(values, keys, timestamps in ms) for OHLCV records whose symbols `book` resolved: keyed
    by `symbol_index`, naming `raw_index` (default: the same) as their raw symbol."""
    count = len(bars)
    if count == 0:
        return [], [], []
    blob, symbol_offsets, keys = book.tables()
    longest = int(np.diff(symbol_offsets).max())
    width = len(_LITERALS) + 9 * _MAX_DIGITS + 2 * longest + len(source)
    out = np.empty(count * width, dtype=np.uint8)
    offsets = np.empty(count + 1, dtype=np.int64)
    symbol_index = np.ascontiguousarray(symbol_index, dtype=np.int64)
    raw_index = symbol_index if raw_index is None else np.ascontiguousarray(raw_index, np.int64)
    # Contiguous writable copies of each column: one compiled signature whatever the input
    # (strided views of read-only file buffers, filtered copies, live single records).
    columns = [np.ascontiguousarray(bars[name], dtype=dtype) for name, dtype in _COLUMNS]
    ts_event = columns[1]
    end = _encode(
        columns[0],
        symbol_index,
        raw_index,
        *columns[1:],
        blob,
        symbol_offsets,
        source,
        _LITERALS,
        _LITERAL_OFFSETS,
        out,
        offsets,
    )
    data = out[:end].tobytes()
    values = [data[a:b] for a, b in pairwise(offsets.tolist())]
    timestamps = (ts_event // 1_000_000).astype(np.int64).tolist()
    return values, keys[symbol_index].tolist(), timestamps
