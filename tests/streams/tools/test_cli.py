"""`barcast ... | head`: a reader that leaves early ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streams.exit_codes import ExitCode

BARCAST = Path(sys.executable).with_name("barcast")


def test_features_list_into_a_reader_that_left_exits_without_a_traceback() -> None:
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        [str(BARCAST), "features", "list"], stdout=write_end, stderr=subprocess.PIPE
    )
    os.close(write_end)
    # The reader takes nothing and leaves before the command prints: every write meets a pipe
    # with no reader, whatever the machine's speed (a reader of a few lines could lose the race
    # to 24 kB that fit in the pipe's buffer).
    os.close(read_end)
    _, stderr = process.communicate(timeout=120)
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr.decode()
    assert process.returncode == ExitCode.BROKEN_PIPE, stderr.decode()
