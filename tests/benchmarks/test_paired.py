"""benchmarks/paired.py: which fields it compares and how."""

from __future__ import annotations

import pytest

from benchmarks.paired import flatten, setting_env, summarize


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


def test_setting_env_names_a_barcast_variable() -> None:
    assert setting_env("max_batch=128") == {"BARCAST_MAX_BATCH": "128"}
    assert setting_env("BARCAST_MAX_DELAY_MS=2") == {"BARCAST_MAX_DELAY_MS": "2"}


@pytest.mark.parametrize("setting", ["MAX_BATCH", "NO_SUCH_SETTING=1"])
def test_setting_env_refuses_what_sets_nothing(setting: str) -> None:
    with pytest.raises(SystemExit, match=r"NAME=VALUE with NAME one of: .*MAX_BATCH"):
        setting_env(setting)
