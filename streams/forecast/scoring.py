"""The scoring stage: each published forecast against the `bars.clean` bars of its horizons.

Pure: no Faust, no Kafka. A forecast of bar t (its `ts_event`) waits until the symbol's bars
have passed t + H minutes; then it is decided with the training label rules (`model.dataset`):
the label at horizon k is log(close[t+k] / close[t]); a label with a minute missing (a session
break the corrections did not fill, `forward_returns`' NaN) is not scored, nor one over a gap
fill (`labels_over_gap_fills`: no trade moved the price there). A forecast is decided only once
every bar of its label is known, so its record is a function of the forecast and those bars
alone, never of how the two topics interleaved: `score_offline` recomputes every record.

Per symbol, bars are kept only while a forecast may still need them (newer than the oldest
pending forecast and than the newest forecast seen: forecasts of a symbol arrive in order), up
to `retention` bars; a forecast whose bars were dropped is recorded as `late`. Rolling figures are
exponentially weighted means with weight (1 - 1/window)^age (mean age about `window` scored
forecasts): a handful of floats per horizon in the durable store instead of the last `window`
scores. Every state round-trips exactly through `to_bytes` / `from_bytes` (orjson writes the
shortest float repr that reads back to the same double).

What a state holds for minutes (pending forecasts, bars) is tuples of numbers, not dicts and
lists: the garbage collector stops tracking such a tuple once it has seen it, while each list or
dict that outlives a young generation is promoted and rescanned by every full collection, and a
thousand symbols a minute of them set off full collections in the middle of a burst.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, TypedDict

import numpy as np
import orjson
from prometheus_client import CollectorRegistry, Gauge

from model.covariates import NS_PER_MIN
from model.metrics import pinball_losses
from streams.schema import PRICE_SCALE

QUANTILES = {"q10": 0.1, "q50": 0.5, "q90": 0.9}  # the `forecasts` value's quantile fields
LOWER, UPPER = "q10", "q90"  # the 80 % interval
_LOWER, _UPPER = list(QUANTILES).index(LOWER), list(QUANTILES).index(UPPER)
DEFAULT_WINDOW = 240  # scored forecasts: four hours of one symbol's minutes
DEFAULT_RETENTION = 1440  # bars held per symbol for forecasts not yet seen: a day of minutes


class Unscored(StrEnum):
    """Why a forecast got no score."""

    SESSION_BREAK = "session_break"  # a minute of the label has no bar: the session ended
    GAP_FILL = "gap_fill"  # a bar of the label is a synthetic gap fill
    LATE = "late"  # the forecast came after its label's bars left the retention


class ScoreValue(TypedDict):
    """The `forecasts.scores` value (key = symbol); the metric fields are null when unscored."""

    symbol: str
    ts_event: int
    model_id: str
    horizons: list[int]
    unscored: str | None
    realized: list[float] | None  # log(close[t+k] / close[t]) per horizon
    pinball: dict[str, list[float]] | None  # per quantile field, per horizon (log-return units)
    inside: list[bool] | None  # q10 <= realized <= q90
    below_q10: list[bool] | None
    above_q90: list[bool] | None


def encode_score(value: ScoreValue) -> bytes:
    return orjson.dumps(value)


def decode_score(data: bytes) -> ScoreValue:
    value = orjson.loads(data)
    missing = set(ScoreValue.__annotations__) - set(value)
    if missing:
        raise ValueError(f"forecasts.scores record lacks {sorted(missing)}: {data[:200]!r}")
    return value  # type: ignore[no-any-return]


class LabelBar(NamedTuple):
    """What a label needs of a `bars.clean` bar: its close as the feature engine sees it."""

    ts_event: int
    close: float
    synthetic: bool

    @classmethod
    def from_clean(cls, bar: dict[str, Any]) -> LabelBar:
        return cls(int(bar["ts_event"]), bar["close"] * PRICE_SCALE, bar["status"] == "synthetic")


class Forecast(NamedTuple):
    """The fields of a `forecasts` value a score needs (what a pending forecast keeps)."""

    symbol: str
    ts_event: int
    close: float
    horizons: tuple[int, ...]
    model_id: str
    q10: tuple[float, ...]
    q50: tuple[float, ...]
    q90: tuple[float, ...]


def forecast_fields(value: dict[str, Any]) -> Forecast:
    """What a score needs of a `forecasts` value (or of a stored pending forecast)."""
    missing = {"symbol", "ts_event", "close", "horizons", "model_id", *QUANTILES} - set(value)
    if missing:
        raise ValueError(
            f"forecasts value of {value.get('symbol')!r} at {value.get('ts_event')!r} lacks "
            f"{sorted(missing)}; the scoring stage reads the README's `forecasts` fields"
        )
    # Plain Python numbers, so the pending forecast serializes as it came off the topic.
    q10, q50, q90 = (tuple(map(float, value[name])) for name in QUANTILES)
    return Forecast(
        value["symbol"],
        int(value["ts_event"]),
        float(value["close"]),
        tuple(map(int, value["horizons"])),
        value["model_id"],
        q10,
        q50,
        q90,
    )


def unscored(forecast: Forecast, reason: Unscored) -> ScoreValue:
    return ScoreValue(
        symbol=forecast.symbol,
        ts_event=forecast.ts_event,
        model_id=forecast.model_id,
        horizons=list(forecast.horizons),
        unscored=reason.value,
        realized=None,
        pinball=None,
        inside=None,
        below_q10=None,
        above_q90=None,
    )


class Decided(NamedTuple):
    """A forecast whose label is known: its bars at t+1..t+H minutes (None: no bar that minute),
    or None if they left the retention before it came."""

    forecast: Forecast
    bars: tuple[LabelBar | None, ...] | None


def score_all(decided: list[Decided]) -> list[ScoreValue]:
    """The records of decided forecasts, in order; those with a whole label are scored in one
    numpy pass per horizon count (a record per forecast in Python is what a burst of a thousand
    symbols pays for), with the training labels' logarithms (`forward_returns`) and the training
    metric's pinball (`model.metrics.pinball_losses`): a forecast's record does not depend on
    the others scored with it."""
    records: list[ScoreValue | None] = [None] * len(decided)
    whole: dict[int, list[int]] = {}  # horizons -> indices of forecasts with a whole label
    for i, (forecast, bars) in enumerate(decided):
        if bars is None:
            records[i] = unscored(forecast, Unscored.LATE)
        elif None in bars:
            records[i] = unscored(forecast, Unscored.SESSION_BREAK)
        elif True in [b.synthetic for b in bars]:  # type: ignore[union-attr]
            records[i] = unscored(forecast, Unscored.GAP_FILL)
        else:
            whole.setdefault(len(bars), []).append(i)
    for indices in whole.values():
        for i, record in zip(indices, _scored([decided[i] for i in indices]), strict=True):
            records[i] = record
    return records  # type: ignore[return-value]


def _scored(decided: list[Decided]) -> list[ScoreValue]:
    """Records of forecasts with whole labels of one length."""
    closes = np.array([[f.close, *[b.close for b in bars]] for f, bars in decided])  # type: ignore[union-attr]
    logs = np.log(closes)
    y = logs[:, 1:] - logs[:, :1]
    q = np.array([f.q10 + f.q50 + f.q90 for f, _ in decided])  # QUANTILES' order
    q = q.reshape(len(decided), len(QUANTILES), -1).swapaxes(1, 2)
    losses = pinball_losses(y, q, tuple(QUANTILES.values())).swapaxes(1, 2).tolist()
    below, above = y < q[..., _LOWER], y > q[..., _UPPER]
    inside = (~(below | above)).tolist()
    return [
        {
            "symbol": f.symbol,
            "ts_event": f.ts_event,
            "model_id": f.model_id,
            "horizons": list(f.horizons),
            "unscored": None,
            "realized": realized,
            "pinball": dict(zip(QUANTILES, loss, strict=True)),
            "inside": covered,
            "below_q10": low,
            "above_q90": high,
        }
        for (f, _), realized, loss, covered, low, high in zip(
            decided, y.tolist(), losses, inside, below.tolist(), above.tolist(), strict=True
        )
    ]


def label_minutes(forecast: Forecast) -> list[int]:
    return [forecast.ts_event + h * NS_PER_MIN for h in forecast.horizons]


@dataclass
class Rolling:
    """Exponentially weighted means of coverage and pinball per horizon (index = horizon - 1):
    `sums[h]` = [weight, inside, pinball per quantile...] each decayed by (1 - 1/window)."""

    window: int = DEFAULT_WINDOW
    sums: list[list[float]] = field(default_factory=list)

    def add(self, record: ScoreValue) -> None:
        if record["unscored"] is not None:
            return
        inside, losses = record["inside"] or [], record["pinball"] or {}
        keep, columns = 1.0 - 1.0 / self.window, [losses[name] for name in QUANTILES]
        for h, covered in enumerate(inside):
            if h == len(self.sums):
                self.sums.append([0.0] * (2 + len(QUANTILES)))
            sums = self.sums[h]
            sums[0] = keep * sums[0] + 1.0
            sums[1] = keep * sums[1] + float(covered)
            for j, column in enumerate(columns, start=2):
                sums[j] = keep * sums[j] + column[h]


@dataclass
class SymbolScoring:
    """One symbol's scoring state: pending forecasts, recent bars and rolling figures."""

    window: int = DEFAULT_WINDOW
    retention: int = DEFAULT_RETENTION
    pending: list[Forecast] = field(default_factory=list)  # ts order
    # Each pending forecast's JSON, encoded once: a forecast stays pending for H minutes, and
    # every checkpoint between re-encodes the state.
    encoded: list[orjson.Fragment] = field(default_factory=list, compare=False, repr=False)
    bars: dict[int, LabelBar] = field(default_factory=dict)
    last_bar_ts: int | None = None
    last_forecast_ts: int | None = None
    dropped_through: int | None = None  # newest bar ts dropped by the retention
    rolling: Rolling = field(default_factory=Rolling)

    def __post_init__(self) -> None:
        self.rolling.window = self.window
        if len(self.encoded) != len(self.pending):
            self.encoded = [orjson.Fragment(orjson.dumps(f._asdict())) for f in self.pending]

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
        self.encoded.append(orjson.Fragment(orjson.dumps(forecast._asdict())))
        return self._decide()

    def scored(self, records: list[ScoreValue]) -> list[ScoreValue]:
        """The records of what `add_bar` and `add_forecast` decided (`score_all`, in the
        order decided) into the rolling figures; returned."""
        for record in records:
            self.rolling.add(record)
        return records

    def _decide(self) -> list[Decided]:
        """Forecasts whose labels are known now, to score (`score_all`) and hand to `scored`."""
        out: list[Decided] = []
        while self.pending and self.last_bar_ts is not None:
            forecast = self.pending[0]
            minutes = label_minutes(forecast)
            if self.last_bar_ts < minutes[-1]:
                break  # forecasts are in ts order: no later one is decided either
            out.append(Decided(forecast, tuple(self.bars.get(ts) for ts in minutes)))
            self.pending.pop(0)
            self.encoded.pop(0)
        self._evict()
        return out

    def _evict(self) -> None:
        needed = min(
            self.pending[0].ts_event if self.pending else math.inf,
            self.last_forecast_ts if self.last_forecast_ts is not None else -math.inf,
        )
        while self.bars and next(iter(self.bars)) <= needed:  # bars are held in ts order
            del self.bars[next(iter(self.bars))]
        while len(self.bars) > self.retention:
            self.dropped_through = next(iter(self.bars))
            del self.bars[self.dropped_through]

    def to_bytes(self) -> bytes:
        return orjson.dumps({
            "window": self.window,
            "retention": self.retention,
            "pending": self.encoded,
            "bars": [[b.ts_event, b.close, b.synthetic] for b in self.bars.values()],
            "last_bar_ts": self.last_bar_ts,
            "last_forecast_ts": self.last_forecast_ts,
            "dropped_through": self.dropped_through,
            "rolling": self.rolling.sums,
        })  # fmt: skip

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SymbolScoring:
        state = cls(
            window=values["window"],
            retention=values["retention"],
            pending=[forecast_fields(f) for f in values["pending"]],
            bars={ts: LabelBar(ts, close, synthetic) for ts, close, synthetic in values["bars"]},
            last_bar_ts=values["last_bar_ts"],
            last_forecast_ts=values["last_forecast_ts"],
            dropped_through=values["dropped_through"],
        )
        state.rolling.sums = values["rolling"]
        return state

    @classmethod
    def from_bytes(cls, data: bytes) -> SymbolScoring:
        return cls.from_dict(orjson.loads(data))

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
        return state.scored(score_all(state.add_bar(LabelBar.from_clean(bar))))

    def on_forecast(self, value: dict[str, Any]) -> list[ScoreValue]:
        """A `forecasts` value."""
        state = self.state(value["symbol"])
        return state.scored(score_all(state.add_forecast(value)))


def score_offline(
    forecasts: list[dict[str, Any]], clean_bars: list[dict[str, Any]]
) -> dict[tuple[str, int], ScoreValue]:
    """Every record the scoring stage publishes for these `forecasts` and `bars.clean` values,
    by (symbol, ts_event), from the whole histories at once; a forecast whose label runs past
    the last bar is not decided yet, as in the stream."""
    bars: dict[str, dict[int, LabelBar]] = {}
    for value in clean_bars:
        bar = LabelBar.from_clean(value)
        bars.setdefault(value["symbol"], {}).setdefault(bar.ts_event, bar)
    decided: dict[tuple[str, int], Decided] = {}
    for value in forecasts:
        forecast = forecast_fields(value)
        key = (forecast.symbol, forecast.ts_event)
        known = bars.get(key[0], {})
        minutes = label_minutes(forecast)
        if key not in decided and known and max(known) >= minutes[-1]:
            decided[key] = Decided(forecast, tuple(known.get(ts) for ts in minutes))
    return dict(zip(decided, score_all(list(decided.values())), strict=True))


def pooled_figures(states: list[Rolling]) -> dict[tuple[int, str], float]:
    """Rolling figures over symbols, their weights pooled: (horizon, "coverage") and
    (horizon, quantile field) for pinball; horizons some symbol has scored."""
    out: dict[tuple[int, str], float] = {}
    horizons = max((len(r.sums) for r in states), default=0)
    for h in range(horizons):
        rows = [r.sums[h] for r in states if len(r.sums) > h]
        total = [math.fsum(column) for column in zip(*rows, strict=True)]
        out[(h + 1, "coverage")] = total[1] / total[0]
        for j, name in enumerate(QUANTILES):
            out[(h + 1, name)] = total[2 + j] / total[0]
    return out


class ScoringMetrics:
    """`barcast_forecast_coverage{horizon}` and `barcast_forecast_pinball{horizon,quantile}` in
    the worker's registry (`streams.metrics.Metrics.registry`); `set` them from
    `pooled_figures` of the symbols the worker holds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.coverage = Gauge(
            "barcast_forecast_coverage",
            "Rolling share of scored forecasts inside their 80 % interval (q10..q90).",
            ["horizon"],
            registry=registry,
        )
        self.pinball = Gauge(
            "barcast_forecast_pinball",
            "Rolling mean pinball loss of scored forecasts (log-return units).",
            ["horizon", "quantile"],
            registry=registry,
        )

    def set(self, figures: dict[tuple[int, str], float]) -> None:
        for (horizon, name), figure in figures.items():
            if name == "coverage":
                self.coverage.labels(horizon=str(horizon)).set(figure)
            else:
                self.pinball.labels(horizon=str(horizon), quantile=name).set(figure)
