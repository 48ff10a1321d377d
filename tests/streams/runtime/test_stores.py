"""The runtime's stores (streams.runtime.stores) are restored exactly as of a commit's boundary
(a flush that never completed is not restored, the one before it is), windows of another feature
set or lookback start empty, and their changelog flushes through the real broker end below the
partition's high watermark, where a restore stops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, TopicPartition

from model.serving.windows import SymbolWindow, meta_key
from streams.kafka import ensure_topics
from streams.metrics import Metrics
from streams.runtime.changelog import Changelog, ChangelogRecord
from streams.runtime.commit import MARK, Committer, Runtime
from streams.runtime.kafka_io import BATCH_BYTES, BatchProducer, read_changelog, record_batches
from streams.runtime.records import Record
from streams.runtime.stores import StateStore, Store, WindowStore
from streams.settings import Settings
from tests.kafka_io import read_topic
from tests.streams.runtime.test_commit import Event


async def flush(store: Store) -> None:
    """What a checkpoint does to a store: its changed states encoded, then written."""
    store.put_changed()
    await store.changelog.flush()


class MemoryChangelogs:
    """Changelog topics in memory: what a store writes, a restore reads back."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], list[ChangelogRecord]] = {}
        self.last_write: dict[tuple[str, int], int] = {}  # where the last write began

    async def write(self, topic: str, records: dict[int, list[ChangelogRecord]]) -> None:
        for partition, run in records.items():
            log = self.partitions.setdefault((topic, partition), [])
            self.last_write[(topic, partition)] = len(log)
            log.extend(run)

    async def read(
        self, topic: str, partition: int, apply: Callable[[list[ChangelogRecord]], None]
    ) -> int:
        records = list(self.partitions.get((topic, partition), []))
        apply(records)
        return len(records)

    def compact(self, tombstones_expired: bool = False) -> None:
        """The most the log cleaner may do: keep each key's last record of the segments before
        the active one, which a write may have just rolled (the active one holds at least
        the last write's records); and, once `delete.retention.ms` passed, drop the
        tombstones among them."""
        for where, run in self.partitions.items():
            active = self.last_write[where]
            last = {record[0]: i for i, record in enumerate(run[:active])}
            kept = [run[i] for i in sorted(last.values())]
            if tombstones_expired:
                kept = [record for record in kept if record[1] is not None]
            self.partitions[where] = kept + run[active:]
            self.last_write[where] = len(kept)


def counter_store(io: MemoryChangelogs) -> StateStore[list[int]]:
    return StateStore(
        Changelog("t-counts-changelog", io),
        lambda data: [int(data)],
        lambda state: str(state[0]).encode(),
        lambda: [0],
    )


def test_a_restore_takes_each_key_as_of_the_boundary() -> None:
    io = MemoryChangelogs()

    async def run() -> tuple[list[int], list[int], list[int], list[int]]:
        store = counter_store(io)
        for offset, (key, n) in enumerate([(b"a", 1), (b"b", 2), (b"a", 3)]):
            store.write(key, 0, offset, [n])
        await flush(store)  # a checkpoint that completed: boundary 3
        store.write(b"a", 0, 3, [4])
        store.write(b"c", 1, 4, [5])
        await flush(store)  # one that never completed
        restored = counter_store(io)
        await restored.restore(0, boundary=3)
        await restored.restore(1, boundary=0)
        later = counter_store(io)
        await later.restore(0, boundary=4)
        return (
            restored.read(b"a"),
            restored.read(b"b"),
            restored.read(b"c"),
            later.read(b"a"),
        )

    a, b, c, a_later = asyncio.run(run())
    assert (a, b, c) == ([3], [2], [0])  # the incomplete flush left no trace
    assert a_later == [4]


def test_a_worker_crashing_in_every_checkpoint_keeps_its_state_through_compaction() -> None:
    io = MemoryChangelogs()

    async def crash_in_checkpoint(n: int) -> None:
        store = counter_store(io)
        await store.restore(0, boundary=3)
        store.write(b"a", 0, 3, [n])
        await flush(store)  # its offsets are never committed
        io.compact()

    async def run() -> tuple[list[ChangelogRecord], list[int]]:
        store = counter_store(io)
        store.write(b"a", 0, 2, [1])
        await flush(store)  # a checkpoint that completed: boundary 3
        await counter_store(io).restore(0, boundary=3)
        clean = list(io.partitions[("t-counts-changelog", 0)])  # nothing to write again
        for n in (10, 20, 30):
            await crash_in_checkpoint(n)
        restored = counter_store(io)
        await restored.restore(0, boundary=3)
        return clean, restored.read(b"a")

    clean, state = asyncio.run(run())
    assert len(clean) == 1
    assert state == [1]


class CountedReads(MemoryChangelogs):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def read(
        self, topic: str, partition: int, apply: Callable[[list[tuple[bytes, bytes]]], None]
    ) -> int:
        self.reads += 1
        return await super().read(topic, partition, apply)


def test_records_delivered_again_below_a_mark_restore_the_partition_once() -> None:
    io = CountedReads()

    async def run() -> list[int]:
        runtime = Runtime(Settings(), Metrics(), "t", lambda topic: {0}, asyncio.sleep)
        runtime.changelogs = io
        committer = Committer(runtime, "bars.raw", [counter_store(io)])
        committer.marks.put(MARK + b"0", 0, 5, b"")  # a checkpoint ended at offset 5,
        await committer.marks.flush()  # then its commit never came
        admitted: list[int] = []

        async def stages(records: list[Record]) -> None:
            admitted.extend(r.offset for r in records)

        again = [Record("bars.raw", 0, offset, 0.0, b"k", b"v", []) for offset in range(7)]
        await committer.run(again, [Event() for _ in again], stages)
        return admitted

    assert asyncio.run(run()) == [5, 6]
    assert io.reads == 2  # the marks' changelog and the one store's, once


def test_keys_in_a_partition_are_the_stored_and_the_changed() -> None:
    io = MemoryChangelogs()

    async def run() -> list[bytes]:
        store = counter_store(io)
        store.write(b"a", 0, 0, [1])
        store.write(b"b", 1, 1, [1])
        await flush(store)
        store.write(b"c", 0, 2, [1])
        return store.keys_in(0)

    assert asyncio.run(run()) == [b"a", b"c"]


def window_rows(window: SymbolWindow) -> tuple[int, np.ndarray]:
    return window.count, window.latest()


def test_windows_restore_exactly_and_a_flush_that_never_completed_is_not_restored() -> None:
    io = MemoryChangelogs()
    lookback, features = 4, 3

    async def run() -> tuple[tuple[int, np.ndarray], tuple[int, np.ndarray], np.ndarray]:
        store = WindowStore(Changelog("t-windows-changelog", io), lookback, features, "f")
        window = store.read(b"s")
        for offset in range(10):  # slots are overwritten as the ring turns
            window.append(offset, 1.0, False, True, np.full(features, float(offset)))
            store.write(b"s", 0, offset, window)
            if offset in (2, 6):
                await flush(store)
        committed = window_rows(window)
        await flush(store)  # offsets up to 9: boundary 10
        window.append(10, 1.0, False, True, np.full(features, 10.0))
        store.write(b"s", 0, 10, window)
        await flush(store)  # never completed
        again = WindowStore(Changelog("t-windows-changelog", io), lookback, features, "f")
        await again.restore(0, boundary=10)
        return committed, window_rows(again.read(b"s")), window.latest()

    committed, restored, latest = asyncio.run(run())
    assert restored[0] == committed[0] == 10
    assert np.array_equal(restored[1], committed[1])
    assert np.array_equal(committed[1][:, 0], [6.0, 7.0, 8.0, 9.0])
    assert not np.array_equal(restored[1], latest)


def test_a_flush_uses_few_batches_and_ends_with_a_lone_record() -> None:
    async def batch_sizes() -> list[int]:
        producer = AIOKafkaProducer(max_batch_size=BATCH_BYTES)  # not started: no I/O
        records = [(f"k{i}".encode(), bytes(4000), None, []) for i in range(200)]
        return [b.record_count() for b in record_batches(producer, records, lone_last=True)]

    sizes = asyncio.run(batch_sizes())
    assert sum(sizes) == 200
    assert sizes[-1] == 1
    assert len(sizes) == 5  # 199 records of ~4 kB in 256 kB batches, then the lone last one


@pytest.mark.integration
def test_the_high_watermark_covers_every_record_of_a_flush(
    broker: str, broker_settings: Settings
) -> None:
    topic = f"{broker_settings.topic_raw}.state"
    ensure_topics(broker_settings, [topic], partitions=1)
    records = [(f"k{i}".encode(), i.to_bytes(4, "big") * 1000, []) for i in range(300)]

    async def flush() -> None:
        producer = BatchProducer(broker_settings)
        try:
            pending = await producer.send_changelog(topic, {0: records})
            assert len(pending) > 2
            await asyncio.gather(*pending)
        finally:
            await producer.stop()

    asyncio.run(flush())
    consumer = Consumer({"bootstrap.servers": broker, "group.id": topic})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, len(records))
    stored = read_topic(broker, topic, expected=len(records))
    assert [(m.key, m.value, []) for m in stored] == records
    restored: list[Record] = []
    assert read_changelog(broker_settings, topic, 0, restored.extend) == len(records)
    assert [(r.key, r.value, r.headers) for r in restored] == records


def test_a_stored_window_of_another_feature_set_starts_empty_and_is_stored_anew() -> None:
    io, lookback = MemoryChangelogs(), 4

    def appended(store: WindowStore, offsets: range, features: int) -> None:
        window = store.read(b"s")
        for offset in offsets:
            window.append(offset, 1.0, False, True, np.full(features, float(offset)))
            store.write(b"s", 0, offset, window)

    async def run() -> tuple[int, tuple[int, np.ndarray]]:
        before = WindowStore(Changelog("t-windows-changelog", io), lookback, 3, "old")
        appended(before, range(6), 3)
        await flush(before)
        # An upgrade changed the feature set, and its width: the old rows must not load.
        after = WindowStore(Changelog("t-windows-changelog", io), lookback, 5, "new")
        await after.restore(0, boundary=6)
        emptied = after.read(b"s").count
        appended(after, range(6, 8), 5)
        await flush(after)
        again = WindowStore(Changelog("t-windows-changelog", io), lookback, 5, "new")
        await again.restore(0, boundary=8)
        return emptied, window_rows(again.read(b"s"))

    emptied, (count, values) = asyncio.run(run())
    assert emptied == 0 and count == 2
    assert np.array_equal(values[:count, 0], [6.0, 7.0])  # the rest of the ring is unused


@pytest.mark.parametrize("older", [False, True])  # True: its meta stored before it said
def test_a_stored_window_of_another_lookback_starts_empty(older: bool) -> None:
    """A checkpoint trained with another --lookback, served after a restart: the stored rows
    sit in other slots (a shorter window would load stale rows, a longer one find none)."""
    io = MemoryChangelogs()

    async def restored_count(lookback: int) -> int:
        again = WindowStore(Changelog("t-windows-changelog", io), lookback, 3, "f")
        await again.restore(0, boundary=100)
        return again.read(b"s").count

    async def run() -> list[int]:
        store = WindowStore(Changelog("t-windows-changelog", io), 4, 3, "f")
        window = store.read(b"s")
        for offset in range(10):
            window.append(offset, 1.0, False, True, np.full(3, float(offset)))
            store.write(b"s", 0, offset, window)
        await flush(store)
        if older:  # the meta as windows stored it before they said their lookback
            log = io.partitions[("t-windows-changelog", 0)]
            log[:] = [
                (k, v.rsplit(b"\x00", 1)[0] if k == meta_key(b"s") else v, h) for k, v, h in log
            ]
        return [await restored_count(lookback) for lookback in (3, 6, 4)]

    assert asyncio.run(run()) == [0, 0, 10]


def test_a_partitions_keys_come_in_order_after_a_restore_as_before() -> None:
    """A restore rebuilds the entries in the compacted log's order: what goes over a
    partition's keys (held candidates decided, symbols expired at an END_OF_INTERVAL) takes them
    sorted, so a restored worker publishes in the order one never stopped does."""
    io = MemoryChangelogs()

    async def run() -> tuple[list[bytes], list[bytes]]:
        store = counter_store(io)
        for offset, key in enumerate([b"b", b"a", b"c", b"b"]):
            store.write(key, 0, offset, [offset])
            await flush(store)
        io.compact()
        restored = counter_store(io)
        await restored.restore(0, boundary=4)
        return store.keys_in(0), restored.keys_in(0)

    assert asyncio.run(run()) == ([b"a", b"b", b"c"], [b"a", b"b", b"c"])
