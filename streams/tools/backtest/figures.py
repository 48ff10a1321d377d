"""The backtest report's numbers: counts, coverage and pinball overall, by horizon, by symbol
and over time, and the largest moves. Pure and deterministic: the same scores give the same
figures (forecasts in (symbol, ts_event) order, sums in that order, no clock)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import numpy as np

from streams.tools.backtest.collect import Collected
from streams.tools.backtest.score_table import ScoreTable

BASIS_POINTS = 1e4
NS_PER_HOUR = 3_600_000_000_000
NS_PER_DAY = 24 * NS_PER_HOUR
HOURLY_SPAN_DAYS = 3
NS_PER_MIN = 60_000_000_000
LARGEST_MOVES = 4
MOVE_SPACING_MIN = 120  # two moves of one symbol this close are one episode


def mean(values: np.ndarray) -> float | None:
    scored = values[~np.isnan(values)]
    return float(scored.mean()) if scored.size else None


def scaled(value: float | None) -> float | None:
    return None if value is None else value * BASIS_POINTS


def figures(collected: Collected, table: ScoreTable, quantiles: list[str]) -> dict[str, Any]:
    per_label = table.pinball.mean(axis=2)  # (n, H): mean over quantiles, NaN when not scored
    return {
        "counts": counts(collected, table),
        "coverage": mean(table.inside),
        "mean_pinball_bp": scaled(mean(per_label)),
        "by_horizon": [
            {
                "horizon": h + 1,
                "labels": int((~np.isnan(table.inside[:, h])).sum()),
                "coverage": mean(table.inside[:, h]),
                "pinball_bp": scaled(mean(per_label[:, h])),
                "pinball_bp_by_quantile": {
                    name: scaled(mean(table.pinball[:, h, j])) for j, name in enumerate(quantiles)
                },
            }
            for h in range(table.inside.shape[1])
        ],
        "by_symbol": by_symbol(table, per_label),
        "coverage_over_time": coverage_over_time(table),
        "largest_moves": largest_moves(collected),
    }


def counts(collected: Collected, table: ScoreTable) -> dict[str, Any]:
    synthetic = sum(bar.get("status") == "synthetic" for bar in collected.clean.values())
    scored = ~np.isnan(table.inside)
    return {
        "replayed": len(collected.raw),
        "clean": len(collected.clean) - synthetic,
        "gap_fills": synthetic,
        "dead_letters": len(collected.dead_letters),
        "forecasts": len(collected.forecasts),
        "forecasts_scored": int(scored.any(axis=1).sum()),
        "labels_scored": int(scored.sum()),
        "forecasts_unscored": table.unscored,
    }


def by_symbol(table: ScoreTable, per_label: np.ndarray) -> list[dict[str, Any]]:
    symbols = np.array([symbol for symbol, _ in table.keys])
    out = []
    for symbol in sorted(set(symbols.tolist())):
        rows = symbols == symbol
        out.append(
            {
                "symbol": symbol,
                "forecasts": int(rows.sum()),
                "labels": int((~np.isnan(table.inside[rows])).sum()),
                "coverage": mean(table.inside[rows]),
                "pinball_bp": scaled(mean(per_label[rows])),
            }
        )
    return out


def coverage_over_time(table: ScoreTable) -> dict[str, Any]:
    """Coverage of the labels of the forecasts made in each UTC hour (each UTC day when the
    forecasts span more than HOURLY_SPAN_DAYS), all symbols together."""
    times = np.array([ts for _, ts in table.keys], dtype=np.int64)
    span = int(times.max() - times.min()) if times.size else 0
    bucket_ns = NS_PER_HOUR if span <= HOURLY_SPAN_DAYS * NS_PER_DAY else NS_PER_DAY
    buckets = times // bucket_ns
    points = []
    for bucket in np.unique(buckets).tolist():
        inside = table.inside[buckets == bucket]
        labels = int((~np.isnan(inside)).sum())
        if labels:
            start = bucket * bucket_ns
            points.append(
                {
                    "start": iso(start),
                    "t_ms": start // 1_000_000,
                    "labels": labels,
                    "coverage": mean(inside),
                }
            )
    return {"bucket": "hour" if bucket_ns == NS_PER_HOUR else "day", "points": points}


def largest_moves(collected: Collected) -> list[dict[str, Any]]:
    """The largest one-minute moves between real bars a minute apart, one per episode."""
    moves = []
    for symbol, bars in collected.clean_by_symbol().items():
        real = [b for b in bars if b.get("status") != "synthetic"]
        for before, after in pairwise(real):
            if after["ts_event"] - before["ts_event"] == NS_PER_MIN:
                move = float(np.log(after["close"] / before["close"])) * BASIS_POINTS
                moves.append((-abs(move), symbol, int(after["ts_event"]), move))
    chosen: list[dict[str, Any]] = []
    for _, symbol, ts, move in sorted(moves):
        if len(chosen) == LARGEST_MOVES:
            break
        if all(
            m["symbol"] != symbol or abs(m["ts_event"] - ts) > MOVE_SPACING_MIN * NS_PER_MIN
            for m in chosen
        ):
            chosen.append({"symbol": symbol, "ts_event": ts, "time": iso(ts), "move_bp": move})
    return chosen


def iso(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%MZ")
