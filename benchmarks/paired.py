"""One benchmark two ways in one run, alternated: A at a base commit and B this checkout, or A
this checkout at its defaults and B with one setting changed (`--setting NAME=VALUE`).

The machine is shared and noisy, so a figure from another day says little about a change; this
runs the same benchmark both ways in pairs, swapping the order from one pair to
the next (A B, B A, A B, ...), and reports each numeric result's median at A and at B and the
ratio B / A of the medians.

    .venv/bin/python -m benchmarks.paired --base REV [--pairs 3] corrections -- --repeats 1
    .venv/bin/python -m benchmarks.paired --setting MAX_BATCH=128 pipeline -- --minutes 140

The base commit is checked out as a git worktree under var/paired/ and imported from there
(PYTHONPATH), with this checkout's virtual environment and data directory; the benchmark must
take `--out FILE`. Writes benchmarks/results/paired_NAME.json (or `--out`): both commits, the
setting B ran with, the per-run values, medians, ratios and the run's provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.provenance import REPO, loadavg, run_metadata
from streams.setting_values import PREFIX
from streams.settings import Settings, env_names

Flat = dict[str, float]


def flatten(values: Any, prefix: str = "") -> Flat:
    """Every int or float in nested dicts, keyed by its dotted path (lists and flags left out)."""
    if isinstance(values, dict):
        out: Flat = {}
        for key, value in values.items():
            out |= flatten(value, f"{prefix}{key}.")
        return out
    if isinstance(values, int | float) and not isinstance(values, bool):
        return {prefix.rstrip("."): float(values)}
    return {}


def worktree(base: str) -> tuple[Path, str]:
    """A checkout of `base` under var/paired/ (reused when it is already there)."""
    commit = _git("rev-parse", base)
    path = REPO / "var" / "paired" / commit[:12]
    if not (path / ".git").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _git("worktree", "add", "--detach", str(path), commit)
    return path, commit


def entry(root: Path, name: str) -> list[str]:
    """How a checkout runs benchmark `name`: `-m benchmarks.NAME`, or at a base commit from
    before the benchmarks had folders of their own, its file `benchmarks/NAME.py`."""
    if (root / "benchmarks" / name).is_dir():
        return ["-m", f"benchmarks.{name}"]
    return [str(root / "benchmarks" / f"{name}.py")]


def setting_env(setting: str) -> dict[str, str]:
    """`NAME=VALUE` as the environment that sets it: {"BARCAST_NAME": "VALUE"}."""
    name, sep, value = setting.partition("=")
    key = f"{PREFIX}{name.strip().upper().removeprefix(PREFIX)}"
    if not sep or key not in env_names():
        known = ", ".join(sorted(n.removeprefix(PREFIX) for n in env_names()))
        raise SystemExit(f"--setting {setting!r}: give NAME=VALUE with NAME one of: {known}")
    return {key: value}


def run_once(
    root: Path, name: str, args: list[str], out: Path, setting: dict[str, str | None]
) -> Flat:
    """`setting`: environment variables to set, or to leave out where None."""
    # The data directory's default is relative to the checkout: both sides read this one's.
    data_dir = Settings.from_env().data_dir.resolve()
    env = {**os.environ, "PYTHONPATH": str(root), "BARCAST_DATA_DIR": str(data_dir), **setting}
    env = {key: value for key, value in env.items() if value is not None}
    command = [sys.executable, *entry(root, name), *args, "--out", str(out)]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=root, env=env, check=True)
    return flatten(json.loads(out.read_text()))


def summarize(runs: dict[str, list[Flat]]) -> dict[str, dict[str, Any]]:
    """Per numeric field present in every run: the values, the medians and B / A."""
    fields = set.intersection(*(set(run) for side in runs.values() for run in side))
    out = {}
    for field in sorted(fields):
        a = [run[field] for run in runs["A"]]
        b = [run[field] for run in runs["B"]]
        median_a, median_b = statistics.median(a), statistics.median(b)
        out[field] = {
            "A": a,
            "B": b,
            "median_A": median_a,
            "median_B": median_b,
            "B_over_A": median_b / median_a if median_a else None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sides = parser.add_mutually_exclusive_group(required=True)
    sides.add_argument("--base", help="commit A (B is this checkout)")
    sides.add_argument("--setting", help="NAME=VALUE: B runs this checkout with BARCAST_NAME=VALUE")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/paired_NAME.json")
    parser.add_argument(
        "benchmark", help="a benchmark's folder under benchmarks/, e.g. corrections"
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="after --: the script's options")
    args = parser.parse_args()
    if args.pairs < 3:
        parser.error(f"--pairs {args.pairs}: a comparison needs at least 3 pairs to tell a median")
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    name = args.benchmark.removesuffix(".py")
    meta = run_metadata()
    setting = {} if args.setting is None else setting_env(args.setting)
    base_root, base_commit = (REPO, meta["commit"]) if setting else worktree(args.base)
    defaults: dict[str, str | None] = dict.fromkeys(setting)  # A: as if never set
    roots, settings = {"A": base_root, "B": REPO}, {"A": defaults, "B": dict(setting)}
    runs: dict[str, list[Flat]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for side in "AB" if pair % 2 == 0 else "BA":
                out = Path(tmp) / f"{side}{pair}.json"
                runs[side].append(run_once(roots[side], name, script_args, out, settings[side]))
    fields = summarize(runs)
    result = {
        "benchmark": name,
        "args": script_args,
        "A": base_commit,
        "B": meta["commit"],
        "B_setting": setting,
        "pairs": args.pairs,
        "fields": fields,
        "provenance": meta | {"loadavg_end": loadavg()},
    }
    target = args.out or REPO / "benchmarks" / "results" / f"paired_{name}.json"
    target.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'field':48s} {'median A':>12s} {'median B':>12s} {'B / A':>7s}")
    for field, row in fields.items():
        ratio = "" if row["B_over_A"] is None else f"{row['B_over_A']:7.3f}"
        print(f"{field:48s} {row['median_A']:12.4g} {row['median_B']:12.4g} {ratio}")
    print(f"wrote {target}")


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True)
    return done.stdout.strip()


if __name__ == "__main__":
    main()
