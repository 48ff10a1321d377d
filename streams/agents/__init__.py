"""Every Faust agent of the worker, attached according to `BARCAST_ROLE`. `all` runs the whole
pipeline as one agent on `bars.raw`, its stages chained in memory; `stream` (corrections +
features) and `forecast` run the same stages behind topics, as two worker groups;
`corrections` runs that stage alone, and `passthrough` copies raw bars to the clean topic
untouched, the anchor the corrections benchmark compares against. The stages are those
`build_pipeline` (streams.runtime.pipeline) wires for the role; this module adds Faust's part:
the agents, their output topics and timers, and the checkpoint served at start."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from model.checkpoint import CheckpointError
from model.serving.checkpoints import CheckpointWatcher, load_engine
from model.serving.programs import TORCH_THREADS
from streams.consumer import Delivered
from streams.exit_codes import ExitCode
from streams.metrics import MetricsFeed
from streams.runtime.commit import TICK_S, Committer, Handle
from streams.runtime.observers import notify
from streams.runtime.pipeline import STAGES, Pipeline, build_pipeline
from streams.runtime.policy import exit_uncommitted, readable, tombstone_letter
from streams.runtime.records import CleanBar, Out, Record
from streams.runtime.stages.corrections import Cleaned, Corrections
from streams.runtime.stages.features import read_clean_bar
from streams.runtime.stages.forecasts import Forecasting
from streams.runtime.stages.windows import read_feature_row

if TYPE_CHECKING:
    from faust.types import TopicT

    from model.serving.forecast_engine import ForecastEngine
    from streams.faust_app import BarcastApp

QUEUED_FETCHES = 4  # then the consumer waits: back-pressure
# Records the stages run at once, from the fetches that came while they ran: at most a default
# micro-batch's worth, the loop turning between runs (for the flushes, the producer's callbacks
# and the timers waiting on it).
RUN_MAX = 256
SUMMARY_INTERVAL_S = 30.0
RELOAD_INTERVAL_S = 2.0
RAW = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
log = logging.getLogger("barcast.forecast")
agents_log = logging.getLogger("barcast.agents")


def raw_topic(app: BarcastApp, name: str) -> TopicT:
    return app.topic(name, partitions=app.barcast.partitions, **RAW)  # type: ignore[arg-type]


def records(messages: Sequence[Any]) -> list[Record]:
    """Faust messages (raw key and value) as the runtime's records."""
    out = []
    for m in messages:
        headers = m.headers or []
        pairs = list(headers.items()) if isinstance(headers, dict) else list(headers)
        out.append(Record(m.topic, m.partition, m.offset, m.timestamp * 1e3, m.key, m.value, pairs))
    return out


def serve(app: BarcastApp, name: str, committer: Committer, handle: Handle) -> None:
    """Agent `name`: `handle` on the records of the committer's topic, handed over a fetch at a
    time by the consumer (streams.consumer), in runs of at most RUN_MAX; its commits."""
    topic = committer.topic
    queued: asyncio.Queue[list[Any]] = asyncio.Queue(maxsize=QUEUED_FETCHES)
    app.sinks[topic] = queued.put
    app.topics.add(raw_topic(app, topic))  # subscribed: the consumer fetches it

    async def agent() -> None:
        agents_log.info("agent streams.agents.%s started on %s", name, topic)
        waiting: list[Any] = []
        while True:
            if not waiting:
                waiting = await queued.get()
            while len(waiting) < RUN_MAX and not queued.empty():  # what came meanwhile
                waiting += queued.get_nowait()
            run, waiting = waiting[:RUN_MAX], waiting[RUN_MAX:]
            held = [Delivered(app.consumer, m) for m in run]
            try:
                await committer.run(records(run), held, handle)
            except Exception as exc:  # exit uncommitted: its records are read again
                exit_uncommitted(f"agent {name} failed on a batch of {len(run)} records", exc)
            await asyncio.sleep(0)  # the loop turns before the next run

    app.task(agent)

    @app.timer(TICK_S, name=f"{name}_commit")
    async def commit() -> None:
        await committer.tick()

    @app.on_partitions_revoked.connect
    async def on_revoked(sender: Any, revoked: set[Any], **kwargs: Any) -> None:
        if any(tp.topic == topic for tp in revoked):
            await committer.on_revoked()

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        committer.on_assigned()


def attach_corrections(app: BarcastApp, stage: Corrections) -> MetricsFeed:
    """The corrections stage's output topics and summary log; the feed of its counters."""
    for topic in (app.barcast.topic_clean, app.barcast.topic_dlq):
        raw_topic(app, topic)

    @app.timer(SUMMARY_INTERVAL_S)
    async def log_summary() -> None:
        if stage.stats.total:
            logging.getLogger("barcast.corrections").info("corrections: %s", stage.stats.summary())

    return MetricsFeed(stage.stats, app.metrics)


def initial_engine(app: BarcastApp, watcher: CheckpointWatcher) -> ForecastEngine | None:
    """The newest checkpoint's engine, or None (said once) while the directory holds none."""
    path = watcher.newest()
    if path is None:

        @app.task
        async def waiting() -> None:  # a task: it logs once the worker's logging is set up
            where = watcher.model_dir
            log.warning(
                "no checkpoint in %s (BARCAST_MODEL_DIR) yet: waiting for one; corrections and "
                "features run meanwhile, and bars are forecast once one lands (train one with "
                "`barcast train --data FILE --out %s/NAME`)", where, where,
            )  # fmt: skip

        return None
    try:
        engine, _ = load_engine(path, app.barcast, None, None)
    except (CheckpointError, OSError) as exc:  # never serve a model of other features
        print(f"barcast forecast worker: {exc}", file=sys.stderr)  # before logging is set up
        raise SystemExit(ExitCode.CHECKPOINT_REFUSED) from None
    watcher.accept(path)
    app.metrics.set_model(engine.model_id, engine.fingerprint)
    log.info("serving checkpoint %s on %s", engine.model_id, engine.device)
    return engine


def serving_engine(app: BarcastApp) -> tuple[ForecastEngine | None, CheckpointWatcher | None]:
    """The engine a forecasting role serves at start, and the watcher of its model directory."""
    if "forecasting" not in STAGES[app.barcast.role]:
        return None, None
    import torch

    torch.set_num_threads(TORCH_THREADS)
    watcher = CheckpointWatcher(app.barcast.model_dir)
    return initial_engine(app, watcher), watcher


def attach_forecasting(app: BarcastApp, stage: Forecasting, watcher: CheckpointWatcher) -> None:
    """The forecast stage's output topics and metrics, its flush timer and hot reload."""
    settings = app.barcast
    for topic in (settings.topic_forecasts, settings.topic_scores):
        raw_topic(app, topic)
    if settings.explain:
        raw_topic(app, settings.topic_explain)
    if settings.canary:
        raw_topic(app, settings.topic_shadow)
    stage.watch(watcher)
    app.metrics.scoring_figures = stage.scoring.figures
    app.metrics.skill_figures = stage.scoring.skill
    app.metrics.source_counts = stage.scoring.sources

    @app.task
    async def flush_on_delay() -> None:
        await stage.flush_when_due()

    @app.timer(RELOAD_INTERVAL_S)
    async def hot_reload() -> None:
        await stage.reload(watcher)


def observe_bars(app: BarcastApp, cleaned: Cleaned) -> None:
    if app.observers:  # the clean values are gathered only for an observer
        values = [item.value for item in cleaned.items if isinstance(item, CleanBar)]
        notify(app.observers, "observe_bar", values)


def register_corrections(app: BarcastApp, pipeline: Pipeline) -> None:
    stage = pipeline.corrections
    assert stage is not None
    feed = attach_corrections(app, stage)
    committer = Committer(app.runtime, app.barcast.topic_raw, [stage.store])

    async def handle(batch: list[Record]) -> None:
        cleaned = stage.run(batch, time.time_ns())
        await committer.publish(cleaned.outputs)
        observe_bars(app, cleaned)
        feed.push()

    serve(app, "corrections", committer, handle)


def register_features(app: BarcastApp, pipeline: Pipeline) -> None:
    stage = pipeline.features
    assert stage is not None
    raw_topic(app, app.barcast.topic_features)
    committer = Committer(app.runtime, app.barcast.topic_clean, [stage.store])

    async def handle(batch: list[Record]) -> None:
        featured = stage.run(readable(batch, app.barcast.topic_dlq, read_clean_bar))
        await committer.publish(featured.outputs)
        featured.count(app.metrics)

    serve(app, "features", committer, handle)


def register_forecast(app: BarcastApp, pipeline: Pipeline) -> None:
    stage = pipeline.forecasting
    assert stage is not None
    committer = Committer(app.runtime, app.barcast.topic_features, stage.stores, stage.drain)

    async def handle(batch: list[Record]) -> None:
        items = readable(batch, app.barcast.topic_dlq, read_feature_row, "not a features record: ")
        await committer.publish(await stage.add(items))

    serve(app, "forecast", committer, handle)


def register_pipeline(app: BarcastApp, pipeline: Pipeline) -> None:
    """Role `all`: the stages on `bars.raw`, a bar handed on in memory. A hop through the
    broker costs the loop each record's send, fetch and decoding again, and the bar a round
    trip: at a minute boundary, when every symbol's bar arrives at once, two hops fewer
    shorten the burst."""
    cleaning, featuring, forecasting = pipeline.corrections, pipeline.features, pipeline.forecasting
    assert cleaning is not None and featuring is not None and forecasting is not None
    feed = attach_corrections(app, cleaning)
    raw_topic(app, app.barcast.topic_features)
    topic, stores = app.barcast.topic_raw, pipeline.stores
    committer = Committer(app.runtime, topic, stores, forecasting.drain)

    async def handle(batch: list[Record]) -> None:
        cleaned = cleaning.run(batch, time.time_ns())
        featured = featuring.run(cleaned.items)
        await committer.publish([*cleaned.outputs, *featured.outputs])
        observe_bars(app, cleaned)
        await committer.publish(await forecasting.add(featured.rows))
        feed.push()
        featured.count(app.metrics)

    serve(app, "pipeline", committer, handle)


def register_passthrough(app: BarcastApp, pipeline: Pipeline) -> None:
    settings = app.barcast
    for topic in (settings.topic_clean, settings.topic_dlq):
        raw_topic(app, topic)
    committer = Committer(app.runtime, settings.topic_raw, [])

    async def handle(batch: list[Record]) -> None:
        outs = [copied(r, settings.topic_clean, settings.topic_dlq) for r in batch]
        app.metrics.dlq.inc(sum(out.topic == settings.topic_dlq for out in outs))
        await committer.publish(outs)

    serve(app, "passthrough", committer, handle)


def copied(record: Record, topic: str, dlq: str) -> Out:
    """`record` on `topic`, or a tombstone's dead letter: an output's value is always bytes."""
    if record.value is None:
        return tombstone_letter(dlq, record)
    return Out(
        topic, record.key, record.value, record.timestamp_ms, record.headers, record.partition
    )


ROLES: dict[str, tuple[Callable[[BarcastApp, Pipeline], None], ...]] = {
    "passthrough": (register_passthrough,),
    "corrections": (register_corrections,),
    "all": (register_pipeline,),
    "stream": (register_corrections, register_features),
    "forecast": (register_forecast,),
}


def register_agents(app: BarcastApp) -> None:
    """The agents of the worker's role, on the stages `build_pipeline` wires for it."""
    engine, watcher = serving_engine(app)
    pipeline = build_pipeline(app.barcast, app.runtime, engine)
    if pipeline.forecasting is not None and watcher is not None:
        attach_forecasting(app, pipeline.forecasting, watcher)
    for register in ROLES[app.barcast.role]:
        register(app, pipeline)
