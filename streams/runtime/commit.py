"""The commit protocol (docs/design.md, Commit protocol): an agent's batches under one lock, and
their commits (`Committer.commit`), due once the oldest held record has waited `checkpoint_min_s`
and the worker is quiet (no stream work for `QUIET_S`), or `checkpoint_max_s` on a worker never
quiet, or after `MAX_HELD` records; and before partitions move. Why so seldom: each changed
state is one changelog record, so a commit per batch would cost up to one per bar; why quiet: at
a minute boundary every symbol's bar arrives at once, and writing every state mid-burst would
queue the burst's last bars, and their forecasts, behind it.

Why the offset guard (`_admit`): in the restart test (faust-streaming 0.15.3), right after a
worker joins, the first records from a partition's committed offset sometimes never reached the
agent (Faust's fetch loop, `Consumer._drain_messages`, moves its read offset past records whose
delivery it abandons while flow control is suspended around the resume, and its commit passes
them), lost for good. barcast's fetch loop (streams.consumer) abandons none, but whatever
delivers them, a partition's records must come at consecutive offsets from where it resumes
(`_start`): a hole is read from the broker with librdkafka and passed on first (every record
of it still in the log, or the worker exits 69); a record delivered twice (as a few from before
Faust's seek at start-up) is dropped.

The names that say "checkpoint" (`BARCAST_CHECKPOINT_MIN_S` and `_MAX_S`,
`barcast_checkpoints_total`, the marks' store and key, the stop's log line) predate the name
"commit" and keep it: deployments, dashboards, log searches and stored state read them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streams.runtime.changelog import Changelog
from streams.runtime.kafka_io import BatchProducer, KafkaChangelogs, committed_offset, read_range
from streams.runtime.observers import Observer
from streams.runtime.policy import exit_uncommitted, publishable
from streams.runtime.records import Ackable, Out, Record
from streams.runtime.stores import marks_name

if TYPE_CHECKING:
    from streams.metrics import Metrics
    from streams.runtime.stores import Store
    from streams.settings import Settings

log = logging.getLogger("barcast.runtime")

QUIET_S = 0.1  # no stream work for this long: the burst is over
TICK_S = 0.05  # how often a quiet worker's due commits are looked for
MAX_HELD = 20_000  # bounds memory
MARK = b"checkpoint:"  # + source partition: the key of a partition's mark
END, NONE = 2**63 - 1, -1  # restore every record / none


def commit_due(held: int, held_s: float, quiet_s: float, min_s: float, max_s: float) -> bool:
    """Whether `held` records, the oldest held `held_s`, are due: on a worker quiet for
    `quiet_s` once `held_s` reaches `min_s`, on any once it reaches `max_s`."""
    if held >= MAX_HELD:
        return True
    return held > 0 and (held_s >= max_s or (held_s >= min_s and quiet_s >= QUIET_S))


@dataclass
class Runtime:
    """What a worker's agents share (one agent's commit waits for the others' bursts too)."""

    settings: Settings
    metrics: Metrics
    group: str  # the consumer group: its committed offsets are where stores restore to
    assigned: Callable[[str], set[int]]  # a topic's partitions assigned to this worker
    commit_offsets: Callable[[], Awaitable[object]]  # commit the acked offsets now
    observers: list[Observer] = field(default_factory=list)
    worked: float = -math.inf  # time.monotonic() of the last stream work
    committers: list[Committer] = field(default_factory=list)  # each registers itself

    def __post_init__(self) -> None:
        self.producer = BatchProducer(self.settings)
        self.changelogs = KafkaChangelogs(self.settings, self.producer)

    def changelog(self, name: str) -> Changelog:
        """The changelog of the store `name` (topic `<group>-<name>-changelog`)."""
        return Changelog(f"{self.group}-{name}-changelog", self.changelogs)

    async def send(self, records: Sequence[Out]) -> list[asyncio.Future]:
        """Hand `records` to the producer, each one too large as its bounded dead letter."""
        settings = self.settings
        bounded = publishable(records, settings.max_record_bytes, settings.topic_dlq, self.metrics)
        return await self.producer.send(bounded)

    async def close(self) -> None:
        """A graceful stop, once the consumer has stopped fetching: every agent's last commit,
        then the producer. Stopping the producer first would fail a commit in flight (an exit
        69) or leave it waiting on acks that never come."""
        for committer in self.committers:
            await committer.close()
        await self.producer.stop()


Handle = Callable[[list[Record]], Awaitable[None]]  # an agent's stages on a batch
Drain = Callable[[], Awaitable[None]] | None  # of a stage publishing on its own schedule


class Committer:
    """An agent's source topic: its batches run, their effects held, and committed."""

    def __init__(
        self, runtime: Runtime, topic: str, stores: list[Store], drain: Drain = None
    ) -> None:
        self.runtime, self.topic, self.stores, self.drain = runtime, topic, stores, drain
        self.next: dict[int, int] = {}  # partition -> offset of the next record to admit
        # Per source partition, where the stores' last complete flush ends (see `_start`)
        self.marks = runtime.changelog(marks_name(topic))
        self.marked: dict[int, int] = {}
        self.told: set[int] = set()  # partitions whose skipped records were logged (`_repeated`)
        self.lock = asyncio.Lock()
        self.held: list[Ackable] = []
        self.held_since = 0.0
        self.sent: list[asyncio.Future] = []
        self.completing: list[asyncio.Future] = []  # the last commit's steps 4 to 7
        self.closed = False  # after the last commit of a graceful stop
        self.moving = False  # partitions revoked and not assigned again yet: nothing runs
        runtime.committers.append(self)

    async def run(self, records: Sequence[Record], held: Sequence[Ackable], stages: Handle) -> None:
        """The `stages` on a batch's records of assigned partitions, in order, each once; their
        acks (`held[i]` is `records[i]`'s) held until a commit (repeats too: acked early, they
        let the commit pass a first delivery). A record of a partition no longer assigned is
        left unacked: acked, it would let this worker's commit pass it if the partition came
        back. So is every record while partitions move (`on_revoked` to `on_assigned`): one
        fetched before the revoke, run then, would publish and store what its partition's next
        owner does too, and leave this worker holding the partition's state."""
        async with self.lock:
            if self.closed or self.moving:
                return  # left unacked, so uncommitted: whoever reads the partition next has it
            owned = self.runtime.assigned(self.topic)
            mine = [i for i, r in enumerate(records) if r.partition in owned]
            if mine and not self.held:
                self.held_since = time.monotonic()
            self.held += [held[i] for i in mine]
            admitted = await self._admit([records[i] for i in mine])
            if admitted:
                started = time.perf_counter()
                await stages(admitted)
                self.runtime.worked = time.monotonic()
                agent = self.runtime.metrics.loop_seconds.labels("agent")
                agent.inc(time.perf_counter() - started)
            if self._due():
                await self.commit()

    async def publish(self, records: Sequence[Out]) -> None:
        """Hand a batch's outputs to the producer; the next commit waits for their acks."""
        self.sent += await self.runtime.send(records)

    async def commit(self) -> None:
        """Commit the effects of the batches run since the last commit (docs/design.md):

        1. Wait for the previous commit to complete: commits complete in order.
        2. Drain the stage that publishes on its own schedule (the forecast stage: its
           waiting windows through the model, then the scores their bars decide).
        3. Encode each store's changed states into its changelog's unsent records.
        The agent goes on from here; steps 4 to 7 complete in the background:
        4. Wait for the acks of every output handed to the producer since the last commit.
        5. Flush every store's changelog: write its records, wait for their acks.
        6. Mark, per source partition, the offset the flush covers up to (`_mark`).
        7. Ack the held records and commit the consumer group's offsets.

        A failure at any step exits uncommitted (69: the Kafka cluster failed; 70: else)."""
        held, self.held = self.held, []
        sent, self.sent = self.sent, []
        try:
            # Step 1. The previous commit's steps 4 to 7
            await asyncio.gather(*self.completing)
            # Step 2. Drain
            if self.drain is not None:
                await self.drain()
            # Step 3. Encode the changed states
            for store in self.stores:
                store.put_changed()
        except Exception as exc:
            exit_uncommitted(f"a commit of {self.topic} failed", exc)
        offsets = dict(self.next)

        async def complete() -> None:
            try:
                # Step 4. The outputs' acks
                await asyncio.gather(*sent)
                # Step 5. Flush the changelogs
                await asyncio.gather(*(store.changelog.flush() for store in self.stores))
                # Step 6. The marks
                await self._mark(offsets)
                # Step 7. Ack and commit the source offsets
                for event in held:
                    event.ack()
                await self.runtime.commit_offsets()
            except Exception as exc:
                exit_uncommitted(f"a commit of {self.topic} failed", exc)
            if held:
                self.runtime.metrics.commits.inc()

        self.completing = [asyncio.ensure_future(complete())]

    async def tick(self) -> None:
        """Commit from a timer (every `TICK_S`): how a quiet worker's records commit."""
        if self._due():
            async with self.lock:
                # Due still? While this waited, the agent may have committed and taken a new
                # burst's first records, which a commit now would cut in the middle.
                if self._due():
                    await self.commit()

    async def on_revoked(self) -> None:
        """Before partitions move: commit, then forget every state (whoever owns a
        partition next, this worker too, restores it); no batch runs until `on_assigned`."""
        async with self.lock:
            if not self.closed:  # else the last commit is done, and the producer stopped
                await self.commit()
                await asyncio.gather(*self.completing)
            for store in self.stores:
                store.forget()
            self.next.clear()
            self.marked.clear()
            self.told.clear()
            self.moving = True

    def on_assigned(self) -> None:
        """Partitions assigned: batches run again, of the partitions assigned now (a record
        fetched before the revoke, of a partition this worker keeps, restores it from its
        last commit, and the same record fetched again is dropped as a repeat)."""
        self.moving = False

    async def close(self) -> None:
        """The last commit (`Runtime.close`): what this worker read commits now, so the next
        owner of its partitions starts where it stopped."""
        async with self.lock:
            if self.held:
                log.info(
                    "last checkpoint before the stop: %d records of %s", len(self.held), self.topic
                )
                await self.commit()
            await asyncio.gather(*self.completing)
            self.closed = True

    def _due(self) -> bool:
        now, settings = time.monotonic(), self.runtime.settings
        held_s, quiet_s = now - self.held_since, now - self.runtime.worked
        min_s, max_s = settings.checkpoint_min_s, settings.checkpoint_max_s
        return commit_due(len(self.held), held_s, quiet_s, min_s, max_s)

    async def _admit(self, records: Sequence[Record]) -> list[Record]:
        """Each partition's records in offset order, without repeats or holes (the guard)."""
        admitted: list[Record] = []
        repeated: dict[int, list[int]] = {}  # partition -> offsets delivered again
        for record in records:
            partition, offset = record.partition, record.offset
            expected = self.next.get(partition)
            if expected is None:  # kept before a skip too: else the next record restores again
                expected = self.next[partition] = await self._start(partition)
            if offset < expected:
                repeated.setdefault(partition, []).append(offset)
                continue  # delivered again: passed on already
            if offset > expected:
                admitted += await self._fill(partition, expected, offset)
            self.next[partition] = offset + 1
            admitted.append(record)
        for partition, offsets in repeated.items():
            self._repeated(partition, offsets)
        return admitted

    def _repeated(self, partition: int, offsets: list[int]) -> None:
        """Say, once per partition started, that records before where its stores resume were
        skipped. After a crash they are the records of a commit that marked its flush but did
        not commit its offsets: nothing is lost. After the group's offsets were reset, or the
        topic was made anew, the stores never saw them: the log line is what shows it
        (docs/operations.md, Replaying a day of history)."""
        if partition in self.told:
            return
        self.told.add(partition)
        log.info(
            "%s[%d]: skipped %d record(s) at offsets %d..%d, before offset %d where the stores "
            "resume: their effects are in the stores already (a commit marked them); if the "
            "group's offsets were reset or the topic made anew, they were never run: see "
            "docs/operations.md, Replaying a day of history",
            self.topic, partition, len(offsets), min(offsets), max(offsets), self.next[partition],
        )  # fmt: skip

    async def _fill(self, partition: int, start: int, end: int) -> list[Record]:
        log.warning(
            "%s[%d]: offsets %d..%d did not reach the agent in order; reading them from the "
            "broker", self.topic, partition, start, end - 1,
        )  # fmt: skip
        # Every record of the range still in the log, or an error (an exit 69): fewer than
        # end - start only where offsets hold none (commit markers, compacted records) or were
        # deleted by retention (logged), never a record that is there.
        settings = self.runtime.settings
        return await asyncio.to_thread(read_range, settings, self.topic, partition, start, end)

    async def _mark(self, offsets: dict[int, int]) -> None:
        """After the stores' flush: per partition, the offset it covers up to."""
        if self.stores:
            for partition, offset in offsets.items():
                if self.marked.get(partition) != offset:
                    self.marks.put(MARK + b"%d" % partition, partition, offset, b"")
                    self.marked[partition] = offset
            await self.marks.flush()

    async def _start(self, partition: int) -> int:
        """Where a partition first seen resumes: the end of the stores' last complete flush, as
        of which they are restored (the records before it, perhaps not committed yet, are
        skipped); without one, the group's committed offset (the stores start empty)."""
        await self.marks.restore(partition, END)
        mark = self.marks.entries.pop(MARK + b"%d" % partition, None)
        for store in self.stores:
            await store.restore(partition, NONE if mark is None else mark[1])
        if mark is not None:
            self.marked[partition] = mark[1]
            return mark[1]
        runtime = self.runtime
        return await asyncio.to_thread(
            committed_offset, runtime.settings, runtime.group, self.topic, partition
        )
