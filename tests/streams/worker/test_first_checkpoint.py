"""A worker started on a fresh checkout, with no checkpoint yet: corrections and features run,
nothing is forecast, and forecasts begin from the first checkpoint copied in, its windows
already full. Through the real broker and a real worker process."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from features.corrections import bars_from_frame
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import clean_history, forecast_history
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import Settings
from streams.tools.stats_cli import scrape
from tests.checkpoints import make_checkpoint
from tests.kafka_io import produce, read_topic
from tests.streams.worker.test_forecasts import end_of_data, forecasts_by_key, model_quantiles
from tests.worker import Worker

pytestmark = pytest.mark.integration
WAITING = "yet: waiting for one"
LOOP = "barcast_loop_seconds_total"  # the event loop's time, by work


def metric(worker: Worker, name: str, **labels: str) -> float:
    text = scrape(f"http://127.0.0.1:{worker.settings.web_port}/metrics", timeout_s=10)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.2)


def raw(values: list[dict]) -> list[tuple[bytes, bytes]]:
    return [(v["symbol"].encode(), orjson.dumps(v)) for v in values]


def test_without_a_checkpoint_features_flow_and_forecasts_begin_when_one_lands(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    models = tmp_path / "models"  # absent, as var/models is on a fresh checkout
    settings = replace(broker_settings, role="all", model_dir=models, serve="model")
    ensure_topics(settings, pipeline_topics(settings))
    make_checkpoint(tmp_path / "incoming" / "first")
    values = bars_from_frame(sixe_bars.iloc[:1200], symbol="6EH4", instrument_id=1)
    before, after = values[:600], values[600:]
    rows_before = clean_history(before)["6EH4"].bars
    reference = forecast_history(values, ForecastEngine(tmp_path / "incoming" / "first"))
    expected = {k: q for k, q in reference.items() if k[1] > before[-1]["ts_event"]}
    assert ("6EH4", after[0]["ts_event"]) in expected, "the first bar after must be forecastable"

    with Worker(settings, name="waiting") as worker:
        worker.wait_for_log(WAITING, 60)
        produce(settings.broker, settings.topic_raw, raw(before))
        features = read_topic(settings.broker, settings.topic_features, len(rows_before), 300)
        assert sorted(orjson.loads(m.value)["ts_event"] for m in features) == [
            bar["ts_event"] for bar in rows_before
        ]
        # The forecast stage has taken (and acked) every row: still no forecast.
        wait_until(
            lambda: (
                metric(worker, "barcast_bars_total", stage="forecast", outcome="in")
                >= len(rows_before)
            ),
            "the forecast stage took every feature row",
        )
        assert read_topic(settings.broker, settings.topic_forecasts, idle_s=1) == []
        assert metric(worker, "barcast_forecasts_total") == 0
        assert metric(worker, LOOP, work="agent") > 0 and metric(worker, LOOP, work="publish") == 0

        models.mkdir()
        os.rename(tmp_path / "incoming" / "first", models / "first")  # a complete copy, at once
        worker.wait_for_log("serving the first checkpoint", 60)
        produce(settings.broker, settings.topic_raw, raw(after))
        end_of_data(settings)
        messages = read_topic(settings.broker, settings.topic_forecasts, len(expected), 300)
        assert metric(worker, LOOP, work="publish") > 0
        log = worker.log()
    forecasts = forecasts_by_key(messages)
    assert len(messages) == len(forecasts), "a forecast was published twice"
    # Every bar after the checkpoint landed, the first at once (its window filled while the
    # worker waited), none before. The values are the offline windows' (a window missing a row
    # would be far off); that they are bit-identical is test_forecast_pipeline's claim.
    assert sorted(forecasts) == sorted(expected)
    for key, quantiles in expected.items():
        assert np.allclose(model_quantiles(forecasts[key]), quantiles, rtol=1e-5, atol=0), key
    assert log.count(WAITING) == 1 and "Traceback" not in log
