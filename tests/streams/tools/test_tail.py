"""`barcast` as a user runs it: tail a topic, and fail fast and clearly without a broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from streams.broker import free_port
from streams.kafka import ensure_topics
from streams.settings import Settings
from tests.kafka_io import produce

pytestmark = pytest.mark.integration  # `barcast tail` against the embedded broker

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
    # The timeout plus interpreter start-up, never a hang; start-up with both cores busy takes
    # many seconds, so the bound leaves room for a loaded machine.
    assert elapsed < 2 + 45
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and dead in lines[0] and "BARCAST_BROKER" in lines[0], done.stderr


def test_tail_reaches_a_broker_written_as_faust_writes_it(broker_settings: Settings) -> None:
    topic = broker_settings.topic_forecasts
    ensure_topics(broker_settings, [topic])
    produce(broker_settings.broker, topic, [(b"ESH4", b"{}")])
    faust_form = replace(broker_settings, broker=f"kafka://{broker_settings.broker}")
    done = run_barcast(faust_form, "tail", topic, "--from-beginning", "--max", "1")
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["key"] == "ESH4"


def test_a_malformed_broker_exits_2_naming_the_accepted_forms(broker_settings: Settings) -> None:
    bad = replace(broker_settings, broker="kafka://127.0.0.1")
    for command in (["tail", "forecasts", "--max", "1"], ["replay", "--dry-run", "x.dbn"]):
        done = run_barcast(bad, *command)
        assert done.returncode == 2, done.stderr
        assert "BARCAST_BROKER" in done.stderr and "kafka://host:port" in done.stderr
