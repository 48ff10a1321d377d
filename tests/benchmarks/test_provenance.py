"""What a results file records about its run (benchmarks/provenance.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import provenance


def test_a_run_names_every_file_that_differs_from_its_commit_and_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "kept.py").write_text("x = 1\n")
    git("add", "kept.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert provenance.run_metadata()["command"] == sys.orig_argv
    monkeypatch.setattr(provenance, "REPO", tmp_path)
    assert provenance.run_metadata()["dirty"] is False
    (tmp_path / "kept.py").write_text("x = 2\n")
    (tmp_path / "new.py").write_text("y = 1\n")  # not added: it runs all the same
    meta = provenance.run_metadata()
    assert meta["dirty"] is True and sorted(meta["dirty_paths"]) == ["kept.py", "new.py"]
    assert len(meta["commit"]) == 40
