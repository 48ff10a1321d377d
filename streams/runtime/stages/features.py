"""Clean bars -> feature rows: the Numba engine, one call per batch for all symbols. Each
symbol's state is its engine state plus the ts_event of its last bar: a bar at or before it is
a repeat an upstream restart re-published (bars.clean carries each symbol's bars in strictly
increasing time otherwise), applied already and skipped.

A symbol keyed by its continuous symbol keeps one engine state across contracts: at each ROLL
its `scale` is divided by the roll's ratio, and the engine is fed the bars' prices times it, so
the new contract's prices arrive at the level the state has seen and no return, volatility or
price feature sees the calendar spread (the features are scale-free; a row's `close` stays the
bar's own). Scaled prices are rounded to the fixed-point unit, as bars' prices are."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import zstandard

from features import engine
from features.bars import PRICE_FIELDS, PRICE_SCALE, engine_columns, rolled_price
from features.corrections import SYNTHETIC
from streams import schema
from streams.metrics import Metrics, Outcome, Stage
from streams.runtime.policy import DeadLetterReason, dead_letter
from streams.runtime.records import CleanBar, Control, FeatureRow, Out, Record
from streams.runtime.stages.engine_rows import EngineRows
from streams.runtime.stores import StateStore
from streams.schema import ControlKind

_LAST_TS = struct.Struct("<q")  # ts_event of the symbol's last bar, before the engine state
# After it, once the symbol rolled: the factor its bars' prices are fed at, and the last roll's
# ts_event (a roll re-published upstream is not applied again).
_ROLLED = struct.Struct("<dq")
_STATE_BYTES = len(engine.state_to_bytes(engine.new_states(1)[0]))
NO_TS = -(2**63)
# Reused: a context made per call adds to every state's encoding (the loop's thread only)
_COMPRESS, _DECOMPRESS = zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor()


@dataclass(slots=True)
class SymbolFeatures:
    """A symbol's engine state and the ts_event of its last bar: its stored state."""

    last_ts: int = NO_TS
    vector: np.ndarray = field(default_factory=lambda: engine.new_states(1)[0])
    scale: float = 1.0
    rolled_at: int = NO_TS
    row: int = field(default=-1, compare=False)  # in the stage's EngineRows, once placed

    def to_bytes(self) -> bytes:
        """Compressed (zstd's fastest level): a third of an engine state is zeros."""
        state = _LAST_TS.pack(self.last_ts) + engine.state_to_bytes(self.vector)
        if self.rolled_at != NO_TS:  # a symbol that never rolled: the bytes of before rolls
            state += _ROLLED.pack(self.scale, self.rolled_at)
        return _COMPRESS.compress(state)

    def roll(self, ts_event: int, ratio: float) -> bool:
        """Feed the bars from `ts_event` on at the scale of before a roll of `ratio`; False
        (nothing done) for a roll it took already."""
        if ts_event <= max(self.last_ts, self.rolled_at):
            return False
        self.scale /= ratio
        self.rolled_at = ts_event
        return True

    def prices(self, bar: schema.CleanBarValue) -> list[float]:
        """The bar's open, high, low and close as the engine is fed them."""
        fixed = [bar[name] for name in PRICE_FIELDS]  # type: ignore[literal-required]
        return [rolled_price(p, self.scale) for p in fixed]

    @classmethod
    def from_bytes(cls, data: bytes) -> SymbolFeatures:
        data = _DECOMPRESS.decompress(data)
        end = _LAST_TS.size + _STATE_BYTES
        state = engine.state_from_bytes(data[_LAST_TS.size : end])
        rolled = _ROLLED.unpack_from(data, end) if len(data) > end else (1.0, NO_TS)
        return cls(_LAST_TS.unpack_from(data)[0], state, *rolled)


Item = CleanBar | Control | Out  # Out: a dead letter, passed on in order
# Each new bar, its symbol's row in the EngineRows, and if the symbol rolled the prices the
# engine is fed.
Bars = list[tuple[CleanBar, int, list[float] | None]]


def read_clean_bar(r: Record) -> CleanBar:
    """A `bars.clean` record as the stage's input; ValueError if it is not one."""
    bar, received = schema.decode_clean(r.value), schema.decode_received_ns(r.headers)
    if r.key != bar["symbol"].encode():  # the states are the key's
        raise ValueError(
            f"keyed {r.key!r}, but its symbol is {bar['symbol']!r}: a bars.clean record is keyed "
            "by its symbol"
        )
    return CleanBar(r.topic, r.key, r.partition, r.offset, r.timestamp_ms, bar, received)


COUNTS = ("bars", "refused", "malformed")  # Featured's counts


@dataclass(slots=True)
class Featured:
    """A batch's outputs, and its rows and control records in order for the next stage."""

    outputs: list[Out]
    rows: list[FeatureRow | Control]
    bars: int  # bars the engine was given
    refused: int
    malformed: int

    def count(self, metrics: Metrics) -> None:
        metrics.bar(Stage.FEATURES, Outcome.IN, self.bars + self.malformed)
        metrics.bar(Stage.FEATURES, Outcome.OUT, self.bars - self.refused)
        if self.malformed or self.refused:
            metrics.dlq.inc(self.malformed + self.refused)


class Features:
    def __init__(self, store: StateStore[SymbolFeatures], topic: str, dlq_topic: str) -> None:
        self.store, self.topic, self.dlq_topic = store, topic, dlq_topic
        self.engine_rows = EngineRows(lambda key, symbol: store.states.get(key) is symbol)

    def run(self, items: Sequence[Item]) -> Featured:
        """Every symbol in one engine call, unless a symbol expires among `items` after bars of
        it (then a call for the items before its EXPIRED record, another from it on)."""
        done = [self._run(piece) for piece in pieces(items)]
        if len(done) == 1:
            return done[0]
        return Featured(
            [out for piece in done for out in piece.outputs],
            [row for piece in done for row in piece.rows],
            *(sum(getattr(piece, name) for piece in done) for name in COUNTS),
        )

    def _run(self, items: Sequence[Item]) -> Featured:
        """Every symbol in one engine call; outputs in arrival order, refusals last. An EXPIRED
        symbol's state is dropped (none of its bars is among `items` before its record)."""
        rows: dict[bytes, int] = {}  # key -> its index in `symbols`
        symbols: list[SymbolFeatures] = []
        last: list[CleanBar | Control | None] = []  # each row's last change: tags the write
        bars: Bars = []
        malformed = 0

        def row_of(key: bytes) -> int:
            row = rows.get(key)
            if row is None:
                row = rows[key] = len(symbols)
                symbol = self.store.read(key)
                self.engine_rows.place(key, symbol)
                symbols.append(symbol)
                last.append(None)
            return row

        gone = self.store.gone
        for item in items:
            if isinstance(item, CleanBar):
                if item.value["ts_event"] <= gone.get(item.key, NO_TS):
                    continue  # of before its symbol expired: re-published upstream
                row = row_of(item.key)
                symbol = symbols[row]
                if item.value["ts_event"] <= symbol.last_ts:  # re-published upstream
                    continue
                symbol.last_ts = item.value["ts_event"]
                last[row] = item
                rolled = symbol.rolled_at != NO_TS
                bars.append((item, symbol.row, symbol.prices(item.value) if rolled else None))
            elif isinstance(item, Control) and item.kind == ControlKind.ROLL:
                row = row_of(item.key)
                if symbols[row].roll(item.ts_event, item.decoded["ratio"]):
                    last[row] = item
            elif isinstance(item, Control) and item.kind == ControlKind.EXPIRED:
                self.store.evict(item.key, item.partition, item.offset, item.decoded["last_ts"])
            elif isinstance(item, Out):
                malformed += 1
        computed, refusals = self._compute(bars)
        outputs: list[Out] = []
        next_rows: list[FeatureRow | Control] = []
        for item in items:
            if isinstance(item, Out):
                outputs.append(item)
            elif isinstance(item, Control):
                outputs.append(item.forward(self.topic))
                next_rows.append(item)
            elif (row := computed.get(id(item))) is not None:
                value, ms = schema.encode_features(features_value(row)), row.timestamp_ms
                headers = schema.bar_headers(row.received_ns)
                outputs.append(Out(self.topic, row.key, value, ms, headers, row.partition))
                next_rows.append(row)
        for key, row in rows.items():
            if (bar := last[row]) is not None:
                self.store.write(key, bar.partition, bar.offset, symbols[row])
        outputs += refusals
        return Featured(outputs, next_rows, len(bars), len(refusals), malformed)

    def _compute(self, bars: Bars) -> tuple[dict[int, FeatureRow], list[Out]]:
        """Rows by id(bar), all bars in one engine call on the states in place; if it refuses
        the batch (validating every bar before it moves any state), bar by bar, refused bars as
        dead letters."""
        if not bars:
            return {}, []
        columns = engine_columns([bar.value for bar, _, _ in bars])  # type: ignore[misc]
        for i, (_, _, prices) in enumerate(bars):
            if prices is not None:
                for column, price in zip(columns[1:5], prices, strict=True):
                    column[i] = price
        index = np.array([row for _, row, _ in bars], dtype=np.int64)
        state = self.engine_rows.array
        try:
            values, warm = engine.update_many(state, index, *columns)
            computed = {
                id(b): feature_row(b, values[i], bool(warm[i])) for i, (b, *_) in enumerate(bars)
            }
            refusals: list[Out] = []
        except ValueError:
            computed, refusals = self._one_by_one(state, index, bars, columns)
        return computed, refusals

    def _one_by_one(
        self, state: np.ndarray, index: np.ndarray, bars: Bars, columns: tuple[np.ndarray, ...]
    ) -> tuple[dict[int, FeatureRow], list[Out]]:
        computed: dict[int, FeatureRow] = {}
        refusals: list[Out] = []
        for i, (bar, _, _) in enumerate(bars):
            try:
                one = slice(i, i + 1)
                values, warm = engine.update_many(state, index[one], *(c[one] for c in columns))
            except ValueError as exc:
                refusals.append(self._refused(bar, exc))
                continue
            computed[id(bar)] = feature_row(bar, values[0], bool(warm[0]))
        return computed, refusals

    def _refused(self, bar: CleanBar, exc: ValueError) -> Out:
        """A dead letter of the bar's `bars.clean` bytes, naming the record it came from."""
        why = f"refused by the feature engine: {exc}"
        source, value = (bar.topic, bar.partition, bar.offset), schema.encode_clean(bar.value)
        return dead_letter(
            self.dlq_topic, bar.key, value, source, DeadLetterReason.REFUSED, why, bar.partition
        )


def pieces(items: Sequence[Item]) -> list[Sequence[Item]]:
    """`items` cut before each EXPIRED record of a symbol met earlier in its piece: a piece's
    bars run in one engine call, on the states its symbols had before it."""
    cuts, met = [0], set()
    for i, item in enumerate(items):
        if isinstance(item, CleanBar | Control):
            if isinstance(item, Control) and item.kind == ControlKind.EXPIRED and item.key in met:
                cuts.append(i)
                met.clear()
            met.add(item.key)
    cuts.append(len(items))
    return [items[start:end] for start, end in pairwise(cuts)]


def feature_row(bar: CleanBar, values: np.ndarray, warm: bool) -> FeatureRow:
    value = bar.value
    return FeatureRow(
        key=bar.key,
        partition=bar.partition,
        offset=bar.offset,
        timestamp_ms=bar.timestamp_ms,
        received_ns=bar.received_ns,
        symbol=value["symbol"],
        ts_event=value["ts_event"],
        close=value["close"] * PRICE_SCALE,
        synthetic=value.get("status") == SYNTHETIC,
        warm=warm,
        values=values,
        fingerprint=engine.FINGERPRINT,
        raw_symbol=value.get("raw_symbol"),
    )


def features_value(row: FeatureRow) -> schema.FeaturesValue:
    """The `features` topic value of a feature row."""
    raw = {} if row.raw_symbol is None else {"raw_symbol": row.raw_symbol}
    return {  # type: ignore[return-value]
        "symbol": row.symbol,
        **raw,
        "ts_event": row.ts_event,
        "close": row.close,
        "fingerprint": row.fingerprint,
        "warm": row.warm,
        "synthetic": row.synthetic,
        "values": schema.encode_feature_values(row.values),
    }
