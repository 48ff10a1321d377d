"""docs/benchmarks.md's encoders section: the pipeline run of both encoders
(`benchmarks/pipeline`, variant `encoders`), from benchmarks/results/pipeline_encoders.json."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.docs.benchmark_tables import tree_at
from benchmarks.docs.cells import mark
from streams.settings import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"


def encoders_table(results: Path = RESULTS) -> str:
    """A row per encoder: the burst against its engine alone, live latency, memory per symbol."""
    path = results / "pipeline_encoders.json"
    if not path.exists():
        return "The encoders variant has not run yet."
    run = json.loads(path.read_text())
    e, p = run["encoders"], run["provenance"]
    g = e["goals"]
    lines = [
        f"Both encoders in one run (`--variants encoders`, at {tree_at(p)}, {p['cpu_model']}, "
        f"{e['inference_threads']} inference thread, load average {p['loadavg'][0]:.2f} to "
        f"{p['loadavg_end'][0]:.2f}); medians over the restarts, "
        + (
            "which encoder ran first alternating from pair to pair."
            if e.get("order") == "alternating"
            else "the window encoder first in every pair "
            "(drift over the run falls on the stream encoder)."
        ),
        "",
        "| encoder | 1,000-symbol burst | engine alone | beside a busy loop | burst / engine "
        "| worker CPU / burst | worker p50 / p99 | client p50 / p99 | held per symbol "
        "| peak growth per symbol |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("window", "stream"):
        lines.append(row(name, e[name]))
    lines += [
        "",
        f"Goals: burst <= {g['burst_1000_ms']:.0f} ms, <= {g['burst_over_engine']}x the engine "
        f"alone, worker p50 <= {g['worker_latency_p50_ms']:.0f} ms and p99 <= "
        f"{g['worker_latency_p99_ms']:.0f} ms. Beside a busy loop: the engine alone while a "
        "thread of its process runs Python without pause (benchmarks/pipeline/contention.py), "
        "as the event loop does through most of a burst (the real loop can hold the engine up "
        "longer: see that module). Worker CPU / burst: the worker's CPU "
        "time over a burst's wall time (median over the measured bursts). The event loop and "
        "the inference "
        "thread both have work through most of a burst, so a figure near 1x says one mostly "
        "waits for the other: for the interpreter's lock, or for a core while the broker and "
        "the client hold the other.",
    ]
    lines += [time_line(name, e[name]) for name in ("window", "stream") if "worker_time" in e[name]]
    return "\n".join(lines)


def time_line(name: str, r: dict[str, Any]) -> str:
    """Where the worker's time went in a burst of the encoder (medians over the bursts)."""
    t = r["worker_time"]
    return (
        f"\n{name.capitalize()} encoder, a burst's worker time (medians over the bursts): the "
        f"event loop's thread used {t['loop_cpu_ms']:,.0f} ms of CPU; the loop spent "
        f"{t['agent_ms']:,.0f} ms in the agent's stages and {t['publish_ms']:,.0f} ms "
        "publishing forecasts (wall times, waits for the interpreter's lock included), the "
        "rest of its time in Faust's and Kafka's clients, commits and timers; the inference "
        f"thread ran {t['micro_batches']:.0f} micro-batches in {t['inference_ms']:,.0f} ms."
    )


def row(name: str, r: dict[str, Any]) -> str:
    met = r["goals_met"]
    return (
        f"| {name} | {r['burst_1000_ms']:,.0f} ms {mark(met['burst_1000_ms'])} | "
        f"{r['engine_alone_ms']:,.0f} ms | {contended(r)} | {r['burst_over_engine']:.2f}x "
        f"{mark(met['burst_over_engine'])} | {cpu_over_wall(r):.2f}x | "
        f"{r['worker_latency_p50_ms']:.0f} "
        f"{mark(met['worker_latency_p50_ms'])} / {r['worker_latency_p99_ms']:.0f} ms "
        f"{mark(met['worker_latency_p99_ms'])} | {r['latency_p50_ms']:.0f} / "
        f"{r['latency_p99_ms']:.0f} ms | {r['held_kb_per_symbol']:,.0f} KB | "
        f"{r['peak_growth_kb_per_symbol']:,.0f} KB |"
    )


def cpu_over_wall(r: dict[str, Any]) -> float:
    """The median over an encoder's measured bursts of the worker's CPU time / the wall time."""
    ratios = [
        b["worker_cpu_ms"] / b["ms"]
        for restart in r["restarts"]
        for b in restart.get("bursts", [])
        if not b.get("warm_up") and b.get("worker_cpu_ms") is not None and b["ms"]
    ]
    return statistics.median(ratios)


def contended(r: dict[str, Any]) -> str:
    """The engine beside a busy loop, or a dash where the run predates the measure."""
    ms = r.get("engine_contended_ms")
    return "-" if ms is None else f"{ms:,.0f} ms"
