"""Records Faust drops when a worker resumes its partitions, and how barcast gets them back.

Seen in the restart test (faust-streaming 0.15.3 on the embedded broker): right after a worker
joins, the first records from a partition's committed offset sometimes never reach the agent.
Faust moves its read offset past records whose delivery it abandons while flow control is
suspended around the resume (`Consumer._drain_messages`), and its commit logic then lets the
committed offset pass them (`Consumer._new_offset` accepts a one-record hole at the head, and
`_add_gap` marks read-offset jumps as done). The bars would be lost for good: the agent's
state moves past them.

`OffsetGuard` checks that each partition's events come at consecutive offsets from where Faust
resumes it. On a hole it reads the missing records from the broker itself (a plain librdkafka
consumer) and passes them on first, as Faust events whose acks count toward Faust's commits; a
record delivered twice is dropped. (Faust also delivers a few records from before its seek to
the committed offset at start-up; the guard then reads a range the agent has applied already,
and the agent skips it by its state's offsets: wasted reads, never wrong outputs.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faust.types import TP, EventT

    from streams.faust_app import BarcastApp
    from streams.settings import Settings

log = logging.getLogger("barcast.agents")

HOLE_MESSAGE = "did not reach the agent"
READ_TIMEOUT_S = 30.0


def read_range(settings: Settings, topic: str, partition: int, start: int, end: int) -> list[Any]:
    """Records start..end-1 of a partition, read with a plain consumer (blocking)."""
    from confluent_kafka import Consumer, TopicPartition

    from streams.kafka import confluent_config

    consumer = Consumer(
        confluent_config(settings, **{"group.id": "barcast-refetch", "enable.auto.commit": False})
    )
    consumer.assign([TopicPartition(topic, partition, start)])
    records: list[Any] = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while len(records) < end - start and time.monotonic() < deadline:
            for record in consumer.consume(end - start, timeout=0.5):
                if not record.error() and start <= record.offset() < end:
                    records.append(record)
    finally:
        consumer.close()
    return records


def start_offset(settings: Settings, group: str, topic: str, partition: int) -> int:
    """The committed offset of `group` on a partition, or its first offset (blocking). The
    consumer never joins the group: it only reads the group's offsets."""
    from confluent_kafka import Consumer, TopicPartition

    from streams.kafka import confluent_config

    consumer = Consumer(confluent_config(settings, **{"group.id": group}))
    try:
        [committed] = consumer.committed([TopicPartition(topic, partition)], timeout=10.0)
        if committed.offset >= 0:
            return int(committed.offset)
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10.0)
        return int(low)
    finally:
        consumer.close()


class OffsetGuard:
    """Passes each partition's events on in offset order, without repeats or holes."""

    def __init__(self, app: BarcastApp, topic: str) -> None:
        self.app, self.topic = app, topic
        self.next: dict[int, int] = {}  # partition -> offset of the next event
        app.on_partitions_assigned.connect(self._on_assigned)

    async def admit(self, events: Sequence[EventT]) -> list[EventT]:
        admitted: list[EventT] = []
        for event in events:
            message = event.message
            partition, offset = message.partition, message.offset
            expected = self.next.get(partition)
            if expected is None:
                expected = await self._start(message.tp)
            if offset < expected:
                continue  # delivered again: passed on already
            if offset > expected:
                admitted += await self._fill(message.tp, expected, offset)
            self.next[partition] = offset + 1
            admitted.append(event)
        return admitted

    async def _start(self, tp: TP) -> int:
        """Where Faust resumes `tp`: the group's committed offset, asked of the broker (Faust
        may deliver records before its own copy is set), else the partition's first offset."""
        return await asyncio.to_thread(
            start_offset, self.app.barcast, self.app.conf.id, tp.topic, tp.partition
        )

    async def _fill(self, tp: TP, start: int, end: int) -> list[EventT]:
        """Records start..end-1 of `tp`, read from the broker, as Faust events."""
        from faust.events import Event
        from faust.types.tuples import ConsumerMessage

        log.warning(
            "%s[%d]: offsets %d..%d %s in order; reading them from the broker",
            tp.topic, tp.partition, start, end - 1, HOLE_MESSAGE,
        )  # fmt: skip
        records = await asyncio.to_thread(
            read_range, self.app.barcast, tp.topic, tp.partition, start, end
        )
        if len(records) < end - start:
            log.error(
                "%s[%d]: read %d of offsets %d..%d; the others are skipped",
                tp.topic, tp.partition, len(records), start, end - 1,
            )  # fmt: skip
        events: list[EventT] = []
        for record in records:
            headers = record.headers() or []
            timestamp_type, timestamp_ms = record.timestamp()
            message = ConsumerMessage(
                tp.topic, tp.partition, record.offset(), timestamp_ms / 1000.0, timestamp_type,
                headers, record.key(), record.value(), None, tp=tp,
                generation_id=self.app.consumer_generation_id,
            )  # fmt: skip
            events.append(Event(self.app, record.key(), record.value(), headers, message))
        return events

    def _on_assigned(self, sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        """A new assignment starts every partition again at its committed offset."""
        for tp in assigned:
            if tp.topic == self.topic:
                self.next.pop(tp.partition, None)
