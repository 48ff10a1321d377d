"""Turn one `bars.raw` message into a validated bar, or say exactly why it is malformed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from databento_dbn import RType

from features.bars import (
    CONTROL_FORMS,
    PRICE_FIELDS,
    UNDEF_PRICE,
    ControlKind,
    key_problem,
    valid_control,
)
from features.corrections.config import CorrectionConfig

REQUIRED = (
    "instrument_id",
    "symbol",
    "ts_event",
    "rtype",
    "publisher_id",
    *PRICE_FIELDS,
    "volume",
    "source",
)
REQUIRED_SET = frozenset(REQUIRED)
# Fields kept if present, in this order (bars.clean carries them on): the contract of a bar keyed
# by a continuous symbol.
KEPT = (*REQUIRED[:2], "raw_symbol", *REQUIRED[2:])
INT64_MIN = -(2**63)
MINUTE_NS = 60 * 10**9
RTYPE_OHLCV_1M = int(RType.OHLCV_1M)
# OHLCV rtypes with a fixed interval: their ts_event sits on the interval grid.
INTERVAL_NS = {
    int(RType.OHLCV_1S): 10**9,
    RTYPE_OHLCV_1M: MINUTE_NS,
    int(RType.OHLCV_1H): 3_600 * 10**9,
}
OHLCV_RTYPES = frozenset({*INTERVAL_NS, int(RType.OHLCV_1D), int(RType.OHLCV_EOD)})
FIELD_TYPES = {
    "instrument_id": int,
    "symbol": str,
    "ts_event": int,
    "rtype": int,
    "publisher_id": int,
    "volume": int,
    "source": str,
}
UINT_LIMITS = {"instrument_id": 2**32, "publisher_id": 2**16, "volume": 2**64}
# Longest strings a bar may carry (Databento raw symbols are ~20 characters at most).
STR_LIMITS = {"symbol": 64, "source": 256}


@dataclass(slots=True)
class Bar:
    """A validated `bars.raw` message. `data` is our own copy of the decoded dict holding
    only the `REQUIRED` fields (others are dropped): the `bars.clean` value is built in it.
    `prices` are open, high, low, close with None where undefined (UNDEF_PRICE, null or NaN);
    `digest` identifies the raw content for duplicates."""

    value: Any
    data: dict[str, Any]
    symbol: str
    ts: int
    rtype: int
    prices: list[int | None]
    digest: int


def oversized(value: Any, key_bytes: int, config: CorrectionConfig) -> str | None:
    """Why a message whose key is `key_bytes` long is too large to be a bar, or None."""
    size = key_bytes + (len(value) if isinstance(value, bytes | bytearray | str) else 0)
    if size <= config.max_bar_bytes:
        return None
    return (
        f"message of {size} bytes (key and value) exceeds the {config.max_bar_bytes}-byte "
        "limit for a bar (a bar is ~250 bytes); fix what wrote it to bars.raw"
    )


def decode(value: Any) -> dict[str, Any] | str:
    """The message as a dict we may modify, or why it is not one."""
    if type(value) is not bytes and not isinstance(value, bytearray | memoryview | str):
        if isinstance(value, Mapping):
            return dict(value)
        return f"value of type {type(value).__name__} is neither JSON bytes nor a dict"
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return f"value is not JSON ({exc}); bars.raw values are orjson-encoded dicts"
    if not isinstance(data, dict):
        return f"value is JSON {type(data).__name__}, not an object with the bar fields"
    return data


def validate(
    data: dict[str, Any], value: Any, config: CorrectionConfig, now_ns: int | None = None
) -> Bar | str:
    """The bar in `data`, or a human message saying what is malformed and how to fix it."""
    if data.get("control") == ControlKind.EXPIRED:
        return "an expired record is the corrections stage's own (bars.clean), not an input"
    if "control" in data and not valid_control(data):
        return f"malformed control record: {CONTROL_FORMS}"
    if "control" in data:
        keyed = ", keyed by its symbol" if data["control"] == ControlKind.ROLL else ""
        return (
            f"a {data['control']} control record taken as a bar: send it with the control "
            f"headers{keyed}, as streams.ingest.producer does"
        )
    if not data.keys() >= REQUIRED_SET:
        missing = [name for name in REQUIRED if name not in data]
        return f"missing field(s) {', '.join(missing)}; bars.raw values need {', '.join(REQUIRED)}"
    problem = _field_problem(data, config, now_ns)
    if problem is not None:
        return problem
    prices = _prices(data["open"], data["high"], data["low"], data["close"])
    if isinstance(prices, str):
        return prices
    defined = prices if None not in prices else [UNDEF_PRICE if p is None else p for p in prices]
    identity = (data["instrument_id"], data["publisher_id"], *defined, data["volume"])
    raw_symbol = data.get("raw_symbol", "")
    if type(raw_symbol) is not str or len(raw_symbol) > STR_LIMITS["symbol"]:
        got = f"{type(raw_symbol).__name__} {raw_symbol!r:.70}"
        return f"field 'raw_symbol' must be a string of at most 64 characters, got {got}"
    if len(data) != len(REQUIRED) + ("raw_symbol" in data):  # bars.clean takes the known ones
        data = {name: data[name] for name in KEPT if name in data}
    # Content identity for duplicates. Hashes of int tuples are deterministic in CPython (no
    # PYTHONHASHSEED); a test pins one value so an interpreter change cannot slip by.
    return Bar(value, data, data["symbol"], data["ts_event"], data["rtype"], prices, hash(identity))


def _field_problem(
    data: dict[str, Any], config: CorrectionConfig, now_ns: int | None
) -> str | None:
    """What is wrong with a bar's fields other than its prices, or None."""
    symbol, source, ts, rtype = data["symbol"], data["source"], data["ts_event"], data["rtype"]
    instrument_id, publisher_id, volume = (
        data["instrument_id"],
        data["publisher_id"],
        data["volume"],
    )
    # One chained test for the common case; the slow path below names the first bad field.
    if not (
        type(symbol) is str
        and type(source) is str
        and type(ts) is int
        and type(rtype) is int
        and type(instrument_id) is int
        and type(publisher_id) is int
        and type(volume) is int
    ):
        name = next(n for n, kind in FIELD_TYPES.items() if type(data[n]) is not kind)
        got = f"{type(data[name]).__name__} {data[name]!r:.40}"
        return f"field {name!r} must be {FIELD_TYPES[name].__name__}, got {got}"
    if not symbol:
        return "field 'symbol' is empty; it must hold the raw symbol (e.g. 'ESH4')"
    if len(symbol) > STR_LIMITS["symbol"] or len(source) > STR_LIMITS["source"]:
        name = "symbol" if len(symbol) > STR_LIMITS["symbol"] else "source"
        return f"field {name!r} has {len(data[name])} characters; at most {STR_LIMITS[name]}"
    if not (
        0 <= instrument_id < UINT_LIMITS["instrument_id"]
        and 0 <= publisher_id < UINT_LIMITS["publisher_id"]
        and 0 <= volume < UINT_LIMITS["volume"]
    ):
        name = next(n for n, limit in UINT_LIMITS.items() if not 0 <= data[n] < limit)
        return f"field {name!r}={data[name]} is outside its range [0, {UINT_LIMITS[name]})"
    if rtype not in OHLCV_RTYPES:
        return f"rtype {rtype} is not an OHLCV record type ({sorted(OHLCV_RTYPES)})"
    problem = key_problem(symbol, ts)
    if problem is not None:
        return problem
    if now_ns is not None and ts > now_ns + config.max_future_ns:
        return f"ts_event {ts} is {(ts - now_ns) / 3.6e12:.1f} h in the future"
    interval = INTERVAL_NS.get(rtype)
    if interval is not None and ts % interval:
        return f"ts_event {ts} is not on the {interval // 10**9} s grid of rtype {rtype}"
    return None


def _prices(o: Any, h: Any, low: Any, c: Any) -> list[int | None] | str:
    """The fixed-point prices (None: undefined), or what is wrong with the first bad one."""
    if (
        type(o) is int
        and type(h) is int
        and type(low) is int
        and type(c) is int
        and INT64_MIN <= o < UNDEF_PRICE
        and INT64_MIN <= h < UNDEF_PRICE
        and INT64_MIN <= low < UNDEF_PRICE
        and INT64_MIN <= c < UNDEF_PRICE
    ):
        return [o, h, low, c]
    prices: list[int | None] = []
    for name, price in zip(PRICE_FIELDS, (o, h, low, c), strict=True):
        if type(price) is int and INT64_MIN <= price <= UNDEF_PRICE:
            prices.append(None if price == UNDEF_PRICE else price)
        elif price is None or (type(price) is float and math.isnan(price)):
            prices.append(None)
        else:
            return (
                f"field {name!r} must be an int64 fixed-point price (units of 1e-9; "
                f"UNDEF_PRICE or null when undefined), got {type(price).__name__} "
                f"{price!r:.40}; convert with round(price * 1e9)"
            )
    return prices
