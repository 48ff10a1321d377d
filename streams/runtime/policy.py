"""barcast's one error policy, which tells the record from the infrastructure. A record that
cannot be processed (the corrections reasons, a record a stage cannot read) goes to `bars.dlq`
with its original bytes and Kafka Connect's dead-letter headers, and the stream goes on. So does
an output the producer cannot take: one over `BARCAST_MAX_RECORD_BYTES` becomes, before it
reaches the producer, a bounded copy on `bars.dlq` (`bounded`). Anything else that fails is the
infrastructure's, or a bug: the worker stops at once without committing (`exit_uncommitted`),
so a restarted worker processes the failed records again."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, NoReturn, TypeVar

from streams.exit_codes import ExitCode
from streams.runtime.records import Control, Out, Record, control_of, misrouted
from streams.schema import DLQ_MESSAGE, DLQ_REASON, DeadLetterHeaders, encode_dlq_headers

if TYPE_CHECKING:
    from streams.metrics import Metrics

log = logging.getLogger("barcast.runtime")

TRUNCATED_HEADER = "barcast-truncated"  # "KEY_BYTES,VALUE_BYTES" of the original record
SHA256_HEADER = "barcast-sha256"  # hex digest of the original value
INTENDED_TOPIC_HEADER = "barcast-intended-topic"  # where an unpublishable output was going
NULL_VALUE_HEADER = "barcast-null-value"  # "true": the original had a null value (a tombstone)
KEPT_BYTES = 16_384  # of a bounded copy's key and of its value
HEADROOM = 4_096  # below the limit, records are not measured exactly: far below it
T = TypeVar("T")
Source = tuple[str, int, int]  # topic, partition, offset of a record


class DeadLetterReason(StrEnum):
    """The reason codes of the dead letters the stages write outside the corrections rules,
    whose own codes (a rejected bar's, features.corrections.Reason) share `malformed`."""

    MALFORMED = "malformed"  # a record its stage cannot read
    REFUSED = "refused"  # a bar the feature engine refuses
    UNPUBLISHABLE = "unpublishable"  # an output over BARCAST_MAX_RECORD_BYTES
    FINGERPRINT_MISMATCH = "fingerprint_mismatch"  # a feature row of another feature set


class Refused(ValueError):
    """A record its stage can read but must not process, with the dead letter's reason code
    (a plain ValueError from a reader is `malformed`)."""

    def __init__(self, reason: DeadLetterReason, why: str) -> None:
        super().__init__(why)
        self.reason = reason


def dead_letter(
    dlq: str,
    key: bytes | None,
    value: bytes | None,
    source: Source,
    reason: str,
    why: str,
    partition: int,
) -> Out:
    """A `bars.dlq` record for `value` read at `source` (topic, partition, offset). A null
    value (a tombstone, which Faust hands over as None) is published as b"" with
    `NULL_VALUE_HEADER`: an output's value is always bytes."""
    headers = encode_dlq_headers(DeadLetterHeaders(*source, reason, why))
    if value is None:
        value, headers = b"", [*headers, (NULL_VALUE_HEADER, b"true")]
    return Out(dlq, key, value, None, headers, partition)


def record_dead_letter(dlq: str, record: Record, reason: str, why: str) -> Out:
    """A dead letter for a consumed record, with its original bytes."""
    source = (record.topic, record.partition, record.offset)
    return dead_letter(dlq, record.key, record.value, source, reason, why, record.partition)


def tombstone_letter(dlq: str, record: Record, what: str = "") -> Out:
    """The dead letter of a record with a null value (a tombstone), `malformed`."""
    why = f"{what}the value is null (a tombstone); {record.topic} records carry one"
    return record_dead_letter(dlq, record, DeadLetterReason.MALFORMED, why)


def readable(
    records: Sequence[Record], dlq_topic: str, read: Callable[[Record], T], what: str = ""
) -> list[T | Control | Out]:
    """A stage's input: each record as a control record or as `read` makes it, or, where
    `read` raises ValueError, its dead letter: `malformed`, the message `what` + the error,
    or for a `Refused` error its own reason and message."""
    items: list[T | Control | Out] = []
    for record in records:
        control = control_of(record)
        if control is not None:
            why = misrouted(control)
            if why is None:
                items.append(control)
            else:
                items.append(record_dead_letter(dlq_topic, record, DeadLetterReason.MALFORMED, why))
            continue
        if record.value is None:  # a tombstone: no reader's error would say so
            items.append(tombstone_letter(dlq_topic, record, what))
            continue
        try:
            items.append(read(record))
        except ValueError as exc:  # orjson's and base64's errors are ValueErrors too
            if isinstance(exc, Refused):  # a record of its kind: `what` would mislead
                letter = record_dead_letter(dlq_topic, record, exc.reason, str(exc))
            else:
                letter = record_dead_letter(
                    dlq_topic, record, DeadLetterReason.MALFORMED, f"{what}{exc}"
                )
            items.append(letter)
    return items


def record_bytes(record: Out) -> int:
    """The most bytes `record` takes in a record batch (aiokafka's own estimate; imported here
    so that the stages, which build dead letters, import no Kafka client)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as Builder

    return int(Builder.estimate_size_in_bytes(record.key, record.value, record.headers))


def publishable(records: Sequence[Out], limit: int, dlq: str, metrics: Metrics) -> Sequence[Out]:
    """`records`, each one over `limit` bytes replaced by its bounded copy on `dlq`."""
    quick = limit - HEADROOM
    if all(len(r.value) + len(r.key or b"") < quick for r in records):
        return records
    return [r if record_bytes(r) <= limit else bounded(r, limit, dlq, metrics) for r in records]


def bounded(record: Out, limit: int, dlq_topic: str, metrics: Metrics) -> Out:
    """The first `KEPT_BYTES` of the record's key and value, with headers saying so (the
    original sizes and value digest; a dead letter's original stays at its source offset)."""
    key, value = record.key or b"", record.value
    size = record_bytes(record)
    if record.topic == dlq_topic:  # a dead letter already: same headers, bounded bytes
        headers = list(record.headers)
    else:
        why = f"a {record.topic} record of {size} bytes exceeds BARCAST_MAX_RECORD_BYTES={limit}"
        log.error("%s; its first %d bytes go to %s", why, KEPT_BYTES, dlq_topic)
        metrics.dlq.inc()
        headers = [
            (DLQ_REASON, DeadLetterReason.UNPUBLISHABLE.encode()),
            (DLQ_MESSAGE, why.encode()),
            (INTENDED_TOPIC_HEADER, record.topic.encode()),
        ]
    headers += [
        (TRUNCATED_HEADER, f"{len(key)},{len(value)}".encode()),
        (SHA256_HEADER, hashlib.sha256(value).hexdigest().encode()),
    ]
    kept = key[:KEPT_BYTES], value[:KEPT_BYTES]
    return Out(dlq_topic, *kept, record.timestamp_ms, headers, record.partition)


def exit_uncommitted(what: str, error: BaseException) -> NoReturn:
    """End the process now, leaving the failed records' offsets uncommitted. A Kafka error is
    the cluster's, logged on one line and exit 69; anything else is a bug, exit 70."""
    code = exit_code(error)
    if code == ExitCode.BROKER_FAILED:
        log.critical(
            "%s: the Kafka cluster failed (%s: %s); exiting %d without committing: check the "
            "brokers in BARCAST_BROKER and that they take records of BARCAST_MAX_RECORD_BYTES",
            what, type(error).__name__, error, code,
        )  # fmt: skip
    else:
        log.critical("%s; exiting %d without committing", what, code, exc_info=error)
    logging.shutdown()
    os._exit(code)


def exit_code(error: BaseException) -> ExitCode:
    """69 for a failure of the Kafka cluster (a request, an ack, a read: aiokafka's errors and
    librdkafka's, as confluent-kafka raises them), 70 for anything else."""
    from aiokafka.errors import KafkaError
    from confluent_kafka import KafkaException

    if isinstance(error, KafkaError | KafkaException | ConnectionError | TimeoutError):
        return ExitCode.BROKER_FAILED
    return ExitCode.AGENT_FAILED
