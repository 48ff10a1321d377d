"""Plain librdkafka producers and consumers for tests: no barcast code on the test's side. Every
message read from a barcast topic is checked against the topic's JSON Schema, read from
deploy/schemas/topics/ (the published contract), and a dead letter's headers by their decoder."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import jsonschema_rs
import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streams.kafka import wait_for_metadata
from streams.schema import decode_dlq_headers
from tests.worker import check_workers

SCHEMAS = Path(__file__).resolve().parent.parent / "deploy" / "schemas" / "topics"
TOPICS = (
    "bars.raw",
    "bars.clean",
    "bars.dlq",
    "features",
    "forecasts",
    "forecasts.scores",
    "forecasts.explain",
)


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    headers: list[tuple[str, bytes]] | None = None,
) -> int:
    # murmur2 is what Java clients, aiokafka and Faust use: same key, same partition.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    count = 0
    for key, value in records:
        producer.produce(topic, value=value, key=key, headers=headers)
        count += 1
        if count % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages not delivered to {topic}"
    return count


def read_topic(
    bootstrap: str,
    topic: str,
    expected: int | None = None,
    timeout_s: float = 60.0,
    idle_s: float = 3.0,
) -> list[Message]:
    """Every message of `topic` from the beginning: until `expected` arrived (or the timeout),
    or, with no expectation, until the topic has been idle for `idle_s`."""
    partitions = wait_for_metadata(bootstrap, 10).get(topic)
    if partitions is None:
        return []
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "tests-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            if expected is not None and len(out) >= expected:
                break
            if expected is None and time.monotonic() - last > idle_s:
                break
            check_workers()  # a dead worker publishes nothing more: fail now, not at the timeout
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            last = time.monotonic()
            check_message(topic, msg.value(), dict(msg.headers() or []))
            out.append(
                Message(
                    msg.topic(),
                    msg.partition(),
                    msg.offset(),
                    msg.timestamp()[1],
                    msg.key(),
                    msg.value(),
                    dict(msg.headers() or []),
                )
            )
    finally:
        consumer.close()
    return out


@functools.cache
def compiled_validator(kind: str) -> jsonschema_rs.Draft202012Validator:
    """The topic's schema compiled (jsonschema-rs): the integration tests check every message
    they read back, tens of thousands a run, too many for the reference validator (jsonschema)
    to check in good time; test_schema shows the two agree."""
    return jsonschema_rs.Draft202012Validator(json.loads((SCHEMAS / f"{kind}.json").read_text()))


def topic_kind(topic: str) -> str | None:
    """Which barcast topic `topic` is (tests suffix the default names), None for another (a
    changelog, a test's own topic)."""
    for kind in sorted(TOPICS, key=len, reverse=True):  # longest name first: forecasts.scores
        if topic == kind or (topic.startswith(f"{kind}.") and "." not in topic[len(kind) + 1 :]):
            return kind
    return None


def check_message(topic: str, value: bytes | None, headers: dict[str, bytes]) -> None:
    """Fail unless a message read from a barcast topic is what its schema says: the value
    against the topic's JSON Schema (deploy/schemas/topics/), a dead letter's headers."""
    kind = topic_kind(topic)
    if kind is None:
        return
    if kind == "bars.dlq":
        decode_dlq_headers(headers)
        return
    assert value is not None, f"{topic}: a message without a value"
    compiled_validator(kind).validate(orjson.loads(value))
