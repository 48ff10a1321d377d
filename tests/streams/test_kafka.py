"""streams.kafka's reads of a topic's end, through the real broker."""

from __future__ import annotations

import pytest

from streams.kafka import ensure_topics, newest_values, tail_values
from streams.settings import Settings
from tests.kafka_io import produce


@pytest.mark.integration
def test_a_topics_tail_holds_each_partitions_last_records_in_order(
    broker_settings: Settings,
) -> None:
    """Records sent one produce request each (the broker's last offset is its last batch's
    start): the tail of 3 ends with the last three, the newest is the last."""
    topic = broker_settings.topic_raw
    ensure_topics(broker_settings, [topic])
    values = [f"v{i}".encode() for i in range(6)]
    for value in values:
        produce(broker_settings.broker, topic, [(b"k", value)])
    [(partition, tail)] = tail_values(broker_settings, topic, 3).items()
    assert len(tail) >= 3 and tail == values[-len(tail) :]
    assert newest_values(broker_settings, topic) == {partition: values[-1]}
    assert tail_values(broker_settings, "no-such-topic", 3) == {}
