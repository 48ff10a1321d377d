"""The worker subprocess the integration tests start (the same one `barcast demo` runs), and the
tests' orchestrator for it.

A worker that exits 69 (ExitCode.BROKER_FAILED: the Kafka cluster failed a request) has stopped
uncommitted, and the contract (docs/operations.md, Exit codes) is that the orchestrator restarts
it: outputs are at-least-once and idempotent, so the restarted worker's must still be
byte-identical. The tests have no orchestrator, so `Worker` is one, for exit 69 only and a
bounded number of times; any other exit a test did not cause (70, another code, a crash) is a
failure that the read helpers raise at once (`check_workers`) instead of waiting out their
timeouts.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import TracebackType

from streams.exit_codes import ExitCode
from streams.process import FAUST, WorkerProcess
from streams.settings import Settings

MAX_RESTARTS = 3  # per worker and test: beyond that the infrastructure failure is no blip
TAIL_LINES = 40


@dataclass(frozen=True)
class Restart:
    test: str
    worker: str
    code: int
    log_tail: str  # the end of the log of the run that exited


RESTARTS: list[Restart] = []  # this session's, in order: the terminal summary lists them
_WATCHED: set[Worker] = set()  # started, and not yet stopped or killed by their test


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]


class Worker(WorkerProcess):
    """A worker process under the tests' orchestrator: restarted with the same settings when
    it exits 69 on its own, at most `max_restarts` times (`restarts` records each); `check`
    raises any other exit the test did not cause. `log` is the current run's."""

    def __init__(
        self, settings: Settings, name: str = "worker", max_restarts: int = MAX_RESTARTS
    ) -> None:
        super().__init__(settings, name)
        self.name, self.max_restarts = name, max_restarts
        self.restarts: list[Restart] = []
        self.failure: str | None = None
        self._lock = threading.Lock()
        self._wanted = False  # running by the test's will: an exit now is the worker's own
        self._watcher: threading.Thread | None = None

    def start(self, ready_timeout_s: float = 120.0) -> Worker:
        self._wanted = True
        _WATCHED.add(self)
        try:
            while True:
                self.spawn()
                try:
                    self.wait_for_log("Ready", ready_timeout_s)
                    break
                except AssertionError:
                    code = self.process.poll() if self.process is not None else None
                    if code is None:  # no exit: it did not get ready in time
                        raise
                    if not self._restart_after(code):
                        raise AssertionError(self.failure) from None
        except BaseException:
            self.kill()  # `with` never reaches __exit__ when start fails: don't leak it
            raise
        self._watcher = threading.Thread(target=self._watch, name=self.name, daemon=True)
        self._watcher.start()
        return self

    def _watch(self) -> None:
        try:
            self._supervise()
        except BaseException as error:  # a watcher that dies silently would leave waits hanging
            self.failure = f"worker {self.name!r}: its orchestrator failed: {error!r}"

    def _supervise(self) -> None:
        """Wait for each run to end; restart it if the test still wants it and may."""
        while True:
            assert self.process is not None
            code = self.process.wait()
            with self._lock:
                if not self._wanted or not self._restart_after(code):
                    return
                self.spawn()

    def _restart_after(self, code: int) -> bool:
        """After an exit the test did not cause: True for one to restart (recorded, printed),
        else False, with `failure` naming the cause."""
        log_tail = tail(self.log())
        if code == ExitCode.BROKER_FAILED and len(self.restarts) < self.max_restarts:
            restart = Restart(current_test(), self.name, code, log_tail)
            self.restarts.append(restart)
            RESTARTS.append(restart)
            print(
                f"[orchestrator] worker {self.name!r} exited {code} (the Kafka cluster failed a "
                f"request): restart {len(self.restarts)} of at most {self.max_restarts}, same "
                f"settings; its log ended:\n{log_tail}",
                flush=True,
            )
            return True
        if code == ExitCode.BROKER_FAILED:
            why = f"again after {len(self.restarts)} restarts, this test's bound"
        else:
            why = "and the tests' orchestrator restarts only exit 69"
        self.failure = f"worker exited ({code}): {self.name!r}, {why}; its log ended:\n{log_tail}"
        return False

    def check(self) -> None:
        """Fail now if this worker exited in a way the orchestrator does not restart."""
        if self.failure is not None:
            raise AssertionError(self.failure)

    def check_alive(self) -> None:
        """Starting, an exit is for `start` to judge; once watched, only an exit the
        orchestrator does not restart fails a wait (a restart in progress does not)."""
        if self._watcher is None:
            super().check_alive()
        else:
            self.check()

    def kill(self) -> None:
        self._release()
        super().kill()
        self._join()

    def stop(self, timeout_s: float = 30.0) -> int:
        self._release()
        code = super().stop(timeout_s)
        self._join()
        return code

    def _release(self) -> None:
        """From now on an exit is the test's doing: no restart, no failure."""
        with self._lock:
            self._wanted = False
        _WATCHED.discard(self)

    def _join(self) -> None:
        if self._watcher is not None:
            self._watcher.join(timeout=30)
            assert not self._watcher.is_alive(), f"worker {self.name!r}: its watcher hangs"
            self._watcher = None

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        running = self.process is not None and self.process.poll() is None
        code = self.stop()
        if exc_type is None:
            self.check()  # a failure that no read of the test's came to see
            if running and code == ExitCode.BROKER_FAILED:
                # The cluster failed the last checkpoint: an infrastructure blip, as anywhere
                # else in a test; listed in the summary with the restarts.
                RESTARTS.append(Restart(current_test(), self.name, code, tail(self.log())))
                return
            # A worker stopped by SIGTERM takes its last checkpoint and exits 0, in time.
            assert not running or code == 0, f"{self.name!r} exited {code}:\n{tail(self.log())}"


def check_workers() -> None:
    """Fail now, naming the exit code and the log's end, if a worker a test runs has exited in a
    way the orchestrator does not restart: the read helpers call this on every poll, so a dead
    worker fails their wait at once rather than at its timeout."""
    for worker in list(_WATCHED):
        worker.check()


def release_workers() -> None:
    """Kill the workers a test left running (it failed before it stopped them)."""
    for worker in list(_WATCHED):
        worker.kill()


__all__ = ["FAUST", "RESTARTS", "Restart", "Worker", "check_workers", "release_workers", "tail"]
