"""Shadow checkpoints (canaries) through the real broker and real worker processes: a new
checkpoint dropped into the model directory forecasts beside the serving one on
`forecasts.shadow`; one whose median is off by a known amount is refused once its scores are in,
one that forecasts better, or the same, is promoted and serves from the row of its verdict; and
a worker SIGKILLed in the middle of a canary publishes, after its restart, the same bytes on
every topic as one never killed, reaching the same verdict at the same row."""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from features.corrections import bars_from_frame
from model.serving.canary import CANARY
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import DELIVERY, forecast_history
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import Settings
from streams.tools.stats_cli import default_url, scrape
from tests.checkpoints import make_checkpoint
from tests.kafka_io import produce
from tests.streams.worker.test_first_checkpoint import wait_until
from tests.streams.worker.test_forecasts import end_of_data
from tests.topic_logs import ForecastLog, ScoreLog, metric
from tests.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("worker_threads")]
SYMBOL = "6EH4"
BARS, SPLIT = 2400, 1100  # the canary lands after SPLIT bars: ~1,250 minutes of it to score
CHUNK = 100  # bars produced at a time once it runs
NEEDED = 300  # BARCAST_CANARY_FORECASTS here: a verdict some 300 minutes in
VERDICT = re.compile(r"canary \w+ (promoted|refused) on partition")


@dataclass
class Run:
    """What a run published, by key: `forecasts` and `forecasts.shadow` values (repeats had to
    carry the same bytes), `forecasts.scores` values, and the worker's log lines about the
    canary."""

    forecasts: dict[tuple[Any, ...], bytes]
    shadow: dict[tuple[Any, ...], bytes]
    scores: dict[tuple[Any, ...], bytes]
    log: str  # the lines about the canary
    log_all: str


def settings_for(base: Settings, tmp_path: Path, name: str) -> Settings:
    settings = replace(
        base.isolated(name),
        role="all",
        model_dir=tmp_path / "runs" / name / "models",
        canary_forecasts=NEEDED,
        checkpoint_max_s=0.5,
    )
    ensure_topics(settings, pipeline_topics(settings))
    return settings


def run(
    settings: Settings,
    values: list[dict[str, Any]],
    checkpoints: tuple[Path, Path],
    kill_at: int | None = None,
) -> Run:
    """The incumbent serves SPLIT bars' forecasts; then the canary lands (the worker logs it)
    and the rest of the bars go in, CHUNK at a time once the last chunk's forecasts are out
    (so that the worker commits between them); with `kill_at`, once the canary has that many
    forecasts scored and a commit stored them, the worker is SIGKILLed and a second one
    finishes. Until the verdict and both topics' ends."""
    incumbent, canary = checkpoints
    shutil.copytree(incumbent, settings.model_dir / "incumbent")
    logs = [
        ForecastLog(settings.broker, topic, settings.partitions)
        for topic in (settings.topic_forecasts, settings.topic_shadow)
    ]
    scores = ScoreLog(settings.broker, settings.topic_scores, settings.partitions)
    records = [(SYMBOL.encode(), orjson.dumps(v)) for v in values]
    forecast_ts = sorted(ts for _, ts in forecast_history(values, ForecastEngine(incumbent)))
    worker = Worker(settings, name="first").start()
    try:
        for start in (0, *range(SPLIT, len(values), CHUNK)):
            end = SPLIT if start == 0 else start + CHUNK
            if start == SPLIT:
                shutil.copytree(canary, settings.model_dir / "canary")
                worker.wait_for_log("runs beside", 60)
            produce(settings.broker, settings.topic_raw, records[start:end])
            last = values[min(end, len(values)) - 1]["ts_event"]
            out = sum(ts <= last for ts in forecast_ts)
            assert logs[0].read_until(out, timeout_s=300) == out
            if kill_at is not None and (metric(worker, "barcast_canary_scored") or 0) >= kill_at:
                kill_once_committed(worker)
                assert not VERDICT.search(worker.log()), "the kill came after the verdict"
                logs[1].read_to_end()
                worker, kill_at = Worker(settings, name="second").start(), None
        end_of_data(settings)
        wait_for_verdict(worker)
        assert logs[0].read_until(len(forecast_ts), timeout_s=300) == len(forecast_ts)
        for log in (*logs, scores):
            log.read_to_end()
        text = worker.log()
    finally:
        worker.stop()
        for log in (*logs, scores):
            log.close()
    lines = "\n".join(line for line in text.splitlines() if "canary" in line)
    return Run(logs[0].values, logs[1].values, scores.values, lines, text)


def kill_once_committed(worker: Worker) -> None:
    """SIGKILL once every bar produced so far is committed: the canary's progress is then in
    the stores the next worker restores."""
    lag = {"topic": worker.settings.topic_raw, "partition": "0"}
    wait_until(lambda: labelled(worker, "barcast_consumer_lag", lag) == 0, "no lag")
    worker.kill()


def labelled(worker: Worker, name: str, labels: dict[str, str]) -> float | None:
    text = scrape(default_url(worker.settings), timeout_s=10)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def wait_for_verdict(worker: Worker, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not VERDICT.search(worker.log()):
        assert time.monotonic() < deadline, f"no verdict in {timeout_s}s:\n{worker.log()[-5000:]}"
        worker.check_alive()
        time.sleep(0.2)


def identity(value: bytes) -> bytes:
    """A `forecasts` value without the fields of its delivery (a repeat may differ there)."""
    return orjson.dumps({k: v for k, v in orjson.loads(value).items() if k not in DELIVERY})


def decoded(values: dict[tuple[Any, ...], bytes]) -> list[dict[str, Any]]:
    return sorted((orjson.loads(v) for v in values.values()), key=lambda v: v["ts_event"])


@pytest.fixture(scope="module")
def raw(sixe_bars: pd.DataFrame) -> list[dict[str, Any]]:
    return bars_from_frame(sixe_bars.iloc[:BARS], symbol=SYMBOL, instrument_id=1)


def test_a_worse_canary_is_refused_and_a_kill_in_its_middle_resumes_it_exactly(
    broker_settings: Settings, tmp_path: Path, raw: list[dict[str, Any]]
) -> None:
    good, worse = tmp_path / "good", tmp_path / "worse"
    make_checkpoint(good, median_shift=0.0)
    canary_id = make_checkpoint(worse, median_shift=1.0)
    whole = run(settings_for(broker_settings, tmp_path, "whole"), raw, (good, worse))

    assert f"canary {canary_id} refused on partition" in whole.log
    assert "reason pinball" in whole.log
    shadow = decoded(whole.shadow)
    assert len(shadow) >= NEEDED and {v["source"] for v in shadow} == {CANARY}
    assert {v["model_id"] for v in shadow} == {canary_id}
    assert canary_id not in {orjson.loads(v)["model_id"] for v in whole.forecasts.values()}
    scored = [orjson.loads(v) for v in whole.scores.values() if b'"canary"' in v]
    assert len(scored) >= NEEDED and all(s["canary"]["model_id"] == canary_id for s in scored)
    last_shadow = shadow[-1]["ts_event"]
    assert max(orjson.loads(v)["ts_event"] for v in whole.forecasts.values()) > last_shadow

    killed = run(settings_for(broker_settings, tmp_path, "killed"), raw, (good, worse), NEEDED // 2)
    assert f"canary {canary_id} refused on partition" in killed.log
    # The second worker resumed from a commit past the canary's start: its progress restored
    restored = re.search(
        r"canary-state-changelog\[0\], \d+ records \(\d+ written from offset (\d+)", killed.log_all
    )
    assert restored is not None and int(restored.group(1)) > SPLIT, killed.log_all[-3000:]
    for topic, got, want in (
        ("forecasts", killed.forecasts, whole.forecasts),
        ("forecasts.shadow", killed.shadow, whole.shadow),
    ):
        assert {k: identity(v) for k, v in got.items()} == {
            k: identity(v) for k, v in want.items()
        }, topic
    assert killed.scores == whole.scores


# The canary forecasts its volatility scale's Gaussian quantiles. Against an incumbent of
# random weights it is better; against one forecasting the same quantiles (other weights, so
# another model id) it is the same, and the same is not worse.
@pytest.mark.parametrize("incumbent_shift", [None, 0.0], ids=["better", "same"])
def test_a_canary_better_or_the_same_is_promoted_and_serves_from_its_verdict(
    broker_settings: Settings,
    tmp_path: Path,
    raw: list[dict[str, Any]],
    incumbent_shift: float | None,
) -> None:
    incumbent, canary = tmp_path / "incumbent", tmp_path / "canary"
    incumbent_id = make_checkpoint(incumbent, median_shift=incumbent_shift)
    canary_id = make_checkpoint(canary, seed=1, median_shift=0.0)
    assert canary_id != incumbent_id
    settings = replace(settings_for(broker_settings, tmp_path, "promoted"), serve="model")
    result = run(settings, raw, (incumbent, canary))

    assert f"canary {canary_id} promoted on partition" in result.log
    forecasts = decoded(result.forecasts)
    models = [v["model_id"] for v in forecasts]
    switch = models.index(canary_id)
    assert set(models[:switch]) == {incumbent_id} and set(models[switch:]) == {canary_id}
    shadow = decoded(result.shadow)
    assert len(shadow) >= NEEDED
    assert shadow[-1]["ts_event"] < forecasts[switch]["ts_event"]  # shadow until the verdict
    assert forecasts[switch]["ts_event"] - shadow[-1]["ts_event"] <= 60 * 10**9 * 2
