"""A `features` record as the forecast stage reads it, checked field by field."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import orjson

from features.engine import N_FEATURES
from streams.agents.io import header
from streams.schema import RECEIVED_HEADER, decode_feature_values

if TYPE_CHECKING:
    from faust.types import EventT


@dataclass(slots=True)
class FeatureRow:
    """A feature row as the forecast stage needs it. `offset` orders a symbol's rows: the
    `features` record's offset, or in the one-agent pipeline its position there."""

    key: bytes
    partition: int
    offset: int
    symbol: str
    ts_event: int
    close: float
    synthetic: bool
    warm: bool
    values: np.ndarray
    fingerprint: str
    received_ns: int


FEATURE_FIELDS = {
    "symbol": str,
    "ts_event": int,
    "close": float,
    "synthetic": bool,
    "warm": bool,
    "values": str,
    "fingerprint": str,
}


def received_ns(event: EventT) -> int:
    """When the event's bar entered barcast (its corrections header), else now."""
    received = header(event, RECEIVED_HEADER)
    return int(received) if received else time.time_ns()


def feature_row(event: EventT) -> FeatureRow:
    """A `features` record (see streams.agents.features.feature_message) as a FeatureRow;
    ValueError saying what is wrong if it is not one."""
    value, message = orjson.loads(event.value), event.message
    if type(value) is not dict or not event.key:
        raise ValueError("a features record is a JSON object keyed by its symbol")
    wrong = [name for name, kind in FEATURE_FIELDS.items() if type(value.get(name)) is not kind]
    if wrong:
        raise ValueError(
            f"field(s) {', '.join(wrong)} missing or not of the type feature_message writes"
        )
    values = decode_feature_values(value["values"])
    if values.size != N_FEATURES:
        raise ValueError(f"values hold {values.size} features, not {N_FEATURES}")
    return FeatureRow(
        key=event.key,
        partition=message.partition,
        offset=message.offset,
        symbol=value["symbol"],
        ts_event=value["ts_event"],
        close=value["close"],
        synthetic=value["synthetic"],
        warm=value["warm"],
        values=values,
        fingerprint=value["fingerprint"],
        received_ns=received_ns(event),
    )
