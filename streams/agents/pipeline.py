"""Role `all`: corrections, features and forecasts in one agent on `bars.raw`.

The stages are the separate agents' own (the same batch classes, state tables and outputs on
`bars.clean`, `bars.dlq`, `features` and `forecasts`), but a bar goes from one stage to the next
in memory instead of through Kafka. Faust's consumer path costs the event loop ~100-150 µs per
record and hop, more than the stages' own work, and at a minute boundary every symbol's bar
arrives at once: two hops fewer is most of a burst's time on the loop.

Positions: a clean bar's position is its raw record's offset x `FANOUT` plus its index among
that record's outputs (gap fills and releases of held bars make several), so per partition the
features and forecast stages see increasing positions as they would see offsets.

Durability is one chain. A checkpoint first waits for the broker's acks of every record published
since the last one and drains the forecast stage (forecasts out, windows stored), then stores the
corrections and features states, then acks the raw events; the forecast stage acks each raw
event too, once the forecast of its bar is out; batches never wait for acks. So a recovered
features state never holds a bar that the recovered forecast windows lack, and after a crash the
replayed raw bars that a recovered state already holds are skipped, the others recomputed to the
same outputs (removed downstream by key de-duplication).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from features import engine
from streams.agents.checkpoint import Checkpointer
from streams.agents.corrections import CorrectionsStage
from streams.agents.features import FeaturesBatch, feature_states
from streams.agents.forecast import start as start_forecasts
from streams.agents.io import exit_uncommitted, send_batches
from streams.agents.rows import FeatureRow, received_ns
from streams.corrections import SYNTHETIC
from streams.runtime.observers import notify
from streams.schema import PRICE_SCALE

if TYPE_CHECKING:
    from faust.types import EventT

    from streams.faust_app import BarcastApp

FANOUT = 1 << 20  # positions per raw record: above any record's count of clean outputs


@dataclass(slots=True)
class Position:
    """What the features stage reads of a message: where a clean bar sits."""

    topic: str
    partition: int
    offset: int
    timestamp: float


@dataclass(slots=True)
class CleanBar:
    """A `bars.clean` record handed to the features stage in memory, with the raw event it
    came from (acked by the forecast stage)."""

    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    message: Position
    source: EventT


def register(app: BarcastApp) -> None:
    settings = app.barcast
    corrections = CorrectionsStage(app)
    features = feature_states(app)
    forecasts = start_forecasts(app, windows_on_drain=True)
    sent: list[asyncio.Future] = []  # records published since the last checkpoint

    async def durable() -> None:
        """What a checkpoint stores states behind: every record published (the separate
        agents wait for their acks per batch, the pipeline once per checkpoint), every forecast
        out and its window stored."""
        try:
            await asyncio.gather(*sent)
        except Exception as exc:
            exit_uncommitted("publishing bars.clean/features records failed", exc)
        sent.clear()
        await forecasts.drain()

    checkpointer = Checkpointer(
        app, settings.topic_raw, [corrections.states, features], before=durable
    )

    async def handle(events: Sequence[EventT]) -> None:
        cleaned = corrections.batch()
        computed = FeaturesBatch(
            features, settings.topic_features, settings.topic_dlq, keep_results=True
        )
        for event in events:
            first = len(cleaned.outputs)
            cleaned.add(event)
            for i, out in enumerate(cleaned.outputs[first:]):
                if out.topic == settings.topic_clean:
                    position = Position(
                        out.topic,
                        event.message.partition,
                        event.message.offset * FANOUT + i,
                        (out.timestamp_ms or 0.0) / 1000.0,
                    )
                    computed.add(CleanBar(out.key, out.value, out.headers, position, event))
        outputs = computed.compute()
        computed.update_states()
        # The next batch and the forecast stage go on while the broker acks these records:
        # should the worker die first, the raw bars are replayed (their checkpoint waits for
        # the acks) and publish the same records again.
        sent.extend(await send_batches(app, [*cleaned.outputs, *outputs]))
        if app.observers:
            notify(app.observers, "observe_bar", cleaned.clean)
        for clean, bar, values, warm in computed.results:
            clean.source.message.incref()  # the forecast stage acks it too
            row = None if bar is None else _row(clean, bar, values, warm)
            await forecasts.add_row(clean.source, row)
        corrections.feed.push()
        computed.count(app)

    checkpointer.serve("pipeline", handle)


def _row(clean: CleanBar, bar: dict[str, Any], values: np.ndarray, warm: bool) -> FeatureRow:
    """What the forecast stage reads of a bar's features: the `features` record's fields."""
    return FeatureRow(
        key=clean.key or b"",
        partition=clean.message.partition,
        offset=clean.message.offset,
        symbol=bar["symbol"],
        ts_event=bar["ts_event"],
        close=bar["close"] * PRICE_SCALE,
        synthetic=bar.get("status") == SYNTHETIC,
        warm=warm,
        values=values,
        fingerprint=engine.FINGERPRINT,
        received_ns=received_ns(clean),
    )
