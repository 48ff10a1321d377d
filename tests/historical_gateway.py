"""A local Databento Historical endpoint for tests: the unmodified `databento.Historical`
client (`gateway="https://127.0.0.1:PORT"`, trusting the test CA through REQUESTS_CA_BUNDLE)
requests a span of a DBN file as it would from Databento.

It serves `POST /v0/timeseries.get_range` as databento-python calls it: form fields `dataset`,
`start`, `end` (UNIX ns or ISO), `symbols`, `schema`, `stype_in`, `encoding=dbn`,
`compression=zstd`, HTTP basic auth with the API key as the user name; the answer is the
file's metadata (its own symbol mappings) and its bars with `start <= ts_event < end`, as
zstd-compressed DBN. A wrong key gets 401 with Databento's JSON error body.
"""

from __future__ import annotations

import base64
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qs

import databento
import databento_dbn
import pandas as pd
import zstandard

from tests.tls_certs import TlsFiles


@dataclass(frozen=True)
class Request:
    dataset: str
    start: int
    end: int
    symbols: tuple[str, ...]
    schema: str
    stype_in: str


def _ns(text: str) -> int:
    return int(text) if text.isdigit() else int(pd.Timestamp(text, tz="UTC").value)


class HistoricalGateway:
    """Serves the bars of `dbn_path` over HTTPS with the certificate of `tls`."""

    def __init__(self, dbn_path: Path, api_key: str, tls: TlsFiles):
        store = databento.DBNStore.from_file(dbn_path)
        self.metadata = store.metadata
        self.bars = [r for r in store if isinstance(r, databento_dbn.OHLCVMsg)]
        self.api_key = api_key
        self.requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert, tls.key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> HistoricalGateway:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def answer(self, request: Request) -> bytes:
        bars = [b for b in self.bars if request.start <= b.ts_event < request.end]
        data = self.metadata.encode() + b"".join(bytes(b) for b in bars)
        return zstandard.ZstdCompressor().compress(data)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                expected = base64.b64encode(f"{gateway.api_key}:".encode()).decode()
                if self.headers.get("Authorization") != f"Basic {expected}":
                    return self._send(401, b'{"detail": "Authentication failed."}', "json")
                if self.path != "/v0/timeseries.get_range":
                    return self._send(404, b'{"detail": "Not found."}', "json")
                length = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                request = Request(
                    form["dataset"], _ns(form["start"]), _ns(form["end"]),
                    tuple(form["symbols"].split(",")), form["schema"], form["stype_in"],
                )  # fmt: skip
                gateway.requests.append(request)
                self._send(200, gateway.answer(request), "octet-stream")

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", f"application/{kind}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the tests read `requests`, not a log

        return Handler
