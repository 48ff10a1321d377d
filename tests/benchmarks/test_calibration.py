"""The online-calibration benchmark's reference (d), through barcast's own scoring stage and
calibrator: an exactly calibrated interval's rolling coverage strays far from 80 % over the
product's window, less over a longer one; tracking it harder narrows that spread only by making
the forecasts worse."""

from __future__ import annotations

import pytest

from benchmarks.online_calibration.reference import random_walk, reference
from model.serving.conformal import CalibrationConfig
from model.serving.scoring import score_offline


def test_the_exact_forecasts_cover_80_percent_when_scored() -> None:
    bars, forecasts = random_walk(4_000, seed=0)
    records = score_offline(forecasts, bars).values()
    inside = [covered for record in records for covered in record["inside"] or []]
    assert len(inside) == 4_000 * 10
    assert sum(inside) / len(inside) == pytest.approx(0.8, abs=0.01)


def test_a_longer_window_narrows_the_rolling_spread_of_an_exact_interval() -> None:
    figures = {
        window: reference(8_000, window, seeds=2, calibrations={})["calibrations"]["static"]
        for window in (240, 4_000)
    }
    spread = {k: v["rolling_max_median"] - v["rolling_min_median"] for k, v in figures.items()}
    assert spread[4_000] < 0.6 * spread[240]
    assert figures[240]["coverage"] == pytest.approx(0.8, abs=0.01)


def test_over_240_forecasts_sampling_alone_leaves_80_plus_minus_3_percent() -> None:
    tracked = {"step 0.1": CalibrationConfig(step=0.1, floor=0.1)}
    figures = reference(4_000, window=240, seeds=2, calibrations=tracked)["calibrations"]
    static, hard = figures["static"], figures["step 0.1"]
    assert static["rolling_within_80pm3_share"] == 0.0
    assert static["rolling_min_median"] < 0.75 and static["rolling_max_median"] > 0.85
    assert static["pinball_cost"] == 0.0
    spread = {k: v["rolling_max_median"] - v["rolling_min_median"] for k, v in figures.items()}
    assert spread["step 0.1"] < spread["static"]
    assert hard["pinball_cost"] > 0.02, "a hard-tracked exact forecast should lose pinball"
