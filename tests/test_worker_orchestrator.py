"""The tests' orchestrator (tests/worker.py) without a broker: a stand-in child process takes
the worker's place. Each of its runs logs "Ready", waits for the test's go on a FIFO (so each
exit comes when the test says, after the orchestrator watches), and exits with that run's code;
a run past its codes serves until it is stopped."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from streams.settings import Settings
from tests.topic_logs import CleanLog
from tests.worker import Worker, check_workers

CHILD = """
import hashlib, os, signal, sys
runs, fifo, codes = sys.argv[1], sys.argv[2], [int(c) for c in sys.argv[3].split(",") if c]
with open(runs, "a+") as done:
    done.seek(0)
    run = len(done.read().splitlines())
    done.write("run\\n")
env = sorted((k, v) for k, v in os.environ.items() if k.startswith("BARCAST_"))
print(f"Ready (run {run}); env {hashlib.sha256(repr(env).encode()).hexdigest()}", flush=True)
if run >= len(codes):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as a worker stops: exit 0
    print("serving", flush=True)
    signal.pause()
with open(fifo) as go:
    go.read()
if codes[run] < 0:
    os.kill(os.getpid(), -codes[run])
sys.exit(codes[run])
"""


class FakeWorker(Worker):
    def __init__(self, settings: Settings, codes: list[int]) -> None:
        super().__init__(settings, "fake")
        self.runs, self.fifo = settings.work_dir / "runs", settings.work_dir / "go"
        os.mkfifo(self.fifo)
        self.codes = ",".join(map(str, codes))

    def command(self) -> list[str]:
        return [sys.executable, "-c", CHILD, str(self.runs), str(self.fifo), self.codes]

    def go(self) -> None:
        """Let the current run exit: opening the FIFO waits until the run reads it. Only once
        the run before has exited, or its reader may take (and drop) this go."""
        writer = threading.Thread(target=self.fifo.write_text, args=("go",), daemon=True)
        writer.start()
        writer.join(timeout=60)
        assert not writer.is_alive(), "the stand-in never waited for its go"

    def run_count(self) -> int:
        return len(self.runs.read_text().splitlines())


@pytest.fixture
def fake_settings(settings: Settings, tmp_path: Path) -> Settings:
    return replace(settings, work_dir=tmp_path)


def test_a_worker_that_exits_69_is_restarted_with_the_same_settings(
    fake_settings: Settings,
) -> None:
    worker = FakeWorker(fake_settings, [69])
    with worker:
        first_env = worker.log().split("env ")[1]
        worker.go()
        worker.wait_for_log("serving", 60)
        check_workers()
        assert worker.log().split("env ")[1].splitlines()[0] == first_env.splitlines()[0]
    assert [(r.worker, r.code) for r in worker.restarts] == [("fake", 69)]
    assert "Ready (run 0)" in worker.restarts[0].log_tail
    assert worker.run_count() == 2


@pytest.mark.parametrize("code", [70, 1, -9])
def test_any_other_exit_fails_at_once_and_is_not_restarted(
    fake_settings: Settings, code: int
) -> None:
    worker = FakeWorker(fake_settings, [code])
    worker.start()
    try:
        worker.go()
        cause = rf"worker exited \({code}\): 'fake', and .* restarts only exit 69(.|\n)*run 0"
        with pytest.raises(AssertionError, match=cause):
            worker.wait_for_log("serving", 60)
        with pytest.raises(AssertionError, match=cause):
            check_workers()
        log = CleanLog("127.0.0.1:9", "bars.clean", 1)  # no broker: only the worker can end it
        try:
            with pytest.raises(AssertionError, match=cause):
                log.read_until(1, timeout_s=60)
        finally:
            log.close()
    finally:
        worker.stop()
    assert worker.restarts == [] and worker.run_count() == 1


def test_restarts_are_bounded(fake_settings: Settings) -> None:
    worker = FakeWorker(fake_settings, [69] * 4)
    worker.start()
    try:
        with pytest.raises(AssertionError, match=r"exited \(69\): 'fake', again after 3 restarts"):
            for run in range(4):
                worker.wait_for_log(f"Ready (run {run})", 60)  # the run before it has exited
                worker.go()
            worker.wait_for_log("serving", 60)
    finally:
        worker.stop()
    assert len(worker.restarts) == worker.max_restarts == 3 and worker.run_count() == 4


def test_a_worker_the_test_kills_or_stops_stays_down(fake_settings: Settings) -> None:
    worker = FakeWorker(fake_settings, [])
    worker.start().wait_for_log("serving", 60)
    worker.kill()
    assert worker.process is not None and worker.process.returncode == -9
    check_workers()
    worker.start().wait_for_log("serving", 60)
    worker.stop()
    check_workers()
    assert worker.restarts == [] and worker.run_count() == 2
