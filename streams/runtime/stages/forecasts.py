"""The forecast stage: rows into their windows and the scoring stage, and the dynamic
micro-batcher in front of the model. A flush (`max_batch` requests waiting, `max_delay`,
END_OF_INTERVAL, a checkpoint) runs the model in the inference thread, its forecasts' acks
awaited behind the previous flush's. The agent keeps consuming while a flush runs, so decoding
overlaps inference, until `BACKLOG_BATCHES` x `max_batch` requests wait: the back-pressure.

The forecasts are what a trader waits for; the scores the rows' bars decide are not. So the
rows' bars wait, and the checkpoint's drain scores them once its flush's forecasts are acked,
in the quiet after a burst (streams.runtime.stages.scores): at a minute boundary, when every
symbol's bar comes at once, scoring adds nothing between a bar and its forecast."""

from __future__ import annotations

import asyncio
import logging
import time
from asyncio import Future
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from model.checkpoint import CheckpointError
from model.serving.batcher import MicroBatcher
from model.serving.checkpoints import load_engine
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.messages import explanation_value, forecast_value
from streams.metrics import Outcome, Stage
from streams.runtime.observers import notify
from streams.runtime.policy import exit_uncommitted
from streams.runtime.records import Control, FeatureRow, Out
from streams.runtime.stages.scores import Scores, Scoring
from streams.runtime.stages.windows import slide
from streams.schema import BAR_HEADERS, encode_explanation, encode_forecast

if TYPE_CHECKING:
    from model.serving.checkpoints import CheckpointWatcher
    from streams.runtime.commit import Runtime
    from streams.runtime.stores import Store, WindowStore

log = logging.getLogger("barcast.forecast")
BACKLOG_BATCHES = 4


class Predicted(NamedTuple):
    """What the inference thread makes of a batch."""

    quantiles: np.ndarray
    explanations: list[dict[str, Any]]
    baselines: dict[str, np.ndarray] | None


class Forecasting:
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

    async def add(self, items: Sequence[FeatureRow | Control | Out]) -> list[Out]:
        """Rows into the windows and, to wait for scoring, the scoring stage, their requests
        into the batcher (a flush now if too many wait); the dead letters among `items`
        returned, to publish."""
        dead: list[Out] = []
        serving, metrics = self.engine is not None, self.runtime.metrics
        for item in items:
            if isinstance(item, FeatureRow):
                request = slide(self.windows, item, serving)
                self.scoring.bar(item, request, self.engine)
                if request is not None:
                    self.batcher.add(request)
            elif isinstance(item, Control):
                self.scoring.control(item)
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
        return dead

    async def flush(self) -> None:
        """Every waiting request through the model; a batch's forecasts are built and sent
        while the next batch's inference runs."""
        async with self.lock:
            sends, received = [], []
            running = self._infer()
            while running is not None:
                batch, inference = running
                quantiles, explanations, baselines = await inference
                running = self._infer()
                self.runtime.worked = time.monotonic()
                sends += await self._publish(batch, quantiles, explanations, baselines)
                received += [request.received_ns for request in batch]
            if sends:
                finishing = self._finish(self.finishing, sends, received)
                self.finishing = asyncio.ensure_future(finishing)

    def _infer(self) -> tuple[list[WindowRequest], Future] | None:
        """The next batch, its inference started in the inference thread (None: none waits)."""
        if not len(self.batcher):
            return None
        batch, loop = self.batcher.take(), asyncio.get_running_loop()
        return batch, loop.run_in_executor(self.executor, self._predict, batch)

    def _predict(self, batch: list[WindowRequest]) -> Predicted:
        """In the inference thread: the batch's quantiles, with BARCAST_EXPLAIN their
        explanations from the same forward pass (none without), and its shadow baselines'
        quantiles (None without)."""
        started, settings, metrics = time.perf_counter(), self.settings, self.runtime.metrics
        if settings.explain:
            out = self.engine.predict_explained(batch, self.incremental, settings.explain_top_k)
        else:
            out = self.engine.predict(batch, self.incremental), []
        metrics.inference_seconds.observe(time.perf_counter() - started)
        metrics.batch_size.observe(len(batch))
        baselines = self.engine.shadow(batch) if self.scoring.shadows is not None else None
        return Predicted(*out, baselines)

    async def _publish(
        self,
        batch: list[WindowRequest],
        quantiles: np.ndarray,
        explanations: list[dict[str, Any]],
        baselines: dict[str, np.ndarray] | None,
    ) -> list[Future]:
        """A micro-batch's forecasts, calibrated (the model's or a baseline's: their `source`),
        to the producer with their explanations and the scores that calibrating them settled (a
        replay's earlier bars); then to the observers."""
        now, n, scored, runtime = time.time_ns(), len(batch), Scores(), self.runtime
        values = [forecast_value(self.engine, r, quantiles[i], n, now) for i, r in enumerate(batch)]
        values = self.scoring.forecasts(batch, values, baselines, scored)
        forecasts = [
            Out(self.topic, r.key, encode_forecast(v), r.ts_event / 1e6, BAR_HEADERS, r.partition)
            for r, v in zip(batch, values, strict=True)
        ]
        why = explain_records(self.engine, batch, explanations, self.settings.topic_explain)
        sends = await runtime.send([*forecasts, *why, *scored.outputs])
        if runtime.observers:
            notify(runtime.observers, "observe_forecast", values)
            notify(runtime.observers, "observe_score", scored.values)
        return sends

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
        """Flush, and once every forecast so far is acked (on the broker before scoring takes
        the loop), score the waiting bars and wait for their scores' acks too."""
        await self.flush()
        if self.finishing is not None:
            await self.finishing
        async with self.lock:
            scored = Scores()
            self.scoring.settle(scored)
            sends = await self.runtime.send(scored.outputs)
            notify(self.runtime.observers, "observe_score", scored.values)
        await asyncio.gather(*sends)

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
        step-encoding cache belongs to the old weights, so it goes with them. One that fails
        validation, or whose files vanish while it loads (a rollback), is refused and logged:
        the worker goes on serving the model it has."""
        path = watcher.poll()
        if path is None:
            return
        first = self.engine is None
        try:
            engine, served = await asyncio.to_thread(
                load_engine, path, self.settings, self.engine, self.lookback
            )
        except (CheckpointError, OSError) as exc:  # OSError: files removed or unreadable
            watcher.reject(path)
            serving = watcher.current or "none (bars are not forecast until one is valid)"
            log.error("not serving %s: %s; the checkpoint served is still %s", path, exc, serving)
            return
        async with self.lock:
            engine.swap(served)
            self.engine = engine
        watcher.accept(path)
        self.runtime.metrics.model_reloads.inc()
        self.runtime.metrics.set_model(engine.model_id, engine.fingerprint)
        what = "serving the first checkpoint" if first else "hot-reloaded checkpoint"
        log.info("%s %s from %s", what, engine.model_id, watcher.current)


def explain_records(
    engine: ForecastEngine,
    batch: Sequence[WindowRequest],
    explanations: Sequence[dict[str, Any]],
    topic: str,
) -> list[Out]:
    """A micro-batch's explanation records (from `predict_explained`; none without), to
    publish next to its forecasts: same key, partition and timestamp as each forecast's record."""
    if not explanations:
        return []
    return [
        Out(
            topic,
            request.key,
            encode_explanation(explanation_value(engine, request, explanation)),
            request.ts_event / 1e6,
            BAR_HEADERS,
            request.partition,
        )
        for request, explanation in zip(batch, explanations, strict=True)
    ]
