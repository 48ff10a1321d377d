"""A canary's forecasts, made after the forecasts a trader waits for.

A canary (streams.runtime.stages.serving) forecasts beside the serving checkpoint, to
`forecasts.shadow`, where nobody waits on them. So in a burst a window-encoder canary's
forecasts of a micro-batch's requests wait here while the serving checkpoint forecasts the next
batches, and run in the inference thread in the quiet after it (the checkpoint's drain), before a
verdict (its sync), before a batch of a later minute is scored (whose bars could decide a
forecast still waiting for its canary's), or once `limit` requests wait. Each symbol's are then
calibrated and scored in the order of its forecasts, with the scores its forecasts were made
with (streams.runtime.stages.scores): they are the same as made beside the serving checkpoint's.
A stream-encoder canary forecasts beside it still: its streams are stored with the serving
checkpoint's, as of each request's row (stages/carried.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from model.serving.messages import groups

if TYPE_CHECKING:
    from model.serving.forecast_engine import ForecastEngine, WindowRequest


class Plan(NamedTuple):
    """Which engines a batch's requests go to: the serving one's, the canary's beside it
    (None: none) and the canary's that forecasts them later (stages/canary_queue.py)."""

    engines: list[ForecastEngine]
    canaries: list[ForecastEngine | None]
    later: list[ForecastEngine | None]

    @property
    def per_request(self) -> list[tuple[ForecastEngine | None, ...]]:
        return list(zip(self.engines, self.canaries, strict=True))


class CanaryQueue:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.requests: list[WindowRequest] = []
        self.engines: list[ForecastEngine] = []  # each request's canary

    def __len__(self) -> int:
        return len(self.requests)

    def add(
        self, batch: Sequence[WindowRequest], canaries: Sequence[ForecastEngine | None]
    ) -> None:
        """The requests of `batch` a canary forecasts later (None: none), once their own
        forecasts are scored."""
        for request, canary in zip(batch, canaries, strict=True):
            if canary is not None:
                self.requests.append(request)
                self.engines.append(canary)

    def due(self, batch: Sequence[WindowRequest]) -> bool:
        """Whether the waiting forecasts run before `batch` is scored: it forecasts a later
        minute than one of them (whose bars could decide it), or too many wait."""
        if not self.requests:
            return False
        later = max(r.ts_event for r in batch) > min(r.ts_event for r in self.requests)
        return later or len(self.requests) >= self.limit

    def take(self, n: int) -> tuple[list[WindowRequest], list[ForecastEngine]]:
        """The `n` oldest waiting requests and their canaries."""
        requests, self.requests = self.requests[:n], self.requests[n:]
        engines, self.engines = self.engines[:n], self.engines[n:]
        return requests, engines


def predict_each(
    batch: list[WindowRequest], engines: Sequence[ForecastEngine | None], incremental: bool
) -> list[np.ndarray | None]:
    """In the inference thread: each request's quantiles by the engine at its place (None:
    none), each engine's requests forecast together."""
    out: list[np.ndarray | None] = [None] * len(batch)
    for engine, rows in groups(engines):
        forecast = engine.predict([batch[i] for i in rows], incremental)
        for i, q in zip(rows, forecast, strict=True):
            out[i] = q
    return out
