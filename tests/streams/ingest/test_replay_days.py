"""Replaying history day by day, in separate `barcast replay` runs, publishes what one replay of
all the days publishes: every `--no-end-control` run leaves the bars it could not decide to the
next run's bars, as one replay would. Through the real broker and a real worker."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from features import bars
from streams import schema
from streams.ingest.convert import (
    SIXE_INSTRUMENT_ID,
    SIXE_SYMBOL,
    bars_to_records,
    ohlcv_metadata,
    write_dbn,
)
from streams.ingest.replay import Replay, ReplayOptions
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import Settings
from tests.checkpoints import make_checkpoint
from tests.topic_logs import ForecastLog, read_all
from tests.worker import Worker, check_workers

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
DAY = 86_400 * 10**9
DAYS = 10
MOVED_DAY = 2  # from this day's last bar on, every price is 1 % higher


def ten_days(sixe_bars: pd.DataFrame, path: Path) -> tuple[Path, list[int], int]:
    """The first ten UTC days of the real 6EH4 month that have bars, as DBN, with one change:
    from the last bar of the third day on, prices are 1 % higher, a move at a day's close
    that the next day's bars confirm. Each day's last bar is otherwise never a spike candidate
    in the real data, and a run's end could not show. (The file, the days' starts, the moved
    bar's ts_event.)"""
    day = sixe_bars["ts_event"] // DAY * DAY
    days = sorted(day.unique())[:DAYS]
    frame = sixe_bars[day.isin(days)].reset_index(drop=True)
    moved = int(frame.index[frame.ts_event // DAY * DAY == days[MOVED_DAY]][-1])
    prices = ["open", "high", "low", "close"]
    frame.loc[moved:, prices] = frame.loc[moved:, prices] * 1.01
    records = bars_to_records(frame, SIXE_INSTRUMENT_ID)
    metadata = ohlcv_metadata({SIXE_SYMBOL: SIXE_INSTRUMENT_ID}, int(days[0]), int(days[-1]) + DAY)
    return write_dbn(path, metadata, records), [int(d) for d in days], int(frame.ts_event[moved])


def pipeline(base: Settings, tmp_path: Path, name: str) -> Settings:
    """Role `all` on topics and a consumer group of its own, serving the seed-0 checkpoint."""
    run = f"{base.app_id.removeprefix('barcast-')[-16:]}-{name}"
    settings = replace(base.isolated(run), role="all", model_dir=tmp_path / name / "models")
    make_checkpoint(settings.model_dir / "first", seed=0)
    ensure_topics(settings, pipeline_topics(settings))
    return settings


def read_through_controls(settings: Settings, timeout_s: float = 300.0) -> None:
    """Wait for the end's control record on every partition of bars.clean: after it, the
    worker has decided every bar of the replays."""
    consumer = Consumer(
        {"bootstrap.servers": settings.broker, "group.id": "tests", "enable.auto.commit": False}
    )
    consumer.assign(
        [
            TopicPartition(settings.topic_clean, p, OFFSET_BEGINNING)
            for p in range(settings.partitions)
        ]
    )
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < settings.partitions:
            assert time.monotonic() < deadline, f"no end control on bars.clean {seen}"
            check_workers()
            for msg in consumer.consume(10000, timeout=0.2):
                if msg.error() is None and msg.key() == schema.CONTROL_KEY:
                    seen.add(msg.partition())
    finally:
        consumer.close()


def published(
    settings: Settings, path: Path, runs: list[tuple[int, int, bool]], last_ts: int
) -> tuple[dict[Any, dict], dict[Any, dict]]:
    """Replay `path` in `runs` ([start, end), end control or not) into a worker of `settings`;
    return its bars.clean bars and its forecasts (less their delivery fields) by key."""
    forecasts = ForecastLog(settings.broker, settings.topic_forecasts, settings.partitions)
    with Worker(settings):
        for start, end, end_control in runs:
            options = ReplayOptions(
                (path,), settings.topic_raw, start_ns=start, end_ns=end, end_control=end_control
            )
            Replay(settings, options).run()
        read_through_controls(settings)
        deadline = time.monotonic() + 300
        while not any(key[1] == last_ts for key in forecasts.values):
            assert time.monotonic() < deadline, "the last bar's forecast never came"
            forecasts.read_until(len(forecasts.values) + 1, timeout_s=5)
    assert read_all(settings.broker, settings.topic_dlq) == []
    clean = {}
    for message in read_all(settings.broker, settings.topic_clean):
        value = orjson.loads(message.value)
        if not bars.is_control(value):
            clean[(value["symbol"], value["ts_event"])] = value
    forecast = {k: orjson.loads(forecasts.identity(v)) for k, v in forecasts.values.items()}
    forecasts.close()
    return clean, forecast


def test_ten_day_by_day_replays_equal_one_replay_of_the_days(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    path, days, moved = ten_days(sixe_bars, tmp_path / "ten-days.dbn.zst")
    last = int(sixe_bars.ts_event[sixe_bars.ts_event < days[-1] + DAY].max())
    one = published(
        pipeline(broker_settings, tmp_path, "one"), path, [(days[0], days[-1] + DAY, True)], last
    )
    daily = [(day, day + DAY, day == days[-1]) for day in days]
    by_day = published(pipeline(broker_settings, tmp_path, "days"), path, daily, last)

    clean, forecasts = one
    assert len(clean) > 10_000 and len(forecasts) > 10_000
    assert clean[(SIXE_SYMBOL, moved)]["status"] == "clean", "the move at the day's end stands"
    assert by_day[0] == clean, "bars.clean differs"
    assert by_day[1] == forecasts, "the forecasts differ"
