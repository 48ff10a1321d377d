"""The one Kafka producer behind replay and live ingest: librdkafka, tuned for throughput,
ordered per partition, honest about failed deliveries.

confluent-kafka's `Producer` queues a message without Python work and batches in C threads:
far more than a Python client (aiokafka) sustains. Idempotence keeps per-partition order across
retries; the murmur2 partitioner is the one Java clients, aiokafka and Faust use, so a symbol
lands on the same partition whoever produces it. Delivery reports are requested for failures
only, so success costs no Python callback.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from streams import schema
from streams.ingest.errors import BrokerDown, DeliveryFailed
from streams.kafka import (
    BrokerUnavailable,
    bootstrap_servers,
    confluent_config,
    ensure_topics,
    wait_for_metadata,
)
from streams.settings import Settings

log = logging.getLogger("barcast.ingest")

BAR_HEADERS = [(schema.KIND_HEADER, schema.Kind.BAR.value.encode())]
CONTROL_HEADERS = [(schema.KIND_HEADER, schema.Kind.CONTROL.value.encode())]
DELIVERY_TIMEOUT_S = 120.0
PRODUCER_TUNING: dict[str, Any] = {
    "enable.idempotence": True,
    "partitioner": "murmur2_random",
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "delivery.report.only.error": True,
}


def producer_config(
    settings: Settings, linger_ms: float, timeout_s: float | None = DELIVERY_TIMEOUT_S
) -> dict[str, Any]:
    """The producer configuration replay and live ingest use (and the benchmark's baseline):
    a message not delivered in `timeout_s` fails; None: it is retried until delivered."""
    timeout_ms = 0 if timeout_s is None else int(timeout_s * 1000)
    # a broker's message.max.bytes bounds a whole record batch, not one record
    limit = min(PRODUCER_TUNING["batch.size"], settings.max_record_bytes)
    sizes = {"batch.size": limit, "message.max.bytes": limit}
    timing = {"linger.ms": linger_ms, "message.timeout.ms": timeout_ms}
    return confluent_config(settings, **(PRODUCER_TUNING | sizes | timing))


class BarProducer:
    """Sends bars and control records to one topic, and with `dead_letters` the bars it cannot
    publish there to that topic; creates the topics if they are missing. A message not
    delivered within `timeout_s` fails (`check`); with None it waits for the broker, in the
    queue, however long it is down."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        linger_ms: float = 50.0,
        dead_letters: str | None = None,
        timeout_s: float | None = DELIVERY_TIMEOUT_S,
    ):
        from confluent_kafka import Producer

        self.topic = topic
        self.dead_letters = dead_letters
        self.failed = 0
        self.sent = 0
        self._first_error: str | None = None
        self._last_error: str | None = None
        self._stopping = threading.Event()
        self._dropping = False  # a message failed at the stop: so does every later one
        try:
            ensure_topics(settings, [topic] if dead_letters is None else [topic, dead_letters])
            topics = wait_for_metadata(
                bootstrap_servers(settings), settings.connect_timeout_s, settings
            )
        except BrokerUnavailable as exc:
            raise BrokerDown(str(exc)) from None
        except RuntimeError as exc:
            raise DeliveryFailed(str(exc)) from None
        self.partitions = topics.get(topic, settings.partitions)
        config = producer_config(settings, linger_ms, timeout_s)
        config["on_delivery"] = self._on_failure
        config["error_cb"] = self._on_error
        self._producer = Producer(config)

    def send_bars(self, values: list[bytes], keys: list[bytes], timestamps: list[int]) -> None:
        produce = self._producer.produce
        topic = self.topic
        for value, key, timestamp in zip(values, keys, timestamps, strict=True):
            try:
                produce(topic, value, key, timestamp=timestamp, headers=BAR_HEADERS)
            except BufferError:
                self._when_room(topic, value, key, timestamp=timestamp, headers=BAR_HEADERS)
        self.sent += len(values)
        self._producer.poll(0)

    def send_control(self, ts_event: int) -> None:
        """One END_OF_INTERVAL record per partition: every consumer sees the boundary, after
        every bar produced before it on its partition."""
        self._to_every_partition(schema.end_of_interval(ts_event))

    def send_outage(self, start: int, end: int) -> None:
        """One OUTAGE record per partition, between the bars before the span and those after."""
        self._to_every_partition(schema.outage(start, end))

    def send_roll(self, roll: schema.ControlRecord) -> None:
        """A ROLL record, keyed by its continuous symbol: on that symbol's partition, after
        the old contract's bars produced before it and before the new one's."""
        value, key = schema.encode(roll), schema.encode_key(roll["symbol"])
        timestamp = roll["ts_event"] // 1_000_000
        self._when_room(self.topic, value, key, timestamp=timestamp, headers=CONTROL_HEADERS)
        self.sent += 1
        self._producer.poll(0)

    def _to_every_partition(self, control: schema.ControlRecord) -> None:
        value, ts_event = schema.encode(control), control["ts_event"]
        for partition in range(self.partitions):
            self._when_room(
                self.topic,
                value,
                schema.CONTROL_KEY,
                partition=partition,
                timestamp=ts_event // 1_000_000,
                headers=CONTROL_HEADERS,
            )
        self.sent += self.partitions
        self._producer.poll(0)

    def send_dead_letter(
        self, key: bytes, value: bytes, timestamp: int, reason: str, message: str
    ) -> None:
        """A bar that could not go to `topic`, with Kafka Connect's dead-letter headers: the
        topic it was meant for, the reason code and why. It never reached a partition of that
        topic, so there is no source partition or offset."""
        if self.dead_letters is None:
            raise ValueError(f"BarProducer for {self.topic!r} was made without dead_letters")
        headers = [
            *BAR_HEADERS,
            (schema.DLQ_TOPIC, self.topic.encode()),
            (schema.DLQ_REASON, reason.encode()),
            (schema.DLQ_MESSAGE, message.encode()),
        ]
        self._when_room(self.dead_letters, value, key, timestamp=timestamp, headers=headers)
        self.sent += 1
        self._producer.poll(0)

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    def flush(self) -> int:
        """Wait for every queued message; return how many were not delivered (in total)."""
        remaining = self._producer.flush(DELIVERY_TIMEOUT_S + 5.0)
        self.failed += remaining
        return self.failed

    def check(self) -> None:
        if self.failed:
            raise DeliveryFailed(
                f"{self.failed} of {self.sent} messages were not delivered to {self.topic!r} "
                f"(first error: {self._first_error}); check the broker and rerun — downstream "
                f"de-duplicates by (symbol, ts_event, rtype), so re-sending is safe"
            )

    def stop_waiting(self) -> None:
        """A stop is under way: a message that finds the queue full fails (`check`) instead of
        waiting for room, which a broker that is down under live ingest never makes, and so
        does every message after it, so that the topic keeps no hole a restart would resume
        past. Safe to call from a signal handler."""
        self._stopping.set()

    def _when_room(self, topic: str, value: bytes, key: bytes, **options: Any) -> None:
        """Produce, waiting while the queue is full (a replay at full speed fills it, and so
        does a broker that is down under live ingest) instead of failing on BufferError."""
        while not self._dropping:
            try:
                self._producer.produce(topic, value, key, **options)
                return
            except BufferError:
                if self._stopping.is_set():
                    self._dropping = True
                else:
                    self._producer.poll(0.05)
        self._on_failure("the queue was full at the stop: is the broker down?", None)

    def _on_failure(self, err: Any, _msg: Any) -> None:
        self.failed += 1
        if self._first_error is None:
            self._first_error = str(err)

    def _on_error(self, err: Any) -> None:
        # librdkafka retries on its own; say so once per distinct error, not once a second.
        text = str(err)
        if text != self._last_error:
            self._last_error = text
            log.warning("kafka: %s", text)
