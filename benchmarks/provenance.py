"""What a results file records about the run behind it: commit, versions, threads, CPU and load.

Call `run_metadata()` when the run starts (others commit in this shared checkout meanwhile) and
`loadavg()` again when it ends.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run_metadata() -> dict[str, Any]:
    import numba
    import numpy
    import torch

    # Modified, staged and untracked alike: a new module not yet added runs too.
    dirty = [line.split(maxsplit=1)[-1] for line in _git("status", "--porcelain").splitlines()]
    return {
        "commit": _git("rev-parse", "HEAD"),
        "command": sys.orig_argv,
        "dirty": bool(dirty),
        # The checkout is shared: which files differed tells whether they could matter.
        "dirty_paths": dirty,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numba": numba.__version__,
        "numpy": numpy.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "machine": platform.machine(),
        "loadavg": loadavg(),
    }


def loadavg() -> list[float]:
    """The 1-, 5- and 15-minute load averages: on a shared machine, how busy it was."""
    return [round(x, 2) for x in os.getloadavg()]


def cpu_s(pid: int | None, tid: int | None = None) -> float:
    """CPU seconds (user + system) a process has used so far, all its threads, or its thread
    `tid` alone; NaN where /proc does not say (no such process)."""
    stat = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
