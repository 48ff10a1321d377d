"""`barcast replay`'s progress bar (tqdm): rate and ETA on a terminal, nothing in a log."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from streams.ingest.convert import write_dbn
from streams.ingest.replay import Replay, ReplayOptions
from streams.settings import Settings
from tests.streams.ingest.test_dbn_source import sample_metadata, sample_records


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def bar_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("progress") / "bars.dbn.zst"
    return write_dbn(path, sample_metadata(), sample_records(20_000))


def dry_run(path: Path, stream: io.StringIO, *before: Path) -> str:
    options = ReplayOptions(files=(*before, path), topic="bars.raw", dry_run=True)
    summary = Replay(Settings.from_env(), options, progress=stream).run()
    assert summary.encoded == 20_000
    return stream.getvalue()


def test_on_a_terminal_the_bar_shows_records_rate_and_eta(bar_file: Path) -> None:
    drawn = dry_run(bar_file, Terminal())
    final = drawn.rsplit("\r", 1)[-1]
    assert "\r" in drawn and final.startswith("replay: 100%"), drawn
    assert "20,000 records" in final and "B/s" in final, final
    assert "<00:00" in final, f"no ETA in {final!r}"


def test_a_definition_file_counts_in_the_total(bar_file: Path, dbn_files: list[Path]) -> None:
    definitions = next(p for p in dbn_files if "definition" in p.name)
    final = dry_run(bar_file, Terminal(), definitions).rsplit("\r", 1)[-1]
    assert final.startswith("replay: 100%"), final


def test_a_log_or_pipe_gets_no_frames(bar_file: Path) -> None:
    assert dry_run(bar_file, io.StringIO()) == ""
