"""`barcast backtest FILE... [--checkpoint DIR] [--out DIR]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streams.exit_codes import ExitCode
from streams.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "backtest",
        help="replay files through a real worker and report the forecasts' coverage and pinball",
        description="Replay DBN OHLCV files (or a bar CSV) through a real worker on the embedded "
        "broker (or BARCAST_BROKER), read back its clean bars and forecasts until every bar is "
        "accounted for, score them and write backtest.json and backtest.html.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="checkpoint directory (default: the newest in BARCAST_MODEL_DIR)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="report directory (default: var/backtest)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from model.checkpoint import CheckpointError
    from model.serving.checkpoints import CheckpointWatcher
    from streams.broker import BrokerStartError
    from streams.kafka import BrokerUnavailable
    from streams.tools.backtest.collect import BacktestFailed
    from streams.tools.backtest.harness import run_backtest
    from streams.tools.backtest.html import bp, percent
    from streams.tools.backtest.inputs import InputError

    settings = Settings.from_env()
    checkpoint = args.checkpoint or CheckpointWatcher(settings.model_dir).newest()
    if checkpoint is None:
        print(
            f"barcast backtest: no checkpoint in {settings.model_dir}; pass --checkpoint DIR "
            "or train one with `barcast train`",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    out = args.out or settings.work_dir / "backtest"
    try:
        result = run_backtest(settings, args.files, checkpoint, out)
    except (InputError, CheckpointError) as exc:
        print(f"barcast backtest: {exc}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, InputError) else ExitCode.USAGE
    except BrokerUnavailable as exc:
        print(f"barcast backtest: {exc}", file=sys.stderr)
        return ExitCode.BROKER_UNAVAILABLE
    except (BacktestFailed, BrokerStartError) as exc:  # each says where to look
        print(f"barcast backtest: {exc}", file=sys.stderr)
        return ExitCode.AGENT_FAILED
    report = result.report
    print(
        f"[backtest] {report['counts']['forecasts']:,} forecasts, "
        f"{report['counts']['forecasts_scored']:,} scored: coverage {percent(report['coverage'])}, "
        f"mean pinball {bp(report['mean_pinball_bp'])}"
    )
    print(f"[backtest] report: {result.json_path} and {result.html_path}")
    return ExitCode.OK
