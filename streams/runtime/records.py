"""The runtime's typed records: consumed, to publish, and what one stage hands the next (in
memory in the one-agent pipeline, through a topic in the split roles), each with the partition
and offset of the source record it came from, which tags the stores' writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from streams import schema


@dataclass(slots=True)
class Record:  # as consumed
    topic: str
    partition: int
    offset: int
    timestamp_ms: float
    key: bytes | None
    value: bytes | None  # None: a tombstone, which only a dead letter takes (runtime.policy)
    headers: schema.Headers


@dataclass(slots=True)
class Out:
    """A record to publish; every one names its partition (see streams.runtime.kafka_io)."""

    topic: str
    key: bytes | None
    value: bytes
    timestamp_ms: float | None = None
    headers: schema.Headers = field(default_factory=list)
    partition: int | None = None


class Ackable(Protocol):
    """What the runtime holds of a consumed record until its commit, which acks it to the
    consumer (streams.consumer.Delivered)."""

    def ack(self) -> bool: ...


@dataclass(slots=True)
class Control(Record):
    """A control record (END_OF_INTERVAL, OUTAGE, ROLL: `decoded`), forwarded to the same
    partition of each next topic."""

    ts_event: int
    decoded: schema.ControlRecord

    @property
    def kind(self) -> str:
        return self.decoded["control"]

    def forward(self, topic: str) -> Out:
        return Out(
            topic, self.key, self.value, self.timestamp_ms, schema.CONTROL_HEADERS, self.partition
        )


def control_of(record: Record) -> Control | None:
    """The record as a control record, or None if it is not a valid one."""
    if not schema.is_control_headers(record.headers):
        return None
    try:
        decoded = schema.decode_control(record.value)
    except ValueError:
        return None
    source = (record.topic, record.partition, record.offset, record.timestamp_ms, record.key)
    return Control(*source, record.value, record.headers, decoded["ts_event"], decoded)


def misrouted(control: Control) -> str | None:
    """Why a ROLL or EXPIRED record cannot be taken: it is keyed by its symbol, on that symbol's
    partition, where the symbol's states are (None: it can be)."""
    symbol = control.decoded.get("symbol")
    if symbol is None or control.key == symbol.encode():
        return None
    roll = control.kind == schema.ControlKind.ROLL
    sender = "BarProducer.send_roll" if roll else "the corrections stage"
    return (
        f"a {control.kind} record is keyed by its symbol ({symbol!r}), on that symbol's "
        f"partition; this one is keyed {control.key!r}: send it as {sender} does"
    )


def stage_control(
    topic: str, partition: int, offset: int, key: bytes, record: schema.ControlRecord
) -> Control:
    """A control record a stage makes (the corrections stage: a ROLL at the bar that rolled
    `key`, an EXPIRED at an END_OF_INTERVAL), tagged with its source record."""
    value, ts = schema.encode(record), record["ts_event"]
    return Control(
        topic, partition, offset, ts / 1e6, key, value, schema.CONTROL_HEADERS, ts, record
    )


@dataclass(slots=True)
class CleanBar:
    """A `bars.clean` bar: its value, and when it entered barcast (None: unknown). `topic`,
    `partition`, `offset`: the record it came from (on `bars.raw` in the one-agent pipeline)."""

    topic: str
    key: bytes
    partition: int
    offset: int
    timestamp_ms: float
    value: schema.CleanBarValue
    received_ns: int | None


@dataclass(slots=True)
class FeatureRow:
    """A bar's feature row (a `features` record's fields, the values decoded)."""

    key: bytes
    partition: int
    offset: int
    timestamp_ms: float
    received_ns: int | None
    symbol: str
    ts_event: int
    close: float
    synthetic: bool
    warm: bool
    values: np.ndarray
    fingerprint: str
    raw_symbol: str | None = None  # its contract's, when keyed by a continuous symbol
