"""The runtime's Kafka I/O: one producer of explicit record batches (Faust's send costs the
event loop many times a batch append per record) for every output and changelog record, each
naming its partition, a topic partition's in order; and plain librdkafka reads, which block:
run them in a thread. A flush's last record of each changelog partition goes in a batch of its
own: some Kafka-compatible brokers (Tansu, the embedded one) report a partition's high
watermark as the last *batch*'s base offset + 1, and a restore reads up to the high watermark.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, TopicPartition

from streams.kafka import aiokafka_config, confluent_config, ensure_topics
from streams.runtime.records import Out, Record

if TYPE_CHECKING:
    from streams.settings import Settings

# One produce request carries a batch per partition: this bounds a request at partitions x this.
BATCH_BYTES = 256 * 1024
READ_TIMEOUT_S = 30.0
COMPACTED = {"cleanup.policy": "compact"}
Row = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes]]]  # key .. headers
Runs = dict[tuple[str, int], list[Row]]  # by topic partition


class BatchProducer:
    """An aiokafka producer (acks from all replicas), started on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer: Any = None
        self.lock = asyncio.Lock()

    async def started(self) -> Any:
        async with self.lock:  # agents checkpoint concurrently: start one
            if self.producer is None:
                producer = AIOKafkaProducer(
                    **aiokafka_config(self.settings),
                    acks="all",
                    linger_ms=0,
                    max_batch_size=BATCH_BYTES,
                    max_request_size=self.settings.max_record_bytes,
                )
                await producer.start()
                self.producer = producer
        return self.producer

    async def send(self, records: Sequence[Out]) -> list[asyncio.Future]:
        """Hand `records` to the producer; the futures complete on the broker's acks."""
        runs: Runs = {}
        for r in records:
            if r.partition is None:
                raise ValueError(f"a record for {r.topic} has no partition: the runtime needs it")
            ms = None if r.timestamp_ms is None else int(r.timestamp_ms)
            runs.setdefault((r.topic, r.partition), []).append((r.key, r.value, ms, r.headers))
        return await self._send(runs, lone_last=False)

    async def send_changelog(
        self, topic: str, records: dict[int, list[tuple[bytes, bytes]]]
    ) -> list[asyncio.Future]:
        """Changelog records by partition, each partition's last one in a batch of its own."""
        runs = {(topic, p): [(k, v, None, []) for k, v in run] for p, run in records.items()}
        return await self._send(runs, lone_last=True)

    async def _send(self, runs: Runs, lone_last: bool) -> list[asyncio.Future]:
        producer = await self.started()
        pending = []
        for (topic, partition), run in runs.items():
            for batch in record_batches(producer, run, lone_last):
                pending.append(await producer.send_batch(batch, topic, partition=partition))
        return pending

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()


def record_batches(producer: Any, records: Sequence[Row], lone_last: bool) -> list[Any]:
    """Record batches holding `records` in order; with `lone_last`, the last one alone."""
    batches = [producer.create_batch()]
    for i, (key, value, ms, headers) in enumerate(records):
        lone = lone_last and i == len(records) - 1
        if lone or batches[-1].append(key=key, value=value, timestamp=ms, headers=headers) is None:
            batches.append(producer.create_batch())  # full, or the lone last: start the next
            batches[-1].append(key=key, value=value, timestamp=ms, headers=headers)
    return [b for b in batches if b.record_count()]


def _consumer(settings: Settings, group: str) -> Any:
    return Consumer(confluent_config(settings, **{"group.id": group, "enable.auto.commit": False}))


def read_range(
    settings: Settings, topic: str, partition: int, start: int, end: int
) -> list[Record]:
    """Records start..end-1 of a partition (fewer if the broker has fewer by READ_TIMEOUT_S)."""
    consumer = _consumer(settings, "barcast-refetch")
    consumer.assign([TopicPartition(topic, partition, start)])
    records: dict[int, Record] = {}
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:  # until the last offset came (a compacted topic has holes) or the deadline
        while end - 1 not in records and time.monotonic() < deadline:
            for m in consumer.consume(max(1, end - start), timeout=0.5):
                if not m.error() and start <= m.offset() < end:
                    ms, headers = float(m.timestamp()[1]), list(m.headers() or [])
                    record = Record(topic, partition, m.offset(), ms, m.key(), m.value(), headers)
                    records[m.offset()] = record
    finally:
        consumer.close()
    return [records[o] for o in sorted(records)]


def read_changelog(settings: Settings, topic: str, partition: int) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a changelog partition up to its high watermark, in order."""
    consumer = _consumer(settings, "barcast-restore")
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10.0)
        if high <= low:
            return []
        records = read_range(settings, topic, partition, low, high)
    finally:
        consumer.close()
    if not records or records[-1].offset != high - 1:
        raise RuntimeError(
            f"{topic}[{partition}]: read {len(records)} of the records {low}..{high - 1} within "
            f"{READ_TIMEOUT_S:.0f}s; cannot restore state from it: check the broker"
        )
    return [(r.key or b"", r.value) for r in records]


def committed_offset(settings: Settings, group: str, topic: str, partition: int) -> int:
    """The committed offset of `group` on a partition (read, not joining it), or its first."""
    consumer = _consumer(settings, group)
    try:
        [committed] = consumer.committed([TopicPartition(topic, partition)], timeout=10.0)
        if committed.offset >= 0:
            return int(committed.offset)
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10.0)
        return int(low)
    finally:
        consumer.close()


class KafkaChangelogs:
    """Changelog topics on the cluster, created compacted on first use."""

    def __init__(self, settings: Settings, producer: BatchProducer) -> None:
        self.settings, self.producer = settings, producer
        self.created: set[str] = set()

    async def write(self, topic: str, records: dict[int, list[tuple[bytes, bytes]]]) -> None:
        await self._create(topic)
        await asyncio.gather(*await self.producer.send_changelog(topic, records))

    async def read(self, topic: str, partition: int) -> list[tuple[bytes, bytes]]:
        await self._create(topic)
        return await asyncio.to_thread(read_changelog, self.settings, topic, partition)

    async def _create(self, topic: str) -> None:
        if topic not in self.created:
            await asyncio.to_thread(ensure_topics, self.settings, [topic], None, COMPACTED)
            # The producer learns of the topic now, not on its first write: on the embedded
            # broker, two checkpoints writing to changelogs it had not seen yet left one
            # write unacked until the request timeout, then failed it (an exit 69).
            await (await self.producer.started()).partitions_for(topic)
            self.created.add(topic)
