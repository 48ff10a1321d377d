"""The walk-forward model report: every fold of a pre-registered protocol trained with the frozen
recipe by the product's own `train`, evaluated by its own `evaluate`, and pooled.

    BARCAST_FIRSTRATE_DIR=/path/dailydata .venv/bin/python -m benchmarks.walk_forward
        [--protocol benchmarks/walk_forward/protocol.json] [--fold NAME ...]
        [--results benchmarks/results/walk_forward.json] [--set FIELD=VALUE ...]

Each fold (`benchmarks.walk_forward.protocol`) trains a checkpoint into
var/walk_forward/PROTOCOL/FOLD with the default `barcast train` recipe (the protocol's `recipe`
and `--set` override fields, for smoke runs only; the results say so), evaluates it on its test
period with calibration on its calibration period (`--split test`), or on a product it never saw
(`--split all`), and writes its figures into the results file: every forecaster's mean pinball
and coverage, the TFT against the best baseline (relative gain, Diebold-Mariano-HLN, bootstrap
interval), the model confidence set, offline and as served; then each group's pooled figures
over its folds and the issue's acceptance checks (`benchmarks.walk_forward.figures`). Folds may
run as separate processes (`--fold`) and the run resumes: a fold already in the results with the
same code commit, recipe and definition is skipped. The results name the protocol, its frozen
configuration and commit, and this run's commit and machine (`benchmarks.provenance`).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.provenance import run_metadata
from benchmarks.walk_forward.figures import compared, fold_summary, pooled
from benchmarks.walk_forward.protocol import Fold, Protocol, digest, source_location
from model.config import TFTConfig
from streams.settings import REPO_ROOT, Settings

PROTOCOL = Path(__file__).resolve().parent / "protocol.json"
RESULTS = REPO_ROOT / "benchmarks" / "results" / "walk_forward.json"
WORK = REPO_ROOT / "var" / "walk_forward"
TRAIN_SUMMARY = ("best_epoch", "epochs_run", "val_pinball_bp", "n_params", "peak_memory_mb")


def recipe_configs(recipe: dict[str, Any], fold: Fold) -> tuple[TFTConfig, Any]:
    """The frozen recipe (the defaults, with `recipe`'s overrides) and the fold's split dates."""
    from model.train import TrainConfig

    names = {cls: {f.name for f in fields(cls)} for cls in (TFTConfig, TrainConfig)}
    unknown = set(recipe) - names[TFTConfig] - names[TrainConfig]
    if unknown:
        raise SystemExit(f"recipe fields {sorted(unknown)}: not a TFTConfig or TrainConfig field")
    model = TFTConfig(**{k: v for k, v in recipe.items() if k in names[TFTConfig]})
    training = {k: v for k, v in recipe.items() if k in names[TrainConfig]} | fold.dates
    if not fold.dates:
        training |= {"test_fraction": 0.0}  # tested on another product: nothing held out here
    return model, TrainConfig(**({"progress": True} | training))


def frozen_recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    """The recipe every fold trained with: the defaults and the overrides, if any."""
    from model.train import TrainConfig

    model, training = (
        {f.name: v for f in fields(cls) if (v := recipe.get(f.name)) is not None}
        for cls in (TFTConfig, TrainConfig)
    )
    return {
        "overrides": recipe,
        "model": asdict(TFTConfig(**model)),
        "training": asdict(TrainConfig(**training)),
    }


def sources(protocol: Protocol, parts: tuple[Any, ...], settings: Settings) -> list[Any]:
    """The `BarSource`s of a fold's training or evaluation data."""
    from model.bar_files import BarSource, parse_utc

    out = []
    for part in parts:
        path, symbol = source_location(
            part.source, protocol.sources[part.source], settings.data_dir, settings.firstrate_dir
        )
        start = parse_utc(part.start, "start") if part.start else None
        end = parse_utc(part.end, "end") if part.end else None
        out.append(BarSource(path, symbol, start, end))
    return out


def run_fold(protocol: Protocol, fold: Fold, recipe: dict[str, Any], work: Path) -> dict[str, Any]:
    """Train and evaluate one fold; its record, and its per-window losses in work/FOLD."""
    from model.evaluate import LOSSES, evaluate
    from model.train import train

    settings = Settings.from_env()
    checkpoint = work / fold.name / "checkpoint"
    started = time.perf_counter()
    metrics = train(
        sources(protocol, fold.train, settings), checkpoint, *recipe_configs(recipe, fold)
    )
    trained = time.perf_counter() - started
    report = evaluate(
        checkpoint,
        sources(protocol, fold.evaluate, settings),
        part=fold.split,
        device="cpu",
        out_dir=work / fold.name / "evaluation",
    )
    (work / fold.name / LOSSES).write_bytes((work / fold.name / "evaluation" / LOSSES).read_bytes())
    return {
        "name": fold.name,
        "group": fold.group,
        "definition": fold.definition,
        "split": fold.split,
        "model_id": report["model_id"],
        "train": {k: metrics[k] for k in TRAIN_SUMMARY} | {"seconds": trained},
        "evaluate_seconds": time.perf_counter() - started - trained,
    } | fold_summary(report)


def read_losses(work: Path, names: list[str]) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """The folds' per-window losses on this machine (`model.evaluate.write_losses`)."""
    out = {}
    for name in names:
        path = work / name / "losses.npz"
        if path.exists():
            with np.load(path) as data:
                out[name] = {
                    p: {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith(p + "/")}
                    for p in ("offline", "served")
                }
    return out


@contextmanager
def locked(path: Path) -> Iterator[dict[str, Any]]:
    """The results file, read and written back under an exclusive lock: folds run as separate
    processes merge into it one at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / (path.name + ".lock")).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = json.loads(path.read_text()) if path.exists() else {}
        yield results
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(results, indent=1) + "\n")
        temporary.replace(path)


def identity(protocol: Protocol, recipe: dict[str, Any], fold: Fold, commit: str) -> dict[str, str]:
    """What makes a fold's result reusable: the code, the recipe and the fold's definition."""
    return {"commit": commit, "recipe_digest": digest(recipe), "fold_digest": fold.digest}


def run(
    protocol: Protocol, names: list[str], recipe: dict[str, Any], results_path: Path, work: Path
) -> list[str]:
    """Run the named folds not already done; returns those run."""
    provenance = run_metadata()
    done = []
    for name in names:
        fold = protocol.fold(name)
        fold_recipe = recipe | fold.recipe
        key = identity(protocol, fold_recipe, fold, provenance["commit"])
        with locked(results_path) as results:
            if results.get("folds", {}).get(name, {}).get("identity") == key:
                print(f"{name}: already in {results_path} at this commit and recipe; skipped")
                continue
        record = run_fold(protocol, fold, fold_recipe, work / protocol.name)
        record |= {"identity": key, "dirty": provenance["dirty"]}
        with locked(results_path) as results:
            results.setdefault("folds", {})[name] = record
        done.append(name)
    with locked(results_path) as results:
        folds = results.get("folds", {})
        losses = read_losses(work / protocol.name, list(folds))
        results |= {
            "protocol": {
                "name": protocol.name,
                "file": str(protocol.path),
                "digest": digest(json.loads(protocol.path.read_text())),
            },
            "frozen": protocol.frozen,
            "recipe": frozen_recipe(recipe),
            "pooled": pooled(folds, losses),
            "provenance": provenance,
        }
        if protocol.compare:
            results["compared"] = compared(folds, losses, protocol.compare)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", type=Path, default=PROTOCOL)
    parser.add_argument("--fold", nargs="*", default=None, metavar="NAME", help="default: all")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=WORK, help="checkpoints and losses")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args(argv)
    protocol = Protocol.load(args.protocol)
    recipe = protocol.recipe | {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    names = args.fold if args.fold is not None else [f.name for f in protocol.folds]
    run(protocol, names, recipe, args.results, args.work)
    return 0
