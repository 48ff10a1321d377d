"""The corrections agent through the real broker and a real worker: every bar accounted for."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import orjson
import pandas as pd

from streams.agents.corrections import DLQ_MESSAGE, DLQ_OFFSET, DLQ_REASON, DLQ_TOPIC
from streams.corrections import Status, bars_from_frame, correct_history
from streams.kafka import ensure_topics, pipeline_topics
from streams.schema import UNDEF_PRICE
from streams.settings import Settings
from tests.kafka_io import produce, read_topic
from tests.worker import Worker


def faulty_stream(bars: pd.DataFrame, n: int, seed: int = 7) -> list[bytes]:
    """n real 6EH4 bars with every kind of fault mixed in, as `bars.raw` values."""
    rng = random.Random(seed)
    clean = bars_from_frame(bars.iloc[:n], symbol="6EH4", instrument_id=42005804, source="test")
    out: list[bytes] = []
    for i, bar in enumerate(clean):
        out.append(orjson.dumps(bar))
        kind = i % 97
        if kind == 10:
            out.append(orjson.dumps(bar))  # identical duplicate
        elif kind == 20:
            out.append(orjson.dumps({**bar, "volume": bar["volume"] + 1}))  # conflicting
        elif kind == 30 and i > 5:
            out.append(orjson.dumps(clean[i - 3]))  # replayed old bar
        elif kind == 40:
            out.append(b"not json at all")
        elif kind == 50:
            out.append(orjson.dumps({k: v for k, v in bar.items() if k != "close"}))
    # Faults on the bar itself: undefined high, inverted envelope, mis-scaled prices.
    for i in rng.sample(range(100, len(out) - 1), 12):
        bar = orjson.loads(out[i])
        if not isinstance(bar, dict) or "close" not in bar:
            continue
        fault = rng.choice(["undef", "envelope", "scale"])
        if fault == "undef":
            bar["high"] = UNDEF_PRICE
        elif fault == "envelope":
            bar["high"], bar["low"] = bar["low"], bar["high"]
        else:
            bar = {**bar, **{f: bar[f] * 10 for f in ("open", "high", "low", "close")}}
        out[i] = orjson.dumps(bar)
    return out


def test_every_bar_is_accounted_for(broker_settings: Settings, sixe_bars: pd.DataFrame) -> None:
    settings = replace(broker_settings, role="stream")
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
