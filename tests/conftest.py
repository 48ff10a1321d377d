"""Shared fixtures: the data directory (one setting), the real 6EH4 month, the embedded broker;
and the rule that only tests marked `integration` start the broker or a worker process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from streams.broker import EmbeddedBroker
from streams.settings import Settings
from tests.checkpoints import torch_threads_of_a_worker
from tests.worker import RESTARTS, release_workers

RESTART_PROPERTY = "worker restart"  # a test report's user property
BROKER_AND_WORKERS = ("tansu", "faust")  # the programs only integration tests may start
SIXE_CSV = "6EH4.XCME_1min_bars_20240101_20240131.csv.gz"


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def data_dir(settings: Settings) -> Path:
    if not (settings.data_dir / SIXE_CSV).exists():
        pytest.fail(
            f"shared data not found in {settings.data_dir}; set BARCAST_DATA_DIR to the folder "
            f"holding {SIXE_CSV} and dbn/"
        )
    return settings.data_dir


@pytest.fixture(scope="session")
def sixe_csv(data_dir: Path) -> Path:
    return data_dir / SIXE_CSV


@pytest.fixture(scope="session")
def sixe_bars(sixe_csv: Path) -> pd.DataFrame:
    """The real 6EH4 month: ts_event (int64 ns UTC, bar open), OHLC (float64), volume."""
    from features.bars import read_bar_csv

    return read_bar_csv(sixe_csv)


@pytest.fixture(scope="session")
def dbn_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "dbn").glob("*.dbn.zst"))


@pytest.fixture(scope="session")
def embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """A live embedded Tansu broker for the whole session, stopped at the end even when the
    session is interrupted (the fixture's teardown and an atexit hook both stop it)."""
    with EmbeddedBroker(tmp_path_factory.mktemp("broker")) as embedded:
        yield embedded


@pytest.fixture(scope="session")
def broker(embedded_broker: EmbeddedBroker) -> str:
    """The session broker's bootstrap, "127.0.0.1:PORT"."""
    return embedded_broker.bootstrap


@pytest.fixture
def broker_settings(broker: str, tmp_path: Path) -> Settings:
    """Settings pointing at the session broker, with topic names unique to this test so tests
    sharing one broker never read each other's messages."""
    suffix = tmp_path.name.replace("_", "-")[-24:]
    base = Settings.from_env()
    return replace(
        base.isolated(suffix),
        broker=broker,
        work_dir=tmp_path,
        model_dir=tmp_path / "models",
        session_timeout_s=6.0,
        rebalance_timeout_s=3.0,
        connect_timeout_s=5.0,
    )


@pytest.fixture
def worker_threads() -> Iterator[int]:
    """The test's forecasts on the worker's torch thread count (torch_threads_of_a_worker)."""
    with torch_threads_of_a_worker() as threads:
        yield threads


@pytest.fixture(autouse=True)
def _workers_end_with_their_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A worker a test left running (it failed first) is killed, not restarted for the next.
    The test's orchestrator restarts go on its report, where the terminal summary finds them
    (under pytest-xdist the summary runs in another process than the test)."""
    before = len(RESTARTS)
    yield
    release_workers()
    for restart in RESTARTS[before:]:
        last = (restart.log_tail.splitlines() or [""])[-1][:200]
        line = f"{restart.test}: worker {restart.worker!r} exited {restart.code}"
        request.node.user_properties.append(
            (RESTART_PROPERTY, f"{line}\n    its last log line: {last}")
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Every restart of the tests' orchestrator (tests/worker.py), passed tests' too."""
    lines = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "teardown"
        for name, value in report.user_properties
        if name == RESTART_PROPERTY
    ]
    if lines:
        terminalreporter.section(
            "workers that exited 69: restarted, as an orchestrator would, unless their test ended"
        )
        for line in lines:
            terminalreporter.line(line)


def unmarked(item: pytest.Item, what: str) -> str:
    return (
        f"{item.nodeid} starts {what} but is not marked integration: mark it "
        "(@pytest.mark.integration), so that `make test-fast` leaves it out"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture runs: a test that takes the broker must be an integration test."""
    if "embedded_broker" in getattr(item, "fixturenames", ()) and not item.get_closest_marker(
        "integration"
    ):
        pytest.fail(unmarked(item, "the embedded broker (fixture embedded_broker)"))


@pytest.fixture(autouse=True)
def _brokers_and_workers_only_in_integration_tests(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test not marked integration that starts tansu or a faust worker, by any path, fails."""
    if request.node.get_closest_marker("integration"):
        return
    popen = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[bytes], args: object, *rest: object, **kw: object) -> None:
        first = args[0] if isinstance(args, list | tuple) else str(args).split(" ")[0]
        program = Path(str(first)).name
        if program.startswith(BROKER_AND_WORKERS):
            pytest.fail(unmarked(request.node, f"a {program} process"))
        popen(self, args, *rest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
