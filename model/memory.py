"""Peak memory of a training or benchmark run: resident memory on the CPU, allocated on a GPU."""

from __future__ import annotations

import resource
from pathlib import Path

import torch


def peak_memory_mb(device: torch.device) -> float:
    """Peak resident memory of this process (CPU), or peak allocated GPU memory (CUDA)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak RSS. Linux's VmHWM counts this program only, where ru_maxrss also
    inherits the peak of the parent a subprocess was forked from."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
