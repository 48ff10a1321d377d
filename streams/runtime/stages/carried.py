"""A stream-encoder checkpoint's per-symbol streams (model.serving.streaming) in the stream
store, so that a restarted worker carries each symbol's stream on from the last commit, as a
worker never stopped does, instead of starting it again from the symbol's window (which forecasts
otherwise). Each symbol's entry holds the streams of the models that forecast its newest request
(the serving checkpoint and a canary beside it), by model id: a stream of another model (one
served before a swap) is never resumed, and its symbol's stream starts again from the window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from model.serving.forecast_engine import ForecastEngine, WindowRequest
    from streams.runtime.stores import Streams, StreamStore

Engines = Sequence[Sequence["ForecastEngine | None"]]  # per request: the engines forecasting it


class Carried:
    """The forecast stage's stream store: streams resumed from it before a batch's inference,
    and each batch's streams written to it, as of their requests' rows."""

    def __init__(self, store: StreamStore) -> None:
        self.store = store

    def resume(self, batch: Sequence[WindowRequest], engines: Engines) -> None:
        """On the event loop, while no inference runs: each stream engine's stream of a symbol
        as the store holds it, which a restarted worker would resume. None stored: the engine
        starts the symbol's stream again from its window, though it may hold an older one (it
        stopped forecasting the symbol since, as a checkpoint rolled back does; or the
        symbol's partition was on another worker meanwhile)."""
        for request, forecasting in zip(batch, engines, strict=True):
            for engine in forecasting:
                if engine is None or engine.streams is None:
                    continue
                stored = self.store.read(request.key).get(engine.model_id)
                if stored is None:
                    engine.streams.pop(request.symbol, None)
                elif engine.streams.get(request.symbol) is not stored:
                    engine.streams[request.symbol] = stored.to(engine.device)

    @staticmethod
    def taken(batch: Sequence[WindowRequest], engines: Engines) -> list[Streams]:
        """In the inference thread, once the batch is forecast: per request, its symbol's
        streams now (as of the symbol's last request in the batch), by model id. A stream is
        never changed in place, so these are kept as they are."""
        out: list[Streams] = []
        for request, forecasting in zip(batch, engines, strict=True):
            out.append(
                {
                    engine.model_id: engine.streams[request.symbol]
                    for engine in forecasting
                    if engine is not None and engine.streams is not None
                }
            )
        return out

    def keep(self, batch: Sequence[WindowRequest], streams: Sequence[Streams]) -> None:
        """`taken`'s streams into the store, each as of its request's row (a symbol's last
        request in the batch writes last)."""
        for request, taken in zip(batch, streams, strict=True):
            if taken:
                self.store.write(request.key, request.partition, request.offset, taken)
