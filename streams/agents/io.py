"""What every agent shares: raw-bytes topics, batched consumption and acknowledged publishing.

Agents work per `take_events()` batch and publish the batch's outputs with one gather, so the
per-message cost is Faust's own and not ours. `publish` waits for the broker's acks: an agent
writes its table state only after its outputs are durable (at its next checkpoint, see
streams.agents.checkpoint), so a crash can repeat outputs (removed by key de-duplication) but
never lose one.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from streams.agents.dlq import publishable
from streams.agents.records import Out
from streams.schema import KIND_HEADER, RECEIVED_HEADER, Kind

if TYPE_CHECKING:
    from faust.types import EventT, StreamT, TopicT

    from streams.faust_app import BarcastApp

log = logging.getLogger("barcast.agents")

BATCH_MAX = 2000
BATCH_WITHIN_S = 0.002
# Exit codes of a worker that stops uncommitted; the orchestrator restarts it either way.
EXIT_BROKER_FAILED = 69  # EX_UNAVAILABLE: the Kafka cluster failed a request (send, acks)
EXIT_AGENT_FAILED = 70  # EX_SOFTWARE: a bug in barcast

CONTROL_HEADERS = [(KIND_HEADER, Kind.CONTROL.value.encode())]
BAR_HEADERS = [(KIND_HEADER, Kind.BAR.value.encode())]


def raw_topic(app: BarcastApp, name: str) -> TopicT:
    return app.topic(
        name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=app.barcast.partitions,
    )


def header(event: EventT, name: str) -> bytes | None:
    headers: Any = event.headers or {}
    if isinstance(headers, dict):
        return headers.get(name)
    for key, value in headers:
        if key == name:
            return value
    return None


def bar_headers(event: EventT) -> list[tuple[str, bytes]]:
    """Headers of a bar passed on to the next topic: its kind and when it entered barcast
    (for bar-to-forecast latency)."""
    received = header(event, RECEIVED_HEADER)
    return BAR_HEADERS if received is None else [*BAR_HEADERS, (RECEIVED_HEADER, received)]


def is_control_event(event: EventT) -> bool:
    return header(event, KIND_HEADER) == CONTROL_HEADERS[0][1]


async def each_batch(
    stream: StreamT, handle: Callable[[Sequence[EventT]], Awaitable[None]]
) -> None:
    """Run `handle` on every take() batch; should it raise, end the process at once.

    Faust acks a take() batch when the loop moves on even if the body raised, and its
    supervisor restarts the agent at the next batch: the failed batch's offsets would be
    committed and its outputs never published. Exiting without a commit makes the restart
    replay the batch instead (and, on a bug that repeats, fail loudly rather than drop bars).
    """
    async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
        try:
            await handle(events)
        except Exception as exc:
            exit_uncommitted(f"agent failed on a batch of {len(events)} events", exc)


def exit_uncommitted(what: str, error: BaseException) -> NoReturn:
    """End the process now, leaving the failed events' offsets uncommitted so that a restarted
    worker processes them again. Bad records never get here (streams.agents.dlq): a Kafka error
    is the cluster's, logged on one line and exit 69; anything else is a bug, exit 70."""
    code = exit_code(error)
    if code == EXIT_BROKER_FAILED:
        log.critical(
            "%s: the Kafka cluster failed (%s: %s); exiting %d without committing: check the "
            "brokers in BARCAST_BROKER and that they take records of BARCAST_MAX_RECORD_BYTES",
            what,
            type(error).__name__,
            error,
            code,
        )
    else:
        log.critical("%s; exiting %d without committing", what, code, exc_info=error)
    logging.shutdown()
    os._exit(code)


def exit_code(error: BaseException) -> int:
    """69 for a failure of the Kafka cluster (a request, an ack), 70 for anything else."""
    from aiokafka.errors import KafkaError

    if isinstance(error, KafkaError | ConnectionError | TimeoutError):
        return EXIT_BROKER_FAILED
    return EXIT_AGENT_FAILED


def _publishable(app: BarcastApp, records: Sequence[Out]) -> Sequence[Out]:
    settings = app.barcast
    return publishable(records, settings.max_record_bytes, settings.topic_dlq, app.metrics)


async def send_all(app: BarcastApp, records: Sequence[Out]) -> list[asyncio.Future]:
    """Hand `records` to the producer; the returned futures complete on the broker's acks."""
    producer = app.producer
    return [
        await producer.send(
            r.topic,
            r.key,
            r.value,
            r.partition,
            None if r.timestamp_ms is None else r.timestamp_ms / 1000.0,
            r.headers,
        )
        for r in _publishable(app, records)
    ]


async def send_batches(app: BarcastApp, records: Sequence[Out]) -> list[asyncio.Future]:
    """`send_all` through the app's batch producer: the records of each topic partition, in
    order, as explicit record batches; the futures complete on the broker's acks. In a profiled
    burst Faust's send cost the event loop ~45 µs a record, a batch append ~2: what a burst of
    every symbol's bar at once needs. Every record names its partition, and a worker must send
    a topic's records through one of the two paths only, or their order is lost."""
    producer = await app.batch_producer()
    runs: dict[tuple[str, int], list[Out]] = {}
    for record in _publishable(app, records):
        if record.partition is None:
            raise ValueError(f"a record for {record.topic} has no partition: send_batches needs it")
        runs.setdefault((record.topic, record.partition), []).append(record)
    pending = []
    for (topic, partition), run in runs.items():
        batch = producer.create_batch()
        for r in run:
            ms = None if r.timestamp_ms is None else int(r.timestamp_ms)
            fields = {"key": r.key, "value": r.value, "timestamp": ms, "headers": r.headers}
            if batch.append(**fields) is None:  # full: send it and start the next
                pending.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
                batch.append(**fields)
        pending.append(await producer.send_batch(batch, topic, partition=partition))
    return pending


async def publish(app: BarcastApp, records: Sequence[Out]) -> None:
    pending = await send_all(app, records)
    if pending:
        await asyncio.gather(*pending)
