"""What integration tests read back from barcast's topics, and the worker events they wait for.

A `TopicLog` reads one topic incrementally with a plain librdkafka consumer and keeps one value
per de-duplication key; a repeated key must carry byte-identical bytes ("a restart may repeat an
output, never change one") and must be what its topic's JSON Schema says. `wait_for_metric`
polls a worker's `/metrics`: the kill points of restart tests are such observed events, never
a time.
"""

from __future__ import annotations

import time
import urllib.error

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from streams.process import WorkerProcess
from streams.schema import DLQ_OFFSET, DLQ_PARTITION, DLQ_TOPIC
from streams.stats_cli import default_url, scrape
from tests.kafka_io import check_message


class TopicLog:
    """Everything published to one topic so far: value per key, and every key seen again."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "tests", "enable.auto.commit": False}
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self.topic = topic
        self.messages = 0
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
            for msg in self.consumer.consume(10000, timeout=0.2):
                if msg.error():
                    continue
                self.messages += 1
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
        return len(self.values)

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
        assert worker.process is not None and worker.process.poll() is None, worker.log()[-5000:]
        time.sleep(0.1)
    raise AssertionError(
        f"{name} never reached {at_least} in {timeout_s}s:\n{worker.log()[-5000:]}"
    )
