"""The pipeline benchmark's client side: the forecast collector and the measured phases.

`ForecastCollector` reads every forecast in a background thread and notes when each arrived;
`Bench` sends the bars of each phase (throughput, paced latency, bursts) and waits for their
forecasts, by count, never by sleeping (the sleeps only pace the rounds and space the bursts).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import orjson

from benchmarks.pipeline.data import MINUTE_NS, Key, Reference, Series
from benchmarks.pipeline.worker_time import WorkerTime
from benchmarks.provenance import cpu_s
from streams.ingest.producer import BarProducer
from streams.kafka import confluent_config
from streams.process import WorkerProcess
from streams.settings import Settings

# Live, bursts come a minute apart and the worker checkpoints in the quiet between them
# (streams.runtime.commit); bursts sent back to back would each pay the one before's. So a
# burst waits SETTLE_S and then until the worker is idle: its CPU grew by less than IDLE_S in
# a POLL_S (its quiet's work, scoring and a canary's forecasts, done), or QUIET_MAX_S passed.
SETTLE_S = 2.0
POLL_S, IDLE_S, QUIET_MAX_S = 0.5, 0.05, 30.0
FETCH_WAIT_MS = 5  # the collector's: a hop of its own, probed by benchmarks/pipeline/hops.py


@dataclass
class Arrival:
    at: float  # time.perf_counter() when the client received it
    batch_size: int
    latency_ms: float  # the worker's own: receipt of the bar -> publish
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
        wait = {"fetch.wait.max.ms": FETCH_WAIT_MS}
        consumer = Consumer(confluent_config(self.settings, **config, **wait))
        topic = self.settings.topic_forecasts
        consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(self.settings.partitions)]
        )
        try:
            while not self.stopping.is_set():
                # consume(n, timeout) returns only once n messages came or `timeout` passed
                # without one: wait for the first, then take what is already fetched.
                first = consumer.poll(0.05)
                if first is None:
                    continue
                messages = [first, *consumer.consume(1000, 0)]
                self._note(time.perf_counter(), messages)
        finally:
            consumer.close()

    def _note(self, now: float, messages: list[Any]) -> None:
        parsed = [orjson.loads(m.value()) for m in messages if not m.error()]
        with self.condition:
            for v in parsed:
                key = (v["symbol"], v["ts_event"])
                if key in self.arrived:
                    self.duplicates.append([*key, v["model_id"], v["batch_size"]])
                    continue
                self.arrived[key] = Arrival(now, v["batch_size"], v["latency_ms"], v["model_id"])
                self.order.append(key)
            self.condition.notify_all()

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
    broker_pid: int | None = None
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

    def latency(
        self, rows: range, first_minute: int, rounds: int, interval_s: float, warm_up: bool = False
    ) -> dict:
        """`rounds` paced rounds from `first_minute`; `warm_up`: after one unmeasured round (a
        restarted worker reads its windows back, and encodes or streams them, on first use)."""
        producer = self.live
        sent: dict[Key, float] = {}
        if warm_up:
            self.burst(rows, first_minute, "(b) warm-up round")
            first_minute += 1
        # As before a burst: the worker stores its states in the first quiet after the replay,
        # and live bars would not meet that store again.
        time.sleep(SETTLE_S)
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
        arrivals = {key: self.collector.arrivals([key])[0] for key in sent.keys() - missing}
        client = [(a.at - sent[key]) * 1000 for key, a in arrivals.items()]
        worker = [a.latency_ms for a in arrivals.values()]
        slowest: dict[int, float] = {}  # per round (minute): a p99 from one slow round shows
        for (_, ts), ms in zip(arrivals, client, strict=True):
            minute = (ts - self.series.t0) // MINUTE_NS - first_minute
            slowest[minute] = max(slowest.get(minute, 0.0), round(ms, 1))
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
            "slowest_per_round_ms": [slowest.get(r) for r in range(rounds)],
        }

    def burst(
        self, rows: range, minute: int, label: str, worker: WorkerProcess | None = None
    ) -> dict:
        """One minute's bars of `rows` at once, until their forecasts are all out; with the CPU
        the worker and the broker spent meanwhile (on a shared VM, less noisy than the wall)
        and where the worker's went (`worker_time`)."""
        producer = self.live
        values, keys, stamps = self.series.messages(rows, [minute])
        expected = self.expected(rows, [minute])
        worker_pid = None if worker is None else worker.pid
        spent = WorkerTime.read(worker)
        cpu = cpu_s(worker_pid), cpu_s(self.broker_pid)
        started = time.perf_counter()
        producer.send_bars(values, keys, stamps)
        producer.send_control(self.series.ts(minute + 1))
        producer.poll(0)
        missing = self.collector.wait_for(expected, self.timeout_s)
        arrivals = self.collector.arrivals(expected)
        worker_cpu, broker_cpu = cpu_s(worker_pid) - cpu[0], cpu_s(self.broker_pid) - cpu[1]
        worker_time = WorkerTime.read(worker).since(spent)
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
            "worker_cpu_ms": round(worker_cpu * 1000, 1),
            "broker_cpu_ms": round(broker_cpu * 1000, 1),
            "first_ms": _pct(times, 0),  # when forecasts start coming out, and the middle one
            "median_ms": _pct(times, 50),
            "worker_latency_max_ms": _pct([a.latency_ms for a in arrivals], 100),
            "batch_sizes": sorted({a.batch_size for a in arrivals}),
            "model_id": arrivals[0].model_id if arrivals else None,
            "worker_time": worker_time,
        }
        self.say(f"{label} minute {minute}: {ms:,.0f} ms, {len(arrivals)}/{len(expected)}")
        return result

    def bursts(
        self,
        rows: range,
        minutes: Iterator[int],
        label: str,
        count: int,
        worker: WorkerProcess | None,
        warm_up: bool = False,
    ) -> list[dict]:
        """`count` bursts, after an unmeasured one when the worker just (re)loaded its model
        or state (empty step-encoding cache, static contexts, windows not yet read back). Each
        measured one with the CPU the worker and the broker spent on it and the quiet after it
        until the next (`minute_cpu_ms`): what the worker leaves for the quiet (scoring, a
        canary's forecasts) is spent then; `quiet_s`: how long that quiet took."""
        runs, worker_pid = [], None if worker is None else worker.pid
        if warm_up:
            settle(worker_pid)
            first = self.burst(rows, next(minutes), f"{label} warm-up", worker)
            runs.append({**first, "warm_up": True})
        settle(worker_pid)
        for _ in range(count):
            started = cpu_s(worker_pid) + cpu_s(self.broker_pid)
            run = self.burst(rows, next(minutes), f"{label} burst", worker)
            quiet_s = settle(worker_pid)  # the quiet after it, before the next
            spent = cpu_s(worker_pid) + cpu_s(self.broker_pid) - started
            runs.append(run | {"minute_cpu_ms": round(spent * 1000, 1), "quiet_s": quiet_s})
        return runs


def settle(worker_pid: int | None) -> float:
    """SETTLE_S, then until the worker is idle (see SETTLE_S); the seconds it took."""
    started = time.monotonic()
    time.sleep(SETTLE_S)
    deadline, last = started + QUIET_MAX_S, cpu_s(worker_pid)
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        now = cpu_s(worker_pid)
        if not now - last >= IDLE_S:  # NaN: no worker to wait for
            break
        last = now
    return round(time.monotonic() - started, 1)


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


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
