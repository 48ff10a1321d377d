"""Guard against records Faust skips when a worker resumes a partition.

After an assignment, Faust resumes fetching before it resumes flow control, and streams drop
records that arrive in between (`Recovery.on_recovery_completed` in faust-streaming 0.15.3);
its commit logic then lets the committed offset pass one missing record at the head of a
partition (`Consumer._new_offset`). Seen in the restart test as the first record of a partition
never reaching the agent: the bar is lost for good, as the agent's state moves past it.

`OffsetGuard` admits each partition's events only at consecutive offsets, starting from the
committed one. On a hole it seeks the partition back and drops later events (never acking
them) until the missing one arrives again; after `REFETCH_TIMEOUT_S` without it, the hole is
taken as real (a compacted or transactional topic) and logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faust.types import TP, EventT

    from streams.faust_app import BarcastApp

log = logging.getLogger("barcast.agents")

REFETCH_TIMEOUT_S = 30.0


class OffsetGuard:
    def __init__(self, app: BarcastApp, topic: str) -> None:
        self.app, self.topic = app, topic
        self.next: dict[int, int] = {}  # partition -> offset of the next event to admit
        self.refetching: dict[int, float] = {}  # partition -> when to give the hole up
        app.on_partitions_assigned.connect(self._on_assigned)

    async def admit(self, events: Sequence[EventT]) -> list[EventT]:
        """The events in offset order per partition, without repeats or holes."""
        admitted = []
        for event in events:
            message = event.message
            partition, offset = message.partition, message.offset
            expected = self.next.get(partition)
            if expected is None:
                expected = await self._committed(message.tp)
            if offset < expected:
                continue  # delivered again after a seek: admitted already
            if offset > expected and not await self._hole(message.tp, expected, offset):
                continue
            self.refetching.pop(partition, None)
            self.next[partition] = offset + 1
            admitted.append(event)
        return admitted

    async def _hole(self, tp: TP, expected: int, offset: int) -> bool:
        """Whether to accept a hole before `offset`; else it is being fetched again."""
        deadline = self.refetching.get(tp.partition)
        if deadline is None:
            log.warning(
                "%s[%d]: offsets %d..%d never reached the agent; fetching them again",
                tp.topic, tp.partition, expected, offset - 1,
            )  # fmt: skip
            self.refetching[tp.partition] = time.monotonic() + REFETCH_TIMEOUT_S
            self.next[tp.partition] = expected
            await self.app.consumer.seek(tp, expected)
            return False
        if time.monotonic() < deadline:
            return False  # fetched before the seek: dropped, it comes again
        log.error(
            "%s[%d]: offsets %d..%d did not come again in %.0fs; going on without them",
            tp.topic, tp.partition, expected, offset - 1, REFETCH_TIMEOUT_S,
        )  # fmt: skip
        return True

    async def _committed(self, tp: TP) -> int:
        """Where the partition starts: its committed offset, else its first offset."""
        # Faust keeps committed offsets (last processed + 1) only here; metrics read it too.
        committed = self.app.consumer._committed_offset.get(tp)
        if committed is None:
            committed = (await self.app.consumer.earliest_offsets(tp))[tp]
        return committed

    def _on_assigned(self, sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        """A new assignment starts every partition again at its committed offset."""
        for tp in assigned:
            if tp.topic == self.topic:
                self.next.pop(tp.partition, None)
                self.refetching.pop(tp.partition, None)
