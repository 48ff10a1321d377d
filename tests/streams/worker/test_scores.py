"""Scores and online calibration through the real broker and a real worker, on a checkpoint whose
80 % interval is half as wide as calibrated: every `forecasts.scores` record equals
`score_offline` of the run's `forecasts` and `bars.clean` topics, the published forecasts equal
the offline calibration of the checkpoint's own, the coverage gauges are the records' rolling
figures, and coverage is far below nominal without online calibration and near it with."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from features.corrections import bars_from_frame
from model.calibration import fit_interval_scale
from model.serving.conformal import CalibrationConfig, calibrate_offline
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import (
    DELIVERY,
    SymbolBars,
    clean_history,
    forecast_history,
    forecast_values,
)
from model.serving.scoring import ScoreValue, decode_score, score_offline
from model.serving.scoring_state import Rolling, pooled_figures
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import Settings
from streams.tools.stats_cli import default_url, scrape
from tests.checkpoints import make_checkpoint, torch_threads_of_a_worker
from tests.kafka_io import produce, read_topic
from tests.streams.worker.test_forecasts import end_of_data
from tests.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
SYMBOL = "6EH4"
# Bars of the month: ~4 trading days, ~5,700 scored forecasts. Enough that the coverage from the
# 300th on has a standard error under 2 % (overlapping horizons and neighbouring minutes are
# correlated: ~500 independent outcomes), so the 80 +- 3 % band tells a calibrated
# interval (80 %) from one still too narrow, and few enough for the two worker runs to fit in a
# minute or so on two cores. Without online calibration the halved interval covers far less
# than 70 %, the bound.
BARS = 6000
START = 300  # scored forecasts the online calibration may take to settle
NARROW = 0.5  # the interval around q50 as a share of the calibrated one
LEVELS = (0.1, 0.5, 0.9)


@pytest.fixture(scope="module")
def month(sixe_bars: pd.DataFrame) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first BARS bars as `bars.raw` values, and as `bars.clean` values."""
    raw = bars_from_frame(sixe_bars.iloc[:BARS], symbol=SYMBOL, instrument_id=1)
    return raw, clean_history(raw)[SYMBOL].bars


@pytest.fixture(scope="module")
def narrow(
    tmp_path_factory: pytest.TempPathFactory, month: tuple[list[dict], list[dict]]
) -> tuple[Path, list[dict[str, Any]]]:
    """A test checkpoint whose interval scale calibrates its q10/q90 on these bars (fitted on
    them), times NARROW; and its `forecasts` values."""
    with torch_threads_of_a_worker():  # the worker's: its forecasts equal these exactly
        return narrow_checkpoint(tmp_path_factory.mktemp("narrow") / "narrow", *month)


def narrow_checkpoint(
    directory: Path, raw: list[dict[str, Any]], clean: list[dict[str, Any]]
) -> tuple[Path, list[dict[str, Any]]]:
    """`narrow`'s checkpoint, written to `directory`, and its forecasts."""
    make_checkpoint(directory)
    engine = ForecastEngine(directory)
    values = forecast_values(forecast_history(raw, engine), {SYMBOL: SymbolBars(clean)}, engine)
    records = score_offline(values, clean)
    scored = [(v, r) for v in values if (r := records.get((SYMBOL, v["ts_event"]))) is not None]
    scored = [(v, r) for v, r in scored if r["unscored"] is None]
    q = np.array([[v[name] for name in ("q10", "q50", "q90")] for v, _ in scored])
    y = np.array([r["realized"] for _, r in scored])
    scale = fit_interval_scale(q.transpose(0, 2, 1), y, LEVELS)
    scale[:, [0, 2]] *= NARROW
    config = json.loads((directory / "config.json").read_text())
    config["interval_scale"] = scale.tolist()
    (directory / "config.json").write_text(json.dumps(config))
    engine = ForecastEngine(directory)
    values = forecast_values(forecast_history(raw, engine), {SYMBOL: SymbolBars(clean)}, engine)
    return directory, values


def run_worker(settings: Settings, raw: list[dict[str, Any]], forecasts: int, clean: int) -> Any:
    """The topics' values after the worker has published `forecasts` forecasts, every bar's
    clean bar and every decided score; and its /metrics then."""
    ensure_topics(settings, pipeline_topics(settings))
    produce(settings.broker, settings.topic_raw, [(SYMBOL.encode(), orjson.dumps(v)) for v in raw])
    with Worker(settings) as worker:
        end_of_data(settings)
        published = decoded(read_topic(settings.broker, settings.topic_forecasts, forecasts, 300))
        bars = read_topic(settings.broker, settings.topic_clean, clean + settings.partitions, 60)
        bars = [orjson.loads(m.value) for m in bars if b"control" not in m.value]
        expected = score_offline(published, bars)
        scores = decoded(read_topic(settings.broker, settings.topic_scores, len(expected), 120))
        metrics = scrape(default_url(worker.settings), timeout_s=5.0)
    return published, bars, expected, scores, metrics


def decoded(messages: list[Any]) -> list[dict[str, Any]]:
    """The values, each key (symbol, ts_event) once: no worker restarted, so none repeats."""
    out = [orjson.loads(m.value) for m in messages]
    assert len({(v["symbol"], v["ts_event"]) for v in out}) == len(out)
    assert all(m.key == v["symbol"].encode() for m, v in zip(messages, out, strict=True))
    return out


def coverage_after(records: list[ScoreValue], start: int) -> float:
    """Share of labels inside q10..q90 over the scored forecasts from the `start`-th on."""
    scored = sorted((r for r in records if r["unscored"] is None), key=lambda r: r["ts_event"])
    return float(np.mean([r["inside"] for r in scored[start:]]))


def gauges(metrics: str) -> dict[tuple[int, str], float]:
    out = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            horizon = sample.labels.get("horizon")
            if family.name == "barcast_forecast_coverage":
                out[int(horizon), "coverage"] = sample.value
            elif family.name == "barcast_forecast_pinball":
                out[int(horizon), sample.labels["quantile"]] = sample.value
    return out


@pytest.mark.parametrize("online", [False, True], ids=["static", "online"])
def test_online_calibration_brings_a_too_narrow_interval_to_nominal_coverage(
    broker_settings: Settings,
    tmp_path: Path,
    month: tuple[list[dict], list[dict]],
    narrow: tuple[Path, list[dict[str, Any]]],
    online: bool,
) -> None:
    raw, clean = month
    directory, model = narrow
    models = tmp_path / "models"
    settings = replace(
        broker_settings,
        role="all",
        online_calibration=online,
        model_dir=models,
        shadow_baselines=False,  # the model's own scores (test_shadow.py: the baselines')
        serve="model",
        canary=False,
    )
    shutil.copytree(directory, models / "narrow")
    published, bars, expected, scores, metrics = run_worker(settings, raw, len(model), len(clean))

    reference = calibrate_offline(model, clean, CalibrationConfig(enabled=online))
    for value in published:
        for name in DELIVERY:
            del value[name]
    assert len(published) == len(reference)
    for got, want in zip(published, reference, strict=True):
        assert got == want, [k for k in {*got, *want} if got.get(k) != want.get(k)]
    assert bars == clean
    assert sorted((s["symbol"], s["ts_event"]) for s in scores) == sorted(expected)
    assert all(
        decode_score(orjson.dumps(s)) == expected[s["symbol"], s["ts_event"]] for s in scores
    )
    rolling = Rolling(window=settings.score_window)
    for record in sorted(scores, key=lambda r: r["ts_event"]):
        rolling.add(record)  # type: ignore[arg-type]
    assert gauges(metrics) == pytest.approx(pooled_figures([rolling]), rel=1e-12)

    coverage = coverage_after(scores, START)  # type: ignore[arg-type]
    if online:
        assert abs(coverage - 0.8) <= 0.03, coverage
    else:
        assert coverage < 0.7, coverage
