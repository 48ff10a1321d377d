"""The forecast stage (streams.runtime.stages.forecasts) without a broker. Its order of work at a
minute boundary: a flush publishes the minute's forecasts and leaves scoring alone (the bars
wait, the scoring states untouched); the checkpoint's drain then scores the bars and publishes
their scores after every forecast. Each decided forecast gets exactly one score record, a gap-fill
minute's too, though it brings no forecast. Its hot reload when the model directory is caught
mid-change: a half-copied config.json, one missing a key, and a checkpoint removed (a rollback)
after the watcher found it are each refused and logged, and the worker goes on serving the model
it has."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import orjson
import pytest

from features.engine import FINGERPRINT, N_FEATURES
from model import checkpoint
from model.checkpoint import CONFIG, CheckpointError, load
from model.covariates import NS_PER_MIN
from model.serving.checkpoints import CheckpointWatcher
from model.serving.forecast_engine import ForecastEngine
from streams.metrics import Metrics
from streams.runtime.changelog import Changelog
from streams.runtime.commit import Runtime
from streams.runtime.pipeline import build_pipeline
from streams.runtime.records import FeatureRow, Out
from streams.runtime.stages.forecasts import Forecasting
from streams.runtime.stages.serving import Serving
from streams.runtime.stores import StreamStore, WindowStore
from streams.settings import Settings
from tests.checkpoints import make_checkpoint
from tests.streams.runtime.stages.test_scores import TOPIC, scoring
from tests.streams.runtime.test_stores import MemoryChangelogs

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
    windows = WindowStore(
        Changelog("t-windows-changelog", io), engine.lookback, N_FEATURES, FINGERPRINT
    )
    streams = StreamStore(Changelog("t-encoder-streams", io))
    stage = Forecasting(runtime, Serving(engine, runtime.metrics, 1), windows, scoring(io), streams)
    first_scored = engine.lookback - 1 + engine.horizon  # the minute whose bars decide scores

    async def minute(items: list[FeatureRow]) -> tuple[list[str], list[str]]:
        """What the flush publishes, then what the drain after it does."""
        assert await stage.add(items) == [], "no dead letter among the rows"
        producer.calls.clear()
        await stage.flush()
        flushed, states = topics(producer.calls), stage.scoring.scores.states
        assert stage.scoring.waiting.keys() == {item.key for item in items}
        assert all(states[i.key].last_bar_ts < i.ts_event for i in items if i.key in states)
        producer.calls.clear()
        await stage.drain()
        assert not stage.scoring.waiting, "the drain scores every waiting bar"
        return flushed, topics(producer.calls)

    async def run() -> None:
        for m in range(first_scored):
            flushed, drained = await minute(rows(m))
            assert TOPIC not in flushed + drained
        for m in range(first_scored, first_scored + 3):
            flushed, drained = await minute(rows(m))
            assert flushed == [settings.topic_forecasts] * len(SYMBOLS), flushed
            assert drained == [TOPIC] * len(SYMBOLS), "the scores follow, from the drain"
        flushed, drained = await minute(rows(first_scored + 3, synthetic=True))
        assert flushed == [], "a gap fill is never forecast: nothing to flush"
        assert drained == [TOPIC] * len(SYMBOLS)
        scores = [orjson.loads(record.value) for record in producer.calls[-1]]
        assert {score["unscored"] for score in scores} == {"gap_fill"}

    asyncio.run(run())


def serving(models: Path) -> tuple[Forecasting, CheckpointWatcher, str]:
    """A forecast stage serving the checkpoint `models/first`, its watcher and its model id."""
    model_id = make_checkpoint(models / "first")
    settings = Settings(role="forecast")
    runtime = Runtime(settings, Metrics(), "t", lambda topic: {0}, lambda: asyncio.sleep(0))
    runtime.changelogs = MemoryChangelogs()  # type: ignore[assignment]
    stage, watcher = build_pipeline(settings, runtime).forecasting, CheckpointWatcher(models)
    assert stage is not None
    asyncio.run(stage.reload(watcher))
    assert stage.engine is not None and stage.engine.model_id == model_id
    return stage, watcher, model_id


def rewrite_config(directory: Path, change: Callable[[str], str]) -> None:
    """`directory`'s config.json as `change` makes it, written later than every other's."""
    config = directory / CONFIG
    config.write_text(change(config.read_text()))


def without_normalization(text: str) -> str:
    values = json.loads(text)
    del values["normalization"]
    return json.dumps(values)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda text: text[: len(text) // 2], "not JSON"),  # caught mid-copy
        (without_normalization, "KeyError 'normalization'"),
    ],
)
def test_a_partly_written_checkpoint_is_refused_and_the_model_served_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: Callable[[str], str], why: str
) -> None:
    stage, watcher, first = serving(tmp_path)
    make_checkpoint(tmp_path / "second", seed=1)
    rewrite_config(tmp_path / "second", change)
    with pytest.raises(CheckpointError, match=why):
        load(tmp_path / "second")
    with caplog.at_level(logging.ERROR, "barcast.forecast"):
        asyncio.run(stage.reload(watcher))
    assert stage.engine is not None and stage.engine.model_id == first
    assert watcher.current == tmp_path / "first" and watcher.poll() is None
    assert f"not serving {tmp_path / 'second'}" in caplog.text and why in caplog.text
    assert b"barcast_model_reloads_total 1.0" in stage.runtime.metrics.render()


def test_a_checkpoint_removed_while_it_loads_is_refused_and_the_model_served_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage, watcher, first = serving(tmp_path)
    make_checkpoint(tmp_path / "second", seed=1)
    real_hash = checkpoint.file_sha256

    def rolled_back(path: Path) -> str:
        shutil.rmtree(path.parent)  # the rollback lands after config.json was read
        return real_hash(path)

    monkeypatch.setattr(checkpoint, "file_sha256", rolled_back)
    with caplog.at_level(logging.ERROR, "barcast.forecast"):
        asyncio.run(stage.reload(watcher))
    assert stage.engine is not None and stage.engine.model_id == first
    assert "No such file" in caplog.text and watcher.poll() is None


def test_the_watcher_skips_a_checkpoint_whose_files_are_gone(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "first")
    make_checkpoint(tmp_path / "second", seed=1)
    watcher = CheckpointWatcher(tmp_path)
    assert watcher.newest() == tmp_path / "second"
    (tmp_path / "second" / CONFIG).unlink()  # a rollback under way
    watcher.reject(tmp_path / "second")  # what reload does when a load fails
    assert watcher.newest() == watcher.poll() == tmp_path / "first"
    shutil.rmtree(tmp_path)
    assert watcher.newest() is None and watcher.poll() is None
