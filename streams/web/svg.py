"""SVG building blocks: linear scales, a time axis in UTC with the exchange's local time under
it, a value axis, and small line and bar charts. Pure strings, no JavaScript, no library: the
page works with no internet."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from zoneinfo import ZoneInfo

# CME Globex, where every barcast symbol trades: its local time is US Central.
EXCHANGE_TZ = ZoneInfo("America/Chicago")
EXCHANGE_LABEL = "CT"
MS_PER_MIN = 60_000
MS_PER_DAY = 1440 * MS_PER_MIN
LABEL_HALF_WIDTH = 32  # half of a "07-01 14:30" label at the ticks' font size, px
TICK_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 240, 360, 720, 1440, 2880, 10080)


@dataclass(frozen=True)
class Frame:
    """An SVG's size and the margins around its plot area."""

    width: int = 720
    height: int = 260
    left: int = 64
    right: int = 12
    top: int = 12
    bottom: int = 40

    @property
    def x0(self) -> float:
        return self.left

    @property
    def x1(self) -> float:
        return self.width - self.right

    @property
    def y0(self) -> float:
        return self.height - self.bottom

    @property
    def y1(self) -> float:
        return self.top


@dataclass(frozen=True)
class Scale:
    """Maps [lo, hi] onto [a, b]; a domain of one point maps to the middle."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, value: float) -> float:
        if self.hi == self.lo:
            return (self.a + self.b) / 2
        return self.a + (value - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def padded(lo: float, hi: float, fraction: float = 0.06) -> tuple[float, float]:
    pad = (hi - lo) * fraction or abs(hi) * 1e-4 or 1.0
    return lo - pad, hi + pad


def decimals_for(span: float) -> int:
    """Digits after the point that tell ticks `span` apart (1.0875 vs 5512.25)."""
    return max(0, min(6, 2 - math.floor(math.log10(span)))) if span > 0 else 2


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def time_ticks(lo_ms: int, hi_ms: int, count: int = 7) -> tuple[list[int], int]:
    """Ticks on whole steps of TICK_MINUTES (UTC), at most about `count`, and the step (ms)."""
    minutes = next(
        (m for m in TICK_MINUTES if (hi_ms - lo_ms) / (m * MS_PER_MIN) <= count), TICK_MINUTES[-1]
    )
    step = minutes * MS_PER_MIN
    return list(range(-(-lo_ms // step) * step, hi_ms + 1, step)), step


def time_label(t_ms: int, with_date: bool) -> tuple[str, str]:
    """("07-01 14:30" or "14:30" in UTC, "09:30" at the exchange), for two lines of a tick."""
    utc = datetime.fromtimestamp(t_ms / 1000, UTC)
    local = utc.astimezone(EXCHANGE_TZ)
    return utc.strftime("%m-%d %H:%M" if with_date else "%H:%M"), local.strftime("%H:%M")


def time_axis(frame: Frame, x: Scale) -> list[str]:
    """Ticks with UTC above and exchange time below, the date where a UTC day starts (and
    at the first tick); ticks a day or more apart show the date alone. The two lines are
    named left of the axis."""
    parts = [
        line(frame.x0, frame.y0, frame.x1, frame.y0, "axis"),
        text(frame.x0 - 6, frame.y0 + 16, "UTC", "tick time-utc", "end"),
        text(frame.x0 - 6, frame.y0 + 30, EXCHANGE_LABEL, "tick time-exchange", "end"),
    ]
    ticks, step = time_ticks(int(x.lo), int(x.hi))
    last_day = None
    for t in ticks:
        day = t // MS_PER_DAY
        top, local = time_label(t, with_date=day != last_day)
        if step >= MS_PER_DAY:
            top, local = top.split()[0], ""
        last_day = day
        px = x(t)
        anchor = tick_anchor(px, frame)
        parts.append(line(px, frame.y0, px, frame.y0 + 4, "axis"))
        parts.append(text(px, frame.y0 + 16, top, "tick time-utc", anchor))
        parts.append(text(px, frame.y0 + 30, local, "tick time-exchange", anchor))
    return parts


def tick_anchor(px: float, frame: Frame) -> str:
    """Labels near the axis's ends are aligned inward: clear of the "UTC" name on the left,
    inside the drawing on the right."""
    if px - frame.x0 < LABEL_HALF_WIDTH:
        return "start"
    return "end" if frame.x1 - px < LABEL_HALF_WIDTH else "middle"


def value_axis(frame: Frame, y: Scale, fmt: Callable[[float], str]) -> list[str]:
    parts = [line(frame.x0, frame.y0, frame.x0, frame.y1, "axis")]
    for v in nice_ticks(min(y.lo, y.hi), max(y.lo, y.hi)):
        py = y(v)
        parts.append(line(frame.x0, py, frame.x1, py, "grid"))
        parts.append(text(frame.x0 - 6, py + 4, fmt(v), "tick value", "end"))
    return parts


def path_d(points: Sequence[tuple[float, float]]) -> str:
    return "M" + " L".join(f"{px:.1f},{py:.1f}" for px, py in points)


def polygon(points: Sequence[tuple[float, float]], cls: str) -> str:
    coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    return f'<polygon class="{cls}" points="{coords}"/>'


def line(xa: float, ya: float, xb: float, yb: float, cls: str) -> str:
    return f'<line class="{cls}" x1="{xa:.1f}" y1="{ya:.1f}" x2="{xb:.1f}" y2="{yb:.1f}"/>'


def text(px: float, py: float, content: str, cls: str, anchor: str = "start") -> str:
    return (
        f'<text class="{cls}" x="{px:.1f}" y="{py:.1f}" text-anchor="{anchor}">'
        f"{escape(content)}</text>"
    )


def svg(frame: Frame, parts: Sequence[str], cls: str, label: str) -> str:
    return (
        f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{escape(label)}" viewBox="0 0 {frame.width} {frame.height}" '
        f'width="{frame.width}" height="{frame.height}">{"".join(parts)}</svg>'
    )


def time_series_chart(
    series: Sequence[tuple[int, float]],
    label: str,
    reference: float | None = None,
    fmt: Callable[[float], str] = "{:.0%}".format,
) -> str:
    """A line over a time axis (epoch ms), split where a point is missing (NaN), with an
    optional dashed reference level (nominal coverage)."""
    frame = Frame()
    if not series:
        return svg(frame, [text(frame.x0, frame.y1 + 16, "no data", "empty")], "chart", label)
    values = [v for _, v in series if not math.isnan(v)] + ([reference] if reference else [])
    x = Scale(series[0][0], series[-1][0], frame.x0, frame.x1)
    y = Scale(*padded(min(values, default=0.0), max(values, default=1.0)), frame.y0, frame.y1)
    parts = [*value_axis(frame, y, fmt), *time_axis(frame, x)]
    if reference is not None:
        parts.append(line(frame.x0, y(reference), frame.x1, y(reference), "reference"))
    run: list[tuple[float, float]] = []
    for t, v in [*series, (0, math.nan)]:
        if math.isnan(v):
            if run:
                parts.append(f'<path class="series" d="{path_d(run)}"/>')
            run = []
        else:
            run.append((x(t), y(v)))
    return svg(frame, parts, "chart", label)


def bar_chart(bars: Sequence[tuple[str, float]], label: str, fmt: Callable[[float], str]) -> str:
    """Labelled vertical bars from zero."""
    frame = Frame(height=220, bottom=28)
    top = max((v for _, v in bars), default=1.0) or 1.0
    y = Scale(0.0, top * 1.1, frame.y0, frame.y1)
    width = (frame.x1 - frame.x0) / max(len(bars), 1)
    parts = value_axis(frame, y, fmt)
    for i, (name, value) in enumerate(bars):
        px = frame.x0 + i * width
        parts.append(
            f'<rect class="bar" x="{px + width * 0.15:.1f}" y="{y(value):.1f}" '
            f'width="{width * 0.7:.1f}" height="{frame.y0 - y(value):.1f}">'
            f"<title>{escape(name)}: {escape(fmt(value))}</title></rect>"
        )
        parts.append(text(px + width / 2, frame.y0 + 16, name, "tick", "middle"))
    return svg(frame, parts, "chart", label)
