"""The live page's routes on the worker's web port: `/` (the page), `/api/forecasts` (the
board's JSON view) and `/api/cards` (the part of the page its script refreshes). The only
module of streams.web that touches Faust: `install(app)` registers the routes and adds the
board to the app's observers, which the runtime feeds in process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from streams.web import render
from streams.web.board import Board

if TYPE_CHECKING:
    from streams.faust_app import BarcastApp
    from streams.metrics import Metrics

NO_STORE = {"Cache-Control": "no-store"}


def install(app: BarcastApp) -> Board:
    board = Board()
    app.observers.append(board)

    # Registered before Faust's own index (mounted at "/" when the web server starts): the
    # router answers with the first route that matches.
    @app.page("/")
    async def live_page(view: Any, request: Any) -> Any:
        return view.html(render.page(board.view(lag_by_topic(app.metrics))), headers=NO_STORE)

    @app.page(render.CARDS_PATH)
    async def live_cards(view: Any, request: Any) -> Any:
        return view.html(render.cards(board.view(lag_by_topic(app.metrics))), headers=NO_STORE)

    @app.page(render.JSON_PATH)
    async def live_json(view: Any, request: Any) -> Any:
        body = orjson.dumps(board.view(lag_by_topic(app.metrics)))
        return view.bytes(body, headers={"Content-Type": "application/json", **NO_STORE})

    return board


def lag_by_topic(metrics: Metrics) -> dict[str, int]:
    """`barcast_consumer_lag` summed over each topic's partitions."""
    lag: dict[str, int] = {}
    for family in metrics.consumer_lag.collect():
        for sample in family.samples:
            topic = sample.labels["topic"]
            lag[topic] = lag.get(topic, 0) + int(sample.value)
    return lag
