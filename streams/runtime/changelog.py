"""A store's changelog topic: its encoded entries in memory (key -> source partition, offset,
bytes), the records to write at the next flush, and the restore of a partition's entries as of
a commit's boundary (streams.runtime.stores). A restore skips a record past its boundary (written
by a flush whose offsets were never committed) and writes the key's restored entry again:
otherwise, once a segment roll let the log cleaner keep only each key's last record, a worker
crashing in every checkpoint would lose the key's state to records it never restores.

An entry deleted without a note is a tombstone (no value), its source offset and partition in a
header: the log cleaner drops tombstones once the topic's `delete.retention.ms` has passed, so
an expired symbol's keys leave the topic, and every later restore, for good."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("barcast.runtime")

_HEAD = struct.Struct("<qi")  # source offset, source partition
SOURCE = "barcast-source"  # a tombstone's header: its _HEAD
Headers = list[tuple[str, bytes]]
ChangelogRecord = tuple[bytes, bytes | None, Headers]  # key, value (None: a tombstone), headers


class ChangelogIO(Protocol):
    async def write(self, topic: str, records: dict[int, list[ChangelogRecord]]) -> None: ...

    async def read(
        self, topic: str, partition: int, apply: Callable[[list[ChangelogRecord]], None]
    ) -> int:
        """The partition's records, in order, to `apply` a chunk at a time (maybe in another
        thread); how many."""


def _record(
    key: bytes, partition: int, offset: int, payload: bytes, tombstone: bool = False
) -> ChangelogRecord:
    """An entry's record: its source offset and partition, then its payload; or a tombstone
    (a deletion without a note), the two in its header."""
    head = _HEAD.pack(offset, partition)
    return (key, None, [(SOURCE, head)]) if tombstone else (key, head + payload, [])


def _entry(value: bytes | None, headers: Headers) -> tuple[int, int, bytes]:
    """A record's source partition, offset and payload (empty for a tombstone)."""
    if value is not None:
        offset, source = _HEAD.unpack_from(value)
        return source, offset, value[_HEAD.size :]
    head = next((data for name, data in headers if name == SOURCE), None)
    if head is None:
        raise ValueError(
            f"a changelog tombstone without its {SOURCE!r} header: the topic was written by "
            "something other than barcast; give each worker group its own changelog topics"
        )
    offset, source = _HEAD.unpack(head)
    return source, offset, b""


class Changelog:
    """A store's encoded entries (key -> source partition, offset, bytes) and its topic."""

    def __init__(self, topic: str, io: ChangelogIO) -> None:
        self.topic, self.io = topic, io
        self.entries: dict[bytes, tuple[int, int, bytes]] = {}
        self.unsent: dict[int, list[ChangelogRecord]] = {}

    def put(self, key: bytes, partition: int, offset: int, payload: bytes) -> None:
        self.entries[key] = (partition, offset, payload)
        self._send(partition, _record(key, partition, offset, payload))

    def delete(self, key: bytes, partition: int, offset: int, note: bytes = b"") -> None:
        """`key`'s entry gone: its next record holds `note` (a store's: no state's payload), if
        it had an entry or `note` says something."""
        if self.entries.pop(key, None) is not None or note:
            self._send(partition, _record(key, partition, offset, note, tombstone=not note))

    def _send(self, partition: int, record: ChangelogRecord) -> None:
        self.unsent.setdefault(partition, []).append(record)

    async def flush(self) -> None:
        unsent, self.unsent = self.unsent, {}
        if unsent:
            await self.io.write(self.topic, unsent)

    async def restore(self, partition: int, boundary: int) -> list[bytes]:
        """The partition's entries written before source offset `boundary`, into a store
        holding nothing of it (never seen, or forgotten since): each key's entry of the highest
        such offset, the later in the log on a tie, kept as the records are read (a compacted log
        holds many per key). An entry that is not its key's last record is written again.
        Returns the keys restored."""
        restored: dict[bytes, tuple[int, int, bytes]] = {}  # the reading thread's until read
        skipped = 0
        buried: set[bytes] = set()  # keys whose last record in the log is not the restored one
        tombstones: set[bytes] = set()  # keys whose restored record is a tombstone

        def apply(chunk: list[ChangelogRecord]) -> None:
            nonlocal skipped
            for key, value, headers in chunk:
                entry = _entry(value, headers)
                offset = entry[1]
                skipped += offset >= boundary
                prior = restored.get(key)
                if offset < boundary and (prior is None or offset >= prior[1]):
                    restored[key] = entry
                    buried.discard(key)
                    (tombstones.add if value is None else tombstones.discard)(key)
                else:
                    buried.add(key)

        read = await self.io.read(self.topic, partition, apply)
        self.entries.update(restored)
        if read:
            log.info(
                "Restoring state from changelog topics: %s[%d], %d records (%d written from "
                "offset %d on by a flush that never completed, whose inputs are replayed)",
                self.topic, partition, read, skipped, boundary,
            )  # fmt: skip
        again = [
            _record(key, *restored[key], tombstone=key in tombstones)
            for key in sorted(buried)
            if key in restored
        ]
        if again:
            await self.io.write(self.topic, {partition: again})
        return list(restored)
