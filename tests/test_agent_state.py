"""Agent state batches through the real broker: a flush of many records in a few batches must
end below the partition's high watermark, which is where Faust stops restoring a table."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, TopicPartition

from streams.agents.state import STATE_BATCH_BYTES, record_batches
from streams.kafka import aiokafka_config, ensure_topics
from streams.settings import Settings
from tests.kafka_io import read_topic


def test_a_flush_uses_few_batches_and_ends_with_a_lone_record() -> None:
    async def batch_sizes() -> list[int]:
        producer = AIOKafkaProducer(max_batch_size=STATE_BATCH_BYTES)  # not started: no I/O
        records = [(f"k{i}".encode(), bytes(4000)) for i in range(200)]
        return [b.record_count() for b in record_batches(producer, records)]

    sizes = asyncio.run(batch_sizes())
    assert sum(sizes) == 200
    assert sizes[-1] == 1
    assert len(sizes) == 5  # 199 records of ~4 kB in 256 kB batches, then the lone last one


def test_the_high_watermark_covers_every_record_of_a_flush(
    broker: str, broker_settings: Settings
) -> None:
    topic = f"{broker_settings.topic_raw}.state"
    ensure_topics(broker_settings, [topic], partitions=1)
    records = [(f"k{i}".encode(), i.to_bytes(4, "big") * 1000) for i in range(300)]

    async def flush() -> None:
        producer = AIOKafkaProducer(
            **aiokafka_config(broker_settings), acks="all", max_batch_size=STATE_BATCH_BYTES
        )
        await producer.start()
        try:
            batches = record_batches(producer, records)
            assert len(batches) > 2
            pending = [await producer.send_batch(b, topic, partition=0) for b in batches]
            await asyncio.gather(*pending)
        finally:
            await producer.stop()

    asyncio.run(flush())
    consumer = Consumer({"bootstrap.servers": broker, "group.id": topic})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, len(records))
    stored = read_topic(broker, topic, expected=len(records))
    assert [(m.key, m.value) for m in stored] == records
