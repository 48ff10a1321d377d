"""The whole pipeline, end to end, through the embedded broker and a real worker process.

One run, one broker, one consumer group (`BARCAST_ROLE=all` workers, restarted between the
configurations; each restart recovers its state from the Faust tables). The worker serves the
product's default model (`TFTConfig()`) with trained weights: `--checkpoint`, a default one
in BARCAST_MODEL_DIR, or one trained by a short fixed recipe (benchmarks/pipeline/models.py; the
output and the results say which). A random-weight model of `--random-hidden`/`--random-heads`
(64/4) gives the secondary rows only; `--hidden` (with `--heads`) serves a random-weight model
of that size instead of the product model, for rehearsals at toy sizes (gpu.sh --dry-run).

- (a) throughput: the 6EH4 month tiled over `--symbols` + `--live-symbols` synthetic symbols
  (each a different slice of the month on a common minute grid), `--minutes` bars each,
  minute by minute at max speed as a replay sends it; bars / (first produce -> last forecast
  received). Every expected forecast (the offline reference's, warm-up excluded) is counted.
- (b) latency: rounds of one bar for each live symbol + END_OF_INTERVAL every
  `--round-interval` s; send -> forecast received (client side) and the worker's `latency_ms`
  (corrections agent's receipt -> publish); then each Kafka hop alone, with the worker's and the
  collector's clients and fetch waits (benchmarks/pipeline/hops.py).
- (c) burst: one bar for each of the `--symbols` warm symbols, same minute, END_OF_INTERVAL;
  first send -> last of its forecasts received. `--repeats` bursts, each `SETTLE_S` after the
  one before and once the worker is idle again (client.settle), the median reported; with the
  CPU over each burst and the quiet after it.
- (d) the burst with BARCAST_MAX_BATCH=1: the best unbatched path (each window alone in an
  unpadded chunk of one, incremental encoding on), the batching anchor; (e) with
  BARCAST_INCREMENTAL_ENCODING=false, (c') the defaults, (g) with BARCAST_ONLINE_CALIBRATION=false
  (scoring still runs), (h) with scoring and calibration off (BARCAST_ONLINE_SCORING=false: the
  cost of both, the shadow baselines' too), (j) with the shadow baselines off
  (BARCAST_SHADOW_BASELINES=false: their cost, with the fallback's), (k) with a canary of the
  product's size running beside the model (a random-weight checkpoint dropped into the model
  directory), (i) with BARCAST_EXPLAIN=true (the explanations' cost), each after a restart;
  (f) secondary: the random-weight model, a canary promoted by `barcast promote` in the running
  worker. (d)-(k) measure `--variant-repeats` bursts after one unmeasured burst: the
  step-encoding cache and the static contexts live in memory only, and a restarted worker reads
  its windows back lazily. The costs of scoring, calibration, the shadow baselines, a canary
  and explanations are to (c'), a worker restarted the same way, not to (c); (c'), (h), (j)
  and (k) run `--pairs` times each, alternated, medians compared.
- (l) both encoders, the window and the stream one (benchmarks/pipeline/encoders.py): `--pairs`
  restarts of each, alternated, each with live latency, bursts, memory and the engine alone.
- the worker's peak RSS with every symbol's state held, and what it is made of
  (benchmarks/pipeline/memory.py).

Anchor, same run: the engine alone (`ForecastEngine.predict` in this process, same device,
threads and chunking) on the burst's 1,000 windows, so the ratio burst / inference is what Kafka,
Faust and the agents add on top of the model; one window at a time both unpadded (as the worker
with max_batch=1) and padded to a whole chunk (the batch-invariant chunks of max_batch > 1).

    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.pipeline \
        [--symbols 1000] [--minutes 190] [--checkpoint DIR | --hidden 16 --heads 2] \
        [--window-checkpoint DIR] [--random-hidden 64] [--variants nobatch,full,random] \
        [--out FILE]

A smoke run: `--symbols 40 --live-symbols 8 --minutes 140 --rounds 8 --repeats 2`.
The defaults replay 1,064 x 190 = 202,160 bars. The embedded broker keeps every record in
memory, table changelogs included, so watch its RSS (reported): `--minutes 140` (149k bars)
is the most a shared 2-core box with ~20 GB should take today.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import orjson
import torch

from benchmarks.pipeline.client import FETCH_WAIT_MS, Bench, ForecastCollector, topic_records
from benchmarks.pipeline.data import build_series, reference
from benchmarks.pipeline.encoders import (
    live_minutes,
    measure_encoders,
    prepare_encoders,
    table_rows,
    timed,
)
from benchmarks.pipeline.hops import probe
from benchmarks.pipeline.memory import breakdown, status_mb
from benchmarks.pipeline.models import random_checkpoint, saved_config, serve
from benchmarks.pipeline.report import Measured, results, table
from benchmarks.provenance import loadavg, run_metadata
from model.config import TFTConfig
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.programs import TORCH_THREADS
from streams.broker import EmbeddedBroker
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "benchmarks" / "results" / "pipeline.json"
VARIANTS = (
    "nobatch",
    "full",
    "defaults",
    "nocalibration",
    "noscoring",
    "noshadow",
    "canary",
    "explain",
    "random",
    "encoders",
)
# The variants whose cost is a ratio to the restarted defaults: alternated with them, `--pairs`
# restarts each (the defaults first)
PAIRED = ("defaults", "noscoring", "noshadow", "canary")
# What turns off the shadow baselines and all that scores beside them (the fallback, canaries)
NO_SHADOW = {"shadow_baselines": False, "serve": "model", "canary": False}


def inference_anchor(
    path: Path, windows: dict[int, list[WindowRequest]], settings: Settings
) -> dict:
    """The engine alone on the burst's windows, as the worker's inference thread runs it (on
    the worker's device: BARCAST_DEVICE=cuda makes both CUDA)."""
    torch.set_num_threads(TORCH_THREADS)
    engine = ForecastEngine.from_settings(path, settings)
    lone = ForecastEngine(path, settings.device, padded=False)  # the worker's, max_batch=1
    max_batch = settings.max_batch
    cold, warm, full, padded, single = (windows[m] for m in sorted(windows))
    result = {
        "inference_1000_cold_ms": timed(engine, cold, max_batch),  # empty cache: 60 steps each
        "inference_1000_ms": timed(engine, warm, max_batch),
        "inference_1000_full_ms": timed(engine, full, max_batch, incremental=False),
        "inference_1000_nobatch_padded_ms": timed(engine, padded, 1),
    }
    for request in padded[:3]:  # TorchScript optimizes a program on its first calls
        lone.predict([request])
    # Then the padded engine's step encodings, or streams: the same shapes, and a forecast's
    # time does not depend on its rounding; 60,000 steps one by one first would take minutes.
    served = engine.served
    lone.swap(
        replace(lone.served, cache=served.cache, static=served.static, streams=served.streams)
    )
    return result | {"inference_1000_nobatch_ms": timed(lone, single, 1)}


@dataclass
class Plan:
    """Which symbols and minutes each phase uses."""

    burst_rows: range
    live_rows: range
    burst_minutes: Iterator[int]
    total_minutes: int
    anchor_minutes: list[int]

    @classmethod
    def of(cls, args: argparse.Namespace) -> Plan:
        n_burst, n_live = args.symbols, args.live_symbols
        bursts_from = args.minutes  # the burst symbols' next minute after the throughput phase
        workers = len(VARIANTS) + len(PAIRED) * (args.pairs - 1)  # PAIRED run `pairs` times
        workers += 2 * args.pairs  # (l): each encoder `pairs` times
        n_bursts = args.repeats + workers * (1 + args.variant_repeats)  # + warm-ups
        live_until = args.minutes + args.rounds + live_minutes(args)
        return cls(
            burst_rows=range(n_burst),
            live_rows=range(n_burst, n_burst + n_live),
            burst_minutes=iter(range(bursts_from, bursts_from + n_bursts)),
            total_minutes=max(live_until, bursts_from + n_bursts, args.minutes + 4) + 1,
            anchor_minutes=[args.minutes + k for k in range(-1, 4)],
        )


def first_worker(
    bench: Bench, args: argparse.Namespace, plan: Plan, broker_pid: int | None, config: TFTConfig
) -> Measured:
    """(a), (b), (c), the worker's memory and (f), all in the first worker."""
    out = Measured()
    settings, n_symbols = bench.settings, len(bench.series.symbols)
    worker, out.restarts["first_start_s"] = bench.start_worker("worker-batched")
    ready_rss = status_mb(worker.pid, "VmRSS")
    try:
        out.e2e = bench.throughput(range(n_symbols), range(args.minutes), worker.pid, broker_pid)
        out.e2e["broker_rss_mb"] = status_mb(broker_pid, "VmRSS")
        out.e2e["changelog_records"] = topic_records(settings, f"{settings.app_id}-")
        bench.say(f"(a) {out.e2e}")
        out.live = bench.latency(plan.live_rows, args.minutes, args.rounds, args.round_interval)
        out.live["kafka_hops"] = probe(settings, FETCH_WAIT_MS)
        bench.say(f"(b) {out.live}")
        out.bursts["batched"] = bench.bursts(
            plan.burst_rows, plan.burst_minutes, "(c)", args.repeats, worker
        )
        out.memory = breakdown(config, n_symbols, ready_rss, status_mb(worker.pid, "VmHWM"))
        bench.say(f"worker memory: {out.memory}")
        if "random" in args.variants:  # a canary (BARCAST_CANARY), promoted by barcast promote
            started = time.perf_counter()
            random_checkpoint(settings.model_dir / "random", args.random_hidden, args.random_heads)
            worker.wait_for_log("runs beside", args.timeout_s)
            promote(settings.model_dir)
            worker.wait_for_log("barcast promote:", args.timeout_s)
            out.restarts["random_hot_reload_s"] = time.perf_counter() - started
            label = f"(f) random {args.random_hidden}/{args.random_heads}"
            out.bursts["random"] = bench.bursts(
                plan.burst_rows, plan.burst_minutes, label, args.variant_repeats, worker, True
            )
    finally:
        worker.stop()
    return out


def restarted_workers(
    bench: Bench,
    args: argparse.Namespace,
    plan: Plan,
    serving: Path,
    config: TFTConfig,
    out: Measured,
) -> None:
    """(d), (e), (c'), (g), (h), (j), (k) and (i), each in a worker restarted with its
    setting; (k) serves from a model directory of its own, where a canary lands once it runs."""
    variants = {
        "nobatch": ("(d) max_batch=1 (unpadded)", {"max_batch": 1}),
        "full": ("(e) full encoding", {"incremental_encoding": False}),
        "defaults": ("(c') the defaults, restarted", {}),
        "nocalibration": ("(g) online calibration off", {"online_calibration": False}),
        "noscoring": ("(h) scoring and calibration off", {"online_scoring": False}
                      | {"online_calibration": False} | NO_SHADOW),
        "noshadow": ("(j) shadow baselines off", NO_SHADOW),
        "canary": ("(k) a canary beside the model", {}),
        "explain": ("(i) explanations on", {"explain": True}),
    }  # fmt: skip
    # The cost ratios compare restarted workers only, each alternated with the defaults.
    # Forward in one pair, reversed in the next: drift over the run (the broker filling,
    # others' load) does not always fall on the variants after the defaults.
    paired = [v for k in range(args.pairs) for v in (PAIRED[:: -1 if k % 2 else 1])]
    first, rest = paired[: len(PAIRED)], paired[len(PAIRED) :]
    order = ["nobatch", "full", *first, "nocalibration", "explain", *rest]
    for run, name in enumerate([v for v in order if v in args.variants]):
        label, changes = variants[name]
        model_dir = serving
        if name == "canary":
            model_dir = serving.parent.parent / f"canary-{run}"
            shutil.copytree(serving, model_dir / "serving", dirs_exist_ok=True)
        try:
            worker, out.restarts[f"{name}_{run}_restart_s"] = bench.start_worker(
                f"worker-{name}-{run}", model_dir=model_dir, **changes
            )
            if name == "canary":  # a checkpoint of the product's size, random weights
                random_checkpoint(model_dir / "canary", config.hidden, config.heads, seed=run)
                worker.wait_for_log("runs beside", args.timeout_s)
        except AssertionError as exc:  # report the others rather than nothing
            out.errors[name] = str(exc).splitlines()[0]
            bench.say(f"{label}: {out.errors[name]}")
            continue
        try:
            out.bursts.setdefault(name, []).extend(
                bench.bursts(
                    plan.burst_rows,
                    plan.burst_minutes,
                    label,
                    args.variant_repeats,
                    worker,
                    True,
                )
            )
        finally:
            worker.stop()


def promote(model_dir: Path) -> None:
    """`barcast promote` of the newest checkpoint in `model_dir`."""
    env = os.environ | {"BARCAST_MODEL_DIR": str(model_dir)}
    subprocess.run([sys.executable, "-m", "streams.tools.cli", "promote"], env=env, check=True)


def run(args: argparse.Namespace) -> dict:
    base, plan = Settings.from_env(), Plan.of(args)
    provenance = run_metadata()  # now: others may commit while this runs
    t = time.perf_counter()
    series = build_series(base, args.symbols + args.live_symbols, plan.total_minutes)
    ref = reference(series, plan.burst_rows, plan.anchor_minutes)
    print(f"generated {len(series.symbols)} symbols x {plan.total_minutes} minutes and the "
          f"reference ({len(ref.keys):,} forecasts, {ref.statuses}) in "
          f"{time.perf_counter() - t:.1f}s", flush=True)  # fmt: skip

    base.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base.work_dir, prefix="bench-pipeline-") as tmp:
        folder = Path(tmp)
        serving = folder / "models" / "serving"
        product = serve(base, args.checkpoint, args.hidden, args.heads, serving)
        print(f"serving: {product.source}", flush=True)
        config = saved_config(serving)
        anchor = inference_anchor(serving, ref.anchor, base)
        print(f"engine alone, 1000 windows: {anchor}", flush=True)
        encoders = prepare_encoders(base, args, serving, ref.anchor)
        del ref.anchor

        with EmbeddedBroker(folder / "broker") as broker:
            settings = replace(
                base,
                broker=broker.bootstrap,
                app_id=f"barcast-bench-{int(time.time())}",
                role="all",
                model_dir=serving.parent,  # watched: (f) drops the random-weight checkpoint in
                work_dir=folder,
                connect_timeout_s=30.0,
            )
            ensure_topics(settings, pipeline_topics(replace(settings, explain=True)))  # for (i)
            collector = ForecastCollector(settings)
            collector.start()
            bench = Bench(series, ref, collector, settings, args.timeout_s, broker.pid)
            measured = first_worker(bench, args, plan, broker.pid, config)
            restarted_workers(bench, args, plan, serving, config, measured)
            if encoders is not None:
                measured.encoders = measure_encoders(bench, args, plan, encoders)
            collector.stopping.set()
            collector.join(timeout=5)
    model = {"weights": "trained" if product.trained else "random", "checkpoint": product.source}
    if encoders is not None:
        model["window_checkpoint"] = encoders.window_source
    return results(args, measured, anchor, config, model, collector.duplicates, ref) | {
        "settings": {
            "device": base.device,
            "max_batch": base.max_batch,
            "max_delay_ms": base.max_delay_ms,
            "partitions": base.partitions,
            "worker_torch_threads": TORCH_THREADS,
            "inference_threads": base.inference_threads,
        },
        "provenance": provenance | {"loadavg_end": loadavg()},
        "command": " ".join(["python -m benchmarks.pipeline", *sys.argv[1:]]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--symbols", type=int, default=1000, help="burst symbols")
    parser.add_argument("--live-symbols", type=int, default=64, help="paced-latency symbols")
    parser.add_argument("--minutes", type=int, default=190, help="bars per symbol in (a)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--round-interval", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3, help="batched bursts")
    parser.add_argument("--variant-repeats", type=int, default=2, help="bursts per variant")
    parser.add_argument(
        "--pairs", type=int, default=3, help="restarts of each of (c'), (h), (j), (k), alternated"
    )
    parser.add_argument("--random-hidden", type=int, default=64, help="secondary model")
    parser.add_argument("--random-heads", type=int, default=4)
    parser.add_argument(
        "--checkpoint", type=Path, help="serve this trained product-model checkpoint"
    )
    parser.add_argument(
        "--window-checkpoint",
        type=Path,
        help="with the encoders variant: serve this trained window-encoder checkpoint",
    )
    parser.add_argument(
        "--hidden",
        type=int,
        help="serve a random-weight model this wide instead of the trained product model "
        "(rehearsals: benchmarks/gpu/gpu.sh --dry-run)",
    )
    parser.add_argument("--heads", type=int, default=8, help="with --hidden")
    parser.add_argument(
        "--variants",
        type=lambda text: set(text.split(",")) if text else set(),
        default=set(VARIANTS),
        help=f"comma-separated subset of {','.join(VARIANTS)} (default: all)",
    )
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per phase and restart")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.minutes < 140:
        parser.error("--minutes must be >= 140: the first forecast needs ~133 bars")
    result = run(args)
    print()
    print(table(result, table_rows(result["encoders"])))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    print(f"wrote {args.out}")
