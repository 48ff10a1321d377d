"""The runtime's Kafka I/O: one producer of explicit record batches (Faust's send costs the
event loop many times a batch append per record) for every output and changelog record, each
naming its partition, a topic partition's in order; and plain librdkafka reads, which block:
run them in a thread. A flush's last record of each changelog partition goes in a batch of its
own: some Kafka-compatible brokers (Tansu, the embedded one) report a partition's high
watermark as the last *batch*'s base offset + 1, and a restore reads up to the high watermark.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams.kafka import aiokafka_config, confluent_config, ensure_topics
from streams.runtime.changelog import ChangelogRecord
from streams.runtime.records import Out, Record

if TYPE_CHECKING:
    from streams.settings import Settings

# One produce request carries a batch per partition: this bounds a request at partitions x this.
BATCH_BYTES = 256 * 1024
# Messages one consume call returns: librdkafka takes at most 1,000,000, and this bounds what a
# restore holds beyond its states.
READ_CHUNK = 10_000
STALL_S = 30.0  # a read fails once the broker has sent no message for this long
POLL_S = 0.5
# The cleaner never compacts a partition's active segment and a restore reads all of it: small
# segments that roll hourly keep a restore near the size of the state, where the broker defaults
# (1 GiB, 7 days) let it read up to a gibibyte of superseded checkpoints. A segment rolls only
# on an append, so a restore still finds each key's entry as of its boundary (stores.py); a
# record stays uncompacted an hour, so a roll in the middle of a flush that never completes
# cannot let the cleaner drop the entry its restore needs before the restore writes it again.
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "67108864",
    "segment.ms": "3600000",
    "min.compaction.lag.ms": "3600000",
    # A tombstone outlives any restore (the cleaner drops it after this): one read before
    # the cleaner ran and finished after could otherwise take the value it deletes
    "delete.retention.ms": "86400000",
}
Row = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes]]]  # key .. headers
Apply = Callable[[list[ChangelogRecord]], None]  # a restore's step: a chunk of records
Runs = dict[tuple[str, int], list[Row]]  # by topic partition
log = logging.getLogger("barcast.runtime")


def producer_options(settings: Settings) -> dict[str, Any]:
    """The worker's producer: acks from all replicas, no linger, and record batches no larger
    than a record may be (a broker's `message.max.bytes` bounds the whole batch)."""
    return aiokafka_config(settings) | {
        "acks": "all",
        "linger_ms": 0,
        "max_batch_size": min(BATCH_BYTES, settings.max_record_bytes),
        "max_request_size": settings.max_record_bytes,
    }


class BatchProducer:
    """An aiokafka producer (acks from all replicas), started on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer: Any = None
        self.lock = asyncio.Lock()

    async def started(self) -> Any:
        async with self.lock:  # agents checkpoint concurrently: start one
            if self.producer is None:
                producer = AIOKafkaProducer(**producer_options(self.settings))
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
        self, topic: str, records: dict[int, list[ChangelogRecord]]
    ) -> list[asyncio.Future]:
        """Changelog records by partition, each partition's last one in a batch of its own."""
        runs = {(topic, p): [(k, v, None, h) for k, v, h in run] for p, run in records.items()}
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
    """A consumer that reports the log's end (`_PARTITION_EOF`), and that fails at an offset
    deleted by retention since it read the low watermark rather than jump to the log's end."""
    return Consumer(
        confluent_config(
            settings,
            **{"group.id": group, "enable.auto.commit": False},
            **{"enable.partition.eof": True, "auto.offset.reset": "error"},
        )
    )


def read_range(
    settings: Settings, topic: str, partition: int, start: int, end: int
) -> list[Record]:
    """The records start..end-1 of a partition that are in its log, in order (`scan`)."""
    records: list[Record] = []
    consumer = _consumer(settings, "barcast-refetch")
    try:
        first = _readable_start(consumer, topic, partition, start, end)
        scan(consumer, topic, partition, first, end, records.extend)
    finally:
        consumer.close()
    return records


def read_changelog(
    settings: Settings, topic: str, partition: int, apply: Callable[[list[Record]], None]
) -> int:
    """Every record of a changelog partition below its high watermark, in order, to `apply` a
    chunk at a time (in this thread); how many. A compacted log may hold many records per key
    (the cleaner never touches its active segment), so a restore holds only a chunk of them."""
    consumer = _consumer(settings, "barcast-restore")
    read = 0

    def counted(chunk: list[Record]) -> None:
        nonlocal read
        read += len(chunk)
        apply(chunk)

    try:
        low, high = _watermarks(consumer, topic, partition)
        scan(consumer, topic, partition, low, high, counted)
    finally:
        consumer.close()
    return read


def scan(
    consumer: Any,
    topic: str,
    partition: int,
    start: int,
    end: int,
    apply: Callable[[list[Record]], None],
) -> None:
    """Every record start..end-1 in a partition's log to `apply`, `READ_CHUNK` at a time. Not
    every offset holds a record (a compacted topic has holes, a transactional producer's commit
    markers take offsets), so the range is read once a message at `end` or later came, the
    consumer's position reached `end`, or the log ended. Raises TimeoutError (exit 69) after
    `STALL_S` without a message, and KafkaException on a consumer error (offsets deleted by
    retention while reading: the restarted worker reads again from the low watermark)."""
    if start >= end:
        return
    where = TopicPartition(topic, partition)
    consumer.assign([TopicPartition(topic, partition, start)])
    reached, heard = start, time.monotonic()
    while reached < end:
        # No more than the range still holds: consume returns once it has them, rather than
        # wait out POLL_S for a chunk the range cannot fill (a restore blocks a rebalance).
        messages = consumer.consume(min(READ_CHUNK, end - reached), timeout=POLL_S)
        chunk, reached = _take(messages, topic, partition, reached, end)
        if chunk:
            apply(chunk)
        if messages:
            heard = time.monotonic()
        elif time.monotonic() - heard > STALL_S:
            raise TimeoutError(
                f"{topic}[{partition}]: the broker sent nothing for {STALL_S:.0f}s while offsets "
                f"{reached}..{end - 1} were being read; check the brokers in BARCAST_BROKER"
            )
        reached = max(reached, consumer.position([where])[0].offset)


def _take(
    messages: list[Any], topic: str, partition: int, reached: int, end: int
) -> tuple[list[Record], int]:
    """The records below `end` among `messages`, and the offset the read has reached."""
    chunk: list[Record] = []
    for m in messages:
        error = m.error()
        if error is None:
            reached = max(reached, m.offset() + 1)
            if m.offset() < end:
                ms, headers = float(m.timestamp()[1]), list(m.headers() or [])
                chunk.append(Record(topic, partition, m.offset(), ms, m.key(), m.value(), headers))
        elif error.code() == KafkaError._PARTITION_EOF:  # nothing at m.offset() or after yet
            _warn_missing(topic, partition, max(reached, m.offset()), end, "past the log's end")
            reached = max(reached, end)
        else:
            raise KafkaException(error)
    return chunk, reached


def committed_offset(settings: Settings, group: str, topic: str, partition: int) -> int:
    """The committed offset of `group` on a partition (read, not joining it), or its first;
    never below its low watermark (offsets below it were deleted by retention: logged)."""
    consumer = _consumer(settings, group)
    try:
        [committed] = consumer.committed([TopicPartition(topic, partition)], timeout=10.0)
        if committed.offset < 0:
            return _watermarks(consumer, topic, partition)[0]
        return _readable_start(consumer, topic, partition, committed.offset)
    finally:
        consumer.close()


def _watermarks(consumer: Any, topic: str, partition: int) -> tuple[int, int]:
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10.0)
    return int(low), int(high)


def _readable_start(
    consumer: Any, topic: str, partition: int, start: int, end: int | None = None
) -> int:
    """`start`, or the low watermark where retention deleted the offsets before it (the
    deleted ones, of start..end-1 if an `end` is given, logged)."""
    low, _ = _watermarks(consumer, topic, partition)
    if start < low:
        gone = low if end is None else min(low, end)
        _warn_missing(topic, partition, start, gone, "deleted by retention")
    return max(start, low)


def _warn_missing(topic: str, partition: int, first: int, end: int, why: str) -> None:
    if first < end:
        log.warning(
            "%s[%d]: offsets %d..%d are not in the log (%s); the records among them, if any, "
            "cannot be read", topic, partition, first, end - 1, why,
        )  # fmt: skip


class KafkaChangelogs:
    """Changelog topics on the cluster, created compacted on first use."""

    def __init__(self, settings: Settings, producer: BatchProducer) -> None:
        self.settings, self.producer = settings, producer
        self.created: set[str] = set()

    async def write(self, topic: str, records: dict[int, list[ChangelogRecord]]) -> None:
        await self._create(topic)
        await asyncio.gather(*await self.producer.send_changelog(topic, records))

    async def read(self, topic: str, partition: int, apply: Apply) -> int:
        """The partition's (key, value, headers) records to `apply`, a chunk at a time, in a
        thread."""
        await self._create(topic)

        def records(chunk: list[Record]) -> None:
            apply([(r.key or b"", r.value, r.headers) for r in chunk])

        return await asyncio.to_thread(read_changelog, self.settings, topic, partition, records)

    async def _create(self, topic: str) -> None:
        if topic not in self.created:
            await asyncio.to_thread(ensure_topics, self.settings, [topic], None, COMPACTED)
            # The producer learns of the topic now, not on its first write: on the embedded
            # broker, two checkpoints writing to changelogs it had not seen yet left one
            # write unacked until the request timeout, then failed it (an exit 69).
            await (await self.producer.started()).partitions_for(topic)
            self.created.add(topic)
