"""`barcast promote` names the checkpoint to serve in the model directory's PROMOTE, where
every forecast worker's watcher reads it; a model id not there is refused, naming the fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from model.serving.checkpoints import PROMOTE, CheckpointWatcher, model_id_of
from streams.exit_codes import ExitCode
from streams.tools.cli import main
from tests.checkpoints import make_checkpoint


def test_promote_writes_the_newest_or_the_named_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = make_checkpoint(tmp_path / "a", seed=0)
    second = make_checkpoint(tmp_path / "b", seed=1)
    os.utime(tmp_path / "b" / "config.json", ns=(2 * 10**18, 2 * 10**18))  # the newest
    monkeypatch.setenv("BARCAST_MODEL_DIR", str(tmp_path))
    watcher = CheckpointWatcher(tmp_path)
    assert watcher.promoted() is None
    assert watcher.find(first) == tmp_path / "a" and model_id_of(tmp_path / "b") == second
    assert main(["promote"]) == ExitCode.OK
    assert watcher.promoted() == second and f"promote {second}" in capsys.readouterr().out
    assert main(["promote", first]) == ExitCode.OK
    assert (tmp_path / PROMOTE).read_text() == first + "\n"
    assert watcher.newest() == tmp_path / "b"  # PROMOTE is no checkpoint


def test_a_model_id_not_in_the_model_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BARCAST_MODEL_DIR", str(tmp_path))
    assert main(["promote"]) == ExitCode.FILE_NOT_FOUND
    make_checkpoint(tmp_path / "a")
    assert main(["promote", "0123456789abcdef"]) == ExitCode.FILE_NOT_FOUND
    err = capsys.readouterr().err
    assert "no checkpoint of model id 0123456789abcdef" in err and "weights.sha256" in err
    assert not (tmp_path / PROMOTE).exists()


def test_a_promote_no_worker_would_read_or_that_cannot_be_written_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With BARCAST_CANARY=off the workers read no PROMOTE (they serve the newest); a model
    directory that takes no file (mounted read-only) is named in one line, not a traceback."""
    make_checkpoint(tmp_path / "a")
    monkeypatch.setenv("BARCAST_MODEL_DIR", str(tmp_path))
    monkeypatch.setenv("BARCAST_CANARY", "off")
    assert main(["promote"]) == ExitCode.USAGE
    assert "BARCAST_CANARY is off" in capsys.readouterr().err
    monkeypatch.delenv("BARCAST_CANARY")
    (tmp_path / "PROMOTE.tmp").mkdir()  # a write that fails, as on a read-only mount
    assert main(["promote"]) == ExitCode.USAGE
    assert f"cannot write {tmp_path / PROMOTE}" in capsys.readouterr().err
    assert not (tmp_path / PROMOTE).exists()
