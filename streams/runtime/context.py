"""What every part of the runtime shares within one worker; the Faust app builds it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streams.runtime.checkpoint import Activity
from streams.runtime.kafka_io import BatchProducer, KafkaChangelogs
from streams.runtime.observers import Observer
from streams.runtime.policy import publishable
from streams.runtime.records import Out
from streams.runtime.stores import Changelog

if TYPE_CHECKING:
    from streams.metrics import Metrics
    from streams.settings import Settings


@dataclass
class Runtime:
    settings: Settings
    metrics: Metrics
    group: str  # the consumer group: its committed offsets are where stores restore to
    assigned: Callable[[str], set[int]]  # a topic's partitions assigned to this worker
    commit: Callable[[], Awaitable[object]]  # commit the acked offsets now
    activity: Activity = field(default_factory=Activity)
    observers: list[Observer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.producer = BatchProducer(self.settings)
        self.changelogs = KafkaChangelogs(self.settings, self.producer)

    def changelog(self, name: str) -> Changelog:
        """The changelog of the store `name` (topic `<group>-<name>-changelog`)."""
        return Changelog(f"{self.group}-{name}-changelog", self.changelogs)

    async def send(self, records: Sequence[Out]) -> list[asyncio.Future]:
        """Hand `records` to the producer, each one too large replaced by its bounded dead
        letter (streams.runtime.policy); the futures complete on the broker's acks."""
        settings = self.settings
        bounded = publishable(records, settings.max_record_bytes, settings.topic_dlq, self.metrics)
        return await self.producer.send(bounded)
