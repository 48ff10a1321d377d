"""A `BARCAST_ROLE=all` worker's state and work without Faust or Kafka, for the memory probe
(benchmarks/memory_probe.py): the product's stages, stores, forecaster and engine, wired as
streams.agents wires them; only the IO is replaced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.memory_parts import RELEASED, Probe
from benchmarks.pipeline_data import Series, build_series
from benchmarks.pipeline_models import product_checkpoint
from features.corrections import CorrectionConfig, SymbolState
from features.engine import FINGERPRINT, N_FEATURES
from model.serving.conformal import CalibrationConfig, SymbolCalibration
from model.serving.forecast_engine import ForecastEngine, inference_threads
from model.serving.scoring_state import SymbolScoring
from streams import schema
from streams.agents import BATCH_MAX
from streams.metrics import Metrics
from streams.runtime.records import Out, Record
from streams.runtime.stages.corrections import Corrections
from streams.runtime.stages.features import Features, SymbolFeatures
from streams.runtime.stages.forecasts import Forecasting
from streams.runtime.stages.scores import Scoring
from streams.runtime.stores import Changelog, StateStore, WindowStore
from streams.settings import Settings

PARTITIONS = 4  # the pipeline benchmark's


class DroppedChangelogs:
    """A changelog IO that keeps nothing: the worker's producer frees a record once acked."""

    def __init__(self) -> None:
        self.written = 0

    async def write(self, topic: str, records: dict[int, list[tuple[bytes, bytes]]]) -> None:
        self.written += sum(len(k) + len(v) for run in records.values() for k, v in run)

    async def read(self, topic: str, partition: int) -> list[tuple[bytes, bytes]]:
        return []


class HeldRuntime:
    """What the forecaster needs of streams.runtime.commit.Runtime; its producer holds the
    records it is given until `acked()` (the end of an agent batch, or of a burst)."""

    def __init__(self, settings: Settings) -> None:
        self.settings, self.metrics, self.observers = settings, Metrics(), []
        self.worked, self.held = 0.0, []  # type: ignore[var-annotated]

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
        settings = Settings.from_env()
        self.model = product_checkpoint(settings, checkpoint)
        torch.set_num_threads(inference_threads())
        self.io, self.runtime = DroppedChangelogs(), HeldRuntime(settings)
        engine = ForecastEngine.from_settings(self.model.path, settings)
        self.engine = engine
        self.stores: dict[str, Any] = {}
        corrections = self._store("corrections-state", SymbolState)
        self.corrections = Corrections(
            corrections, CorrectionConfig(fill_gaps=settings.fill_gaps), ("raw", "clean", "dlq")
        )
        self.features = Features(self._store("features-state", SymbolFeatures), "features", "dlq")
        window = settings.score_window
        decode, new = SymbolScoring.decoder(window), lambda: SymbolScoring(window)
        scores = self._store("scoring-state", SymbolScoring, decode, new)
        calibrations = self._store("calibration-state", SymbolCalibration)
        calibration = CalibrationConfig(enabled=settings.online_calibration)
        self.scoring = Scoring(scores, calibrations, calibration, "scores")
        windows = WindowStore(
            Changelog("forecast-window-slots", self.io), engine.lookback, N_FEATURES, FINGERPRINT
        )
        self.stores["forecast-window-slots"] = windows
        self.forecaster = Forecasting(self.runtime, engine, windows, self.scoring)  # type: ignore[arg-type]
        self._flush, self.forecaster.flush = self.forecaster.flush, self._counted_flush  # type: ignore[method-assign]
        self.offsets = [0] * PARTITIONS
        self.symbols = symbols
        self.most_waiting = 0  # requests in the batcher when a flush starts, at most

    def _store(self, name: str, kind: Any, decode: Any = None, new: Any = None) -> StateStore:
        store = StateStore(
            Changelog(name, self.io), decode or kind.from_bytes, kind.to_bytes, new or kind
        )
        self.stores[name] = store
        return store

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
        BATCH_MAX records as a consumer at full speed takes them; a commit after each."""
        values, keys, stamps = series.messages(range(self.symbols), minutes)
        for start in range(0, len(values), BATCH_MAX):
            end = start + BATCH_MAX
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
        self.stores["forecast-window-slots"].flushed.clear()
