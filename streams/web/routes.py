"""The live page's routes on the worker's web port: `/` (the page), `/api/forecasts` (the
board's JSON view) and `/api/cards` (the part of the page its script refreshes), each of the
symbols `?symbols=A,B` names (none: the first by name; streams.web.board.MAX_SHOWN at most).
The only module of streams.web that touches Faust: `install(app)` registers the routes and adds
the board to the app's observers, which the runtime feeds in process."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson

from streams.web import render
from streams.web.board import Board, BoardView

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
        head, drawn = await drawn_cards(board, lag_by_topic(app.metrics), asked(request))
        return view.html(render.page(head, drawn), headers=NO_STORE)

    @app.page(render.CARDS_PATH)
    async def live_cards(view: Any, request: Any) -> Any:
        head, drawn = await drawn_cards(board, lag_by_topic(app.metrics), asked(request))
        return view.html(render.cards(head, drawn), headers=NO_STORE)

    @app.page(render.JSON_PATH)
    async def live_json(view: Any, request: Any) -> Any:
        body = orjson.dumps(board.view(lag_by_topic(app.metrics), asked(request)))
        return view.bytes(body, headers={"Content-Type": "application/json", **NO_STORE})

    return board


def asked(request: Any) -> list[str]:
    """The symbols `?symbols=A,B` names (the parameter may repeat)."""
    names = ",".join(request.query.getall("symbols", [])).split(",")
    return [name.strip() for name in names if name.strip()]


async def drawn_cards(
    board: Board, lag: dict[str, int], names: list[str]
) -> tuple[BoardView, list[str]]:
    """The board's view without its symbols, and the shown symbols' cards, drawn one at a time:
    the loop goes on with a burst's records between two cards, not after the whole page."""
    head, drawn = board.head(lag, names), []
    for name in board.shown(names):
        if name in board.symbols:  # not swept while the loop ran other work
            drawn.append(render.card(board.symbol_view(name), head["scores_seen"]))
        await asyncio.sleep(0)
    return head, drawn


def lag_by_topic(metrics: Metrics) -> dict[str, int]:
    """`barcast_consumer_lag` summed over each topic's partitions."""
    lag: dict[str, int] = {}
    for family in metrics.consumer_lag.collect():
        for sample in family.samples:
            topic = sample.labels["topic"]
            lag[topic] = lag.get(topic, 0) + int(sample.value)
    return lag
