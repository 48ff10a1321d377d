"""The online-calibration benchmark's reference (d): an exactly calibrated interval's rolling
coverage stays near 80 % over a long window and strays far from it over a short one."""

from __future__ import annotations

import pytest

from benchmarks.online_calibration import ideal_reference


def test_an_exactly_calibrated_interval_covers_80_percent_over_a_long_window() -> None:
    figures = ideal_reference(12_000, window=6_000, seeds=4)
    assert figures["rolling_within_80pm3_share"] == 1.0
    assert figures["rolling_min_median"] == pytest.approx(0.8, abs=0.03)
    assert figures["rolling_max_median"] == pytest.approx(0.8, abs=0.03)


def test_over_240_forecasts_sampling_alone_leaves_80_plus_minus_3_percent() -> None:
    figures = ideal_reference(12_000, window=240, seeds=4)
    assert figures["rolling_within_80pm3_share"] == 0.0
    assert figures["rolling_min_median"] < 0.75 and figures["rolling_max_median"] > 0.85
