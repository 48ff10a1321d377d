"""The memory probe's pure parts (benchmarks/memory_probe/parts.py): its instruments and
arithmetic."""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks.memory_probe.parts import (
    RELEASED,
    Heap,
    groups,
    release_table,
    status_mb,
    steps_table,
    summarize,
)


def step(name: str, rss: float, peak: float) -> dict:
    return {"step": name, "rss_mb": rss, "peak_mb": peak, "heap_in_use_mb": 1.0,
            "heap_free_mb": 0.5}  # fmt: skip


def test_status_mb_reads_this_process_and_is_none_for_no_process() -> None:
    rss, peak = status_mb(os.getpid(), "VmRSS"), status_mb("self", "VmHWM")
    assert rss is not None and peak is not None and 0 < rss <= peak
    assert status_mb(None, "VmRSS") is None


def test_heap_figures_grow_with_an_allocation_and_trim_runs() -> None:
    heap = Heap()
    before = heap.figures()["heap_in_use_mb"]
    block = bytearray(64 * 2**20)
    assert heap.figures()["heap_in_use_mb"] >= before + 60
    del block
    heap.trim()
    assert set(heap.figures()) == {"heap_in_use_mb", "heap_free_mb"}


def test_summary_takes_the_peak_over_ready_and_what_was_in_flight() -> None:
    steps = [step("ready", 500.0, 500.0), step("burst", 800.0, 950.0)]
    steps.append(step("released cache", 700.0, 950.0))
    releases = {"cache": 100.0, "retention": 40.0}
    result = summarize(steps, 500.0, releases, None)
    assert result["grown_mb"] == 450.0
    assert result["settled_rss_mb"] == 800.0  # the last step before the releases
    assert result["in_flight_at_peak_mb"] == 150.0
    assert result["largest"] == "in flight at the peak" and result["released_total_mb"] == 140.0
    assert result["not_given_back_mb"] == 200.0  # the last step over ready


def test_groups_sum_the_releases_by_kind() -> None:
    releases = {"a: decoded states": 1.0, "b: decoded states": 2.0, "retention": 4.0}
    assert groups(releases) == {"decoded states": 3.0, "retention": 4.0}


def test_the_tables_name_every_step_and_release() -> None:
    steps = [step("ready", 500.0, 500.0), step("burst", 800.0, 950.0)]
    result = summarize(steps, 500.0, {"cache": 100.0}, {"peak_rss_mb": 1.0, "grown_mb": 2.0,
                                                          "other_mb": 3.0})  # fmt: skip
    result.update(at_peak={"phase": "burst"}, uncounted_mb=0.0)
    assert "not given back" in release_table(result)
    assert "burst" in steps_table(steps)
    table = release_table(result)
    assert "cache" in table and "pipeline.json" in table


def test_the_probe_runs_the_products_worker_end_to_end(tmp_path: Path) -> None:
    """The probe's worker is wired from the product's own stages and stores: a rename there
    must break this test, not only the next probe run (it once did, unnoticed)."""
    from benchmarks.memory_probe import run as memory_probe
    from benchmarks.pipeline.models import random_checkpoint

    checkpoint = random_checkpoint(tmp_path / "model", hidden=16, heads=2)
    out = tmp_path / "probe.json"
    sizes = ["--symbols", "6", "--minutes", "140", "--burst", "6", "--bursts", "1"]
    memory_probe.main([*sizes, "--checkpoint", str(checkpoint), "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["changelog_bytes_written"] > 0
    assert result["most_requests_waiting"] >= 6  # the burst's forecasts went to the model
    released = {step["step"] for step in result["steps"]}
    assert f"{RELEASED}scoring-state: decoded states" in released
