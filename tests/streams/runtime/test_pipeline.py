"""build_pipeline: each role's stages and the stores they write, without Faust or a broker; and
the store names, which name the changelog topics a worker restores from, never change."""

from __future__ import annotations

import asyncio
import time

import pandas as pd
import pytest

from streams.metrics import Metrics
from streams.runtime.commit import Runtime
from streams.runtime.pipeline import STAGES, build_pipeline
from streams.runtime.records import FeatureRow, Record
from streams.runtime.stores import StoreName, marks_name
from streams.settings import Settings
from tests.bar_streams import faulty_stream
from tests.streams.runtime.test_stores import MemoryChangelogs

ALL = [
    "g-corrections-state-changelog",
    "g-features-state-changelog",
    "g-forecast-window-slots-changelog",
    "g-scoring-state-changelog",
    "g-calibration-state-changelog",
    "g-shadow-state-changelog",
    "g-canary-state-changelog",
    "g-encoder-streams-changelog",
]


def runtime(settings: Settings) -> Runtime:
    runtime = Runtime(settings, Metrics(), "g", lambda topic: {0}, lambda: asyncio.sleep(0))
    runtime.changelogs = MemoryChangelogs()  # type: ignore[assignment]
    return runtime


def test_the_store_names_are_those_workers_have_stored_under() -> None:
    assert [name.value for name in StoreName] == [
        "corrections-state",
        "features-state",
        "scoring-state",
        "calibration-state",
        "forecast-window-slots",
        "shadow-state",
        "canary-state",
        "encoder-streams",
    ]
    assert marks_name("bars.raw") == "bars.raw-checkpoints"


@pytest.mark.parametrize(
    ("role", "topics"),
    [
        ("all", ALL),
        ("stream", ALL[:2]),
        ("corrections", ALL[:1]),
        ("forecast", ALL[2:]),
        ("passthrough", []),
    ],
)
def test_each_role_runs_its_stages_with_their_stores(role: str, topics: list[str]) -> None:
    settings = Settings(role=role)
    pipeline = build_pipeline(settings, runtime(settings))
    stages = [name for name in STAGES["all"] if getattr(pipeline, name) is not None]
    assert stages == list(STAGES[role])
    assert [store.changelog.topic for store in pipeline.stores] == topics


def test_without_online_scoring_the_forecast_stage_keeps_only_its_windows_and_streams() -> None:
    settings = Settings(
        role="forecast",
        online_scoring=False,
        online_calibration=False,
        shadow_baselines=False,
        serve="model",
    )
    pipeline = build_pipeline(settings, runtime(settings))
    assert [store.changelog.topic for store in pipeline.stores] == [ALL[2], ALL[-1]]


def test_without_shadow_baselines_the_forecast_stage_keeps_no_shadow_state() -> None:
    settings = Settings(role="forecast", shadow_baselines=False, serve="model")
    pipeline = build_pipeline(settings, runtime(settings))
    assert [store.changelog.topic for store in pipeline.stores] == [*ALL[2:5], ALL[-1]]


def test_role_all_takes_raw_records_into_the_forecast_windows(sixe_bars: pd.DataFrame) -> None:
    """The stages chained in memory as role `all`'s agent chains them, no model served yet:
    every clean bar's row slides into its symbol's window and waits for scoring."""
    settings = Settings(role="all")
    pipeline = build_pipeline(settings, runtime(settings))
    assert pipeline.corrections and pipeline.features and pipeline.forecasting
    values = faulty_stream(sixe_bars, 200)
    raw = [Record("bars.raw", 0, i, 0.0, b"6EH4", v, []) for i, v in enumerate(values)]
    cleaned = pipeline.corrections.run(raw, time.time_ns())
    featured = pipeline.features.run(cleaned.items)
    rows = [row for row in featured.rows if isinstance(row, FeatureRow)]
    assert asyncio.run(pipeline.forecasting.add(featured.rows)) == []
    window = pipeline.forecasting.windows.read(b"6EH4")
    assert rows and window.count == len(rows) and window.last_ts == rows[-1].ts_event
    waiting = pipeline.forecasting.scoring.waiting[b"6EH4"]
    assert [bar.bar.ts_event for bar in waiting] == [row.ts_event for row in rows]
