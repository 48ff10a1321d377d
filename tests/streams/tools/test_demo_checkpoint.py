"""`make demo` trains a new checkpoint rather than start a worker that would refuse the old one."""

from __future__ import annotations

import json
from pathlib import Path

from model.checkpoint import CONFIG
from streams.tools.demo import unusable
from tests.checkpoints import make_checkpoint


def test_a_checkpoint_of_another_format_version_is_unusable(tmp_path: Path) -> None:
    make_checkpoint(tmp_path)
    assert unusable(tmp_path) is None
    config = json.loads((tmp_path / CONFIG).read_text())
    (tmp_path / CONFIG).write_text(json.dumps(config | {"version": 1}))
    problem = unusable(tmp_path)
    assert problem is not None and "version 1" in problem and "retrain" in problem
