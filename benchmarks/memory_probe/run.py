"""What the forecast worker's peak memory is made of, measured in one process (issue #17).

The pipeline benchmark sees the worker's peak RSS from outside (benchmarks/pipeline/memory.py)
and can size only the per-symbol arrays from the layouts. This probe builds what a
`BARCAST_ROLE=all` worker holds, with the product's own classes: the stages (corrections,
features, windows, scoring and calibration) over stores whose changelog IO drops what it is
given (the worker hands it to the producer, which frees it once acked), the forecaster
(micro-batcher, inference thread, backlog rule) over a runtime whose producer holds each
agent batch's records until the batch ends, and the trained product-default model.

The pipeline benchmark's throughput phase is replayed as the worker consumes it: the 6EH4 month
tiled over `--symbols` symbols, `--minutes` bars each, in agent batches of `RUN_MAX` records,
stores flushed after each; then bursts of one bar for `--burst` symbols, END_OF_INTERVAL and
the flush, as in the benchmark's (c). RSS (`VmRSS`, peak `VmHWM`) and glibc's heap (mallinfo2:
in use, free but retained) are read after each step. The growth is then taken apart by
release: each component dropped in turn, the heap trimmed (`malloc_trim(0)`), and the RSS it
gives back recorded, the encoded changelog bytes apart from the decoded states.

    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.memory_probe \
        [--symbols 1064] [--minutes 190] [--burst 1000] [--bursts 2] [--checkpoint DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.memory_probe.parts import (
    Heap,
    Probe,
    Sampler,
    release_table,
    status_mb,
    steps_table,
)

OUT = Path(__file__).resolve().parents[1] / "results" / "memory_probe.json"
PIPELINE = OUT.with_name("pipeline.json")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--symbols", type=int, default=1064, help="the pipeline benchmark's 1000 + 64")
    p.add_argument("--minutes", type=int, default=190)
    p.add_argument("--burst", type=int, default=1000, help="symbols in each burst")
    p.add_argument("--bursts", type=int, default=2)
    p.add_argument("--checkpoint", type=Path, default=None)
    p.add_argument("--out", type=Path, default=OUT)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    gc.collect()
    assert status_mb("self", "VmRSS") is not None, "needs /proc (Linux)"
    args = parse_args(argv)
    from benchmarks.provenance import loadavg, run_metadata

    provenance = run_metadata()
    heap = Heap()
    probe = Probe(heap, Sampler(heap))
    probe.step("interpreter")
    probe.sampler.start()
    from benchmarks.memory_probe.worker import ProbeWorker, input_series

    probe.step("imports (torch, numba, the stages)")
    series = input_series(args.symbols, args.minutes + args.bursts)
    probe.step("the replay's input (the client's, not the worker's)", counted=False)
    worker = ProbeWorker(args.checkpoint, args.symbols)
    probe.ready("model ready")
    started = time.perf_counter()
    asyncio.run(worker.replay(series, range(args.minutes), probe))
    for burst in range(args.bursts):
        asyncio.run(worker.burst(series, args.minutes + burst, args.burst, probe))
    seconds = round(time.perf_counter() - started, 1)
    probe.step("bursts over: their records and locals freed")
    releases = worker.release(probe)
    provenance["loadavg_end"] = loadavg()
    result = probe.result(releases, _worker_peak(), vars(args), worker.describe())
    result.update(
        seconds=seconds,
        provenance=provenance,
        command=" ".join(["python -m benchmarks.memory_probe", *sys.argv[1:]]),
    )
    print(steps_table(result["steps"]))
    print(release_table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


def _worker_peak() -> dict[str, Any] | None:
    """The real worker's figures from the pipeline benchmark's results, to set beside ours."""
    try:
        memory = json.loads(PIPELINE.read_text())["worker_memory"]
    except (OSError, KeyError, ValueError):
        return None
    keys = ("peak_rss_mb", "ready_rss_mb", "grown_mb", "other_mb", "symbols")
    return {k: memory.get(k) for k in keys}
