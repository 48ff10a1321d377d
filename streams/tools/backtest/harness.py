"""One backtest run: a broker (embedded, or `BARCAST_BROKER` with topics of the run's own), a
real worker serving the checkpoint, the files replayed into `bars.raw`, everything the worker
published read back, scored, and the report written."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from model.serving.messages import quantile_name
from streams.broker import EmbeddedBroker
from streams.kafka import ensure_topics, pipeline_topics
from streams.process import WorkerProcess
from streams.settings import EMBEDDED, Settings
from streams.tools.backtest import figures, html, inputs
from streams.tools.backtest.collect import BacktestFailed, Collected, collect
from streams.tools.backtest.score_table import score_table
from streams.tools.backtest.skill_figures import skill_figures

REPORT_VERSION = 1
IDLE_TIMEOUT_S = 300.0  # a cold worker compiles the feature kernels before its first output
JSON_NAME, HTML_NAME = "backtest.json", "backtest.html"
SCRATCH_MARK = ".barcast-backtest"  # in the scratch directory a run makes, and empties next time


@dataclass(frozen=True)
class BacktestResult:
    json_path: Path
    html_path: Path
    settings: Settings  # the run's broker and topics, to read them again
    report: dict[str, Any]


def run_backtest(
    settings: Settings, files: list[Path], checkpoint: Path, out: Path
) -> BacktestResult:
    from features.engine import FINGERPRINT
    from model.checkpoint import load

    described = inputs.describe(files)
    _, meta, model_id = load(checkpoint, FINGERPRINT)
    work = scratch(out)
    replayed = inputs.replay_files(files, work / "inputs")
    with broker(settings, work) as run_settings:
        run_settings = replace(run_settings, role="all", model_dir=checkpoint, work_dir=work)
        try:
            ensure_topics(run_settings, pipeline_topics(run_settings))
        except RuntimeError as exc:  # the configured broker refused a topic: it says why
            raise BacktestFailed(str(exc)) from None
        collected = replay_and_collect(run_settings, replayed, meta.config.lookback)
    quantiles = [quantile_name(q) for q in meta.config.quantiles]
    table = score_table(collected.forecasts, collected.clean, meta.config.horizon, quantiles)
    report = {
        "barcast_backtest": REPORT_VERSION,
        "model_id": model_id,
        "feature_fingerprint": meta.feature_fingerprint,
        "files": described,
        "settings": {
            "lookback": meta.config.lookback,
            "horizon": meta.config.horizon,
            "quantiles": quantiles,
            "nominal_coverage": meta.config.quantiles[-1] - meta.config.quantiles[0],
            "fill_gaps": settings.fill_gaps,
            "device": settings.device,
            "serve": settings.serve,
        },
        **figures.figures(collected, table, quantiles),
        "skill": skill_figures(collected.scores),
    }
    served = {value["model_id"] for value in collected.forecasts.values()}
    if served - {model_id}:
        raise BacktestFailed(f"the worker served {sorted(served)}, not only {model_id}")
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / JSON_NAME, out / HTML_NAME
    json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    html_path.write_text(html.page(report, collected))
    return BacktestResult(json_path, html_path, run_settings, report)


def scratch(out: Path) -> Path:
    """The run's scratch under `out`, empty (a fresh worker state): only one a backtest made
    (`SCRATCH_MARK`) is emptied; another directory of that name is the user's, and refused."""
    work = out / "work"
    if work.exists():
        if not (work / SCRATCH_MARK).is_file():
            raise inputs.InputError(
                f"{work} exists and is not a backtest's scratch ({SCRATCH_MARK}): barcast would "
                f"empty it; move it, or pass another --out (one an older barcast's backtest "
                f"left has no mark: delete it)"
            )
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / SCRATCH_MARK).touch()
    return work


@contextmanager
def broker(settings: Settings, work: Path) -> Iterator[Settings]:
    """A fresh embedded broker, or the configured one with topics and a group of this run's
    own (a topic that already holds bars would be read as part of the run)."""
    if settings.broker != EMBEDDED:
        yield settings.isolated(f"backtest-{uuid.uuid4().hex[:12]}")
        return
    with EmbeddedBroker(work / "broker") as embedded:
        yield replace(settings, broker=embedded.bootstrap, app_id="barcast-backtest")


def replay_and_collect(settings: Settings, files: tuple[Path, ...], lookback: int) -> Collected:
    from streams.ingest.replay import Replay, ReplayOptions

    worker = WorkerProcess(settings, name="backtest-worker")
    print(f"[backtest] starting a worker (log: {worker.log_path})", flush=True)
    with worker:
        options = ReplayOptions(files=files, topic=settings.topic_raw)
        summary = Replay(settings, options, progress=sys.stderr).run()  # a bar on a terminal
        if summary.error:
            raise BacktestFailed(f"replay failed: {summary.error}")
        print(f"[backtest] replayed {summary.produced:,} bars from {len(files)} files", flush=True)

        def check_worker() -> None:
            if worker.process is not None and worker.process.poll() is not None:
                raise BacktestFailed(f"the worker exited; its log: {worker.log_path}")

        return collect(settings, summary.produced, lookback, check_worker, IDLE_TIMEOUT_S)
