"""The forecast stage: rows into their windows and scoring states, and the dynamic
micro-batcher in front of the model. A flush (`max_batch` requests waiting, `max_delay`,
END_OF_INTERVAL, a checkpoint) runs the model in the inference thread, its forecasts' acks
awaited behind the previous flush's. The agent keeps consuming while a flush runs, so decoding
overlaps inference, until `BACKLOG_BATCHES` x `max_batch` requests wait: the back-pressure."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from asyncio import Future
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from model.checkpoint import CheckpointError
from streams.forecast.batcher import MicroBatcher
from streams.forecast.engine import ForecastEngine, Served, WindowRequest
from streams.forecast.messages import forecast_value
from streams.metrics import Outcome, Stage
from streams.runtime.observers import notify
from streams.runtime.policy import exit_uncommitted
from streams.runtime.records import Control, FeatureRow, Out
from streams.runtime.stages.scores import Scores, Scoring
from streams.runtime.stages.windows import slide
from streams.schema import BAR_HEADERS, encode_forecast

if TYPE_CHECKING:
    from streams.forecast.checkpoints import CheckpointWatcher
    from streams.runtime.checkpoint import Runtime
    from streams.runtime.stores import Store, WindowStore

log = logging.getLogger("barcast.forecast")
BACKLOG_BATCHES = 4


class Forecaster:
    """The forecast stage: the windows (stages/windows.py) in front of the model."""

    def __init__(
        self, runtime: Runtime, engine: ForecastEngine | None, store: WindowStore, scoring: Scoring
    ) -> None:
        settings = self.settings = runtime.settings
        self.runtime, self.windows, self.lookback = runtime, store, store.lookback
        self.scoring = scoring  # calibrates each forecast, then scores it once its bars are in
        self.stores: list[Store] = [store, *scoring.stores]
        self.engine = engine  # None until the first checkpoint lands
        self.topic, self.incremental = settings.topic_forecasts, settings.incremental_encoding
        delay_s = settings.max_delay_ms / 1000.0
        self.batcher: MicroBatcher[WindowRequest] = MicroBatcher(settings.max_batch, delay_s)
        self.backlog = BACKLOG_BATCHES * settings.max_batch
        self.finishing: asyncio.Future[None] | None = None  # the last flush's acks
        self.lock, self.wakeup = asyncio.Lock(), asyncio.Event()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="barcast-inference")

    async def add(self, items: Sequence[FeatureRow | Control | Out]) -> Scores:
        """Rows into the windows and the scoring states, their requests into the batcher (a
        flush now if too many wait); the scores their bars decide and the dead letters among
        `items` returned, to publish."""
        out, dead, serving, metrics = Scores(), [], self.engine is not None, self.runtime.metrics
        for item in items:
            if isinstance(item, FeatureRow):
                self.scoring.bar(item, out)
                request = slide(self.windows, item, serving)
                if request is not None:
                    self.batcher.add(request)
            elif isinstance(item, Control):
                self.batcher.flush_now()
            else:
                dead.append(item)
        metrics.bar(Stage.FORECAST, Outcome.IN, len(items))
        if dead:
            metrics.dlq.inc(len(dead))
        if len(self.batcher) >= self.backlog:
            await self.flush()
        else:
            self.wakeup.set()
        out.outputs += dead
        return out

    async def flush(self) -> None:
        async with self.lock:
            runtime, sends, received = self.runtime, [], []
            while len(self.batcher):
                batch = self.batcher.take()
                started = time.perf_counter()
                quantiles = await asyncio.get_running_loop().run_in_executor(
                    self.executor, self.engine.predict, batch, self.incremental
                )
                runtime.worked = time.monotonic()
                runtime.metrics.inference_seconds.observe(time.perf_counter() - started)
                runtime.metrics.batch_size.observe(len(batch))
                scored = Scores()
                values, forecasts = self._forecasts(batch, quantiles, scored)
                sends += await runtime.send([*forecasts, *scored.outputs])
                if runtime.observers:
                    notify(runtime.observers, "observe_forecast", values)
                    notify(runtime.observers, "observe_score", scored.values)
                received += [request.received_ns for request in batch]
            if sends:
                finishing = self._finish(self.finishing, sends, received)
                self.finishing = asyncio.ensure_future(finishing)

    async def _finish(
        self, previous: Future[None] | None, sends: list[Future], received: list[int]
    ) -> None:
        try:
            if previous is not None:
                await previous
            await asyncio.gather(*sends)
            metrics, published = self.runtime.metrics, time.time_ns()
            for received_ns in received:
                metrics.bar_to_forecast_seconds.observe((published - received_ns) / 1e9)
            metrics.forecasts.inc(len(received))
            metrics.bar(Stage.FORECAST, Outcome.OUT, len(received))
        except Exception as exc:
            exit_uncommitted("publishing a flush of forecasts failed", exc)

    async def drain(self) -> None:
        """Flush, and wait until every forecast so far is acked."""
        await self.flush()
        if self.finishing is not None:
            await self.finishing

    def _forecasts(
        self, batch: list[WindowRequest], quantiles: np.ndarray, scored: Scores
    ) -> tuple[list[dict[str, Any]], list[Out]]:
        """A micro-batch's forecast values, calibrated (the scores they complete put in
        `scored`), and their records."""
        now, n = time.time_ns(), len(batch)
        values = [forecast_value(self.engine, r, quantiles[i], n, now) for i, r in enumerate(batch)]
        values = self.scoring.forecasts(batch, values, scored)
        return values, [
            Out(self.topic, r.key, encode_forecast(v), r.ts_event / 1e6, BAR_HEADERS, r.partition)
            for r, v in zip(batch, values, strict=True)
        ]

    async def flush_when_due(self) -> None:
        """Flushes the batcher once due, while the agent is waiting for more."""
        while True:
            wait = self.batcher.seconds_until_due()
            self.wakeup.clear()
            if wait is None or wait > 0:  # None: until a batch wakes it
                try:
                    await asyncio.wait_for(self.wakeup.wait(), timeout=wait)
                    continue
                except TimeoutError:
                    pass
            try:
                await self.flush()
            except Exception as exc:
                exit_uncommitted("a flush of forecasts failed", exc)

    async def reload(self, watcher: CheckpointWatcher) -> None:
        """Validate a new checkpoint off the loop, then swap it in between batches; the
        step-encoding cache belongs to the old weights, so it goes with them."""
        path = watcher.poll()
        if path is None:
            return
        first = self.engine is None
        try:
            engine, served = await asyncio.to_thread(self._load, path, self.engine)
        except CheckpointError as exc:
            watcher.reject(path)
            log.error("not serving %s: %s", path, exc)
            return
        async with self.lock:
            engine.swap(served)
            self.engine = engine
        watcher.accept(path)
        self.runtime.metrics.model_reloads.inc()
        self.runtime.metrics.set_model(engine.model_id, engine.fingerprint)
        what = "serving the first checkpoint" if first else "hot-reloaded checkpoint"
        log.info("%s %s from %s", what, engine.model_id, watcher.current)

    def _load(self, path: Path, engine: ForecastEngine | None) -> tuple[ForecastEngine, Served]:
        """The checkpoint at `path` validated and on the device (blocking), with the engine to
        swap it into (`engine`, or a new one); one of another lookback than the windows refused."""
        if engine is None:
            engine = ForecastEngine.from_settings(path, self.settings)
            served = engine.served
        else:
            served = engine.prepare(path)
        lookback = served.forecaster.config.lookback
        if lookback != self.lookback:
            raise CheckpointError(
                f"it looks back {lookback} bars and this worker's windows hold {self.lookback}: "
                "restart the worker to serve it"
            )
        return engine, served


def inference_threads() -> int:
    """torch's intra-op threads in a worker: one core stays with the event loop, which torch's
    threads spinning on it would slow. Forecasts are bit-identical for one thread count only
    (reductions split differently): an offline reference must run with as many."""
    return max(1, (os.cpu_count() or 2) - 1)
