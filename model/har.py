"""The intraday HAR baseline with time of day: the standard intraday volatility model, in logs.

Corsi's heterogeneous autoregressive model on 1-minute bars: returns are divided by the
checkpoint's time-of-day profile, and each window's log variance per minute ahead is linear in
the logs of their realized variance (mean square) over the last 10 minutes, hour, trading day
and week of the symbol's bars (causal rolling means, up to and including the window's last bar),
optionally with time-of-day EWMAs of the same returns as further components:

    log sigma²(t, h) = c_h + sum_j beta_j log RV_j(t) + log F(t, h)

where F(t, h) is the profile's squared sum over the h minutes ahead. The intercept per horizon
and the betas are fitted by Gaussian quasi-likelihood (the QLIKE loss) on the calibration
windows, by Newton's method (the loss is convex in them), with a small ridge penalty on the
betas; the forecast level stays within a margin of the range
it took on those windows, and the quantiles are Gaussian; the forecaster is then calibrated
like every other (`model.calibrated_baselines`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from model.baselines import deseasonalized_returns, deseasonalized_variance
from model.dataset import Panel
from model.volatility import TimeOfDayProfile, minute_of_day

DAY = 1380  # bars of one CME Globex trading day
COMPONENTS = {"rv_10m": 10, "rv_hour": 60, "rv_day": DAY, "rv_week": 5 * DAY}  # window, bars
TOD_EWMA_HALFLIVES = (30, 240)  # bars: the variant with time-of-day EWMAs as components
MIN_HISTORY = DAY // 4  # returns a day or week component needs (a quarter day, as the
# rolling quantiles); shorter components need their whole window
FLOOR_SHARE = 0.01  # a component is floored at this share of its median on the fit windows:
# ten minutes without a price change have a realized variance of 0, and a log of -inf
NEWTON_STEPS = 100
RIDGE = 0.01  # penalty on the betas (per unit of log variance), per label: the components are
# collinear (a day's variance is most of its week's), and a few days of fit windows, over which
# the slow ones barely move, otherwise give betas of several units on them
MARGIN = np.log(10.0)  # how far a forecast's log level may leave the range of the fit windows':
# a log-linear model extrapolates exponentially


def components(
    panel: Panel, ends: np.ndarray, profile: TimeOfDayProfile, tod_ewmas: bool
) -> tuple[tuple[str, ...], np.ndarray]:
    """The components' names and values `(n, k)` at windows `ends` (NaN: too little history)."""
    r = deseasonalized_returns(panel, profile)
    names, columns = [], []
    for name, window in COMPONENTS.items():
        rolled = np.full(len(r), np.nan)
        for lo, hi in zip(panel.offsets[:-1], panel.offsets[1:], strict=True):
            series = pd.Series(r[lo:hi] ** 2)
            rolled[lo:hi] = series.rolling(window, min_periods=min(window, MIN_HISTORY)).mean()
        names.append(name)
        columns.append(rolled[ends])
    if tod_ewmas:
        for halflife in TOD_EWMA_HALFLIVES:
            names.append(f"tod_ewma_{halflife}")
            columns.append(deseasonalized_variance(panel, r, halflife)[ends])
    return tuple(names), np.column_stack(columns)


@dataclass(frozen=True)
class HAR:
    """A fitted log-HAR: intercepts `(H,)`, betas `(k,)` on the centred log components."""

    names: tuple[str, ...]
    floor: np.ndarray  # (k,)
    centre: np.ndarray  # (k,) mean log component on the fit windows
    intercepts: np.ndarray  # (H,)
    betas: np.ndarray  # (k,)
    level_range: tuple[float, float]  # of x . beta on the fit windows, widened by MARGIN

    @classmethod
    def fit(
        cls, names: tuple[str, ...], values: np.ndarray, forward: np.ndarray, y: np.ndarray
    ) -> HAR:
        """From the fit windows' components `(n, k)`, forward profile sums `(n, H)` and labels
        `(n, H)`: the penalized Gaussian quasi-likelihood's minimizer."""
        if not np.isfinite(values).all() or len(values) == 0:
            raise ValueError("the HAR is fitted on windows whose every component is defined")
        floor = FLOOR_SHARE * np.median(values, axis=0)
        logs = np.log(np.maximum(values, floor))
        centre = logs.mean(axis=0)
        x = logs - centre
        theta = fit_qlike(x, y**2 / forward)
        horizon = y.shape[1]
        level = x @ theta[horizon:]
        span = (float(level.min() - MARGIN), float(level.max() + MARGIN))
        return cls(names, floor, centre, theta[:horizon], theta[horizon:], span)

    def sigma(self, values: np.ndarray, forward: np.ndarray) -> np.ndarray:
        """`(n, H)` volatilities of windows with components `values` and forward sums."""
        x = np.log(np.maximum(values, self.floor)) - self.centre
        level = np.clip(x @ self.betas, *self.level_range)
        return np.sqrt(np.exp(self.intercepts + level[:, None]) * forward)

    def to_dict(self) -> dict[str, Any]:
        return {
            "components": list(self.names),
            "betas": self.betas.tolist(),
            "intercepts": self.intercepts.tolist(),
        }


def fit_qlike(x: np.ndarray, u: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """Minimize the sum over windows i and horizons h of eta + u e^-eta, eta = c_h + x_i . beta
    (x `(n, k)`, u = y² / F `(n, H)`), plus `ridge` x labels x |beta|²: Newton steps with
    halving, from the level of u."""
    horizon = u.shape[1]
    penalty = ridge * u.size
    theta = np.concatenate([np.log(np.maximum(u.mean(axis=0), 1e-300)), np.zeros(x.shape[1])])

    def loss(t: np.ndarray) -> float:
        eta = t[:horizon] + (x @ t[horizon:])[:, None]
        return float((eta + u * np.exp(-eta)).sum() + penalty * t[horizon:] @ t[horizon:])

    current = loss(theta)
    for _ in range(NEWTON_STEPS):
        eta = theta[:horizon] + (x @ theta[horizon:])[:, None]
        w = u * np.exp(-eta)  # the Hessian's weights; the gradient's is 1 - w
        g = 1.0 - w
        grad = np.concatenate([g.sum(axis=0), x.T @ g.sum(axis=1) + 2 * penalty * theta[horizon:]])
        hessian = np.zeros((len(theta), len(theta)))
        hessian[:horizon, :horizon] = np.diag(w.sum(axis=0))
        hessian[:horizon, horizon:] = w.T @ x
        hessian[horizon:, :horizon] = hessian[:horizon, horizon:].T
        hessian[horizon:, horizon:] = x.T @ (x * w.sum(axis=1)[:, None])
        hessian[horizon:, horizon:] += 2 * penalty * np.eye(x.shape[1])
        step = np.linalg.lstsq(hessian, grad, rcond=None)[0]
        size = 1.0
        while size > 1e-8:
            candidate = theta - size * step
            new = loss(candidate)
            if new <= current:
                break
            size /= 2
        else:
            break
        converged = current - new < 1e-10 * abs(current)
        theta, current = candidate, new
        if converged:
            break
    return theta


def forward_square(
    panel: Panel, ends: np.ndarray, profile: TimeOfDayProfile, horizon: int
) -> np.ndarray:
    """`(n, H)` the profile's squared sum over the h minutes after each window's last bar."""
    return profile.forward_rms(minute_of_day(panel.ts[ends]), horizon) ** 2
