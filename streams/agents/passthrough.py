"""Raw bars copied to the clean topic untouched: the anchor for the corrections benchmark."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from streams.agents.io import Out, each_batch, publish, raw_topic

if TYPE_CHECKING:
    from faust.types import EventT

    from streams.faust_app import BarcastApp


def register(app: BarcastApp) -> None:
    settings = app.barcast
    source = raw_topic(app, settings.topic_raw)
    raw_topic(app, settings.topic_clean)

    async def copy(events: Sequence[EventT]) -> None:
        await publish(
            app,
            [
                Out(
                    settings.topic_clean,
                    e.key,
                    e.value,
                    e.message.timestamp * 1000.0,
                    list(e.headers.items())
                    if isinstance(e.headers, dict)
                    else list(e.headers or []),
                    e.message.partition,
                )
                for e in events
            ],
        )

    @app.agent(source, name="passthrough")
    async def passthrough(stream):  # type: ignore[no-untyped-def]
        await each_batch(stream, copy)
