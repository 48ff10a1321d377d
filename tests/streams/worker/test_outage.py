"""An outage through live ingest, the real broker and a real worker (issue 45's acceptance): the
gateway (the project's mock, serving a day of the real 6EH4 bars) hangs up, the client is away
longer than the gateway's replay window, and the minutes it cannot replay are an OUTAGE record:
no gap fill over them, every label over them unscored `outage`, and forecasts go on after."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pandas as pd
import pytest

from features.bars import is_control
from streams.ingest.convert import (
    SIXE_INSTRUMENT_ID,
    SIXE_SYMBOL,
    bars_to_records,
    ohlcv_metadata,
    write_dbn,
)
from streams.settings import Settings
from tests.live_gateway import MINUTE_NS, LiveGateway
from tests.streams.ingest.test_live import KEY, ingest_live
from tests.streams.ingest.test_replay_days import pipeline
from tests.topic_logs import ForecastLog, ScoreLog, read_all
from tests.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
H = 10
CUT = 900  # bars of the first session: mid-session, well past the features' warm-up


def one_day(sixe_bars: pd.DataFrame, path: Path) -> pd.DataFrame:
    start = pd.Timestamp("2024-01-17", tz="UTC").value
    day = sixe_bars[(sixe_bars.ts_event >= start) & (sixe_bars.ts_event < start + 1440 * MINUTE_NS)]
    day = day.reset_index(drop=True)
    end = int(day.ts_event.iloc[-1]) + MINUTE_NS
    metadata = ohlcv_metadata({SIXE_SYMBOL: SIXE_INSTRUMENT_ID}, start, end)
    write_dbn(path, metadata, bars_to_records(day, SIXE_INSTRUMENT_ID))
    return day


def wait_for(log: ForecastLog | ScoreLog, ts_event: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(key[1] == ts_event for key in log.values):
        assert time.monotonic() < deadline, f"{log.topic}: nothing at {ts_event}"
        log.read_until(len(log.values) + 1, timeout_s=2)


def test_minutes_lost_in_an_outage_are_no_quiet_market(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    settings = pipeline(broker_settings, tmp_path, "outage")
    day = one_day(sixe_bars, tmp_path / "day.dbn.zst")
    ts = day.ts_event.tolist()
    start, end = ts[CUT - 1], ts[CUT - 1] + 17 * MINUTE_NS  # away 20 min, window 5, margin 1
    kept = [t for t in ts if t <= start or t >= end]
    forecasts = ForecastLog(settings.broker, settings.topic_forecasts, settings.partitions)
    scores = ScoreLog(settings.broker, settings.topic_scores, settings.partitions)
    gateway = LiveGateway(
        tmp_path / "day.dbn.zst", KEY, hang_ups=(CUT,), downtime_s=1200, replay_window_s=300
    )
    with Worker(settings), gateway:
        stats = ingest_live(
            settings, gateway, lambda s: s.outages >= 1 and s.bars >= len(kept),
            replay_window_s=300,
        )  # fmt: skip
        wait_for(forecasts, kept[-1])
        wait_for(scores, kept[-1] - H * MINUTE_NS)
    assert (stats.bars, stats.outages) == (len(kept), 1)
    assert read_all(settings.broker, settings.topic_dlq) == []

    clean = [orjson.loads(m.value) for m in read_all(settings.broker, settings.topic_clean)]
    bars = [v for v in clean if not is_control(v)]
    assert len(bars) > len(kept) and [v for v in bars if start < v["ts_event"] < end] == [], (
        "gap fills elsewhere, but no bar, synthetic or not, inside the outage"
    )
    assert {"control": "outage", "ts_event": start, "end": end} in clean
    after = min(t for t in kept if t >= end)
    assert (SIXE_SYMBOL, after) in {k[:2] for k in forecasts.values}, "forecasts go on after it"
    records = {k[1]: orjson.loads(v) for k, v in scores.values.items()}
    over = [t for t in records if t < start < t + H * MINUTE_NS or start <= t < end]
    assert len(over) >= H - 1
    assert {records[t]["unscored"] for t in over} == {"outage"}
    assert any(r["unscored"] is None for t, r in records.items() if t >= end), "scored again"
