"""`barcast backtest` on the whole shared data, twice: the 6EH4 month and every shared DBN file
through the embedded broker and real workers with one checkpoint. Checks that the two reports
are byte-identical and that the report's figures equal a recomputation from the run's topics
with the training label rule written out (tests/streams/tools/test_backtest.py's, which checks
the same on a slice in `make test`). Not a timing: it writes what it checked.

    .venv/bin/python -m benchmarks.backtest_check [--checkpoint var/model_report/model_report]

Writes benchmarks/results/backtest_check.json.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson

from benchmarks.provenance import loadavg, run_metadata
from streams.broker import EmbeddedBroker
from streams.ingest.convert import SIXE_CSV
from streams.settings import REPO_ROOT, Settings
from streams.tools.backtest.harness import run_backtest
from tests.streams.tools.test_backtest import recompute

RESULTS = REPO_ROOT / "benchmarks" / "results" / "backtest_check.json"


def checks(json_a: bytes, json_b: bytes, offline: dict) -> dict:
    report, counts = orjson.loads(json_a), orjson.loads(json_a)["counts"]
    pinball, inside = offline["pinball"], offline["inside"]
    by_horizon = all(
        np.isclose(row["pinball_bp"], pinball[:, h].mean(), rtol=1e-12)
        and np.isclose(row["coverage"], inside[:, h].mean(), rtol=1e-12)
        for h, row in enumerate(report["by_horizon"])
    )
    return {
        "identical_json": json_a == json_b,
        "replayed": [counts["replayed"], offline["raw"]],
        "forecasts": [counts["forecasts"], offline["forecasts"]],
        "scored": [counts["forecasts_scored"], offline["scored"]],
        "mean_pinball_bp": [report["mean_pinball_bp"], float(pinball.mean())],
        "coverage": [report["coverage"], float(inside.mean())],
        "by_horizon_equal": by_horizon,
        "model_id": report["model_id"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = REPO_ROOT / "var" / "model_report" / "model_report"
    parser.add_argument("--checkpoint", type=Path, default=default)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    meta, base = run_metadata(), Settings.from_env()
    files = [base.data_dir / SIXE_CSV, *sorted((base.data_dir / "dbn").glob("*.dbn.zst"))]
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(Path(tmp) / "broker") as broker:
        settings = replace(base, broker=broker.bootstrap, work_dir=Path(tmp) / "work")
        first = run_backtest(settings, files, args.checkpoint, Path(tmp) / "first")
        second = run_backtest(settings, files, args.checkpoint, Path(tmp) / "second")
        reports = first.json_path.read_bytes(), second.json_path.read_bytes()
        result = checks(*reports, recompute(first))
    result |= {
        "files": [f.name for f in files],
        "checkpoint": str(args.checkpoint.relative_to(REPO_ROOT)),
        "provenance": meta | {"loadavg_end": loadavg()},
    }
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
