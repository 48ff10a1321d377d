"""The ingest producer waits while librdkafka's queue is full, for every kind of record: a
replay at full speed keeps it full, and a broker down under live ingest fills it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from streams import schema
from streams.ingest.errors import DeliveryFailed
from streams.ingest.producer import BarProducer, producer_config
from streams.settings import Settings


class FullQueue:
    """A librdkafka producer whose queue is full for the next `full` messages."""

    def __init__(self, full: int) -> None:
        self.full, self.polls = full, 0
        self.produced: list[tuple[str, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes, **options: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("Local: Queue full")
        self.produced.append((topic, key))

    def poll(self, timeout_s: float) -> int:
        self.polls += 1
        return 0


def producer(queue: FullQueue) -> BarProducer:
    """A BarProducer of 2 partitions on `queue`, without a broker."""
    sink = object.__new__(BarProducer)
    sink.topic, sink.dead_letters, sink.partitions, sink.sent = "raw", "dlq", 2, 0
    sink.failed, sink._first_error, sink._stopping = 0, None, threading.Event()
    sink._dropping = False
    sink._producer = queue
    return sink


def test_every_kind_of_record_waits_for_room_in_the_queue() -> None:
    queue = FullQueue(full=3)
    sink = producer(queue)
    sink.send_bars([b"{}"], [b"ESU4"], [1])
    queue.full = 3
    sink.send_control(60 * 10**9)
    queue.full = 3
    sink.send_roll(schema.roll(60 * 10**9, "ES.c.0", "ESU4", "ESZ4", 1.01))
    queue.full = 3
    sink.send_dead_letter(b"ESU4", b"{}", 1, "unmapped_symbol", "no symbol names it")
    assert queue.produced == [
        ("raw", b"ESU4"),
        ("raw", schema.CONTROL_KEY),
        ("raw", schema.CONTROL_KEY),
        ("raw", b"ES.c.0"),
        ("dlq", b"ESU4"),
    ]
    assert sink.sent == 5 and queue.polls >= 12


def test_a_stop_while_the_queue_stays_full_fails_the_message_instead_of_waiting() -> None:
    """The broker down under live ingest: the queue never empties, and a SIGTERM that lands
    while a bar waits for room must still end the ingest (its flush, then exit 9)."""
    queue = FullQueue(full=1_000)  # for ever, as far as a fixed producer gets
    sink = producer(queue)
    queue.poll = lambda timeout_s: sink.stop_waiting()  # type: ignore[method-assign,assignment]
    sink.send_bars([b"{}"], [b"ESU4"], [1])
    queue.full = 0  # the broker back: a later message must fail still, leaving no hole
    sink.send_control(60 * 10**9)
    assert queue.produced == [] and sink.failed == 3
    with pytest.raises(DeliveryFailed, match=r"3 of 3 messages were not delivered.*broker down"):
        sink.check()


@pytest.mark.parametrize("limit", [65_536, 4_000_000])
def test_a_batch_is_no_larger_than_a_record_may_be(limit: int) -> None:
    """A broker's message.max.bytes bounds a whole record batch: replay's and live ingest's
    batches stay within BARCAST_MAX_RECORD_BYTES, as the worker's do."""
    config = producer_config(Settings(max_record_bytes=limit), linger_ms=5.0)
    assert config["batch.size"] == config["message.max.bytes"] == min(limit, 1_000_000)
