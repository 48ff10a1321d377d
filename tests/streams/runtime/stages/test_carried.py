"""A stream encoder's streams in the stream store (streams.runtime.stages.carried), without a
broker: a forecast stage restored from a commit publishes, bar for bar, what the stage never
stopped publishes; restored without the stream store it does not (its streams start again from
the windows); a stored stream of another model is never resumed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from features.engine import FINGERPRINT, N_FEATURES
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import DELIVERY
from streams.metrics import Metrics
from streams.runtime.changelog import Changelog
from streams.runtime.commit import Runtime
from streams.runtime.pipeline import build_scoring
from streams.runtime.stages.forecasts import Forecasting
from streams.runtime.stages.serving import Serving
from streams.runtime.stages.windows import slide
from streams.runtime.stores import StreamStore, WindowStore
from streams.settings import Settings
from tests.checkpoints import make_checkpoint
from tests.streams.runtime.stages.test_forecasts import Producer, rows
from tests.streams.runtime.stages.test_scores import scoring
from tests.streams.runtime.test_stores import MemoryChangelogs, flush

COMMITTED, END = 150, 200  # minutes: the stream has run far past its lookback of 60 by then


def stage(
    io: MemoryChangelogs, model: Path, settings: Settings | None = None
) -> tuple[Forecasting, Producer]:
    """The forecast stage over `io`; with `settings`, its scoring as the worker builds it of
    them (the shadow baselines too, by default)."""
    engine = ForecastEngine(model)
    runtime = Runtime(Settings(), Metrics(), "t", lambda topic: {0}, lambda: asyncio.sleep(0))
    producer = runtime.producer = Producer()  # type: ignore[assignment]
    changelog = lambda name: Changelog(f"t-{name}", io)  # noqa: E731
    windows = WindowStore(changelog("windows"), engine.lookback, N_FEATURES, FINGERPRINT)
    serving = Serving(engine, runtime.metrics, 1)
    scores = scoring(io) if settings is None else build_scoring(settings, changelog)
    return Forecasting(
        runtime, serving, windows, scores, StreamStore(changelog("encoder-streams"))
    ), producer


async def forecast(stage: Forecasting, minutes: range) -> None:
    for minute in minutes:
        await stage.add(rows(minute))
        await stage.drain()


async def commit(stage: Forecasting) -> None:
    """What a commit does to the stage's stores (streams.runtime.commit, steps 2, 3 and 5)."""
    await stage.drain()
    for store in stage.stores:
        store.put_changed()
        await flush(store)


def published(producer: Producer, topic: str) -> dict[tuple[str, int], dict[str, Any]]:
    out = {}
    for record in (r for call in producer.calls for r in call if r.topic == topic):
        value = {k: v for k, v in orjson.loads(record.value).items() if k not in DELIVERY}
        out[value["symbol"], value["ts_event"]] = value
    return out


def test_a_restored_stage_goes_on_with_the_streams_of_the_commit(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "model", encoder="stream")
    io = MemoryChangelogs()
    whole, whole_out = stage(io, tmp_path / "model")
    topic = whole.settings.topic_forecasts

    async def restored(stores: set[str]) -> dict[tuple[str, int], dict[str, Any]]:
        """What a stage restored from the commit, of `stores` only, publishes after it."""
        again, out = stage(io, tmp_path / "model")
        boundary = 2 * COMMITTED  # rows(minute): two rows a minute, from offset 0
        for store in again.stores:
            if store.changelog.topic.split("-", 1)[1] in stores:
                await store.restore(0, boundary)
        await forecast(again, range(COMMITTED, END))
        return published(out, topic)

    async def run() -> None:
        await forecast(whole, range(COMMITTED))
        await commit(whole)
        whole_out.calls.clear()
        await forecast(whole, range(COMMITTED, END))
        expected = published(whole_out, topic)
        assert len(expected) == 2 * (END - COMMITTED)
        every = {s.changelog.topic.split("-", 1)[1] for s in whole.stores}
        assert await restored(every) == expected
        windows_only = every - {"encoder-streams"}
        assert await restored(windows_only) != expected, "the streams matter"

    asyncio.run(run())


def test_a_stored_stream_of_another_model_is_not_resumed(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "a", encoder="stream")
    make_checkpoint(tmp_path / "b", seed=1, encoder="stream")
    io = MemoryChangelogs()
    first, _ = stage(io, tmp_path / "a")

    async def run() -> None:
        await forecast(first, range(70))
        await commit(first)
        for model, resumed in (("a", True), ("b", False)):
            again, _ = stage(io, tmp_path / model)
            for store in again.stores:
                await store.restore(0, 2 * 70)
            engine = again.engine
            assert engine is not None and engine.streams == {}
            requests = [slide(again.windows, row, True) for row in rows(70)]
            assert all(r is not None for r in requests)
            again.carried.resume(requests, [(engine,)] * len(requests))  # type: ignore[arg-type]
            assert (set(engine.streams) == {"6EH4", "ESU4"}) is resumed, model

    asyncio.run(run())


def test_a_commit_writes_the_slots_a_stream_changed_and_its_head(tmp_path: Path) -> None:
    """Each symbol's stream stored whole once, then per bar one slot of its ring and its head,
    as the windows are; a stream started again (its window restored, its stream not) writes
    every slot again."""
    make_checkpoint(tmp_path / "model", encoder="stream")
    io = MemoryChangelogs()
    topic = ("t-encoder-streams", 0)
    lookback = 60

    async def written(stage: Forecasting, minutes: range) -> int:
        await forecast(stage, minutes)
        before = len(io.partitions.get(topic, []))
        await commit(stage)
        return len(io.partitions[topic]) - before

    async def run() -> None:
        first, _ = stage(io, tmp_path / "model")
        assert await written(first, range(lookback)) == 2 * (lookback + 1)
        assert await written(first, range(lookback, lookback + 1)) == 2 * 2
        assert await written(first, range(lookback + 1, lookback + 3)) == 2 * 3
        again, _ = stage(io, tmp_path / "model")
        await again.windows.restore(0, 2 * (lookback + 3))
        assert await written(again, range(lookback + 3, lookback + 4)) == 2 * (lookback + 1)

    asyncio.run(run())
