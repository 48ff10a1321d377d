"""The worker's forecasts computed offline from a history of raw bars, exactly.

The same corrections, feature engine, window rule and batch-invariant inference the streaming
worker runs, in one process: the reference the end-to-end tests hold the worker to, and a way
to backtest a checkpoint on history without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from features import engine as feature_engine
from features.bars import PRICE_SCALE, engine_columns
from features.corrections import correct_history
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.messages import forecast_value

Key = tuple[str, int]  # (symbol, ts_event)
DELIVERY = ("batch_size", "latency_ms")  # a `forecasts` value's fields of one delivery


def clean_history(values: Iterable[bytes | dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`bars.clean` values per symbol, in order (corrections with the default config)."""
    by_symbol: dict[str, list[dict[str, Any]]] = {}
    for bar in correct_history(values).clean:
        by_symbol.setdefault(bar["symbol"], []).append(bar)
    return by_symbol


def window_requests(symbol: str, bars: list[dict[str, Any]], lookback: int) -> list[WindowRequest]:
    """One request per real bar whose window holds `lookback` warm feature rows: the rule the
    forecast agent applies."""
    columns = engine_columns(bars)
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
    for symbol, bars in clean_history(values).items():
        requests = window_requests(symbol, bars, engine.lookback)
        for start in range(0, len(requests), batch):
            chunk = requests[start : start + batch]
            for request, quantiles in zip(chunk, engine.predict(chunk), strict=True):
                out[(symbol, request.ts_event)] = quantiles
    return out


def forecast_values(
    forecasts: dict[Key, np.ndarray], clean: dict[str, list[dict[str, Any]]], engine: ForecastEngine
) -> list[dict[str, Any]]:
    """The `forecasts` values of `forecast_history`'s quantiles, in key order, the closes from
    `clean_history`'s bars, without the fields that describe one delivery (`DELIVERY`)."""
    bars = {(s, bar["ts_event"]): bar for s in clean for bar in clean[s]}
    out = []
    for (symbol, ts), quantiles in sorted(forecasts.items()):
        bar = bars[symbol, ts]
        close, raw = bar["close"] * PRICE_SCALE, bar.get("raw_symbol")
        request = WindowRequest(symbol, symbol.encode(), 0, 0, np.empty(0), ts, close, 0, raw)
        value = forecast_value(engine, request, quantiles, 0, 0)
        out.append({name: v for name, v in value.items() if name not in DELIVERY})
    return out
