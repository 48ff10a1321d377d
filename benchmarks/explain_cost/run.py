"""What per-forecast explanations (`BARCAST_EXPLAIN=true`) cost the forecast engine.

`ForecastEngine.predict` against `predict_explained` on the same 1,000 windows (1,000 symbols,
one window each, in micro-batches of `BARCAST_MAX_BATCH`), the two called in turn each round
(which goes first alternating) so that machine load hits them alike, on torch's worker thread
count. Times are this thread's CPU time (on a shared machine wall time also counts the others'
turns on the core; both are in the results), the ratio the median of the rounds' paired
ratios. Two cases:

- `warm`: the live minute. Each symbol's cache holds its previous window, so only the new bar
  of each window is encoded (incremental encoding; the explaining engine's cache holds the
  rows' selection weights as well).
- `cold`: a burst after a start: every window encoded whole (`incremental=False`).

Also timed: `explain_records` (the values and their JSON) for the 1,000 explanations, and the
bytes of a record and of a symbol's cached weights. The model is the product's size
(`TFTConfig()`) with random weights (benchmarks.pipeline.models.random_checkpoint): the costs
depend on the shapes, not on what the weights learned.

    .venv/bin/python -m benchmarks.explain_cost [--rounds 3] [--device cpu]

Writes benchmarks/results/explain_cost.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.pipeline.models import random_checkpoint
from benchmarks.provenance import loadavg, run_metadata
from model.config import TFTConfig
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.programs import TORCH_THREADS
from streams.runtime.stages.explained import explain_records
from streams.setting_rules import N_FEATURES
from streams.settings import Settings

RESULTS = Path(__file__).resolve().parents[1] / "results" / "explain_cost.json"
WINDOWS, TOP_K = 1000, 10
HIDDEN, HEADS = TFTConfig().hidden, TFTConfig().heads
T0, MINUTE = 1_704_200_000_000_000_000, 60_000_000_000


def requests(rows: np.ndarray, lookback: int, step: int) -> list[WindowRequest]:
    """Symbol k's window ends at row k + step + lookback of one shared series (views, no
    copies); `count` grows by one a step, so a warm cache encodes one new bar a window."""
    return [
        WindowRequest(
            f"S{k:04d}",
            b"S%04d" % k,
            k % 4,
            lookback + step,
            rows[k + step : k + step + lookback],
            T0 + step * MINUTE,
            1.0,
            0,
        )
        for k in range(WINDOWS)
    ]


def timed(fn: Any, batch: list[WindowRequest], size: int) -> tuple[tuple[float, float], list]:
    """(CPU, wall) seconds for all of `batch` in micro-batches of `size`, and each call's
    result. The CPU time of this thread (torch runs on it with one thread) leaves out the
    time other processes on a shared machine held the core."""
    wall, cpu = time.perf_counter(), time.thread_time()
    results = [fn(batch[i : i + size]) for i in range(0, len(batch), size)]
    return (time.thread_time() - cpu, time.perf_counter() - wall), results


def measure(engines: dict[str, ForecastEngine], rows: np.ndarray, rounds: int, size: int):
    """Per case and engine: the seconds of each round (after a warm-up round)."""
    plain, explaining = engines["predict"], engines["predict_explained"]
    lookback = plain.lookback
    calls = {
        "warm": (plain.predict, lambda b: explaining.predict_explained(b, True, TOP_K)),
        "cold": (
            lambda b: plain.predict(b, False),
            lambda b: explaining.predict_explained(b, False, TOP_K),
        ),
    }
    seconds: dict[str, dict[str, list[tuple[float, float]]]] = {case: {} for case in calls}
    last: list[Any] = []
    for step in range(rounds + 1):  # step 0: warm-up (static contexts, first caches)
        batch = requests(rows, lookback, step)
        for case, (predict, explained) in calls.items():
            if step % 2:  # which runs first alternates: neither always meets a cold cache
                t_plain, _ = timed(predict, batch, size)
                t_explained, last = timed(explained, batch, size)
            else:
                t_explained, last = timed(explained, batch, size)
                t_plain, _ = timed(predict, batch, size)
            if step:
                seconds[case].setdefault("predict", []).append(t_plain)
                seconds[case].setdefault("predict_explained", []).append(t_explained)
    explanations = [e for _, part in last for e in part]
    return seconds, explanations, requests(rows, lookback, rounds)


def summary(seconds: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """Medians of CPU time, and the median of each round's paired ratio (the two ran next to
    each other, under about the same load)."""
    cpu = {k: [s[0] for s in v] for k, v in seconds.items()}
    plain = statistics.median(cpu["predict"])
    explained = statistics.median(cpu["predict_explained"])
    pairs = list(zip(cpu["predict"], cpu["predict_explained"], strict=True))
    paired, extra = [e / p for p, e in pairs], [e - p for p, e in pairs]
    return {
        "predict_cpu_ms": round(plain * 1e3, 1),
        "predict_explained_cpu_ms": round(explained * 1e3, 1),
        "ratio": round(statistics.median(paired), 3),
        "ratio_per_round": [round(r, 3) for r in paired],
        "extra_us_per_window": round(statistics.median(extra) / WINDOWS * 1e6, 1),
        "rounds_cpu_ms": {k: [round(s * 1e3, 1) for s in v] for k, v in cpu.items()},
        "rounds_wall_ms": {k: [round(s[1] * 1e3, 1) for s in v] for k, v in seconds.items()},
    }


def publishing(engine: ForecastEngine, batch: list[WindowRequest], explanations: list[Any]):
    started = time.perf_counter()
    records = explain_records(engine, batch, explanations, "forecasts.explain")
    elapsed = time.perf_counter() - started
    weights = [c.weights for c in engine.served.cache.values() if c.weights is not None]
    return {
        "explain_records_ms": round(elapsed * 1e3, 1),
        "record_bytes_mean": round(float(np.mean([len(r.value) for r in records]))),
        "cached_weights_bytes_per_symbol": weights[0].nelement() * weights[0].element_size(),
    }


def run(rounds: int, device: str) -> dict[str, Any]:
    size = Settings().max_batch
    with tempfile.TemporaryDirectory() as tmp:
        path = random_checkpoint(Path(tmp) / "product", HIDDEN, HEADS)
        engines = {
            "predict": ForecastEngine(path, device),
            "predict_explained": ForecastEngine(path, device, explain=True),
        }
    lookback = engines["predict"].lookback
    rows = np.random.default_rng(0).normal(size=(WINDOWS + lookback + rounds + 1, N_FEATURES))
    seconds, explanations, batch = measure(engines, rows, rounds, size)
    explaining = engines["predict_explained"]
    return {
        "cases": {case: summary(s) for case, s in seconds.items()},
        **publishing(explaining, batch, explanations),
        "setup": {
            "windows": WINDOWS,
            "micro_batch": size,
            "top_k": TOP_K,
            "rounds": rounds,
            "device": str(explaining.device),
            "model": f"product size (hidden {HIDDEN}, {HEADS} heads), random weights "
            "(benchmarks.pipeline.models.random_checkpoint)",
        },
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'case':<6} {'predict':>11} {'explained':>11} {'ratio':>6} {'+us/window':>11}"
        "  (CPU ms per 1,000 windows, medians; ratio, +us: medians of the rounds' pairs)",
    ]
    for case, row in result["cases"].items():
        lines.append(
            f"{case:<6} {row['predict_cpu_ms']:>11.1f} {row['predict_explained_cpu_ms']:>11.1f} "
            f"{row['ratio']:>6.3f} {row['extra_us_per_window']:>11.1f}"
        )
    lines.append(
        f"explain_records: {result['explain_records_ms']} ms for {WINDOWS}; "
        f"{result['record_bytes_mean']} bytes a record; cached weights "
        f"{result['cached_weights_bytes_per_symbol']} bytes a symbol"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(TORCH_THREADS)
    provenance = run_metadata()  # now: others may commit while this runs
    print(f"{WINDOWS} windows, product-size TFT with RANDOM weights, on {args.device} ...")
    result = {**run(args.rounds, args.device), "provenance": provenance}
    result["provenance"]["loadavg_after"] = loadavg()
    print(table(result))
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0
