"""Per-symbol agent state in a Faust table, tagged with the source offset it reflects.

Agents publish a batch's outputs and wait for the broker's acks, then store state and wait for
that too, and only then let Faust commit the batch's offsets; they skip any event at or below
the stored offset. After a crash the recovered state is either current (its events are
skipped: their outputs are already out) or older (its events are processed again and produce
identical outputs, removed by key de-duplication), so a restart never double-applies a bar to
the state and never loses an output.

State records go out through a producer of their own, in explicit record batches per changelog
partition, and each partition's last record of a flush goes in a batch of its own. Faust
restores a table by reading its changelog up to the high watermark, and some Kafka-compatible
brokers (Tansu, the embedded one) report a partition's high watermark as the last *batch*'s base
offset + 1: a flush ending in a multi-record batch would make the restore stop short. A lone
last batch costs one extra batch per partition per flush, where a batch per record would cost
one broker round trip per record.
"""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faust.types import TableT

    from streams.faust_app import BarcastApp

_HEAD = struct.Struct("<qi")  # source offset, source partition
# One produce request carries a batch per partition: this bounds a request at partitions x this.
STATE_BATCH_BYTES = 256 * 1024
NO_OFFSET = -1


class StateTable:
    def __init__(self, app: BarcastApp, name: str) -> None:
        self.app = app
        self._unsent: list[tuple[int, bytes, bytes | None]] = []
        self.table: TableT = app.Table(
            name,
            key_type=bytes,
            value_type=bytes,  # bytes key and value types make Faust use the raw codec
            partitions=app.barcast.partitions,
        )

    def get(self, key: bytes) -> tuple[int, bytes | None]:
        """(offset of the last applied source event, state bytes), or (NO_OFFSET, None)."""
        stored = self.table.data.get(key)
        if stored is None:
            return NO_OFFSET, None
        return _HEAD.unpack_from(stored)[0], stored[_HEAD.size :]

    def offset(self, key: bytes) -> int:
        """Offset of the last source event applied to `key`'s stored state, or NO_OFFSET: it
        names that state exactly, so a decoded copy with the same offset can be reused."""
        stored = self.table.data.get(key)
        return NO_OFFSET if stored is None else _HEAD.unpack_from(stored)[0]

    def keys_in(self, partition: int) -> list[bytes]:
        """Keys whose source partition is `partition` (state this worker owns there)."""
        return [
            key
            for key, value in self.table.data.items()
            if _HEAD.unpack_from(value)[1] == partition
        ]

    def put(self, key: bytes, partition: int, offset: int, payload: bytes) -> None:
        """Store state for `key` in the changelog partition of its source partition, so the
        table stays co-partitioned with the topic whichever event happens to be current."""
        value = _HEAD.pack(offset, partition) + payload
        self.table.data[key] = value
        self._unsent.append((partition, key, value))

    def delete(self, key: bytes, partition: int) -> None:
        self.table.data.pop(key, None)
        self._unsent.append((partition, key, None))

    async def flush(self) -> None:
        """Send the states `put` since the last flush and wait until the broker has them."""
        unsent, self._unsent = self._unsent, []
        if not unsent:
            return
        producer = await self.app.batch_producer()
        topic = self.table.changelog_topic.get_topic_name()
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for partition, key, value in unsent:
            by_partition.setdefault(partition, []).append((key, value))
        pending = []
        for partition, records in by_partition.items():
            for batch in record_batches(producer, records):
                pending.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*pending)


def record_batches(producer: Any, records: list[tuple[bytes, bytes | None]]) -> list[Any]:
    """Record batches holding `records` in order, the last record alone in the last batch."""
    batches = [producer.create_batch()]
    for key, value in records[:-1]:
        if batches[-1].append(key=key, value=value, timestamp=None) is None:
            batches.append(producer.create_batch())
            batches[-1].append(key=key, value=value, timestamp=None)
    key, value = records[-1]
    lone = producer.create_batch()
    lone.append(key=key, value=value, timestamp=None)
    return [*(b for b in batches if b.record_count()), lone]
