"""The runtime's plain librdkafka reads (streams.runtime.kafka_io): a restore reads a changelog
longer than one consume call a chunk at a time, keeping each key's latest state, from a topic
created compacted in small segments; a range ends where the log does even when its last offsets
hold no record (commit markers, the log's end, retention), and what cannot be read fails as the
cluster's (exit 69), never skipped."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from streams.exit_codes import ExitCode
from streams.kafka import confluent_config, ensure_topics
from streams.runtime import kafka_io
from streams.runtime.changelog import SOURCE, Changelog
from streams.runtime.kafka_io import (
    COMPACTED,
    BatchProducer,
    KafkaChangelogs,
    committed_offset,
    read_changelog,
    read_range,
)
from streams.runtime.policy import exit_code
from streams.runtime.records import Record
from streams.settings import REPO_ROOT, Settings

CHUNK = 7  # records per consume call in these tests: a changelog of 100 takes 15


@pytest.mark.integration
async def test_a_changelog_longer_than_a_chunk_restores_each_keys_latest_state(
    broker_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_io, "READ_CHUNK", CHUNK)
    topic = f"{broker_settings.topic_raw}-counts-changelog"
    producer = BatchProducer(broker_settings)
    changelogs = KafkaChangelogs(broker_settings, producer)
    written = Changelog(topic, changelogs)
    latest: dict[bytes, tuple[int, int, bytes]] = {}  # each key's last write before BOUNDARY
    boundary = 95
    try:
        for offset in range(100):  # ten keys, ten states each, in four flushes
            key, payload = b"k%d" % (offset % 10), b"state at %d" % offset
            written.put(key, 0, offset, payload)
            if offset < boundary:
                latest[key] = (0, offset, payload)
            if offset % 25 == 24:
                await written.flush()
    finally:
        await producer.stop()

    chunks: list[list[Record]] = []
    assert read_changelog(broker_settings, topic, 0, chunks.append) == 100
    assert max(len(c) for c in chunks) <= CHUNK and len(chunks) >= 100 // CHUNK
    payloads = [r.value[12:] for c in chunks for r in c]  # after the source offset, partition
    assert payloads == [b"state at %d" % offset for offset in range(100)]

    restored = Changelog(topic, KafkaChangelogs(broker_settings, BatchProducer(broker_settings)))
    await restored.restore(0, boundary)
    assert restored.entries == latest


@pytest.mark.integration
async def test_a_deletion_reaches_the_broker_as_a_tombstone_that_restores_as_of_its_source(
    broker_settings: Settings,
) -> None:
    """No value, so the log cleaner may drop it; its source offset in a header, so a restore
    takes it as of a commit's boundary like any record. A deletion with a note is a value."""
    topic = f"{broker_settings.topic_raw}-deletions-changelog"
    producer = BatchProducer(broker_settings)
    written = Changelog(topic, KafkaChangelogs(broker_settings, producer))
    try:
        written.put(b"a", 0, 0, b"x")
        written.put(b"b", 0, 1, b"y")
        written.delete(b"a", 0, 2)
        written.delete(b"b", 0, 3, note=b"gone")
        await written.flush()
    finally:
        await producer.stop()
    chunks: list[list[Record]] = []
    read_changelog(broker_settings, topic, 0, chunks.append)
    a, b = [r for c in chunks for r in c][2:]
    assert (a.key, a.value, a.headers) == (
        b"a",
        None,
        [(SOURCE, (2).to_bytes(8, "little") + bytes(4))],
    )
    assert b.value is not None and b.value.endswith(b"gone")

    entries = []
    for boundary in (3, 4):
        producer = BatchProducer(broker_settings)
        try:
            restored = Changelog(topic, KafkaChangelogs(broker_settings, producer))
            await restored.restore(0, boundary)
        finally:
            await producer.stop()
        entries.append(restored.entries)
    assert entries == [
        {b"a": (0, 2, b""), b"b": (0, 1, b"y")},
        {b"a": (0, 2, b""), b"b": (0, 3, b"gone")},
    ]


@pytest.mark.integration
async def test_a_changelog_topic_is_created_compacted_in_small_segments(
    broker_settings: Settings,
) -> None:
    topic = f"{broker_settings.topic_raw}-sizes-changelog"
    producer = BatchProducer(broker_settings)
    try:  # a restore creates its changelog too: the first thing a fresh worker does
        await Changelog(topic, KafkaChangelogs(broker_settings, producer)).restore(0, 0)
    finally:
        await producer.stop()
    admin = AdminClient(confluent_config(broker_settings))
    (described,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    configs = {name: entry.value for name, entry in described.result(timeout=30).items()}
    assert {name: configs.get(name) for name in COMPACTED} == COMPACTED
    assert COMPACTED["cleanup.policy"] == "compact"
    assert (
        int(COMPACTED["segment.bytes"]) <= 64 * 2**20 and int(COMPACTED["segment.ms"]) <= 3600_000
    )


def test_the_runbook_alters_older_changelog_topics_to_the_segments_barcast_creates() -> None:
    runbook = (REPO_ROOT / "docs" / "operations.md").read_text()
    sizes = ",".join(
        f"{name}={value}" for name, value in COMPACTED.items() if name != "cleanup.policy"
    )
    assert f"--add-config {sizes}" in runbook


@pytest.mark.integration
def test_a_range_ends_where_the_log_does_though_its_last_offsets_hold_no_record(
    broker: str,
    broker_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A transactional producer's commit markers take offsets 3 and 7: no record is ever
    there. A read waiting for them would fail after STALL_S (shortened: it stays fast)."""
    monkeypatch.setattr(kafka_io, "STALL_S", 5.0)
    topic = f"{broker_settings.topic_raw}.txn"
    ensure_topics(broker_settings, [topic], partitions=1)
    producer = Producer({"bootstrap.servers": broker, "transactional.id": topic})
    producer.init_transactions(10)
    for transaction in range(2):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, key=b"k", value=b"%d.%d" % (transaction, i), partition=0)
        producer.commit_transaction(10)

    def offsets(start: int, end: int) -> list[tuple[int, bytes]]:
        return [(r.offset, r.value) for r in read_range(broker_settings, topic, 0, start, end)]

    first, second = [(0, b"0.0"), (1, b"0.1"), (2, b"0.2")], [(4, b"1.0"), (5, b"1.1")]
    assert offsets(0, 4) == first  # the next record, at 4, ends it
    assert offsets(0, 8) == [*first, *second, (6, b"1.2")]  # the log ends at the marker
    with caplog.at_level(logging.WARNING, logger="barcast.runtime"):
        assert offsets(5, 12) == [(5, b"1.1"), (6, b"1.2")]
    assert f"{topic}[0]: offsets 8..11 are not in the log (past the log's end)" in caplog.text


@dataclass
class Message:
    offset_: int
    error_: KafkaError | None = None

    def offset(self) -> int:
        return self.offset_

    def error(self) -> KafkaError | None:
        return self.error_

    def timestamp(self) -> tuple[int, int]:
        return 1, 0

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v%d" % self.offset_

    def headers(self) -> None:
        return None


@dataclass
class Consumer:
    """A consumer's calls the reads make, answered from a script (unit tests: no broker)."""

    low: int
    batches: list[list[Message]]
    committed_at: int = -1001
    high: int = 100
    assigned: list[int] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)  # num_messages of each consume call

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return self.low, self.high

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, tps[0].partition, self.committed_at)]

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned.append(tps[0].offset)

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        self.asked.append(num_messages)
        return self.batches.pop(0) if self.batches else []

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, tps[0].partition, -1001)]

    def close(self) -> None:
        pass


def reading(monkeypatch: pytest.MonkeyPatch, consumer: Consumer) -> Settings:
    monkeypatch.setattr(kafka_io, "_consumer", lambda settings, group: consumer)
    monkeypatch.setattr(kafka_io, "STALL_S", 0.05)
    return Settings.from_env()


def test_offsets_retention_deleted_are_logged_and_the_read_starts_at_the_low_watermark(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = Consumer(low=5, batches=[[Message(5), Message(6), Message(8)]], committed_at=2)
    settings = reading(monkeypatch, consumer)
    with caplog.at_level(logging.WARNING, logger="barcast.runtime"):
        assert committed_offset(settings, "g", "t", 0) == 5
        assert [r.offset for r in read_range(settings, "t", 0, 3, 8)] == [5, 6]
    assert consumer.assigned == [5]
    gone = "t[0]: offsets %s are not in the log (deleted by retention)"
    assert gone % "2..4" in caplog.text and gone % "3..4" in caplog.text


def test_a_read_the_broker_stops_answering_fails_as_the_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = reading(monkeypatch, Consumer(low=0, batches=[[Message(0), Message(1)]]))
    with pytest.raises(TimeoutError, match=r"t\[0\]: .* offsets 2\.\.9 were being read") as err:
        read_range(settings, "t", 0, 0, 10)
    assert exit_code(err.value) == ExitCode.BROKER_FAILED


def test_a_consumer_error_fails_the_read_as_the_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    denied = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    settings = reading(monkeypatch, Consumer(low=0, batches=[[Message(0), Message(1, denied)]]))
    with pytest.raises(KafkaException) as err:
        read_range(settings, "t", 0, 0, 10)
    assert exit_code(err.value) == ExitCode.BROKER_FAILED


def test_a_chunk_is_applied_before_the_next_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    eof = KafkaError(KafkaError._PARTITION_EOF)
    batches = [[Message(0), Message(1)], [Message(2), Message(3, eof)]]
    consumer = Consumer(low=0, batches=batches, high=3)
    settings = reading(monkeypatch, consumer)
    seen: list[tuple[list[int], int]] = []  # a chunk's offsets, and the batches left to read

    def apply(chunk: list[Record]) -> None:
        seen.append(([r.offset for r in chunk], len(consumer.batches)))

    assert read_changelog(settings, "t", 0, apply) == 3
    assert seen == [([0, 1], 1), ([2], 0)]
    # never more than the range still holds: consume returns as soon as those came, instead of
    # waiting out its timeout for a chunk the range cannot fill while a rebalance waits
    assert consumer.asked == [3, 1]


def test_a_fake_consumer_answers_what_the_reads_call() -> None:
    """The script above stays a consumer: the methods it fakes are librdkafka's."""
    from confluent_kafka import Consumer as Real

    names = [n for n in vars(Consumer) if not n.startswith("_") and callable(vars(Consumer)[n])]
    assert all(hasattr(Real, n) for n in names)


@pytest.mark.parametrize("limit", [65_536, 1_000_000])
def test_a_record_batch_is_no_larger_than_a_record_may_be(limit: int) -> None:
    """A broker's `message.max.bytes` bounds a whole record batch: with
    BARCAST_MAX_RECORD_BYTES set to it, every batch the worker sends must fit too."""
    options = kafka_io.producer_options(Settings(max_record_bytes=limit))
    assert options["max_batch_size"] <= limit == options["max_request_size"]
    assert (options["acks"], options["linger_ms"]) == ("all", 0)
