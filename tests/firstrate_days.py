"""Tiny synthetic FirstRate day folders (the real one may not be committed or needed)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np

SESSION_BREAK = (17 * 60, 18 * 60)  # CME's daily halt, 17:00-18:00 Eastern


def write_day(
    folder: Path, day: str, times: list[str], seed: int = 0, price: float = 1000.0
) -> Path:
    """`folder/day.json` with one bar per wall-clock time `HH:MM` (in the given order), a
    random walk in ticks of 0.25 starting at `price`."""
    rng = np.random.default_rng(seed)
    closes = price + 0.25 * np.cumsum(rng.integers(-2, 3, len(times)))
    rows = []
    for time, close in zip(times, closes, strict=True):
        move = 0.25 * int(rng.integers(0, 3))
        rows.append(
            {
                "dateTime": f"{day} {time}:00",
                "open": float(close),
                "high": float(close + move),
                "low": float(close - 0.25),
                "close": float(close),
                "volume": int(rng.integers(1, 500)),
            }
        )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{day}.json"
    path.write_text(json.dumps(rows))
    return path


def minutes(start: str, stop: str) -> list[str]:
    """`HH:MM` from `start` to `stop` inclusive."""
    first, last = (int(t[:2]) * 60 + int(t[3:]) for t in (start, stop))
    return [f"{m // 60:02d}:{m % 60:02d}" for m in range(first, last + 1)]


def write_sessions(folder: Path, first: str, days: int, seed: int = 0) -> list[Path]:
    """`days` consecutive weekdays from `first`, each trading round the clock but for the
    17:00-18:00 halt (a Sunday evening opens the week), prices continuing day to day."""
    day, paths, price = dt.date.fromisoformat(first), [], 1000.0
    while len(paths) < days:
        if day.weekday() < 5:
            times = [t for t in minutes("00:00", "23:59") if not _halted(t)]
            paths.append(write_day(folder, day.isoformat(), times, seed + len(paths), price))
            price = json.loads(paths[-1].read_text())[-1]["close"]
        day += dt.timedelta(days=1)
    return paths


def _halted(time: str) -> bool:
    minute = int(time[:2]) * 60 + int(time[3:])
    return SESSION_BREAK[0] <= minute < SESSION_BREAK[1]
