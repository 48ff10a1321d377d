"""The forecast stage: rows into their windows and the scoring stage, and the dynamic
micro-batcher in front of the model. A flush (`max_batch` requests waiting, `max_delay`,
END_OF_INTERVAL, a checkpoint) runs the model in the inference thread, its forecasts' acks
awaited behind the previous flush's. The agent keeps consuming while a flush runs, so decoding
overlaps inference, until `BACKLOG_BATCHES` x `max_batch` requests wait: the back-pressure.

The forecasts are what a trader waits for; the scores the rows' bars decide are not. So the
rows' bars wait, and the checkpoint's drain scores them once its flush's forecasts are acked,
in the quiet after a burst (streams.runtime.stages.scores): at a minute boundary, when every
symbol's bar comes at once, scoring adds nothing between a bar and its forecast. Nor does a
canary's forecasting, which waits for the quiet too (stages/canary_queue.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from asyncio import Future
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from model.checkpoint import CheckpointError
from model.serving.batcher import MicroBatcher
from model.serving.checkpoints import load_engine
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.messages import groups, values_of
from model.serving.shadow import Columns, columns_of
from streams.metrics import Outcome, Stage
from streams.runtime.observers import notify
from streams.runtime.policy import exit_uncommitted
from streams.runtime.records import Control, FeatureRow, Out
from streams.runtime.stages.canary_queue import CanaryQueue, Plan, predict_each
from streams.runtime.stages.carried import Carried
from streams.runtime.stages.explained import explain_records
from streams.runtime.stages.scores import Scores, Scoring
from streams.runtime.stages.serving import Serving
from streams.runtime.stages.windows import slide
from streams.schema import BAR_HEADERS, ControlKind, encode_forecast

if TYPE_CHECKING:
    from model.serving.checkpoints import CheckpointWatcher
    from streams.runtime.commit import Runtime
    from streams.runtime.stores import Store, Streams, StreamStore, WindowStore

log = logging.getLogger("barcast.forecast")
BACKLOG_BATCHES = 4


class Predicted(NamedTuple):
    """What the inference thread makes of a batch, per request: the quantiles `(H, Q)` of the
    checkpoint serving it, with BARCAST_EXPLAIN their explanations ([] without), the shadow
    baselines' (model.serving.shadow.columns_of; None without), the canary's (None: no canary
    beside it) and its symbol's streams (stages/carried.py)."""

    quantiles: list[np.ndarray]
    explanations: list[dict[str, Any]]
    baselines: list[dict[str, Columns]] | None
    canary: list[np.ndarray | None]
    streams: list[Streams]


class Forecasting:
    """The forecast stage: the windows (stages/windows.py) in front of the model."""

    def __init__(
        self,
        runtime: Runtime,
        serving: Serving,
        store: WindowStore,
        scoring: Scoring,
        streams: StreamStore,
    ) -> None:
        settings = self.settings = runtime.settings
        self.runtime, self.windows, self.lookback = runtime, store, store.lookback
        self.scoring = scoring  # calibrates each forecast, then scores it once its bars are in
        self.serving = serving  # which checkpoint serves each partition; the canary
        self.carried = Carried(streams)
        self.stores: list[Store] = [store, *scoring.stores]
        if serving.store is not None:
            self.stores.append(serving.store)
        self.stores.append(streams)
        self.watcher: CheckpointWatcher | None = None
        self.topic, self.incremental = settings.topic_forecasts, settings.incremental_encoding
        self.topic_shadow = settings.topic_shadow
        delay_s = settings.max_delay_ms / 1000.0
        self.batcher: MicroBatcher[WindowRequest] = MicroBatcher(settings.max_batch, delay_s)
        self.backlog = BACKLOG_BATCHES * settings.max_batch
        self.finishing: asyncio.Future[None] | None = None  # the last flush's acks
        self.lock, self.wakeup = asyncio.Lock(), asyncio.Event()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="barcast-inference")
        self.later = CanaryQueue(self.backlog)

    @property
    def engine(self) -> ForecastEngine | None:
        """The worker's checkpoint (None until the first lands); a partition may be served
        another (streams.runtime.stages.serving)."""
        return self.serving.default

    def watch(self, watcher: CheckpointWatcher) -> None:
        """The model directory's watcher: new checkpoints, and those a restored state names."""
        self.watcher = watcher
        self.serving.load = self._load

    async def add(self, items: Sequence[FeatureRow | Control | Out]) -> list[Out]:
        """Rows into the windows and, to wait for scoring, the scoring stage, their requests
        into the batcher (a flush now if too many wait); the dead letters among `items`
        returned, to publish, with the scores a canary's verdict settled."""
        dead: list[Out] = []
        metrics, settled = self.runtime.metrics, Scores()
        gone = self.windows.gone
        for item in items:
            if isinstance(item, FeatureRow):
                if item.ts_event <= gone.get(item.key, -1):
                    continue  # of before its symbol expired: re-published upstream
                if self.serving.canaries:
                    await self.serving.before(item, partial(self._sync, settled, item.partition))
                engine, canary = self.serving.route(item.partition)
                request = slide(self.windows, item, engine is not None)
                self.scoring.bar(item, request, engine)
                if request is not None:
                    request.canary = None if canary is None else canary.model_id
                    self.batcher.add(request)
            elif isinstance(item, Control):
                if item.kind == ControlKind.EXPIRED:
                    await self._expire(item, settled)
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
        return dead + settled.outputs

    async def _sync(self, out: Scores, partition: int) -> None:
        """Every request waiting through the models (a canary's too) and every waiting bar
        scored, into `out`: the stage's states then hold all that the rows before now decide.
        Not needed when the rows of `partition` before now are all scored (a burst's first
        rows, after the quiet's drain): syncing then would run the requests of the partitions
        before it as a batch of their own, the stage waiting on their inference instead of
        decoding its next rows; but their canary's forecasts still wait, if any, and a verdict
        needs them made."""
        if self.scoring.settled(partition):
            if len(self.later):  # its canary's forecasts are made before its verdict
                async with self.lock:
                    self._acked(await self._shadow(), [])
            return
        await self.flush()
        async with self.lock:
            self._acked(await self._shadow(), [])
            before = len(out.values)
            self.scoring.settle(out)
            notify(self.runtime.observers, "observe_score", out.values[before:])

    async def _expire(self, control: Control, out: Scores) -> None:
        """Drop an EXPIRED symbol's states and encodings, once nothing of it waits: its requests
        through the model (scoring off, `_sync` would not wait for them), then its bars,
        forecasts and baselines into its states."""
        await self.flush()
        await self._sync(out, control.partition)
        last_ts = control.decoded["last_ts"]
        for store in self.stores:  # the windows' note of it serves the stage (`add`)
            noted = last_ts if store is self.windows else None
            store.evict(control.key, control.partition, control.offset, noted)
        serving = self.serving
        for engine in {*serving.engines.values(), serving.default, serving.candidate}:
            if engine is not None:
                engine.evict(control.key.decode())

    async def flush(self) -> None:
        """Every waiting request through the model; a batch's forecasts are built and sent
        while the next batch's inference runs."""
        async with self.lock:
            sends, received = [], []
            running = self._infer()
            while running is not None:
                batch, plan, inference = running
                predicted = await inference
                # Before the next batch resumes its streams from the store (stages/carried.py)
                self.carried.keep(batch, predicted.streams)
                running = self._infer()
                self.runtime.worked = time.monotonic()
                started = time.perf_counter()
                sends += await self._publish(batch, plan, predicted)
                publish = self.runtime.metrics.loop_seconds.labels("publish")
                publish.inc(time.perf_counter() - started)
                received += [request.received_ns for request in batch]
            self._acked(sends, received)

    def _acked(self, sends: list[Future], received: list[int]) -> None:
        """`sends` acked behind the sends before them (`received`: their forecasts' bars)."""
        if sends:
            self.finishing = asyncio.ensure_future(self._finish(self.finishing, sends, received))

    def _infer(self) -> tuple[list[WindowRequest], Plan, Future] | None:
        """The next batch and its engines, its inference started in the inference thread
        (None: none waits). A partition's engines change only at a row no request waits
        behind (a verdict syncs first), so they are the ones its requests were made for."""
        if not len(self.batcher):
            return None
        batch, loop = self.batcher.take(), asyncio.get_running_loop()
        engines = [self.serving.route(r.partition)[0] for r in batch]
        canaries = [self.serving.engines.get(r.canary) if r.canary else None for r in batch]
        later = [c if c is not None and c.streams is None else None for c in canaries]
        beside = [c if c is not None and c.streams is not None else None for c in canaries]
        plan = Plan(engines, beside, later)  # type: ignore[arg-type]
        self.carried.resume(batch, plan.per_request)
        return batch, plan, loop.run_in_executor(self.executor, self._predict, batch, plan)

    def _predict(self, batch: list[WindowRequest], plan: Plan) -> Predicted:
        """In the inference thread: each engine's forecasts of its requests (a forecast does
        not depend on what shared its batch), then the canary's beside them."""
        started, settings, metrics = time.perf_counter(), self.settings, self.runtime.metrics
        n, explain = len(batch), settings.explain
        quantiles: list[Any] = [None] * n
        explanations: list[Any] = [None] * n if explain else []
        baselines: list[Any] | None = [None] * n if self.scoring.shadows is not None else None
        for engine, rows in groups(plan.engines):
            part = [batch[i] for i in rows]
            scale = engine.scale(part)  # the model's units and the baselines' start, once
            if explain:
                top_k = settings.explain_top_k
                q, why = engine.predict_explained(part, self.incremental, top_k, scale)
            else:
                q, why = engine.predict(part, self.incremental, scale), []
            shadows = columns_of(engine.shadow(part, scale)) if baselines is not None else []
            for j, i in enumerate(rows):
                quantiles[i] = q[j]
                if why:
                    explanations[i] = why[j]
                if baselines is not None:
                    baselines[i] = shadows[j]
        canary = predict_each(batch, plan.canaries, self.incremental)
        streams = Carried.taken(batch, plan.per_request)
        metrics.inference_seconds.observe(time.perf_counter() - started)
        metrics.batch_size.observe(n)
        return Predicted(quantiles, explanations, baselines, canary, streams)

    async def _publish(
        self, batch: list[WindowRequest], plan: Plan, predicted: Predicted
    ) -> list[Future]:
        """A micro-batch's forecasts, calibrated (the model's or a baseline's: their `source`),
        to the producer with their explanations, the canary's on `forecasts.shadow`, and the
        scores that calibrating them settled (a replay's earlier bars); then to the observers."""
        sends = await self._shadow() if self.later.due(batch) else []
        now, scored, runtime = time.time_ns(), Scores(), self.runtime
        values = values_of(batch, plan.engines, predicted.quantiles, now)
        canaries = values_of(batch, plan.canaries, predicted.canary, now)
        pairs = zip(plan.canaries, plan.later, strict=True)
        waits = [beside is not None or later is not None for beside, later in pairs]
        values = self.scoring.forecasts(batch, values, predicted.baselines, scored, waits)
        shadowed = [(r, v) for r, v in zip(batch, canaries, strict=True) if v is not None]
        self.later.add(batch, plan.later)
        forecasts = [
            Out(self.topic, r.key, encode_forecast(v), r.ts_event / 1e6, BAR_HEADERS, r.partition)
            for r, v in zip(batch, values, strict=True)
        ]
        forecasts += self._shadowed(self.scoring.canaries(shadowed))
        why = []
        if predicted.explanations:
            for engine, rows in groups(plan.engines):
                part, explained = (
                    [batch[i] for i in rows],
                    [predicted.explanations[i] for i in rows],
                )
                why += explain_records(engine, part, explained, self.settings.topic_explain)
        sends += await runtime.send([*forecasts, *why, *scored.outputs])
        if runtime.observers:
            notify(runtime.observers, "observe_forecast", values)
            notify(runtime.observers, "observe_score", scored.values)
        return sends

    async def _shadow(self) -> list[Future]:
        """The canary's forecasts of every request waiting for them (stages/canary_queue.py),
        in the inference thread a micro-batch at a time, calibrated and sent."""
        sends, loop = [], asyncio.get_running_loop()
        while len(self.later):
            batch, engines = self.later.take(self.settings.max_batch)
            predict = partial(predict_each, batch, engines, self.incremental)
            quantiles = await loop.run_in_executor(self.executor, predict)
            values = values_of(batch, engines, quantiles, time.time_ns())
            records = self._shadowed(self.scoring.canaries(list(zip(batch, values, strict=True))))
            sends += await self.runtime.send(records)
        return sends

    def _shadowed(self, forecasts: list[tuple[WindowRequest, dict[str, Any]]]) -> list[Out]:
        """`forecasts.shadow` records of a canary's forecasts."""
        topic = self.topic_shadow
        return [
            Out(topic, r.key, encode_forecast(v), r.ts_event / 1e6, BAR_HEADERS, r.partition)
            for r, v in forecasts
        ]

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
        """Flush, make the canary's waiting forecasts, and once every forecast so far is acked
        (on the broker before scoring takes the loop), score the waiting bars and wait for
        their scores' acks too."""
        await self.flush()
        async with self.lock:
            shadowed = await self._shadow()
        if self.finishing is not None:
            await self.finishing
        await asyncio.gather(*shadowed)
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
        """Validate a new checkpoint off the loop, then swap it in between batches (the
        step-encoding cache belongs to the old weights, so it goes with them) or, with
        BARCAST_CANARY, run it beside the serving one as a canary. One that fails validation,
        or whose files vanish while it loads (a rollback), is refused and logged: the worker
        goes on serving the model it has. A model id `barcast promote` named is promoted."""
        promoted = watcher.promoted()
        if promoted is not None and self.serving.canaries:
            await self.serving.force(promoted)
        path = watcher.poll()
        if path is None:
            return
        first = self.engine is None
        canary = self.serving.canaries and not first
        beside = self.engine.horizon if canary and self.engine is not None else None
        try:
            into = None if canary else self.engine
            args = (path, self.settings, into, self.lookback, beside)
            engine, served = await asyncio.to_thread(load_engine, *args)
        except (CheckpointError, OSError) as exc:  # OSError: files removed or unreadable
            watcher.reject(path)
            serving = watcher.current or "none (bars are not forecast until one is valid)"
            log.error("not serving %s: %s; the checkpoint served is still %s", path, exc, serving)
            return
        watcher.accept(path)
        if canary:
            if served.forecaster.model_id not in self.serving.engines:
                self.serving.propose(engine)
            return
        async with self.lock:
            engine.swap(served)
            self.serving.swap(engine)
        self.runtime.metrics.model_reloads.inc()
        self.runtime.metrics.set_model(engine.model_id, engine.fingerprint)
        what = "serving the first checkpoint" if first else "hot-reloaded checkpoint"
        log.info("%s %s from %s", what, engine.model_id, watcher.current)

    async def _load(self, model_id: str) -> ForecastEngine | None:
        """The checkpoint of `model_id` in the model directory, loaded (None: not there, or
        not valid any more)."""
        path = None if self.watcher is None else self.watcher.find(model_id)
        if path is None:
            return None
        try:
            engine, _ = await asyncio.to_thread(
                load_engine, path, self.settings, None, self.lookback
            )
        except (CheckpointError, OSError) as exc:
            log.error("checkpoint %s at %s cannot serve: %s", model_id, path, exc)
            return None
        return engine if engine.model_id == model_id else None
