"""The record side of barcast's one error policy: dead letters, and the size every record fits.

A record that cannot be processed (the corrections reasons, a `bars.clean` record the features
stage cannot read) goes to `bars.dlq` with its original key and value bytes and Kafka Connect's
dead-letter headers, and the stream goes on. So does an output the producer cannot take: any
record over `BARCAST_MAX_RECORD_BYTES` is replaced, before it reaches the producer, by a bounded
copy on `bars.dlq` (the first `KEPT_BYTES` of its key and value) whose `barcast-truncated` header
holds the original sizes and `barcast-sha256` the original value's digest; the original of a
dead letter stays on its source topic at the offset its headers name. Everything else that fails
is the infrastructure's and stops the worker uncommitted (streams.agents.io.exit_uncommitted).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from streams.agents.records import Out
from streams.schema import DLQ_MESSAGE, DLQ_OFFSET, DLQ_PARTITION, DLQ_REASON, DLQ_TOPIC

if TYPE_CHECKING:
    from faust.types import EventT

    from streams.metrics import Metrics

log = logging.getLogger("barcast.dlq")

TRUNCATED_HEADER = "barcast-truncated"  # "KEY_BYTES,VALUE_BYTES" of the original record
SHA256_HEADER = "barcast-sha256"  # hex digest of the original value
INTENDED_TOPIC_HEADER = "barcast-intended-topic"  # where an unpublishable output was going


class Reason(StrEnum):
    """Reason codes of the dead letters written outside the corrections rules (theirs are
    streams.corrections.Reason)."""

    MALFORMED = "malformed"  # a record its stage cannot read
    REFUSED = "refused"  # a bar the feature engine refuses
    UNPUBLISHABLE = "unpublishable"  # an output over BARCAST_MAX_RECORD_BYTES


KEPT_BYTES = 16_384  # of a bounded copy's key and of its value
MESSAGE_CHARS = 1_000  # of a dead letter's human message
HEADROOM = 4_096  # below the limit, records are not measured exactly: far below it


def dead_letter(
    dlq_topic: str,
    key: bytes | None,
    value: bytes,
    source: tuple[str, int, int],
    reason: str,
    message: str,
    partition: int | None,
) -> Out:
    """A `bars.dlq` record for `value` read at `source` (topic, partition, offset)."""
    topic, source_partition, offset = source
    headers = [
        (DLQ_TOPIC, str(topic).encode()),
        (DLQ_PARTITION, str(source_partition).encode()),
        (DLQ_OFFSET, str(offset).encode()),
        (DLQ_REASON, reason.encode()),
        (DLQ_MESSAGE, message[:MESSAGE_CHARS].encode()),
    ]
    return Out(dlq_topic, key, value, None, headers, partition)


def event_dead_letter(dlq_topic: str, event: EventT, reason: str, message: str) -> Out:
    """A dead letter for a consumed event, with its original bytes."""
    m = event.message
    source = (m.topic, m.partition, m.offset)
    return dead_letter(dlq_topic, event.key, event.value, source, reason, message, m.partition)


def record_bytes(record: Out) -> int:
    """The most bytes `record` takes in a record batch (aiokafka's own estimate)."""
    return int(
        DefaultRecordBatchBuilder.estimate_size_in_bytes(record.key, record.value, record.headers)
    )


def publishable(
    records: Sequence[Out], limit: int, dlq_topic: str, metrics: Metrics
) -> Sequence[Out]:
    """`records`, each one over `limit` bytes replaced by its bounded copy on `dlq_topic`."""
    quick = limit - HEADROOM
    if all(len(r.value) + len(r.key or b"") < quick for r in records):
        return records
    return [
        r if record_bytes(r) <= limit else bounded(r, limit, dlq_topic, metrics) for r in records
    ]


def bounded(record: Out, limit: int, dlq_topic: str, metrics: Metrics) -> Out:
    key, value = record.key or b"", record.value
    size = record_bytes(record)
    if record.topic == dlq_topic:  # a dead letter already: same headers, bounded bytes
        headers = list(record.headers)
    else:
        message = (
            f"a {record.topic} record of {size} bytes exceeds BARCAST_MAX_RECORD_BYTES={limit}"
        )
        log.error("%s; its first %d bytes go to %s", message, KEPT_BYTES, dlq_topic)
        metrics.dlq.inc()
        headers = [
            (DLQ_REASON, Reason.UNPUBLISHABLE.encode()),
            (DLQ_MESSAGE, message.encode()),
            (INTENDED_TOPIC_HEADER, record.topic.encode()),
        ]
    headers += [
        (TRUNCATED_HEADER, f"{len(key)},{len(value)}".encode()),
        (SHA256_HEADER, hashlib.sha256(value).hexdigest().encode()),
    ]
    return Out(
        dlq_topic,
        key[:KEPT_BYTES],
        value[:KEPT_BYTES],
        record.timestamp_ms,
        headers,
        record.partition,
    )
