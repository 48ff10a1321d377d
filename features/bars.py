"""Bars as barcast reads them, below every consumer of bars: prices in DBN fixed point (int64
in 1e-9 units, so nothing is lost to float rounding before the corrections see them), the
6EH4-style bar CSV, and the conversion of clean bars into the feature engine's float columns.
The corrections, the feature engine's callers, training and the worker all go through these.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import zstandard

TS_MIN = 946_684_800 * 10**9  # 2000-01-01: no CME bar in DBN is older
TS_MAX = 4_102_444_800 * 10**9  # 2100-01-01
PRICE_SCALE = 1e-9
UNDEF_PRICE = 2**63 - 1
FIXED_PER_UNIT = round(1 / PRICE_SCALE)
PRICE_FIELDS = ("open", "high", "low", "close")


class ControlKind(StrEnum):
    """What a control record of a bar topic says: the value of its `control` field."""

    END_OF_INTERVAL = "end_of_interval"
    OUTAGE = "outage"  # bars from ts_event up to end may be missing: the feed was down
    ROLL = "roll"  # the instrument behind a continuous symbol changes at ts_event
    # The symbol's states were dropped at ts_event: no bar of it for BARCAST_EXPIRE_DAYS
    EXPIRED = "expired"


def is_control(value: Any) -> bool:
    """Whether a decoded value of a bar topic is a control record (END_OF_INTERVAL), no bar."""
    return isinstance(value, dict) and "control" in value


def key_problem(symbol: str, ts: int) -> str | None:
    """What keeps a record's symbol or time from keying a state (None: nothing): a NUL in the
    symbol (the stores key a symbol's parts as symbol, NUL, part), a time outside 2000-2100
    (the calendars and the datetime types hold no other)."""
    if "\0" in symbol:
        return f"symbol {symbol!r} holds a NUL character; no symbol does"
    if not TS_MIN <= ts < TS_MAX:
        return f"ts_event {ts} is outside 2000-01-01..2100-01-01; it must be UTC nanoseconds"
    return None


def valid_control(value: dict[str, Any]) -> bool:
    """Whether a control record has every field its kind needs (the topics' schema): the
    corrections take no other, a bar with a `control` field is malformed."""
    kind, ts, end = value.get("control"), value.get("ts_event"), value.get("end")
    if not isinstance(kind, str) or kind not in CONTROL_KINDS or type(ts) is not int:
        return False
    if key_problem(str(value.get("symbol", "")), ts) is not None:
        return False
    if kind == ControlKind.OUTAGE:
        return type(end) is int and end > ts
    if kind == ControlKind.ROLL:
        raws, ratio = value.get("raw_symbols"), value.get("ratio")
        return (
            isinstance(value.get("symbol"), str)
            and isinstance(raws, list)
            and len(raws) == 2
            and all(isinstance(r, str) for r in raws)
            and type(ratio) is float
            and math.isfinite(ratio)
            and ratio > 0
        )
    if kind == ControlKind.EXPIRED:
        last = value.get("last_ts")
        return isinstance(value.get("symbol"), str) and type(last) is int and last < ts
    return True


CONTROL_KINDS = frozenset(kind.value for kind in ControlKind)
CONTROL_FORMS = (
    'a control record is {"control": "end_of_interval", "ts_event": <int>}, {"control": '
    '"outage", "ts_event": <int>, "end": <int, later>} or {"control": "roll", "ts_event": '
    '<int>, "symbol": <str>, "raw_symbols": [<old>, <new>], "ratio": <float, positive>}, or '
    '{"control": "expired", "ts_event": <int>, "symbol": <str>, "last_ts": <int, earlier>}; '
    "ts_event in UTC nanoseconds from 2000 to 2100, a symbol without a NUL character"
)


def to_fixed(prices: np.ndarray) -> np.ndarray:
    """Float prices as DBN fixed-point int64, `round(price * 1e9)`; NaN, an infinity or a price
    beyond int64's fixed point (which would wrap to a negative one) becomes UNDEF_PRICE."""
    with np.errstate(invalid="ignore"):
        undefined = ~(np.abs(prices) < 2.0**63 / FIXED_PER_UNIT)
    fixed = np.rint(np.where(undefined, 0.0, prices) * FIXED_PER_UNIT).astype(np.int64)
    fixed[undefined] = UNDEF_PRICE
    return fixed


def engine_columns(
    bars: list[dict[str, Any]], rolls: Sequence[tuple[int, float]] = ()
) -> tuple[np.ndarray, ...]:
    """`bars.clean` values as the feature engine's input columns: ts_event, open, high, low,
    close (fixed-point to float), volume, synthetic. The features agent and offline replays
    convert through this one function, so both feed the engine identical floats.

    `rolls`: a continuous symbol's rolls, in order, each as the index of the first bar after it
    and its ratio (the new contract's price over the old's); the bars from each are fed at the
    level of before the first (`rolled_price`), as the feature stage feeds them."""
    prices = [np.array([b[f] for b in bars], dtype=np.float64) * PRICE_SCALE for f in PRICE_FIELDS]
    scale = 1.0
    for k, (start, ratio) in enumerate(rolls):
        end = rolls[k + 1][0] if k + 1 < len(rolls) else len(bars)
        scale /= ratio
        for column, name in zip(prices, PRICE_FIELDS, strict=True):
            column[start:end] = [rolled_price(b[name], scale) for b in bars[start:end]]
    return (
        np.array([b["ts_event"] for b in bars], dtype=np.int64),
        *prices,
        np.array([b["volume"] for b in bars], dtype=np.float64),
        np.array([b.get("status") == "synthetic" for b in bars], dtype=np.bool_),
    )


def rolled_price(fixed: int, scale: float) -> float:
    """A fixed-point price as the feature engine is fed it once its symbol has rolled: times
    `scale` (1 divided by each roll's ratio in turn), rounded to the fixed-point unit."""
    return round(fixed * scale) * PRICE_SCALE


def read_bar_csv(path: Path) -> pd.DataFrame:
    """A NautilusTrader-style bar CSV (timestamp_utc = bar close) as ts_event (int64 ns, bar
    open), open/high/low/close (float64) and volume (float64)."""
    frame = pd.read_csv(path)
    ts = pd.to_datetime(frame["timestamp_utc"], utc=True).dt.as_unit("ns") - pd.Timedelta("1min")
    columns = {"ts_event": ts.astype("int64").to_numpy()}
    for name in (*PRICE_FIELDS, "volume"):
        columns[name] = frame[name].astype("float64").to_numpy()
    return pd.DataFrame(columns)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first bytes


class TruncatedZstd(ValueError):
    """A zstd stream that is corrupt or ends inside a frame."""


def zstd_decoded(read: Callable[[], bytes]) -> Iterator[bytes]:
    """The decoded bytes of a zstd stream of one or more frames (Databento writes a DBN file's
    metadata in a frame of its own), its compressed bytes from `read()` until it returns b"";
    `TruncatedZstd` where the stream is corrupt or ends inside a frame (a file cut short, which
    databento's own reader takes without a word)."""
    dctx = zstandard.ZstdDecompressor()
    frame, in_frame = dctx.decompressobj(), False
    while raw := read():
        while raw:
            try:
                out = frame.decompress(raw)
            except zstandard.ZstdError as exc:
                raise TruncatedZstd(f"corrupt zstd data ({exc})") from None
            in_frame = True
            if out:
                yield out
            if not frame.eof:
                break
            raw, frame, in_frame = frame.unused_data, dctx.decompressobj(), False
    if in_frame:
        raise TruncatedZstd("truncated zstd frame (the file ends mid-frame)")
