"""Shadow baselines and the automatic fallback through the real broker and a real worker: every
forecast and score the worker publishes (the baselines' pinball on each score, each forecast's
`source`) equals the offline recomputation (`served_history`), the skill gauges are the score
records' rolling figures, a checkpoint whose median is off by a known amount gives way to the
best baseline at the stated point, after which the published forecasts score exactly as that
baseline does, and a checkpoint as good as the best baseline keeps serving."""

from __future__ import annotations

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
from model.covariates import NS_PER_MIN
from model.serving import baselines
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import DELIVERY, clean_history, served_history
from model.serving.scoring import score_offline
from model.serving.shadow import mean_losses
from model.serving.skill import MIN_SCORED, MODEL, ServeMode, SkillWindow, pooled_skill
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import Settings
from streams.tools.stats_cli import default_url, scrape
from tests.checkpoints import make_checkpoint, torch_threads_of_a_worker
from tests.kafka_io import produce, read_topic
from tests.streams.worker.test_forecasts import end_of_data
from tests.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
SYMBOL = "6EH4"
BARS = 3000  # two trading days: ~2,900 forecasts, ~70 skill revisits
SHIFT = 1.0  # the bad checkpoint's median, in units of its volatility scale: a known bias
HORIZON = 10


@pytest.fixture(scope="module")
def raw(sixe_bars: pd.DataFrame) -> list[dict[str, Any]]:
    return bars_from_frame(sixe_bars.iloc[:BARS], symbol=SYMBOL, instrument_id=1)


def run_worker(settings: Settings, raw: list[dict[str, Any]], forecasts: int, scores: int) -> Any:
    """The `forecasts` values (without `DELIVERY`'s fields) and `forecasts.scores` values
    by key once the worker published `forecasts` and `scores` of them, and its /metrics."""
    ensure_topics(settings, pipeline_topics(settings))
    produce(settings.broker, settings.topic_raw, [(SYMBOL.encode(), orjson.dumps(v)) for v in raw])
    with Worker(settings) as worker:
        end_of_data(settings)
        published = read_topic(settings.broker, settings.topic_forecasts, forecasts, 300)
        scored = read_topic(settings.broker, settings.topic_scores, scores, 120)
        metrics = scrape(default_url(worker.settings), timeout_s=5.0)
    values = [orjson.loads(m.value) for m in published]
    for value in values:
        for name in DELIVERY:
            del value[name]
    by_key = {(v["symbol"], v["ts_event"]): v for v in values}
    records = {
        (r["symbol"], r["ts_event"]): r for r in map(orjson.loads, (m.value for m in scored))
    }
    assert len(by_key) == len(values) and len(records) == len(scored), "a repeat, none restarted"
    return by_key, records, metrics


def served(checkpoint: Path, settings: Settings, raw: list[dict[str, Any]]) -> Any:
    """`served_history` of the worker's checkpoint, with the worker's threads."""
    with torch_threads_of_a_worker():
        return served_history(
            raw, ForecastEngine(checkpoint), mode=ServeMode(settings.serve),
            window=settings.score_window,
        )  # fmt: skip


def skill_gauges(metrics: str) -> dict[tuple[int, str], tuple[float, ...]]:
    values: dict[str, dict[tuple[int, str], float]] = {}
    for family in text_string_to_metric_families(metrics):
        if family.name.startswith("barcast_forecast_skill"):
            for sample in family.samples:
                key = int(sample.labels["horizon"]), sample.labels["baseline"]
                values.setdefault(sample.name, {})[key] = sample.value
    skill = values.get("barcast_forecast_skill", {})
    lower, upper = values["barcast_forecast_skill_lower"], values["barcast_forecast_skill_upper"]
    return {key: (skill[key], lower[key], upper[key]) for key in skill}


def rolling_skill(records: dict[Any, dict[str, Any]], window: int) -> dict[Any, tuple[float, ...]]:
    """The skill figures of the records' last `window` scored forecasts (model.serving.skill)."""
    losses = SkillWindow(window)
    for _, record in sorted(records.items()):
        if record["unscored"] is None:
            columns = [mean_losses(record["pinball"])]
            for pinball in record["baselines"].values():
                columns.append(
                    np.full(HORIZON, np.nan) if pinball is None else mean_losses(pinball)
                )
            losses.append(np.column_stack(columns))
    return {key: tuple(found[:3]) for key, found in pooled_skill([losses]).items()}


def test_a_biased_model_gives_way_to_the_best_baseline_and_every_score_is_as_offline(
    broker_settings: Settings, tmp_path: Path, raw: list[dict[str, Any]]
) -> None:
    checkpoint = tmp_path / "incoming" / "biased"
    make_checkpoint(checkpoint, median_shift=SHIFT)
    settings = replace(broker_settings, role="all", model_dir=tmp_path / "models")
    assert Settings().serve == settings.serve == "auto" and settings.shadow_baselines  # defaults
    shutil.copytree(checkpoint, settings.model_dir / "biased")
    expected, expected_scores = served(checkpoint, settings, raw)
    published, scores, metrics = run_worker(settings, raw, len(expected), len(expected_scores))

    assert orjson.dumps(sorted(published.items())) == orjson.dumps(
        sorted(((v["symbol"], v["ts_event"]), v) for v in expected)
    )
    assert orjson.dumps(sorted(scores.items())) == orjson.dumps(sorted(expected_scores.items()))
    gauges = skill_gauges(metrics)
    assert len(gauges) == 2 * HORIZON
    rolling = rolling_skill(scores, settings.score_window)
    assert gauges.keys() == rolling.keys()
    assert all(gauges[k] == pytest.approx(rolling[k], rel=1e-12) for k in rolling), gauges
    assert all(upper < 0 for _, _, upper in gauges.values()), gauges

    # The stated point: the skill is revisited at the MIN_SCORED-th scored forecast, and its
    # choice serves from that forecast's bar + H + 1 minutes on.
    scored = sorted(ts for (_, ts), r in scores.items() if r["unscored"] is None)
    due = scored[MIN_SCORED - 1] + (HORIZON + 1) * NS_PER_MIN
    sources = {ts: v["source"] for (_, ts), v in published.items()}
    assert {s for ts, s in sources.items() if ts < due} == {MODEL}
    assert MODEL not in {s for ts, s in sources.items() if ts >= due}
    assert sum(ts >= due for ts in sources) > 2500

    # From there what is published scores as the baseline it comes from, to the bit.
    clean = clean_history(raw)[SYMBOL].bars
    rescored = score_offline(list(published.values()), clean)
    fallback = [k for k, r in scores.items() if r["source"] != MODEL and r["unscored"] is None]
    assert len(fallback) > 2000
    for key in fallback:
        assert rescored[key]["pinball"] == scores[key]["baselines"][scores[key]["source"]]
    model = np.mean([mean_losses(scores[k]["pinball"]).mean() for k in fallback])
    now = np.mean([mean_losses(rescored[k]["pinball"]).mean() for k in fallback])
    assert now < 0.8 * model, (now, model)


def test_a_model_as_good_as_the_best_baseline_keeps_serving(
    broker_settings: Settings, tmp_path: Path, raw: list[dict[str, Any]]
) -> None:
    """The checkpoint forecasts what its `volatility_scale` baseline does (Gaussian quantiles of
    its scale, float32 against float64), and its `tod_ewma` baseline is not defined over these
    bars (half-lives longer than they are): the best baseline is the model's equal."""
    checkpoint = tmp_path / "models" / "good"
    make_checkpoint(checkpoint, median_shift=0.0)
    ones = np.ones((HORIZON, 3)).tolist()
    never = {"halflife_bars": 10 * BARS, "flat_halflife_bars": 10 * BARS, "profile_weight": 1.0}
    fitted = {"volatility_scale": {"interval_scale": ones}, "tod_ewma": {"interval_scale": ones}}
    fitted["tod_ewma"] |= never
    baselines.save(checkpoint, fitted, {"test": "unit scales"})
    settings = replace(broker_settings, role="all", model_dir=tmp_path / "models")
    expected, expected_scores = served(checkpoint, settings, raw)
    published, scores, metrics = run_worker(settings, raw, len(expected), len(expected_scores))

    assert {v["source"] for v in published.values()} == {MODEL}
    assert orjson.dumps(sorted(scores.items())) == orjson.dumps(sorted(expected_scores.items()))
    gauges = skill_gauges(metrics)
    assert {baseline for _, baseline in gauges} == {"volatility_scale"}
    assert all(abs(skill) < 1e-4 for skill, _, _ in gauges.values()), gauges
