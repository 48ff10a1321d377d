"""The live page from the board's view: one card per symbol with its fan chart (closes on a
real time axis, broken at session breaks, past and latest q10/q50/q90 fans), its rolling
scores, model and ages. Server-rendered SVG; the page's only script re-fetches the cards.

Pure: strings from the view, no Faust. The backtest report draws its fans with `fan_svg`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from itertools import pairwise
from urllib.parse import quote

from model.serving.skill import MODEL
from streams.web import svg
from streams.web.board import MAX_SHOWN, BoardView, Fan, RollingScores, SkillFigure, SymbolView

POLL_MS = 2000
CARDS_PATH = "/api/cards"
JSON_PATH = "/api/forecasts"

STYLE = """
body{font:14px system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
header{display:flex;gap:24px;align-items:baseline;flex-wrap:wrap}
h1{font-size:20px;margin:0} h2{font-size:16px;margin:0 0 4px}
.symbol{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px;margin:12px 0}
.stats{display:flex;gap:20px;flex-wrap:wrap;color:#444;margin-top:4px}
.stats b{color:#111} .muted{color:#888}
.axis{stroke:#999} .grid{stroke:#eee} .tick{font-size:10px;fill:#555}
.time-exchange{fill:#999} .close{fill:none;stroke:#111;stroke-width:1.2}
.fan{fill:#1f77b4;stroke:none} .fan.past{fill-opacity:.15} .fan.latest{fill-opacity:.35}
.median{fill:none;stroke:#1f77b4} .median.latest{stroke-width:1.5}
.session-break{fill:#f3f0e6} .break-label{font-size:10px;fill:#a98}
.series{fill:none;stroke:#1f77b4;stroke-width:1.5} .bar{fill:#1f77b4}
.reference{stroke:#d62728;stroke-dasharray:4 3} .empty{fill:#888}
table{border-collapse:collapse} td,th{padding:2px 10px;text-align:right}
"""

SCRIPT = f"""
async function refresh() {{
  try {{
    const response = await fetch("{CARDS_PATH}" + location.search, {{cache: "no-store"}});
    if (response.ok) {{
      const html = await response.text();
      const cards = document.getElementById("cards");
      if (cards.innerHTML !== html) cards.innerHTML = html;
      document.getElementById("status").textContent =
        "updated " + new Date().toISOString().slice(11, 19) + " UTC";
    }}
  }} catch (error) {{
    document.getElementById("status").textContent = "worker unreachable";
  }}
}}
document.getElementById("json").href = "{JSON_PATH}" + location.search;
setInterval(refresh, {POLL_MS});
"""


def page(view: BoardView, drawn: Sequence[str] | None = None) -> str:
    """The whole page; `drawn`: as `cards`'s."""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<title>barcast live forecasts</title>"
        f"<style>{STYLE}</style></head><body>"
        "<header><h1>barcast live forecasts</h1>"
        f"<span>q10&ndash;q90 fans and median, last {view['history_minutes'] // 60} h of "
        f"1-minute closes; <a id='json' href='{JSON_PATH}'>JSON</a></span>"
        "<span id='status' class='muted'></span></header>"
        f"<main id='cards'>{cards(view, drawn)}</main>"
        f"<script>{SCRIPT}</script></body></html>"
    )


def cards(view: BoardView, drawn: Sequence[str] | None = None) -> str:
    """The part of the page the script replaces: the lag line, which symbols are shown, and a
    card for each; `drawn`: their cards, drawn already (`card`), else drawn now."""
    head = f"<p class='lag'>consumer lag: {lag_text(view['lag'])}</p>"
    if drawn is None:
        drawn = [card(symbol, view["scores_seen"]) for symbol in view["symbols"]]
    if not drawn and not view["others"]:  # the board holds no symbol yet
        return head + "<p class='muted waiting'>waiting for the first bars&hellip;</p>"
    return head + selection_text(view, len(drawn)) + "".join(drawn)


def selection_text(view: BoardView, shown: int) -> str:
    """Which symbols the page shows, links to the others, and how to choose."""
    if not view["others"] and not view["not_found"]:
        return ""
    parts = [f"showing {shown} of {shown + len(view['others'])} symbols"]
    if view["not_found"]:
        missing = ", ".join(escape(name) for name in view["not_found"])
        parts.append(f"not on this worker: <b class='not-found'>{missing}</b>")
    if view["others"]:
        links = " ".join(
            f"<a href='?symbols={quote(name)}'>{escape(name)}</a>" for name in view["others"]
        )
        parts.append(f"others: {links}")
    choose = f"choose up to {MAX_SHOWN} with <code>?symbols=ESH5,NQH5</code>"
    return f"<p class='selection'>{'; '.join(parts)} <span class='muted'>({choose})</span></p>"


def lag_text(lag: dict[str, int]) -> str:
    """The total, and the topics behind it (all topics are in the JSON)."""
    if not lag:
        return "<b>not known yet</b>"
    behind = ", ".join(f"{escape(topic)} {n:,}" for topic, n in lag.items() if n)
    total = f"<b class='lag-total'>{sum(lag.values()):,}</b> messages"
    return f"{total} ({behind})" if behind else f"{total} on {len(lag)} topics"


def card(symbol: SymbolView, scores_seen: bool) -> str:
    name = escape(symbol["symbol"])
    latest = symbol["latest"]
    when = (
        f"forecast at {utc_time(latest['t_ms'])}, close {latest['close']:g}"
        if latest
        else "no forecast yet (warming up)"
    )
    return (
        f"<section class='symbol' data-symbol='{name}'><h2>{name} "
        f"<span class='muted'>{escape(when)}</span></h2>"
        f"{fan_svg(symbol)}<div class='stats'>{stats(symbol, scores_seen)}</div></section>"
    )


def stats(symbol: SymbolView, scores_seen: bool) -> str:
    parts = [score_text(symbol["scores"], scores_seen)]
    if symbol["scores"]["skill"]:
        parts.append(skill_text(symbol["scores"]["skill"]))
    if symbol["source"] not in (None, MODEL):
        parts.append(
            f"serving the <b class='source'>{escape(str(symbol['source']))}</b> baseline "
            "(the model's skill interval lies below zero)"
        )
    if symbol["model_id"] is not None:
        parts.append(
            f"model <b class='model-id'>{escape(symbol['model_id'])}</b> "
            f"(serving {age(symbol['model_age_s'])})"
        )
        parts.append(f"latest forecast {age(symbol['forecast_age_s'])} ago")
    return "".join(f"<span>{p}</span>" for p in parts)


def score_text(scores: RollingScores, scores_seen: bool) -> str:
    if scores["coverage"] is None or scores["pinball"] is None:
        reason = "scores appear once forecast horizons have passed" if scores_seen else ""
        return f"<span class='scores muted'>no scores yet {reason}</span>"
    return (
        f"<span class='scores'>rolling 80 % coverage <b>{scores['coverage']:.1%}</b>, "
        f"pinball <b>{scores['pinball']:.3f}</b> bp "
        f"<span class='muted'>({scores['forecasts']} forecasts, {scores['labels']} labels"
        f"{unscored_text(scores['unscored'])})</span></span>"
    )


def skill_text(skill: dict[str, SkillFigure]) -> str:
    """The model's skill over each baseline and its 90 % interval, in percent."""
    parts = [
        f"<span class='skill' data-baseline='{escape(name)}'>{escape(name)} "
        f"<b class='skill-value'>{figure['skill']:+.1%}</b> "
        f"<span class='skill-interval'>[{figure['lower']:+.1%}, {figure['upper']:+.1%}]</span>"
        "</span>"
        for name, figure in skill.items()
    ]
    n = max(figure["forecasts"] for figure in skill.values())
    return (
        f"skill over the baselines {', '.join(parts)} "
        f"<span class='muted'>(1 - pinball ratio, 90 % interval, {n} forecasts)</span>"
    )


def utc_time(t_ms: int) -> str:
    return datetime.fromtimestamp(t_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def unscored_text(unscored: dict[str, int]) -> str:
    return "".join(f"; {n} not scored: {reason}" for reason, n in unscored.items())


def age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def fan_svg(symbol: SymbolView, frame: svg.Frame | None = None) -> str:
    """Closes as one path that lifts the pen at each session break, fans as polygons from the
    forecast bar's close out to q90 and back along q10, medians as paths."""
    frame = frame or svg.Frame()
    fans = [*symbol["fans"], *([symbol["latest"]] if symbol["latest"] else [])]
    closes = [point for segment in symbol["segments"] for point in segment]
    if not closes and not fans:
        return svg.svg(frame, [], "fan-chart", f"{symbol['symbol']}: no data")
    times = [t for t, _ in closes] + [t for f in fans for t in (f["t_ms"], f["steps_ms"][-1])]
    prices = [p for _, p in closes] + [p for f in fans for p in (*f["low"], *f["high"])]
    x = svg.Scale(min(times), max(times), frame.x0, frame.x1)
    y = svg.Scale(*svg.padded(min(prices), max(prices)), frame.y0, frame.y1)
    digits = svg.decimals_for(y.hi - y.lo)
    parts = [
        *breaks(symbol["segments"], x, frame),
        *svg.value_axis(frame, y, f"{{:.{digits}f}}".format),
    ]
    parts += svg.time_axis(frame, x)
    for fan in fans:
        parts += fan_parts(fan, x, y, "latest" if fan is symbol["latest"] else "past")
    if closes:
        d = " ".join(svg.path_d([(x(t), y(p)) for t, p in seg]) for seg in symbol["segments"])
        parts.append(f'<path class="close" d="{d}"/>')
    return svg.svg(frame, parts, "fan-chart", f"{symbol['symbol']} closes and forecast fans")


def fan_parts(fan: Fan, x: svg.Scale, y: svg.Scale, kind: str) -> list[str]:
    start = (x(fan["t_ms"]), y(fan["close"]))
    upper = [(x(t), y(p)) for t, p in zip(fan["steps_ms"], fan["high"], strict=True)]
    lower = [(x(t), y(p)) for t, p in zip(fan["steps_ms"], fan["low"], strict=True)]
    median = [(x(t), y(p)) for t, p in zip(fan["steps_ms"], fan["median"], strict=True)]
    return [
        svg.polygon([start, *upper, *reversed(lower)], f"fan {kind}"),
        f'<path class="median {kind}" d="{svg.path_d([start, *median])}"/>',
    ]


def breaks(
    segments: Sequence[Sequence[tuple[int, float]]], x: svg.Scale, frame: svg.Frame
) -> list[str]:
    """A shaded band over each session break, so the missing line reads as a break."""
    parts = []
    for before, after in pairwise(segments):
        xa, xb = x(before[-1][0]), x(after[0][0])
        parts.append(
            f'<rect class="session-break" x="{xa:.1f}" y="{frame.y1:.1f}" '
            f'width="{max(xb - xa, 1.0):.1f}" height="{frame.y0 - frame.y1:.1f}">'
            "<title>session break: no bars</title></rect>"
        )
        parts.append(svg.text((xa + xb) / 2, frame.y1 + 10, "break", "break-label", "middle"))
    return parts
