"""`barcast` as a user runs it: tail a topic, and fail fast and clearly without a broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from streams.broker import free_port
from streams.kafka import ensure_topics
from streams.settings import Settings
from tests.kafka_io import produce

BARCAST = Path(sys.executable).with_name("barcast")


def run_barcast(settings: Settings, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, **settings.to_env()}
    return subprocess.run(
        [str(BARCAST), *args], env=env, capture_output=True, timeout=timeout, text=True, check=False
    )


def test_tail_prints_messages_with_headers_as_json_lines(broker_settings: Settings) -> None:
    topic = broker_settings.topic_forecasts
    ensure_topics(broker_settings, [topic])
    produce(
        broker_settings.broker,
        topic,
        [(b"ESH4", b'{"q50": 1.5}'), (b"NQH4", b"raw text")],
        headers=[("barcast-kind", b"bar")],
    )
    done = run_barcast(broker_settings, "tail", topic, "--from-beginning", "--max", "2")
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert sorted((m["key"], str(m["value"])) for m in lines) == [
        ("ESH4", "{'q50': 1.5}"),
        ("NQH4", "raw text"),
    ]
    assert all(m["headers"] == {"barcast-kind": "bar"} for m in lines)
    keyed = run_barcast(
        broker_settings, "tail", topic, "--from-beginning", "--key", "NQH4", "--idle-exit", "2"
    )
    assert [orjson.loads(line)["key"] for line in keyed.stdout.splitlines()] == ["NQH4"]


def test_tail_of_a_missing_topic_names_the_topics_there(broker_settings: Settings) -> None:
    done = run_barcast(broker_settings, "tail", "no.such.topic")
    assert done.returncode == 4
    assert "topic 'no.such.topic' does not exist" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_tail_without_a_broker_fails_within_the_timeout(broker_settings: Settings) -> None:
    dead = f"127.0.0.1:{free_port()}"
    settings = Settings.from_env({"BARCAST_BROKER": dead, "BARCAST_CONNECT_TIMEOUT_S": "2"})
    started = time.monotonic()
    done = run_barcast(settings, "tail", "forecasts")
    elapsed = time.monotonic() - started
    assert done.returncode == 3
    assert elapsed < 2 + 15  # the timeout plus interpreter start-up, never a hang
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and dead in lines[0] and "BARCAST_BROKER" in lines[0], done.stderr
