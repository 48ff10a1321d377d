"""streams.agents.serve: an agent's committer learns when partitions move, from Faust's signals:
after a revoke of its topic's partitions no batch runs until the next assignment. Driven on a
stand-in for the app holding what `serve` uses of it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, NamedTuple

from streams.agents import serve
from streams.metrics import Metrics
from streams.runtime.commit import Committer, Runtime
from streams.settings import Settings


class TP(NamedTuple):
    topic: str
    partition: int


class Signal:
    """A Faust signal: `connect` as a decorator; `send` calls each receiver with the app."""

    def __init__(self) -> None:
        self.receivers: list[Callable[..., Any]] = []

    def connect(self, receiver: Callable[..., Any]) -> Callable[..., Any]:
        self.receivers.append(receiver)
        return receiver

    async def send(self, *args: Any) -> None:
        for receiver in self.receivers:
            await receiver(None, *args)


def app_for(runtime: Runtime) -> SimpleNamespace:
    def timer(seconds: float, name: str) -> Callable[[Any], Any]:
        return lambda function: function

    return SimpleNamespace(
        barcast=runtime.settings,
        runtime=runtime,
        sinks={},
        topics=set(),
        topic=lambda name, **kwargs: name,
        task=lambda function: function,
        timer=timer,
        on_partitions_revoked=Signal(),
        on_partitions_assigned=Signal(),
    )


def test_a_revoke_of_its_topic_stops_the_agents_batches_until_partitions_are_assigned() -> None:
    async def run() -> list[bool]:
        async def commit() -> None:
            pass

        runtime = Runtime(Settings(), Metrics(), "t", lambda topic: {0}, commit)
        committer = Committer(runtime, "bars.raw", [])
        app = app_for(runtime)

        async def handle(batch: list[Any]) -> None:
            pass

        serve(app, "pipeline", committer, handle)  # type: ignore[arg-type]
        moving = [committer.moving]
        await app.on_partitions_revoked.send({TP("other", 0)})
        moving.append(committer.moving)  # another topic's partitions: the agent runs on
        await app.on_partitions_revoked.send({TP("bars.raw", 0)})
        moving.append(committer.moving)
        await app.on_partitions_assigned.send({TP("bars.raw", 1)})
        moving.append(committer.moving)
        return moving

    assert asyncio.run(run()) == [False, False, True, False]
