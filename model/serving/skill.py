"""Skill: how much better the model forecasts than a baseline, here and now, and how sure that is.

skill = 1 - pinball(model) / pinball(baseline) over the same scored forecasts (their mean
pinball over quantiles and horizons, or at one horizon): 0.05 is a model 5 % better, -0.1 one
10 % worse. Its interval is a circular block bootstrap's (Politis & Romano 1992): consecutive
forecasts' labels share bars (a 10-minute label overlaps the next nine), so the losses are
resampled in blocks of `BLOCK` consecutive forecasts, the blocks' starts drawn with replacement
and a block wrapping round past the newest forecast to the oldest (so that the newest weigh in a
resample as much as the others, not less: they are what "now" is), and the
`LEVEL` interval is the resampled ratios' central quantiles. The draws are a fixed function of
the number of forecasts (a seeded generator), so an interval is a function of the losses alone:
a restarted worker computes the same one. Block sums come from prefix sums, so a resample costs
one gather per block, not per forecast.

Pooled over symbols (the `barcast_forecast_skill` gauges), the symbols' windows are aligned by
age, newest first, and resampled jointly, block by block: a market-wide hour is drawn for every
symbol at once, as it happened.

Which forecast a symbol serves (`ServeChoice`): with `ServeMode.AUTO` the model, unless its
rolling skill interval against the best baseline lies wholly below zero; then that baseline,
until the model's skill estimate is back at zero or above (the gap between the two is the
hysteresis: a model about as good as the baseline does not flap between them). The choice is
revisited every `BLOCK` scored forecasts of the symbol, and a choice made on the score of the
forecast of bar s serves the forecasts of bars from s + H + 1 minutes on, as the online
calibration's updates do (model.serving.conformal): the choice for a forecast depends on the
bars and forecasts before it, never on how scoring interleaved with forecasting.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

import numpy as np

from model.covariates import NS_PER_MIN
from model.serving.baselines import BASELINES

BLOCK = 20  # forecasts per bootstrap block: two labels' length of overlapping minutes
RESAMPLES = 200
LEVEL = 0.9
MIN_SCORED = 2 * BLOCK  # scored forecasts a skill interval needs
# Skill within this of 0 is rounding (the model's float32 quantiles against a baseline's
# float64 ones), not a difference: a model that forecasts what a baseline does is not worse.
TIE = 1e-4
SEED = 20240101
MODEL = "model"  # a forecast's `source` when the model made it
TRACKS = (MODEL, *BASELINES)  # a window's columns: the model's, then each baseline's losses


class ServeMode(StrEnum):
    """BARCAST_SERVE: what a symbol's published forecasts come from."""

    MODEL = "model"
    BASELINE = "baseline"  # the best baseline's, always
    AUTO = "auto"  # the model's, unless its skill is clearly below zero


class Skill(NamedTuple):
    skill: float
    lower: float
    upper: float
    n: int  # scored forecasts it is over


@functools.lru_cache(maxsize=64)
def block_starts(n: int) -> np.ndarray:
    """`(RESAMPLES, ceil(n / BLOCK))` block starts in [0, n): the same for every n."""
    rng = np.random.default_rng([SEED, n])
    starts = rng.integers(0, n, size=(RESAMPLES, -(-n // BLOCK)))
    starts.flags.writeable = False
    return starts


def block_sums(losses: np.ndarray) -> np.ndarray:
    """`(..., n)` sums of the BLOCK consecutive losses from each one along the last axis, the
    last ones wrapping round to the first."""
    wrapped = np.concatenate([losses, losses[..., : BLOCK - 1]], -1)
    prefix = np.concatenate([np.zeros((*losses.shape[:-1], 1)), np.cumsum(wrapped, -1)], -1)
    return prefix[..., BLOCK:] - prefix[..., :-BLOCK]


def skill_interval(model: np.ndarray, baseline: np.ndarray) -> Skill | None:
    """The skill of `model`'s losses over `baseline`'s `(n,)` (paired, in time order) and its
    bootstrap interval; None under MIN_SCORED forecasts or a baseline that never lost."""
    n = len(model)
    total = float(baseline.sum())
    if n < MIN_SCORED or not total > 0:
        return None
    starts = block_starts(n)
    resampled_model = block_sums(model)[starts].sum(1)
    resampled_baseline = block_sums(baseline)[starts].sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = 1.0 - resampled_model / resampled_baseline
    lower, upper = np.nanquantile(ratios, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return Skill(1.0 - float(model.sum()) / total, float(lower), float(upper), n)


@dataclass(eq=False)
class SkillWindow:
    """A symbol's last `size` scored forecasts: per horizon, each track's (TRACKS) pinball
    averaged over quantiles, NaN where a baseline had no forecast (its EWMAs warming up)."""

    size: int
    count: int = 0  # forecasts appended ever
    losses: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, len(TRACKS))))

    def append(self, row: np.ndarray) -> int:
        """A scored forecast's `(H, len(TRACKS))` losses; returns its slot."""
        if self.losses.shape[1] != row.shape[0]:
            self.losses = np.full((self.size, row.shape[0], len(TRACKS)), np.nan)
        slot = self.count % self.size
        self.losses[slot] = row
        self.count += 1
        return slot

    def rows(self) -> range:
        return range(max(0, self.count - self.size), self.count)

    def ordered(self) -> np.ndarray:
        """`(n, H, len(TRACKS))` oldest first."""
        n, slot = len(self.rows()), self.count % self.size
        if n < self.size:
            return self.losses[:n]
        return np.concatenate([self.losses[slot:], self.losses[:slot]])

    def skill(self, baseline: str) -> Skill | None:
        """The model's skill over `baseline` on the forecasts both scored, horizons averaged."""
        losses = self.ordered().mean(axis=1)
        model, other = losses[:, 0], losses[:, TRACKS.index(baseline)]
        both = np.isfinite(other)
        return skill_interval(model[both], other[both])

    def best_baseline(self) -> str:
        """The baseline with the least pinball where all were scored (the first, before)."""
        losses = self.ordered().mean(axis=1)[:, 1:]
        scored = np.isfinite(losses).all(axis=1)
        if not scored.any():
            return BASELINES[0]
        return BASELINES[int(np.argmin(losses[scored].sum(axis=0)))]

    def slot_bytes(self, slot: int) -> bytes:
        return self.losses[slot].astype("<f8").tobytes()

    def load_slot(self, slot: int, data: bytes, horizons: int) -> None:
        if self.losses.shape[1] != horizons:
            self.losses = np.full((self.size, horizons, len(TRACKS)), np.nan)
        self.losses[slot] = np.frombuffer(data, dtype="<f8").reshape(horizons, len(TRACKS))

    def slot_of(self, row: int) -> int:
        return row % self.size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SkillWindow):
            return NotImplemented
        return (self.size, self.count) == (other.size, other.count) and np.array_equal(
            self.ordered(), other.ordered(), equal_nan=True
        )


def pooled_skill(windows: list[SkillWindow]) -> dict[tuple[int, str], Skill]:
    """Per (horizon, baseline): the model's skill over the symbols' windows together and its
    interval, the windows aligned by age and resampled jointly (none under MIN_SCORED)."""
    ordered = [w.ordered()[::-1] for w in windows if w.count]  # newest first
    if not ordered:
        return {}
    depth, horizons = max(len(o) for o in ordered), max(o.shape[1] for o in ordered)
    model = np.zeros((len(BASELINES), horizons, depth))
    baseline = np.zeros_like(model)
    for losses in ordered:
        n, h = losses.shape[:2]
        for j in range(len(BASELINES)):
            other = losses[:, :, 1 + j].T  # (h, n)
            both = np.isfinite(other)
            model[j, :h, :n] += np.where(both, losses[:, :, 0].T, 0.0)
            baseline[j, :h, :n] += np.where(both, other, 0.0)
    out = {}
    for j, name in enumerate(BASELINES):
        for h in range(horizons):
            # oldest first again, as skill_interval reads a series
            found = skill_interval(model[j, h, ::-1], baseline[j, h, ::-1])
            if found is not None:
                out[(h + 1, name)] = found
    return out


@dataclass
class ServeChoice:
    """What a symbol serves (`source`: MODEL or a baseline) and the choices made but not yet
    in force: (from ts, source), oldest first."""

    source: str = MODEL
    due: list[tuple[int, str]] = field(default_factory=list)

    def at(self, ts_event: int, mode: ServeMode) -> str:
        """The source of the forecast of bar `ts_event`: the choices due by then in force (a
        mode other than the one they were made in overrides them until revisited)."""
        while self.due and self.due[0][0] <= ts_event:
            self.source = self.due.pop(0)[1]
        if mode is ServeMode.MODEL:
            return MODEL
        if mode is ServeMode.BASELINE and self.source == MODEL:
            return BASELINES[0]
        return self.source

    def revisit(
        self, window: SkillWindow, mode: ServeMode, ts_event: int, horizon: int
    ) -> str | None:
        """After the score of the forecast of bar `ts_event` went into `window`: every BLOCK
        scored forecasts, the choice `mode` makes, in force from ts_event + horizon + 1
        minutes; the new source if it changes."""
        if mode is ServeMode.MODEL or window.count % BLOCK:
            return None
        current = self.due[-1][1] if self.due else self.source
        best = window.best_baseline()
        if mode is ServeMode.BASELINE:
            chosen = best
        else:
            skill = window.skill(best if current == MODEL else current)
            if skill is None:
                chosen = current
            elif current == MODEL:
                chosen = best if skill.upper < -TIE else MODEL
            else:
                chosen = MODEL if skill.skill >= -TIE else current
        if chosen == current:
            return None
        self.due.append((ts_event + (horizon + 1) * NS_PER_MIN, chosen))
        return chosen
