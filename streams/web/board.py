"""The live page's board: each symbol's last hours of closes, forecasts and scores, fed in
process by the worker (the observer protocol of streams.runtime.observers), and the JSON view
that `/api/forecasts` serves and streams.web.render draws.

Pure: no Faust, no Kafka. Memory is bounded per symbol: at most HISTORY_MINUTES closes, one past
fan per FAN_EVERY_MINUTES of them plus the latest, and SCORE_WINDOW scored forecasts. Times in
the view are epoch milliseconds (UTC): JavaScript reads nanoseconds since 1970 inexactly.
"""

from __future__ import annotations

import re
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from features.bars import PRICE_SCALE
from model.covariates import NS_PER_DAY
from model.serving.baselines import BASELINES
from model.serving.scoring_state import STALE_NS
from model.serving.skill import MODEL, skill_interval
from streams.web.score_summary import ScoreSummary, summarize_score

# The page's history length and score window are constants here, not BARCAST_* settings.
HISTORY_MINUTES = 240
FAN_EVERY_MINUTES = 30
SCORE_WINDOW = 600
MODELS_KEPT = 16
# Cards drawn per request, at most: a card costs the event loop milliseconds, so a page of a
# thousand symbols, refreshed every few seconds, would hold the loop most of the time and delay
# the forecasts it shows.
MAX_SHOWN = 24
NS_PER_MS = 1_000_000
NS_PER_MIN = 60_000_000_000
PRICE_PREFIX = "price_"
QUANTILE_NAME = re.compile(r"q\d\d")  # price_q10, not other price fields


class Fan(TypedDict):
    t_ms: int  # the bar the forecast was made at
    close: float
    steps_ms: list[int]  # the bar time of each horizon
    low: list[float]  # prices of the lowest quantile (q10), per horizon
    median: list[float]
    high: list[float]  # prices of the highest quantile (q90)
    model_id: str
    source: str  # `model`, or the shadow baseline it came from


class SkillFigure(TypedDict):
    skill: float  # 1 - pinball(model) / pinball(baseline) over `forecasts` scored forecasts
    lower: float  # its 90 % circular block bootstrap interval (model.serving.skill)
    upper: float
    forecasts: int


class RollingScores(TypedDict):
    forecasts: int  # scored forecasts among the last SCORE_WINDOW decided
    labels: int  # (forecast, horizon) labels scored
    coverage: float | None  # fraction of labels inside [low, high]
    pinball: float | None  # mean pinball loss, basis points of log return
    unscored: dict[str, int]  # forecasts not scored, by reason
    skill: dict[str, SkillFigure]  # per shadow baseline, once enough forecasts were scored


class SymbolView(TypedDict):
    symbol: str
    segments: list[list[tuple[int, float]]]  # closes (t_ms, price), split at session breaks
    fans: list[Fan]  # past fans, oldest first
    latest: Fan | None
    model_id: str | None
    source: str | None  # the latest forecast's
    model_age_s: float | None  # since this board first saw the model
    forecast_age_s: float | None  # since the latest forecast arrived
    scores: RollingScores


class BoardView(TypedDict):
    now_ms: int
    quantiles: list[str]  # names of the low, median and high quantiles drawn
    history_minutes: int
    scores_seen: bool
    lag: dict[str, int]  # consumer lag per topic, summed over partitions
    symbols: list[SymbolView]  # those shown: the ones asked for, or the first by name
    others: list[str]  # the board's symbols not shown, by name
    not_found: list[str]  # asked for, but not on the board


@dataclass
class SymbolBoard:
    closes: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=HISTORY_MINUTES))
    fans: deque[Fan] = field(
        default_factory=lambda: deque(maxlen=HISTORY_MINUTES // FAN_EVERY_MINUTES + 1)
    )
    # The latest forecast, drawn (`latest`) when the page asks: a burst's thousand forecasts are
    # each held, not drawn, on the event loop
    latest_value: Mapping[str, Any] | None = None
    latest_fan: Fan | None = None
    latest_seen_ns: int = 0
    scores: deque[ScoreSummary] = field(default_factory=lambda: deque(maxlen=SCORE_WINDOW))
    observed: int = 0  # scores ever observed: `skill` is of the scores at that count
    skill: tuple[int, dict[str, SkillFigure]] = (0, {})

    def last_ts(self) -> int:
        """The event time of its newest bar or forecast (-1: none): a forecast worker of its
        own (BARCAST_ROLE=forecast) sees no bar."""
        close = self.closes[-1][0] if self.closes else -1
        value = self.latest_value
        return max(close, -1 if value is None else int(value["ts_event"]))

    @property
    def latest(self) -> Fan | None:
        if self.latest_fan is None and self.latest_value is not None:
            self.latest_fan = fan_of(self.latest_value)
        return self.latest_fan


class Board:
    """What the page shows; implements the worker's observer protocol."""

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self.clock = clock
        self.symbols: dict[str, SymbolBoard] = {}
        self.models: dict[str, int] = {}  # model id -> when first seen (wall ns)
        self.quantiles: list[str] = []
        self.scores_seen = False
        self.swept_day = 0  # the event day of the newest bar: symbols gone stale leave then

    def observe_bar(self, clean_bar_value: Mapping[str, Any]) -> None:
        board = self._symbol(clean_bar_value["symbol"])
        ts = int(clean_bar_value["ts_event"])
        if board.closes and ts <= board.closes[-1][0]:
            return  # a repeat after a restart: the board already holds it
        board.closes.append((ts, clean_bar_value["close"] * PRICE_SCALE))
        cutoff = ts - HISTORY_MINUTES * NS_PER_MIN
        while board.closes[0][0] <= cutoff:
            board.closes.popleft()
        self._sweep(ts)

    def _sweep(self, ts: int) -> None:
        """Once an event day: the symbols without a bar or forecast for `STALE_NS` leave the
        page; an expired contract's card would otherwise stay, and be drawn every refresh, for
        as long as the worker runs."""
        if ts // NS_PER_DAY <= self.swept_day:
            return
        self.swept_day, since = ts // NS_PER_DAY, ts - STALE_NS
        for symbol in [s for s, b in self.symbols.items() if b.last_ts() < since]:
            del self.symbols[symbol]

    def observe_forecast(self, forecast_value: Mapping[str, Any]) -> None:
        """The symbol's latest forecast, kept as it is: its fan is drawn once the page asks, or
        now if it is one of the past fans kept. A model's first forecast names the quantiles
        drawn (its later ones have the same fields)."""
        board = self._symbol(forecast_value["symbol"])
        t_ns, model_id = int(forecast_value["ts_event"]), str(forecast_value["model_id"])
        if model_id not in self.models:
            self.quantiles = quantile_names(forecast_value)
        t_ms, latest = t_ns // NS_PER_MS, board.latest_value
        if latest is not None and t_ms < int(latest["ts_event"]) // NS_PER_MS:
            return
        self.models.setdefault(model_id, self.clock())
        while len(self.models) > MODELS_KEPT:
            del self.models[next(iter(self.models))]
        board.latest_value, board.latest_fan = forecast_value, None
        board.latest_seen_ns = self.clock()
        self._sweep(t_ns)
        if t_ns // NS_PER_MIN % FAN_EVERY_MINUTES == 0 and not (
            board.fans and board.fans[-1]["t_ms"] == t_ms
        ):
            board.fans.append(board.latest)  # type: ignore[arg-type]  # just set

    def observe_score(self, score_value: Mapping[str, Any]) -> None:
        self.scores_seen = True
        board = self._symbol(score_value["symbol"])
        board.scores.append(summarize_score(score_value))
        board.observed += 1

    def view(
        self, lag: Mapping[str, int] | None = None, asked: Sequence[str] | None = None
    ) -> BoardView:
        """The view of the symbols `asked` for (none asked: the first by name), MAX_SHOWN at
        most: `head` and each shown symbol's `symbol_view`."""
        return self.head(lag, asked) | {
            "symbols": [self.symbol_view(name) for name in self.shown(asked)]
        }

    def head(
        self, lag: Mapping[str, int] | None = None, asked: Sequence[str] | None = None
    ) -> BoardView:
        """The view with `symbols` empty, for a caller that views them one at a time."""
        shown = set(self.shown(asked))
        return {
            "now_ms": self.clock() // NS_PER_MS,
            "quantiles": self.quantiles,
            "history_minutes": HISTORY_MINUTES,
            "scores_seen": self.scores_seen,
            "lag": dict(sorted((lag or {}).items())),
            "symbols": [],
            "others": sorted(name for name in self.symbols if name not in shown),
            "not_found": [name for name in dict.fromkeys(asked or []) if name not in self.symbols],
        }

    def shown(self, asked: Sequence[str] | None = None) -> list[str]:
        """The symbols a view shows: those `asked` for that the board holds, in that order, or
        none asked, the first by name; MAX_SHOWN at most."""
        names = [n for n in dict.fromkeys(asked) if n in self.symbols] if asked else None
        return (sorted(self.symbols) if names is None else names)[:MAX_SHOWN]

    def symbol_view(self, symbol: str) -> SymbolView:
        """One symbol's view, now."""
        return self._symbol_view(symbol, self.symbols[symbol], self.clock())

    def _symbol(self, symbol: str) -> SymbolBoard:
        board = self.symbols.get(symbol)  # not setdefault: a new board each bar costs a burst
        if board is None:
            board = self.symbols[symbol] = SymbolBoard()
        return board

    def _symbol_view(self, symbol: str, board: SymbolBoard, now: int) -> SymbolView:
        first = board.closes[0][0] if board.closes else 0
        latest = board.latest
        model_seen = self.models.get(latest["model_id"]) if latest else None
        return {
            "symbol": symbol,
            "segments": segments(list(board.closes)),
            "fans": [f for f in board.fans if f["t_ms"] * NS_PER_MS >= first and f is not latest],
            "latest": latest,
            "model_id": latest["model_id"] if latest else None,
            "source": latest["source"] if latest else None,
            "model_age_s": (now - model_seen) / 1e9 if model_seen is not None else None,
            "forecast_age_s": (now - board.latest_seen_ns) / 1e9 if latest else None,
            "scores": rolling(board.scores) | {"skill": self._skill(board)},
        }

    def _skill(self, board: SymbolBoard) -> dict[str, SkillFigure]:
        """The symbol's skill over each baseline, computed again only once new scores came."""
        if board.skill[0] != board.observed:
            board.skill = (board.observed, skill_figures(board.scores))
        return board.skill[1]


def quantile_names(forecast_value: Mapping[str, Any]) -> list[str]:
    """The lowest, median and highest quantile of a forecast (`q10`, `q50`, `q90`)."""
    names = sorted(
        name
        for k in forecast_value
        if k.startswith(PRICE_PREFIX) and QUANTILE_NAME.fullmatch(name := k[len(PRICE_PREFIX) :])
    )
    if "q50" not in names or len(names) < 3:
        raise ValueError(
            f"forecast for {forecast_value.get('symbol')!r} holds price quantiles {names}; "
            "the page needs a median (price_q50) and one quantile either side"
        )
    return [names[0], "q50", names[-1]]


def fan_of(forecast_value: Mapping[str, Any]) -> Fan:
    low, median, high = (PRICE_PREFIX + name for name in quantile_names(forecast_value))
    t_ns = int(forecast_value["ts_event"])
    return {
        "t_ms": t_ns // NS_PER_MS,
        "close": float(forecast_value["close"]),
        "steps_ms": [(t_ns + h * NS_PER_MIN) // NS_PER_MS for h in forecast_value["horizons"]],
        "low": list(forecast_value[low]),
        "median": list(forecast_value[median]),
        "high": list(forecast_value[high]),
        "model_id": str(forecast_value["model_id"]),
        "source": str(forecast_value.get("source", MODEL)),  # a barcast before: the model
    }


def segments(closes: list[tuple[int, float]]) -> list[list[tuple[int, float]]]:
    """Closes split wherever the next bar is more than a minute later: a session break (gap
    fills close the short gaps inside a session), where no line may be drawn."""
    out: list[list[tuple[int, float]]] = []
    previous = None
    for ts, close in closes:
        if previous is None or ts - previous > NS_PER_MIN:
            out.append([])
        out[-1].append((ts // NS_PER_MS, close))
        previous = ts
    return out


def skill_figures(scores: deque[ScoreSummary]) -> dict[str, SkillFigure]:
    """Per baseline, the model's skill over the scored forecasts both have a loss for."""
    losses = np.array([s.losses for s in scores if s.losses])
    out: dict[str, SkillFigure] = {}
    for j, name in enumerate(BASELINES, start=1):
        if not len(losses):
            break
        both = np.isfinite(losses[:, j])
        found = skill_interval(losses[both, 0], losses[both, j])
        if found is not None:
            out[name] = {
                "skill": found.skill,
                "lower": found.lower,
                "upper": found.upper,
                "forecasts": found.n,
            }
    return out


def rolling(scores: deque[ScoreSummary]) -> RollingScores:
    labels = sum(s.labels for s in scores)
    unscored = Counter(s.unscored for s in scores if s.unscored is not None)
    return {
        "forecasts": sum(1 for s in scores if s.unscored is None),
        "labels": labels,
        "coverage": sum(s.inside for s in scores) / labels if labels else None,
        "pinball": sum(s.pinball_sum for s in scores) / labels if labels else None,
        "unscored": dict(sorted(unscored.items())),
        "skill": {},
    }
