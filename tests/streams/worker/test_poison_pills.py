"""Poison pills through the real broker and real worker processes: one oversized record and one
record of each kind of malformation, interleaved with real bars. The worker stays up, every
real bar reaches bars.clean and features, every bad record is in bars.dlq with its reason, and
the same holds after a SIGKILL (at an observed checkpoint) and a restart that meets them again.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import replace

import orjson
import pandas as pd
import pytest
from confluent_kafka import Producer

from features.corrections import Status, bars_from_frame, correct_history
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import forecast_history
from streams.ingest.producer import BarProducer
from streams.kafka import ensure_topics, pipeline_topics
from streams.runtime.policy import KEPT_BYTES, NULL_VALUE_HEADER, SHA256_HEADER, TRUNCATED_HEADER
from streams.schema import DLQ_MESSAGE, DLQ_REASON, DLQ_TOPIC
from streams.settings import Settings
from tests.bar_streams import expected_features
from tests.checkpoints import make_checkpoint
from tests.kafka_io import produce
from tests.streams.runtime.test_policy import feature_message
from tests.streams.worker.test_forecasts import assert_matches
from tests.topic_logs import (
    CleanLog,
    DeadLetterLog,
    FeatureLog,
    ForecastLog,
    metric,
    wait_for_metric,
)
from tests.worker import Worker

pytestmark = pytest.mark.integration
SYMBOLS = ("6EH4", "6EM4")
BARS = 400  # per symbol; bad records go in after every 40th bar of the first symbol
OVERSIZED_BYTES = 1_100_000  # over the default BARCAST_MAX_RECORD_BYTES: its DLQ copy is cut


def poison(bar: dict, i: int) -> list[tuple[bytes, str]]:
    """Bad records (value, expected reason) placed just before `bar`, the i-th of its symbol."""
    kinds = [
        (orjson.dumps({**bar, "note": "x" * OVERSIZED_BYTES}), "oversized"),
        (b"\xff\xfe\x00 not utf-8", "malformed"),
        (orjson.dumps(bar)[:40], "malformed"),  # truncated JSON
        (orjson.dumps({**bar, "volume": "10"}), "malformed"),  # wrong type
        (orjson.dumps({k: v for k, v in bar.items() if k != "ts_event"}), "malformed"),
        (orjson.dumps(bar).replace(b'"close":', b'"close":NaN,"x":'), "malformed"),
        (orjson.dumps({**bar, **{f: -bar[f] for f in ("open", "high", "low", "close")}}),
         "nonpositive_price"),
        (orjson.dumps([bar]), "malformed"),  # not an object
    ]  # fmt: skip
    return [kinds[(i // 40) % len(kinds)]]


def stream(bars: pd.DataFrame) -> tuple[list[tuple[bytes, bytes]], Counter[str]]:
    """(key, value) records of both symbols in turn, with the bad ones, and their reasons."""
    records: list[tuple[bytes, bytes]] = []
    reasons: Counter[str] = Counter()
    per_symbol = [
        bars_from_frame(bars.iloc[:BARS], symbol=s, instrument_id=7 + n, source="test")
        for n, s in enumerate(SYMBOLS)
    ]
    # First on its partition too: the worker's first fetch there starts at a record larger
    # than BARCAST_MAX_RECORD_BYTES, which a broker may not return to a smaller fetch.
    first = per_symbol[0][0]
    records.append((first["symbol"].encode(), poison(first, 0)[0][0]))
    reasons["oversized"] += 1
    for i, pair in enumerate(zip(*per_symbol, strict=True)):
        for bar in pair:
            key = bar["symbol"].encode()
            if i % 40 == 20 and bar["symbol"] == SYMBOLS[0]:
                for value, reason in poison(bar, i):
                    records.append((key, value))
                    reasons[reason] += 1
            records.append((key, orjson.dumps(bar)))
    return records, reasons


def produce_large(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            "message.max.bytes": 4_000_000,
        }
    )
    for key, value in records:
        producer.produce(topic, value=value, key=key)
        producer.poll(0)
    assert producer.flush(30) == 0


@pytest.mark.parametrize("role", ["stream", "all"])
def test_bad_records_go_to_the_dlq_and_the_stream_goes_on(
    broker_settings: Settings, sixe_bars: pd.DataFrame, role: str
) -> None:
    # Role stream publishes through Faust's producer, role all through record batches.
    settings = replace(broker_settings, role=role, checkpoint_max_s=0.5)
    if role == "all":
        make_checkpoint(settings.model_dir / "first")
    ensure_topics(settings, pipeline_topics(settings))
    records, reasons = stream(sixe_bars)
    assert reasons["oversized"] >= 3 and len(reasons) == 3
    expected = correct_history(value for _, value in records)
    rejected = [o for o in expected.outcomes if o.status is Status.REJECTED]
    assert Counter(o.reason.value for o in rejected) == reasons
    total, half = len(expected.clean), len(records) // 2
    logs = [
        CleanLog(settings.broker, settings.topic_clean, settings.partitions),
        DeadLetterLog(settings.broker, settings.topic_dlq, settings.partitions),
        FeatureLog(settings.broker, settings.topic_features, settings.partitions),
    ]
    clean, dlq, features = logs
    try:
        produce_large(settings.broker, settings.topic_raw, records[:half])
        first = Worker(settings, "first").start()
        wait_for_metric(first, "barcast_checkpoints_total", 1)
        half_clean = sum(1 for o in expected.outcomes[:half] if o.status is not Status.REJECTED)
        clean.read_until(half_clean - 1)  # a held spike candidate may wait for the next bar
        first.kill()  # maybe before the checkpoint of the bad records: then they are replayed
        produce_large(settings.broker, settings.topic_raw, records[half:])
        with Worker(settings, "second") as second:
            assert clean.read_until(total) == total, second.log()[-4000:]
            assert features.read_until(total) == total, second.log()[-4000:]
            assert dlq.read_until(len(rejected)) == len(rejected), second.log()[-4000:]
            assert second.process is not None and second.process.poll() is None
            fetch_wait = metric(second, "barcast_fetch_max_wait_ms")
    finally:
        for log in logs:
            log.close()

    assert fetch_wait == settings.fetch_max_wait_ms
    assert "exiting" not in first.log() + second.log()
    assert sorted(clean.values) == sorted(
        (bar["symbol"], bar["ts_event"], bar["rtype"]) for bar in expected.clean
    )
    for bar in expected.clean:
        assert orjson.loads(clean.values[bar["symbol"], bar["ts_event"], bar["rtype"]]) == bar
    letters = sorted(dlq.values.items())
    assert Counter(dlq.headers[k][DLQ_REASON].decode() for k, _ in letters) == reasons
    originals = [o.value for o in rejected]
    for key, value in letters:
        headers = dlq.headers[key]
        assert headers[DLQ_MESSAGE]
        if TRUNCATED_HEADER in headers:  # the 1 MB records: a bounded copy
            original = next(v for v in originals if v[:KEPT_BYTES] == value and len(v) > KEPT_BYTES)
            assert headers[DLQ_REASON] == b"oversized" and len(value) == KEPT_BYTES
            assert headers[SHA256_HEADER] == hashlib.sha256(original).hexdigest().encode()
            assert headers[TRUNCATED_HEADER].endswith(f",{len(original)}".encode())
        else:
            assert value in originals
    assert sum(TRUNCATED_HEADER in h for h in dlq.headers.values()) == reasons["oversized"]


@pytest.mark.usefixtures("worker_threads")
def test_bad_features_records_go_to_the_dlq_and_forecasts_go_on(
    broker_settings: Settings, sixe_bars: pd.DataFrame
) -> None:
    """The forecast worker on its own topic: bad `features` records between real rows."""
    settings = replace(broker_settings, role="forecast", serve="model")
    make_checkpoint(settings.model_dir / "first")
    ensure_topics(settings, pipeline_topics(settings))
    raw = bars_from_frame(sixe_bars.iloc[:800], symbol="6EH4", instrument_id=1)
    reference = forecast_history(raw, ForecastEngine(settings.model_dir / "first"))
    clean = correct_history(raw).clean
    values, warm = expected_features(clean)
    row = orjson.loads(feature_message(clean[0], values[0], bool(warm[0])))
    bad = [
        b"{not json",
        orjson.dumps([row]),
        orjson.dumps({k: v for k, v in row.items() if k != "values"}),
        orjson.dumps({**row, "ts_event": "1704150000000000000"}),
        orjson.dumps({**row, "values": "AAAA"}),
        orjson.dumps({**row, "fingerprint": "0123456789abcdef"}),  # another barcast version's
        None,  # a tombstone
    ]
    at = {75 + 110 * n: value for n, value in enumerate(bad)}
    records = []
    for i, bar in enumerate(clean):
        if i in at:
            records.append((b"6EH4", at[i]))
        records.append((b"6EH4", feature_message(bar, values[i], bool(warm[i]))))
    assert len(records) == len(clean) + len(bad)
    produce(settings.broker, settings.topic_features, records)
    forecasts = ForecastLog(settings.broker, settings.topic_forecasts, settings.partitions)
    dlq = DeadLetterLog(settings.broker, settings.topic_dlq, settings.partitions)
    try:
        with Worker(settings, "forecast") as worker:
            control = BarProducer(settings, settings.topic_features)
            control.send_control(time.time_ns())
            assert control.flush() == 0
            assert forecasts.read_until(len(reference), timeout_s=300) == len(reference)
            assert dlq.read_until(len(bad)) == len(bad)
            assert worker.process is not None and worker.process.poll() is None
    finally:
        forecasts.close()
        dlq.close()
    assert sorted(dlq.values.values()) == sorted(b"" if v is None else v for v in bad)
    assert [h[NULL_VALUE_HEADER] for h in dlq.headers.values() if NULL_VALUE_HEADER in h] == [
        b"true"
    ]
    assert Counter(h[DLQ_REASON] for h in dlq.headers.values()) == {
        b"malformed": len(bad) - 1,
        b"fingerprint_mismatch": 1,
    }
    assert all(h[DLQ_TOPIC] == settings.topic_features.encode() for h in dlq.headers.values())
    assert_matches(
        reference, {(s, ts): orjson.loads(v) for (s, ts, _), v in forecasts.values.items()}
    )
