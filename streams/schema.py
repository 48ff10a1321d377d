"""Message formats of every barcast topic, shared by ingest, agents, tests and tools: one
encode/decode pair per topic's key, value and headers. A decoder raises ValueError saying what
is wrong with a record that is not of its topic (the caller dead-letters it).

Pure: no Faust, no Kafka. Prices on `bars.raw` and `bars.clean` stay DBN fixed-point int64
(features.bars). The JSON Schema of each topic's value, and the field tables of docs/topics.md,
are streams.topic_schemas.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NotRequired, TypedDict, cast

import numpy as np
import orjson

from features.bars import CONTROL_FORMS, PRICE_FIELDS, ControlKind, key_problem, valid_control

CONTROL_KEY = b"__control__"
KIND_HEADER = "barcast-kind"
# Wall-clock ns when the corrections agent consumed the raw bar; carried in a header, not the
# value, so that values stay deterministic and restarts can be compared byte for byte.
RECEIVED_HEADER = "barcast-received-ns"
# Kafka Connect's dead-letter header names (on `bars.dlq`), so existing DLQ tooling reads ours.
DLQ_TOPIC = "__connect.errors.topic"
DLQ_PARTITION = "__connect.errors.partition"
DLQ_OFFSET = "__connect.errors.offset"
DLQ_REASON = "__connect.errors.exception.class.name"
DLQ_MESSAGE = "__connect.errors.exception.message"


class Kind(StrEnum):
    """Value of the `barcast-kind` header: lets consumers route without parsing the value."""

    BAR = "bar"
    CONTROL = "control"


class RawBar(TypedDict):
    instrument_id: int
    symbol: str
    raw_symbol: str
    ts_event: int
    rtype: int
    publisher_id: int
    open: int
    high: int
    low: int
    close: int
    volume: int
    source: str


class CleanBarValue(TypedDict, total=False):
    """A `bars.clean` value: the raw bar's known fields, its status and corrections."""

    instrument_id: int
    symbol: str
    ts_event: int
    rtype: int
    publisher_id: int
    open: int
    high: int
    low: int
    close: int
    volume: int | float
    source: str
    status: str
    corrections: list[list[Any]]


class FeaturesValue(TypedDict):
    symbol: str
    raw_symbol: NotRequired[str]  # the bar's, when it had one
    ts_event: int
    close: float
    fingerprint: str
    warm: bool
    synthetic: bool
    values: str  # encode_feature_values


class ControlRecord(TypedDict):
    control: str
    ts_event: int
    end: NotRequired[int]  # of an outage: bars before it may be missing (see docs/topics.md)
    symbol: NotRequired[str]  # of a roll: the continuous symbol, its key; of an expiry: its key
    ratio: NotRequired[float]  # of a roll: new contract's price / old contract's
    raw_symbols: NotRequired[list[str]]  # of a roll: [old, new]
    last_ts: NotRequired[int]  # of an expiry: the symbol's last bar


Headers = list[tuple[str, bytes]]
HeadersIn = Mapping[str, bytes] | Sequence[tuple[str, bytes]] | None


def end_of_interval(ts_event: int) -> ControlRecord:
    return {"control": ControlKind.END_OF_INTERVAL.value, "ts_event": int(ts_event)}


def outage(start: int, end: int) -> ControlRecord:
    """A span live ingest could not recover: bars with `start <= ts_event < end` may be
    missing (bars at `start` were published for some instruments, maybe not all)."""
    return {"control": ControlKind.OUTAGE.value, "ts_event": int(start), "end": int(end)}


def roll(ts_event: int, symbol: str, old: str, new: str, ratio: float) -> ControlRecord:
    """The instrument behind `symbol` changes from raw symbol `old` to `new` at `ts_event`;
    `new`'s prices are `ratio` times `old`'s (the calendar spread). Keyed by `symbol`, on its
    partition, before the first bar of `new`."""
    return {
        "control": ControlKind.ROLL.value,
        "ts_event": int(ts_event),
        "symbol": symbol,
        "raw_symbols": [old, new],
        "ratio": float(ratio),
    }


def expired(ts_event: int, symbol: str, last_ts: int) -> ControlRecord:
    """`symbol`'s states dropped when its partition's newest bar, at `ts_event`, is over
    BARCAST_EXPIRE_DAYS after its last, at `last_ts`. Keyed by `symbol`; a later bar starts anew."""
    kind = ControlKind.EXPIRED.value
    return {"control": kind, "ts_event": int(ts_event), "symbol": symbol, "last_ts": int(last_ts)}


def encode(value: Any) -> bytes:
    return orjson.dumps(value)


def decode(data: bytes) -> Any:
    return orjson.loads(data)


def encode_feature_values(values: np.ndarray) -> str:
    """N_FEATURES float64 as base64 of little-endian bytes: bit-exact, NaN-safe, ~3.2 kB."""
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f8").tobytes()).decode("ascii")


def decode_feature_values(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f8")


# Keys: the raw symbol's UTF-8 bytes on every topic; a control record's CONTROL_KEY or symbol.


def encode_key(symbol: str) -> bytes:
    return symbol.encode()


def decode_key(key: bytes) -> str:
    return key.decode()


# Headers


def header(headers: HeadersIn, name: str) -> bytes | None:
    """The value of header `name` (the first one), from a list of pairs or a mapping."""
    if headers is None:
        return None
    if isinstance(headers, Mapping):
        return headers.get(name)
    for key, value in headers:
        if key == name:
            return value
    return None


CONTROL_HEADERS: Headers = [(KIND_HEADER, Kind.CONTROL.value.encode())]
BAR_HEADERS: Headers = [(KIND_HEADER, Kind.BAR.value.encode())]


def bar_headers(received_ns: int | None) -> Headers:
    """Headers of a bar, feature row or forecast: its kind and when its bar entered barcast."""
    return (
        BAR_HEADERS
        if received_ns is None
        else [*BAR_HEADERS, (RECEIVED_HEADER, b"%d" % received_ns)]
    )


def decode_received_ns(headers: HeadersIn) -> int | None:
    received = header(headers, RECEIVED_HEADER)
    return int(received) if received else None


def is_control_headers(headers: HeadersIn) -> bool:
    return header(headers, KIND_HEADER) == CONTROL_HEADERS[0][1]


@dataclass(frozen=True, slots=True)
class DeadLetterHeaders:
    """Where a dead letter came from and why (Kafka Connect's dead-letter headers)."""

    topic: str
    partition: int | None
    offset: int | None
    reason: str
    message: str


MESSAGE_CHARS = 1_000  # of a dead letter's human message


def encode_dlq_headers(dead: DeadLetterHeaders) -> Headers:
    optional = [(DLQ_PARTITION, dead.partition), (DLQ_OFFSET, dead.offset)]
    return [
        (DLQ_TOPIC, dead.topic.encode()),
        *((name, str(n).encode()) for name, n in optional if n is not None),
        (DLQ_REASON, dead.reason.encode()),
        (DLQ_MESSAGE, dead.message[:MESSAGE_CHARS].encode()),
    ]


def decode_dlq_headers(headers: HeadersIn) -> DeadLetterHeaders:
    def text(name: str) -> str:
        value = header(headers, name)
        if value is None:
            raise ValueError(f"a bars.dlq record has no {name} header")
        return value.decode()

    def number(name: str) -> int | None:
        value = header(headers, name)
        return None if value is None else int(value)

    return DeadLetterHeaders(
        text(DLQ_TOPIC),
        number(DLQ_PARTITION),
        number(DLQ_OFFSET),
        text(DLQ_REASON),
        text(DLQ_MESSAGE),
    )


# Values


def _object(data: bytes, topic: str) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"a {topic} value is JSON: {exc}") from None
    if type(value) is not dict:
        raise ValueError(f"a {topic} value is a JSON object")
    return value


def _wrong_fields(value: dict[str, Any], fields: Mapping[str, tuple[type, ...]]) -> list[str]:
    return [name for name, kinds in fields.items() if type(value.get(name)) not in kinds]


def _check_symbol_and_time(value: dict[str, Any]) -> None:
    """ValueError unless the symbol and ts_event can key a state (`key_problem`)."""
    problem = key_problem(value["symbol"], value["ts_event"])
    if problem is not None:
        raise ValueError(problem)


def encode_control(record: ControlRecord) -> bytes:
    return orjson.dumps(record)


def decode_control(data: bytes) -> ControlRecord:
    """An END_OF_INTERVAL, OUTAGE, ROLL or EXPIRED record; ValueError for anything else."""
    value = _object(data, "control")
    if not valid_control(value):
        raise ValueError(CONTROL_FORMS)
    return cast(ControlRecord, value)


def encode_raw(bar: RawBar) -> bytes:
    return orjson.dumps(bar)


def decode_raw(data: bytes) -> RawBar:
    """A `bars.raw` value as JSON (the corrections rules check its fields)."""
    return cast(RawBar, _object(data, "bars.raw"))


CLEAN_FIELDS: dict[str, tuple[type, ...]] = {
    "symbol": (str,),
    "ts_event": (int,),
    **{name: (int,) for name in PRICE_FIELDS},
    "volume": (int, float),
}


def encode_clean(bar: CleanBarValue) -> bytes:
    return orjson.dumps(bar)


def decode_clean(data: bytes) -> CleanBarValue:
    """A `bars.clean` value with the fields the feature engine reads; ValueError if not."""
    value = _object(data, "bars.clean")
    if _wrong_fields(value, CLEAN_FIELDS):
        raise ValueError("not a bars.clean bar (JSON with int ts_event and prices, volume, symbol)")
    _check_symbol_and_time(value)
    return cast(CleanBarValue, value)


FEATURES_FIELDS: dict[str, tuple[type, ...]] = {
    "symbol": (str,),
    "ts_event": (int,),
    "close": (float,),
    "synthetic": (bool,),
    "warm": (bool,),
    "values": (str,),
    "fingerprint": (str,),
}


def encode_features(value: FeaturesValue) -> bytes:
    return orjson.dumps(value)


def decode_features(data: bytes) -> FeaturesValue:
    """A `features` value, field by field; ValueError naming the wrong fields if not one."""
    value = _object(data, "features")
    wrong = _wrong_fields(value, FEATURES_FIELDS)
    if "raw_symbol" in value and type(value["raw_symbol"]) is not str:
        wrong.append("raw_symbol")
    if wrong:
        raise ValueError(
            f"field(s) {', '.join(wrong)} missing or not of the type the features stage writes"
        )
    _check_symbol_and_time(value)
    return cast(FeaturesValue, value)


def encode_forecast(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value)


def decode_forecast(data: bytes) -> dict[str, Any]:
    return _object(data, "forecasts")


EXPLANATION_FIELDS: dict[str, tuple[type, ...]] = {
    "symbol": (str,),
    "ts_event": (int,),
    "model_id": (str,),
    "fingerprint": (str,),
    "schema_version": (int,),
    "historical": (list,),
    "historical_top_k": (float, int),
    "static": (dict,),
    "future": (dict,),
    "attention": (dict,),
}


def encode_explanation(value: dict[str, Any]) -> bytes:
    """A `forecasts.explain` value (model.serving.explain builds it)."""
    return orjson.dumps(value)


def decode_explanation(data: bytes) -> dict[str, Any]:
    """A `forecasts.explain` value; ValueError naming the wrong fields if not one."""
    value = _object(data, "forecasts.explain")
    wrong = _wrong_fields(value, EXPLANATION_FIELDS)
    if wrong:
        raise ValueError(
            f"field(s) {', '.join(wrong)} missing or not of the type a forecasts.explain "
            "value holds (model.serving.explain)"
        )
    return value
