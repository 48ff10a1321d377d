"""A `BARCAST_ROLE=all` worker's state and work without Faust or Kafka, for the memory probe
(benchmarks/memory_probe/run.py): the product's stages, stores and engine, wired by the worker's
own `build_pipeline`; only the IO is replaced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.memory_probe.parts import RELEASED, Probe
from benchmarks.pipeline.data import Series, build_series
from benchmarks.pipeline.models import product_checkpoint
from model.serving.forecast_engine import ForecastEngine
from model.serving.programs import TORCH_THREADS
from streams import schema
from streams.agents import RUN_MAX
from streams.metrics import Metrics
from streams.runtime.changelog import Changelog, ChangelogRecord
from streams.runtime.pipeline import build_pipeline
from streams.runtime.records import Out, Record
from streams.settings import Settings

PARTITIONS = 4  # the pipeline benchmark's


class DroppedChangelogs:
    """A changelog IO that keeps nothing: the worker's producer frees a record once acked."""

    def __init__(self) -> None:
        self.written = 0

    async def write(self, topic: str, records: dict[int, list[ChangelogRecord]]) -> None:
        self.written += sum(
            len(k) + len(v or b"") + sum(len(data) for _, data in h)
            for run in records.values()
            for k, v, h in run
        )

    async def read(
        self, topic: str, partition: int, apply: Callable[[list[ChangelogRecord]], None]
    ) -> int:
        return 0


class HeldRuntime:
    """What the stages need of streams.runtime.commit.Runtime: changelogs that keep nothing, and
    a producer that holds the records it is given until `acked()` (the end of an agent batch,
    or of a burst)."""

    def __init__(self, settings: Settings) -> None:
        self.settings, self.metrics, self.observers = settings, Metrics(), []
        self.worked, self.held = 0.0, []  # type: ignore[var-annotated]
        self.io = DroppedChangelogs()

    def changelog(self, name: str) -> Changelog:
        return Changelog(name, self.io)

    async def send(self, records: Sequence[Out]) -> list[asyncio.Future]:
        self.held += records
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return [done]

    def acked(self) -> None:
        self.held = []


def input_series(symbols: int, minutes: int) -> Series:
    return build_series(Settings.from_env(), symbols, minutes)


class ProbeWorker:
    def __init__(self, checkpoint: Path | None, symbols: int) -> None:
        settings = replace(Settings.from_env(), role="all")
        self.model = product_checkpoint(settings, checkpoint, "window")
        torch.set_num_threads(TORCH_THREADS)
        self.runtime = HeldRuntime(settings)
        self.io = self.runtime.io
        self.engine = ForecastEngine.from_settings(self.model.path, settings)
        pipeline = build_pipeline(settings, self.runtime, self.engine)  # type: ignore[arg-type]
        assert pipeline.corrections and pipeline.features and pipeline.forecasting
        self.corrections, self.features = pipeline.corrections, pipeline.features
        self.forecaster, self.scoring = pipeline.forecasting, pipeline.forecasting.scoring
        self.stores = {store.changelog.topic: store for store in pipeline.stores}
        self._flush, self.forecaster.flush = self.forecaster.flush, self._counted_flush  # type: ignore[method-assign]
        self.offsets = [0] * PARTITIONS
        self.symbols = symbols
        self.most_waiting = 0  # requests in the batcher when a flush starts, at most

    async def _counted_flush(self) -> None:
        self.most_waiting = max(self.most_waiting, len(self.forecaster.batcher))
        await self._flush()

    def describe(self) -> dict[str, Any]:
        served = self.engine.served.forecaster
        return {
            "model": {
                "checkpoint": self.model.source,
                "hidden": served.config.hidden,
                "heads": served.config.heads,
                "params": sum(p.numel() for p in served.model.parameters()),
            },
            "changelog_bytes_written": self.io.written,
            "most_requests_waiting": self.most_waiting,
        }

    def _record(self, key: bytes, value: bytes, ms: float, headers: list) -> Record:
        partition = int(key[1:]) % PARTITIONS if key[1:].isdigit() else 0
        offset = self.offsets[partition]
        self.offsets[partition] += 1
        return Record("raw", partition, offset, ms, key, value, headers)

    def _controls(self, ts_event: int) -> list[Record]:
        value = schema.encode(schema.end_of_interval(ts_event))
        out = []
        for partition in range(PARTITIONS):
            offset = self.offsets[partition]
            self.offsets[partition] += 1
            out.append(Record("raw", partition, offset, ts_event / 1e6, schema.CONTROL_KEY, value,
                              list(schema.CONTROL_HEADERS)))  # fmt: skip
        return out

    async def batch(self, records: list[Record]) -> None:
        """One agent batch as `all` runs it: corrections, features, then the forecast stage's
        add; its records held by the producer until the commit."""
        cleaned = self.corrections.run(records, time.time_ns())
        featured = self.features.run(cleaned.items)
        await self.runtime.send([*cleaned.outputs, *featured.outputs])
        await self.runtime.send(await self.forecaster.add(featured.rows))

    async def commit(self) -> None:
        """What a commit does: drain the forecasts, flush every store, then the acks."""
        await self.forecaster.drain()
        for store in self.stores.values():
            store.put_changed()
            await store.changelog.flush()
        self.runtime.acked()

    async def replay(self, series: Series, minutes: range, probe: Probe) -> None:
        """The throughput phase: every symbol's bars minute by minute, in agent batches of
        RUN_MAX records as a consumer at full speed takes them; a commit after each."""
        values, keys, stamps = series.messages(range(self.symbols), minutes)
        for start in range(0, len(values), RUN_MAX):
            end = start + RUN_MAX
            rows = zip(keys[start:end], values[start:end], stamps[start:end], strict=True)
            first, last = (
                minutes[start // self.symbols],
                minutes[(min(end, len(values)) - 1) // self.symbols],
            )
            probe.phase(f"replay: the agent batch of minutes {first}-{last}")
            await self.batch([self._record(k, v, ms, []) for k, v, ms in rows])
            await self.commit()
        probe.step(f"replayed {len(values)} bars ({self.symbols} symbols, stores flushed)")
        await self.batch(self._controls(series.ts(minutes.stop)))
        await self.commit()

    async def burst(self, series: Series, minute: int, symbols: int, probe: Probe) -> None:
        """One bar for each of `symbols` symbols and END_OF_INTERVAL in one agent batch, then
        the flush (the pipeline benchmark's (c)); its records held until the commit."""
        values, keys, stamps = series.messages(range(symbols), [minute])
        rows = zip(keys, values, stamps, strict=True)
        records = [self._record(k, v, ms, []) for k, v, ms in rows]
        await self.batch(records + self._controls(series.ts(minute + 1)))
        probe.step(f"burst {minute}: {len(self.forecaster.batcher)} requests waiting")
        await self.forecaster.flush()
        probe.step(f"burst {minute}: forecasts held by the producer")
        await self.commit()
        probe.step(f"burst {minute}: acked, stores flushed")

    def release(self, probe: Probe) -> dict[str, float]:
        """Each component dropped in turn, the heap trimmed, and the RSS it gave back (MB)."""
        released: dict[str, float] = {}

        def drop(name: str, clear: Any) -> None:
            before = probe.steps[-1]["rss_mb"]
            clear()
            probe.heap.trim()
            released[name] = round(before - probe.rss(), 1)
            probe.step(RELEASED + name)

        drop("allocator retention (malloc_trim alone)", lambda: None)
        for name, store in self.stores.items():
            drop(f"{name}: encoded changelog entries", store.changelog.entries.clear)
        for name, store in self.stores.items():
            drop(f"{name}: decoded states", store.states.clear)
        served = self.engine.served
        drop("engine: step-encoding cache", served.cache.clear)
        drop("engine: static contexts", served.static.clear)
        drop("scoring's waiting bars, windows' flushed counts", self._forget_rest)
        return released

    def _forget_rest(self) -> None:
        self.scoring.waiting.clear()
        self.scoring.calibrated.clear()
        self.forecaster.windows.flushed.clear()
