"""benchmarks/paired.py: which fields it compares and how."""

from __future__ import annotations

import pytest

from benchmarks.paired import flatten, summarize


def test_flatten_keeps_numbers_by_dotted_path() -> None:
    values = {"bps": 10, "goal_met": True, "run": {"p50_ms": 2.5, "name": "x"}, "rows": [1, 2]}
    assert flatten(values) == {"bps": 10.0, "run.p50_ms": 2.5}


def test_summarize_reports_medians_and_ratio_of_fields_every_run_has() -> None:
    runs = {
        "A": [{"bps": 100.0, "only_a": 1.0}, {"bps": 300.0}, {"bps": 200.0}],
        "B": [{"bps": 150.0}, {"bps": 250.0}, {"bps": 900.0}],
    }
    fields = summarize(runs)
    assert list(fields) == ["bps"]
    assert fields["bps"]["median_A"] == 200.0
    assert fields["bps"]["median_B"] == 250.0
    assert fields["bps"]["B_over_A"] == pytest.approx(1.25)
