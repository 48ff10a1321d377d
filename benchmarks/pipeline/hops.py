"""Each Kafka hop of a live forecast, probed alone on the benchmark's broker.

A live forecast crosses the broker twice: the bar from the client's producer to the worker's
consumer (aiokafka, fetches held up to `BARCAST_FETCH_MAX_WAIT_MS`), the forecast from the
worker's producer to the client's consumer (confluent-kafka, the collector's own fetch wait).
`probe` times single records, one at a time, over each of those two client pairs on a topic of
its own; the worker's share is its own `latency_ms` (receipt -> publish). Client latency minus
the worker's and the two hops is what is left: the client's own threads and the worker's
consuming and producing around its measured span.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from streams.kafka import aiokafka_config, confluent_config, ensure_topics
from streams.settings import Settings

TOPIC = "bench-hop-probe"
SAMPLES = 30
GAP_S = 0.05  # between samples, so that each record meets an idle, waiting fetch


def probe(settings: Settings, client_fetch_wait_ms: int) -> dict[str, Any]:
    """p50/p99 (ms) of produce -> consume for the bar hop and for the forecast hop."""
    ensure_topics(settings, [TOPIC], partitions=1)
    to_worker = asyncio.run(_aiokafka_hop(settings, settings.fetch_max_wait_ms))
    to_client = _confluent_hop(settings, client_fetch_wait_ms)
    return {
        "bar_to_worker": _summary(to_worker) | {"fetch_max_wait_ms": settings.fetch_max_wait_ms},
        "forecast_to_client": _summary(to_client) | {"fetch_max_wait_ms": client_fetch_wait_ms},
    }


def _summary(ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
    }


async def _aiokafka_hop(settings: Settings, fetch_wait_ms: int) -> list[float]:
    """The client's producer (librdkafka, linger 0, as `BarProducer` live) -> the worker's kind
    of consumer."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition
    from confluent_kafka import Producer

    consumer = AIOKafkaConsumer(
        **aiokafka_config(settings), fetch_max_wait_ms=fetch_wait_ms, enable_auto_commit=False
    )
    await consumer.start()
    partition = TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    await consumer.seek_to_end(partition)
    producer = Producer(confluent_config(settings, **{"linger.ms": 0}))
    times = []
    try:
        for _ in range(SAMPLES):
            sent = time.perf_counter()
            producer.produce(TOPIC, b"bar", partition=0)
            producer.poll(0)
            await consumer.getone()
            times.append((time.perf_counter() - sent) * 1000)
            await asyncio.sleep(GAP_S)
    finally:
        producer.flush()
        await consumer.stop()
    return times


def _confluent_hop(settings: Settings, fetch_wait_ms: int) -> list[float]:
    """The worker's kind of producer (aiokafka, linger 0, acks all) -> the collector's kind of
    consumer (poll for the first record, as `ForecastCollector`)."""
    from aiokafka import AIOKafkaProducer
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    config = {"group.id": f"probe-{time.time_ns()}", "fetch.wait.max.ms": fetch_wait_ms}
    consumer = Consumer(confluent_config(settings, **config))
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_END)])

    def receive() -> None:  # in a thread: the producer's sends need the event loop
        while consumer.poll(0.5) is None:
            pass

    async def send_all() -> list[float]:
        producer = AIOKafkaProducer(**aiokafka_config(settings), acks="all", linger_ms=0)
        await producer.start()
        times = []
        try:
            consumer.poll(1.0)  # joins the partition at its end
            for _ in range(SAMPLES):
                sent = time.perf_counter()
                received = asyncio.ensure_future(asyncio.to_thread(receive))
                await producer.send(TOPIC, b"forecast", partition=0)
                await received
                times.append((time.perf_counter() - sent) * 1000)
                await asyncio.sleep(GAP_S)
        finally:
            await producer.stop()
        return times

    try:
        return asyncio.run(send_all())
    finally:
        consumer.close()
