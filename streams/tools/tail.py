"""`barcast tail TOPIC`: print a topic's messages as JSON lines, with headers, like kcat -J.

Debian's kcat cannot handshake with the embedded broker, so this is how to watch a topic there;
it works the same against a real cluster.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

import orjson

from streams.exit_codes import ExitCode
from streams.kafka import BrokerUnavailable, bootstrap_servers, confluent_config, wait_for_metadata
from streams.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tail", help="print a topic's messages as JSON lines")
    parser.add_argument("topic")
    parser.add_argument("--from-beginning", action="store_true", help="start at the oldest")
    parser.add_argument("--key", help="only messages with this key")
    parser.add_argument("--max", type=int, default=0, help="stop after N messages (0: never)")
    parser.add_argument(
        "--idle-exit",
        type=float,
        default=0.0,
        metavar="S",
        help="stop after S seconds without a message (0: never)",
    )
    parser.set_defaults(func=run)


def render(message: Any) -> dict[str, Any]:
    raw_key = message.key()
    raw_value = message.value()
    try:
        value: Any = orjson.loads(raw_value) if raw_value is not None else None
    except orjson.JSONDecodeError:
        value = raw_value.decode("utf-8", "backslashreplace")
    return {
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "timestamp_ms": message.timestamp()[1],
        "key": None if raw_key is None else raw_key.decode("utf-8", "backslashreplace"),
        "headers": {
            k: (v or b"").decode("utf-8", "backslashreplace") for k, v in message.headers() or []
        },
        "value": value,
    }


def tail(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    bootstrap = bootstrap_servers(settings)
    try:
        topics = wait_for_metadata(bootstrap, settings.connect_timeout_s, settings)
    except BrokerUnavailable as exc:
        print(f"barcast tail: {exc}", file=sys.stderr)
        return ExitCode.BROKER_UNAVAILABLE
    if args.topic not in topics:
        known = ", ".join(sorted(t for t in topics if not t.startswith("_"))) or "none"
        print(
            f"barcast tail: topic {args.topic!r} does not exist on {bootstrap}; "
            f"topics there: {known}",
            file=sys.stderr,
        )
        return ExitCode.NO_TOPIC
    consumer = Consumer(
        confluent_config(settings, **{"group.id": "barcast-tail", "enable.auto.commit": False})
    )
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    consumer.assign([TopicPartition(args.topic, p, start) for p in range(topics[args.topic])])
    key = None if args.key is None else args.key.encode()
    printed = 0
    last_seen = time.monotonic()
    try:
        while not args.max or printed < args.max:
            message = consumer.poll(0.2)
            if message is None or message.error():
                if args.idle_exit and time.monotonic() - last_seen > args.idle_exit:
                    break
                continue
            last_seen = time.monotonic()
            if key is not None and message.key() != key:
                continue
            out.write(orjson.dumps(render(message)).decode() + "\n")
            out.flush()
            printed += 1
    finally:
        consumer.close()
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    return tail(Settings.from_env(), args, sys.stdout)
