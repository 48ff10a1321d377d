"""What integration tests read back from barcast's topics, and the worker events they wait for.

A `TopicLog` reads one topic incrementally with a plain librdkafka consumer and keeps one value
per de-duplication key; a repeated key must carry byte-identical bytes ("a restart may repeat an
output, never change one") and must be what its topic's JSON Schema says. `wait_for_metric`
polls a worker's `/metrics`: the kill points of restart tests are such observed events, never
a time. `read_all` reads a topic to its end, known from the broker, not from a quiet spell.
Every wait fails at once when a worker of the test has exited for good (`check_workers`).
"""

from __future__ import annotations

import time
import urllib.error

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from streams.kafka import wait_for_metadata
from streams.process import WorkerProcess
from streams.schema import DLQ_OFFSET, DLQ_PARTITION, DLQ_TOPIC
from streams.tools.stats_cli import default_url, scrape
from tests.kafka_io import Message, check_message, read_topic
from tests.worker import Worker, check_workers


class TopicLog:
    """Everything published to one topic so far: value per key, and every key seen again."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "tests", "enable.auto.commit": False}
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self.bootstrap, self.topic = bootstrap, topic
        self.messages = 0
        self.next: dict[int, int] = {}  # partition: the offset after the last message read
        self.values: dict[tuple[object, ...], bytes] = {}
        self.headers: dict[tuple[object, ...], dict[str, bytes]] = {}
        self.repeats: list[tuple[object, ...]] = []

    def key(self, key: bytes | None, value: bytes, headers: dict[str, bytes]) -> tuple[object, ...]:
        raise NotImplementedError

    def identity(self, value: bytes) -> bytes:
        """What a repeat of a key must repeat exactly: here every byte of the value."""
        return value

    def read_until(self, done: int, timeout_s: float = 120.0) -> int:
        """Read until `done` distinct keys are in (or the timeout); return how many are."""
        deadline = time.monotonic() + timeout_s
        while len(self.values) < done and time.monotonic() < deadline:
            self._consume()
        return len(self.values)

    def read_to_end(self, timeout_s: float = 60.0) -> int:
        """Read everything the topic holds now, its writers gone (a killed worker publishes
        nothing more): up to the ends a read of the whole topic finds. Return the distinct keys."""
        ends = {p: end for p, (_, end) in topic_ends(self.bootstrap, self.topic).items()}
        deadline = time.monotonic() + timeout_s
        while any(self.next.get(p, 0) < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"{self.topic}: not read to {ends} in {timeout_s}s"
            self._consume()
        return len(self.values)

    def _consume(self) -> None:
        check_workers()  # a dead worker publishes nothing more: fail now, not at the timeout
        for msg in self.consumer.consume(10000, timeout=0.2):
            if msg.error():
                continue
            self.messages += 1
            self.next[msg.partition()] = msg.offset() + 1
            value, headers = msg.value(), dict(msg.headers() or [])
            check_message(self.topic, value, headers)
            key = self.key(msg.key(), value, headers)
            if key in self.values:
                first = self.identity(self.values[key])
                assert first == self.identity(value), f"{self.topic}: {key} changed:\n{value!r}"
                self.repeats.append(key)
            else:
                self.values[key] = value
                self.headers[key] = headers

    def close(self) -> None:
        self.consumer.close()


class CleanLog(TopicLog):
    def key(self, key: bytes | None, value: bytes, headers: dict[str, bytes]) -> tuple[object, ...]:
        bar = orjson.loads(value)
        return bar["symbol"], bar["ts_event"], bar["rtype"]


class DeadLetterLog(TopicLog):
    def key(self, key: bytes | None, value: bytes, headers: dict[str, bytes]) -> tuple[object, ...]:
        return headers[DLQ_TOPIC], int(headers[DLQ_PARTITION]), int(headers[DLQ_OFFSET])


class FeatureLog(TopicLog):
    def key(self, key: bytes | None, value: bytes, headers: dict[str, bytes]) -> tuple[object, ...]:
        row = orjson.loads(value)
        return row["symbol"], row["ts_event"]


class ForecastLog(TopicLog):
    """Forecasts by (symbol, ts_event, model_id). `batch_size` and `latency_ms` describe one
    delivery (which micro-batch, how long after the bar arrived), so a repeat must carry every
    byte of the value but those two fields."""

    DELIVERY = ("batch_size", "latency_ms")

    def key(self, key: bytes | None, value: bytes, headers: dict[str, bytes]) -> tuple[object, ...]:
        forecast = orjson.loads(value)
        return forecast["symbol"], forecast["ts_event"], forecast["model_id"]

    def identity(self, value: bytes) -> bytes:
        forecast = orjson.loads(value)
        for name in self.DELIVERY:
            del forecast[name]
        return orjson.dumps(forecast)


class ScoreLog(TopicLog):
    """Scores by (symbol, ts_event): a repeat must carry every byte of the value."""

    def key(self, key: bytes | None, value: bytes, headers: dict[str, bytes]) -> tuple[object, ...]:
        score = orjson.loads(value)
        return score["symbol"], score["ts_event"]


def metric(worker: WorkerProcess, name: str) -> float | None:
    """The value of an unlabelled sample on the worker's `/metrics`, None if not served (yet)."""
    try:
        text = scrape(default_url(worker.settings), timeout_s=5.0)
    except (urllib.error.URLError, OSError):
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return sample.value
    return None


def wait_for_metric(
    worker: WorkerProcess, name: str, at_least: float, timeout_s: float = 120.0
) -> float:
    """Poll `/metrics` until `name` reaches `at_least`; fail with the worker's log if not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = metric(worker, name)
        if value is not None and value >= at_least:
            return value
        check_workers()
        if not isinstance(worker, Worker):  # a Worker's /metrics may be down for a restart
            alive = worker.process is not None and worker.process.poll() is None
            assert alive, worker.log()[-5000:]
        time.sleep(0.1)
    raise AssertionError(
        f"{name} never reached {at_least} in {timeout_s}s:\n{worker.log()[-5000:]}"
    )


def topic_ends(bootstrap: str, topic: str, timeout_s: float = 60.0) -> dict[int, tuple[int, int]]:
    """Per partition of `topic`: how many messages it holds and the offset after its last,
    read to the end of every partition. The end is librdkafka's partition EOF, not the high
    watermark: the embedded broker reports that as its last batch's first offset + 1, but the
    consumer reaches it only past the whole batch."""
    partitions = wait_for_metadata(bootstrap, 10).get(topic)
    if partitions is None:
        return {}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-size",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    ends, ended = dict.fromkeys(range(partitions), (0, 0)), set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"{topic}: no end of partitions {ended} seen"
            for msg in consumer.consume(10000, timeout=0.2):
                error = msg.error()
                if error is None:
                    ends[msg.partition()] = (ends[msg.partition()][0] + 1, msg.offset() + 1)
                elif error.code() == KafkaError._PARTITION_EOF:
                    ended.add(msg.partition())
    finally:
        consumer.close()
    return ends


def read_all(bootstrap: str, topic: str) -> list[Message]:
    """Every message of a topic nothing writes to any more (its producers flushed or gone)."""
    return read_topic(bootstrap, topic, sum(n for n, _ in topic_ends(bootstrap, topic).values()))
