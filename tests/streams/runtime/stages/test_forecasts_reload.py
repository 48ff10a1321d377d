"""Hot reload when the model directory is caught mid-change, without a broker: a half-copied
config.json, one missing a key, and a checkpoint removed (a rollback) after the watcher found it
are each refused and logged, and the worker goes on serving the model it has."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from model import checkpoint
from model.checkpoint import CONFIG, CheckpointError, load
from model.serving.checkpoints import CheckpointWatcher
from streams.metrics import Metrics
from streams.runtime.commit import Runtime
from streams.runtime.pipeline import build_pipeline
from streams.runtime.stages.forecasts import Forecasting
from streams.settings import Settings
from tests.checkpoints import make_checkpoint
from tests.streams.runtime.test_stores import MemoryChangelogs


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
