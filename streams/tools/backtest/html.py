"""The backtest report as one self-contained HTML page: counts, coverage over time, pinball by
horizon and by symbol, and fan charts around the largest moves, drawn with the live page's SVG
(streams.web.render)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from features.bars import PRICE_SCALE
from streams.tools.backtest.collect import Collected
from streams.web import svg
from streams.web.board import NS_PER_MIN, Fan, SymbolView, fan_of, segments
from streams.web.render import STYLE, fan_svg

BEFORE_MIN, AFTER_MIN = 60, 30  # the stretch of closes drawn around a move
FAN_EVERY_MIN = 10
BUCKET_MS = {"hour": 3_600_000, "day": 86_400_000}


def page(report: dict[str, Any], collected: Collected) -> str:
    model = escape(report["model_id"])
    files = "".join(
        f"<li>{escape(f['name'])} <span class='muted'>sha256 {f['sha256'][:16]}&hellip;, "
        f"{f['bytes']:,} bytes</span></li>"
        for f in report["files"]
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>barcast backtest {model}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>barcast backtest</h1><span>model <b>{model}</b></span></header>"
        f"<ul>{files}</ul>{summary(report)}"
        f"<h2>80 % interval coverage per {report['coverage_over_time']['bucket']} (UTC)</h2>"
        f"{coverage_chart(report)}"
        f"<h2>Pinball by horizon</h2>{pinball_by_horizon(report)}"
        f"<h2>Pinball by symbol</h2>{symbol_table(report)}"
        f"<h2>Skill over the shadow baselines</h2>{skill_table(report['skill'])}"
        f"<h2>Around the largest moves</h2>{moves(report, collected)}"
        "</body></html>"
    )


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def bp(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} bp"


def summary(report: dict[str, Any]) -> str:
    c = report["counts"]
    unscored = ", ".join(f"{n:,} {escape(r)}" for r, n in c["forecasts_unscored"].items()) or "none"
    return (
        f"<p>{c['replayed']:,} bars replayed: {c['clean']:,} clean, {c['dead_letters']:,} dead "
        f"letters, {c['gap_fills']:,} gap fills; {c['forecasts']:,} forecasts, "
        f"{c['forecasts_scored']:,} scored ({c['labels_scored']:,} labels); not scored: "
        f"{unscored}.</p><p>Coverage <b>{percent(report['coverage'])}</b> "
        f"(nominal {percent(report['settings']['nominal_coverage'])}), mean pinball "
        f"<b>{bp(report['mean_pinball_bp'])}</b>.</p>"
    )


def coverage_chart(report: dict[str, Any]) -> str:
    """Coverage per bucket, the line broken where buckets without scored labels lie between."""
    over_time = report["coverage_over_time"]
    step = BUCKET_MS[over_time["bucket"]]
    series: list[tuple[int, float]] = []
    for point in over_time["points"]:
        if series and point["t_ms"] - series[-1][0] > step:
            series.append((series[-1][0] + step, math.nan))
        series.append((point["t_ms"], point["coverage"]))
    return svg.time_series_chart(
        series,
        f"coverage per {over_time['bucket']}",
        reference=report["settings"]["nominal_coverage"],
    )


def pinball_by_horizon(report: dict[str, Any]) -> str:
    bars = [(f"h={r['horizon']}", r["pinball_bp"] or 0.0) for r in report["by_horizon"]]
    return svg.bar_chart(bars, "pinball by horizon", "{:.2f}".format)


def symbol_table(report: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{escape(r['symbol'])}</td><td>{r['forecasts']:,}</td><td>{r['labels']:,}</td>"
        f"<td>{percent(r['coverage'])}</td><td>{bp(r['pinball_bp'])}</td></tr>"
        for r in report["by_symbol"]
    )
    bars = [(r["symbol"], r["pinball_bp"] or 0.0) for r in report["by_symbol"]]
    return (
        svg.bar_chart(bars, "pinball by symbol", "{:.2f}".format)
        + "<table><tr><th>symbol</th><th>forecasts</th><th>labels</th><th>coverage</th>"
        f"<th>pinball</th></tr>{rows}</table>"
    )


def skill_table(skill: dict[str, Any]) -> str:
    """The model's skill over each baseline with its 90 % interval, overall and by horizon,
    and what the published forecasts came from."""
    sources = ", ".join(f"{n:,} {escape(s)}" for s, n in skill["sources"].items()) or "none"
    if not skill["baselines"]:
        return f"<p>forecasts by source: {sources}; no baseline was scored beside them</p>"
    horizons = len(next(iter(skill["baselines"].values()))["by_horizon"])
    head = "".join(f"<th>h={h + 1}</th>" for h in range(horizons))
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{skill_cell(f['overall'])}</td>"
        + "".join(f"<td>{skill_cell(c)}</td>" for c in f["by_horizon"])
        + "</tr>"
        for name, f in skill["baselines"].items()
    )
    return (
        f"<p>1 - pinball(model) / pinball(baseline) over the forecasts both made, 90 % "
        f"block-bootstrap interval; forecasts by source: {sources}.</p>"
        f"<table class='skill'><tr><th>baseline</th><th>all</th>{head}</tr>{rows}</table>"
    )


def skill_cell(figure: dict[str, Any] | None) -> str:
    if figure is None:
        return "n/a"
    return (
        f"{figure['skill']:+.1%} <span class='muted'>[{figure['lower']:+.1%}, "
        f"{figure['upper']:+.1%}]</span>"
    )


def moves(report: dict[str, Any], collected: Collected) -> str:
    if not report["largest_moves"]:
        return "<p class='muted'>no moves between bars a minute apart</p>"
    return "".join(
        f"<section class='symbol' data-symbol='{escape(m['symbol'])}'>"
        f"<h2>{escape(m['symbol'])} {escape(m['time'])}: {m['move_bp']:+.1f} bp in one minute"
        f"</h2>{fan_svg(move_view(m['symbol'], m['ts_event'], collected))}</section>"
        for m in report["largest_moves"]
    )


def move_view(symbol: str, ts: int, collected: Collected) -> SymbolView:
    """The closes around a move, fans every FAN_EVERY_MIN minutes, and the forecast made at
    the bar before the move as the highlighted one."""
    lo, hi = ts - BEFORE_MIN * NS_PER_MIN, ts + AFTER_MIN * NS_PER_MIN
    closes = [
        (t, bar["close"] * PRICE_SCALE)
        for (s, t), bar in sorted(collected.clean.items())
        if s == symbol and lo <= t <= hi
    ]
    fans: list[Fan] = [
        fan_of(value)
        for (s, t), value in sorted(collected.forecasts.items())
        if s == symbol and lo <= t < ts - NS_PER_MIN and (t // NS_PER_MIN) % FAN_EVERY_MIN == 0
    ]
    before = collected.forecasts.get((symbol, ts - NS_PER_MIN))
    latest = fan_of(before) if before is not None else None
    empty = {
        "forecasts": 0, "labels": 0, "coverage": None, "pinball": None, "unscored": {}, "skill": {}
    }  # fmt: skip
    return {
        "symbol": symbol,
        "segments": segments(closes),
        "fans": fans,
        "latest": latest,
        "model_id": latest["model_id"] if latest else None,
        "source": latest["source"] if latest else None,
        "model_age_s": None,
        "forecast_age_s": None,
        "scores": empty,
    }
