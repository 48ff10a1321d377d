"""The embedded broker's lifecycle: up on demand, and never left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams import broker as broker_module
from streams.broker import BrokerStartError, EmbeddedBroker
from streams.kafka import BrokerUnavailable, wait_for_metadata
from streams.settings import REPO_ROOT

pytestmark = pytest.mark.integration  # each test starts the embedded broker


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _child_session(tmp_path: Path, idle_s: float) -> tuple[subprocess.Popen[bytes], Path]:
    pid_file = tmp_path / "pid"
    env = {**os.environ, "BARCAST_TEST_PID_FILE": str(pid_file), "BARCAST_TEST_IDLE_S": str(idle_s)}
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/inner/broker_session.py",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return child, pid_file


def _wait_for(path: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.1)
    raise AssertionError(f"child session wrote no pid to {path}")


# Bounds, not waits: each loop ends on the event it waits for, and a loaded 2-core machine
# can take minutes to start a child pytest and its broker.
BOUND_S = 300


def test_session_fixture_leaves_no_tansu_process(tmp_path: Path) -> None:
    child, pid_file = _child_session(tmp_path, idle_s=0)
    out, _ = child.communicate(timeout=BOUND_S)
    assert child.returncode == 0, out.decode()
    assert not _alive(_wait_for(pid_file, 1))


def test_interrupted_session_leaves_no_tansu_process(tmp_path: Path) -> None:
    child, pid_file = _child_session(tmp_path, idle_s=2 * BOUND_S)  # outlasts every bound
    pid = _wait_for(pid_file, BOUND_S)
    assert _alive(pid)
    child.send_signal(signal.SIGINT)
    child.communicate(timeout=BOUND_S)
    deadline = time.monotonic() + BOUND_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_broker_answers_metadata_and_stops(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path) as broker:
        assert isinstance(wait_for_metadata(broker.bootstrap, 5), dict)
        pid = broker.pid
    assert pid is not None and not _alive(pid)
    assert broker.log_path.exists()
    with pytest.raises(BrokerUnavailable, match=broker.bootstrap):
        wait_for_metadata(broker.bootstrap, 1)


def test_a_picked_port_taken_before_tansu_binds_it_moves_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        ports = iter([taken_port, broker_module.free_port()])
        monkeypatch.setattr(broker_module, "free_port", lambda: next(ports))
        with EmbeddedBroker(tmp_path) as broker:
            assert broker.port != taken_port
            assert isinstance(wait_for_metadata(broker.bootstrap, 5), dict)
    assert "AddrInUse" in (tmp_path / f"tansu-{taken_port}.log").read_text()


def test_a_port_asked_for_and_taken_fails_naming_the_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerStartError, match=f"tansu-{port}.log"):
            EmbeddedBroker(tmp_path, port=port).start()
