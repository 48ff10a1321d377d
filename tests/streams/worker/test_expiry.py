"""A symbol's expiry through the real broker and real stream workers: the EXPIRED record reaches
`bars.clean` and `features` in its place, and the stores keep it across restarts. A worker
stores the symbol's states, the next drops them (its expiry) and the one after restores none of
them, so together they publish, record for record, what the stages publish never stopped
(tests/streams/runtime/stages/test_expiry.py: the symbol's bars after its return computed as a
new symbol's; tests/streams/runtime/test_stores.py: a deletion written by a flush never
committed is not restored)."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import pandas as pd
import pytest
from confluent_kafka import Producer

from streams.kafka import ensure_topics, pipeline_topics
from streams.runtime.records import Record
from streams.settings import Settings
from tests.kafka_io import read_topic
from tests.streams.runtime.stages.test_expiry import CUT, EXPIRE_DAYS, GONE, stages, stream
from tests.streams.runtime.test_stores import MemoryChangelogs
from tests.topic_logs import wait_for_metric
from tests.worker import Worker

pytestmark = pytest.mark.integration
# Records: to A's last bar before it goes, to past its expiry (before its return), to the end
CUTS = (3 * GONE, CUT)
EXPIRED = b'"control":"expired"'
TOPICS = ("bars.clean", "features")  # as the stages name them


def produce_records(settings: Settings, records: list[Record]) -> None:
    """`records` onto the raw topic, each with its own headers (a control record's)."""
    producer = Producer({"bootstrap.servers": settings.broker, "linger.ms": 5})
    for r in records:
        producer.produce(settings.topic_raw, r.value, r.key, headers=r.headers or None)
    assert producer.flush(30) == 0


def unstopped(records: list[Record]) -> dict[str, list[bytes]]:
    """What the stages publish on `bars.clean` and `features` for `records`, never stopped."""
    pipeline = stages(MemoryChangelogs())
    assert pipeline.corrections is not None and pipeline.features is not None
    cleaned = pipeline.corrections.run(records, time.time_ns())
    outputs = cleaned.outputs + pipeline.features.run(cleaned.items).outputs
    return {topic: [o.value for o in outputs if o.topic == topic] for topic in TOPICS}


def test_restarted_workers_restore_none_of_an_expired_symbols_state(
    broker_settings: Settings, sixe_bars: pd.DataFrame
) -> None:
    settings = replace(
        broker_settings, role="stream", partitions=1, checkpoint_max_s=0.5, expire_days=EXPIRE_DAYS
    )
    ensure_topics(settings, pipeline_topics(settings))
    records = stream(sixe_bars)
    expected = unstopped(records)
    bounds = (0, *CUTS, len(records))
    for start, end in itertools.pairwise(bounds):  # each part through its own worker
        produce_records(settings, records[start:end])
        worker = Worker(settings, f"to-{end}").start()
        done = len(unstopped(records[:end])["features"])
        assert len(read_topic(settings.broker, settings.topic_features, done)) == done
        if end == CUT:  # this worker expired A
            wait_for_metric(worker, "barcast_expired_total", 1)
        assert worker.stop() == 0  # a stop commits what it published: nothing is repeated
    for name, topic in zip(TOPICS, (settings.topic_clean, settings.topic_features), strict=True):
        values = [m.value for m in read_topic(settings.broker, topic, len(expected[name]))]
        assert sum(EXPIRED in v for v in values) == 1, name
        assert values == expected[name], name
