"""A stream-encoder checkpoint served through the real broker and real worker processes: a
worker SIGKILLed mid-replay, once its stream has run well past a lookback, and restarted
publishes the same forecasts as one never killed. Each symbol's stream carries state from every
bar before its window, so only a stream restored from the stream store as of the last commit
(streams.runtime.stages.carried) goes on as one never killed; one started again from the
window forecasts otherwise."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from features.corrections import bars_from_frame
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import forecast_history
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import Settings
from tests.checkpoints import make_checkpoint
from tests.kafka_io import produce
from tests.streams.worker.test_canary import kill_once_committed
from tests.streams.worker.test_forecasts import end_of_data
from tests.topic_logs import ForecastLog
from tests.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
SYMBOL = "6EH4"
BARS, CHUNK = 1000, 100  # produced a chunk at a time, each once the last one's forecasts are out
KILLED_AT = 700  # bars in: some 400 forecasts of one stream, far past a lookback of 60
RESTORED = re.compile(r"encoder-streams-changelog\[0\], (\d+) records")


def run(
    base: Settings, name: str, values: list[dict[str, Any]], model: Path, kill: bool
) -> tuple[dict[tuple[Any, ...], bytes], str]:
    """Every forecast of `values` (de-duplicated; a repeat had to carry the same bytes) and the
    last worker's log; with `kill`, the worker is SIGKILLed once the first KILLED_AT bars are
    committed and a second one finishes."""
    settings = replace(
        base.isolated(name),
        role="all",
        model_dir=base.model_dir.parent / name / "models",
        checkpoint_max_s=0.5,
    )
    ensure_topics(settings, pipeline_topics(settings))
    shutil.copytree(model, settings.model_dir / "stream")
    forecast_ts = sorted(ts for _, ts in forecast_history(values, ForecastEngine(model)))
    records = [(SYMBOL.encode(), orjson.dumps(v)) for v in values]
    forecasts = ForecastLog(settings.broker, settings.topic_forecasts, settings.partitions)
    worker = Worker(settings, name=f"{name}-first").start()
    try:
        for end in range(CHUNK, BARS + 1, CHUNK):
            produce(settings.broker, settings.topic_raw, records[end - CHUNK : end])
            out = sum(ts <= values[end - 1]["ts_event"] for ts in forecast_ts)
            assert forecasts.read_until(out, timeout_s=300) == out
            if kill and end == KILLED_AT:
                kill_once_committed(worker)
                worker = Worker(settings, name=f"{name}-second").start()
        end_of_data(settings)
        total = len(forecast_ts)
        assert forecasts.read_until(total, timeout_s=300) == total
        forecasts.read_to_end()
        text = worker.log()
    finally:
        worker.stop()
        forecasts.close()
    return {k: forecasts.identity(v) for k, v in forecasts.values.items()}, text


def test_a_killed_stream_worker_publishes_the_same_forecasts_as_one_never_killed(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    model = tmp_path / "stream"
    model_id = make_checkpoint(model, encoder="stream")
    values = bars_from_frame(sixe_bars.iloc[:BARS], symbol=SYMBOL, instrument_id=1)
    base = replace(broker_settings, model_dir=tmp_path / "runs" / "models")

    whole, _ = run(base, "whole", values, model, kill=False)
    killed, log = run(base, "killed", values, model, kill=True)

    restored = RESTORED.search(log)
    assert restored is not None and int(restored.group(1)) > 0, log[-3000:]
    assert {orjson.loads(v)["model_id"] for v in whole.values()} == {model_id}
    killed_ts = values[KILLED_AT - 1]["ts_event"]
    before = sum(orjson.loads(v)["ts_event"] <= killed_ts for v in whole.values())
    assert before > 2 * 60, "the kill came once the stream had run past its window"
    assert killed == whole
