"""`barcast demo --serve`: the worker stays up until Ctrl-C, or until it exits on its own."""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from streams.process import WorkerProcess
from streams.settings import Settings
from streams.tools import demo

# A child Python serving a stand-in worker process (a `sleep`): Ctrl-C must reach the demo,
# end serving, and leave the worker for the demo's own orderly stop. The child takes SIGINT as
# a terminal's Ctrl-C reaches a foreground process, even when this run was started with it
# ignored (a shell's background job, as CI runs it), which its children would inherit.
CHILD = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from streams.tools import demo
from streams.process import WorkerProcess
from streams.settings import Settings
worker = WorkerProcess(Settings(work_dir=Path(sys.argv[1])))
worker.process = subprocess.Popen(["sleep", "300"])
demo.serve(worker, "http://127.0.0.1:1/")
print("served; worker alive:", worker.process.poll() is None, flush=True)
worker.process.kill()
"""


def test_serving_ends_when_the_worker_exits(tmp_path: Path) -> None:
    worker = WorkerProcess(replace(Settings(), work_dir=tmp_path))
    worker.process = subprocess.Popen(["true"])
    worker.process.wait()
    demo.serve(worker, "http://127.0.0.1:1/")  # returns: nothing left to serve


def test_ctrl_c_ends_serving_and_leaves_the_stop_to_the_demo(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first = child.stdout.readline()  # printed once serving has begun: then send Ctrl-C
    assert "serving http://127.0.0.1:1/ until Ctrl-C" in first
    child.send_signal(signal.SIGINT)
    rest, _ = child.communicate(timeout=30)
    assert child.returncode == 0, rest
    assert "Ctrl-C: stopping" in rest and "served; worker alive: True" in rest
