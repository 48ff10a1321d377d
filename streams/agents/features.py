"""`bars.clean` → `features`: the Numba engine, one call per `take()` batch for all symbols.

Each symbol's table entry is its engine state plus the ts_event of its last bar, written at
checkpoints (streams.agents.checkpoint). A bar at or before that ts_event is a repeat that an
upstream restart re-published (bars.clean carries each symbol's bars in strictly increasing
time otherwise); it was applied already and is skipped, so the feature rows stay exactly those
of an uninterrupted run.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import zstandard

from features import engine
from streams.agents.checkpoint import Checkpointer, StateCache
from streams.agents.dlq import Reason, event_dead_letter
from streams.agents.io import (
    CONTROL_HEADERS,
    Out,
    bar_headers,
    is_control_event,
    publish,
    raw_topic,
)
from streams.agents.state import StateTable
from streams.corrections import SYNTHETIC
from streams.metrics import Outcome, Stage
from streams.schema import PRICE_SCALE, encode_feature_values, engine_columns

if TYPE_CHECKING:
    from faust.types import EventT

    from streams.faust_app import BarcastApp


PRICE_FIELDS = ("open", "high", "low", "close")
_LAST_TS = struct.Struct("<q")  # ts_event of the symbol's last bar, before the engine state
NO_TS = -(2**63)


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
            "synthetic": bar.get("status") == SYNTHETIC,
            "values": encode_feature_values(values),
        }
    )


def decode_bar(value: bytes) -> dict[str, Any] | None:
    """A `bars.clean` value with the fields the engine reads, or None."""
    try:
        bar = orjson.loads(value)
        if (
            all(type(bar[name]) is int for name in ("ts_event", *PRICE_FIELDS))
            and type(bar["volume"]) in (int, float)
            and isinstance(bar["symbol"], str)
        ):
            return bar
    except (orjson.JSONDecodeError, KeyError, TypeError):
        pass
    return None


@dataclass(slots=True)
class SymbolFeatures:
    """A symbol's engine state and the ts_event of its last bar: its table entry."""

    last_ts: int = NO_TS
    vector: np.ndarray = field(default_factory=lambda: engine.new_states(1)[0])

    def to_bytes(self) -> bytes:
        """Compressed: an engine state is ~40 kB, a third of it zeros, and every changed
        symbol writes one per checkpoint; zstd's fastest level makes it ~12 kB for ~0.1 ms."""
        state = _LAST_TS.pack(self.last_ts) + engine.state_to_bytes(self.vector)
        return zstandard.compress(state, 1)

    @classmethod
    def from_bytes(cls, data: bytes) -> SymbolFeatures:
        data = zstandard.decompress(data)
        state = engine.state_from_bytes(data[_LAST_TS.size :])
        return cls(_LAST_TS.unpack_from(data)[0], state)


class FeaturesBatch:
    """One take() batch: one engine call for every bar of every symbol."""

    def __init__(
        self,
        states: StateCache[SymbolFeatures],
        topic: str,
        dlq_topic: str,
        keep_results: bool = False,
    ) -> None:
        self.states, self.topic, self.keep_results = states, topic, keep_results
        self.dlq_topic = dlq_topic
        self.rows: dict[bytes, int] = {}
        self.symbols: list[SymbolFeatures] = []
        self.applied: list[int] = []  # offset of the last source event each state reflects
        self.partitions: list[int] = []
        self.touched: set[int] = set()
        self.state = engine.new_states(0)
        self.items: list[EventT | _Bar | Out] = []  # Out: a dead letter
        self.bars: list[_Bar] = []
        # With keep_results: (event, bar, its feature values, warm) per bar computed and
        # (event, None, None, False) per control record, in arrival order, for the one-agent
        # pipeline to hand on
        self.results: list[tuple[Any, dict[str, Any] | None, np.ndarray | None, bool]] = []
        self.malformed = 0
        self.refused = 0

    def add(self, event: EventT) -> None:
        if is_control_event(event):
            self.items.append(event)
            return
        message = event.message
        row = self._row(event.key or b"", message.partition)
        if message.offset <= self.applied[row]:  # applied before a crash: its row is out
            return
        self.applied[row] = message.offset
        self.touched.add(row)
        bar = decode_bar(event.value)
        if bar is None:
            self.malformed += 1
            why = "not a bars.clean bar (JSON with int ts_event and prices, volume, symbol)"
            self.items.append(event_dead_letter(self.dlq_topic, event, Reason.MALFORMED, why))
            return
        symbol = self.symbols[row]
        if bar["ts_event"] <= symbol.last_ts:  # re-published upstream: applied already
            return
        symbol.last_ts = bar["ts_event"]
        item = _Bar(event, bar, row)
        self.items.append(item)
        self.bars.append(item)

    def _row(self, key: bytes, partition: int) -> int:
        row = self.rows.get(key)
        if row is None:
            offset, symbol = self.states.get(key, partition)
            row = self.rows[key] = len(self.symbols)
            self.symbols.append(symbol)
            self.applied.append(offset)
            self.partitions.append(partition)
        return row

    def compute(self) -> list[Out]:
        """Advance the states; the batch's outputs in arrival order."""
        if self.bars:
            self.state = np.stack([symbol.vector for symbol in self.symbols])
        rows = self._update() if self.bars else {}
        outputs = []
        for item in self.items:
            if isinstance(item, Out):
                outputs.append(item)
            elif not isinstance(item, _Bar):
                outputs.append(_forward(item, self.topic))
                if self.keep_results:
                    self.results.append((item, None, None, False))
            elif id(item) in rows:
                values, warm = rows[id(item)]
                if self.keep_results:
                    self.results.append((item.event, item.value, values, warm))
                event = item.event
                outputs.append(
                    Out(
                        self.topic,
                        event.key,
                        feature_message(item.value, values, warm),
                        event.message.timestamp * 1000.0,
                        bar_headers(event),
                        event.message.partition,
                    )
                )
        return outputs

    def _update(self) -> dict[int, tuple[np.ndarray, bool]]:
        """Feature rows by id(bar): all bars in one engine call; should the engine refuse the
        batch (it validates every bar before it moves any state), bar by bar, the bars it
        refuses going to the dead-letter topic (at the end of the batch's outputs)."""
        bars = self.bars
        columns = engine_columns([b.value for b in bars])
        rows = np.array([b.row for b in bars], dtype=np.int64)
        try:
            values, warm = engine.update_many(self.state, rows, *columns)
            return {id(b): (values[i], bool(warm[i])) for i, b in enumerate(bars)}
        except ValueError:
            pass
        out: dict[int, tuple[np.ndarray, bool]] = {}
        for i, bar in enumerate(bars):
            row = bar.row
            try:
                values, warm = engine.update_many(
                    self.state[row : row + 1],
                    np.zeros(1, np.int64),
                    *(c[i : i + 1] for c in columns),
                )
            except ValueError as exc:
                self.refused += 1
                why = f"refused by the feature engine: {exc}"
                self.items.append(event_dead_letter(self.dlq_topic, bar.event, Reason.REFUSED, why))
                continue
            out[id(bar)] = (values[0], bool(warm[0]))
        return out

    def count(self, app: BarcastApp) -> None:
        app.metrics.bar(Stage.FEATURES, Outcome.IN, len(self.bars) + self.malformed)
        app.metrics.bar(Stage.FEATURES, Outcome.OUT, len(self.bars) - self.refused)
        if self.malformed or self.refused:
            app.metrics.dlq.inc(self.malformed + self.refused)

    def update_states(self) -> None:
        """Hand every symbol this batch advanced back to the cache (written at a checkpoint)."""
        for key, row in self.rows.items():
            if row in self.touched:
                symbol = self.symbols[row]
                if self.bars:
                    np.copyto(symbol.vector, self.state[row])
                self.states.set(key, self.partitions[row], self.applied[row], symbol)


def feature_states(app: BarcastApp) -> StateCache[SymbolFeatures]:
    """The features stage's topics and per-symbol states."""
    raw_topic(app, app.barcast.topic_features)
    return StateCache(
        StateTable(app, "features-state"),
        SymbolFeatures.from_bytes,
        SymbolFeatures.to_bytes,
        SymbolFeatures,
    )


def register(app: BarcastApp) -> None:
    """The `features` agent: `bars.clean` into `features`."""
    settings = app.barcast
    states = feature_states(app)
    checkpointer = Checkpointer(app, settings.topic_clean, [states])

    async def handle(events: Sequence[EventT]) -> None:
        batch = FeaturesBatch(states, settings.topic_features, settings.topic_dlq)
        for event in events:
            batch.add(event)
        outputs = batch.compute()
        batch.update_states()
        await publish(app, outputs)
        batch.count(app)

    checkpointer.serve("features", handle)


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
