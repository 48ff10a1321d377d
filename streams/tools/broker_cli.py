"""`barcast broker`: run the embedded broker in the foreground for local development."""

from __future__ import annotations

import argparse
import signal
import threading

from streams.broker import EmbeddedBroker
from streams.exit_codes import ExitCode
from streams.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "broker", help="run the embedded Tansu broker on BARCAST_EMBEDDED_PORT (dev only)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedBroker(settings.work_dir / "broker", port=settings.embedded_port) as broker:
        print(
            f"embedded broker at {broker.bootstrap} (log: {broker.log_path}); Ctrl-C stops it",
            flush=True,
        )
        stop.wait()
    return ExitCode.OK
