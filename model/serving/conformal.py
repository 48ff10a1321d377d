"""Online calibration of the q10/q90 offsets, per symbol and horizon, from scored forecasts.

Pure: no Faust, no Kafka. The method is quantile tracking, the P part of conformal PID control
(Angelopoulos, Candès & Tibshirani 2023), on the logarithm of a scale of each quantile's gap
from q50: q10' = q50 + exp(a) (q10 - q50), q90' = q50 + exp(b) (q90 - q50), and after each
scored forecast, at every horizon,

    a += step * (1[y < q10'] - 0.1),    b += step * (1[y > q90'] - 0.1).

Why this and not adaptive conformal inference (Gibbs & Candès 2021): ACI moves the *level* of a
quantile of past conformity scores, so it must keep a window of scores per symbol and horizon
and sort it on every forecast, and its correction is only as good as that window is exchangeable
with now; tracking moves the quantile itself, holds two floats per horizon and costs O(1). Its
guarantee is ACI's, whatever the data: with a fixed step the steps add up to the drift of a,
a_n - a_0 = step x (misses - 0.1 n), so each tail's miss rate over any n forecasts is within
(range of a) / (step x n) of 10 %. Why a scale in log space, not an additive offset (conformalized
quantile regression): intraday volatility varies several-fold over a day (the Asian night
against the US open), and an offset sized for the average would widen the quiet minutes and
narrow the busy ones; the model's interval already follows the time of day, so what drifts is
its ratio to the truth, and a multiplicative error is additive in log space, where the same step
fits a 0.5x and a 2x miscalibration. Each tail is tracked on its own (10 % below q10, 10 % above
q90): a skewed error is then fixed where it is, and the median is left as forecast.

The step decays from `step` as step / sqrt(1 + n / `settle`) to `floor` (n scored forecasts of
the symbol): large steps correct a miscalibrated checkpoint within a few hundred forecasts, then
a small one keeps the scale from chasing noise (decaying steps for online conformal prediction:
Angelopoulos, Barber & Bates 2024). The floor can be small because the model's quantiles are
already in units of a causal volatility estimate (`model.volatility`) and follow a volatility
shock by themselves; what is left to track is the slow drift of their ratio to the truth. A
scored forecast of bar s updates the state of forecasts of bars t >= s + H + 1 minutes only: its
label is decided by the bar of s + H, and a bar is scored after its own minute's forecasts (the
forecast stage scores in the quiet after a burst, streams.runtime.stages.scores), so a score
waits one minute longer than its label requires, little beside the H minutes every score
waits. The calibrated forecast of t is then a function of the bars and forecasts before t and
of the model's forecast of t, never of how scores and forecasts interleaved in a worker. A
checkpoint swap (another `model_id`) starts the symbol afresh, from the first forecast after it:
a score of an earlier forecast never counts, not even once a rolled-back model serves again
(whether it reached the calibration before or after the swap would otherwise decide). Turned
off, `apply` returns its input unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from model.covariates import NS_PER_MIN
from model.serving.scoring import LOWER, QUANTILES, UPPER, ScoreValue
from model.serving.scoring_state import Scorer

SCHEMA_VERSION = 2  # 1: the `forecasts` value without calibration fields
MISS = 0.1  # nominal miss rate of each tail of the 80 % interval
MAX_LOG_SCALE = math.log(10.0)  # a scale past 10x (or 1/10) is a broken model, not drift


@dataclass(frozen=True)
class CalibrationConfig:
    enabled: bool = True
    step: float = 0.2
    settle: float = 20.0
    floor: float = 0.005

    def step_after(self, n: int) -> float:
        return max(self.floor, self.step / math.sqrt(1.0 + n / self.settle))


@dataclass
class SymbolCalibration:
    """One symbol's log scales `[a, b]` per horizon and the scores not yet due."""

    model_id: str | None = None
    since: int | None = None  # ts of `model_id`'s first forecast since the symbol started afresh
    log_scale: list[list[float]] = field(default_factory=list)
    n: int = 0  # scored forecasts applied
    # (due ts, below_q10, above_q90): tuples, which the garbage collector stops tracking
    # (model.serving.scoring_state); the log scales are updated in place for the same reason.
    waiting: list[tuple[int, tuple[bool, ...], tuple[bool, ...]]] = field(default_factory=list)

    def update(self, record: ScoreValue) -> None:
        """Queue a scored forecast of this symbol; unscored ones, other models' and those from
        before the calibration started afresh are ignored."""
        if record["unscored"] is not None or record["model_id"] != self.model_id:
            return
        if self.since is not None and record["ts_event"] < self.since:
            return
        due = record["ts_event"] + (max(record["horizons"]) + 1) * NS_PER_MIN
        self.waiting.append((due, tuple(record["below_q10"]), tuple(record["above_q90"])))

    def apply(self, value: dict[str, Any], config: CalibrationConfig) -> dict[str, Any]:
        """The `forecasts` value with calibrated quantiles, the raw ones and `schema_version`."""
        if not config.enabled:
            return value
        lower, upper = self.calibrate(
            value["model_id"], int(value["ts_event"]), value["q50"], value[LOWER], value[UPPER],
            config,
        )  # fmt: skip
        close, exp = value["close"], math.exp
        out = value | {LOWER: lower, UPPER: upper}
        out["price_" + LOWER] = [close * exp(q) for q in lower]
        out["price_" + UPPER] = [close * exp(q) for q in upper]
        out.update({"raw_" + name: value[name] for name in QUANTILES})
        out["schema_version"] = SCHEMA_VERSION
        return out

    def calibrate(
        self,
        model_id: str,
        ts_event: int,
        median: Sequence[float],
        lower: Sequence[float],
        upper: Sequence[float],
        config: CalibrationConfig,
    ) -> tuple[list[float], list[float]]:
        """A forecast's q10 and q90 per horizon calibrated (the scores due by `ts_event` in);
        another `model_id` than the last one's starts the symbol afresh."""
        if model_id != self.model_id:  # another checkpoint: its own calibration
            self.model_id, self.since = model_id, ts_event
            self.log_scale, self.n, self.waiting = [], 0, []
        if self.waiting and self.waiting[0][0] <= ts_event:
            self._catch_up(ts_event, config)
        horizons = len(median)
        if len(self.log_scale) != horizons:
            self.log_scale += [[0.0, 0.0] for _ in range(horizons - len(self.log_scale))]
        scales = self.log_scale if len(self.log_scale) == horizons else self.log_scale[:horizons]
        # Plain floats, not numpy: numpy's per-call cost dominates on a handful of horizons.
        exp = math.exp
        return (
            [m + exp(s[0]) * (q - m) for s, m, q in zip(scales, median, lower, strict=True)],
            [m + exp(s[1]) * (q - m) for s, m, q in zip(scales, median, upper, strict=True)],
        )

    def _catch_up(self, ts: int, config: CalibrationConfig) -> None:
        top = MAX_LOG_SCALE
        while self.waiting and self.waiting[0][0] <= ts:
            _, below, above = self.waiting.pop(0)
            step = config.step_after(self.n)
            n = len(below)
            self.log_scale += [[0.0, 0.0] for _ in range(n - len(self.log_scale))]
            # step * (miss - MISS) for a miss of True or False; clipped only when past the
            # bound, by comparisons (a thousand symbols' catch-ups run in every burst)
            moves = (step * (False - MISS), step * (True - MISS))
            for pair, low, high in zip(self.log_scale[:n], below, above, strict=True):
                a, b = pair[0] + moves[low], pair[1] + moves[high]
                pair[0] = a if -top <= a <= top else math.copysign(top, a)
                pair[1] = b if -top <= b <= top else math.copysign(top, b)
            self.n += 1

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.__dict__)

    @classmethod
    def from_bytes(cls, data: bytes) -> SymbolCalibration:
        values = orjson.loads(data)
        values["waiting"] = [(due, tuple(low), tuple(high)) for due, low, high in values["waiting"]]
        return cls(**values)


class Calibrator:
    """Every symbol's calibration in one process (offline runs, tests; the worker keeps each
    `SymbolCalibration` in a store keyed by symbol instead: streams.runtime.stages.scores)."""

    def __init__(self, config: CalibrationConfig | None = None) -> None:
        self.config = config or CalibrationConfig()
        self.symbols: dict[str, SymbolCalibration] = {}

    def state(self, symbol: str) -> SymbolCalibration:
        return self.symbols.setdefault(symbol, SymbolCalibration())

    def apply(self, value: dict[str, Any]) -> dict[str, Any]:
        return self.state(value["symbol"]).apply(value, self.config)

    def update(self, records: list[ScoreValue]) -> None:
        for record in records:
            self.state(record["symbol"]).update(record)


def calibrate_offline(
    forecasts: list[dict[str, Any]], clean_bars: list[dict[str, Any]], config: CalibrationConfig
) -> list[dict[str, Any]]:
    """The `forecasts` values the worker publishes for the model's values `forecasts` and the
    `bars.clean` values (each symbol's in ts order), from the whole histories at once: bar t
    reaches the scorer before the forecast of t is calibrated, then scored. The order is the
    bars'; any other the worker runs in gives the same values (`SymbolCalibration`)."""
    scorer, calibrator = Scorer(), Calibrator(config)
    by_key = {(value["symbol"], value["ts_event"]): value for value in forecasts}
    out = []
    for bar in clean_bars:
        calibrator.update(scorer.on_bar(bar))
        value = by_key.get((bar["symbol"], bar["ts_event"]))
        if value is not None:
            value = calibrator.apply(value)
            calibrator.update(scorer.on_forecast(value))
            out.append(value)
    return out
