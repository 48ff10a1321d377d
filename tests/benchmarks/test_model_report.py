"""The model report's tables in the README and docs/model-report.md are the ones
`benchmarks/model_report/run.py` and `benchmarks.docs` write from its results."""

from __future__ import annotations

import json

import pytest

from benchmarks.docs.sections import generated
from benchmarks.model_report.run import RESULTS, markdown_table


@pytest.mark.parametrize("doc", ["README.md", "docs/model-report.md"])
def test_the_model_table_is_generated_from_the_results_file(doc: str) -> None:
    report = json.loads((RESULTS / "model_report.json").read_text())
    assert generated(doc, "model-report").strip() == markdown_table(report).strip()
    assert report["provenance"]["commit"] != "unknown"
    evaluation = report["evaluation"]
    assert evaluation["part"] == "test" and evaluation["n_windows"] > 5000
    assert {"tod_ewma_gaussian", "ewma_gaussian"} <= set(evaluation["baselines"])
