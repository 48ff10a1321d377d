"""What `barcast train` costs for one product over a span of FirstRate 1-minute bars.

The default recipe (`TrainConfig()` and `TFTConfig()`: every window each epoch, its batch size, the
product's model) on `--symbol`'s day files from `--start` to `--end`: bars read, the
corrections, the feature panel (float32) and its bytes, the split's windows, then training
for `--epochs` of the recipe's epochs (each the recipe's full epoch unless `--steps` caps it).
Per phase: wall seconds and the process's peak resident memory so far (VmHWM). The total for
the recipe is projected from the measured epochs (`epochs` x the mean epoch, an upper bound:
early stopping may end sooner) and labelled as such. Training's process CPU seconds are
recorded beside its wall seconds: on a shared machine the wall clock also counts others' turns.

    .venv/bin/python -m benchmarks.train_cost /data/dailydata [--start 2012-01-01 --end 2013-01-01]

The folder may also come from the BARCAST_FIRSTRATE_DIR setting. Writes
benchmarks/results/train_cost.json (or `--out`). The data is read where it lies and never copied.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.provenance import loadavg, run_metadata
from model.bar_files import BarSource, CleanBars, load_bars, parse_utc
from model.config import TFTConfig
from model.dataset import TRAINING_DTYPE, Panel, Part, build_panel
from model.memory import peak_rss_mb
from model.train import TrainConfig, split_windows, train_on_panel
from streams.settings import Settings

RESULTS = Path(__file__).resolve().parents[1] / "results" / "train_cost.json"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folder", nargs="?", type=Path, help="dailydata/ (default: BARCAST_FIRSTRATE_DIR)"
    )
    parser.add_argument("--symbol", default="ES")
    parser.add_argument("--start", default="2012-01-01")
    parser.add_argument("--end", default="2013-01-01")
    parser.add_argument("--epochs", type=int, default=1, help="recipe epochs to measure")
    parser.add_argument("--steps", type=int, default=0, help="cap steps per epoch (0: none)")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: torch's default, one per core); on a shared machine 1 keeps "
        "the step time from waiting on a second thread the scheduler has not run",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


def folder_or_exit(given: Path | None) -> Path:
    folder = given or Settings.from_env().firstrate_dir
    if not folder.is_dir():
        sys.exit(
            f"train_cost: {folder} is not a folder; pass FirstRate's dailydata/ folder (day "
            "files YYYY-MM-DD.json) as the first argument or in BARCAST_FIRSTRATE_DIR"
        )
    return folder


def panel_bytes(panel: Panel) -> dict[str, int]:
    arrays = {k: v for k, v in vars(panel).items() if isinstance(v, np.ndarray)}
    return {k: int(v.nbytes) for k, v in arrays.items()} | {
        "total": int(sum(v.nbytes for v in arrays.values()))
    }


def main() -> int:
    """Measure the recipe's cost phase by phase and write the results file:

    1. Read and correct the span's bars.
    2. Build the float32 feature panel from them.
    3. Train the measured epochs; project the recipe's epoch and total from them.
    4. Write the results with the run's provenance.
    """
    args = parse_args()
    folder = folder_or_exit(args.folder)
    if args.threads:
        torch.set_num_threads(args.threads)
    provenance = run_metadata()
    started = time.perf_counter()
    # 1. The bars.
    bars, read = read_bars(folder, args.symbol, args.start, args.end)
    print(f"read and corrected: {read}", file=sys.stderr)
    # 2. The panel; the bars freed before training, as `barcast train` does.
    panel, features = build_features(bars)
    del bars
    print(f"features: {features}", file=sys.stderr)
    # 3. Training.
    training = measure_training(panel, args.epochs, args.steps)
    # 4. The results file.
    result = {
        "symbol": args.symbol,
        "range": [args.start, args.end],
        "read": read,
        "features": features,
        "training": training,
        "peak_rss_mb": round(peak_rss_mb()),
        "wall_s": round(time.perf_counter() - started, 1),
        "provenance": provenance | {"loadavg_end": loadavg()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


def read_bars(
    folder: Path, symbol: str, start: str, end: str
) -> tuple[list[CleanBars], dict[str, Any]]:
    """The corrected bars of `symbol` from `start` to `end`, and what reading them cost."""
    source = BarSource(folder, symbol, parse_utc(start, "--start"), parse_utc(end, "--end"))
    bars, report = load_bars([source])
    return bars, {
        "raw_bars": report["raw_bars"],
        "clean_bars": report["bars_per_symbol"],
        "day_files": len(report["files"]),
        "read_s": round(report["seconds"]["read"], 2),
        "corrections_s": round(report["seconds"]["corrections"], 2),
        "corrections": {k: v for k, v in report["corrections"].items() if v},
        "peak_rss_mb": round(peak_rss_mb()),
    }


def build_features(bars: list[CleanBars]) -> tuple[Panel, dict[str, Any]]:
    """The recipe's float32 feature panel of `bars`, and what building it cost."""
    at = time.perf_counter()
    panel = build_panel(bars, TFTConfig().horizon, TRAINING_DTYPE)
    return panel, {
        "seconds": round(time.perf_counter() - at, 2),
        "rows": len(panel.ts),
        "features": panel.features.shape[1],
        "dtype": str(panel.features.dtype),
        "bytes": panel_bytes(panel),
        "peak_rss_mb": round(peak_rss_mb()),
    }


def measure_training(panel: Panel, epochs: int, steps: int) -> dict[str, Any]:
    """`epochs` of the default recipe on `panel` (each capped at `steps` steps unless 0), timed,
    and the recipe's epoch and total projected from them."""
    model, recipe = TFTConfig(), TrainConfig()
    _, ends = split_windows(panel, model, recipe)
    n_train = len(ends[Part.TRAIN])
    per_epoch = recipe.epoch_windows(n_train)
    recipe_steps = math.ceil(per_epoch / recipe.batch_size)
    measured = replace(
        recipe,
        epochs=epochs,
        windows_per_epoch=min(per_epoch, steps * recipe.batch_size or per_epoch),
    )
    at, cpu_at = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as out:
        metrics = train_on_panel(panel, Path(out), model, measured, "train_cost", {})
        history = json.loads((Path(out) / "metrics.json").read_text())
    train_s, train_cpu_s = time.perf_counter() - at, time.process_time() - cpu_at
    epoch_s = [h["seconds"] for h in history]
    val_s = float(np.mean([h["val_seconds"] for h in history]))
    measured_steps = math.ceil(measured.windows_per_epoch / recipe.batch_size)
    step_s = (sum(epoch_s) - val_s * len(history)) / (measured_steps * len(history))
    recipe_epoch_s = step_s * recipe_steps + val_s
    return {
        "windows": {p.name.lower(): len(e) for p, e in ends.items()},
        "recipe": asdict(recipe),
        "model_params": metrics["n_params"],
        "steps_per_recipe_epoch": recipe_steps,
        "epochs_measured": len(history),
        "steps_per_measured_epoch": measured_steps,
        "epoch_s": [round(s, 1) for s in epoch_s],
        "train_step_s": round(step_s, 4),
        "validation_s": round(val_s, 1),
        "setup_and_calibration_s": round(train_s - sum(epoch_s), 1),
        "wall_s": round(train_s, 1),
        "cpu_s": round(train_cpu_s, 1),
        "recipe_epoch_s": round(recipe_epoch_s, 1),
        "recipe_total_s_projected": round(recipe_epoch_s * recipe.epochs, 1),
        "projection": f"recipe epoch = {recipe_steps} steps x the measured mean step time + the "
        f"measured validation pass; total = {recipe.epochs} such epochs, an upper bound "
        f"(early stopping, patience {recipe.patience}, may end sooner), setup not included",
        "peak_rss_mb": round(peak_rss_mb()),
    }
