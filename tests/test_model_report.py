"""The README's model table is the one `benchmarks/model_report.py` writes from its results."""

from __future__ import annotations

import json

from benchmarks.model_report import RESULTS, markdown_table
from streams.settings import REPO_ROOT

START, END = "<!-- model-report:start -->\n", "<!-- model-report:end -->"


def test_readme_model_table_is_generated_from_the_results_file() -> None:
    report = json.loads((RESULTS / "model_report.json").read_text())
    readme = (REPO_ROOT / "README.md").read_text()
    block = readme[readme.index(START) + len(START) : readme.index(END)]
    assert block.strip() == markdown_table(report).strip()
    assert report["provenance"]["commit"] != "unknown"
    evaluation = report["evaluation"]
    assert evaluation["part"] == "test" and evaluation["n_windows"] > 5000
    assert {"tod_ewma_gaussian", "ewma_gaussian"} <= set(evaluation["baselines"])
