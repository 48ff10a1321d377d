"""Each generated section: the file it is in, its markers and what makes it.

A section is the text between `<!-- NAME:start -->` and `<!-- NAME:end -->` in its file;
everything outside the markers is written by hand and left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.docs import benchmark_tables as bench
from benchmarks.docs import encoder_tables as encoders
from benchmarks.docs import model_tables as model
from benchmarks.docs import pipeline_tables as pipeline
from benchmarks.docs import walk_forward_tables as walk_forward
from benchmarks.docs.benchmark_tables import load
from benchmarks.model_report.run import markdown_table as model_report_table
from streams.settings import REPO_ROOT
from streams.settings import markdown_table as settings_table
from streams.topic_schemas import markdown_tables as topic_tables


@dataclass(frozen=True)
class Section:
    path: str  # relative to the repository root
    name: str
    make: Callable[[], str]

    @property
    def start(self) -> str:
        return f"<!-- {self.name}:start -->\n"

    @property
    def end(self) -> str:
        return f"<!-- {self.name}:end -->"

    def read(self, root: Path = REPO_ROOT) -> str:
        """The section's text in its file as it stands."""
        text = (root / self.path).read_text()
        if self.start not in text or self.end not in text:
            raise ValueError(
                f"{self.path} lacks the markers {self.start.strip()} ... {self.end}: put them "
                "back where the section belongs, then `python -m benchmarks.docs --write`"
            )
        return text[text.index(self.start) + len(self.start) : text.index(self.end)]

    def written(self, text: str, body: str) -> str:
        """`text` with this section's block replaced by `body`."""
        start, end = text.index(self.start) + len(self.start), text.index(self.end)
        return text[:start] + body.rstrip("\n") + "\n" + text[end:]


def model_report() -> str:
    return model_report_table(load("model_report"))


SECTIONS = (
    Section("README.md", "walk-forward-recipe", walk_forward.frozen_recipe),
    Section("README.md", "walk-forward", walk_forward.headline_table),
    Section("docs/model-report.md", "walk-forward-recipe", walk_forward.frozen_recipe),
    Section("docs/model-report.md", "walk-forward", walk_forward.results_table),
    Section("README.md", "held-out", lambda: walk_forward.headline_table(walk_forward.HELD_OUT)),
    Section(
        "docs/model-report.md",
        "held-out-recipe",
        lambda: walk_forward.frozen_recipe(walk_forward.HELD_OUT),
    ),
    Section(
        "docs/model-report.md",
        "held-out",
        lambda: walk_forward.results_table(walk_forward.HELD_OUT),
    ),
    Section(
        "docs/model-report.md",
        "encoders",
        lambda: walk_forward.results_table(walk_forward.ENCODERS),
    ),
    Section("README.md", "train-cost", bench.train_cost),
    Section("README.md", "trust-cost", lambda: pipeline.trust_headline(load("pipeline_trust"))),
    Section("docs/topics.md", "topics-table", topic_tables),
    Section(
        "docs/design.md",
        "corrections-month",
        lambda: model.corrections_on_the_month(load("model_report")),
    ),
    Section("docs/model-report.md", "model-scope", lambda: model.scope(load("model_report"))),
    Section("docs/model-report.md", "model-report", model_report),
    Section("docs/model-report.md", "model-verdict", lambda: model.verdict(load("model_report"))),
    Section(
        "docs/model-report.md",
        "model-experiments",
        lambda: model.experiments(load("model_experiments")),
    ),
    Section(
        "docs/model-report.md",
        "online-calibration",
        lambda: model.online_calibration(load("online_calibration"), load("model_report")),
    ),
    Section(
        "docs/model-report.md",
        "calibration-reference",
        lambda: model.calibration_reference(load("online_calibration")),
    ),
    Section("docs/benchmarks.md", "bench-table", bench.markdown_table),
    Section("docs/benchmarks.md", "pipeline-checks", bench.pipeline_checks),
    Section("docs/benchmarks.md", "pipeline-encoders", encoders.encoders_table),
    Section("docs/benchmarks.md", "gpu-run", bench.gpu_run),
    Section("docs/benchmarks.md", "backtest-check", bench.backtest_check),
    Section("docs/benchmarks.md", "bench-runs", bench.runs_table),
    Section("docs/operations.md", "settings-table", settings_table),
)


def generated(path: str, name: str) -> str:
    """The text of section `name` in `path` as it stands."""
    (section,) = [s for s in SECTIONS if (s.path, s.name) == (path, name)]
    return section.read()


def stale(root: Path = REPO_ROOT) -> list[Section]:
    """The sections whose text differs from what their sources make now."""
    return [s for s in SECTIONS if s.read(root).strip() != s.make().strip()]


def write(root: Path = REPO_ROOT) -> list[Section]:
    """Rewrites every stale section in place; returns them."""
    changed = stale(root)
    for section in changed:
        path = root / section.path
        path.write_text(section.written(path.read_text(), section.make()))
    return changed
