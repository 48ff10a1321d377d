"""A contract roll through the real broker and real workers (issue 45's acceptance): three days of
the real 6EH4 bars under `6E.c.0`, rolling mid-session to a second contract 0.25 % over it,
replayed with `BARCAST_KEY_BY=continuous`, against the same bars without the jump. The worker of
the rolled series is killed (SIGKILL) once the roll has gone through it, and a second one
resumes; what they publish is what the unrolled series publishes."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest

from features.bars import is_control
from features.registry import FEATURE_NAMES
from streams.ingest.replay import Replay, ReplayOptions
from streams.schema import decode_feature_values
from streams.settings import Settings
from tests.roll_files import CONTINUOUS, NEW, SPREAD, continuous_recording, roll_minute
from tests.streams.ingest.test_replay_days import pipeline, read_through_controls
from tests.topic_logs import FeatureLog, ForecastLog, ScoreLog, read_all, wait_for_metric
from tests.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
DAY, MINUTE, H = 86_400 * 10**9, 60 * 10**9, 10


@pytest.fixture(scope="module")
def three_days(sixe_bars: pd.DataFrame) -> pd.DataFrame:
    ts, start = sixe_bars.ts_event, pd.Timestamp("2024-01-16", tz="UTC").value
    return sixe_bars[(ts >= start) & (ts < start + 3 * DAY)].reset_index(drop=True)


class RowLog(FeatureLog):
    """The features topic: rows by (symbol, ts_event), control records by kind and ts_event."""

    def key(self, key: bytes | None, value: bytes, headers: dict[str, bytes]) -> tuple[object, ...]:
        row = orjson.loads(value)
        if is_control(row):
            return "control", row["control"], row["ts_event"]
        return row["symbol"], row["ts_event"]


class Published:
    """What a pipeline's topics hold, read as the workers write them."""

    def __init__(self, settings: Settings) -> None:
        topics = (settings.topic_forecasts, settings.topic_scores, settings.topic_features)
        self.settings = settings
        self.forecasts, self.scores, self.features = (
            log(settings.broker, topic, settings.partitions)
            for log, topic in zip((ForecastLog, ScoreLog, RowLog), topics, strict=True)
        )

    def wait_for(self, log: Any, ts_event: int, timeout_s: float = 300.0) -> None:
        """Until `log` holds a value of `ts_event` (one symbol: the last it will publish)."""
        deadline = time.monotonic() + timeout_s
        while not any(key[1] == ts_event for key in log.values):
            assert time.monotonic() < deadline, f"{log.topic}: nothing at {ts_event} yet"
            log.read_until(len(log.values) + 1, timeout_s=2)

    def finish(self, last_ts: int) -> None:
        """Every bar decided, its forecast out, and the last label's score (of the forecast
        H minutes before the last bar)."""
        read_through_controls(self.settings)
        self.wait_for(self.forecasts, last_ts)
        self.wait_for(self.scores, last_ts - H * MINUTE)
        self.features.read_to_end()

    def values(self, log: Any) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {k: orjson.loads(log.identity(v)) for k, v in log.values.items()}


def replay(settings: Settings, path: Path, start: int, end: int, end_control: bool) -> None:
    options = ReplayOptions((path,), settings.topic_raw, start_ns=start, end_ns=end,
                            end_control=end_control)  # fmt: skip
    assert Replay(settings, options).run().error is None


def test_a_roll_under_a_continuous_symbol_is_invisible_and_survives_a_kill(
    broker_settings: Settings, tmp_path: Path, three_days: pd.DataFrame
) -> None:
    roll_ts = roll_minute(three_days, "2024-01-17T15:00")
    first, last = int(three_days.ts_event.iloc[0]), int(three_days.ts_event.iloc[-1])
    base = replace(broker_settings, key_by="continuous")

    plain = pipeline(base, tmp_path, "plain")
    plain_file = continuous_recording(three_days, tmp_path / "plain.dbn.zst", roll_ts, 1.0)
    unrolled = Published(plain)
    with Worker(plain):
        replay(plain, plain_file.path, first, last + MINUTE, True)
        unrolled.finish(last)

    rolled = pipeline(base, tmp_path, "rolled")
    rolled_file = continuous_recording(three_days, tmp_path / "rolled.dbn.zst", roll_ts)
    published = Published(rolled)
    held_back = roll_ts + 60 * MINUTE  # sent after the kill: it cannot come after the last output
    replay(rolled, rolled_file.path, first, held_back, False)
    worker = Worker(rolled, name="first").start()
    wait_for_metric(worker, "barcast_checkpoints_total", 1)
    published.wait_for(published.features, roll_ts)  # the roll went through corrections, features
    worker.kill()
    published.forecasts.read_to_end()
    assert 0 < len(published.forecasts.values) < len(unrolled.forecasts.values)
    replay(rolled, rolled_file.path, held_back, last + MINUTE, True)
    with Worker(rolled, name="second"):
        published.finish(last)

    assert (
        read_all(rolled.broker, rolled.topic_dlq) == [] == read_all(plain.broker, plain.topic_dlq)
    )
    assert_no_trace_of_the_spread(published, unrolled, roll_ts)


def assert_no_trace_of_the_spread(published: Published, unrolled: Published, roll_ts: int) -> None:
    """Feature rows bit for bit (the 1-minute return at the roll is the market's), a forecast
    every minute through the roll, the model's quantiles bit for bit and the scores across
    the roll equal to the unrolled series' but for the rounding of the ratio."""
    rows, plain_rows = (
        {k: v for k, v in p.values(p.features).items() if k[0] != "control"}
        for p in (published, unrolled)
    )
    assert rows.keys() == plain_rows.keys()
    ret = FEATURE_NAMES.index("ret_1")
    returns = {k[1]: decode_feature_values(v["values"])[ret] for k, v in rows.items()}
    for key, row in rows.items():
        assert row["values"] == plain_rows[key]["values"], key
        assert row["raw_symbol"] == (NEW[0] if key[1] >= roll_ts else "6EH4")
    day = [abs(r) for ts, r in returns.items() if ts // DAY == roll_ts // DAY and ts != roll_ts]
    assert abs(returns[roll_ts]) <= np.nanmax(day)

    forecasts, plain_forecasts = (p.values(p.forecasts) for p in (published, unrolled))
    assert forecasts.keys() == plain_forecasts.keys()
    real = [k[1] for k, v in rows.items() if not v["synthetic"]]
    around = [ts for ts in real if abs(ts - roll_ts) <= 60 * MINUTE]
    assert all((CONTINUOUS, ts) in {k[:2] for k in forecasts} for ts in around)
    for key, value in forecasts.items():
        plain = plain_forecasts[key]
        assert [value[f"raw_{q}"] for q in ("q10", "q50", "q90")] == [
            plain[f"raw_{q}"] for q in ("q10", "q50", "q90")
        ], key
        assert np.allclose(value["q10"], plain["q10"], rtol=0, atol=1e-9)
        scale = SPREAD if key[1] >= roll_ts else 1.0
        assert value["close"] == pytest.approx(plain["close"] * scale, rel=1e-9)

    scores, plain_scores = (p.values(p.scores) for p in (published, unrolled))
    assert scores.keys() == plain_scores.keys()
    across = [k for k in scores if roll_ts - H * MINUTE <= k[1] < roll_ts]
    assert len(across) == H and all(scores[k]["unscored"] is None for k in across)
    for key, score in scores.items():
        plain = plain_scores[key]
        for name in ("unscored", "inside", "below_q10", "above_q90"):
            assert score[name] == plain[name], (key, name)
        if score["unscored"] is None:
            assert np.allclose(score["realized"], plain["realized"], rtol=0, atol=1e-9), key
            for q, losses in score["pinball"].items():
                assert np.allclose(losses, plain["pinball"][q], rtol=0, atol=1e-9), (key, q)
