"""The `forecasts` topic value (quantiles as cumulative log returns and as prices) and the
`forecasts.explain` one (model.serving.explain says what explains a forecast)."""

from __future__ import annotations

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
    value: dict[str, Any] = {"symbol": request.symbol}
    if request.raw_symbol is not None:
        value["raw_symbol"] = request.raw_symbol
    value |= {
        "ts_event": request.ts_event,
        "close": request.close,
        "horizons": list(range(1, engine.horizon + 1)),
    }
    for j, q in enumerate(engine.quantiles):
        log_returns = quantiles[:, j].astype(np.float64)
        value[quantile_name(q)] = log_returns.tolist()
        value["price_" + quantile_name(q)] = (request.close * np.exp(log_returns)).tolist()
    value.update(
        model_id=engine.model_id,
        fingerprint=engine.fingerprint,
        batch_size=batch_size,
        latency_ms=(now_ns - request.received_ns) / 1e6,
        source=MODEL,  # or a shadow baseline's name, where it serves (model.serving.shadow)
    )
    return value


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
