"""A local Databento Historical endpoint for tests: the unmodified `databento.Historical`
client (`gateway="https://127.0.0.1:PORT"`, trusting the test CA through REQUESTS_CA_BUNDLE)
requests a span of a DBN file as it would from Databento.

It serves `POST /v0/timeseries.get_range` as databento-python calls it: form fields `dataset`,
`start`, `end` (UNIX ns or ISO), `symbols`, `schema`, `stype_in`, `encoding=dbn`,
`compression=zstd`, HTTP basic auth with the API key as the user name; the answer is metadata
and the file's bars with `start <= ts_event < end`, as zstd-compressed DBN. As Databento's,
the metadata of a `raw_symbol` request maps the raw symbols to instrument ids (the file's own
mappings), and that of a `parent` or `continuous` one names no raw symbol. It also serves
`POST /v0/symbology.resolve` from `instrument_id` to `raw_symbol`, from the file's mappings
(`{"result": {id: [{"d0", "d1", "s"}]}, ...}`). A wrong key gets 401 with Databento's JSON
error body.
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
import orjson
import pandas as pd
import zstandard
from databento_dbn import SType

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
        self.resolved: list[dict[str, str]] = []  # the symbology.resolve requests' forms
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
        metadata = self.metadata
        if request.stype_in != "raw_symbol":
            metadata = databento_dbn.Metadata(
                request.dataset, request.start, SType(request.stype_in), SType.INSTRUMENT_ID,
                databento_dbn.Schema(request.schema), list(request.symbols), [], [], [], None,
                None, False, 3,
            )  # fmt: skip
        data = metadata.encode() + b"".join(bytes(b) for b in bars)
        return zstandard.ZstdCompressor().compress(data)

    def resolve(self, form: dict[str, str]) -> bytes:
        """symbology.resolve of instrument ids to raw symbols, over the file's mappings."""
        assert (form["stype_in"], form["stype_out"]) == ("instrument_id", "raw_symbol"), form
        self.resolved.append(form)
        wanted = form["symbols"].split(",")
        result = {
            str(iv["symbol"]): [{"d0": str(iv["start_date"]), "d1": str(iv["end_date"]), "s": raw}]
            for raw, intervals in self.metadata.mappings.items()
            for iv in intervals
            if str(iv["symbol"]) in wanted
        }
        return orjson.dumps({
            "result": result, "symbols": wanted, "stype_in": "instrument_id",
            "stype_out": "raw_symbol", "start_date": form["start_date"],
            "end_date": form["end_date"], "partial": [], "not_found": [], "message": "OK",
            "status": 0,
        })  # fmt: skip

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                expected = base64.b64encode(f"{gateway.api_key}:".encode()).decode()
                if self.headers.get("Authorization") != f"Basic {expected}":
                    return self._send(401, b'{"detail": "Authentication failed."}', "json")
                length = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if self.path == "/v0/symbology.resolve":
                    return self._send(200, gateway.resolve(form), "json")
                if self.path != "/v0/timeseries.get_range":
                    return self._send(404, b'{"detail": "Not found."}', "json")
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
