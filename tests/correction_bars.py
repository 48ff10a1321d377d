"""Hand-made 6EH4 bars and outcome helpers for the corrections rule tests."""

from __future__ import annotations

from typing import Any

import orjson

from features.corrections import CorrectionConfig, History, Outcome

T0 = 1_704_150_000 * 10**9  # 2024-01-01 23:00 UTC, on the minute grid
MINUTE = 60 * 10**9
TICK = 50_000  # 6E: 0.00005
BASE = 1_100_000_000  # 1.1000
CONFIG = CorrectionConfig()


def bar(minute: int, o: Any, h: Any, low: Any, c: Any, **fields: Any) -> dict[str, Any]:
    """A bars.raw dict of symbol 6EH4 at T0 + minute."""
    return {
        "instrument_id": 42,
        "symbol": "6EH4",
        "ts_event": T0 + minute * MINUTE,
        "rtype": 33,
        "publisher_id": 1,
        "open": o,
        "high": h,
        "low": low,
        "close": c,
        "volume": 10,
        "source": "test",
        **fields,
    }


def flat(minute: int, price: int = BASE, **fields: Any) -> dict[str, Any]:
    return bar(minute, price, price + TICK, price - TICK, price, **fields)


def calm(n: int) -> list[dict[str, Any]]:
    """n quiet bars wobbling one tick around BASE: history for the robust statistics."""
    return [flat(i, BASE + (i % 2) * TICK) for i in range(n)]


def only(history: History, minute: int) -> Any:
    """The outcome of the input bar at T0 + minute."""
    found = [o for o in history.outcomes if _ts(o.value) == T0 + minute * MINUTE]
    assert len(found) == 1, found
    return found[0]


def _ts(value: Any) -> int | None:
    data = orjson.loads(value) if isinstance(value, bytes) else value
    return data.get("ts_event") if isinstance(data, dict) else None


def statuses(history: History) -> list[str]:
    return statuses_of(history.outcomes)


def statuses_of(outcomes: list[Outcome]) -> list[str]:
    return [o.status.value for o in outcomes]
