"""A real `faust -A streams worker` subprocess: used by `barcast demo`, tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from streams.broker import free_port, stop_session
from streams.settings import REPO_ROOT, Settings

FAUST = Path(sys.executable).with_name("faust")


class WorkerProcess:
    """One worker process; its log is kept in `log_path` and shown when a wait fails."""

    def __init__(self, settings: Settings, name: str = "worker") -> None:
        self.settings = replace(settings, web_port=free_port())
        self.log_path = settings.work_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    def command(self) -> list[str]:
        return [
            str(FAUST),
            "-A",
            "streams",
            "worker",
            "-l",
            "info",
            "--web-port",
            str(self.settings.web_port),
        ]

    def spawn(self) -> None:
        """Start the process, its output appended to `log_path`; `log` shows only this run's."""
        env = {**os.environ, **self.settings.to_env(), "PYTHONUNBUFFERED": "1"}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start(self, ready_timeout_s: float = 120.0) -> WorkerProcess:
        self.spawn()
        try:
            self.wait_for_log("Ready", ready_timeout_s)
        except BaseException:
            self.kill()  # `with` never reaches __exit__ when start fails: don't leak it
            raise
        return self

    def log(self) -> str:
        """What this process wrote (the file may hold earlier runs' lines before it)."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def wait_for_log(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log():
                return
            self.check_alive()
            time.sleep(0.2)
        raise AssertionError(f"worker did not log {text!r} in {timeout_s}s:\n{self.log()[-5000:]}")

    def check_alive(self) -> None:
        """Raise, with the log, if the process has exited (a wait for its log is then over)."""
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"worker exited ({self.process.returncode}):\n{self.log()}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no final commit — a crash."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.process is None:
            return 0
        stop_session(self.process, timeout_s)
        return int(self.process.returncode or 0)

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
