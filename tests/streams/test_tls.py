"""TLS end to end: `barcast replay` (librdkafka), the worker (aiokafka) and `barcast tail` through
BARCAST_SECURITY_PROTOCOL=SSL and BARCAST_SSL_CAFILE, and each of them refused, naming
BARCAST_SSL_CAFILE, when it lacks the CA. The TLS listener is `tests.tls_certs.TlsFront` before
the embedded broker, which serves no TLS itself (see docs/operations.md, "A real Kafka
cluster")."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from streams import schema
from streams.broker import EmbeddedBroker, free_port, stop_session
from streams.exit_codes import ExitCode
from streams.ingest.convert import write_dbn
from streams.settings import REPO_ROOT, Settings
from tests.streams.ingest.test_dbn_source import sample_metadata, sample_records
from tests.tls_certs import TlsFiles, TlsFront, make_certificates
from tests.worker import FAUST, Worker

pytestmark = pytest.mark.integration

BARCAST = Path(sys.executable).with_name("barcast")
BARS = 40
REFUSAL = "BARCAST_SSL_CAFILE"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TlsFiles, TlsFront]]:
    directory = tmp_path_factory.mktemp("tls")
    files = make_certificates(directory)
    port = free_port()
    with (
        TlsFront(files, upstream_port=port) as front,
        EmbeddedBroker(directory, port=port, advertised_port=front.port),
    ):
        yield files, front


@pytest.fixture
def tls_settings(tls_broker: tuple[TlsFiles, TlsFront], tmp_path: Path) -> Settings:
    """SSL settings for the TLS listener, reached by the certificate's DNS name."""
    files, front = tls_broker
    return replace(
        Settings.from_env(),
        broker=f"localhost:{front.port}",
        security_protocol="SSL",
        ssl_cafile=str(files.ca),
        role="passthrough",
        app_id=f"barcast-tls-{tmp_path.name[-12:]}",
        topic_raw="bars.raw.tls",
        topic_clean="bars.clean.tls",
        work_dir=tmp_path,
        connect_timeout_s=5.0,
    )


@pytest.fixture
def bars_file(tmp_path: Path) -> Path:
    return write_dbn(tmp_path / "bars.dbn", sample_metadata(), sample_records(BARS))


def barcast(settings: Settings, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings.to_env()}
    command = [str(BARCAST), *map(str, argv)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def tail(settings: Settings, topic: str, count: int) -> list[tuple[str, object]]:
    """The first `count` messages of `topic`; `--max` waits for them, `--idle-exit` bounds it."""
    done = barcast(settings, "tail", topic, "--from-beginning", "--max", count, "--idle-exit", 60)
    assert done.returncode == 0, done.stderr
    messages = [orjson.loads(line) for line in done.stdout.splitlines()]
    return sorted((m["key"], orjson.dumps(m["value"]).decode()) for m in messages)


def test_replay_worker_and_tail_deliver_every_bar_over_tls(
    tls_settings: Settings, tls_broker: tuple[TlsFiles, TlsFront], bars_file: Path
) -> None:
    _, front = tls_broker
    replayed = barcast(tls_settings, "replay", bars_file)
    assert replayed.returncode == ExitCode.OK, replayed.stderr
    produced = orjson.loads(replayed.stdout)["produced"]
    assert produced > 0
    everything = produced + tls_settings.partitions  # and the end's control on each partition
    with Worker(tls_settings):  # the passthrough role copies bars.raw to bars.clean
        clean = tail(tls_settings, tls_settings.topic_clean, everything)
    assert len([key for key, _ in clean if key != schema.CONTROL_KEY.decode()]) == produced
    assert clean == tail(tls_settings, tls_settings.topic_raw, everything)
    assert front.handshakes >= 3  # replay, worker and tail each connected through TLS


@pytest.fixture
def without_ca(tls_settings: Settings) -> Settings:
    return replace(tls_settings, ssl_cafile="", connect_timeout_s=2.0)


def test_tail_without_the_ca_is_refused_naming_the_setting(without_ca: Settings) -> None:
    done = barcast(without_ca, "tail", without_ca.topic_raw)
    assert done.returncode == ExitCode.BROKER_UNAVAILABLE
    assert "certificate verify failed" in done.stderr and REFUSAL in done.stderr, done.stderr


def test_replay_without_the_ca_is_refused_naming_the_setting(
    without_ca: Settings, bars_file: Path
) -> None:
    done = barcast(without_ca, "replay", bars_file)
    assert done.returncode == ExitCode.BROKER_UNAVAILABLE
    assert "certificate verify failed" in done.stderr and REFUSAL in done.stderr, done.stderr
    assert orjson.loads(done.stdout)["produced"] == 0


def test_worker_without_the_ca_logs_the_setting_and_retries(without_ca: Settings) -> None:
    env = {**os.environ, **without_ca.to_env(), "BARCAST_WEB_PORT": str(free_port())}
    worker = subprocess.Popen(
        [str(FAUST), "-A", "streams", "worker", "-l", "info"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # A worker that never logs its refusal is stopped after a bound (generous: a loaded machine
    # may take a minute to start one), which ends its output.
    watchdog = threading.Timer(300.0, stop_session, (worker, 10.0))
    watchdog.start()
    try:
        assert worker.stdout is not None
        seen = []
        for line in worker.stdout:
            seen.append(line)
            if "retrying in" in line:
                break
    finally:
        watchdog.cancel()
        stop_session(worker, timeout_s=10.0)
    refusal = seen[-1] if seen else ""
    assert "certificate verify failed" in refusal and REFUSAL in refusal, "".join(seen)[-3000:]
