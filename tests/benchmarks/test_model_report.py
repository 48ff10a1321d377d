"""The model report's table in docs/model-report.md is the one
`benchmarks/model_report/run.py` and `benchmarks.docs` write from its results."""

from __future__ import annotations

import json

from benchmarks.docs.sections import generated
from benchmarks.model_report.run import RESULTS, markdown_table


def test_the_model_table_is_generated_from_the_results_file() -> None:
    doc = "docs/model-report.md"
    report = json.loads((RESULTS / "model_report.json").read_text())
    assert generated(doc, "model-report").strip() == markdown_table(report).strip()
    assert report["provenance"]["commit"] != "unknown"
    evaluation = report["evaluation"]
    assert evaluation["part"] == "test" and evaluation["n_windows"] > 5000
    assert {"tod_ewma_gaussian", "ewma_gaussian"} <= set(evaluation["baselines"])
