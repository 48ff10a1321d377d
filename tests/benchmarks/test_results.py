"""docs/benchmarks.md's table is the one generated from benchmarks/results/*.json, and the
results files say what was measured and where."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.docs.benchmark_tables import RESULTS, SOURCES, markdown_table
from benchmarks.docs.sections import generated


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def test_the_benchmark_table_is_generated_from_the_results_files() -> None:
    assert generated("docs/benchmarks.md", "bench-table").strip() == markdown_table().strip(), (
        "docs/benchmarks.md's table differs from the results files: "
        "`.venv/bin/python -m benchmarks.docs --write`"
    )


@pytest.mark.parametrize(
    ("name", "path", "value", "shown"),
    [
        ("features", ("rows", "per_minute", "barcast_ns_per_bar"), 12345.4, "12,345 ns/bar"),
        ("features", ("rows", "one_bar_per_call", "anchor_over_barcast"), 0.314, "**0.31x**"),
        ("features", ("rows", "wide", "anchor_ns_per_bar"), 4321.0, "4,321 ns for TA-Lib"),
        ("model", ("batches", "256", "speedup_vs_ptf_matched"), 7.77, "**7.8x**"),
        ("model", ("anchors", "ptf_matched", "params"), 1234567, "1,234,567 parameters"),
        ("pipeline", ("burst_1000_ms",), 987.6, "burst **988 ms**"),
        ("replay", ("ratio",), 0.444, "**0.44x**"),
        ("corrections", ("pure_bps",), 123456, "123,456 bars/s on one core"),
    ],
)
def test_the_table_shows_each_figure_of_its_results_file(
    tmp_path: Path, name: str, path: tuple[str, ...], value: float, shown: str
) -> None:
    for source in SOURCES:
        shutil.copy(RESULTS / f"{source}.json", tmp_path)
    report = load(name)
    node = report
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (tmp_path / f"{name}.json").write_text(json.dumps(report))
    assert shown not in markdown_table()
    assert shown in markdown_table(tmp_path)


def test_a_missed_goal_is_marked_missed(tmp_path: Path) -> None:
    for source in SOURCES:
        shutil.copy(RESULTS / f"{source}.json", tmp_path)
    report = load("replay") | {"ratio": 0.2}
    (tmp_path / "replay.json").write_text(json.dumps(report))
    assert "| >= 0.5x ❌ missed |" in markdown_table(tmp_path)


@pytest.mark.parametrize("name", ["features", "model"])
def test_rerun_results_record_their_provenance(name: str) -> None:
    provenance = load(name)["provenance"]
    assert len(provenance["commit"]) == 40
    for field in ("python", "torch", "numba", "numpy", "torch_threads", "cpu_model", "loadavg"):
        assert provenance[field] not in (None, "", "unknown"), field
    assert len(provenance["loadavg_end"]) == 3


def test_model_anchors_state_their_design_and_the_matched_one_matches() -> None:
    report = load("model")
    anchors = report["anchors"]
    assert anchors["ptf"]["hidden_continuous_size"] == report["config"]["var_dim"]
    matched = anchors["ptf_matched"]
    # the nearest count: within 5 %, or as near as its smallest width comes (at hidden 32 its
    # other networks alone outnumber barcast's)
    assert 0.95 <= matched["params_over_barcast"] <= 1.05 or (
        matched["hidden_continuous_size"] == 1 and matched["params_over_barcast"] <= 1.25
    )
    assert all(a["design"] for a in anchors.values())


def test_feature_rows_state_their_design() -> None:
    report = load("features")
    assert {"per_minute", "one_bar_per_call", "wide", "talipp"} <= set(report["rows"])
    assert all(row["design"] for row in report["rows"].values())
    assert report["wide_symbols"] >= 1000


def test_the_reference_calibration_table_shows_its_results_file() -> None:
    reference = load("online_calibration")["ideal_reference"]["calibrations"]
    labels = {"static": "no calibration", "product": "the product's tracking"}
    table = generated("docs/model-report.md", "calibration-reference")
    for name, c in reference.items():
        low, high = 100 * c["rolling_min_median"], 100 * c["rolling_max_median"]
        share, cost = 100 * c["rolling_within_80pm3_share"], 100 * c["pinball_cost"]
        row = f"| {labels.get(name, name)} | {low:.1f}-{high:.1f} % | {share:.0f} % of seeds |"
        assert f"{row} +{cost:.1f} % |" in table, name
