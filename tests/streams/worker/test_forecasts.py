"""The whole pipeline through the real broker and real worker processes, held to the offline
reference: the same corrections, features and batch-invariant inference in one process, and
the same scoring and online calibration (model.serving.conformal.calibrate_offline)."""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest

from features.corrections import bars_from_frame
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import Key, forecast_history, served_history
from model.serving.scoring import ScoreValue
from model.serving.skill import ServeMode
from streams.ingest.convert import sixe_dbn
from streams.ingest.producer import BarProducer
from streams.ingest.replay import Replay, ReplayOptions
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import Settings
from tests.checkpoints import make_checkpoint, torch_threads_of_a_worker
from tests.kafka_io import Message, produce, read_topic
from tests.topic_logs import ForecastLog, ScoreLog, metric, wait_for_metric
from tests.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
QUANTILES = ("q10", "q50", "q90")


def pipeline_settings(
    base: Settings,
    tmp_path: Path,
    seed: int = 0,
    checkpoint: Path | None = None,
    serve: str = "model",
) -> Settings:
    """Role `all` on its topics, serving a checkpoint of `seed`, or a copy of `checkpoint`: the
    model's forecasts (a random-weight model loses to the baselines, which `auto` would serve)
    unless `serve` says otherwise."""
    if checkpoint is None:
        make_checkpoint(tmp_path / "models" / "first", seed=seed)
    else:
        shutil.copytree(checkpoint, tmp_path / "models" / "first")
    settings = replace(base, role="all", model_dir=tmp_path / "models", serve=serve)
    ensure_topics(settings, pipeline_topics(settings))
    return settings


def end_of_data(settings: Settings) -> None:
    """END_OF_INTERVAL on every partition: the last minute is complete."""
    producer = BarProducer(settings, settings.topic_raw)
    producer.send_control(time.time_ns())
    assert producer.flush() == 0


def produce_bars(settings: Settings, values: list[dict[str, Any]]) -> None:
    """`values` to the raw topic, each keyed by its symbol (its partition, as a feed's)."""
    produce(
        settings.broker,
        settings.topic_raw,
        [(v["symbol"].encode(), orjson.dumps(v)) for v in values],
    )


def forecasts_by_key(messages: list[Message]) -> dict[Key, dict]:
    """De-duplicated by (symbol, ts_event, model id); one model per test run here."""
    out: dict[Key, dict] = {}
    for message in messages:
        value = orjson.loads(message.value)
        assert message.key == value["symbol"].encode()
        out[(value["symbol"], value["ts_event"])] = value
    return out


def model_quantiles(value: dict) -> np.ndarray:
    """A forecast's quantiles as the model made them `(horizon, quantile)`: online calibration
    keeps them in `raw_q*`."""
    prefix = "raw_" if "schema_version" in value else ""
    return np.array([value[prefix + q] for q in QUANTILES]).T


def assert_matches(reference: dict[Key, np.ndarray], forecasts: dict[Key, dict]) -> None:
    assert forecasts.keys() == reference.keys(), (
        f"missing {sorted(reference.keys() - forecasts.keys())[:5]}, "
        f"unexpected {sorted(forecasts.keys() - reference.keys())[:5]}"
    )
    for key, quantiles in reference.items():
        assert np.array_equal(model_quantiles(forecasts[key]), quantiles), key


def raw_values(settings: Settings, files: tuple[Path, ...]) -> list[dict]:
    """What a replay of `files` puts on bars.raw, as the offline reference reads it."""
    import databento

    values: list[dict] = []
    for path in files:
        frame = (
            databento.DBNStore.from_file(path)
            .to_df(price_type="fixed", pretty_ts=False, map_symbols=True)
            .reset_index()
        )
        values += bars_from_frame(frame)
    return values


def test_every_bar_past_warm_up_gets_exactly_one_forecast(
    broker_settings: Settings, tmp_path: Path, dbn_files: list[Path]
) -> None:
    settings = pipeline_settings(broker_settings, tmp_path)
    files = (sixe_dbn(settings), *[f for f in dbn_files if "esu4-nqu4" in f.name])
    reference = forecast_history(
        raw_values(settings, files), ForecastEngine(tmp_path / "models" / "first")
    )
    assert len(reference) > 25_000
    with Worker(settings):
        summary = Replay(settings, ReplayOptions(files=files, topic=settings.topic_raw)).run()
        end_of_data(settings)
        messages = read_topic(
            settings.broker, settings.topic_forecasts, len(reference), timeout_s=400
        )
    assert summary.produced == 30_056
    forecasts = forecasts_by_key(messages)
    assert len(messages) == len(forecasts), "a forecast was published twice"
    assert_matches(reference, forecasts)
    sample = next(iter(forecasts.values()))
    assert sample["horizons"] == list(range(1, 11))
    assert np.allclose(sample["price_q50"], sample["close"] * np.exp(sample["q50"]))


def assert_same(what: str, published: dict[Any, Any], expected: dict[Any, Any]) -> None:
    """`published` is `expected`; if not, say which keys are missing or extra, and which
    fields of the first few others differ (a whole-dict diff of thousands of records is noise)."""
    if published == expected:
        return
    missing, extra = (
        sorted(expected.keys() - published.keys()),
        sorted(published.keys() - expected.keys()),
    )
    changed = [k for k in sorted(expected.keys() & published.keys()) if published[k] != expected[k]]
    fields = [
        (
            k,
            {
                f: (published[k].get(f), v)
                for f, v in expected[k].items()
                if published[k].get(f) != v
            },
        )
        for k in changed[:3]
    ]
    raise AssertionError(
        f"{what}: {len(missing)} missing {missing[:5]}, {len(extra)} extra {extra[:5]}, "
        f"{len(changed)} changed (keys {changed[:10]}); the first ones' fields "
        f"(published, expected): {fields}"
    )


def kill_and_resume(
    settings: Settings,
    bars: list[dict[str, Any]],
    logs: tuple[ForecastLog, ScoreLog],
    counts: tuple[int, int],
) -> Worker:
    """Kill a worker of `settings` after its first checkpoint and 500 forecasts, whatever the
    speed; check the kill landed mid-stream; run a second one to the end of `bars`. The last
    2,000 bars go in only after the kill: it cannot come after the last forecast, however far
    behind the worker this test's reading is."""
    (forecasts, scores), (total, scored) = logs, counts
    produce_bars(settings, bars[:-2000])
    worker = Worker(settings, name="first").start()
    wait_for_metric(worker, "barcast_checkpoints_total", 1)
    forecasts.read_until(500)
    worker.kill()
    before = forecasts.read_to_end()
    assert 0 < before < total, f"kill after {before} of {total} forecasts"
    produce_bars(settings, bars[-2000:])
    with Worker(settings, name="second") as second:
        end_of_data(settings)
        # One symbol, one partition: by its last new forecast every repeat has been read, and
        # ForecastLog fails on a repeat whose bytes differ from the first.
        assert forecasts.read_until(total, timeout_s=300) == total
        assert scores.read_until(scored, timeout_s=60) == scored
    return second


@dataclass(frozen=True)
class Uninterrupted:
    """What an uninterrupted run of a checkpoint over `values` publishes, serving `auto`."""

    checkpoint: Path
    values: list[dict[str, Any]]
    reference: dict[Key, np.ndarray]  # the model's quantiles
    published: list[dict[str, Any]]  # `forecasts` values: calibrated, the model's or a baseline's
    scores: dict[Key, ScoreValue]  # with the shadow baselines' pinball


@pytest.fixture(scope="module")
def uninterrupted(
    tmp_path_factory: pytest.TempPathFactory, sixe_bars: pd.DataFrame
) -> Uninterrupted:
    """5,000 bars of one symbol, computed once for the restart test of every role: the random
    model serves until it loses to a baseline, which then serves (`served_history`)."""
    checkpoint = tmp_path_factory.mktemp("uninterrupted") / "first"
    make_checkpoint(checkpoint)
    values = bars_from_frame(sixe_bars.iloc[:5000], symbol="6EH4", instrument_id=1)
    with torch_threads_of_a_worker():
        engine = ForecastEngine(checkpoint)
        reference = forecast_history(values, engine)
        published, scores = served_history(values, engine, mode=ServeMode.AUTO)
    return Uninterrupted(checkpoint, values, reference, published, scores)


@pytest.mark.parametrize("role", ["all", "forecast"])
def test_a_killed_worker_resumes_with_the_same_forecasts_and_scores(
    broker_settings: Settings, tmp_path: Path, uninterrupted: Uninterrupted, role: str
) -> None:
    """Role `all`: the one worker is killed. Role `forecast`: a `stream` worker runs upstream
    throughout and the forecast worker is killed, its group resuming on the features topic."""
    # Checkpoints every 0.5 s of the busy worker: the kill lands after some, so the second
    # worker resumes from stored states, windows, scores and calibrations, not from scratch.
    settings = pipeline_settings(
        broker_settings, tmp_path, checkpoint=uninterrupted.checkpoint, serve="auto"
    )
    settings = replace(settings, checkpoint_max_s=0.5)
    values, reference = uninterrupted.values, uninterrupted.reference
    calibrated, expected_scores = uninterrupted.published, uninterrupted.scores
    assert {v["source"] for v in calibrated} == {"model", "volatility_scale", "tod_ewma"}
    forecasts = ForecastLog(settings.broker, settings.topic_forecasts, settings.partitions)
    scores = ScoreLog(settings.broker, settings.topic_scores, settings.partitions)
    upstream = Worker(replace(settings, role="stream"), name="stream")
    try:
        with upstream if role == "forecast" else contextlib.nullcontext():
            killed = replace(settings, role=role)
            counts = len(reference), len(expected_scores)
            second = kill_and_resume(killed, values, (forecasts, scores), counts)
    finally:
        forecasts.close()
        scores.close()
    assert "Restoring state from changelog topics" in second.log()
    published = {k[:2]: orjson.loads(forecasts.identity(v)) for k, v in forecasts.values.items()}
    assert_same("forecasts", published, {(v["symbol"], v["ts_event"]): v for v in calibrated})
    assert_same(
        "scores", {key: orjson.loads(v) for key, v in scores.values.items()}, expected_scores
    )
    model_id = orjson.loads(next(iter(forecasts.values.values())))["model_id"]
    served = {(s, ts): orjson.loads(v) for (s, ts, m), v in forecasts.values.items()}
    assert_matches(
        {k: q for k, q in reference.items() if served[k]["source"] == "model"},
        {k: v for k, v in served.items() if v["model_id"] == model_id and v["source"] == "model"},
    )
    assert len({m for _, _, m in forecasts.values}) == 1


def test_a_worker_joining_mid_stream_takes_partitions_over_with_their_state(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    """Worker a serves every partition through the first 1,000 bars of each symbol; b joins and
    the group rebalances; the other 500 go in once b is ready. Whichever worker serves a
    partition after the move continues it from the states a committed at the revoke, so both
    together publish what one uninterrupted run does (a repeat must repeat every byte)."""
    settings = pipeline_settings(broker_settings, tmp_path)
    symbols = ("6EH4", "6EZ4", "6EU5", "6EM4")  # one per partition of four (murmur2)
    history = [bars_from_frame(sixe_bars.iloc[:1500], symbol=s, instrument_id=1) for s in symbols]
    values = [v for bars in history for v in bars]
    reference = forecast_history(values, ForecastEngine(tmp_path / "models" / "first"))
    first, rest = [bars[:1000] for bars in history], [bars[1000:] for bars in history]
    joined_at = first[0][-1]["ts_event"]
    served_before = sum(ts <= joined_at for _, ts in reference)
    forecasts = ForecastLog(settings.broker, settings.topic_forecasts, settings.partitions)
    try:
        produce_bars(settings, [v for bars in first for v in bars])
        with Worker(settings, name="a"):
            assert forecasts.read_until(served_before, timeout_s=300) == served_before
            with Worker(settings, name="b") as b:
                produce_bars(settings, [v for bars in rest for v in bars])
                end_of_data(settings)
                assert forecasts.read_until(len(reference), timeout_s=300) == len(reference)
                served_by_b = metric(b, "barcast_forecasts_total")
    finally:
        forecasts.close()
    assert served_by_b, "b served no partition: the group never rebalanced"
    assert "Restoring state from changelog topics" in b.log()
    published = {(s, ts): orjson.loads(v) for (s, ts, _), v in forecasts.values.items()}
    assert_matches(reference, published)


def test_stream_and_forecast_roles_run_as_separate_worker_groups(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    settings = pipeline_settings(broker_settings, tmp_path)
    values = bars_from_frame(sixe_bars.iloc[:1200], symbol="6EH4", instrument_id=1)
    reference = forecast_history(values, ForecastEngine(tmp_path / "models" / "first"))
    produce_bars(settings, values)
    stream = Worker(replace(settings, role="stream"), name="stream")
    forecast = Worker(replace(settings, role="forecast"), name="forecast")
    with stream, forecast:
        end_of_data(settings)
        messages = read_topic(
            settings.broker, settings.topic_forecasts, len(reference), timeout_s=300
        )
    assert_matches(reference, forecasts_by_key(messages))
    assert "streams.agents.forecast" in forecast.log()
    assert "streams.agents.forecast" not in stream.log()
    assert "group barcast-" in forecast.log() and "-forecast" in forecast.log()


def test_hot_reload_swaps_the_model_between_batches(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    """With BARCAST_CANARY=off: the new checkpoint serves at once (test_canary: on)."""
    settings = replace(pipeline_settings(broker_settings, tmp_path), canary=False)
    values = bars_from_frame(sixe_bars.iloc[:3000], symbol="6EH4", instrument_id=1)
    first = forecast_history(values, ForecastEngine(tmp_path / "models" / "first"))
    make_checkpoint(tmp_path / "staging", seed=5)
    second = forecast_history(values, ForecastEngine(tmp_path / "staging"))
    with Worker(settings) as worker:
        produce_bars(settings, values[:1500])
        before = read_topic(settings.broker, settings.topic_forecasts, 1, timeout_s=120)
        shutil.copytree(tmp_path / "staging", tmp_path / "models" / "second")
        worker.wait_for_log("hot-reloaded checkpoint", 30)
        produce_bars(settings, values[1500:])
        end_of_data(settings)
        messages = read_topic(settings.broker, settings.topic_forecasts, len(first), timeout_s=300)
    assert before
    forecasts = forecasts_by_key(messages)
    assert len(messages) == len(forecasts) == len(first)
    models = [forecasts[k]["model_id"] for k in sorted(forecasts)]
    switch = models.index(models[-1])
    assert models[0] != models[-1] and set(models[switch:]) == {models[-1]}
    for i, key in enumerate(sorted(forecasts)):
        expected = first[key] if i < switch else second[key]
        assert np.array_equal(model_quantiles(forecasts[key]), expected), key


def test_a_checkpoint_for_other_features_refuses_to_start(
    broker_settings: Settings, tmp_path: Path
) -> None:
    make_checkpoint(tmp_path / "models" / "old", fingerprint="0123456789abcdef")
    settings = replace(broker_settings, role="forecast", model_dir=tmp_path / "models")
    worker = Worker(settings, name="refused")
    with pytest.raises(AssertionError, match=r"worker exited \(78\)"):  # docs/operations.md
        worker.start(ready_timeout_s=60)
    lines = [line for line in worker.log().splitlines() if "feature set 0123456789abcdef" in line]
    assert len(lines) == 1 and "retrain" in lines[0]
    assert "Traceback" not in worker.log()


def test_no_look_ahead(tmp_path: Path, sixe_bars: pd.DataFrame) -> None:
    """Changing every bar after time t leaves the forecasts up to t unchanged."""
    make_checkpoint(tmp_path / "model")
    engine = ForecastEngine(tmp_path / "model")
    values = bars_from_frame(sixe_bars.iloc[:600], symbol="6EH4", instrument_id=1)
    cut = 450
    rng = np.random.default_rng(3)
    altered = values[:cut] + [
        {
            **bar,
            **{f: int(bar[f] * (1 + rng.normal(0, 0.002))) for f in ("open", "close")},
            "volume": bar["volume"] * 3,
        }
        for bar in values[cut:]
    ]
    original = forecast_history(values, engine)
    changed = forecast_history(altered, ForecastEngine(tmp_path / "model"))
    t = values[cut - 1]["ts_event"]
    before = [key for key in original if key[1] <= t]
    assert len(before) > 100
    assert all(np.array_equal(original[key], changed[key]) for key in before)
    after = [key for key in original if key[1] > t and key in changed]
    assert any(not np.array_equal(original[key], changed[key]) for key in after)
