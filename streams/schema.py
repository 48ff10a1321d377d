"""Message formats of every barcast topic, shared by ingest, agents, tests and tools.

Pure: no Faust, no Kafka. Prices on `bars.raw` and `bars.clean` stay DBN fixed-point int64
(1e-9 units) so nothing is lost to float rounding before corrections see them.
"""

from __future__ import annotations

import base64
from enum import StrEnum
from typing import Any, TypedDict

import numpy as np
import orjson

PRICE_SCALE = 1e-9
UNDEF_PRICE = 2**63 - 1
FIXED_PER_UNIT = round(1 / PRICE_SCALE)

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


class Control(StrEnum):
    END_OF_INTERVAL = "end_of_interval"


class RawBar(TypedDict):
    instrument_id: int
    symbol: str
    ts_event: int
    rtype: int
    publisher_id: int
    open: int
    high: int
    low: int
    close: int
    volume: int
    source: str


class ControlRecord(TypedDict):
    control: str
    ts_event: int


def end_of_interval(ts_event: int) -> ControlRecord:
    return {"control": Control.END_OF_INTERVAL.value, "ts_event": int(ts_event)}


def is_control(value: Any) -> bool:
    return isinstance(value, dict) and "control" in value


def encode(value: Any) -> bytes:
    return orjson.dumps(value)


def decode(data: bytes) -> Any:
    return orjson.loads(data)


def to_fixed(prices: np.ndarray) -> np.ndarray:
    """Float prices as DBN fixed-point int64, `round(price * 1e9)`; NaN becomes UNDEF_PRICE."""
    undefined = np.isnan(prices)
    fixed = np.rint(np.where(undefined, 0.0, prices) * FIXED_PER_UNIT).astype(np.int64)
    fixed[undefined] = UNDEF_PRICE
    return fixed


def encode_feature_values(values: np.ndarray) -> str:
    """225 float64 as base64 of little-endian bytes: bit-exact, NaN-safe, ~3.2 kB."""
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f8").tobytes()).decode("ascii")


def decode_feature_values(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f8")


def engine_columns(bars: list[dict[str, Any]]) -> tuple[np.ndarray, ...]:
    """`bars.clean` values as the feature engine's input columns: ts_event, open, high, low,
    close (fixed-point to float), volume, synthetic. The features agent and offline replays
    convert through this one function, so both feed the engine identical floats."""
    return (
        np.array([b["ts_event"] for b in bars], dtype=np.int64),
        *(
            np.array([b[f] for b in bars], dtype=np.float64) * PRICE_SCALE
            for f in ("open", "high", "low", "close")
        ),
        np.array([b["volume"] for b in bars], dtype=np.float64),
        np.array([b.get("status") == "synthetic" for b in bars], dtype=np.bool_),
    )
