"""The memory probe's instruments and arithmetic (benchmarks/memory_probe/run.py): RSS from /proc,
glibc's heap figures and trim through ctypes, the steps recorded, and the tables."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MB = 2**20
SAMPLE_S = 0.005
RELEASED = "released "


def status_mb(pid: int | str | None, field: str) -> float | None:
    """A `/proc/PID/status` memory field in MB (`VmRSS`: now, `VmHWM`: the peak so far)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


class Heap:
    """glibc's malloc, which numpy's and torch's CPU buffers and Python's large objects use."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        self.libc.mallinfo2.restype = _Mallinfo2
        self.libc.malloc_trim.argtypes = [ctypes.c_size_t]

    def figures(self) -> dict[str, float]:
        """In use (small blocks + mmapped ones) and free but kept, over every arena, in MB."""
        info = self.libc.mallinfo2()
        return {
            "heap_in_use_mb": round((info.uordblks + info.hblkhd) / MB, 1),
            "heap_free_mb": round(info.fordblks / MB, 1),
        }

    def trim(self) -> None:
        """Hand every arena's free pages back to the kernel, after a full collection."""
        gc.collect()
        self.libc.malloc_trim(0)


class Sampler(threading.Thread):
    """The RSS every SAMPLE_S, and the heap's figures and the phase when it was highest: what
    the peak was made of at the moment it happened (the steps see only their ends)."""

    def __init__(self, heap: Heap) -> None:
        super().__init__(daemon=True, name="memory-sampler")
        self.heap, self.phase, self.done = heap, "start", threading.Event()
        self.top: dict[str, Any] = {"rss_mb": 0.0}

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            rss = status_mb("self", "VmRSS") or 0.0
            if rss > self.top["rss_mb"]:
                self.top = {"rss_mb": rss, "phase": self.phase, **self.heap.figures()}

    def stop(self) -> dict[str, Any]:
        self.done.set()
        self.join()
        return self.top


@dataclass
class Probe:
    """Each step's RSS, the peak so far and the heap's figures, in the order they were taken."""

    heap: Heap
    sampler: Sampler
    steps: list[dict[str, Any]] = field(default_factory=list)
    ready_mb: float | None = None
    uncounted_mb: float = 0.0  # what the probe holds that the worker would not (its input)

    def step(self, name: str, counted: bool = True) -> dict[str, Any]:
        rss, hwm = status_mb("self", "VmRSS"), status_mb("self", "VmHWM")
        row = {"step": name, "rss_mb": rss, "peak_mb": hwm, **self.heap.figures()}
        if self.steps and rss is not None and self.steps[-1]["rss_mb"] is not None:
            row["delta_mb"] = round(rss - self.steps[-1]["rss_mb"], 1)
            if not counted:
                self.uncounted_mb += row["delta_mb"]
        self.steps.append(row)
        self.sampler.phase = f"after: {name}"
        print(f"  {name}: rss {rss} MB, peak {hwm} MB, {self.heap.figures()}", flush=True)
        return row

    def phase(self, name: str) -> None:
        """Name the work from now on, for the sampler's peak (no step recorded)."""
        self.sampler.phase = name

    def ready(self, name: str) -> None:
        self.ready_mb = self.step(name)["rss_mb"]

    def rss(self) -> float:
        return status_mb("self", "VmRSS") or 0.0

    def result(
        self,
        releases: dict[str, float],
        worker: dict[str, Any] | None,
        settings: dict[str, Any],
        described: dict[str, Any],
    ) -> dict[str, Any]:
        at_peak = self.sampler.stop()
        return summarize(self.steps, self.ready_mb, releases, worker) | {
            "at_peak": at_peak,
            "settings": {k: str(v) if v is not None else None for k, v in settings.items()},
            "uncounted_mb": round(self.uncounted_mb, 1),
            **described,
        }


def summarize(
    steps: list[dict[str, Any]],
    ready_mb: float | None,
    releases: dict[str, float],
    worker: dict[str, Any] | None,
) -> dict[str, Any]:
    """The peak over the ready process and its parts by release, the largest named, beside the
    real worker's figures."""
    peak = max(s["peak_mb"] or 0.0 for s in steps)
    grown = None if ready_mb is None else round(peak - ready_mb, 1)
    settled = [s["rss_mb"] for s in steps if not s["step"].startswith(RELEASED)][-1]
    named = sum(releases.values())
    kept = None if ready_mb is None else round(steps[-1]["rss_mb"] - ready_mb, 1)
    kinds = groups(releases) | {"in flight at the peak": round(peak - settled, 1)}
    return {
        "steps": steps,
        "peak_rss_mb": peak,
        "ready_rss_mb": ready_mb,
        "grown_mb": grown,
        # Held once the bursts are over (what the releases take apart), and above that at the
        # peak: what was in flight then.
        "settled_rss_mb": settled,
        "in_flight_at_peak_mb": round(peak - settled, 1),
        "released_mb": {k: round(v, 1) for k, v in releases.items()},
        "released_total_mb": round(named, 1),
        "groups_mb": kinds,
        "largest": max(kinds, key=kinds.__getitem__),
        # Everything named given back, what the process still holds over the ready one: Python's
        # small-object arenas (not malloc's) and whatever else no release named.
        "not_given_back_mb": kept,
        "worker": worker,
    }


def groups(releases: dict[str, float]) -> dict[str, float]:
    """The releases summed by kind: encoded changelog entries, decoded states, the rest."""
    out: dict[str, float] = {}
    for name, mb in releases.items():
        kind = name.split(": ", 1)[-1] if ": " in name else name
        out[kind] = round(out.get(kind, 0.0) + mb, 1)
    return out


def steps_table(steps: list[dict[str, Any]]) -> str:
    lines = [f"{'step':<58} {'rss MB':>8} {'delta':>7} {'peak MB':>8} {'heap':>7} {'free':>7}"]
    for s in steps:
        delta = "" if "delta_mb" not in s else f"{s['delta_mb']:+.1f}"
        lines.append(
            f"{s['step'][:58]:<58} {s['rss_mb']:>8.1f} {delta:>7} {s['peak_mb']:>8.1f} "
            f"{s['heap_in_use_mb']:>7.1f} {s['heap_free_mb']:>7.1f}"
        )
    return "\n".join(lines)


def release_table(result: dict[str, Any]) -> str:
    """The peak's growth over the ready process, and what each component gave back."""
    r, top = result, result["at_peak"]
    lines = [
        f"peak {r['peak_rss_mb']} MB, ready {r['ready_rss_mb']} MB: grown {r['grown_mb']} MB "
        f"(the probe's own input, {r['uncounted_mb']} MB, is in ready)",
        f"at the peak ({top.get('phase')}): heap in use {top.get('heap_in_use_mb')} MB, "
        f"free {top.get('heap_free_mb')} MB; {r['in_flight_at_peak_mb']} MB above the "
        f"settled {r['settled_rss_mb']} MB",
        "given back, by release:",
    ]
    width = max((len(k) for k in r["released_mb"]), default=10)
    for name, mb in sorted(r["released_mb"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {name:<{width}} {mb:>8.1f} MB")
    lines.append(f"  {'all named':<{width}} {r['released_total_mb']:>8.1f} MB")
    lines.append(f"  {'not given back':<{width}} {r['not_given_back_mb']:>8.1f} MB")
    lines.append("by kind: " + ", ".join(f"{k} {v} MB" for k, v in r["groups_mb"].items()))
    if w := r.get("worker"):
        lines.append(
            f"the worker (pipeline.json): peak {w['peak_rss_mb']} MB, grown {w['grown_mb']} MB "
            f"over ready, {w['other_mb']} MB of it unattributed there"
        )
    return "\n".join(lines)
