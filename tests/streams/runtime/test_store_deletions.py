"""A store's deletions (an expired symbol's, streams.runtime.stores.Store.evict; a stream that
ended): restored as no state as of a commit's boundary, through compaction, with the note of the
symbol's last bar time, and touching no other symbol's keys."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch

from model.serving.streaming import Dims, SymbolStream
from model.serving.windows import meta_key, slot_key
from streams.runtime.changelog import SOURCE, Changelog, ChangelogRecord
from streams.runtime.stores import GONE, ShadowStore, StreamStore, WindowStore
from tests.model.serving.test_skill import scored
from tests.streams.runtime.test_stores import MemoryChangelogs, counter_store, flush


def test_an_evicted_key_is_restored_as_none_as_of_the_boundary() -> None:
    """An expired key's record after the boundary is not restored (its checkpoint never
    completed); before it, the key has no state, and the store keeps its last bar time."""
    io = MemoryChangelogs()

    async def run() -> tuple[Any, ...]:
        store = counter_store(io)
        store.write(b"a", 0, 0, [1])
        store.write(b"b", 0, 1, [2])
        await flush(store)
        store.evict(b"a", 0, 2, last_ts=7)
        store.evict(b"never", 0, 2, last_ts=None)  # a key of no bar, nothing stored: no record
        await flush(store)
        io.compact()
        before, after = counter_store(io), counter_store(io)
        await before.restore(0, boundary=2)  # the eviction's checkpoint never completed
        await after.restore(0, boundary=3)
        keys = sorted(after.changelog.entries)
        return before.read(b"a"), before.gone, after.read(b"a"), after.gone, keys, after.read(b"b")

    assert asyncio.run(run()) == ([1], {}, [0], {b"a": 7}, [b"b"], [2])
    # Each restore wrote its key's restored record again: the log's last of `a` is the eviction
    last = {key: value for key, value, _ in io.partitions[("t-counts-changelog", 0)]}
    assert last[b"a"][12:] == GONE + (7).to_bytes(8, "little")
    assert b"never" not in last


def test_an_expired_keys_note_keeps_its_latest_last_bar() -> None:
    """Evictions of a key re-sent out of order, or of a state its late bars left, keep the
    latest last bar time, in memory and in the note a restore reads."""
    io = MemoryChangelogs()

    async def run() -> tuple[dict[bytes, int], dict[bytes, int]]:
        store = counter_store(io)
        for offset, last_ts in enumerate([9, 7, None]):
            store.write(b"a", 0, offset, [offset])
            store.evict(b"a", 0, offset, last_ts)
            await flush(store)
        restored = counter_store(io)
        await restored.restore(0, boundary=3)
        return store.gone, restored.gone

    assert asyncio.run(run()) == ({b"a": 9}, {b"a": 9})


@pytest.mark.parametrize("then", ["written", "evicted"])
def test_a_window_stored_longer_leaves_no_slot_beyond_the_lookback(then: str) -> None:
    """A checkpoint of a shorter --lookback serves after a restart: the longer window's slots
    beyond it go from the changelog at the symbol's next flush, or with it when it expires."""
    io = MemoryChangelogs()

    def windows(lookback: int) -> WindowStore:
        return WindowStore(Changelog("t-windows", io), lookback, 2, "f")

    def append(store: WindowStore, offsets: range) -> None:
        for offset in offsets:
            store.read(b"s").append(offset, 1.0, False, True, np.full(2, offset, np.float32))
            store.write(b"s", 0, offset, store.read(b"s"))

    async def run() -> tuple[WindowStore, WindowStore]:
        longer = windows(6)
        append(longer, range(8))
        await flush(longer)
        shorter = windows(4)
        await shorter.restore(0, boundary=8)
        if then == "written":
            append(shorter, range(8, 9))
        else:
            shorter.evict(b"s", 0, 8, last_ts=7)
        await flush(shorter)
        again = windows(4)
        await again.restore(0, boundary=9)
        return shorter, again

    shorter, again = asyncio.run(run())
    within = [meta_key(b"s"), *(slot_key(b"s", slot) for slot in range(4))]  # 1-3: refilled
    assert sorted(shorter.changelog.entries) == (sorted(within) if then == "written" else [])
    assert again.changelog.entries == shorter.changelog.entries


@pytest.mark.parametrize("then", ["written", "evicted"])
def test_a_shadow_window_stored_larger_leaves_no_slot_beyond_its_size(then: str) -> None:
    """BARCAST_SCORE_WINDOW made smaller: the larger window's slots beyond the new size go
    from the changelog at the symbol's next flush, or with it when it expires."""
    io = MemoryChangelogs()

    async def run() -> tuple[ShadowStore, ShadowStore]:
        await scored(ShadowStore(Changelog("t-shadow", io), 50), 1, 60)
        smaller = ShadowStore(Changelog("t-shadow", io), 20)
        await smaller.restore(0, boundary=2)
        if then == "written":
            smaller.write(b"s", 0, 2, smaller.read(b"s"))
        else:
            smaller.evict(b"s", 0, 2, last_ts=None)
        await flush(smaller)
        again = ShadowStore(Changelog("t-shadow", io), 20)
        await again.restore(0, boundary=3)
        return smaller, again

    smaller, again = asyncio.run(run())
    within = [b"s", *(slot_key(b"s", slot) for slot in range(20))]
    assert sorted(smaller.changelog.entries) == (sorted(within) if then == "written" else [])
    assert again.changelog.entries == smaller.changelog.entries
    assert again.read(b"s").window == smaller.read(b"s").window


def test_an_evicted_window_deletes_its_slots_and_no_other_symbols() -> None:
    io = MemoryChangelogs()

    async def run() -> tuple[WindowStore, WindowStore]:
        store = WindowStore(Changelog("t-windows", io), 3, 2, "f")
        for offset, key in enumerate([b"6E", b"6EH4", b"6E", b"6EH4", b"6E"]):
            store.read(key).append(offset, 1.0, False, True, np.full(2, offset, np.float32))
            store.write(key, 0, offset, store.read(key))
        await flush(store)
        store.evict(b"6E", 0, 5, last_ts=4)
        await flush(store)
        restored = WindowStore(Changelog("t-windows", io), 3, 2, "f")
        await restored.restore(0, boundary=6)
        return store, restored

    store, restored = asyncio.run(run())
    assert all(not key.startswith(b"6E\x00") for key in store.changelog.entries)
    assert restored.changelog.entries == store.changelog.entries
    assert restored.read(b"6E").count == 0
    assert restored.read(b"6EH4").count == 2


def test_the_slots_of_a_stream_that_ended_are_deleted() -> None:
    """A canary's stream ends (a verdict): its place's slots go from the changelog, so neither
    they nor, at an expiry, the symbol's other keys outlive the symbol's streams."""
    io = MemoryChangelogs()

    def stream(lookback: int) -> SymbolStream:
        dims = Dims(1, 2, lookback, 1)
        return SymbolStream(1, torch.arange(dims.size, dtype=torch.float32), dims, np.zeros(2))

    async def run() -> tuple[StreamStore, StreamStore]:
        store = StreamStore(Changelog("t-encoder-streams", io))
        store.write(b"A", 0, 0, {"canary": stream(3), "model": stream(4)})
        await flush(store)
        store.write(b"A", 0, 1, {"model": stream(4)})
        await flush(store)
        restored = StreamStore(Changelog("t-encoder-streams", io))
        await restored.restore(0, boundary=2)
        return store, restored

    store, restored = asyncio.run(run())
    place_0 = [b"A\x00\x00" + slot.to_bytes(8, "little") for slot in range(4)]
    assert sorted(store.changelog.entries) == sorted([b"A", *place_0])
    assert restored.changelog.entries == store.changelog.entries
    assert list(restored.read(b"A")) == ["model"]

    async def written_unread() -> StreamStore:
        """Restored, then written without a read (the engine held the symbol's streams
        through a rebalance): the stored heads say which slots were there."""
        io.partitions.clear()
        store = StreamStore(Changelog("t-encoder-streams", io))
        store.write(b"A", 0, 0, {"canary": stream(3), "model": stream(4)})
        await flush(store)
        again = StreamStore(Changelog("t-encoder-streams", io))
        await again.restore(0, boundary=1)
        again.write(b"A", 0, 1, {"model": stream(4)})
        await flush(again)
        return again

    assert sorted(asyncio.run(written_unread()).changelog.entries) == sorted([b"A", *place_0])


def test_deletions_are_tombstones_the_cleaner_drops_and_a_note_stays() -> None:
    """An expired window's keys are deleted by tombstones (no value, their source in a header),
    which the log cleaner drops once `delete.retention.ms` passed: nothing of the symbol is left
    in the topic but its note, and a restore still takes it for no state."""
    io = MemoryChangelogs()

    def windows() -> WindowStore:
        return WindowStore(Changelog("t-windows", io), 3, 2, "f")

    async def run() -> tuple[WindowStore, WindowStore]:
        store = windows()
        for offset, key in enumerate([b"s", b"s", b"s", b"t"]):
            store.read(key).append(offset, 1.0, False, True, np.full(2, offset, np.float32))
            store.write(key, 0, offset, store.read(key))
        await flush(store)
        store.evict(b"s", 0, 4, last_ts=2)
        await flush(store)
        deletions = io.partitions[("t-windows", 0)][-5:]
        assert [key for key, *_ in deletions] == [meta_key(b"s"), *sorted_slots(b"s"), b"s"]
        assert all(value is None for _, value, _ in deletions[:-1])
        assert all(
            h == [(SOURCE, (4).to_bytes(8, "little") + bytes(4))] for *_, h in deletions[:-1]
        )
        assert deletions[-1][1] is not None and GONE in deletions[-1][1]  # the note: a value
        store.write(b"t", 0, 5, store.read(b"t"))
        await flush(store)  # the eviction's records are no longer in the active segment
        io.compact(tombstones_expired=True)
        restored = windows()
        await restored.restore(0, boundary=6)
        return store, restored

    store, restored = asyncio.run(run())
    left = [key for key, *_ in io.partitions[("t-windows", 0)] if key.startswith(b"s")]
    assert left == [b"s"]
    assert restored.changelog.entries == store.changelog.entries
    assert restored.gone == {b"s": 2} and restored.read(b"s").count == 0
    assert restored.read(b"t").count == 1


def sorted_slots(key: bytes) -> list[bytes]:
    return [slot_key(key, slot) for slot in range(3)]


@pytest.mark.parametrize("revived", [False, True])  # True: the key written after its deletion
def test_a_restored_tombstone_written_again_stays_a_tombstone_and_marks_stay_values(
    revived: bool,
) -> None:
    """A restore writes a key's restored record again when a flush that never completed wrote
    after it: a tombstone as a tombstone, a value as a value. An entry put with an empty
    payload (a commit's marks, streams.runtime.commit) is a value, which the cleaner keeps."""
    io = MemoryChangelogs()

    async def run() -> list[ChangelogRecord]:
        store = counter_store(io)
        store.write(b"a", 0, 0, [1])
        await flush(store)
        store.evict(b"a", 0, 1, last_ts=None)
        await flush(store)
        if revived:
            store.write(b"a", 0, 2, [2])
            await flush(store)
        store.write(b"a", 0, 4, [5])  # a flush whose offsets were never committed
        await flush(store)
        await counter_store(io).restore(0, boundary=3)
        return io.partitions[("t-counts-changelog", 0)]

    key, value, _ = asyncio.run(run())[-1]  # written again by the restore
    assert key == b"a" and (value is None) != revived
    marks = Changelog("t-marks", io)
    marks.put(b"mark", 0, 7, b"")
    assert marks.unsent[0][0][1] is not None


def test_a_tombstone_without_its_source_is_refused_naming_the_fix() -> None:
    io = MemoryChangelogs()
    asyncio.run(io.write("t-counts-changelog", {0: [(b"a", None, [])]}))
    with pytest.raises(ValueError, match="its own changelog topics"):
        asyncio.run(counter_store(io).restore(0, boundary=1))
