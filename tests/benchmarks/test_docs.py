"""Every generated section of README.md and docs/ is what its source makes now, each moves with
its results file, and the docs hold together: the README stays short and names its two commands,
and every relative link leads to a file and a heading that exist."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.docs import model_tables
from benchmarks.docs.benchmark_tables import RESULTS, load, runs_table
from benchmarks.docs.sections import SECTIONS, stale, write
from streams.metrics import Metrics
from streams.settings import REPO_ROOT

INDEX = REPO_ROOT / "benchmarks" / "README.md"
DOCS = [REPO_ROOT / "README.md", INDEX, *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FOLDERS = "streams|features|model|benchmarks|deploy|tests|docs"
PATH = re.compile(rf"`((?:{FOLDERS})/[\w./*-]*)`")


def test_every_generated_section_is_what_its_source_makes() -> None:
    assert [f"{s.path}: {s.name}" for s in stale()] == [], (
        "generated sections differ from their sources: `.venv/bin/python -m benchmarks.docs "
        "--write`"
    )


def test_each_section_has_its_markers_once() -> None:
    for s in SECTIONS:
        text = (REPO_ROOT / s.path).read_text()
        assert (text.count(s.start), text.count(s.end)) == (1, 1), (s.path, s.name)


def test_write_rewrites_a_stale_section_and_leaves_the_rest(tmp_path: Path) -> None:
    for path in {s.path for s in SECTIONS}:
        (tmp_path / path).parent.mkdir(exist_ok=True)
        shutil.copy(REPO_ROOT / path, tmp_path / path)
    section = next(s for s in SECTIONS if s.name == "bench-runs")
    target = tmp_path / section.path
    original = target.read_text()
    target.write_text(section.written(original, "| an old run |"))
    assert stale(tmp_path) == [section]
    assert write(tmp_path) == [section]
    assert target.read_text() == original
    assert stale(tmp_path) == [] and write(tmp_path) == []


def test_the_readme_is_short_and_names_its_two_commands() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    assert "make demo" in text and "make test" in text


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub makes for a Markdown file (code blocks skipped)."""
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(doc: Path) -> None:
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        name, _, anchor = target.partition("#")
        path = (doc.parent / name).resolve() if name else doc
        assert path.exists(), f"{doc.name} links to {target}: no such file"
        if anchor:
            assert anchor in anchors(path), f"{doc.name} links to {target}: no such heading"


def prose(doc: Path) -> str:
    """The text written by hand: outside code blocks and generated sections (which quote their
    results files, paths as they were at the run included)."""
    kept, skipped = [], False
    for line in doc.read_text().splitlines():
        if line.startswith("```") or re.fullmatch(r"<!-- [\w-]+:(start|end) -->", line):
            skipped = not skipped
        elif not skipped:
            kept.append(line)
    return "\n".join(kept)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_path_the_docs_name_exists(doc: Path) -> None:
    name = str(doc.relative_to(REPO_ROOT))
    for path in PATH.findall(prose(doc)):
        if path.startswith("benchmarks/results/"):
            continue  # a results file is there once its script has run
        pattern = re.sub(r"(?<![a-z])[A-Z]{2,}(?![a-z])", "*", path)  # NAME, TOPIC: a placeholder
        assert any(REPO_ROOT.glob(pattern.rstrip("/"))), f"{name} names {path}: no such file"


def test_the_benchmarks_index_lists_every_benchmark() -> None:
    folders = [p for p in (REPO_ROOT / "benchmarks").iterdir() if p.is_dir()]
    benchmarks = [p.name for p in folders if (p / "run.py").exists() or any(p.glob("*.sh"))]
    assert len(benchmarks) > 10
    assert [name for name in benchmarks if f"| `{name}/` |" not in INDEX.read_text()] == []


def test_every_metric_the_worker_exports_is_in_the_operations_doc() -> None:
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    for family in text_string_to_metric_families(Metrics().render().decode()):
        name = family.name + ("_total" if family.type == "counter" else "")
        assert f"`{name}" in text, f"docs/operations.md (Metrics) does not name {name}"


def test_the_verdict_follows_the_comparison() -> None:
    report = load("model_report")
    won = copy.deepcopy(report)
    comparison = won["evaluation"]["comparison"]
    comparison["relative_gain"] = 0.05
    comparison["gain_bootstrap"]["excludes_zero"] = True
    assert "interval excluding zero): **not reached**" in model_tables.verdict(report)
    verdict = model_tables.verdict(won)
    assert "interval excluding zero): reached" in verdict
    assert "- Goal (3 % better): reached." in verdict
    assert "is 5.00 % ahead of the best baseline" in verdict


def test_the_online_calibration_table_shows_its_results_file() -> None:
    result, report = load("online_calibration"), load("model_report")
    changed = copy.deepcopy(result)
    changed["figures"]["mechanism_online"]["after_start"]["coverage"] = 0.7123
    assert "| 71.2 %, " not in model_tables.online_calibration(result, report)
    assert "| 71.2 %, " in model_tables.online_calibration(changed, report)


def test_a_results_file_says_where_its_run_was(tmp_path: Path) -> None:
    shutil.copy(RESULTS / "model_report.json", tmp_path)
    (tmp_path / "old.json").write_text(json.dumps({"ratio": 1.0}))
    rows = runs_table(tmp_path).splitlines()
    commit = load("model_report")["provenance"]["commit"][:7]
    assert rows[2].startswith(f"| `model_report.json` | `{commit}` |")
    assert rows[3] == "| `old.json` | not recorded | | | |"
