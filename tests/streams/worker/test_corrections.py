"""The corrections agent through the real broker and a real worker: every bar accounted for."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import orjson
import pandas as pd
import pytest

from features.corrections import Status, correct_history
from streams.kafka import ensure_topics, pipeline_topics
from streams.schema import DLQ_MESSAGE, DLQ_OFFSET, DLQ_REASON, DLQ_TOPIC
from streams.settings import Settings
from tests.bar_streams import faulty_stream
from tests.kafka_io import produce, read_topic
from tests.worker import Worker

pytestmark = pytest.mark.integration  # the embedded broker and real worker processes


def test_every_bar_is_accounted_for(broker_settings: Settings, sixe_bars: pd.DataFrame) -> None:
    settings = replace(broker_settings, role="corrections")
    ensure_topics(settings, pipeline_topics(settings))
    values = faulty_stream(sixe_bars, 1500)
    expected = correct_history(values)
    statuses = Counter(o.status for o in expected.outcomes)
    assert sum(statuses.values()) == len(values)
    assert statuses[Status.REJECTED] >= 30 and statuses[Status.DUPLICATE] >= 10

    produce(settings.broker, settings.topic_raw, [(b"6EH4", v) for v in values])
    non_duplicate = len(values) - statuses[Status.DUPLICATE]
    with Worker(settings):
        clean = read_topic(settings.broker, settings.topic_clean, len(expected.clean))
        dlq = read_topic(settings.broker, settings.topic_dlq, statuses[Status.REJECTED])
    real = [m for m in clean if orjson.loads(m.value)["status"] != "synthetic"]
    assert len(real) + len(dlq) == non_duplicate
    assert [orjson.loads(m.value) for m in clean] == expected.clean
    rejected = [o for o in expected.outcomes if o.status is Status.REJECTED]
    assert Counter(m.value for m in dlq) == Counter(
        o.value if isinstance(o.value, bytes) else orjson.dumps(o.value) for o in rejected
    )
    for message in dlq:
        assert message.headers[DLQ_TOPIC] == settings.topic_raw.encode()
        assert int(message.headers[DLQ_OFFSET]) >= 0
        assert message.headers[DLQ_REASON] and message.headers[DLQ_MESSAGE]
        assert message.key == b"6EH4"
