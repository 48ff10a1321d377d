"""The forecast stage's order of work at a minute boundary (streams.runtime.forecaster), without a
broker: when the rows bring forecast requests, the scores their bars decide are not published by
`add` but by the flush, after every forecast of it; rows that bring none publish their scores
from `add` at once. Either way each decided forecast gets exactly one score record."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson

from features.engine import FINGERPRINT, N_FEATURES
from model.covariates import NS_PER_MIN
from streams.forecast.engine import ForecastEngine
from streams.metrics import Metrics
from streams.runtime.checkpoint import Runtime
from streams.runtime.forecaster import Forecaster
from streams.runtime.records import FeatureRow, Out
from streams.runtime.stores import Changelog, WindowStore
from streams.settings import Settings
from tests.checkpoints import make_checkpoint
from tests.test_agent_state import MemoryChangelogs
from tests.test_scoring_stage import TOPIC, scoring

SYMBOLS = ("6EH4", "ESU4")
START = 1_704_153_600_000_000_000  # 2024-01-02 00:00 UTC


class Producer:
    """What the stage hands the producer, call by call; every record acked at once."""

    def __init__(self) -> None:
        self.calls: list[list[Out]] = []

    async def send(self, records: Sequence[Out]) -> list[asyncio.Future]:
        self.calls.append(list(records))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return [done]


def rows(minute: int, synthetic: bool = False) -> list[FeatureRow]:
    rng, ts = np.random.default_rng(minute), START + minute * NS_PER_MIN
    out = []
    for i, symbol in enumerate(SYMBOLS):
        close = 1.1 * float(np.exp(rng.normal(0.0, 1e-3)))
        values = rng.normal(size=N_FEATURES)
        key, offset = symbol.encode(), 2 * minute + i
        out.append(
            FeatureRow(
                key, 0, offset, 0.0, None, symbol, ts, close, synthetic, True, values, FINGERPRINT
            )
        )
    return out


def topics(calls: list[list[Out]]) -> list[str]:
    return [record.topic for call in calls for record in call]


def test_scores_of_a_minutes_bars_follow_its_forecasts(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "model")
    engine = ForecastEngine(tmp_path / "model")
    settings = Settings()
    runtime = Runtime(settings, Metrics(), "t", lambda topic: {0}, lambda: asyncio.sleep(0))
    producer = runtime.producer = Producer()  # type: ignore[assignment]
    io = MemoryChangelogs()
    windows = WindowStore(Changelog("t-windows-changelog", io), engine.lookback, N_FEATURES)
    stage = Forecaster(runtime, engine, windows, scoring(io))
    first_scored = engine.lookback - 1 + engine.horizon  # the minute whose bars decide scores

    async def minute(items: list[FeatureRow]) -> tuple[list[Out], list[str]]:
        returned = (await stage.add(items)).outputs
        producer.calls.clear()
        await stage.drain()
        return returned, topics(producer.calls)

    async def run() -> None:
        for m in range(first_scored):
            returned, flushed = await minute(rows(m))
            assert returned == [] and TOPIC not in flushed
        for m in range(first_scored, first_scored + 3):
            returned, flushed = await minute(rows(m))
            forecasts = [t for t in flushed if t == settings.topic_forecasts]
            assert returned == [], "a minute with requests publishes its scores from the flush"
            assert flushed == forecasts + [TOPIC] * len(SYMBOLS), flushed
            assert len(forecasts) == len(SYMBOLS)
        returned, flushed = await minute(rows(first_scored + 3, synthetic=True))
        assert flushed == [], "a gap fill is never forecast: nothing to flush"
        scores = [orjson.loads(record.value) for record in returned]
        assert [record.topic for record in returned] == [TOPIC] * len(SYMBOLS)
        assert {score["unscored"] for score in scores} == {"gap_fill"}

    asyncio.run(run())
