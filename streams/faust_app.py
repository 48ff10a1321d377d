"""The Faust app class and its configuration from Settings; streams.worker creates the one app
and attaches the agents (streams.agents) and the live page (streams.web) to it."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from typing import Any

import faust
from faust.tables import TableManager

from streams.consumer import BatchTransport, Sink
from streams.internals import InternalsMoved, check_table_internals, live_fetcher
from streams.kafka import BrokerUnavailable, bootstrap_servers, wait_for_metadata
from streams.runtime.commit import TICK_S, Runtime
from streams.runtime.heap import QuietCollections, defer_full_collections
from streams.runtime.observers import Observer
from streams.runtime.policy import exit_uncommitted
from streams.settings import Settings

log = logging.getLogger("barcast")

MAX_BACKOFF_S = 30.0
LAG_INTERVAL_S = 5.0
# Per-partition fetch size, in records of BARCAST_MAX_RECORD_BYTES. Faust's setting "must be at
# least as large as the maximum message size" (its docs; brokers without KIP-74 return no record
# larger than a fetch): records other producers wrote may be larger than barcast's own, and must
# still be read, to reach the dead-letter topic.
FETCH_RECORDS = 4
# Faust's consumer runs aiokafka in a thread of its own, which shares the GIL with the event
# loop. Every socket write of the loop (each produce request) lets the GIL go, and by default
# winning it back waits for the consumer thread to block or for a 5 ms switch interval, which
# then stalls the loop. The model's thread (roles `all`, `forecast`) needs the same, or a
# forward pass waits that long at each of its hundreds of ops.
SWITCH_INTERVAL_S = 0.0001


class Tables(TableManager):
    """Faust's table manager without the second it sleeps before it starts: that pause lets
    tables defined after the app registered start with it, and barcast defines none (its state
    is in streams.runtime.stores), so every start and restart of a worker would wait it out."""

    async def on_start(self) -> None:
        check_table_internals(self)
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


class BarcastApp(faust.App):
    """faust.App that owns barcast's settings, metrics and, in dev, the embedded broker."""

    def __init__(self, settings: Settings, **options: Any) -> None:
        super().__init__(group_id(settings), **options)
        self.barcast = settings
        self._embedded: Any = None
        from streams.metrics import Metrics

        self.metrics = Metrics()
        # Told of every clean bar, forecast and score once handed to the producer (streams.web).
        self.observers: list[Observer] = []
        self.sinks: dict[str, Sink] = {}  # an agent's topic -> its sink (streams.consumer)
        self.runtime = Runtime(
            settings,
            self.metrics,
            group=self.conf.id,
            assigned=self.assigned_partitions,
            commit_offsets=self.commit_now,
            observers=self.observers,
        )

    def _new_transport(self) -> BatchTransport:
        """Faust's aiokafka transport, whose consumer hands records to `sinks` in batches."""
        return BatchTransport(self.conf.broker_consumer, self)

    def assigned_partitions(self, topic: str) -> set[int]:
        """The partitions of `topic` assigned to this worker."""
        return {tp.partition for tp in self.consumer.assignment() if tp.topic == topic}

    async def commit_now(self) -> None:
        """Commit the acked offsets now (a commit in flight first finishes: then ours)."""
        if not await self.consumer.commit():
            await self.consumer.commit()

    async def on_first_start(self) -> None:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        defer_full_collections()  # made in a quiet instead: collect_when_quiet
        self.conf.datadir.mkdir(parents=True, exist_ok=True)
        await super().on_first_start()
        if self.barcast.embedded:
            await asyncio.to_thread(self._start_embedded_broker)
        await self._wait_for_broker()
        if self.barcast.role in ("all", "stream"):
            # Compiling the feature kernels (once per code version, then cached) takes long
            # enough to miss consumer-group heartbeats: do it before joining the group.
            await asyncio.to_thread(warm_up_features)

    async def shorten_fetch_wait(self, *args: Any, **kwargs: Any) -> None:
        """faust-streaming creates its consumer with fetch_max_wait_ms=1500 and no setting.
        Kafka answers a fetch as soon as data arrives, but Tansu (the embedded broker) holds it
        for the whole wait, which then delays every hop of a bar. Table recovery keeps Faust's
        wait; from its end on, fetches wait at most `fetch_max_wait_ms`, set on aiokafka's
        fetcher (no public way reaches it), which `live_fetcher` checks is still there."""
        try:
            fetcher = live_fetcher(self.consumer)
        except InternalsMoved as exc:
            exit_uncommitted("cannot set the consumer's fetch wait", exc)
        if fetcher._fetch_max_wait_ms != self.barcast.fetch_max_wait_ms:
            fetcher._fetch_max_wait_ms = self.barcast.fetch_max_wait_ms
            log.info("consumer fetches now wait at most %d ms", fetcher._fetch_max_wait_ms)
        self.metrics.fetch_max_wait_ms.set(fetcher._fetch_max_wait_ms)

    async def freeze_heap(self, *args: Any, **kwargs: Any) -> None:
        """Put every object alive once partitions are assigned (modules, torch, the restored
        stores) out of the cycle collector's reach: they live as long as the worker, and the
        collector's full passes over so many objects stall whatever burst is in flight. Objects
        made later are still collected as usual, and refcounting frees frozen ones."""
        gc.freeze()

    async def on_stop(self) -> None:
        await super().on_stop()  # the consumer stops fetching: no new batch reaches an agent
        await self.runtime.close()
        if self._embedded is not None:
            self._embedded.stop()

    def _start_embedded_broker(self) -> None:
        from streams.broker import EmbeddedBroker

        bootstrap = bootstrap_servers(self.barcast)
        try:
            wait_for_metadata(bootstrap, timeout_s=0.5)
            log.info("using the embedded broker already running at %s", bootstrap)
        except BrokerUnavailable:
            self._embedded = EmbeddedBroker(
                self.barcast.work_dir / "broker", port=self.barcast.embedded_port
            ).start()
            log.info(
                "started the embedded broker at %s (log: %s)", bootstrap, self._embedded.log_path
            )

    async def _wait_for_broker(self) -> None:
        """Log one line per failed attempt and retry with backoff, instead of Faust's stack
        traces or a silent hang when the cluster is down or misconfigured."""
        bootstrap = bootstrap_servers(self.barcast)
        timeout_s = self.barcast.connect_timeout_s
        backoff = 1.0
        while True:
            try:
                await asyncio.to_thread(wait_for_metadata, bootstrap, timeout_s, self.barcast)
                return
            except BrokerUnavailable as exc:
                log.error("%s; retrying in %.0fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)


def group_id(settings: Settings) -> str:
    """The consumer group (and Faust app id) of a worker. Workers of one role share a group and
    split its partitions; each role is a group of its own, since Faust assigns partitions as if
    every member ran the same agents."""
    return settings.app_id if settings.role == "all" else f"{settings.app_id}-{settings.role}"


def warm_up_features() -> None:
    import numpy as np

    from features import engine

    first, minute = 1_704_150_000_000_000_000, 60_000_000_000
    engine.compute_batch(
        np.array([first, first + minute], dtype=np.int64),
        *(np.ones(2) for _ in range(5)),
        np.zeros(2, dtype=np.bool_),
    )


def _credentials(settings: Settings) -> Any:
    if settings.security_protocol == "PLAINTEXT":
        return None
    from aiokafka.helpers import create_ssl_context

    ssl_context = (
        create_ssl_context(cafile=settings.ssl_cafile or None)
        if settings.security_protocol in ("SSL", "SASL_SSL")
        else None
    )
    if settings.security_protocol == "SSL":
        return faust.SSLCredentials(ssl_context)
    if settings.sasl_mechanism.startswith("SCRAM"):
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password,
            ssl_context=ssl_context,
            mechanism=settings.sasl_mechanism,
        )
    return faust.SASLCredentials(
        username=settings.sasl_username, password=settings.sasl_password, ssl_context=ssl_context
    )


def create_app(settings: Settings) -> BarcastApp:
    servers = bootstrap_servers(settings).split(",")
    app = BarcastApp(
        settings,
        broker=[f"kafka://{server.strip()}" for server in servers],
        broker_credentials=_credentials(settings),
        store="memory://",  # no tables: the worker's state is in streams.runtime.stores
        processing_guarantee="at_least_once",
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=max(0.5, settings.session_timeout_s / 5),
        broker_rebalance_timeout=settings.rebalance_timeout_s,
        broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger_ms=1,
        producer_max_request_size=settings.max_record_bytes,
        consumer_max_fetch_size=FETCH_RECORDS * settings.max_record_bytes,
        stream_wait_empty=False,
        web_port=settings.web_port,
        web_host="0.0.0.0",
        datadir=str(settings.work_dir / "faust" / group_id(settings)),
        autodiscover=False,
        topic_disable_leader=True,
        TableManager=Tables,
    )

    @app.page("/metrics")
    async def metrics(view: Any, request: Any) -> Any:
        # aiohttp refuses a charset inside content_type=, so the full type goes in a header.
        return view.bytes(app.metrics.render(), headers={"Content-Type": app.metrics.content_type})

    app.on_rebalance_complete.connect(app.shorten_fetch_wait)
    app.on_rebalance_complete.connect(app.freeze_heap)
    collections = QuietCollections(time.monotonic())

    @app.timer(TICK_S)
    async def collect_when_quiet() -> None:
        if collections.tick(time.monotonic(), app.runtime.worked):
            app.metrics.full_collections.inc()

    @app.timer(LAG_INTERVAL_S)
    async def record_lag() -> None:
        try:
            app.metrics.record_lag(app.consumer)
        except InternalsMoved as exc:  # loudly, as for the fetch wait: exit 70
            exit_uncommitted("cannot read the consumer's committed offsets", exc)

    return app
