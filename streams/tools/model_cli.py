"""`barcast train` and `barcast evaluate` (torch is imported only when one of them runs)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from model.config import AUTO_EPOCH_WINDOWS, ENCODERS, TFTConfig, TrainConfig
from streams.exit_codes import ExitCode

T = TypeVar("T")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    _register_train(subparsers)
    _register_evaluate(subparsers)


def _register_train(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    defaults, recipe = TFTConfig(), TrainConfig()
    train = subparsers.add_parser(
        "train",
        help="train the TFT on bar files (CSV, DBN, FirstRate day folders); write a checkpoint",
        description="Bars -> corrections -> features -> windows (time splits with an embargo) "
        "-> TFT; writes model.safetensors, config.json, metrics.csv/json and "
        "training_curve.png into --out, and after each epoch training_state.safetensors "
        "(for --resume; removed once the checkpoint is written).",
    )
    add_data_options(train)
    train.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="checkpoint directory"
    )
    for name in ("epochs", "batch_size", "chunk", "patience"):
        train.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(recipe, name))
    for name in ("lr", "weight_decay"):
        train.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(recipe, name))
    low, high = AUTO_EPOCH_WINDOWS
    train.add_argument(
        "--windows-per-epoch",
        type=int,
        default=recipe.windows_per_epoch,
        help=f"random training windows per epoch (0: a tenth of the training windows, within "
        f"{low:,}-{high:,}, all when fewer)",
    )
    add_split_options(train)
    train.add_argument(
        "--embargo", type=int, default=0, help="bars skipped between splits (0: lookback + horizon)"
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the unfinished run in --out from its last completed epoch (same "
        "data and settings); it ends with the checkpoint an uninterrupted run writes",
    )
    train.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    for name in ("lookback", "horizon", "hidden", "heads", "lstm_layers", "var_dim"):
        train.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    train.add_argument("--dropout", type=float, default=defaults.dropout)
    train.add_argument(
        "--encoder",
        choices=ENCODERS,
        default=defaults.encoder,
        help="stream (the default, the encoders' protocol's choice): the encoder's state is "
        "carried from bar to bar, so a new bar costs one step (trained on contiguous sequences); "
        "window: the encoder reruns over each forecast's 60 bars (the one the walk-forward and "
        "held-out protocols evaluated)",
    )
    train.add_argument(
        "--releases",
        action="store_true",
        help="known-future inputs include the release calendar (FOMC, ECB; model/releases.csv); "
        "off by default: not yet evaluated",
    )
    train.set_defaults(func=run_train)


def _register_evaluate(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    evaluate = subparsers.add_parser(
        "evaluate",
        help="evaluate a checkpoint against baselines on held-out windows",
        description="Runs the serving engine over every window the worker would forecast and "
        "scores it against persistence, rolling empirical quantiles, EWMA and time-of-day EWMA "
        "volatility forecasts, the intraday HAR with time of day and the TFT's own volatility "
        "scale, every one (the TFT too) calibrated the same way on the same calibration "
        "windows, and each also as served (through the worker's online calibration): pinball "
        "loss, q-risk, MAE, coverage, a block-bootstrap interval and a Diebold-Mariano test of "
        "the pinball difference to the best baseline, a model confidence set; attention "
        "entropy and variable importances. Writes evaluation.json, calibration.png and "
        "fan_chart.png.",
    )
    evaluate.add_argument("--checkpoint", type=Path, required=True, metavar="DIR")
    add_data_options(evaluate)
    evaluate.add_argument(
        "--split",
        choices=("test", "val", "all"),  # model.evaluation_windows.PARTS, not imported (torch)
        default="test",
        help="the checkpoint's test or validation period, or every window (a file the model "
        "never saw; its first 20%% of bars calibrate every forecaster, the TFT too)",
    )
    evaluate.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    evaluate.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="report directory (default: CHECKPOINT/evaluation)",
    )
    evaluate.set_defaults(func=run_evaluate)


def add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        nargs="+",
        required=True,
        metavar="PATH",
        help="bar files: 6EH4-style CSV (.csv/.csv.gz) or DBN ohlcv-1m; or SYMBOL=FOLDER, a "
        "folder of FirstRate Data day files (ES=/data/dailydata: 2010-06-15.json, ...)",
    )
    for name, meaning in (("start", "first"), ("end", "end (exclusive) of the")):
        parser.add_argument(
            f"--{name}",
            default=None,
            metavar="DATE",
            help=f"{meaning} UTC date or date-time of the bars read from every --data "
            "(2013-01-01; a folder's day files outside the range are not read)",
        )


def add_split_options(train: argparse.ArgumentParser) -> None:
    fractions = (
        ("val", "for validation (early stopping), after training", 0.1),
        ("calib", "for interval calibration, after validation", 0.1),
        ("test", "held out for `barcast evaluate`, at the end", 0.25),
    )
    for name, meaning, default in fractions:
        train.add_argument(
            f"--{name}-fraction",
            type=float,
            default=None,
            help=f"share of the bars {meaning} (default {default})",
        )
    for name, meaning in (("val", "validation"), ("calib", "calibration"), ("test", "test")):
        train.add_argument(
            f"--{name}-start",
            default=None,
            metavar="DATE",
            help=f"UTC date where {meaning} starts, instead of the fractions"
            + ("" if name != "test" else " (none: calibration runs to the last bar)"),
        )


def sources(args: argparse.Namespace) -> list[Any]:
    """`--data` with `--start`/`--end` (the range applies to every source)."""
    from model.bar_files import BarSource, parse_utc

    start = parse_utc(args.start, "--start") if args.start else None
    end = parse_utc(args.end, "--end") if args.end else None
    return [BarSource.parse(text, start, end) for text in args.data]


def run_train(args: argparse.Namespace) -> int:
    from model.bar_files import DataError
    from model.checkpoint import CONFIG
    from model.train import train
    from model.training_state import STATE_FILE

    def run() -> dict[str, Any]:
        fractions = [
            f"--{n}-fraction"
            for n in ("val", "calib", "test")
            if vars(args)[f"{n}_fraction"] is not None
        ]
        dates = [f"--{n}-start" for n in ("val", "calib", "test") if vars(args)[f"{n}_start"]]
        if fractions and dates:
            raise DataError(
                f"{' '.join(fractions)} and {' '.join(dates)}: split by fractions or by dates, "
                "not both"
            )
        writable(args.out)
        finished = (args.out / CONFIG).exists() and not (args.out / STATE_FILE).exists()
        if finished and not args.resume:
            raise DataError(
                f"--out {args.out} holds a trained checkpoint ({CONFIG}): choose another --out, "
                "or delete it to train there again"
            )
        return train(
            sources(args),
            args.out,
            _pick(TFTConfig, args),
            _pick(TrainConfig, args),
            resume=args.resume,
        )

    return _guarded("train", run)


def _pick(cls: type[T], args: argparse.Namespace) -> T:
    """The dataclass built from the command-line options named like its fields (those left
    unset take the dataclass's defaults)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in vars(args).items() if k in names and v is not None})


def run_evaluate(args: argparse.Namespace) -> int:
    from model.evaluate import evaluate

    def run() -> dict[str, Any]:
        writable(args.out or args.checkpoint / "evaluation")  # evaluate's default
        report = evaluate(
            args.checkpoint,
            sources(args),
            part=args.split,
            device=args.device,
            out_dir=args.out,
        )
        return {
            k: report[k] for k in ("model_id", "calibration", "n_windows", "model", "baselines")
        }

    return _guarded("evaluate", run)


def writable(out: Path) -> None:
    """Refuse an `--out` that cannot take files before the work, not after it (making
    nothing: the nearest folder that exists must be one this process can write in)."""
    from model.bar_files import DataError

    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        what = "not a folder" if not existing.is_dir() else "not writable"
        raise DataError(f"--out {out}: cannot write there ({existing} is {what}); pick another")


def _guarded(command: str, run: Callable[[], dict[str, Any]]) -> int:
    """Run a command; expected failures print one actionable line instead of a traceback."""
    from model.bar_files import DataError
    from model.checkpoint import CheckpointError
    from model.config import ConfigError
    from model.train import TrainingError

    try:
        result = run()
    except (DataError, CheckpointError, ConfigError, TrainingError, ValueError) as exc:
        print(f"barcast {command}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    print(json.dumps(_headline(result), indent=1))
    return ExitCode.OK


def _headline(result: dict[str, Any]) -> Any:
    """Drop the long per-horizon arrays from what is printed (the files hold everything)."""

    def short(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: short(v)
                for k, v in value.items()
                if k not in ("pinball", "coverage_interval_per_horizon", "train_config")
            }
        return value

    return short(result)
