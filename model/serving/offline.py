"""The worker's forecasts computed offline from a history of raw bars, exactly.

The same corrections, feature engine, window rule and batch-invariant inference the streaming
worker runs, in one process: the reference the end-to-end tests hold the worker to, and a way
to backtest a checkpoint on history without a broker; `served_history` adds the worker's
scoring, online calibration and shadow baselines, and so what it publishes. A continuous
symbol's bars after a roll are fed at the price level of before it, as the feature stage feeds
them, and the labels held across it rescaled as the scores stage rescales them
(`SymbolBars.rolls`). A history in which a symbol expires (BARCAST_EXPIRE_DAYS: a
partition's bars weeks past its last) is not one: the worker starts that symbol anew at its
expiry, this module never does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from features import engine as feature_engine
from features.bars import PRICE_SCALE, engine_columns
from features.corrections import CorrectionStats, Roll, correct_steps
from model.serving.conformal import CalibrationConfig, SymbolCalibration
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.messages import forecast_value
from model.serving.scoring import Decided, LabelBar, ScoreValue, score_all
from model.serving.scoring_state import SymbolScoring
from model.serving.shadow import DEFAULT_WINDOW, Columns, Pending, SymbolShadow, columns_of
from model.serving.skill import ServeMode

Key = tuple[str, int]  # (symbol, ts_event)
DELIVERY = ("batch_size", "latency_ms")  # a `forecasts` value's fields of one delivery


@dataclass(slots=True)
class SymbolBars:
    """A symbol's `bars.clean` values in order, and its contract's rolls, each with the index
    of the first bar after it (where the corrections stage sends its ROLL record)."""

    bars: list[dict[str, Any]] = field(default_factory=list)
    rolls: list[tuple[int, Roll]] = field(default_factory=list)

    def columns(self) -> tuple[np.ndarray, ...]:
        """The feature engine's input, fed as the feature stage feeds it."""
        return engine_columns(self.bars, [(at, roll.ratio) for at, roll in self.rolls])


def clean_history(values: Iterable[bytes | dict[str, Any]]) -> dict[str, SymbolBars]:
    """Each symbol's `bars.clean` values and rolls (corrections with the default config)."""
    by_symbol: dict[str, SymbolBars] = {}
    for step in correct_steps(values, None, CorrectionStats(), {}):
        if step.roll is not None:
            clean = by_symbol.setdefault(step.roll.symbol, SymbolBars())
            clean.rolls.append((len(clean.bars) + step.roll.at, step.roll))
        for bar in step.clean:
            by_symbol.setdefault(bar["symbol"], SymbolBars()).bars.append(bar)
    return by_symbol


def window_requests(symbol: str, clean: SymbolBars, lookback: int) -> list[WindowRequest]:
    """One request per real bar whose window holds `lookback` warm feature rows: the rule the
    forecast agent applies."""
    bars, columns = clean.bars, clean.columns()
    values, warm = feature_engine.compute_batch(*columns)
    synthetic = columns[-1]
    requests = []
    for i in range(lookback - 1, len(bars)):
        if synthetic[i] or not warm[i - lookback + 1 : i + 1].all():
            continue
        requests.append(
            WindowRequest(
                symbol=symbol,
                key=symbol.encode(),
                partition=0,
                count=i + 1,
                values=values[i - lookback + 1 : i + 1],
                ts_event=int(bars[i]["ts_event"]),
                close=bars[i]["close"] * PRICE_SCALE,
                received_ns=0,
                raw_symbol=bars[i].get("raw_symbol"),
            )
        )
    return requests


def forecast_history(
    values: Iterable[bytes | dict[str, Any]], engine: ForecastEngine, batch: int = 256
) -> dict[Key, np.ndarray]:
    """Quantiles `(horizon, n_quantiles)` of every bar the worker would forecast."""
    out: dict[Key, np.ndarray] = {}
    for symbol, clean in clean_history(values).items():
        requests = window_requests(symbol, clean, engine.lookback)
        for start in range(0, len(requests), batch):
            chunk = requests[start : start + batch]
            for request, quantiles in zip(chunk, engine.predict(chunk), strict=True):
                out[(symbol, request.ts_event)] = quantiles
    return out


def forecast_values(
    forecasts: dict[Key, np.ndarray], clean: dict[str, SymbolBars], engine: ForecastEngine
) -> list[dict[str, Any]]:
    """The `forecasts` values of `forecast_history`'s quantiles, in key order, the closes from
    `clean_history`'s bars, without the fields that describe one delivery (`DELIVERY`)."""
    bars = {(s, bar["ts_event"]): bar for s in clean for bar in clean[s].bars}
    out = []
    for (symbol, ts), quantiles in sorted(forecasts.items()):
        bar = bars[symbol, ts]
        close, raw = bar["close"] * PRICE_SCALE, bar.get("raw_symbol")
        request = WindowRequest(symbol, symbol.encode(), 0, 0, np.empty(0), ts, close, 0, raw)
        value = forecast_value(engine, request, quantiles, 0, 0)
        out.append({name: v for name, v in value.items() if name not in DELIVERY})
    return out


def served_history(
    values: Iterable[bytes | dict[str, Any]],
    engine: ForecastEngine,
    config: CalibrationConfig | None = None,
    mode: ServeMode = ServeMode.AUTO,
    window: int = DEFAULT_WINDOW,
) -> tuple[list[dict[str, Any]], dict[Key, ScoreValue]]:
    """What the worker with shadow baselines publishes for this history: every `forecasts`
    value (the model's or a baseline's, calibrated; without `DELIVERY`'s fields), in key order,
    and every `forecasts.scores` value by key, from the whole history in one process. Per
    symbol, in the worker's order: each row into the baselines' EWMAs; the forecast of bar t
    calibrated and chosen with every score the bars before t decided; then bar t, then that
    forecast into the scoring state, and what they decide scored."""
    config = config or CalibrationConfig()
    model = forecast_history(values, engine)
    published: list[dict[str, Any]] = []
    scores: dict[Key, ScoreValue] = {}
    for symbol, clean in clean_history(values).items():
        requests = {r.ts_event: r for r in window_requests(symbol, clean, engine.lookback)}
        state = _SymbolReplay(engine, config, mode, window)
        for request, raw in state.baselines(clean, list(requests.values())):
            requests[request.ts_event] = request
            state.raw[request.ts_event] = raw
        rolls: dict[int, list[Roll]] = {}
        for at, roll in clean.rolls:
            rolls.setdefault(at, []).append(roll)
        for i, bar in enumerate(clean.bars):
            for roll in rolls.get(i, ()):  # the ROLL records before the bar
                state.scoring.roll(roll.ts, roll.ratio)
            ts = int(bar["ts_event"])
            if ts in requests:
                value = forecast_value(engine, requests[ts], model[(symbol, ts)], 0, 0)
                value = {name: v for name, v in value.items() if name not in DELIVERY}
                published.append(state.forecast(value))
            scores |= state.bar(LabelBar.from_clean(bar), ts in requests)
    return sorted(published, key=lambda v: (v["symbol"], v["ts_event"])), scores


class _SymbolReplay:
    """One symbol's scoring, calibration and shadow states, stepped as the worker steps them."""

    def __init__(
        self, engine: ForecastEngine, config: CalibrationConfig, mode: ServeMode, window: int
    ) -> None:
        self.engine, self.config, self.mode = engine, config, mode
        self.scoring, self.calibration = SymbolScoring(window), SymbolCalibration()
        self.shadow = SymbolShadow(window)
        self.raw: dict[int, dict[str, Columns]] = {}
        self.waiting: tuple[dict[str, Any], Pending] | None = None

    def baselines(
        self, clean: SymbolBars, requests: list[WindowRequest]
    ) -> Iterable[tuple[WindowRequest, dict[str, Columns]]]:
        """Every row into the EWMAs; the requests with their variances, and each one's baselines."""
        engine, by_ts = self.engine, {r.ts_event: r for r in requests}
        values, _ = feature_engine.compute_batch(*clean.columns())
        for bar, row in zip(clean.bars, values, strict=True):
            ts = int(bar["ts_event"])
            variances = self.shadow.row(engine.served.baselines, engine.model_id, ts, row)
            if ts in by_ts:
                by_ts[ts].variances = variances
        for start in range(0, len(requests), 256):
            chunk = requests[start : start + 256]
            yield from zip(chunk, columns_of(engine.shadow(chunk)), strict=True)

    def forecast(self, value: dict[str, Any]) -> dict[str, Any]:
        calibrated = self.calibration.apply(value, self.config)
        raw = self.raw.pop(int(value["ts_event"]))
        out, pending = self.shadow.forecast(calibrated, raw, self.config, self.mode)
        self.waiting = calibrated, pending
        return out

    def bar(self, bar: LabelBar, requested: bool) -> dict[Key, ScoreValue]:
        decided = self.scoring.add_bar(bar)
        out = self._score(decided)
        if requested:
            assert self.waiting is not None
            (value, pending), self.waiting = self.waiting, None
            last = self.scoring.last_forecast_ts
            decided = self.scoring.add_forecast(value)
            if self.scoring.last_forecast_ts != last:
                self.shadow.pending.append(pending)
            out |= self._score(decided)
        return out

    def _score(self, decided: list[Decided]) -> dict[Key, ScoreValue]:
        out = {}
        for d, record in zip(decided, score_all(decided), strict=True):
            pending, baselines = self.shadow.decided(d)
            calibrating = self.config.enabled
            if calibrating:
                self.calibration.update(record)
            self.shadow.scored(
                record, pending, score_all(baselines), self.mode, calibrating=calibrating
            )
            out[(record["symbol"], record["ts_event"])] = record
        return out
