"""`barcast`: one command, subcommands contributed by the modules that own them."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from streams.exit_codes import ExitCode
from streams.settings import SettingError

COMMAND_MODULES = (
    "streams.tools.broker_cli",
    "streams.tools.tail",
    "streams.tools.stats_cli",
    "streams.ingest.replay_cli",
    "streams.ingest.live_cli",
    "streams.tools.features_cli",
    "streams.tools.model_cli",
    "streams.tools.promote_cli",
    "streams.tools.demo",
    "streams.tools.backtest.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="barcast",
        description="Streaming features and TFT forecasts for Databento futures bars on Kafka.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a reader that left shows up here, not in the exit-time flush
        return code
    except BrokenPipeError:
        return reader_left()
    except SettingError as exc:
        print(f"barcast: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


def reader_left() -> int:
    """stdout's reader closed the pipe (`barcast features list | head`): stop quietly. Python
    still flushes stdout at exit, which would raise again; the rest goes to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return ExitCode.BROKEN_PIPE  # as `git log | head` exits


if __name__ == "__main__":
    sys.exit(main())
