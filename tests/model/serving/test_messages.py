"""A micro-batch's `forecasts` values (model.serving.messages.forecast_values) are each
forecast's own: the quantiles as lists, the prices `close x exp(q)` to the bit, the request's
fields, in the order the schema encodes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.messages import forecast_values
from tests.checkpoints import make_checkpoint


def test_a_batchs_values_are_each_forecasts_own(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "ck")
    engine = ForecastEngine(tmp_path / "ck")
    rng = np.random.default_rng(0)
    shape = (5, engine.horizon, len(engine.quantiles))
    quantiles = np.sort(rng.normal(0.0, 1e-3, size=shape), axis=2).astype(np.float32)
    requests = [
        WindowRequest(f"S{i}", b"", 0, 0, np.empty(0), 60_000 * i, 5000.25 / (i + 1), 1_000 * i)
        for i in range(5)
    ]
    requests[2].raw_symbol = "ESZ4"
    values = forecast_values(engine, requests, quantiles, 7, 9_000)
    for request, q, value in zip(requests, quantiles, values, strict=True):
        returns = {name: q[:, j].astype(np.float64) for j, name in enumerate(("q10", "q50", "q90"))}
        expected = {"symbol": request.symbol}
        if request.raw_symbol is not None:
            expected["raw_symbol"] = request.raw_symbol
        horizons = list(range(1, engine.horizon + 1))
        expected |= {"ts_event": request.ts_event, "close": request.close, "horizons": horizons}
        for name, r in returns.items():
            expected[name] = r.tolist()
            expected["price_" + name] = (request.close * np.exp(r)).tolist()
        expected |= {
            "model_id": engine.model_id,
            "fingerprint": engine.fingerprint,
            "batch_size": 7,
            "latency_ms": (9_000 - request.received_ns) / 1e6,
            "source": "model",
        }
        assert list(value.items()) == list(expected.items())
