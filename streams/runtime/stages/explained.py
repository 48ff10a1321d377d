"""The records of `forecasts.explain`: each forecast's explanation, published beside it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.messages import explanation_value
from streams.runtime.records import Out
from streams.schema import BAR_HEADERS, encode_explanation


def explain_records(
    engine: ForecastEngine,
    batch: Sequence[WindowRequest],
    explanations: Sequence[dict[str, Any]],
    topic: str,
) -> list[Out]:
    """A micro-batch's explanation records (from `predict_explained`; none without), to
    publish next to its forecasts: same key, partition and timestamp as each forecast's record."""
    if not explanations:
        return []
    return [
        Out(
            topic,
            request.key,
            encode_explanation(explanation_value(engine, request, explanation)),
            request.ts_event / 1e6,
            BAR_HEADERS,
            request.partition,
        )
        for request, explanation in zip(batch, explanations, strict=True)
    ]
