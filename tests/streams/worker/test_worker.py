"""The foundation through the real broker: a real worker process, plain aiokafka clients."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.broker import free_port
from streams.kafka import ensure_topics
from streams.runtime.policy import NULL_VALUE_HEADER
from streams.schema import DLQ_REASON, DLQ_TOPIC
from streams.settings import REPO_ROOT, Settings
from tests.kafka_io import produce
from tests.topic_logs import DeadLetterLog
from tests.worker import FAUST, Worker

pytestmark = pytest.mark.integration  # real worker processes (most on the embedded broker)

BAR = {
    "instrument_id": 42005804,
    "symbol": "6EH4",
    "ts_event": 1_704_150_000_000_000_000,
    "rtype": 33,
    "publisher_id": 1,
    "open": 1_107_600_000,
    "high": 1_107_850_000,
    "low": 1_107_600_000,
    "close": 1_107_800_000,
    "volume": 205,
    "source": "test",
}


async def _roundtrip(settings: Settings) -> list[tuple[bytes, bytes]]:
    producer = AIOKafkaProducer(bootstrap_servers=settings.broker)
    await producer.start()
    try:
        await producer.send_and_wait(settings.topic_raw, orjson.dumps(BAR), key=b"6EH4")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        settings.topic_clean, bootstrap_servers=settings.broker, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=30_000, max_records=1)
        records = [r for rs in batch.values() for r in rs]
        return [(r.key, r.value) for r in records]
    finally:
        await consumer.stop()


def test_worker_moves_a_message_between_topics(broker_settings: Settings) -> None:
    settings = replace(broker_settings, role="passthrough")
    ensure_topics(settings, [settings.topic_raw, settings.topic_clean])
    with Worker(settings):
        out = asyncio.run(_roundtrip(settings))
    assert out == [(b"6EH4", orjson.dumps(BAR))]


def test_passthrough_dead_letters_a_tombstone_and_goes_on(broker_settings: Settings) -> None:
    settings = replace(broker_settings, role="passthrough")
    ensure_topics(settings, [settings.topic_raw, settings.topic_clean, settings.topic_dlq])
    produce(settings.broker, settings.topic_raw, [(b"6EH4", None)])
    dlq = DeadLetterLog(settings.broker, settings.topic_dlq, settings.partitions)
    try:
        with Worker(settings) as worker:
            out = asyncio.run(_roundtrip(settings))
            assert dlq.read_until(1) == 1
            assert worker.process is not None and worker.process.poll() is None
    finally:
        dlq.close()
    assert out == [(b"6EH4", orjson.dumps(BAR))]
    ((headers, value),) = [(dlq.headers[k], dlq.values[k]) for k in dlq.values]
    assert value == b"" and headers[NULL_VALUE_HEADER] == b"true"
    assert headers[DLQ_REASON] == b"malformed" and headers[DLQ_TOPIC] == settings.topic_raw.encode()


def test_worker_without_broker_logs_one_line_and_retries(broker_settings: Settings) -> None:
    settings = replace(
        broker_settings,
        role="passthrough",
        broker=f"127.0.0.1:{free_port()}",
        connect_timeout_s=1.0,
    )
    env = {**os.environ, **settings.to_env(), "BARCAST_WEB_PORT": str(free_port())}
    log = settings.work_dir / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(FAUST), "-A", "streams", "worker", "-l", "info"],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    # Until its second failure line, however long start-up takes; alive until then: retrying.
    deadline = time.monotonic() + 120
    try:
        while (text := log.read_text(errors="replace")).count("no Kafka broker answered") < 2:
            assert proc.poll() is None and time.monotonic() < deadline, text[-3000:]
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    failures = [line for line in text.splitlines() if "no Kafka broker answered" in line]
    assert len(failures) >= 2, text[-3000:]
    assert settings.broker in failures[0] and "retrying in" in failures[0]
    assert "Traceback" not in text, text[-3000:]


def test_worker_takes_the_broker_as_faust_writes_it(broker_settings: Settings) -> None:
    settings = replace(broker_settings, role="passthrough")
    ensure_topics(settings, [settings.topic_raw, settings.topic_clean])
    with Worker(replace(settings, broker=f"kafka://{settings.broker}")):
        out = asyncio.run(_roundtrip(settings))
    assert out == [(b"6EH4", orjson.dumps(BAR))]


def worker_exit(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A worker run with `env` that must stop on its own at start-up."""
    return subprocess.run(
        [str(FAUST), "-A", "streams", "worker", "-l", "info"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_worker_with_a_malformed_broker_exits_2_naming_the_accepted_forms(
    broker_settings: Settings,
) -> None:
    env = {**os.environ, **broker_settings.to_env(), "BARCAST_BROKER": "kafka://127.0.0.1"}
    done = worker_exit(env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "BARCAST_BROKER" in done.stderr and "kafka://host:port" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [("BARCAST_MAX_BATCH", "0"), ("BARCAST_MAX_DELAY_MS", "-1"), ("BARCAST_PARTITIONS", "0")],
)
def test_worker_with_an_out_of_range_setting_exits_2_on_one_line(
    tmp_path: Path, name: str, value: str
) -> None:
    env = {**os.environ, "BARCAST_WORK_DIR": str(tmp_path), name: value}
    done = worker_exit(env)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"barcast worker: {name}=") and "is out of range; use" in line
    assert "Traceback" not in done.stderr
