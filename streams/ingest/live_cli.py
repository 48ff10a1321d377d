"""`barcast ingest-live`: Databento Live bars into `bars.raw` until SIGINT/SIGTERM, then a
one-line JSON summary on stdout. The API key comes from DATABENTO_API_KEY and is never printed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from databento_dbn import SType

from streams.exit_codes import ExitCode
from streams.ingest.dbn_source import OHLCV_SCHEMAS
from streams.ingest.errors import AuthFailed, BrokerDown, IngestError
from streams.ingest.live_options import LiveOptions
from streams.ingest.replay_cli import parse_symbols, parse_time, run_standalone
from streams.settings import Settings

if TYPE_CHECKING:
    from streams.ingest.live import LiveIngest
    from streams.ingest.producer import BarProducer

KEY_VARIABLE = "DATABENTO_API_KEY"
NOW = "now"
log = logging.getLogger("barcast.live")


def symbology_types() -> list[str]:
    """The input symbology types Databento names (`databento_dbn.SType`)."""
    return sorted(str(getattr(SType, name)) for name in dir(SType) if name.isupper())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="GLBX.MDP3", help="default: GLBX.MDP3")
    # Checked here, before Kafka and the gateway: Databento would refuse a name it does not
    # know with a traceback, and stream a schema that is not bars, which ingest would drop.
    parser.add_argument(
        "--schema", default="ohlcv-1m", choices=OHLCV_SCHEMAS, help="default: ohlcv-1m"
    )
    parser.add_argument(
        "--stype-in", default="parent", choices=symbology_types(), help="default: parent"
    )
    parser.add_argument(
        "--symbols",
        type=parse_symbols,
        required=True,
        help="comma-separated, e.g. ES.FUT,NQ.FUT,6E.FUT,ZN.FUT",
    )
    parser.add_argument(
        "--start",
        type=parse_start,
        help="replay from this ISO time first (within 24 h), or `now` (default: where the "
        "topic ends, so a restart replays the bars sent while no ingest ran)",
    )
    parser.add_argument("--topic", help="target topic (default: BARCAST_TOPIC_RAW, bars.raw)")
    parser.add_argument("--gateway", help="gateway host (default: Databento's for the dataset)")
    parser.add_argument("--port", type=int, default=13000, help="gateway port (default: 13000)")
    parser.add_argument(
        "--heartbeat-s", type=int, default=30, help="gateway heartbeat interval (default: 30)"
    )
    parser.add_argument(
        "--keep-spreads",
        action="store_true",
        help="forward calendar spreads (a parent subscription includes them; skipped, counted)",
    )
    parser.add_argument(
        "--replay-window-s",
        type=float,
        default=86_400.0,
        help="how far back the gateway replays (default: 86400, Databento's 24 h); an older "
        "resubscription start is clamped to it and the span before recorded as an outage",
    )
    parser.add_argument(
        "--backfill",
        action="store_true",
        help="fetch such a span from Databento Historical (same key, billed as historical "
        "data) instead of recording an outage",
    )
    parser.add_argument(
        "--historical-gateway", help="Databento Historical host (default: Databento's)"
    )
    parser.add_argument(
        "--max-retries",
        type=int,
        default=None,
        help="give up after N failed reconnects in a row; a session that got bars, heartbeats "
        "or END_OF_INTERVALs did not fail (default: never)",
    )


def parse_start(text: str) -> int | str:
    return NOW if text == NOW else parse_time(text)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest-live",
        help="stream Databento Live bars into bars.raw",
        description="Stream Databento Live OHLCV bars into Kafka with gap recovery. Needs "
        f"{KEY_VARIABLE}. Runs until SIGINT/SIGTERM; exit codes are listed in docs/operations.md.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


@contextmanager
def _stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGINT/SIGTERM end the ingest cleanly (flush, summary) instead of killing it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = lambda *_: stop()  # noqa: E731
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _stopper(ingest: LiveIngest, sink: BarProducer) -> Callable[[], None]:
    """The stop a signal starts: the session ends, and a bar that finds the queue full (the
    broker down) fails rather than hold the stop for ever; the flush then waits for the
    broker as for any bar queued."""

    def stop() -> None:
        sink.stop_waiting()
        ingest.stop()

    return stop


def live_options(args: argparse.Namespace, settings: Settings) -> LiveOptions:
    return LiveOptions(
        dataset=args.dataset,
        schema=args.schema,
        stype_in=args.stype_in,
        symbols=tuple(args.symbols),
        start_ns=None if args.start == NOW else args.start,
        gateway=args.gateway,
        port=args.port,
        heartbeat_interval_s=args.heartbeat_s,
        max_retries=args.max_retries,
        keep_spreads=args.keep_spreads,
        replay_window_s=args.replay_window_s,
        backfill=args.backfill,
        historical_gateway=args.historical_gateway,
        key_by=settings.key_by,
        follow=settings.follow,
    )


def resumed(options: LiveOptions, settings: Settings, topic: str) -> LiveOptions:
    """`options` starting where `topic` ends (`resume_start`), or from now if it is empty."""
    from streams.ingest.resume import resume_start
    from streams.kafka import BrokerUnavailable

    try:
        start = resume_start(settings, topic, options.schema)
    except BrokerUnavailable as exc:
        raise BrokerDown(str(exc)) from None
    if start is None:
        log.info("live: %s holds no records yet: subscribing from now", topic)
    else:
        log.info(
            "live: resuming from %sZ, where every partition of %s ends (`--start now` starts "
            "from now instead)", np.datetime64(start, "ns"), topic,
        )  # fmt: skip
    return replace(options, start_ns=start)


def with_leads(options: LiveOptions, settings: Settings, topic: str) -> LiveOptions:
    """Following the lead, `options` going on with each product's lead as last published to
    `topic` (`resume_leads`; the continuity passes over one from after the bars it gets)."""
    from streams.ingest.resume import resume_leads
    from streams.kafka import BrokerUnavailable

    if options.follow != "lead":
        return options
    try:
        leads = resume_leads(settings, topic)
    except BrokerUnavailable as exc:
        raise BrokerDown(str(exc)) from None
    for root, lead in sorted(leads.items()):
        log.info("live: %s goes on with the lead %s, published last", root, lead.raw)
    return replace(options, leads=leads)


def run(args: argparse.Namespace) -> int:
    """Build the options, start the producer, resume where the topic ends unless `--start`
    says otherwise, and ingest until a signal; then flush and print the summary."""
    from streams.ingest.live import LiveIngest, redact
    from streams.ingest.producer import BarProducer

    key = os.environ.get(KEY_VARIABLE, "").strip()
    settings = Settings.from_env()
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # barcast reports disconnects and gateway errors itself, once, with what it does next.
        logging.getLogger("databento").setLevel(logging.CRITICAL)
    options = live_options(args, settings)
    ingest: LiveIngest | None = None
    sink: BarProducer | None = None
    flushed = False  # once: a second flush would wait for a broker that is down again
    try:
        if not key:
            raise AuthFailed(f"{KEY_VARIABLE} is not set; export your Databento API key")
        topic = args.topic or settings.topic_raw
        # Never given up on while the broker is down: a bar queued is delivered once it is
        # back, in order, so where the topic ends is where a restart resumes (`resume_start`).
        sink = BarProducer(
            settings, topic, linger_ms=5.0, dead_letters=settings.topic_dlq, timeout_s=None
        )
        if args.start is None:
            options = resumed(options, settings, topic)
        options = with_leads(options, settings, topic)
        ingest = LiveIngest(options, key, sink)
        with _stop_on_signals(_stopper(ingest, sink)):
            ingest.run()
        sink.flush()
        flushed = True
        sink.check()
        code = ExitCode.OK
    except IngestError as exc:
        print(f"barcast ingest-live: {redact(str(exc), key)}", file=sys.stderr)
        code = exc.exit_code
    finally:
        if sink is not None and not flushed:
            sink.flush()
        if ingest is not None:
            print(ingest.stats.to_json(), flush=True)
    return int(code)


def main(argv: list[str] | None = None) -> int:
    return run_standalone("barcast ingest-live", add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
