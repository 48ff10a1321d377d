"""`features` → `forecasts`: window buffers, the dynamic micro-batcher and off-loop inference.

Events are consumed one by one without auto-acks. A flush (when `max_batch` windows wait, after
`max_delay`, or at END_OF_INTERVAL) takes a consistent cut: every waiting window, every unacked
event and every window change so far. It runs the model on the windows in micro-batches of at
most `max_batch` in the inference thread and hands each batch's forecasts to the producer; then,
in order behind the previous cut, it waits for the broker's acks, stores the window slots and
only then acks the cut's events, so a crash replays exactly the events whose forecasts may not
be out. The agent keeps consuming while a flush runs, so decoding overlaps inference; once
`BACKLOG_BATCHES` x `max_batch` windows wait it flushes itself, which is the back-pressure.

In the one-agent pipeline (streams.agents.pipeline) the stage stores its windows at the
pipeline's checkpoints instead (`drain`), which hold the source events' commit until then: a
cut then acks its events once its forecasts are out, and a burst writes no window state.

A worker started before any checkpoint exists keeps the windows filling (at the default
lookback) and forecasts nothing until the first valid one lands in `BARCAST_MODEL_DIR`; from its
swap on, every ready window is forecast, the first ones at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import torch

from features.engine import FINGERPRINT, N_FEATURES
from model.checkpoint import CheckpointError
from model.config import TFTConfig
from streams.agents.dlq import Reason, event_dead_letter
from streams.agents.io import (
    BAR_HEADERS,
    Out,
    exit_uncommitted,
    is_control_event,
    raw_topic,
    send_batches,
)
from streams.agents.rows import FeatureRow, feature_row
from streams.agents.serving import initial_engine, load
from streams.agents.state import StateTable
from streams.forecast.batcher import MicroBatcher
from streams.forecast.checkpoints import CheckpointWatcher
from streams.forecast.engine import ForecastEngine, WindowRequest
from streams.forecast.messages import forecast_value
from streams.forecast.windows import SymbolWindow, meta_key, row_key
from streams.metrics import Outcome, Stage
from streams.runtime.observers import notify

if TYPE_CHECKING:
    from faust.types import EventT

    from streams.faust_app import BarcastApp

log = logging.getLogger("barcast.forecast")
RELOAD_INTERVAL_S = 2.0
SWITCH_INTERVAL_S = 0.0001
BACKLOG_BATCHES = 4
IDLE_FLUSH_S = 0.5  # events that asked for no forecast (warm-up rows) are acked this late


class ForecastService:
    def __init__(
        self, app: BarcastApp, engine: ForecastEngine | None, windows_on_drain: bool = False
    ) -> None:
        settings = app.barcast
        self.windows_on_drain = windows_on_drain
        self.app = app
        self.engine = engine  # None until the first checkpoint lands
        self.lookback = TFTConfig.lookback if engine is None else engine.lookback
        self.topic = settings.topic_forecasts
        self.incremental = settings.incremental_encoding
        self.table = StateTable(app, "forecast-windows")
        self.batcher: MicroBatcher[WindowRequest] = MicroBatcher(
            settings.max_batch, settings.max_delay_ms / 1000.0
        )
        self.windows: dict[bytes, SymbolWindow] = {}
        self.applied: dict[bytes, int] = {}
        self.backlog = BACKLOG_BATCHES * settings.max_batch
        self.unacked: list[EventT] = []
        self.dead_letters: list[Out] = []  # published, and their events acked, by the next cut
        self.unacked_since = 0.0
        self.finishing: asyncio.Future[None] | None = None  # the last cut still being stored
        self.dirty: dict[bytes, tuple[int, int]] = {}  # key -> (partition, offset)
        self.stored: dict[bytes, int] = {}  # key -> row count of its last stored meta record
        self.lock = asyncio.Lock()
        self.wakeup = asyncio.Event()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="barcast-inference")

    def window(self, key: bytes) -> SymbolWindow:
        """The symbol's window, rebuilt from the table on first sight after a (re)start."""
        window = self.windows.get(key)
        if window is None:
            window = SymbolWindow(self.lookback, N_FEATURES)
            offset, meta = self.table.get(meta_key(key))
            if meta is not None:
                window.load_meta(meta)
                for row in window.rows():
                    window.load_slot(
                        window.slot_of(row), self.table.get(row_key(key, row))[1] or b""
                    )
            self.windows[key] = window
            self.stored[key] = window.count
            self.applied[key] = offset
        return window

    async def add(self, event: EventT) -> None:
        """A record of the `features` topic; one that is not a feature row goes to the
        dead-letter topic with the next flush, which it starts."""
        row = None
        if not is_control_event(event):
            try:
                row = feature_row(event)
            except ValueError as exc:  # orjson's and base64's errors are ValueErrors too
                why = f"not a features record: {exc}"
                self.dead_letters.append(
                    event_dead_letter(self.app.barcast.topic_dlq, event, Reason.MALFORMED, why)
                )
                self.app.metrics.dlq.inc()
        await self.add_row(event, row)

    async def add_row(self, event: EventT, row: FeatureRow | None) -> None:
        """A feature row (None: END_OF_INTERVAL or a dead letter, flushed at once); `event` is
        acked once the row's forecast is
        out and its window stored."""
        self.app.activity.mark()
        if not self.unacked:
            self.unacked_since = time.monotonic()
        self.unacked.append(event)
        if row is None:
            self.batcher.flush_now()
        else:
            self._apply(row)
        if len(self.batcher) >= self.backlog:
            await self.flush()
        else:
            self.wakeup.set()

    def _apply(self, row: FeatureRow) -> None:
        key = row.key
        window = self.window(key)
        if row.offset <= self.applied[key]:  # in the window already, before a crash
            return
        if window.count and row.ts_event <= window.last_ts:
            # Re-published by a features worker that restarted from older state: the row
            # is in the window already.
            return
        window.append(row.ts_event, row.close, row.synthetic, row.warm, row.values)
        self.applied[key] = row.offset
        self.dirty[key] = (row.partition, row.offset)
        if row.fingerprint != FINGERPRINT:  # a served checkpoint's is this one, too
            raise RuntimeError(
                f"feature row for {row.symbol} has fingerprint {row.fingerprint} but this "
                f"worker's feature set is {FINGERPRINT}: run the stream workers and the "
                "forecast worker from the same barcast version"
            )
        ready = window.ready and window.all_warm and not row.synthetic
        if ready and self.engine is not None:
            self.batcher.add(
                WindowRequest(
                    symbol=row.symbol,
                    key=key,
                    partition=row.partition,
                    count=window.count,
                    values=window.ordered_values(),
                    ts_event=row.ts_event,
                    close=row.close,
                    received_ns=row.received_ns,
                )
            )

    async def flush(self) -> None:
        async with self.lock:
            if not self.unacked:
                return
            batches: list[list[WindowRequest]] = []
            while len(self.batcher):
                batches.append(self.batcher.take())
            events, self.unacked = self.unacked, []
            writes = [] if self.windows_on_drain else self._snapshot()
            sends = await send_batches(self.app, self.dead_letters)
            self.dead_letters = []
            for batch in batches:
                started = time.perf_counter()
                quantiles = await asyncio.get_running_loop().run_in_executor(
                    self.executor, self.engine.predict, batch, self.incremental
                )
                self.app.activity.mark()
                self.app.metrics.inference_seconds.observe(time.perf_counter() - started)
                self.app.metrics.batch_size.observe(len(batch))
                values = self._values(batch, quantiles)
                sends += await send_batches(self.app, self._messages(batch, values))
                if self.app.observers:
                    notify(self.app.observers, "observe_forecast", values)
            received = [request.received_ns for batch in batches for request in batch]
            self.finishing = asyncio.ensure_future(
                self._finish(self.finishing, sends, writes, events, received)
            )
            self.finishing.add_done_callback(_exit_on_failure)

    async def _finish(
        self,
        previous: asyncio.Future[None] | None,
        sends: list[asyncio.Future],
        writes: list[tuple[bytes, int, int, bytes | None]],
        events: list[EventT],
        received_ns: list[int],
    ) -> None:
        """A cut's second half, in order behind the previous cut's: forecasts acknowledged,
        then window slots stored, then the events acked."""
        if previous is not None:
            await previous
        await asyncio.gather(*sends)
        published = time.time_ns()
        for received in received_ns:
            self.app.metrics.bar_to_forecast_seconds.observe((published - received) / 1e9)
        await self._store(writes)
        for event in events:
            event.ack()
        self.app.metrics.forecasts.inc(len(received_ns))
        self.app.metrics.bar(Stage.FORECAST, Outcome.IN, len(events))
        self.app.metrics.bar(Stage.FORECAST, Outcome.OUT, len(received_ns))

    async def drain(self) -> None:
        """Flush, and wait until every cut is stored and acked (and with `windows_on_drain`,
        store the windows)."""
        await self.flush()
        if self.finishing is not None:
            await self.finishing
        if self.windows_on_drain:
            await self._store(self._snapshot())

    async def _store(self, writes: list[tuple[bytes, int, int, bytes | None]]) -> None:
        for key, partition, offset, value in writes:
            if value is None:
                self.table.delete(key, partition)
            else:
                self.table.put(key, partition, offset, value)
        await self.table.flush()

    def _values(self, batch: list[WindowRequest], quantiles: np.ndarray) -> list[dict[str, Any]]:
        now = time.time_ns()
        engine = self.engine
        return [
            forecast_value(engine, request, quantiles[i], len(batch), now)
            for i, request in enumerate(batch)
        ]

    def _messages(self, batch: list[WindowRequest], values: list[dict[str, Any]]) -> list[Out]:
        return [
            Out(
                self.topic,
                request.key,
                orjson.dumps(value),
                request.ts_event / 1e6,
                BAR_HEADERS,
                request.partition,
            )
            for request, value in zip(batch, values, strict=True)
        ]

    def _snapshot(self) -> list[tuple[bytes, int, int, bytes | None]]:
        """Table writes for every window changed since the last flush, taken now (the agent
        keeps sliding windows while the outputs are published): the new rows still in the
        window, then the meta record, then deletions of rows the previous one needed."""
        dirty, self.dirty = self.dirty, {}
        writes: list[tuple[bytes, int, int, bytes | None]] = []
        for key, (partition, offset) in dirty.items():
            window = self.windows[key]
            previous = self.stored[key]
            for row in window.rows():
                if row > previous:
                    slot = window.slot_of(row)
                    writes.append((row_key(key, row), partition, offset, window.slot_bytes(slot)))
            writes.append((meta_key(key), partition, offset, window.meta_bytes()))
            first = window.rows().start
            for row in range(max(1, previous - window.lookback + 1), min(first, previous + 1)):
                writes.append((row_key(key, row), partition, offset, None))
            self.stored[key] = window.count
        return writes

    async def on_rebalance(self) -> None:
        """Before partitions move: make everything consumed so far durable (forecasts out,
        state stored, events acked), then forget the in-memory windows; they reload from the
        table, which the next owner of a partition continues from."""
        await self.drain()
        self.windows.clear()
        self.applied.clear()
        self.stored.clear()

    async def flush_when_due(self) -> None:
        """Flushes windows once due, and events that asked for no forecast (warm-up rows)
        after `IDLE_FLUSH_S`, while the agent is waiting for more."""
        while True:
            wait = self.batcher.seconds_until_due()
            if wait is None and self.unacked:
                wait = max(0.0, self.unacked_since + IDLE_FLUSH_S - time.monotonic())
            self.wakeup.clear()
            if wait is None:
                await self.wakeup.wait()
                continue
            if wait > 0:
                try:
                    await asyncio.wait_for(self.wakeup.wait(), timeout=wait)
                    continue
                except TimeoutError:
                    pass
            await self.flush()

    async def reload(self, watcher: CheckpointWatcher) -> None:
        """Validate a new checkpoint off the loop, then swap it in between batches; the
        step-encoding cache belongs to the old weights, so it goes with them."""
        path = watcher.poll()
        if path is None:
            return
        first = self.engine is None
        try:
            engine, served = await asyncio.to_thread(
                load, path, self.engine, self.app.barcast, self.lookback
            )
        except CheckpointError as exc:
            watcher.reject(path)
            log.error("not serving %s: %s", path, exc)
            return
        async with self.lock:
            engine.swap(served)
            self.engine = engine
        watcher.accept(path)
        self.app.metrics.model_reloads.inc()
        self.app.metrics.set_model(engine.model_id, engine.fingerprint)
        what = "serving the first checkpoint" if first else "hot-reloaded checkpoint"
        log.info("%s %s from %s", what, engine.model_id, watcher.current)


def _exit_on_failure(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and (error := future.exception()) is not None:
        exit_uncommitted("storing a flush of forecasts failed", error)


def inference_threads() -> int:
    """torch's intra-op threads in a worker. One core stays with the event loop (consumption,
    heartbeats, publishing): torch's threads spinning on it would slow both sides. Forecasts
    are bit-identical for one thread count only (reductions split differently), so an offline
    reference must run with as many."""
    return max(1, (os.cpu_count() or 2) - 1)


def start(app: BarcastApp, windows_on_drain: bool = False) -> ForecastService:
    """The forecast stage of this worker: the model loaded, its timers and rebalance hook set;
    what feeds it rows is the caller's (the `forecast` agent, or the one-agent pipeline)."""
    settings = app.barcast
    # The model runs in a thread: every torch op gives up the GIL and must win it back from
    # the event loop, which by default holds it for 5 ms at a time. A short switch interval
    # keeps a forward pass from waiting that long at each of its hundreds of ops.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    torch.set_num_threads(inference_threads())
    raw_topic(app, settings.topic_forecasts)
    watcher = CheckpointWatcher(settings.model_dir)
    engine = initial_engine(app, watcher)
    service = ForecastService(app, engine, windows_on_drain)

    @app.on_partitions_revoked.connect
    async def on_revoked(sender: BarcastApp, revoked: object, **kwargs: object) -> None:
        await service.on_rebalance()

    @app.task
    async def flush_on_delay() -> None:
        await service.flush_when_due()

    @app.timer(RELOAD_INTERVAL_S)
    async def hot_reload() -> None:
        await service.reload(watcher)

    return service


def register(app: BarcastApp) -> None:
    """The `forecast` agent: `features` records into the forecast stage."""
    service = start(app)

    @app.agent(raw_topic(app, app.barcast.topic_features), name="forecast")
    async def forecast(stream):  # type: ignore[no-untyped-def]
        async for event in stream.noack().events():
            await service.add(event)
