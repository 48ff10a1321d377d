"""Causal volatility of 1-minute returns: a time-of-day profile and EWMA variances.

Intraday volatility has a strong daily shape (the US open is several times the Asian night), so
a forecast's scale must know the minute it is made at and the minutes it covers. The profile
holds each bucket's RMS 1-bar return relative to the overall RMS, fitted on training bars; the
variance of a k-bar return from a standardized variance v is v * sum of the profile squared over
the k bars ahead. Both the volatility baselines and the TFT's output scale are built from it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from typing import Any, Protocol

import numpy as np
import pandas as pd
from numba import njit

from features.core import EWMA_SLOW
from model.covariates import EXCHANGE_TZ, NS_PER_MIN

MINUTES_PER_DAY = 1440
PROFILE_BUCKET_MINUTES = 15
SCALE_FEATURE = "ewma_vol_slow"  # sqrt(EWMA of r²), bias-corrected (FEATURES.md)
SCALE_LAMBDA = EWMA_SLOW  # that feature's decay: the profile is averaged with the same weights
# What the scale reads of each window row: the return, the minute of day, gaps, the slow EWMA,
# and (last row only) the day and week EWMAs, the slow components of a HAR model.
SCALE_INPUTS = (
    "ret_1",
    "tod_sin",
    "tod_cos",
    "bar_gap_log",
    SCALE_FEATURE,
    "ewma_vol_day",
    "ewma_vol_week",
)
SCALE_HALFLIFE = 30.0  # bars: an untrained checkpoint's
# What `VolatilityScale.fit` chooses from: the blend's weight on the time-of-day EWMA (1: the
# whole daily shape; a few weeks of bars overstate it) and both EWMAs' half-lives (bars).
SCALE_WEIGHTS = (0.2, 0.4, 0.6, 0.8, 1.0)
SCALE_HALFLIVES = (60.0, 120.0, 240.0)
SCALE_FLAT_HALFLIVES = (10.0, 30.0, 60.0)
# The long memory's weights in the daily-shaped level (day, week), a grid on the simplex with the
# window's time-of-day EWMA taking the rest.
SCALE_MEMORY = tuple((d / 10, w / 10) for d in range(0, 11, 2) for w in range(0, 11 - d, 2))
SCALE_FLOOR = 0.1  # fraction of the median blended level on the windows the scale is fitted on
FIT_CHUNK = 16_384  # windows a fit copies at a time


def minute_of_day(ts_event: np.ndarray) -> np.ndarray:
    """Exchange-time (US/Central) minute of day, 0..1439, of bar-open timestamps (UTC ns)."""
    ts = np.asarray(ts_event, dtype=np.int64)
    local = pd.DatetimeIndex(ts.astype("datetime64[ns]"), tz="UTC").tz_convert(EXCHANGE_TZ)
    return (local.hour.to_numpy() * 60 + local.minute.to_numpy()).astype(np.int64)


def contiguous_returns(ts_event: np.ndarray, close: np.ndarray) -> np.ndarray:
    """1-bar log returns; NaN at the first bar and after a gap (a session break's jump is not
    a 1-minute move)."""
    r = np.full(len(ts_event), np.nan)
    if len(ts_event) > 1:
        ok = np.diff(ts_event) == NS_PER_MIN
        r[1:] = np.where(ok, np.diff(np.log(close)), np.nan)
    return r


@dataclass(frozen=True)
class TimeOfDayProfile:
    """Relative RMS 1-bar return per `bucket_minutes` bucket of the exchange-time day."""

    bucket_minutes: int
    relative: np.ndarray  # (MINUTES_PER_DAY // bucket_minutes,), RMS over the day = 1

    @classmethod
    def fit(
        cls, ts_event: np.ndarray, returns: np.ndarray, bucket_minutes: int = PROFILE_BUCKET_MINUTES
    ) -> TimeOfDayProfile:
        """From training bars' 1-bar returns (NaN ignored); a bucket without any (the daily
        halt) gets the overall level."""
        if MINUTES_PER_DAY % bucket_minutes:
            raise ValueError(f"bucket_minutes={bucket_minutes} must divide {MINUTES_PER_DAY}")
        ok = np.isfinite(returns)
        if ok.sum() < 2 or not np.any(returns[ok] != 0):
            raise ValueError("a time-of-day profile needs training returns that are not all 0")
        bucket = minute_of_day(ts_event[ok]) // bucket_minutes
        n = MINUTES_PER_DAY // bucket_minutes
        count = np.bincount(bucket, minlength=n)
        square = np.bincount(bucket, weights=returns[ok] ** 2, minlength=n)
        overall = square.sum() / count.sum()
        mean_square = np.where(count > 0, square / np.maximum(count, 1), overall)
        mean_square = np.maximum(mean_square, 1e-4 * overall)  # a bucket that never moved
        return cls(bucket_minutes, np.sqrt(mean_square / mean_square.mean()))

    @classmethod
    def flat(cls) -> TimeOfDayProfile:
        """No daily shape: plain EWMA volatility, scaled by sqrt(h)."""
        return cls(MINUTES_PER_DAY, np.ones(1))

    def per_minute_square(self) -> np.ndarray:
        """(1440,) squared relative volatility of each minute of the day."""
        return np.repeat(self.relative**2, self.bucket_minutes)

    def at(self, ts_event: np.ndarray) -> np.ndarray:
        """Relative volatility of the bars opening at `ts_event`."""
        return np.sqrt(self.per_minute_square()[minute_of_day(ts_event)])

    def forward_rms(self, minute: np.ndarray, horizon: int) -> np.ndarray:
        """`(n, horizon)`: sqrt of the summed squared profile over the h bars after bars opening
        at exchange minute `minute` (from `minute_of_day`)."""
        ahead = (minute[:, None] + np.arange(1, horizon + 1)) % MINUTES_PER_DAY
        return np.sqrt(np.cumsum(self.per_minute_square()[ahead], axis=1))

    def trailing_rms(self, decay: float) -> np.ndarray:
        """(1440,) RMS profile under EWMA weights `decay**j` over the minutes up to each minute
        of the day: the daily shape an EWMA of raw squared returns averages over. Read-only:
        computed once per profile and decay, since every scale built on the profile needs it
        (`VolatilityScale.fit` builds dozens) and it sums thousands of shifted profiles."""
        relative = np.ascontiguousarray(self.relative, dtype=np.float64)
        return _trailing_rms(self.bucket_minutes, relative.tobytes(), decay)

    def to_dict(self) -> dict[str, Any]:
        return {"bucket_minutes": self.bucket_minutes, "relative": self.relative.tolist()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TimeOfDayProfile:
        relative = np.asarray(values["relative"], dtype=np.float64)
        bucket = int(values["bucket_minutes"])
        if relative.shape != (MINUTES_PER_DAY // bucket,) or not np.all(relative > 0):
            raise ValueError(
                "time-of-day profile is corrupt: need one positive value per "
                f"{bucket}-minute bucket; retrain the checkpoint"
            )
        return cls(bucket, relative)


@lru_cache(maxsize=64)
def _trailing_rms(bucket_minutes: int, relative: bytes, decay: float) -> np.ndarray:
    square = np.repeat(np.frombuffer(relative, dtype=np.float64) ** 2, bucket_minutes)
    lags = np.arange(int(np.ceil(np.log(1e-4) / np.log(decay))))
    weights = decay**lags / (decay**lags).sum()
    trailing = np.sqrt(sum(w * np.roll(square, j) for j, w in zip(lags, weights, strict=True)))
    trailing.flags.writeable = False
    return trailing


def ewma_variance(returns: np.ndarray, halflife: float) -> np.ndarray:
    """Bias-corrected EWMA of squared returns up to and including each bar (NaN skipped)."""
    series = pd.Series(returns**2)
    return series.ewm(halflife=halflife, adjust=True, ignore_na=True).mean().to_numpy()


@dataclass(frozen=True)
class VolatilityScale:
    """The TFT's output unit: the model forecasts returns in units of a causal time-of-day
    volatility forecast per window and horizon, and this rescales them. It reads only the
    window's own feature rows (`SCALE_INPUTS`), so the worker computes it with no state of its
    own. It is the time-of-day x plain EWMA baseline's estimate (`model.baselines`) built from
    the window, with a HAR model's long memory: over its rows, an EWMA (half-life `halflife`) of
    squared returns divided by the profile of their minute, and a plain EWMA (`flat_halflife`)
    of squared returns, both started from the oldest row's slow EWMA (the former over the
    profile it averaged); the former blended geometrically with the last row's day and week
    EWMAs (whose windows span every minute of the day, so their level is the daily average the
    profile is relative to), weights `memory`; and that daily-shaped level blended with the
    plain one, weight `weight`, each scaled forward over the h minutes ahead by its own shape
    (the profile, or flat):

        scale(t, h) = max(level(t), floor) * forward(t, h)
        level = flat^(1 - weight) * (tod^(1 - day_w - week_w) day^day_w week^week_w)^weight
        forward(t, h) = sqrt(h)^(1 - weight) * profile(t, h)^weight
    """

    profile: TimeOfDayProfile  # as fitted on the training bars (the baselines read it too)
    columns: tuple[int, ...]  # of SCALE_INPUTS in the feature rows
    floor: float
    weight: float = 1.0
    halflife: float = SCALE_HALFLIFE
    flat_halflife: float = SCALE_HALFLIFE
    memory: tuple[float, float] = (0.0, 0.0)  # the day and week EWMAs' weights
    trailing: np.ndarray = field(init=False, repr=False)  # (1440,) from the profile

    def __post_init__(self) -> None:
        object.__setattr__(self, "trailing", self.profile.trailing_rms(SCALE_LAMBDA))

    @classmethod
    def fit(
        cls,
        profile: TimeOfDayProfile,
        feature_names: tuple[str, ...],
        inputs: np.ndarray,
        ts_event: np.ndarray,
        targets: np.ndarray,
    ) -> VolatilityScale:
        """From windows held out of the profile's fit (`inputs` `(n, lookback,
        len(SCALE_INPUTS))`, last bars' `ts_event`, labels `targets` `(n, horizon)`): the blend
        weights and half-lives whose scale fits the labels best as a Gaussian's, its level left
        free (the head and the interval calibration set the level; what is chosen is how it
        moves)."""
        columns = tuple(feature_names.index(name) for name in SCALE_INPUTS)
        base = cls(profile, columns, 0.0)
        variance = partial(per_window, inputs)
        tod = {h: variance(partial(base.tod_variance, halflife=h)) for h in SCALE_HALFLIVES}
        flat = {h: variance(partial(base.flat_variance, halflife=h)) for h in SCALE_FLAT_HALFLIVES}
        last = per_window(inputs, lambda x: x[:, -1].copy())  # a view would keep x
        forward = {
            w: replace(base, weight=w).forward(ts_event, targets.shape[1]) for w in SCALE_WEIGHTS
        }
        fits = {}
        for w, h, f, memory in itertools.product(
            SCALE_WEIGHTS, SCALE_HALFLIVES, SCALE_FLAT_HALFLIVES, SCALE_MEMORY
        ):
            candidate = replace(base, weight=w, memory=memory)
            sigma = candidate.blend(last, tod[h], flat[f])[:, None] * forward[w]
            fits[(w, h, f, memory)] = gaussian_misfit(sigma, targets)
        w, h, f, memory = min(fits, key=fits.__getitem__)
        chosen = replace(base, weight=w, halflife=h, flat_halflife=f, memory=memory)
        level = float(np.nanmedian(chosen.blend(last, tod[h], flat[f])))  # chosen.level
        if not level > 0:
            raise ValueError("the windows' returns are all 0: no volatility to scale by")
        return replace(chosen, floor=SCALE_FLOOR * level)

    def level(self, inputs: np.ndarray) -> np.ndarray:
        """`(B,)` the windows' blended volatility, from `inputs` `(B, T, len(SCALE_INPUTS))`.
        Elementwise only, so a window's value is the same whatever shares its batch."""
        tod = self.tod_variance(inputs, self.halflife)
        return self.blend(inputs[:, -1], tod, self.flat_variance(inputs, self.flat_halflife))

    def blend(self, last: np.ndarray, tod: np.ndarray, flat: np.ndarray) -> np.ndarray:
        """`(B,)` the blended volatility from the windows' two EWMA variances and their last
        rows' inputs `last` `(B, len(SCALE_INPUTS))`."""
        day, week = last[:, 5] ** 2, last[:, 6] ** 2
        day_w, week_w = self.memory
        daily = tod ** (1 - day_w - week_w) * day**day_w * week**week_w
        return np.sqrt(flat ** (1 - self.weight) * daily**self.weight)

    def tod_variance(self, inputs: np.ndarray, halflife: float) -> np.ndarray:
        """`(B,)` EWMA of the window rows' squared returns over the profile of their minute."""
        r, sin, cos, gap, slow = (inputs[..., i] for i in range(5))
        minute = np.rint(np.arctan2(sin, cos) * (MINUTES_PER_DAY / (2 * np.pi))).astype(np.int64)
        minute %= MINUTES_PER_DAY
        start = slow[:, 0] ** 2 / self.trailing[minute[:, 0]] ** 2
        square = r**2 / self.profile.per_minute_square()[minute]
        return window_ewma(square, gap, start, halflife)

    def flat_variance(self, inputs: np.ndarray, halflife: float) -> np.ndarray:
        """`(B,)` EWMA of the window rows' squared returns."""
        return window_ewma(inputs[..., 0] ** 2, inputs[..., 3], inputs[:, 0, 4] ** 2, halflife)

    def forward(self, ts_event: np.ndarray, horizon: int) -> np.ndarray:
        """`(B, horizon)` how each horizon's volatility grows from the level's."""
        ahead = self.profile.forward_rms(minute_of_day(ts_event), horizon)
        return np.sqrt(np.arange(1, horizon + 1)) ** (1 - self.weight) * ahead**self.weight

    def inputs(self, windows: list[np.ndarray]) -> np.ndarray:
        """`(B, lookback, k)` the windows' (feature rows, oldest first) scale inputs: each
        window's columns as views, copied once. A copy per window (fancy indexing) gives the GIL
        up, and in the forecast worker each would wait to win it back from the busy event loop."""
        views = np.array([window[:, column] for window in windows for column in self.columns])
        return views.reshape(len(windows), len(self.columns), -1).transpose(0, 2, 1)

    def scale(self, ts_event: np.ndarray, inputs: np.ndarray, horizon: int) -> np.ndarray:
        """`(B, horizon)` log-return units of windows ending at `ts_event`."""
        vol = self.level(inputs)
        vol = np.where(np.isfinite(vol), np.maximum(vol, self.floor), self.floor)
        return vol[:, None] * self.forward(ts_event, horizon)

    def fast(self, inputs: np.ndarray, halflife: float, horizon: int) -> np.ndarray:
        """`(B, horizon)` log-return units: a plain EWMA of the window rows' squared returns at
        `halflife` (floored like the scale's level), growing as the square root of the
        horizon: what the recent returns alone say (`model.calibration.FastBlend`)."""
        vol = np.sqrt(self.flat_variance(inputs, halflife))
        vol = np.where(np.isfinite(vol), np.maximum(vol, self.floor), self.floor)
        return vol[:, None] * np.sqrt(np.arange(1, horizon + 1))

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.to_dict(),
            "inputs": list(SCALE_INPUTS),
            "columns": list(self.columns),
            "weight": self.weight,
            "halflife": self.halflife,
            "flat_halflife": self.flat_halflife,
            "memory": list(self.memory),
            "floor": self.floor,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> VolatilityScale:
        moves = [values.get(k) for k in ("weight", "halflife", "flat_halflife")]
        memory = values.get("memory")
        if (
            values.get("inputs") != list(SCALE_INPUTS)
            or not all(isinstance(v, int | float) and v > 0 for v in moves)
            or not (isinstance(memory, list) and len(memory) == 2)
            or not (min(memory) >= 0 and sum(memory) <= 1)
        ):
            raise ValueError(
                f"checkpoint scales by {values.get('inputs')!r} (blend weight, half-lives "
                f"{moves}, long-memory weights {memory}), this barcast by "
                f"{list(SCALE_INPUTS)!r} with a positive weight and half-lives and two "
                "long-memory weights summing to at most 1; retrain the checkpoint"
            )
        return cls(
            TimeOfDayProfile.from_dict(values["profile"]),
            tuple(int(c) for c in values["columns"]),
            float(values["floor"]),
            *(float(v) for v in moves),
            (float(memory[0]), float(memory[1])),
        )


class Windows(Protocol):
    """Windows' scale inputs `(n, lookback, len(SCALE_INPUTS))`, read a slice at a time: an
    array, or `model.dataset.WindowsOf`, which makes each slice's copy only when read."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice) -> np.ndarray: ...


def per_window(windows: Windows, f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """`f` of `windows` (or of windows' end rows), `FIT_CHUNK` of them at a time (its value for
    a window depends on that window's rows only): a fit on a year of windows holds no copy of
    them all."""
    chunks = range(0, max(len(windows), 1), FIT_CHUNK)
    return np.concatenate([f(windows[lo : lo + FIT_CHUNK]) for lo in chunks])


def gaussian_misfit(sigma: np.ndarray, targets: np.ndarray) -> float:
    """Gaussian negative log-likelihood per label of `targets` `(n, H)` under volatilities
    `sigma` `(n, H)` times the best single level (mean log s^2 + log mean (y/s)^2), over the
    windows where `sigma` is defined: how well a volatility forecast moves, whatever its level."""
    ok = np.isfinite(sigma).all(axis=1) & (sigma > 0).all(axis=1) & np.isfinite(targets).all(axis=1)
    if not ok.any():
        raise ValueError("no labelled window has a volatility to scale by; give more bars")
    s, y = sigma[ok], targets[ok]
    return float(np.mean(np.log(s**2)) + np.log(np.mean((y / s) ** 2)))


def window_ewma(
    square: np.ndarray, gap: np.ndarray, start: np.ndarray, halflife: float
) -> np.ndarray:
    """`(B,)` EWMA of `square` `(B, T)` over each window's rows after the first, from `start`;
    a gap's return is a session's jump, not news, and leaves the variance as it was. Compiled,
    and without the GIL: the forecast worker's inference thread computes it beside the busy
    event loop, where each of a numpy loop's many small calls would wait to win the GIL back."""
    decay = 0.5 ** (1 / halflife)
    kind = np.result_type(square, start, decay)  # numpy's own promotion: the same bits
    skip = (gap > 0) | ~np.isfinite(square)
    return _window_ewma(
        square.astype(kind, copy=False),
        skip,
        start.astype(kind, copy=False),  # the kernel returns a copy
        kind.type(decay),
        kind.type(1 - decay),
    )


# Compiled when imported (from numba's cache after the first time), for the float64 windows the
# worker serves and the float32 panels training reads: no forecast waits on a compilation.
@njit(
    ["f8[:](f8[:, :], b1[:, :], f8[:], f8, f8)", "f4[:](f4[:, :], b1[:, :], f4[:], f4, f4)"],
    cache=True,
    nogil=True,
)
def _window_ewma(
    square: np.ndarray, skip: np.ndarray, start: np.ndarray, decay: float, rest: float
) -> np.ndarray:
    variance = start.copy()
    for b in range(square.shape[0]):
        v = variance[b]
        for k in range(1, square.shape[1]):
            x = v if skip[b, k] else square[b, k]
            v = decay * v + rest * x
        variance[b] = v
    return variance
