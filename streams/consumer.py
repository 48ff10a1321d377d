"""The worker's Faust consumer: each fetched batch of an agent's topic goes to the agent at once.

Faust hands an agent a record at a time: per record it races the delivery against flow control
in two new tasks, makes an event, queues it on the agent's channel and takes it off again in the
agent's stream. At a minute boundary, when every symbol's bar arrives at once, that per-record
path costs the event loop more than the corrections and features of the record. Here the
records of an agent's topic (a sink in the app's `sinks`) skip it: those of one fetch are handed to
the topic's sink in one list, in offset order per partition. Records of any other topic take
Faust's path. The records' offsets are acked to Faust once committed (`Delivered`), so Faust
commits the consumer group's offsets as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.internals import InternalsMoved, check_drain_internals
from streams.runtime.policy import exit_uncommitted

Sink = Callable[[list[Any]], Awaitable[None]]  # an agent's topic: a fetch's Faust messages


class Delivered:
    """A record handed to a sink, acked to the consumer at its commit (records.Ackable)."""

    __slots__ = ("consumer", "message")

    def __init__(self, consumer: Any, message: Any) -> None:
        self.consumer, self.message = consumer, message

    def ack(self) -> bool:
        return bool(self.message.ack(self.consumer))


class BatchConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer, whose fetch loop hands records on in batches to the sinks of
    the app (`BarcastApp.sinks`: topic -> sink, set as the agents are)."""

    async def _drain_messages(self, fetcher: Any) -> None:
        """The fetch loop: each fetch's records of a sink's topic to the sink, after the others
        went Faust's way. As in Faust's loop: a record before the partition's read offset was
        passed on already, and offsets skipped (no record there, as after compaction) are told
        to Faust so that its commits pass them. (The agents' offset guard, streams.runtime.commit,
        drops a record passed on twice.)"""
        try:
            check_drain_internals(self)
        except InternalsMoved as exc:  # loudly, as for the fetch wait: exit 70
            exit_uncommitted("cannot pass fetched records on in batches", exc)
        sinks: dict[str, Sink] = self.app.sinks
        try:
            while not (self.should_stop or fetcher.should_stop):
                batches: dict[str, list[Any]] = {}
                async for tp, message in self.getmany(timeout=1.0):
                    read = self._read_offset[tp]  # Faust's: the last passed on, or sought to
                    if read is not None and message.offset < read:
                        continue
                    skipped = read is not None and message.offset > read + 1
                    if skipped and self.app.topics.acks_enabled_for(tp.topic):
                        await self._add_gap(tp, read + 1, message.offset)
                    if tp.topic in sinks:
                        batches.setdefault(tp.topic, []).append(message)
                    else:
                        await self.wait_first(self.callback(message), self.suspend_flow.wait())
                    self._read_offset[tp] = message.offset
                for topic, messages in batches.items():
                    await sinks[topic](messages)
                await self.sleep(0)  # a fetch that returns at once must not starve the loop
        except (asyncio.CancelledError, *self.consumer_stopped_errors):
            if not self.transport.app.should_stop:  # else the worker is stopping: done
                raise


class BatchTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport, with the consumer above."""

    Consumer = BatchConsumer
