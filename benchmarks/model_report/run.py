"""The model report: train the product's default model with the README's recipe on the shared 6EH4
month, evaluate the served forecasts on the test week against every baseline, and write every
figure.

    .venv/bin/python -m benchmarks.model_report [--checkpoint DIR] [--set epochs=20 ...]
        [--name model_report]

Trains into var/model_report/NAME (or reuses --checkpoint), runs `model.evaluate.evaluate` on
the test split and writes benchmarks/results/NAME.json: the recipe, training metrics, every
model and baseline figure, the bootstrap comparison, data fingerprint, commit and versions.
The model table of the README and docs/model-report.md is `markdown_table` of
benchmarks/results/model_report.json (a test checks it). `--set` overrides a recipe field (a
TFTConfig or TrainConfig name) for an experiment; its results go to its own `--name`.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from benchmarks.provenance import run_metadata
from model.config import TFTConfig
from model.evaluate import evaluate
from model.train import TrainConfig, train
from streams.settings import REPO_ROOT, Settings

DATA_FILE = "6EH4.XCME_1min_bars_20240101_20240131.csv.gz"
# What `barcast train` makes with no options: the product's frozen recipe (`TFTConfig()`,
# `TrainConfig()`); `--set` departs from it only for an experiment under its own `--name`.
RECIPE: dict[str, Any] = {}
RESULTS = REPO_ROOT / "benchmarks" / "results"
NAMES = {
    "tft": "**TFT**",
    "tod_ewma_empirical": "time-of-day x plain EWMA (weight, half-lives fitted), residuals",
    "tod_ewma_gaussian": "time-of-day x plain EWMA (weight, half-lives fitted), Gaussian",
    "tod_ewma_gaussian_likelihood": "time-of-day x plain EWMA, Gaussian, by the TFT scale's rule",
    "volatility_scale_gaussian": "the TFT's volatility scale alone (no network), Gaussian",
    "har_tod_gaussian": "intraday log-HAR with time of day (10 min, hour, day, week), Gaussian",
    "har_tod_ewma_gaussian": "intraday log-HAR with time of day and two time-of-day EWMAs",
    "ewma_empirical": "EWMA, empirical residual quantiles",
    "ewma_gaussian": "EWMA, Gaussian",
    "rolling_quantiles": "rolling empirical quantiles (1 day)",
    "persistence": "persistence (zero return, training label quantiles)",
}


def recipe_configs(recipe: dict[str, Any]) -> tuple[TFTConfig, TrainConfig]:
    names = {cls: {f.name for f in fields(cls)} for cls in (TFTConfig, TrainConfig)}
    unknown = set(recipe) - names[TFTConfig] - names[TrainConfig]
    if unknown:
        raise SystemExit(f"--set {sorted(unknown)}: not a TFTConfig or TrainConfig field")
    model = TFTConfig(**{k: v for k, v in recipe.items() if k in names[TFTConfig]})
    training = {k: v for k, v in recipe.items() if k in names[TrainConfig]}
    return model, TrainConfig(**training, progress=True)


def markdown_table(report: dict[str, Any]) -> str:
    """The model table (README, docs/model-report.md) and its verdict, from a results file."""
    evaluation = report["evaluation"]
    rows = {"tft": evaluation["model"]} | evaluation["baselines"]
    lines = [
        "| | mean pinball | q10 / q50 / q90 pinball | below q10 | below q90 | 80 % interval |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in sorted(rows.items(), key=lambda item: item[1]["mean_pinball"]):
        p, below = r["pinball_per_quantile"], r["coverage_below"]
        mean = f"**{r['mean_pinball']:.4f}**" if name == "tft" else f"{r['mean_pinball']:.4f}"
        lines.append(
            f"| {NAMES.get(name, name)} | {mean} | {p['0.1']:.3f} / {p['0.5']:.3f} / "
            f"{p['0.9']:.3f} | {below['0.1']:.3f} | {below['0.9']:.3f} | "
            f"{r['coverage_interval']:.3f} |"
        )
    c = evaluation["comparison"]
    boot = c["gain_bootstrap"]
    gain, (lo, hi) = boot["mean"], boot["ci95"]
    method = boot.get("method", "moving-block")  # results from before the blocks wrapped
    lines += [
        "",
        f"TFT vs the best baseline ({NAMES.get(c['best_baseline'], c['best_baseline'])}): "
        f"{c['relative_gain']:+.2%} mean pinball; difference {gain:+.4f} bp, {method} "
        f"bootstrap 95 % interval [{lo:+.4f}, {hi:+.4f}] over {evaluation['n_windows']:,} "
        "windows"
        + (": too few days of them to decide anything." if boot.get("too_short") else "."),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="evaluate this checkpoint, no training")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--name", default="model_report")
    args = parser.parse_args(argv)
    recipe = RECIPE | {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    data = Settings.from_env().data_dir / DATA_FILE
    checkpoint = args.checkpoint or REPO_ROOT / "var" / "model_report" / args.name
    started = time.perf_counter()
    metrics = None
    if args.checkpoint is None:
        metrics = train([data], checkpoint, *recipe_configs(recipe))
    trained_s = time.perf_counter() - started
    evaluation = evaluate(checkpoint, [data], part="test", device="cpu")
    report = {
        "recipe": recipe,
        "train": metrics,
        "train_seconds": trained_s if metrics else None,
        "evaluation": evaluation,
        "provenance": run_metadata(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(report, indent=1))
    print(markdown_table(report))
    return 0
