"""A throwaway CA and broker certificate, and a TLS listener in front of the embedded broker.

Tansu 0.6.0 cannot serve TLS (it builds a TLS acceptor and never uses it; see docs/operations.md,
"A real Kafka cluster"), so the TLS tests put `TlsFront` before it: TLS is terminated on a
loopback port and each connection is relayed in plaintext to Tansu, the way a Kafka cluster
behind a TLS-terminating proxy looks to its clients. The Kafka protocol is Tansu's own.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from streams.broker import free_port

# Clients reach the broker as localhost or 127.0.0.1; the certificate names both.
BROKER_EXTENSIONS = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the CA certificate (PEM): what BARCAST_SSL_CAFILE names
    cert: Path  # the broker certificate (PEM), signed by `ca`
    key: Path  # the broker's private key (PEM)


def _openssl(*args: str | Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the TLS tests make their certificates with the openssl command")
    subprocess.run([openssl, *map(str, args)], check=True, capture_output=True)


def make_certificates(directory: Path) -> TlsFiles:
    """A one-day CA and a broker certificate it signed for localhost and 127.0.0.1."""
    files = TlsFiles(directory / "ca.pem", directory / "broker.pem", directory / "broker.key")
    ca_key, request, extensions = (directory / n for n in ("ca.key", "broker.csr", "broker.ext"))
    extensions.write_text(BROKER_EXTENSIONS)
    _openssl(
        "req", "-x509", *EC_KEY, "-days", "1", "-subj", "/CN=barcast test CA",
        "-keyout", ca_key, "-out", files.ca,
    )  # fmt: skip
    _openssl(
        "req", "-new", *EC_KEY, "-subj", "/CN=localhost", "-keyout", files.key, "-out", request
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", request, "-CA", files.ca, "-CAkey", ca_key, "-CAcreateserial",
        "-days", "1", "-extfile", extensions, "-out", files.cert,
    )  # fmt: skip
    return files


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass  # either side hung up: the other is closed below
    finally:
        writer.close()


class TlsFront:
    """TLS with `files`' certificate on a free loopback port, relayed to `upstream_port`;
    `handshakes` counts the TLS handshakes it completed."""

    def __init__(self, files: TlsFiles, upstream_port: int) -> None:
        self.port = free_port()
        self.handshakes = 0
        self._upstream_port = upstream_port
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(files.cert, files.key)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self._upstream_port
        )
        self._writers.update((writer, upstream_writer))
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        self._writers.difference_update((writer, upstream_writer))

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._relay, "127.0.0.1", self.port, ssl=self._context
        )

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    def __enter__(self) -> TlsFront:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
