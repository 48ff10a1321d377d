"""streams.consumer: the fetch loop hands each fetch's records of an agent's topic to its sink in
one list, in order; records of other topics take Faust's path; a record before the read offset is
not passed on again; offsets a fetch skipped are told to Faust as a gap, so its commits pass
them. Driven on a stand-in for Faust's consumer holding the internals the loop uses
(streams.internals.DRAIN); the worker tests run it under Faust through the broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from types import SimpleNamespace
from typing import Any, NamedTuple

from streams.consumer import BatchConsumer


class TP(NamedTuple):
    topic: str
    partition: int


class Message(NamedTuple):
    topic: str
    offset: int


RAW, OTHER = TP("bars.raw", 0), TP("other", 0)


class FakeConsumer:
    """What `BatchConsumer._drain_messages` reads and calls of Faust's consumer."""

    def __init__(self, fetches: list[list[tuple[TP, Message]]], read: dict[TP, int | None]):
        self.fetches, self._read_offset = fetches, dict(read)
        self.should_stop = False
        self.handed: list[list[Message]] = []  # each call of the sink
        self.faust: list[Message] = []  # Faust's per-record path
        self.gaps: list[tuple[TP, int, int]] = []

        async def sink(messages: list[Message]) -> None:
            self.handed.append(messages)

        acks = SimpleNamespace(acks_enabled_for=lambda topic: True)
        self.app = SimpleNamespace(sinks={RAW.topic: sink}, topics=acks)
        self.transport = SimpleNamespace(app=SimpleNamespace(should_stop=False))
        self.consumer_stopped_errors = ()
        self.suspend_flow = asyncio.Event()

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        fetch = self.fetches.pop(0)
        self.should_stop = not self.fetches  # the last fetch: the loop ends after it
        for item in fetch:
            yield item

    async def _add_gap(self, tp: TP, start: int, end: int) -> None:
        self.gaps.append((tp, start, end))

    async def callback(self, message: Message) -> None:
        self.faust.append(message)

    async def wait_first(self, first: Coroutine[Any, Any, None], other: Coroutine) -> None:
        other.close()
        await first

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def drain(consumer: FakeConsumer) -> None:
    fetcher = SimpleNamespace(should_stop=False)
    asyncio.run(BatchConsumer._drain_messages(consumer, fetcher))  # type: ignore[arg-type]


def test_each_fetch_goes_to_the_sink_in_one_list_and_other_topics_take_fausts_path() -> None:
    raw = [Message(RAW.topic, offset) for offset in range(5)]
    other = Message(OTHER.topic, 7)
    fetches = [[(RAW, raw[0]), (OTHER, other), (RAW, raw[1])], [(RAW, m) for m in raw[2:]]]
    consumer = FakeConsumer(fetches, {RAW: None, OTHER: 6})
    drain(consumer)
    assert consumer.handed == [raw[:2], raw[2:]]
    assert consumer.faust == [other]
    assert consumer._read_offset == {RAW: 4, OTHER: 7}
    assert consumer.gaps == []


def test_a_record_before_the_read_offset_is_not_passed_on_again() -> None:
    """One at the read offset is, as in Faust's loop: the offset may be one sought to, not
    passed on yet (the agents' offset guard drops a second delivery)."""
    raw = [Message(RAW.topic, offset) for offset in range(2, 7)]
    consumer = FakeConsumer([[(RAW, m) for m in raw]], {RAW: 4})
    drain(consumer)
    assert consumer.handed == [raw[2:]]  # 2 and 3 were passed on before
    assert consumer._read_offset[RAW] == 6


def test_offsets_a_fetch_skipped_are_told_to_faust_as_a_gap() -> None:
    """As after compaction: no record at offsets 5 to 8, nor at 10."""
    raw = [Message(RAW.topic, offset) for offset in (4, 9, 11)]
    consumer = FakeConsumer([[(RAW, m) for m in raw]], {RAW: 3})
    drain(consumer)
    assert consumer.handed == [raw]
    assert consumer.gaps == [(RAW, 5, 9), (RAW, 10, 11)]
