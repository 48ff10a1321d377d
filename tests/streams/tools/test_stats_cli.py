"""`barcast stats`: the one-line corrections summary, from the metrics a worker renders.

A live worker's endpoint is scraped in test_features_agent; here the line is checked against
known counters, and the errors against a port nobody listens on and a non-barcast body.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from streams.broker import free_port
from streams.exit_codes import ExitCode
from streams.metrics import Metrics, Outcome, Stage
from streams.tools import stats_cli


def test_line_reads_every_corrections_counter() -> None:
    metrics = Metrics()
    for outcome, n in [
        (Outcome.IN, 20),
        (Outcome.CLEAN, 12),
        (Outcome.CORRECTED, 3),
        (Outcome.DUPLICATE, 1),
        (Outcome.REJECTED, 4),
        (Outcome.SYNTHETIC, 5),
    ]:
        metrics.bar(Stage.CORRECTIONS, outcome, n)
    metrics.bar(Stage.FEATURES, Outcome.IN, 99)  # another stage: not in the line
    metrics.corrections.labels(rule="envelope").inc(2)
    metrics.corrections.labels(rule="scale_error").inc()
    metrics.rejections.labels(reason="late").inc(3)
    metrics.rejections.labels(reason="spike").inc()
    metrics.dlq.inc(4)
    metrics.gaps.inc(2)
    metrics.gap_minutes.inc(5)

    line = stats_cli.parse(metrics.render().decode()).line()

    assert line == (
        "bars in=20 clean=12 corrected=3 (envelope=2 scale_error=1) duplicate=1 "
        "rejected=4 (late=3 spike=1) dlq=4 gaps=2 (5 minutes) synthetic=5"
    )


def test_fresh_worker_prints_zeros() -> None:
    line = stats_cli.parse(Metrics().render().decode()).line()
    assert line == (
        "bars in=0 clean=0 corrected=0 duplicate=0 rejected=0 dlq=0 gaps=0 (0 minutes) synthetic=0"
    )


def test_unreachable_worker_is_one_line_and_nonzero(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    assert stats_cli.main(["--url", url, "--timeout", "2"]) == ExitCode.WORKER_UNREACHABLE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and url in err and "faust -A streams worker" in err


@pytest.fixture
def other_server() -> Iterator[str]:
    """An HTTP server that answers every GET with a body that is not barcast's metrics."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"# TYPE up gauge\nup 1\n")

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()
    server.server_close()


def test_other_metrics_are_refused(other_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert stats_cli.main(["--url", other_server]) == ExitCode.NOT_BARCAST
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "not a barcast worker" in err
