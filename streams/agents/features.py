"""`bars.clean` → `features`: the Numba engine, one call per `take()` batch for all symbols."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from features import engine
from streams.agents.io import (
    CONTROL_HEADERS,
    Out,
    bar_headers,
    batches,
    is_control_event,
    publish,
    raw_topic,
)
from streams.agents.state import StateTable
from streams.metrics import Outcome, Stage
from streams.schema import PRICE_SCALE, encode_feature_values

if TYPE_CHECKING:
    from faust.types import EventT

    from streams.faust_app import BarcastApp

PRICE_FIELDS = ("open", "high", "low", "close")


@dataclass(slots=True)
class _Bar:
    event: EventT
    value: dict[str, Any]
    row: int


def feature_message(bar: dict[str, Any], values: np.ndarray, warm: bool) -> bytes:
    return orjson.dumps(
        {
            "symbol": bar["symbol"],
            "ts_event": bar["ts_event"],
            "close": bar["close"] * PRICE_SCALE,
            "fingerprint": engine.FINGERPRINT,
            "warm": warm,
            "synthetic": bar.get("status") == "synthetic",
            "values": encode_feature_values(values),
        }
    )


def register(app: BarcastApp) -> None:
    settings = app.barcast
    source = raw_topic(app, settings.topic_clean)
    raw_topic(app, settings.topic_features)
    states = StateTable(app, "features-state")

    @app.agent(source, name="features")
    async def compute_features(stream):  # type: ignore[no-untyped-def]
        async for events in batches(stream):
            outputs, updates, bars = process_batch(events, states, settings.topic_features)
            await publish(app, outputs)
            for key, (partition, offset, payload) in updates.items():
                states.put(key, partition, offset, payload)
            app.metrics.bar(Stage.FEATURES, Outcome.IN, bars)
            app.metrics.bar(Stage.FEATURES, Outcome.OUT, bars)


def process_batch(
    events: list[EventT], states: StateTable, topic: str
) -> tuple[list[Out], dict[bytes, tuple[int, int, bytes]], int]:
    """Outputs in arrival order, the new state per symbol, and how many bars were computed."""
    keys: dict[bytes, int] = {}
    applied: list[int] = []
    loaded: list[np.ndarray] = []
    items: list[EventT | _Bar] = []
    for event in events:
        if is_control_event(event):
            items.append(event)
            continue
        if event.key not in keys:
            offset, payload = states.get(event.key)
            keys[event.key] = len(loaded)
            applied.append(offset)
            loaded.append(
                engine.new_states(1)[0] if payload is None else engine.state_from_bytes(payload)
            )
        row = keys[event.key]
        if event.message.offset > applied[row]:  # else: applied before a crash, output is out
            items.append(_Bar(event, orjson.loads(event.value), row))
    bars = [item for item in items if isinstance(item, _Bar)]
    if not bars:
        return [_forward(e, topic) for e in items if not isinstance(e, _Bar)], {}, 0
    state = np.stack(loaded)
    values, warm = engine.update_many(
        state,
        np.array([b.row for b in bars], dtype=np.int64),
        np.array([b.value["ts_event"] for b in bars], dtype=np.int64),
        *(
            np.array([b.value[f] for b in bars], dtype=np.float64) * PRICE_SCALE
            for f in PRICE_FIELDS
        ),
        np.array([b.value["volume"] for b in bars], dtype=np.float64),
        np.array([b.value.get("status") == "synthetic" for b in bars], dtype=np.bool_),
    )
    index = {id(b): i for i, b in enumerate(bars)}
    outputs = [
        _forward(item, topic)
        if not isinstance(item, _Bar)
        else Out(
            topic,
            item.event.key,
            feature_message(item.value, values[index[id(item)]], bool(warm[index[id(item)]])),
            item.event.message.timestamp * 1000.0,
            bar_headers(item.event),
            item.event.message.partition,
        )
        for item in items
    ]
    last = {b.event.key: b.event.message for b in bars}
    updates = {
        key: (message.partition, message.offset, engine.state_to_bytes(state[keys[key]]))
        for key, message in last.items()
    }
    return outputs, updates, len(bars)


def _forward(event: EventT, topic: str) -> Out:
    """Control records pass through to the same partition of the next topic."""
    message = event.message
    return Out(
        topic,
        event.key,
        event.value,
        message.timestamp * 1000.0,
        CONTROL_HEADERS,
        message.partition,
    )
