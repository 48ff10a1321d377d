"""The intraday log-HAR with time of day, on synthetic data with known answers."""

from __future__ import annotations

import numpy as np

from model import baselines, har
from model.covariates import NS_PER_MIN
from model.dataset import panel_from_arrays
from model.volatility import MINUTES_PER_DAY, TimeOfDayProfile, minute_of_day

START = 1_704_150_000_000_000_000  # 2024-01-01 23:00 UTC


def test_the_quasi_likelihood_fit_recovers_known_coefficients() -> None:
    """Labels drawn from the model itself: Gaussian with log variance c_h + x . beta."""
    rng = np.random.default_rng(0)
    n, intercepts, betas = 40_000, np.array([-1.0, 0.0, 0.7]), np.array([0.6, -0.3])
    x = rng.normal(0, 1, (n, 2))
    eta = intercepts + (x @ betas)[:, None]
    u = np.exp(eta) * rng.standard_normal(eta.shape) ** 2  # y² / F with F = 1
    theta = har.fit_qlike(x, u, ridge=0.0)
    assert np.allclose(theta[:3], intercepts, atol=0.03)
    assert np.allclose(theta[3:], betas, atol=0.02)


def har_panel(days: int, seed: int = 0, swing: float = 0.6) -> tuple:
    """1-minute returns with a daily shape and a level swinging over days by a factor of
    exp(+-`swing`); returns the panel and the shape's profile."""
    rng = np.random.default_rng(seed)
    n = days * MINUTES_PER_DAY
    ts = START + np.arange(n, dtype=np.int64) * NS_PER_MIN
    shape = 0.5 + 2.0 * np.exp(-(((np.arange(MINUTES_PER_DAY) - 8.5 * 60) / 90.0) ** 2))
    shape /= np.sqrt(np.mean(shape**2))
    relative = shape[minute_of_day(ts)]
    level = np.exp(swing * np.sin(np.arange(n) / (0.7 * MINUTES_PER_DAY)))
    r = 1e-4 * level * relative * rng.standard_normal(n)
    close = 100 * np.exp(np.cumsum(r))
    rows = [(ts, close, np.zeros((n, 1)), np.ones(n, dtype=bool))]
    profile = TimeOfDayProfile(1, shape)
    return panel_from_arrays(["ES"], rows, 10), profile


def test_components_are_causal_rolling_means_of_deseasonalized_squared_returns() -> None:
    panel, profile = har_panel(days=8)
    ends = np.array([400, 3000, 9000])
    names, values = har.components(panel, ends, profile, tod_ewmas=True)
    assert names == ("rv_10m", "rv_hour", "rv_day", "rv_week", "tod_ewma_30", "tod_ewma_240")
    r = baselines.deseasonalized_returns(panel, profile)
    for i, t in enumerate(ends):
        for j, window in enumerate(har.COMPONENTS.values()):
            past = r[max(0, t - window + 1) : t + 1]
            assert np.isclose(values[i, j], np.nanmean(past**2), rtol=1e-9)
    # Returns after a window's last bar change nothing of it.
    later = panel_from_arrays(
        ["ES"],
        [
            (
                panel.ts,
                np.r_[panel.close[:3001], panel.close[3001:] * 1.01],
                panel.features,
                panel.warm,
            )
        ],
        10,
    )
    assert np.array_equal(har.components(later, ends[:2], profile, True)[1], values[:2])
    assert np.isnan(har.components(panel, np.array([100]), profile, False)[1][0, 2:]).all()


def test_the_har_of_a_constant_level_is_that_level_and_nominal() -> None:
    """Returns of a constant level times the daily shape: the forecast volatility is the true one
    (the level times the forward profile) and the intervals are nominal."""
    panel, profile = har_panel(days=30, seed=1, swing=0.0)
    fit = np.arange(8 * MINUTES_PER_DAY, 18 * MINUTES_PER_DAY, 2)
    test = np.arange(18 * MINUTES_PER_DAY, 30 * MINUTES_PER_DAY - 10, 2)
    names, values = har.components(panel, np.r_[fit, test], profile, tod_ewmas=True)
    forward = har.forward_square(panel, np.r_[fit, test], profile, 10)
    model = har.HAR.fit(names, values[: len(fit)], forward[: len(fit)], panel.targets[fit])
    sigma = model.sigma(values[len(fit) :], forward[len(fit) :])
    true = 1e-4 * np.sqrt(forward[len(fit) :])
    assert np.abs(np.log(sigma / true)).mean() < 0.05
    q = baselines.gaussian(sigma, (0.1, 0.5, 0.9))
    y = panel.targets[test]
    assert abs(((y >= q[..., 0]) & (y <= q[..., 2])).mean() - 0.8) < 0.02


def test_collinear_components_on_few_windows_neither_explode_nor_extrapolate() -> None:
    """Two days of calibration windows of nearly equal components (the week is the day): the
    ridge keeps the betas small where the unpenalized fit gives opposite ones of several units,
    and a window far outside the fit windows' range is held within a margin of it."""
    panel, profile = har_panel(days=4, seed=2, swing=0.0)
    fit = np.arange(2 * MINUTES_PER_DAY, 4 * MINUTES_PER_DAY - 10, 5)
    names, values = har.components(panel, fit, profile, tod_ewmas=True)
    forward = har.forward_square(panel, fit, profile, 10)
    x = np.log(values) - np.log(values).mean(axis=0)
    u = panel.targets[fit] ** 2 / forward
    free, ridged = har.fit_qlike(x, u, ridge=0.0)[10:], har.fit_qlike(x, u)[10:]
    assert np.abs(free).max() > 1.0 > 0.3 > np.abs(ridged).max()
    model = har.HAR.fit(names, values, forward, panel.targets[fit])
    shocked = model.sigma(values[:1] * 1e30, forward[:1])
    level = np.log(shocked**2 / forward[:1]) - model.intercepts
    low, high = model.level_range
    assert np.allclose(level, low) or np.allclose(level, high)  # held at a bound
    assert high - low < 2 * np.log(10.0) + 1.0  # the fit windows' range, and the margins
