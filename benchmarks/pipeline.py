"""The whole pipeline, end to end, through the embedded broker and a real worker process.

One run, one broker, one consumer group (`BARCAST_ROLE=all` workers, restarted between the
configurations; each restart recovers its state from the Faust tables):

- (a) throughput: the 6EH4 month tiled over `--symbols` + `--live-symbols` synthetic symbols
  (each a different slice of the month on a common minute grid), `--minutes` bars each,
  minute by minute at max speed as a replay sends it; bars / (first produce -> last forecast
  received). Every expected forecast (the offline reference's, warm-up excluded) is counted.
- (b) latency: rounds of one bar for each live symbol + END_OF_INTERVAL every
  `--round-interval` s; send -> forecast received (client side) and the worker's `latency_ms`
  (corrections agent's receipt -> publish).
- (c) burst: one bar for each of the `--symbols` warm symbols, same minute, END_OF_INTERVAL;
  first send -> last of its forecasts received. `--repeats` bursts, `SETTLE_S` apart, the
  median reported.
- (f) the product-default model (hidden 128, heads 8), hot-reloaded into the running worker;
  (d) the burst with BARCAST_MAX_BATCH=1 and (e) with BARCAST_INCREMENTAL_ENCODING=false, each
  after a restart. (d)-(f) measure after one unmeasured burst: the step-encoding cache and the
  static contexts live in memory only, and a restarted worker reads its windows back lazily.

Anchor, same run: the engine alone (`ForecastEngine.predict` in this process, same device,
threads and chunking) on the burst's 1,000 windows, so the ratio burst / inference is what Kafka,
Faust and the agents add on top of the model.

    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pipeline.py \
        [--symbols 1000] [--minutes 190] [--hidden 64 --heads 4 | --checkpoint DIR] \
        [--variants product,nobatch,full] [--out benchmarks/results/pipeline.json]

The defaults replay 1,064 x 190 = 202,160 bars. The embedded broker keeps every record in
memory, table changelogs included, so watch its RSS (reported): `--minutes 140` (149k bars)
is the most a shared 2-core box with ~20 GB should take today.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file, this folder would shadow the `model` package
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import numpy as np
import orjson
import torch

from benchmarks.provenance import loadavg, run_metadata
from model.config import TFTConfig
from streams.broker import EmbeddedBroker
from streams.corrections import bars_from_frame, correct_history
from streams.forecast.engine import ForecastEngine, WindowRequest
from streams.forecast.offline import window_requests
from streams.ingest.convert import SIXE_CSV, read_bar_csv
from streams.ingest.producer import BarProducer
from streams.kafka import confluent_config, ensure_topics, pipeline_topics
from streams.process import WorkerProcess
from streams.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "benchmarks" / "results" / "pipeline.json"
MINUTE_NS = 60_000_000_000
GOALS = {"burst_1000_ms": 1000.0, "batching_speedup": 10.0}
# Live, bursts come a minute apart and the worker checkpoints in the quiet between them
# (streams.agents.checkpoint); bursts sent back to back would each pay the one before's.
SETTLE_S = 2.0
LOOKBACK = TFTConfig().lookback
Key = tuple[str, int]  # (symbol, ts_event)


@dataclass
class Series:
    """Every symbol's raw bars on one minute grid: `values[k][m]` is symbol k's bar of minute m."""

    symbols: list[str]
    values: list[list[bytes]]
    t0: int

    def ts(self, minute: int) -> int:
        return self.t0 + minute * MINUTE_NS

    def messages(
        self, rows: Iterable[int], minutes: Iterable[int]
    ) -> tuple[list[bytes], list[bytes], list[int]]:
        """(values, keys, Kafka timestamps in ms), minute by minute, like a replay sends them."""
        rows = list(rows)
        values, keys, stamps = [], [], []
        for m in minutes:
            for k in rows:
                values.append(self.values[k][m])
                keys.append(self.symbols[k].encode())
                stamps.append(self.ts(m) // 1_000_000)
        return values, keys, stamps

    def keys(self, rows: Iterable[int], minutes: Iterable[int]) -> set[Key]:
        return {(self.symbols[k], self.ts(m)) for m in minutes for k in rows}


def build_series(settings: Settings, n_symbols: int, n_minutes: int) -> Series:
    month = read_bar_csv(settings.data_dir / SIXE_CSV)
    t0 = int(month["ts_event"].iloc[0])
    symbols = [f"S{k:04d}" for k in range(n_symbols)]
    grid = t0 + np.arange(n_minutes, dtype=np.int64) * MINUTE_NS
    values = []
    for k, symbol in enumerate(symbols):
        start = (k * 211) % (len(month) - n_minutes)
        frame = month.iloc[start : start + n_minutes].assign(ts_event=grid)
        bars = bars_from_frame(frame, symbol=symbol, instrument_id=1 + k, source="replay:bench")
        values.append([orjson.dumps(bar) for bar in bars])
    return Series(symbols, values, t0)


@dataclass
class Reference:
    """What the worker must publish (the offline rule), and the burst windows for the anchor."""

    keys: set[Key]
    anchor: dict[int, list[WindowRequest]]  # minute -> one window per burst symbol
    statuses: dict[str, int]


def reference(series: Series, burst_rows: range, anchor_minutes: list[int]) -> Reference:
    keys: set[Key] = set()
    anchor: dict[int, list[WindowRequest]] = {m: [] for m in anchor_minutes}
    statuses: dict[str, int] = {}
    for k, symbol in enumerate(series.symbols):
        clean = correct_history(series.values[k]).clean
        for bar in clean:
            statuses[bar["status"]] = statuses.get(bar["status"], 0) + 1
        mine = []
        for request in window_requests(symbol, clean, LOOKBACK):
            keys.add((symbol, request.ts_event))
            if k in burst_rows and (request.ts_event - series.t0) // MINUTE_NS in anchor:
                mine.append(request)
        if mine:  # the anchor's windows overlap: one copy of their rows, each window a view
            rows = np.concatenate([mine[0].values, *(r.values[-1:] for r in mine[1:])])
            for i, request in enumerate(mine):
                request.values = rows[i : i + LOOKBACK]
                anchor[(request.ts_event - series.t0) // MINUTE_NS].append(request)
    return Reference(keys, anchor, statuses)


def make_checkpoint(directory: Path, hidden: int, heads: int, seed: int = 0) -> Path:
    """A serving-size TFT with random weights in the real checkpoint format."""
    from features import engine as feature_engine
    from model import checkpoint
    from model.covariates import SymbolVocab
    from model.normalization import Normalizer
    from model.tft import TemporalFusionTransformer

    torch.manual_seed(seed)
    vocab = SymbolVocab.from_symbols(["6EH4", "ESU4", "NQU4"])
    config = TFTConfig(hidden=hidden, heads=heads, n_symbols=vocab.size, dropout=0.0)
    rng = np.random.default_rng(seed)
    normalizer = Normalizer.fit(rng.normal(size=(256, config.n_hist)))
    meta = checkpoint.untrained_meta(config, vocab, normalizer, feature_engine.FINGERPRINT)
    checkpoint.save(directory, TemporalFusionTransformer(config).eval(), meta)
    return directory


def inference_anchor(
    path: Path, windows: dict[int, list[WindowRequest]], settings: Settings
) -> dict:
    """The engine alone on the burst's windows, as the worker's inference thread runs it (on
    the worker's device: BARCAST_DEVICE=cuda makes both CUDA)."""
    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    engine = ForecastEngine.from_settings(path, settings)
    max_batch = settings.max_batch
    cold, warm, full, single = sorted(windows)

    def timed(minute: int, batch: int, incremental: bool = True) -> float:
        requests = windows[minute]
        started = time.perf_counter()
        for i in range(0, len(requests), batch):
            engine.predict(requests[i : i + batch], incremental)
        return (time.perf_counter() - started) * 1000

    return {
        "inference_1000_cold_ms": timed(cold, max_batch),  # empty cache: 60 steps each
        "inference_1000_ms": timed(warm, max_batch),
        "inference_1000_full_ms": timed(full, max_batch, incremental=False),
        "inference_1000_nobatch_ms": timed(single, 1),
    }


@dataclass
class Arrival:
    at: float  # time.perf_counter() when the client received it
    batch_size: int
    latency_ms: float
    model_id: str


class ForecastCollector(threading.Thread):
    """Reads `forecasts` from the beginning in the background and notes when each arrived."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True, name="forecast-collector")
        self.settings = settings
        self.arrived: dict[Key, Arrival] = {}
        self.order: list[Key] = []
        self.duplicates: list[list] = []  # (symbol, ts_event, model id, batch size)
        self.condition = threading.Condition()
        self.stopping = threading.Event()

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        config = {"group.id": f"bench-{time.time_ns()}", "enable.auto.commit": False}
        consumer = Consumer(confluent_config(self.settings, **config, **{"fetch.wait.max.ms": 5}))
        topic = self.settings.topic_forecasts
        consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(self.settings.partitions)]
        )
        try:
            while not self.stopping.is_set():
                messages = consumer.consume(1000, 0.05)
                now = time.perf_counter()
                parsed = [orjson.loads(m.value()) for m in messages if not m.error()]
                if not parsed:
                    continue
                with self.condition:
                    for v in parsed:
                        key = (v["symbol"], v["ts_event"])
                        if key in self.arrived:
                            self.duplicates.append([*key, v["model_id"], v["batch_size"]])
                            continue
                        self.arrived[key] = Arrival(
                            now, v["batch_size"], v["latency_ms"], v["model_id"]
                        )
                        self.order.append(key)
                    self.condition.notify_all()
        finally:
            consumer.close()

    def wait_for(self, expected: set[Key], timeout_s: float) -> set[Key]:
        """Block until every expected forecast arrived or the timeout; returns the missing."""
        deadline = time.monotonic() + timeout_s
        with self.condition:
            missing = expected - self.arrived.keys()
            seen = len(self.order)
            while missing and time.monotonic() < deadline:
                self.condition.wait(0.2)
                missing.difference_update(self.order[seen:])
                seen = len(self.order)
        return missing

    def arrivals(self, keys: Iterable[Key]) -> list[Arrival]:
        with self.condition:
            return [self.arrived[k] for k in keys if k in self.arrived]


@dataclass
class Bench:
    series: Series
    ref: Reference
    collector: ForecastCollector
    settings: Settings
    timeout_s: float
    _live: BarProducer | None = None

    @property
    def live(self) -> BarProducer:
        """One unbuffered producer for the paced rounds and the bursts, connected once."""
        if self._live is None:
            self._live = BarProducer(self.settings, self.settings.topic_raw, linger_ms=0.0)
        return self._live

    def expected(self, rows: Iterable[int], minutes: Iterable[int]) -> set[Key]:
        return self.series.keys(rows, minutes) & self.ref.keys

    def say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def start_worker(self, name: str, **changes: Any) -> tuple[WorkerProcess, float]:
        """A worker with these setting changes, once it recovered its tables."""
        started = time.perf_counter()
        worker = WorkerProcess(replace(self.settings, **changes), name=name)
        try:
            # WorkerProcess.start leaves the process running when its wait fails: stop it here.
            worker.start(ready_timeout_s=self.timeout_s)
            worker.wait_for_log("Worker ready", self.timeout_s)  # Faust's: recovery complete
        except BaseException:
            worker.stop()
            raise
        seconds = time.perf_counter() - started
        self.say(f"{name} ready in {seconds:.1f}s (pid {worker.pid}, {changes or 'defaults'})")
        return worker, seconds

    def throughput(self, rows: range, minutes: range, worker: int, broker: int) -> dict:
        """(a); also the CPU seconds the worker, the broker and this client used meanwhile
        (the machine is shared: bars per worker CPU second does not depend on the load)."""
        values, keys, stamps = self.series.messages(rows, minutes)
        expected = self.expected(rows, minutes)
        producer = BarProducer(self.settings, self.settings.topic_raw)
        self.say(f"(a) producing {len(values):,} bars; {len(expected):,} forecasts expected")
        cpu = (cpu_s(worker), cpu_s(broker), time.process_time())
        started = time.perf_counter()
        producer.send_bars(values, keys, stamps)
        producer.send_control(self.series.ts(minutes.stop))  # the last minute is complete
        assert producer.flush() == 0, "bars not delivered"
        produced = time.perf_counter() - started
        missing = self.collector.wait_for(expected, self.timeout_s)
        arrivals = self.collector.arrivals(expected)
        seconds = max(a.at for a in arrivals) - started if arrivals else float("nan")
        after = (cpu_s(worker), cpu_s(broker), time.process_time())
        worker_cpu, broker_cpu, client_cpu = (b - a for a, b in zip(cpu, after, strict=True))
        batches = [a.batch_size for a in arrivals]
        return {
            "bars": len(values),
            "symbols": len(rows),
            "forecasts_expected": len(expected),
            "forecasts_received": len(arrivals),
            "forecasts_missing": len(missing),
            "produce_s": round(produced, 3),
            "seconds": round(seconds, 3),
            "e2e_bars_per_s": round(len(values) / seconds, 1) if arrivals else None,
            "forecasts_per_s": round(len(arrivals) / seconds, 1) if arrivals else None,
            "batch_size_mean": round(float(np.mean(batches)), 1) if batches else None,
            "worker_cpu_s": round(worker_cpu, 1),
            "broker_cpu_s": round(broker_cpu, 1),
            "client_cpu_s": round(client_cpu, 1),
            "bars_per_worker_cpu_s": round(len(values) / worker_cpu, 1),
        }

    def latency(self, rows: range, first_minute: int, rounds: int, interval_s: float) -> dict:
        producer = self.live
        sent: dict[Key, float] = {}
        self.say(f"(b) {rounds} rounds of {len(rows)} bars + END_OF_INTERVAL every {interval_s}s")
        for r in range(rounds):
            minute = first_minute + r
            values, keys, stamps = self.series.messages(rows, [minute])
            at = time.perf_counter()
            producer.send_bars(values, keys, stamps)
            producer.send_control(self.series.ts(minute + 1))
            sent.update(dict.fromkeys(self.expected(rows, [minute]), at))
            time.sleep(max(0.0, at + interval_s - time.perf_counter()))
        producer.flush()
        missing = self.collector.wait_for(set(sent), self.timeout_s)
        client, worker = [], []
        for key in sent.keys() - missing:
            arrival = self.collector.arrivals([key])[0]
            client.append((arrival.at - sent[key]) * 1000)
            worker.append(arrival.latency_ms)
        return {
            "rounds": rounds,
            "symbols": len(rows),
            "interval_s": interval_s,
            "forecasts_expected": len(sent),
            "forecasts_received": len(client),
            "latency_p50_ms": _pct(client, 50),
            "latency_p99_ms": _pct(client, 99),
            "latency_max_ms": _pct(client, 100),
            "worker_latency_p50_ms": _pct(worker, 50),
            "worker_latency_p99_ms": _pct(worker, 99),
        }

    def burst(self, rows: range, minute: int, label: str) -> dict:
        producer = self.live
        values, keys, stamps = self.series.messages(rows, [minute])
        expected = self.expected(rows, [minute])
        started = time.perf_counter()
        producer.send_bars(values, keys, stamps)
        producer.send_control(self.series.ts(minute + 1))
        producer.poll(0)
        missing = self.collector.wait_for(expected, self.timeout_s)
        arrivals = self.collector.arrivals(expected)
        producer.flush()
        times = sorted((a.at - started) * 1000 for a in arrivals)
        ms = times[-1] if times else float("nan")
        result = {
            "minute": minute,
            "bars": len(values),
            "forecasts_expected": len(expected),
            "forecasts_received": len(arrivals),
            "forecasts_missing": len(missing),
            "ms": round(ms, 1),
            "first_ms": _pct(times, 0),  # when forecasts start coming out, and the middle one
            "median_ms": _pct(times, 50),
            "worker_latency_max_ms": _pct([a.latency_ms for a in arrivals], 100),
            "batch_sizes": sorted({a.batch_size for a in arrivals}),
            "model_id": arrivals[0].model_id if arrivals else None,
        }
        self.say(f"{label} minute {minute}: {ms:,.0f} ms, {len(arrivals)}/{len(expected)}")
        return result

    def bursts(
        self, rows: range, minutes: Iterator[int], label: str, count: int, warm_up: bool = False
    ) -> list[dict]:
        """`count` bursts, after an unmeasured one when the worker just (re)loaded its model
        or state (empty step-encoding cache, static contexts, windows not yet read back)."""
        runs = []
        if warm_up:
            time.sleep(SETTLE_S)
            runs.append({**self.burst(rows, next(minutes), f"{label} warm-up"), "warm_up": True})
        for _ in range(count):
            time.sleep(SETTLE_S)
            runs.append(self.burst(rows, next(minutes), f"{label} burst"))
        return runs


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system, all threads) a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def rss_mb(pid: int | None) -> float | None:
    """Resident memory of a process (the broker keeps every message in memory)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def topic_records(settings: Settings, prefix: str) -> dict[str, int]:
    """Records per topic whose name starts with `prefix` (the tables' changelogs)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_config(settings, **{"group.id": "bench-sizes"}))
    try:
        topics = consumer.list_topics(timeout=10).topics
        return {
            name.removeprefix(prefix): sum(
                consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1]
                for p in topic.partitions
            )
            for name, topic in sorted(topics.items())
            if name.startswith(prefix)
        }
    finally:
        consumer.close()


def run(args: argparse.Namespace) -> dict:
    base = Settings.from_env()
    n_burst, n_live = args.symbols, args.live_symbols
    burst_rows, live_rows = range(n_burst), range(n_burst, n_burst + n_live)
    bursts_from = args.minutes  # the burst symbols' next minute after the throughput phase
    n_bursts = args.repeats + 3 * (1 + args.variant_repeats)
    burst_minutes = iter(range(bursts_from, bursts_from + n_bursts))
    total_minutes = max(args.minutes + args.rounds, bursts_from + n_bursts, args.minutes + 3) + 1
    anchor_minutes = [args.minutes - 1, args.minutes, args.minutes + 1, args.minutes + 2]

    provenance = run_metadata()  # now: others may commit while this runs
    t = time.perf_counter()
    series = build_series(base, n_burst + n_live, total_minutes)
    ref = reference(series, burst_rows, anchor_minutes)
    print(f"generated {len(series.symbols)} symbols x {total_minutes} minutes and the "
          f"reference ({len(ref.keys):,} forecasts, {ref.statuses}) in "
          f"{time.perf_counter() - t:.1f}s", flush=True)  # fmt: skip

    base.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base.work_dir, prefix="bench-pipeline-") as tmp:
        folder = Path(tmp)
        models = folder / "models"
        serving = models / "serving"
        if args.checkpoint:
            shutil.copytree(args.checkpoint, serving)
        else:
            make_checkpoint(serving, args.hidden, args.heads)
        config = TFTConfig.from_dict(orjson.loads((serving / "config.json").read_bytes())["model"])
        anchor = inference_anchor(serving, ref.anchor, base)
        del ref.anchor
        print(f"engine alone, 1000 windows: {anchor}", flush=True)

        with EmbeddedBroker(folder / "broker") as broker:
            settings = replace(
                base,
                broker=broker.bootstrap,
                app_id=f"barcast-bench-{int(time.time())}",
                role="all",
                model_dir=models,  # watched: (f) drops the product-size checkpoint in
                work_dir=folder,
                connect_timeout_s=30.0,
            )
            ensure_topics(settings, pipeline_topics(settings))
            collector = ForecastCollector(settings)
            collector.start()
            bench = Bench(series, ref, collector, settings, args.timeout_s)
            restarts: dict[str, float] = {}
            bursts: dict[str, list[dict]] = {}
            errors: dict[str, str] = {}
            worker, restarts["first_start_s"] = bench.start_worker("worker-batched")
            try:
                e2e = bench.throughput(
                    range(n_burst + n_live), range(args.minutes), worker.pid, broker.pid
                )
                e2e["broker_rss_mb"] = rss_mb(broker.pid)
                e2e["changelog_records"] = topic_records(settings, f"{settings.app_id}-")
                bench.say(f"(a) {e2e}")
                live = bench.latency(live_rows, args.minutes, args.rounds, args.round_interval)
                bench.say(f"(b) {live}")
                bursts["batched"] = bench.bursts(burst_rows, burst_minutes, "(c)", args.repeats)
                if "product" in args.variants:
                    started = time.perf_counter()
                    make_checkpoint(models / "product", 128, 8)
                    worker.wait_for_log("hot-reloaded checkpoint", args.timeout_s)
                    restarts["product_hot_reload_s"] = time.perf_counter() - started
                    bursts["product"] = bench.bursts(
                        burst_rows, burst_minutes, "(f) 128/8", args.variant_repeats, warm_up=True
                    )
            finally:
                worker.stop()
            variants = [
                ("nobatch", "(d) max_batch=1", {"max_batch": 1}),
                ("full", "(e) full encoding", {"incremental_encoding": False}),
            ]
            for name, label, changes in [v for v in variants if v[0] in args.variants]:
                try:
                    worker, restarts[f"{name}_restart_s"] = bench.start_worker(
                        f"worker-{name}", model_dir=serving, **changes
                    )
                except AssertionError as exc:  # report the others rather than nothing
                    errors[name] = str(exc).splitlines()[0]
                    bench.say(f"{label}: {errors[name]}")
                    continue
                try:
                    bursts[name] = bench.bursts(
                        burst_rows, burst_minutes, label, args.variant_repeats, warm_up=True
                    )
                finally:
                    worker.stop()
            collector.stopping.set()
            collector.join(timeout=5)
            duplicates = collector.duplicates

    def median(name: str) -> float | None:
        runs = [b["ms"] for b in bursts.get(name, []) if not b.get("warm_up")]
        return round(statistics.median(runs), 1) if runs else None

    batched, nobatch, full = median("batched"), median("nobatch"), median("full")
    return {
        "e2e_bars_per_s": e2e["e2e_bars_per_s"],
        "latency_p50_ms": live["latency_p50_ms"],
        "latency_p99_ms": live["latency_p99_ms"],
        "burst_1000_ms": batched,
        "burst_symbols": n_burst,
        "burst_1000_nobatch_ms": nobatch,
        "batching_speedup": round(nobatch / batched, 2) if batched and nobatch else None,
        "burst_1000_full_ms": full,
        "incremental_speedup": round(full / batched, 2) if batched and full else None,
        "burst_1000_product_model_ms": median("product"),
        "burst_over_inference": round(batched / anchor["inference_1000_ms"], 2)
        if batched
        else None,
        "goals": GOALS,
        "throughput": e2e,
        "latency": live,
        "bursts": bursts,
        "inference_anchor": {k: round(v, 1) for k, v in anchor.items()},
        "restarts": {k: round(v, 1) for k, v in restarts.items()},
        "errors": errors,
        "duplicate_forecasts": len(duplicates),
        "duplicate_examples": duplicates[:10],
        "reference_statuses": ref.statuses,
        "model": {
            "hidden": config.hidden,
            "heads": config.heads,
            "lstm_layers": config.lstm_layers,
            "var_dim": config.var_dim,
            "lookback": config.lookback,
            "checkpoint": str(args.checkpoint) if args.checkpoint else "random weights",
        },
        "settings": {
            "device": base.device,
            "max_batch": base.max_batch,
            "max_delay_ms": base.max_delay_ms,
            "partitions": base.partitions,
            "store": base.store,
            "worker_torch_threads": max(1, (os.cpu_count() or 2) - 1),
        },
        "provenance": provenance | {"loadavg_end": loadavg()},
        "command": " ".join(["benchmarks/pipeline.py", *sys.argv[1:]]),
    }


def table(result: dict) -> str:
    rows = [
        ("e2e_bars_per_s", result["e2e_bars_per_s"], "bars/s"),
        ("latency_p50_ms", result["latency_p50_ms"], "ms (client: send -> received)"),
        ("latency_p99_ms", result["latency_p99_ms"], "ms"),
        ("worker latency p50/p99",
         f"{result['latency']['worker_latency_p50_ms']}/"
         f"{result['latency']['worker_latency_p99_ms']}", "ms (receipt -> publish)"),
        ("burst_1000_ms", result["burst_1000_ms"], f"ms (goal <= {GOALS['burst_1000_ms']:.0f})"),
        ("burst_1000_nobatch_ms", result["burst_1000_nobatch_ms"], "ms (max_batch=1)"),
        ("batching_speedup", result["batching_speedup"],
         f"x (goal >= {GOALS['batching_speedup']:.0f})"),
        ("burst_1000_full_ms", result["burst_1000_full_ms"], "ms (incremental encoding off)"),
        ("incremental_speedup", result["incremental_speedup"], "x"),
        ("burst_1000_product_model_ms", result["burst_1000_product_model_ms"],
         "ms (hidden 128, heads 8)"),
        ("engine alone, 1000 windows", result["inference_anchor"]["inference_1000_ms"],
         "ms (anchor, this process)"),
        ("burst / engine alone", result["burst_over_inference"], "x"),
    ]  # fmt: skip
    return "\n".join(f"{name:30}{value!s:>14}  {unit}" for name, value, unit in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--symbols", type=int, default=1000, help="burst symbols")
    parser.add_argument("--live-symbols", type=int, default=64, help="paced-latency symbols")
    parser.add_argument("--minutes", type=int, default=190, help="bars per symbol in (a)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--round-interval", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3, help="batched bursts")
    parser.add_argument("--variant-repeats", type=int, default=1, help="bursts per variant")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--checkpoint", type=Path, help="serve this checkpoint instead")
    parser.add_argument(
        "--variants",
        type=lambda text: set(text.split(",")) if text else set(),
        default={"product", "nobatch", "full"},
        help="comma-separated subset of product,nobatch,full (default: all)",
    )
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per phase and restart")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.minutes < 140:
        parser.error("--minutes must be >= 140: the first forecast needs ~133 bars")
    result = run(args)
    print()
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
