"""The `forecasts` topic value (quantiles as cumulative log returns and as prices) and the
`forecasts.explain` one (model.serving.explain says what explains a forecast)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from model.serving.explain import SCHEMA_VERSION
from model.serving.skill import MODEL

if TYPE_CHECKING:
    from model.serving.forecast_engine import ForecastEngine, WindowRequest


def quantile_name(q: float) -> str:
    return f"q{round(q * 100):02d}"


def forecast_value(
    engine: ForecastEngine,
    request: WindowRequest,
    quantiles: np.ndarray,
    batch_size: int,
    now_ns: int,
) -> dict[str, Any]:
    """quantiles `(horizon, n_quantiles)` of the cumulative log return of the close."""
    return forecast_values(engine, [request], np.asarray(quantiles)[None], batch_size, now_ns)[0]


def forecast_values(
    engine: ForecastEngine,
    requests: Sequence[WindowRequest],
    quantiles: np.ndarray,
    batch_size: int,
    now_ns: int,
) -> list[dict[str, Any]]:
    """`forecast_value` of each request, from quantiles `(B, horizon, n_quantiles)`: the
    prices and the lists of a whole micro-batch in a few numpy calls, not a few per forecast
    on the event loop."""
    closes = np.array([r.close for r in requests], dtype=np.float64)
    # contiguous, as one forecast's own column is: numpy picks its exp loop by layout
    log_returns = np.ascontiguousarray(np.asarray(quantiles).transpose(0, 2, 1), np.float64)
    prices = (closes[:, None, None] * np.exp(log_returns)).tolist()
    names = [quantile_name(q) for q in engine.quantiles]
    horizons = range(1, engine.horizon + 1)
    model_id, fingerprint = engine.model_id, engine.fingerprint
    values = []
    for request, returns, price in zip(requests, log_returns.tolist(), prices, strict=True):
        value: dict[str, Any] = {"symbol": request.symbol}
        if request.raw_symbol is not None:
            value["raw_symbol"] = request.raw_symbol
        value |= {"ts_event": request.ts_event, "close": request.close, "horizons": list(horizons)}
        for name, r, p in zip(names, returns, price, strict=True):
            value[name], value["price_" + name] = r, p
        value.update(
            model_id=model_id,
            fingerprint=fingerprint,
            batch_size=batch_size,
            latency_ms=(now_ns - request.received_ns) / 1e6,
            source=MODEL,  # or a shadow baseline's name, where it serves (model.serving.shadow)
        )
        values.append(value)
    return values


def groups(engines: Sequence[ForecastEngine | None]) -> list[tuple[ForecastEngine, list[int]]]:
    """Each engine of `engines` (None: none) with the indices it stands at, in order."""
    out: dict[int, tuple[ForecastEngine, list[int]]] = {}
    for i, engine in enumerate(engines):
        if engine is not None:
            out.setdefault(id(engine), (engine, []))[1].append(i)
    return list(out.values())


def values_of(
    batch: list[WindowRequest],
    engines: Sequence[ForecastEngine | None],
    quantiles: Sequence[np.ndarray | None],
    now_ns: int,
) -> list[Any]:
    """The `forecasts` value of each request from the engine at its place (None: none), each
    engine's built at once."""
    values: list[Any] = [None] * len(batch)
    for engine, rows in groups(engines):
        part = [batch[i] for i in rows]
        stacked = np.stack([quantiles[i] for i in rows])
        built = forecast_values(engine, part, stacked, len(batch), now_ns)
        for i, value in zip(rows, built, strict=True):
            values[i] = value
    return values


def explanation_value(
    engine: ForecastEngine, request: WindowRequest, explanation: dict[str, Any]
) -> dict[str, Any]:
    """The `forecasts.explain` value: the forecast's identity (as on `forecasts`), then what
    explains it."""
    return {
        "symbol": request.symbol,
        "ts_event": request.ts_event,
        "model_id": engine.model_id,
        "fingerprint": engine.fingerprint,
        "schema_version": SCHEMA_VERSION,
        **explanation,
    }
