"""docs/benchmarks.md's encoders section: the pipeline run of both encoders
(`benchmarks/pipeline`, variant `encoders`), from benchmarks/results/pipeline_encoders.json."""

from __future__ import annotations

import json
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
        f"{p['loadavg_end'][0]:.2f}); medians over the restarts.",
        "",
        "| encoder | 1,000-symbol burst | engine alone | burst / engine | worker p50 / p99 "
        "| client p50 / p99 | held per symbol | peak growth per symbol |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("window", "stream"):
        lines.append(row(name, e[name]))
    lines += [
        "",
        f"Goals: burst <= {g['burst_1000_ms']:.0f} ms, <= {g['burst_over_engine']}x the engine "
        f"alone, worker p50 <= {g['worker_latency_p50_ms']:.0f} ms and p99 <= "
        f"{g['worker_latency_p99_ms']:.0f} ms.",
    ]
    return "\n".join(lines)


def row(name: str, r: dict[str, Any]) -> str:
    met = r["goals_met"]
    return (
        f"| {name} | {r['burst_1000_ms']:,.0f} ms {mark(met['burst_1000_ms'])} | "
        f"{r['engine_alone_ms']:,.0f} ms | {r['burst_over_engine']:.2f}x "
        f"{mark(met['burst_over_engine'])} | {r['worker_latency_p50_ms']:.0f} "
        f"{mark(met['worker_latency_p50_ms'])} / {r['worker_latency_p99_ms']:.0f} ms "
        f"{mark(met['worker_latency_p99_ms'])} | {r['latency_p50_ms']:.0f} / "
        f"{r['latency_p99_ms']:.0f} ms | {r['held_kb_per_symbol']:,.0f} KB | "
        f"{r['peak_growth_kb_per_symbol']:,.0f} KB |"
    )
