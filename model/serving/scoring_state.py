"""One symbol's scoring state over time (`SymbolScoring`: pending forecasts, recent bars, rolling
figures) and its stored form; `Scorer` holds every symbol's in one process.

Per symbol, bars are kept only while a forecast may still need them (newer than the oldest
pending forecast and than the newest forecast seen: forecasts of a symbol arrive in order), up
to `retention` bars; a forecast whose bars were dropped is recorded as `late`. Rolling figures are
exponentially weighted means with weight (1 - 1/window)^age (mean age about `window` scored
forecasts): a handful of floats per horizon in the durable store instead of the last `window`
scores. Every state round-trips exactly through `to_bytes` / `from_bytes`, its floats as
doubles, not JSON text: each symbol's state goes to the changelog every minute, a JSON float is
two or three times the bytes, and the producer and the broker pay per byte.

What a state holds for minutes (pending forecasts, bars) is tuples of numbers, not dicts and
lists: the garbage collector stops tracking such a tuple once it has seen it, while each list or
dict that outlives a young generation is promoted and rescanned by every full collection, and a
thousand symbols a minute of them set off full collections in the middle of a burst.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from model.covariates import NS_PER_DAY, NS_PER_MIN
from model.serving.scoring import (
    QUANTILES,
    Decided,
    ForecastFields,
    LabelBar,
    Score,
    ScoreValue,
    forecast_fields,
    label_minutes,
    score_decided,
    score_increments,
)
from model.serving.stored import framed, unframed

DEFAULT_WINDOW = 240  # scored forecasts: four hours of one symbol's minutes
DEFAULT_RETENTION = 1440  # bars held per symbol for forecasts not yet seen: a day of minutes
# A symbol without a bar for this long (event time) before the newest of any is no longer
# trading (an expired contract): it leaves the pooled figures and the live page, its states
# kept until BARCAST_EXPIRE_DAYS drops them (or for good); longer than any holiday's close.
STALE_NS = 7 * NS_PER_DAY
ROLLING_WIDTH = 2 + len(QUANTILES)  # a `Rolling.sums` row
STATE_FORMAT = 2  # `SymbolScoring.to_bytes`; 1 (read still): one JSON document

Packed = tuple[orjson.Fragment, bytes]  # a pending forecast's header entry and its floats


def pack_forecast(f: ForecastFields) -> Packed:
    head = orjson.Fragment(orjson.dumps([f.symbol, f.ts_event, f.horizons, f.model_id]))
    return head, struct.pack(f"<{1 + 3 * len(f.horizons)}d", f.close, *f.q10, *f.q50, *f.q90)


@dataclass(eq=False)
class Rolling:
    """Exponentially weighted means of coverage and pinball per horizon (row = horizon - 1):
    `sums[h]` = [weight, inside, pinball per quantile...] each decayed by (1 - 1/window)."""

    window: int = DEFAULT_WINDOW
    sums: np.ndarray = field(default_factory=lambda: np.zeros((0, ROLLING_WIDTH)))

    def add(self, record: ScoreValue, increments: np.ndarray | None = None) -> None:
        """A record into the means; `increments` are its `score_increments`, if at hand (a
        batch's come from `score_decided` as one array: numpy per record, not per float)."""
        if record["unscored"] is not None:
            return
        if increments is None:
            increments = score_increments(record)
        n = len(increments)
        if n > len(self.sums):
            grown = np.zeros((n - len(self.sums), ROLLING_WIDTH))
            self.sums = np.concatenate([self.sums, grown])
        elif n < len(self.sums):  # a model of fewer horizons: the others are forecast no more
            self.sums = self.sums[:n].copy()
        rows = self.sums[:n]  # a view: updated in place
        rows *= 1.0 - 1.0 / self.window
        rows += increments

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rolling):
            return NotImplemented
        return self.window == other.window and np.array_equal(self.sums, other.sums)


@dataclass
class SymbolScoring:
    """One symbol's scoring state: pending forecasts, recent bars and rolling figures."""

    window: int = DEFAULT_WINDOW
    retention: int = DEFAULT_RETENTION
    pending: list[ForecastFields] = field(default_factory=list)  # ts order
    # Each pending forecast's stored form, encoded once: a forecast stays pending for H
    # minutes, and every checkpoint between re-encodes the state.
    packed: list[Packed] = field(default_factory=list, compare=False, repr=False)
    bars: dict[int, LabelBar] = field(default_factory=dict)
    last_bar_ts: int | None = None
    last_forecast_ts: int | None = None
    dropped_through: int | None = None  # newest bar ts dropped by the retention
    rolling: Rolling = field(default_factory=Rolling)
    outages: list[tuple[int, int]] = field(default_factory=list)  # [start, end) lost, in order
    rolled_at: int | None = None  # the last roll's ts_event: one re-published is not taken again

    def __post_init__(self) -> None:
        self.rolling.window = self.window
        if len(self.packed) != len(self.pending):
            self.packed = [pack_forecast(f) for f in self.pending]

    def add_bar(self, bar: LabelBar) -> list[Decided]:
        if self.last_bar_ts is not None and bar.ts_event <= self.last_bar_ts:
            return []  # a repeat after a restart: bars.clean is in ts order per symbol
        self.bars[bar.ts_event] = bar
        self.last_bar_ts = bar.ts_event
        return self._decide()

    def add_forecast(self, value: dict[str, Any]) -> list[Decided]:
        ts = int(value["ts_event"])
        if self.last_forecast_ts is not None and ts <= self.last_forecast_ts:
            return []  # a repeat after a restart: forecasts are idempotent by (symbol, ts)
        self.last_forecast_ts = ts
        forecast = forecast_fields(value)
        if self.dropped_through is not None and ts + NS_PER_MIN <= self.dropped_through:
            return [Decided(forecast, None)]
        self.pending.append(forecast)
        self.packed.append(pack_forecast(forecast))
        return self._decide()

    def outage(self, start: int, end: int) -> None:
        """Live ingest lost [start, end): a label with a minute missing there is `outage`."""
        if (start, end) not in self.outages:
            self.outages.append((start, end))

    def roll(self, ts_event: int, ratio: float) -> None:
        """The symbol's contract changed at `ts_event` (its bars from there on), priced `ratio`
        times the old one: the closes held, pending forecasts' and bars', are rescaled to it,
        so a label across the roll sees the market's move, not the calendar spread."""
        if self.rolled_at is not None and ts_event <= self.rolled_at:
            return
        self.rolled_at = ts_event
        self.pending = [f._replace(close=f.close * ratio) for f in self.pending]
        self.packed = [pack_forecast(f) for f in self.pending]
        self.bars = {ts: b._replace(close=b.close * ratio) for ts, b in self.bars.items()}

    def scored(self, scores: list[Score]) -> list[ScoreValue]:
        """What `add_bar` and `add_forecast` decided, scored (`score_decided`, in the order
        decided), into the rolling figures; the records returned."""
        for record, increments in scores:
            self.rolling.add(record, increments)
        return [record for record, _ in scores]

    def _decide(self) -> list[Decided]:
        """Forecasts whose labels are known now, to score (`score_decided`), then `scored`."""
        out: list[Decided] = []
        while self.pending and self.last_bar_ts is not None:
            forecast = self.pending[0]
            if self.last_bar_ts < forecast.ts_event + forecast.horizons[-1] * NS_PER_MIN:
                break  # forecasts are in ts order: no later one is decided either
            minutes = label_minutes(forecast)
            bars = tuple(self.bars.get(ts) for ts in minutes)
            lost = any(
                bar is None and start <= ts < end
                for ts, bar in zip(minutes, bars, strict=True)
                for start, end in self.outages
            )
            out.append(Decided(forecast, bars, lost))
            self.pending.pop(0)
            self.packed.pop(0)
        self._evict()
        return out

    def _evict(self) -> None:
        needed = min(
            self.pending[0].ts_event if self.pending else math.inf,
            self.last_forecast_ts if self.last_forecast_ts is not None else -math.inf,
        )
        # The bars to drop, found in one pass from the front (bars are held in ts order): a
        # dict's first key is found past the slots of every key deleted before it, so looking
        # it up again for each bar dropped costs as many steps as bars dropped lately.
        stale = list(itertools.takewhile(lambda ts: ts <= needed, self.bars))
        over = len(self.bars) - len(stale) - self.retention
        if over > 0:
            stale += itertools.islice(self.bars, len(stale), len(stale) + over)
            self.dropped_through = stale[-1]
        for ts in stale:
            del self.bars[ts]
        # An outage no label can reach any more: one before the oldest forecast pending, or
        # with none pending, before the newest forecast seen and before the bars dropped (a
        # forecast still to come is later than the one, and late if not later than the other).
        reach = needed
        if not self.pending and self.dropped_through is not None:
            reach = max(needed, self.dropped_through)
        if self.outages and reach != -math.inf:
            self.outages = [o for o in self.outages if o[1] > reach]

    def to_bytes(self) -> bytes:
        """STATE_FORMAT: a JSON header, then every float as a little-endian double (each
        pending forecast's close and quantiles, the bars' closes, the rolling sums)."""
        header = orjson.dumps({
            "window": self.window,
            "retention": self.retention,
            "pending": [head for head, _ in self.packed],
            "bars": [[b.ts_event, b.synthetic] for b in self.bars.values()],
            "last_bar_ts": self.last_bar_ts,
            "last_forecast_ts": self.last_forecast_ts,
            "dropped_through": self.dropped_through,
            "rolling": len(self.rolling.sums),
            "outages": self.outages,
            "rolled_at": self.rolled_at,
        })  # fmt: skip
        closes = [b.close for b in self.bars.values()]
        floats = struct.pack(f"<{len(closes)}d", *closes)
        sums = self.rolling.sums.astype("<f8").tobytes()
        return framed(STATE_FORMAT, header, *(values for _, values in self.packed), floats, sums)

    @classmethod
    def from_bytes(cls, data: bytes) -> SymbolScoring:
        if data[:1] == b"{":  # written before STATE_FORMAT: one JSON document
            values = orjson.loads(data)
            return cls.from_dict(
                values | {"pending": list(map(forecast_fields, values["pending"]))}
            )
        header, floats = unframed(data, STATE_FORMAT, "scoring state")
        pending = []
        for symbol, ts, horizons, model_id in header["pending"]:
            close, h = next(floats), len(horizons)
            q = [tuple(itertools.islice(floats, h)) for _ in QUANTILES]
            pending.append(ForecastFields(symbol, ts, close, tuple(horizons), model_id, *q))
        bars = [(ts, next(floats), synthetic) for ts, synthetic in header["bars"]]
        rolling = list(itertools.islice(floats, header["rolling"] * ROLLING_WIDTH))
        return cls.from_dict(header | {"pending": pending, "bars": bars, "rolling": rolling})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SymbolScoring:
        """From `to_bytes`' header with its floats in place (pending forecasts as
        `ForecastFields`)."""
        state = cls(
            window=values["window"],
            retention=values["retention"],
            pending=values["pending"],
            bars={ts: LabelBar(ts, close, synthetic) for ts, close, synthetic in values["bars"]},
            last_bar_ts=values["last_bar_ts"],
            last_forecast_ts=values["last_forecast_ts"],
            dropped_through=values["dropped_through"],
            outages=[tuple(span) for span in values.get("outages", [])],  # absent: from before
            rolled_at=values.get("rolled_at"),
        )
        rows = np.array(values["rolling"], dtype=float)
        state.rolling.sums = rows.reshape(-1, ROLLING_WIDTH)
        return state

    @classmethod
    def decoder(cls, window: int) -> Callable[[bytes], SymbolScoring]:
        """Decode a stored state with the rolling window of this worker's setting."""

        def decode(data: bytes) -> SymbolScoring:
            state = cls.from_bytes(data)
            state.window = state.rolling.window = window
            return state

        return decode


class Scorer:
    """Every symbol's scoring state in one process (offline runs, tests; the worker keeps each
    `SymbolScoring` in a store keyed by symbol instead: streams.runtime.stages.scores)."""

    def __init__(self, window: int = DEFAULT_WINDOW, retention: int = DEFAULT_RETENTION) -> None:
        self.window, self.retention = window, retention
        self.symbols: dict[str, SymbolScoring] = {}

    def state(self, symbol: str) -> SymbolScoring:
        if symbol not in self.symbols:
            self.symbols[symbol] = SymbolScoring(self.window, self.retention)
        return self.symbols[symbol]

    def on_bar(self, bar: dict[str, Any]) -> list[ScoreValue]:
        """A `bars.clean` value."""
        state = self.state(bar["symbol"])
        return state.scored(score_decided(state.add_bar(LabelBar.from_clean(bar))))

    def on_forecast(self, value: dict[str, Any]) -> list[ScoreValue]:
        """A `forecasts` value."""
        state = self.state(value["symbol"])
        return state.scored(score_decided(state.add_forecast(value)))


def pooled_figures(states: list[Rolling]) -> dict[tuple[int, str], float]:
    """Rolling figures over symbols, their weights pooled: (horizon, "coverage") and
    (horizon, quantile field) for pinball; horizons some symbol has scored."""
    out: dict[tuple[int, str], float] = {}
    horizons = max((len(r.sums) for r in states), default=0)
    for h in range(horizons):
        rows = [r.sums[h].tolist() for r in states if len(r.sums) > h]
        total = [math.fsum(column) for column in zip(*rows, strict=True)]
        out[(h + 1, "coverage")] = total[1] / total[0]
        for j, name in enumerate(QUANTILES):
            out[(h + 1, name)] = total[2 + j] / total[0]
    return out
