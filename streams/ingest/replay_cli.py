"""`barcast replay FILE...`: DBN files into `bars.raw`, with a progress bar on a terminal and a
one-line JSON summary on stdout. Exit codes: `streams.exit_codes.ExitCode`."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from streams.exit_codes import ExitCode
from streams.ingest.errors import IngestError
from streams.settings import SettingError, Settings

SPEED = re.compile(r"(\d+(?:\.\d*)?|\.\d+)x")


def parse_speed(text: str) -> float | None:
    """`max` → None (no pacing); `1x`, `60x`, `0.5x` → that multiple of real time."""
    if text == "max":
        return None
    match = SPEED.fullmatch(text)
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a speed; use max, 1x (real time) or a multiple such as 60x"
        )
    return float(match.group(1))


def parse_time(text: str) -> int:
    """An ISO time (UTC unless it carries an offset) as UNIX nanoseconds."""
    try:
        stamp = pd.Timestamp(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO time; use e.g. 2024-07-01T23:40 (UTC) or "
            f"2024-07-01T19:40-04:00"
        ) from None
    if stamp is pd.NaT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time")
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return int(stamp.value)


def parse_symbols(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help=".dbn or .dbn.zst")
    parser.add_argument("--topic", help="target topic (default: BARCAST_TOPIC_RAW, bars.raw)")
    parser.add_argument(
        "--speed",
        type=parse_speed,
        default=None,
        help="max (default: as fast as the broker takes it), 1x (real time by ts_event) or Nx",
    )
    parser.add_argument(
        "--symbols",
        type=parse_symbols,
        default=(),
        help="comma-separated parents (ES.FUT) or raw symbols (ESU4); default: all",
    )
    parser.add_argument("--start", type=parse_time, help="first ts_event to send (ISO, UTC)")
    parser.add_argument("--end", type=parse_time, help="ts_event to stop before (ISO, UTC)")
    parser.add_argument(
        "--keep-spreads", action="store_true", help="also send calendar spreads (ESU4-ESZ4)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="read, filter and encode, but send nothing"
    )
    parser.add_argument(
        "--no-end-control",
        dest="end_control",
        action="store_false",
        help="send no END_OF_INTERVAL after the data: more follows in a later run (replaying "
        "day by day, pass it to every run but the last)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay DBN files into bars.raw",
        description="Replay Databento DBN files (v1-v3, .dbn/.dbn.zst, OHLCV schemas) into "
        "Kafka. Prints a JSON summary line; exit codes are listed in docs/operations.md.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.ingest.replay import Replay, ReplayOptions

    settings = Settings.from_env()
    options = ReplayOptions(
        files=tuple(args.files),
        topic=args.topic or settings.topic_raw,
        speed=args.speed,
        symbols=tuple(args.symbols),
        start_ns=args.start,
        end_ns=args.end,
        keep_spreads=args.keep_spreads,
        dry_run=args.dry_run,
        end_control=args.end_control,
    )
    replay = Replay(settings, options, progress=sys.stderr)
    code = ExitCode.OK
    try:
        replay.run()
    except IngestError as exc:
        replay.summary.error = str(exc)
        print(f"barcast replay: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        replay.summary.error = "interrupted"
        code = ExitCode.INTERRUPTED
    print(replay.summary.to_json(), flush=True)
    return int(code)


def run_standalone(
    prog: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None,
) -> int:
    """An ingest command outside `barcast` (`python -m ...`): a bad setting is a usage error."""
    parser = argparse.ArgumentParser(prog=prog)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except SettingError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)


def main(argv: list[str] | None = None) -> int:
    return run_standalone("barcast replay", add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
