"""Records Faust drops when a worker resumes its partitions, and how barcast gets them back.

Seen in the restart test (faust-streaming 0.15.3 on the embedded broker): right after a worker
joins, the first records from a partition's committed offset sometimes never reach the agent.
Faust moves its read offset past records whose delivery it abandons while flow control is
suspended around the resume (`Consumer._drain_messages`), and its commit logic then lets the
committed offset pass them. The bars would be lost for good: the state moves past them.

`OffsetGuard` checks that each partition's records come at consecutive offsets from the
group's committed offset. On a hole it reads the missing records from the broker itself (a
plain librdkafka consumer) and passes them on first; a record delivered twice is dropped. (Faust
also delivers a few records from before its seek to the committed offset at start-up: dropped.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from streams.runtime.records import Record

log = logging.getLogger("barcast.runtime")

HOLE_MESSAGE = "did not reach the agent"


class OffsetGuard:
    """Passes each partition's records on in offset order, without repeats or holes.

    `start(partition)` returns where the group resumes a partition first seen since the last
    `reset()` (the committed offset: the runtime restores the partition's stores there), and
    `read(partition, start, end)` reads records start..end-1 from the broker."""

    def __init__(
        self,
        start: Callable[[int], Awaitable[int]],
        read: Callable[[int, int, int], Awaitable[list[Record]]],
    ) -> None:
        self.start, self.read = start, read
        self.next: dict[int, int] = {}  # partition -> offset of the next record

    async def admit(self, records: Sequence[Record]) -> list[Record]:
        admitted: list[Record] = []
        for record in records:
            partition, offset = record.partition, record.offset
            expected = self.next.get(partition)
            if expected is None:
                expected = await self.start(partition)
            if offset < expected:
                continue  # delivered again: passed on already
            if offset > expected:
                admitted += await self._fill(record.topic, partition, expected, offset)
            self.next[partition] = offset + 1
            admitted.append(record)
        return admitted

    async def _fill(self, topic: str, partition: int, start: int, end: int) -> list[Record]:
        log.warning(
            "%s[%d]: offsets %d..%d %s in order; reading them from the broker",
            topic, partition, start, end - 1, HOLE_MESSAGE,
        )  # fmt: skip
        records = await self.read(partition, start, end)
        if len(records) < end - start:
            log.error(
                "%s[%d]: read %d of offsets %d..%d; the others are skipped",
                topic, partition, len(records), start, end - 1,
            )  # fmt: skip
        return records

    def reset(self) -> None:
        """Partitions moved: each starts again at its committed offset."""
        self.next.clear()
