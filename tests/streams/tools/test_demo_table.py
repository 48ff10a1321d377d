"""`barcast demo`'s forecast table in a log or pipe: shown again only when it changed."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest

from streams.kafka import ensure_topics
from streams.settings import Settings
from streams.tools import demo
from tests.kafka_io import produce

MINUTE = 60 * 10**9


def forecast(symbol: str, minute: int) -> dict[str, Any]:
    steps = [1.0 + i / 1000 for i in range(10)]
    return {
        "symbol": symbol,
        "ts_event": 1_719_877_200 * 10**9 + minute * MINUTE,
        "close": 1.0,
        "price_q10": steps,
        "price_q50": steps,
        "price_q90": steps,
        "latency_ms": 12.0,
    }


def test_the_table_is_written_again_only_when_it_changed() -> None:
    out = io.StringIO()
    table = demo.ForecastTable(out)
    first = {"ESU4": forecast("ESU4", 0)}
    table.show(first, 1)
    table.show(first, 1)
    table.show({"ESU4": forecast("ESU4", 1)}, 2)
    text = out.getvalue()
    assert text.count("forecasts so far") == 2 and "\x1b" not in text
    assert "forecasts so far: 1" in text and "forecasts so far: 2" in text


@pytest.mark.integration
def test_watching_idle_forecasts_prints_their_table_once(
    broker_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = broker_settings.topic_forecasts
    ensure_topics(broker_settings, [topic])
    values = [forecast(symbol, m) for symbol in ("ESU4", "NQU4") for m in range(3)]
    produce(
        broker_settings.broker, topic, [(v["symbol"].encode(), orjson.dumps(v)) for v in values]
    )
    # Idle for several redraw intervals after the last forecast: a table a second would repeat.
    monkeypatch.setattr(demo, "IDLE_EXIT_S", 4 * demo.REDRAW_S)
    forecasts = demo.watch(broker_settings)
    out = capsys.readouterr().out
    assert len(forecasts) == len(values)
    # (a slow broker may hand over the first forecasts in an earlier table of their own)
    assert out.count(f"forecasts so far: {len(values)}") == 1, out
