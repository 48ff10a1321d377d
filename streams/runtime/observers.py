"""In-process observers of the worker's outputs (the live page, streams.web), told of each
clean bar, forecast and score once its record is handed to the producer, on the event loop, in
the batch's order. An observer must be quick (it runs between batches) and must not change the
dicts (they are the published values); one that raises is logged and skipped for that call, so
a page can never stop or slow the stream's commits."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

log = logging.getLogger("barcast.observers")


class Observer(Protocol):
    def observe_bar(self, clean_bar_value: dict[str, Any]) -> None: ...

    def observe_forecast(self, forecast_value: dict[str, Any]) -> None: ...

    def observe_score(self, score_value: dict[str, Any]) -> None: ...


def notify(observers: Sequence[Observer], method: str, values: Iterable[dict[str, Any]]) -> None:
    for observer in observers:
        call = getattr(observer, method)
        for value in values:
            try:
                call(value)
            except Exception:
                log.exception("observer %r failed in %s; the stream goes on", observer, method)
