"""The stream worker (corrections + features) through the real broker, never interrupted: the
`features` topic equals `compute_batch` over the same clean bars, bit for bit, and
`barcast stats` reads the worker's corrections counters."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

import orjson
import pandas as pd
import pytest

from features import engine
from features.bars import PRICE_SCALE
from features.corrections import SYNTHETIC, correct_history
from streams.kafka import ensure_topics, pipeline_topics
from streams.schema import decode_feature_values
from streams.settings import Settings
from streams.tools import stats_cli
from tests.bar_streams import expected_features, tiled_stream
from tests.kafka_io import produce, read_topic
from tests.worker import Worker

pytestmark = pytest.mark.integration  # the embedded broker and real worker processes

SYMBOLS = ["6EH4", "6EM4", "6EU4"]
BARS_PER_SYMBOL = 1200


def stats_line(url: str, bars_in: int, capsys: pytest.CaptureFixture[str]) -> str:
    """`barcast stats` once the worker has counted every input bar (the corrections agent
    updates its metrics just after it publishes a batch)."""
    deadline = time.monotonic() + 30.0
    while True:
        assert stats_cli.main(["--url", url]) == 0
        line = capsys.readouterr().out.strip()
        if line.startswith(f"bars in={bars_in} ") or time.monotonic() > deadline:
            return line
        time.sleep(0.2)


def test_features_equal_batch(
    broker_settings: Settings, sixe_bars: pd.DataFrame, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = replace(broker_settings, role="stream")
    ensure_topics(settings, pipeline_topics(settings))
    records = tiled_stream(sixe_bars, BARS_PER_SYMBOL, SYMBOLS)
    expected = correct_history(value for _, value in records)
    produce(settings.broker, settings.topic_raw, records)

    with Worker(settings) as worker:
        messages = read_topic(settings.broker, settings.topic_features, len(expected.clean))
        url = f"http://127.0.0.1:{worker.settings.web_port}/metrics"
        line = stats_line(url, len(records), capsys)

    stats = expected.stats
    outcomes = ("clean", "corrected", "duplicate", "rejected", "synthetic")
    assert (
        line
        == stats_cli.CorrectionsCounts(
            bars=Counter({"in": len(records), **{name: getattr(stats, name) for name in outcomes}}),
            corrections=Counter({rule.value: n for rule, n in stats.corrections.items()}),
            rejections=Counter({reason.value: n for reason, n in stats.rejections.items()}),
            dlq=stats.rejected,
            gaps=stats.gaps,
            gap_minutes=stats.gap_bars,
        ).line()
    )
    assert stats.corrected and stats.rejected and stats.duplicate and stats.synthetic

    assert len(messages) == len(expected.clean)
    published: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in messages:
        row = orjson.loads(message.value)
        assert message.key == row["symbol"].encode()
        published[row["symbol"]].append(row)
    clean: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for bar in expected.clean:
        clean[bar["symbol"]].append(bar)
    assert sorted(published) == sorted(clean) == sorted(SYMBOLS)
    for symbol, bars in clean.items():
        values, warm = expected_features(bars)
        rows = published[symbol]
        assert [row["ts_event"] for row in rows] == [bar["ts_event"] for bar in bars]
        for i, (row, bar) in enumerate(zip(rows, bars, strict=True)):
            assert decode_feature_values(row["values"]).tobytes() == values[i].tobytes()
            assert row["warm"] == bool(warm[i])
            assert row["fingerprint"] == engine.FINGERPRINT
            assert row["close"] == bar["close"] * PRICE_SCALE
            assert row["synthetic"] == (bar["status"] == SYNTHETIC)
        assert rows[-1]["warm"]  # 1,200 bars are past every warm-up
