"""(l) the two encoders in one run (issue 44): the product model, with the stream encoder, and the
same recipe with the window encoder (`TFTConfig(encoder="window")`), alternated.

`--pairs` times, a worker restarted on each encoder's checkpoint in turn, which one first
alternating from pair to pair:
live latency at `--live-symbols` (after an unmeasured round), in the worker's own span (receipt
-> publish) and at the client; then the 1,000-symbol burst (after an unmeasured one: a
restarted worker starts its streams again from the windows, or encodes them, on first use); its
resident memory when ready and at its peak. Beside them, in this process, the engine alone on
the burst's windows, the encoders alternated as often, at each inference thread count up to the
machine's cores (`thread_counts`: what BARCAST_INFERENCE_THREADS's default is chosen by). Each
encoder's burst is the median over all its restarts' measured bursts, its latencies the medians
of its restarts', its burst's ratio to its own engine alone at the workers' thread count.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from benchmarks.memory_probe.parts import MB
from benchmarks.pipeline.contention import busy_interpreter
from benchmarks.pipeline.memory import held_per_symbol, status_mb
from benchmarks.pipeline.models import saved_config, serve
from benchmarks.pipeline.report import GOALS as PIPELINE_GOALS
from benchmarks.pipeline.report import Bursts, ratio
from benchmarks.pipeline.worker_time import PARTS
from model.config import ENCODERS, TFTConfig
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.programs import TORCH_THREADS
from streams.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator

    from benchmarks.pipeline.client import Bench

# Issue 44's, for each encoder at the product model on one inference thread
GOALS = {
    "burst_1000_ms": PIPELINE_GOALS["burst_1000_ms"],
    "burst_over_engine": 1.2,
    "worker_latency_p50_ms": 30.0,
    "worker_latency_p99_ms": 100.0,
}


class Plan(Protocol):
    """What (l) reads of the run's plan (benchmarks.pipeline.run.Plan)."""

    burst_rows: range
    live_rows: range
    burst_minutes: Iterator[int]


@dataclass
class Encoders:
    """(l)'s checkpoints, one per encoder, and the engine alone on each."""

    paths: dict[str, Path]
    window_source: str  # how the benchmark came by the window encoder's checkpoint
    alone: dict[str, dict[str, dict[str, list[float]]]]  # encoder, threads: cold/warm times
    threads: int  # BARCAST_INFERENCE_THREADS, the workers'


def prepare_encoders(
    settings: Settings,
    args: argparse.Namespace,
    serving: Path,
    windows: dict[int, list[WindowRequest]],
) -> Encoders | None:
    """With the encoders variant: the window encoder's checkpoint beside the product's stream
    one `serving` (the same recipe, or the same random weights), and the engine alone on both."""
    if "encoders" not in args.variants:
        return None
    window = serving.parent.parent / "models-window" / "serving"
    served = serve(settings, args.window_checkpoint, args.hidden, args.heads, window, "window")
    print(f"serving, window encoder: {served.source}", flush=True)
    paths = {"window": window, "stream": serving}
    alone = engine_alone(paths, windows, settings, args.pairs)
    return Encoders(paths, served.source, alone, settings.inference_threads)


def measure_encoders(
    bench: Bench, args: argparse.Namespace, plan: Plan, encoders: Encoders
) -> dict[str, Any]:
    """(l)'s workers, then each encoder's figures."""
    runs = encoder_workers(bench, args, plan, encoders.paths)
    configs = {e: saved_config(path) for e, path in encoders.paths.items()}
    symbols = len(plan.burst_rows) + len(plan.live_rows)  # those its workers forecast
    return summary(runs, encoders, configs, symbols)


def in_turn(paths: dict[str, Path], pair: int) -> list[tuple[str, Path]]:
    """The encoders in the order of `pair`: reversed every other pair, so that drift over the
    run (a broker filling, others' load) does not always fall on the same one."""
    items = list(paths.items())
    return items if pair % 2 == 0 else items[::-1]


def timed(
    engine: ForecastEngine, requests: list[WindowRequest], batch: int, incremental: bool = True
) -> float:
    """ms for `engine` to forecast `requests` in batches of `batch`, as the worker does."""
    started = time.perf_counter()
    for i in range(0, len(requests), batch):
        engine.predict(requests[i : i + batch], incremental)
    return (time.perf_counter() - started) * 1000


def thread_counts(settings: Settings) -> list[int]:
    """The inference threads the engine alone is measured at: on CPU 1, 2, 4, ... up to the
    cores less the event loop's, and BARCAST_INFERENCE_THREADS (the default is chosen from
    these); on CUDA, where chunks run one after another, the setting's alone."""
    if settings.device != "cpu" and torch.cuda.is_available():
        return [settings.inference_threads]
    most = max(1, (os.cpu_count() or 1) - 1)
    doubling = {2**k for k in range(most.bit_length())}
    return sorted(doubling | {most, settings.inference_threads})


def engine_alone(
    paths: dict[str, Path], windows: dict[int, list[WindowRequest]], settings: Settings, pairs: int
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Per encoder and thread count, `pairs` fresh engines, alternated: each forecasts the
    burst's windows of the first anchor minute (cold: every window encoded, or its stream
    started, from its oldest row), then of the next (warm: one new bar a symbol, as in a live
    burst), and then, beside a busy event loop (benchmarks/pipeline/contention.py), of the
    fourth, after an untimed third."""
    torch.set_num_threads(TORCH_THREADS)
    cold, warm, settling, contended = sorted(windows)[:4]
    counts, batch = thread_counts(settings), settings.max_batch
    kinds = ("cold_ms", "warm_ms", "contended_ms")
    out = {e: {str(t): {kind: [] for kind in kinds} for t in counts} for e in paths}
    for pair in range(pairs):
        for encoder, path in in_turn(paths, pair):
            for threads in counts:
                engine = ForecastEngine(path, settings.device, threads=threads)
                times = out[encoder][str(threads)]
                times["cold_ms"].append(timed(engine, windows[cold], batch))
                times["warm_ms"].append(timed(engine, windows[warm], batch))
                with busy_interpreter():
                    timed(engine, windows[settling], batch)
                    times["contended_ms"].append(timed(engine, windows[contended], batch))
    return out


def live_minutes(args: argparse.Namespace) -> int:
    """The live symbols' minutes (l) takes after (b)'s: a warm-up round and the measured ones,
    for each encoder's restarts."""
    return len(ENCODERS) * args.pairs * (args.rounds + 1)


def encoder_workers(
    bench: Bench, args: argparse.Namespace, plan: Plan, model_dirs: dict[str, Path]
) -> dict[str, list[dict[str, Any]]]:
    """Each encoder's restarts, alternated (see the module doc); a restart that fails is
    recorded and the others still run."""
    runs: dict[str, list[dict[str, Any]]] = {e: [] for e in model_dirs}
    minute = args.minutes + args.rounds  # the live symbols' next, after (b)
    for pair in range(args.pairs):
        for encoder, model_dir in in_turn(model_dirs, pair):
            label = f"(l) {encoder} encoder"
            try:
                worker, restart_s = bench.start_worker(
                    f"worker-{encoder}-{pair}", model_dir=model_dir
                )
            except AssertionError as exc:
                runs[encoder].append({"error": str(exc).splitlines()[0]})
                bench.say(f"{label}: {runs[encoder][-1]['error']}")
                continue
            try:
                ready = status_mb(worker.pid, "VmRSS")
                live = bench.latency(
                    plan.live_rows, minute, args.rounds, args.round_interval, warm_up=True
                )
                bench.say(f"{label} latency: {live}")
                rows, repeats = plan.burst_rows, args.variant_repeats
                bursts = bench.bursts(rows, plan.burst_minutes, label, repeats, worker, True)
                peak = status_mb(worker.pid, "VmHWM")
            finally:
                worker.stop()
                minute += args.rounds + 1
            runs[encoder].append(
                {"restart_s": round(restart_s, 1), "latency": live, "bursts": bursts}
                | {"ready_rss_mb": ready, "peak_rss_mb": peak}
            )
    return runs


def summary(
    runs: dict[str, list[dict[str, Any]]],
    encoders: Encoders,
    configs: dict[str, TFTConfig],
    symbols: int,
) -> dict[str, Any]:
    """Each encoder's headline figures (medians over its restarts; the engine alone at the
    workers' inference threads, and at each count measured), and its goals met."""
    out: dict[str, Any] = {"goals": GOALS, "inference_threads": encoders.threads}
    out["order"] = "alternating"  # which encoder ran first, pair by pair: `in_turn`
    for encoder, restarts in runs.items():
        done = [r for r in restarts if "error" not in r]
        timed = Bursts({"burst": [b for r in done for b in r["bursts"]]})
        bursts = timed.median("burst")
        by_threads = {
            t: {kind: _median(ms) for kind, ms in times.items()}
            for t, times in encoders.alone[encoder].items()
        }
        engine = by_threads[str(encoders.threads)]
        figures = {
            "burst_1000_ms": bursts,
            "engine_alone_ms": engine["warm_ms"],
            "engine_alone_cold_ms": engine["cold_ms"],
            "engine_contended_ms": engine["contended_ms"],
            "burst_over_engine": ratio(bursts, engine["warm_ms"]),
            "engine_alone_by_threads": by_threads,
        }
        for side in ("worker_latency", "latency"):
            for q in ("p50", "p99"):
                figures[f"{side}_{q}_ms"] = _median([r["latency"][f"{side}_{q}_ms"] for r in done])
        figures["worker_time"] = {
            part: timed.median("burst", lambda b, part=part: b["worker_time"][part])
            for part in PARTS
        }
        figures |= memory(configs[encoder], symbols, done)
        figures["goals_met"] = {
            name: None if figures[name] is None else figures[name] <= goal
            for name, goal in GOALS.items()
        }
        out[encoder] = figures | {"restarts": restarts, "engine_alone": encoders.alone[encoder]}
    return out


def memory(config: TFTConfig, symbols: int, done: list[dict[str, Any]]) -> dict[str, Any]:
    """What a symbol costs the worker: the state it holds by the model's sizes, and the peak's
    growth over the ready worker, per symbol, measured (median over the restarts)."""
    grown = [
        (r["peak_rss_mb"] - r["ready_rss_mb"]) * MB / symbols
        for r in done
        if r["peak_rss_mb"] is not None and r["ready_rss_mb"] is not None
    ]
    held = held_per_symbol(config)
    return {
        "held_bytes_per_symbol": held,
        "held_kb_per_symbol": round(sum(held.values()) / 1024, 1),
        "peak_growth_kb_per_symbol": None
        if not grown
        else round(statistics.median(grown) / 1024, 1),
    }


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 1) if known else None


def table_rows(encoders: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """The encoders' rows of the printed table."""
    rows: list[tuple[str, Any, str]] = []
    for encoder in ENCODERS:
        if encoder not in encoders:
            continue
        e, goals = encoders[encoder], GOALS
        rows += [
            (f"(l) {encoder}: burst_1000_ms", e["burst_1000_ms"],
             f"ms (goal <= {goals['burst_1000_ms']:.0f}; engine alone {e['engine_alone_ms']} ms, "
             f"{e['burst_over_engine']}x, goal <= {goals['burst_over_engine']}; beside a busy "
             f"loop {e['engine_contended_ms']} ms)"),
            (f"(l) {encoder}: worker p50/p99",
             f"{e['worker_latency_p50_ms']}/{e['worker_latency_p99_ms']}",
             f"ms (receipt -> publish; goal <= {goals['worker_latency_p50_ms']:.0f}/"
             f"{goals['worker_latency_p99_ms']:.0f})"),
            (f"(l) {encoder}: client p50/p99", f"{e['latency_p50_ms']}/{e['latency_p99_ms']}",
             "ms (send -> received)"),
            (f"(l) {encoder}: per symbol", e["held_kb_per_symbol"],
             f"KB held by the model's sizes; peak growth {e['peak_growth_kb_per_symbol']} KB"),
            (f"(l) {encoder}: engine by threads",
             " ".join(f"{t}:{f['warm_ms']}" for t, f in e["engine_alone_by_threads"].items()),
             "ms (threads:warm burst, engine alone)"),
        ]  # fmt: skip
    return rows
