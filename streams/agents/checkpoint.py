"""Write-behind agent state: changed states are written, and source events acked, once per
checkpoint, not once per take() batch. A checkpoint is due once the oldest held event has waited
`INTERVAL_S` and the worker is quiet (no stream work for `QUIET_S`), or, on a worker that is
never quiet, once it has waited the `checkpoint_max_s` setting, or after `MAX_HELD` events.

Why: every changed state is one changelog record (a symbol's features state is ~12 kB
compressed), so writing per batch costs up to one such record per bar once batches span many
symbols; per checkpoint it is one per changed symbol. Waiting for a quiet worker keeps the writes
out of a burst: at a minute boundary every symbol's bar arrives at once, and writing 1,000
states (~12 MB) mid-burst would queue the burst's last bars, and their forecasts, behind it.

A batch's outputs are published within the batch (the separate agents also wait for their acks
there; the one-agent pipeline waits at the checkpoint). Its states stay in memory, and its
events stay unacked (held), until the next checkpoint writes every changed state, waits for the
broker, and only then acks the held events: Faust never commits an offset whose state
is not durable. A crash loses at most the held window: the restarted worker recovers the last
checkpoint's states and replays from the committed offset; events at or below a recovered
state's offset are skipped, the others produce the same outputs again (removed downstream by
key de-duplication).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from streams.agents.io import each_batch, raw_topic
from streams.agents.offsets import OffsetGuard
from streams.agents.state import StateTable

if TYPE_CHECKING:
    from faust.types import TP, EventT

    from streams.faust_app import BarcastApp

INTERVAL_S = 0.5  # below Faust's commit interval (1 s), so commits of a quiet worker are prompt
QUIET_S = 0.1  # no stream work for this long: the burst is over
TICK_S = 0.05  # how often idle checkpoints are looked for
MAX_HELD = 20_000  # bounds memory

S = TypeVar("S")


def checkpoint_due(held: int, held_s: float, quiet_s: float, max_s: float) -> bool:
    """Whether to checkpoint `held` events, the oldest held for `held_s`, on a worker that has
    done no stream work for `quiet_s`, holding events at most `max_s`."""
    if held >= MAX_HELD:
        return True
    return held > 0 and (held_s >= max_s or (held_s >= INTERVAL_S and quiet_s >= QUIET_S))


class Activity:
    """When the worker last did stream work; every agent marks it. One per app, so that one
    agent's checkpoint also waits for the others' bursts (the forecast stage's inference runs
    after the upstream stages have gone quiet)."""

    def __init__(self) -> None:
        self.last = -math.inf

    def mark(self) -> None:
        self.last = time.monotonic()


class StateCache(Generic[S]):
    """An agent's decoded per-key states over its StateTable.

    `get` returns the decoded state while it is current (changed since the last checkpoint,
    or at the same source offset as the table's), so a state is decoded once, not per batch.
    `set` records a new state; `write` puts every changed one into the table.
    """

    def __init__(
        self,
        table: StateTable,
        decode: Callable[[bytes], S],
        encode: Callable[[S], bytes],
        new: Callable[[], S],
    ) -> None:
        self.table, self.decode, self.encode, self.new = table, decode, encode, new
        self.entries: dict[bytes, tuple[int, int, S]] = {}  # key -> partition, offset, state
        self.changed: set[bytes] = set()

    def get(self, key: bytes, partition: int) -> tuple[int, S]:
        """(offset of the last source event applied, state) of `key`, whose events come from
        source partition `partition`."""
        entry = self.entries.get(key)
        if entry is None or (key not in self.changed and entry[1] != self.table.offset(key)):
            offset, payload = self.table.get(key)
            state = self.new() if payload is None else self.decode(payload)
            entry = self.entries[key] = (partition, offset, state)
        return entry[1], entry[2]

    def set(self, key: bytes, partition: int, offset: int, state: S) -> None:
        self.entries[key] = (partition, offset, state)
        self.changed.add(key)

    def keys_in(self, partition: int) -> list[bytes]:
        """Keys with state from source partition `partition`: stored or changed since."""
        keys = self.table.keys_in(partition)
        keys += [key for key in self.changed if self.entries[key][0] == partition]
        return list(dict.fromkeys(keys))

    def write(self, owned: set[int] | None = None) -> None:
        """Put every changed state into the table; with `owned`, only the states of those
        source partitions, forgetting the others (no longer this worker's to write)."""
        for key in sorted(self.changed):
            partition, offset, state = self.entries[key]
            if owned is None or partition in owned:
                self.table.put(key, partition, offset, self.encode(state))
            else:
                del self.entries[key]
        self.changed.clear()


class Checkpointer:
    """Runs an agent's batches under one lock with its checkpoints (from a timer once the
    worker is quiet, or after a batch once too many events or too old ones are held).

    A checkpoint first awaits `before` (what must be durable ahead of the states: the
    one-agent pipeline drains its forecast stage there), then writes every cache's changed
    states, waits for the broker, and acks the held events."""

    def __init__(
        self,
        app: BarcastApp,
        topic: str,
        caches: Sequence[StateCache[Any]],
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.app, self.topic, self.caches, self.before = app, topic, caches, before
        self.offsets = OffsetGuard(app, topic)
        self.lock = asyncio.Lock()
        self.held: list[EventT] = []
        self.held_since = 0.0
        app.on_partitions_revoked.connect(self._on_revoked)

    async def run(
        self, events: Sequence[EventT], handle: Callable[[Sequence[EventT]], Awaitable[None]]
    ) -> None:
        """`handle` one take() batch, holding its events unacked until a checkpoint. Repeats
        the offset guard drops stay unacked: their first delivery is acked."""
        async with self.lock:
            for event in events:
                event.message.incref()  # take() acks once when done: this reference stays
            admitted = await self.offsets.admit(events)
            if admitted:
                if not self.held:
                    self.held_since = time.monotonic()
                self.held += admitted
                await handle(admitted)
                self.app.activity.mark()
            if self._due():
                await self._checkpoint(self._owned())

    def serve(self, name: str, handle: Callable[[Sequence[EventT]], Awaitable[None]]) -> None:
        """Register the agent `name` on this checkpointer's topic, running `handle` on each
        take() batch, and the timer that checkpoints it once the worker is quiet."""
        app = self.app

        @app.agent(raw_topic(app, self.topic), name=name)
        async def agent(stream):  # type: ignore[no-untyped-def]
            await each_batch(stream, lambda events: self.run(events, handle))

        @app.timer(TICK_S, name=f"{name}_checkpoint")
        async def checkpoint() -> None:
            await self.tick()

    async def tick(self) -> None:
        """Checkpoint from a timer (every `TICK_S`): how a quiet worker's events get committed."""
        if self._due():
            async with self.lock:
                if self.held:  # the agent may have checkpointed while we waited
                    await self._checkpoint(self._owned())

    def _due(self) -> bool:
        now = time.monotonic()
        return checkpoint_due(
            len(self.held),
            now - self.held_since,
            now - self.app.activity.last,
            self.app.barcast.checkpoint_max_s,
        )

    async def _checkpoint(self, owned: set[int] | None) -> None:
        if self.before is not None:
            await self.before()
        for cache in self.caches:
            cache.write(owned)
        await asyncio.gather(*(cache.table.flush() for cache in self.caches))
        held, self.held = self.held, []
        for event in held:
            event.ack()
        if held:
            self.app.metrics.checkpoints.inc()

    def _owned(self) -> set[int]:
        return {tp.partition for tp in self.app.consumer.assignment() if tp.topic == self.topic}

    async def _on_revoked(self, sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        """Before partitions move, checkpoint all: whoever owns them next recovers states as
        current as the outputs. (Events take() buffered before the rebalance may still come;
        they apply to those current states, and their states are written only for partitions
        this worker is assigned again.)"""
        if any(tp.topic == self.topic for tp in revoked):
            async with self.lock:
                await self._checkpoint(None)
