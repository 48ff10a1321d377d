"""The live page: the board and its rendering fed directly, then the page in headless Chromium
from a real worker on the embedded broker while a file is replayed."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest
from multidict import MultiDict

from model.serving.scoring import Decided, LabelBar, forecast_fields, score_all
from model.serving.skill import MIN_SCORED
from streams.ingest.replay import Replay, ReplayOptions
from streams.kafka import ensure_topics, pipeline_topics
from streams.settings import REPO_ROOT, Settings
from streams.web import render, routes
from streams.web.board import (
    FAN_EVERY_MINUTES,
    HISTORY_MINUTES,
    MAX_SHOWN,
    Board,
    BoardView,
    SymbolView,
    fan_of,
)
from streams.web.routes import drawn_cards
from tests.browser import Browser
from tests.checkpoints import make_checkpoint
from tests.streams.tools.test_backtest import sixe_slice
from tests.streams.worker.test_forecasts import end_of_data
from tests.worker import Worker

MINUTE = 60 * 10**9
START = 1_719_877_200 * 10**9  # 2024-07-01 23:40 UTC
SCREENSHOT = REPO_ROOT / "var" / "live_page.png"
FAN = "section[data-symbol='6EH4'] svg.fan-chart polygon.fan.latest"


def bar(ts: int, close: float, symbol: str = "ESU4") -> dict[str, Any]:
    return {"symbol": symbol, "ts_event": ts, "close": round(close * 1e9), "status": "clean"}


def forecast(ts: int, close: float, symbol: str = "ESU4") -> dict[str, Any]:
    steps = range(1, 11)
    return {
        "symbol": symbol,
        "ts_event": ts,
        "close": close,
        "horizons": list(steps),
        "q10": [-0.0002 * h for h in steps],
        "q50": [0.0] * 10,
        "q90": [0.0002 * h for h in steps],
        "price_q10": [close * (1 - 0.0002 * h) for h in steps],
        "price_q50": [close] * 10,
        "price_q90": [close * (1 + 0.0002 * h) for h in steps],
        "model_id": "0123456789abcdef",
    }


def test_memory_per_symbol_is_bounded_and_repeats_are_ignored() -> None:
    board = Board(clock=lambda: START)
    for i in range(3 * HISTORY_MINUTES):
        board.observe_bar(bar(START + i * MINUTE, 5500.0 + i))
        board.observe_forecast(forecast(START + i * MINUTE, 5500.0 + i))
    board.observe_bar(bar(START, 1.0))  # a repeat of an old bar after a restart
    held = board.symbols["ESU4"]
    assert len(held.closes) == HISTORY_MINUTES
    assert held.closes[-1] == (START + (3 * HISTORY_MINUTES - 1) * MINUTE, 5500.0 + 719)
    assert len(held.fans) <= HISTORY_MINUTES // FAN_EVERY_MINUTES + 1
    view = board.view()["symbols"][0]
    assert view["latest"] is not None and view["latest"]["t_ms"] == held.closes[-1][0] // 10**6
    assert all(f["t_ms"] * 10**6 >= held.closes[0][0] for f in view["fans"])


@pytest.mark.parametrize("seen", [bar, forecast])
def test_a_symbol_that_stopped_trading_leaves_the_page_after_a_week(seen: Any) -> None:
    """By its bars, or by its forecasts alone (the page of a BARCAST_ROLE=forecast worker,
    which sees no bar)."""
    board = Board(clock=lambda: START)
    observe = board.observe_bar if seen is bar else board.observe_forecast
    observe(seen(START, 5500.0, symbol="ESU4"))
    for day in (1, 6, 8):
        observe(seen(START + day * 1440 * MINUTE, 5600.0, symbol="ESZ4"))
        shown = [s["symbol"] for s in board.view()["symbols"]]
        assert shown == (["ESU4", "ESZ4"] if day < 7 else ["ESZ4"]), day


def test_a_forecast_is_drawn_when_the_page_asks_and_a_kept_fan_when_observed() -> None:
    """The worker's loop only holds a forecast; the page draws it. One of a fan minute is drawn
    at once, into the past fans, and is the latest the page shows, not a copy of it."""
    board = Board(clock=lambda: START)
    off_minute = forecast(START + MINUTE, 5500.0)
    board.observe_forecast(off_minute)
    held = board.symbols["ESU4"]
    assert held.latest_fan is None and not held.fans
    assert board.view()["symbols"][0]["latest"] == fan_of(off_minute)
    on_minute = START + (FAN_EVERY_MINUTES - (START // MINUTE) % FAN_EVERY_MINUTES) * MINUTE
    board.observe_forecast(forecast(on_minute, 5501.0))
    assert len(held.fans) == 1 and held.fans[-1] is held.latest
    board.observe_forecast(forecast(START, 5499.0))  # older than the latest: not shown
    assert board.view()["symbols"][0]["latest"]["t_ms"] == on_minute // 10**6  # type: ignore[index]
    unnamed = {k: v for k, v in forecast(on_minute, 1.0).items() if k != "price_q50"}
    with pytest.raises(ValueError, match="price_q50"):  # a model's first forecast is checked
        board.observe_forecast(unnamed | {"model_id": "another"})


def test_a_session_break_is_a_break_in_the_line() -> None:
    board = Board(clock=lambda: START)
    for i in range(30):
        board.observe_bar(bar(START + i * MINUTE, 5500.0))
    for i in range(30):  # an hour later: the next session
        board.observe_bar(bar(START + (90 + i) * MINUTE, 5501.0))
    board.observe_forecast(forecast(START + 119 * MINUTE, 5501.0))
    view = board.view()
    assert [len(s) for s in view["symbols"][0]["segments"]] == [30, 30]
    html = render.page(view)
    close_path = re.search(r'<path class="close" d="([^"]+)"', html)
    assert close_path is not None and close_path.group(1).count("M") == 2
    assert html.count('class="session-break"') == 1
    assert 'polygon class="fan latest"' in html
    assert ">07-02 00:00<" in html and ">19:00<" in html  # a tick in UTC, and in Chicago


def test_rolling_scores_come_from_score_records() -> None:
    board = Board(clock=lambda: START)
    value = forecast(START, 5500.0)
    board.observe_forecast(value)
    assert "no scores yet" in render.page(board.view())
    moves = [0.0001, *(0.0003 * h for h in range(2, 11))]  # log returns 1, 6, 9, ... bp
    label_bars = [
        LabelBar(START + h * MINUTE, 5500.0 * (1 + m), False) for h, m in enumerate(moves, 1)
    ]
    board.observe_score(score_all([Decided(forecast_fields(value), tuple(label_bars))])[0])
    gap = [*label_bars[:4], None, *label_bars[5:]]
    later = forecast_fields(forecast(START + MINUTE, 5500.0))
    board.observe_score(score_all([Decided(later, tuple(gap))])[0])
    rolling = board.view()["symbols"][0]["scores"]
    # Against an interval of +-2 bp a minute, only horizon 1 falls inside.
    assert rolling["forecasts"] == 1 and rolling["labels"] == 10
    assert rolling["coverage"] == pytest.approx(0.1)
    assert rolling["unscored"] == {"session_break": 1}
    page = render.page(board.view())
    assert "10.0%" in page and "1 not scored: session_break" in page


def test_each_symbol_shows_its_skill_over_the_baselines_and_its_interval() -> None:
    """Scores carrying the baselines' pinball: the card shows the model's skill over each (the
    records' own figures, model.serving.skill) and which one it serves; none before the
    first interval."""
    board = Board(clock=lambda: START)
    rng = np.random.default_rng(0)
    for i in range(MIN_SCORED + 20):
        loss = rng.uniform(1e-4, 2e-4)
        record = score(START + i * MINUTE, loss, {"volatility_scale": 0.8 * loss, "tod_ewma": None})
        board.observe_score(record)
        if i == MIN_SCORED - 2:
            assert board.view()["symbols"][0]["scores"]["skill"] == {}
    board.observe_forecast(forecast(START, 5500.0) | {"source": "volatility_scale"})
    view = board.view()["symbols"][0]
    figure = view["scores"]["skill"]["volatility_scale"]
    assert set(view["scores"]["skill"]) == {"volatility_scale"}  # the other never scored
    assert figure["skill"] == pytest.approx(-0.25) and figure["forecasts"] == MIN_SCORED + 20
    assert figure["lower"] == pytest.approx(-0.25) == figure["upper"]
    html = render.page(board.view())
    assert "<b class='skill-value'>-25.0%</b>" in html and "[-25.0%, -25.0%]" in html
    assert "serving the <b class='source'>volatility_scale</b> baseline" in html


def score(ts: int, loss: float, baselines: dict[str, float | None]) -> dict[str, Any]:
    """A scored record whose every pinball is `loss`, each baseline's its own (None: none)."""
    pinball = {q: [loss] * 10 for q in ("q10", "q50", "q90")}
    return {
        "symbol": "ESU4", "ts_event": ts, "model_id": "m", "horizons": list(range(1, 11)),
        "unscored": None, "realized": [0.0] * 10, "pinball": pinball, "inside": [True] * 10,
        "below_q10": [False] * 10, "above_q90": [False] * 10, "source": "model",
        "baselines": {
            name: None if b is None else {q: [b] * 10 for q in ("q10", "q50", "q90")}
            for name, b in baselines.items()
        },
    }  # fmt: skip


def test_a_view_shows_the_symbols_asked_for_or_the_first_by_name_and_names_the_others() -> None:
    board = Board(clock=lambda: START)
    names = [f"S{i:03d}" for i in range(MAX_SHOWN + 6)]
    for name in reversed(names):
        board.observe_bar(bar(START, 5500.0, name))
    view = board.view()
    assert [s["symbol"] for s in view["symbols"]] == names[:MAX_SHOWN]
    assert view["others"] == names[MAX_SHOWN:] and view["not_found"] == []
    html = render.cards(view)
    assert f"showing {MAX_SHOWN} of {len(names)} symbols" in html
    assert f"<a href='?symbols={names[-1]}'>{names[-1]}</a>" in html
    asked = board.view(asked=["S029", "NOPE", "S002", "S029"])
    assert [s["symbol"] for s in asked["symbols"]] == ["S029", "S002"]
    assert asked["not_found"] == ["NOPE"] and "S029" not in asked["others"]
    assert "not on this worker: <b class='not-found'>NOPE</b>" in render.cards(asked)
    many = board.view(asked=list(reversed(names)))
    assert [s["symbol"] for s in many["symbols"]] == list(reversed(names))[:MAX_SHOWN]
    assert "waiting for the first bars" in render.cards(Board().view(asked=["NOPE"]))


def test_the_cards_are_drawn_one_at_a_time_between_the_loops_other_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    board = Board(clock=lambda: START)
    for i in range(5):
        board.observe_bar(bar(START, 5500.0, f"S{i}"))
    events: list[str] = []  # each card drawn, and each turn of the loop's other work
    card = render.card

    def logged(symbol: SymbolView, scores_seen: bool) -> str:
        events.append(symbol["symbol"])
        return card(symbol, scores_seen)

    monkeypatch.setattr(render, "card", logged)

    async def draw() -> tuple[BoardView, list[str]]:
        async def other_work() -> None:
            while True:
                events.append("turn")
                if events.count("turn") == 2:
                    del board.symbols["S3"]  # swept while the page is drawn
                await asyncio.sleep(0)

        drawing = drawn_cards(board, {}, [])
        other = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        drawn = await drawing
        other.cancel()
        return drawn

    head, drawn = asyncio.run(draw())
    # S3 was gone when its turn came
    assert events[:8] == ["turn", "S0", "turn", "S1", "turn", "S2", "turn", "turn"]
    assert events[8] == "S4" and len(drawn) == 4
    assert render.cards(head, drawn) == render.cards(board.view())


def test_the_symbols_asked_for_come_from_the_query() -> None:
    request = SimpleNamespace(query=MultiDict([("symbols", " ESH5, NQH5,"), ("symbols", "6EH5")]))
    assert routes.asked(request) == ["ESH5", "NQH5", "6EH5"]
    assert routes.asked(SimpleNamespace(query=MultiDict())) == []


def test_the_view_is_json() -> None:
    board = Board(clock=lambda: START)
    board.observe_bar(bar(START, 5500.0))
    calibrated = forecast(START, 5500.0) | {"raw_q10": [0.0] * 10, "schema_version": 2}
    board.observe_forecast(calibrated)  # online calibration's extra fields change nothing
    view = orjson.loads(orjson.dumps(board.view({"bars.raw": 3})))
    assert view["symbols"][0]["latest"]["median"] == [5500.0] * 10
    assert view["quantiles"] == ["q10", "q50", "q90"]
    assert view["lag"] == {"bars.raw": 3} and view["scores_seen"] is False
    assert "3</b> messages (bars.raw 3)" in render.cards(board.view({"bars.raw": 3, "x": 0}))


def test_the_browser_check_fails_on_a_page_without_a_fan(tmp_path: Path) -> None:
    board = Board(clock=lambda: START)
    for i in range(30):  # closes, but no forecast yet
        board.observe_bar(bar(START + i * MINUTE, 1.1, symbol="6EH4"))
    page = tmp_path / "page.html"
    page.write_text(render.page(board.view()))
    with Browser(tmp_path / "chromium") as browser:
        browser.open(page.as_uri())
        assert browser.wait_for("document.querySelector('path.close') !== null", 30)
        with pytest.raises(AssertionError, match="no forecast yet"):
            browser.wait_for(f'document.querySelector("{FAN}") !== null', 2)


@pytest.mark.integration
def test_the_page_draws_a_fan_in_a_browser_while_a_file_is_replayed(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    model_id = make_checkpoint(tmp_path / "models" / "first")
    settings = replace(broker_settings, role="all", model_dir=tmp_path / "models")
    ensure_topics(settings, pipeline_topics(settings))
    # Eight hours of 6EH4 across the daily break: the page's last four hours hold it.
    replayed = sixe_slice(sixe_bars, tmp_path / "6eh4.dbn.zst")
    with Worker(settings) as worker, Browser(tmp_path / "chromium") as browser:
        url = f"http://127.0.0.1:{worker.settings.web_port}/"
        browser.open(url + "?symbols=6EH4,NOPE")  # the refreshes keep the choice
        browser.wait_for("document.querySelector('.waiting') !== null", 30)
        browser.evaluate("window.loadedOnce = true")  # gone if the page reloads
        Replay(settings, ReplayOptions(files=(replayed,), topic=settings.topic_raw)).run()
        end_of_data(settings)
        browser.wait_for(f'document.querySelector("{FAN}") !== null', 60)
        browser.wait_for(f'document.querySelector("{SKILL}") !== null', 60)
        # Consumer lag, recorded by the worker every few seconds, reaches the page too.
        browser.wait_for("document.querySelector('.lag-total') !== null", 30)
        dom = browser.evaluate(DOM_SUMMARY)
        not_found = browser.evaluate("document.querySelector('.not-found').textContent")
        json_link = browser.evaluate("document.getElementById('json').getAttribute('href')")
        browser.screenshot(SCREENSHOT)
        with urllib.request.urlopen(url + "api/forecasts", timeout=10) as response:
            api = orjson.loads(response.read())
        with urllib.request.urlopen(url + "api/forecasts?symbols=NOPE", timeout=10) as response:
            none_shown = orjson.loads(response.read())
    assert not_found == "NOPE" and json_link == "/api/forecasts?symbols=6EH4,NOPE"
    assert none_shown["symbols"] == [] and none_shown["not_found"] == ["NOPE"]
    assert none_shown["others"] == ["6EH4"]
    assert dom["loadedOnce"] is True, "the page reloaded instead of updating in place"
    assert dom["title"].startswith("6EH4") and dom["pastFans"] >= 1
    assert dom["closePath"].startswith("M") and dom["closePath"].count("M") == 2
    assert dom["sessionBreaks"] == 1  # no line across the break, a band over it
    assert len(dom["utcTicks"]) >= 3 and all(re.fullmatch(TICK, t) for t in dom["utcTicks"])
    assert len(dom["exchangeTicks"]) == len(dom["utcTicks"]) and dom["model"] == model_id
    symbol = api["symbols"][0]
    assert symbol["symbol"] == "6EH4" and symbol["latest"]["model_id"] == model_id
    # The skill and its interval over each baseline, as the records' figures say
    skill = symbol["scores"]["skill"]
    assert set(dom["skill"]) == set(skill) == {"volatility_scale", "tod_ewma"}
    for name, (value, interval) in dom["skill"].items():
        figure = skill[name]
        assert value == f"{figure['skill']:+.1%}", (name, value, figure)
        assert interval == f"[{figure['lower']:+.1%}, {figure['upper']:+.1%}]"
        assert figure["lower"] <= figure["skill"] <= figure["upper"]
    assert dom["source"] == (None if symbol["source"] == "model" else symbol["source"])
    assert settings.topic_raw in api["lag"]
    assert SCREENSHOT.stat().st_size > 10_000


TICK = r"(\d\d-\d\d )?\d\d:\d\d"
SKILL = "section[data-symbol='6EH4'] .skill[data-baseline='tod_ewma'] .skill-interval"
DOM_SUMMARY = """(() => {
  const card = document.querySelector("section[data-symbol='6EH4']");
  const texts = (selector) => [...card.querySelectorAll(selector)].map((e) => e.textContent);
  return {
    loadedOnce: window.loadedOnce === true,
    title: card.querySelector("h2").textContent,
    pastFans: card.querySelectorAll("polygon.fan.past").length,
    closePath: card.querySelector("path.close").getAttribute("d"),
    sessionBreaks: card.querySelectorAll("rect.session-break").length,
    utcTicks: texts("text.time-utc").filter((t) => t !== "UTC"),
    exchangeTicks: texts("text.time-exchange").filter((t) => t !== "CT"),
    model: card.querySelector(".model-id").textContent,
    skill: Object.fromEntries([...card.querySelectorAll(".skill")].map((e) => [
      e.dataset.baseline,
      [e.querySelector(".skill-value").textContent, e.querySelector(".skill-interval").textContent],
    ])),
    source: card.querySelector(".source") && card.querySelector(".source").textContent,
  };
})()"""
