"""A store's changelog topic: its encoded entries in memory (key -> source partition, offset,
bytes), the records to write at the next flush, and the restore of a partition's entries as of
a commit's boundary (streams.runtime.stores). A restore skips a record past its boundary (written
by a flush whose offsets were never committed) and writes the key's restored entry again:
otherwise, once a segment roll let the log cleaner keep only each key's last record, a worker
crashing in every checkpoint would lose the key's state to records it never restores."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("barcast.runtime")

_HEAD = struct.Struct("<qi")  # source offset, source partition


class ChangelogIO(Protocol):
    async def write(self, topic: str, records: dict[int, list[tuple[bytes, bytes]]]) -> None: ...

    async def read(
        self, topic: str, partition: int, apply: Callable[[list[tuple[bytes, bytes]]], None]
    ) -> int:
        """The partition's (key, value) records, in order, to `apply` a chunk at a time (maybe
        in another thread); how many."""


def _entry_bytes(partition: int, offset: int, payload: bytes) -> bytes:
    return _HEAD.pack(offset, partition) + payload


class Changelog:
    """A store's encoded entries (key -> source partition, offset, bytes) and its topic."""

    def __init__(self, topic: str, io: ChangelogIO) -> None:
        self.topic, self.io = topic, io
        self.entries: dict[bytes, tuple[int, int, bytes]] = {}
        self.unsent: dict[int, list[tuple[bytes, bytes]]] = {}

    def put(self, key: bytes, partition: int, offset: int, payload: bytes) -> None:
        self.entries[key] = (partition, offset, payload)
        self._send(key, partition, offset, payload)

    def delete(self, key: bytes, partition: int, offset: int, note: bytes = b"") -> None:
        """`key`'s entry gone: its next record holds `note` (a store's: no state's payload), if
        it had an entry or `note` says something."""
        if self.entries.pop(key, None) is not None or note:
            self._send(key, partition, offset, note)

    def _send(self, key: bytes, partition: int, offset: int, payload: bytes) -> None:
        record = (key, _entry_bytes(partition, offset, payload))
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

        def apply(chunk: list[tuple[bytes, bytes]]) -> None:
            nonlocal skipped
            for key, value in chunk:
                offset, source = _HEAD.unpack_from(value)
                skipped += offset >= boundary
                prior = restored.get(key)
                if offset < boundary and (prior is None or offset >= prior[1]):
                    restored[key] = (source, offset, value[_HEAD.size :])
                    buried.discard(key)
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
        again = [(key, _entry_bytes(*restored[key])) for key in sorted(buried) if key in restored]
        if again:
            await self.io.write(self.topic, {partition: again})
        return list(restored)
