"""BARCAST_EXPLAIN=true through the real broker and a real worker: one explanation per forecast
on the explain topic, each valid against deploy/schemas/topics/forecasts.explain.json (as
`read_topic` checks every message it reads), next to its forecast (same key and partition), and
equal to the offline engine's explanation of the same window."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pandas as pd
import pytest

from features.corrections import bars_from_frame
from model.serving.explain import SCHEMA_VERSION
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import clean_history, window_requests
from streams.kafka import ensure_topics, pipeline_topics
from streams.schema import decode_explanation
from streams.settings import Settings
from tests.checkpoints import make_checkpoint
from tests.kafka_io import produce, read_topic
from tests.model.serving.test_explain import TOLERANCE, flat
from tests.streams.worker.test_first_checkpoint import raw
from tests.streams.worker.test_forecasts import end_of_data, forecasts_by_key
from tests.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
TOP_K = 5


def offline_explanations(values: list[dict], engine: ForecastEngine) -> dict:
    """(symbol, ts_event) -> the explanation the engine gives that window offline."""
    out = {}
    for symbol, clean in clean_history(values).items():
        requests = window_requests(symbol, clean, engine.lookback)
        for start in range(0, len(requests), 256):
            chunk = requests[start : start + 256]
            _, explanations = engine.predict_explained(chunk, top_k=TOP_K)
            for request, explanation in zip(chunk, explanations, strict=True):
                out[(symbol, request.ts_event)] = explanation
    return out


def test_every_forecast_gets_one_explanation_on_the_explain_topic(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    make_checkpoint(tmp_path / "models" / "first")
    settings = replace(
        broker_settings,
        role="all",
        model_dir=tmp_path / "models",
        explain=True,
        explain_top_k=TOP_K,
    )
    ensure_topics(settings, pipeline_topics(settings))
    values = bars_from_frame(sixe_bars.iloc[:700], symbol="6EH4", instrument_id=1)
    reference = offline_explanations(values, ForecastEngine(tmp_path / "models" / "first"))
    assert len(reference) > 300

    with Worker(settings, name="explain") as worker:
        produce(settings.broker, settings.topic_raw, raw(values))
        end_of_data(settings)
        forecasts = read_topic(settings.broker, settings.topic_forecasts, len(reference), 300)
        explained = read_topic(settings.broker, settings.topic_explain, len(reference), 120)
        log = worker.log()
    assert "Traceback" not in log

    by_key = forecasts_by_key(forecasts)
    where = {
        (orjson.loads(m.value)["symbol"], orjson.loads(m.value)["ts_event"]): m for m in forecasts
    }
    seen = {}
    for message in explained:
        value = decode_explanation(message.value)
        key = (value["symbol"], value["ts_event"])
        assert key not in seen, f"{key} explained twice"
        seen[key] = value
        assert message.key == value["symbol"].encode()
        assert message.partition == where[key].partition
        assert value["model_id"] == by_key[key]["model_id"]
        assert value["fingerprint"] == by_key[key]["fingerprint"]
        assert value["schema_version"] == SCHEMA_VERSION
        assert len(value["historical"]) == TOP_K
    assert by_key.keys() == reference.keys()
    assert seen.keys() == by_key.keys(), f"{len(seen)} explanations of {len(by_key)} forecasts"
    for key, expected in reference.items():
        got = {name: v for name, v in seen[key].items() if name in expected}
        a, b = flat(got), flat(expected)
        assert a.keys() == b.keys(), key
        assert max(abs(a[n] - b[n]) for n in a) <= TOLERANCE, key
