"""Baselines, calibration and the significance test on synthetic data with known answers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from model import baselines
from model.calibrated_baselines import (
    BLEND_WEIGHTS,
    HALFLIVES,
    calibrate,
    calibrated_forecasts,
    volatility_candidates,
)
from model.calibration import apply_interval_scale, fit_interval_scale
from model.covariates import NS_PER_MIN
from model.dataset import Panel, fit_profile, panel_from_arrays, window_rows
from model.metrics import coverage, pinball_per_window
from model.releases import ReleaseCalendar
from model.significance import block_bootstrap
from model.synthetic import scale_inputs
from model.volatility import (
    MINUTES_PER_DAY,
    SCALE_FLAT_HALFLIVES,
    SCALE_HALFLIVES,
    SCALE_INPUTS,
    SCALE_LAMBDA,
    SCALE_WEIGHTS,
    TimeOfDayProfile,
    VolatilityScale,
    minute_of_day,
)

QUANTILES = (0.1, 0.5, 0.9)
START = 1_704_150_000_000_000_000  # 2024-01-01 23:00 UTC, a Monday evening in Chicago


def test_interval_scale_recovers_a_known_miscalibration() -> None:
    rng = np.random.default_rng(0)
    sigma = rng.uniform(0.5, 3.0, size=(20_000, 2))
    y = sigma * rng.standard_normal(sigma.shape)
    narrow = baselines.gaussian(sigma * 0.5, QUANTILES)  # half the true width
    scale = fit_interval_scale(narrow, y, QUANTILES)
    assert np.allclose(scale[:, [0, 2]], 2.0, atol=0.06) and np.all(scale[:, 1] == 1)
    below, inside = coverage(y, apply_interval_scale(narrow, scale, 1))
    assert np.allclose(below, [[0.1, 0.5, 0.9]] * 2, atol=0.012)
    assert np.allclose(inside, 0.8, atol=0.015)


def intraday_panel(
    days: int, seed: int = 0, daily: bool = True, shock_minute: int | None = None
) -> tuple[Panel, np.ndarray]:
    """Gaussian 1-minute returns whose volatility follows a known daily shape (quiet nights, a
    busy US morning; none if not `daily`) times a slowly cycling level, and 8 times that at
    `shock_minute` of each day (a release); returns the panel and the true shape."""
    rng = np.random.default_rng(seed)
    n = days * MINUTES_PER_DAY
    ts = START + np.arange(n, dtype=np.int64) * NS_PER_MIN
    minute = minute_of_day(ts)
    shape = 0.5 + 2.5 * np.exp(-(((np.arange(MINUTES_PER_DAY) - 8.5 * 60) / 90.0) ** 2))
    level = np.exp(0.2 * np.sin(np.arange(n) / (3 * MINUTES_PER_DAY)))
    r = 1e-4 * level * (shape[minute] if daily else 1.0) * rng.standard_normal(n)
    r[minute == shock_minute] *= 8.0
    close = 100 * np.exp(np.cumsum(r))
    rows = [(ts, close, np.zeros((n, 1)), np.ones(n, dtype=bool))]
    return panel_from_arrays(["6EH4"], rows, 10), shape


def test_time_of_day_ewma_is_nominal_and_beats_plain_ewma_on_an_intraday_profile() -> None:
    panel, true_shape = intraday_panel(days=30)
    train_end = int(panel.ts[10 * MINUTES_PER_DAY])
    profile = fit_profile(panel, train_end)
    fitted = np.repeat(profile.relative, profile.bucket_minutes)
    assert np.corrcoef(fitted, true_shape)[0, 1] > 0.97
    fit = np.arange(10 * MINUTES_PER_DAY, 15 * MINUTES_PER_DAY, 3)
    test = np.arange(15 * MINUTES_PER_DAY, 30 * MINUTES_PER_DAY - 10, 3)
    losses, inside = {}, {}
    for name, shape in (("tod", profile), ("flat", TimeOfDayProfile.flat())):
        q = {
            part: baselines.gaussian(baselines.ewma_sigma(panel, ends, shape, 120), QUANTILES)
            for part, ends in (("fit", fit), ("test", test))
        }
        scale = fit_interval_scale(q["fit"], panel.targets[fit], QUANTILES)
        calibrated = apply_interval_scale(q["test"], scale, 1)
        losses[name] = pinball_per_window(panel.targets[test], calibrated, QUANTILES).mean()
        below, inside[name] = coverage(panel.targets[test], calibrated)
        if name == "tod":
            assert np.allclose(below[:, [0, 2]].mean(0), [0.1, 0.9], atol=0.015)
            assert np.allclose(below[:, [0, 2]], [0.1, 0.9], atol=0.04)
    assert abs(inside["tod"].mean() - 0.8) < 0.02
    assert losses["tod"] < 0.97 * losses["flat"]


def test_the_profile_weight_the_calibration_picks_is_the_datas() -> None:
    """Returns that follow the daily shape get the whole profile; returns without one, handed
    the same profile, get the least of it (the plain EWMA is a baseline of its own)."""
    panel, _ = intraday_panel(days=16)
    profile = fit_profile(panel, int(panel.ts[10 * MINUTES_PER_DAY]))
    fit = np.arange(10 * MINUTES_PER_DAY, 16 * MINUTES_PER_DAY - 10, 3)
    for daily, expected in ((True, 1.0), (False, min(BLEND_WEIGHTS))):
        data, _ = intraday_panel(days=16, seed=1, daily=daily)
        flat = baselines.ewma_sigma(data, fit, TimeOfDayProfile.flat(), 60)
        tod = baselines.ewma_sigma(data, fit, profile, 60)
        losses = {
            w: calibrate(
                baselines.gaussian(baselines.profile_blend(flat, tod, w), QUANTILES),
                data.targets[fit],
                QUANTILES,
            )[1]
            for w in (*BLEND_WEIGHTS, 1.0)
        }
        assert min(losses, key=losses.__getitem__) == expected, losses
    assert np.array_equal(baselines.profile_blend(flat, tod, 1.0), tod)


def test_the_blends_cover_every_pair_of_half_lives_and_the_pure_ewmas() -> None:
    """The time-of-day EWMA's blends include its plain partner at every half-life of its own,
    the same-half-life blends among them, so the calibration can only gain on its split; weight
    0 is the plain EWMA and weight 1 the time-of-day EWMA, each at one half-life."""
    panel, _ = intraday_panel(days=3)
    profile = fit_profile(panel, int(panel.ts[2 * MINUTES_PER_DAY]))
    ends = np.arange(2 * MINUTES_PER_DAY, 3 * MINUTES_PER_DAY - 10, 7)
    seen: dict[tuple[tuple[str, float], ...], np.ndarray] = {}
    for choice, sigma in volatility_candidates(panel, ends, profile):
        key = tuple(sorted(choice.items()))
        assert key not in seen, key
        seen[key] = sigma
    blends = {
        (c["halflife_bars"], c["flat_halflife_bars"], c["profile_weight"])
        for c in map(dict, seen)
        if "flat_halflife_bars" in c
    }
    assert blends == {(h, f, w) for h in HALFLIVES for f in HALFLIVES for w in BLEND_WEIGHTS}
    for h in HALFLIVES:
        flat = baselines.ewma_sigma(panel, ends, TimeOfDayProfile.flat(), h)
        tod = baselines.ewma_sigma(panel, ends, profile, h)
        pure = {w: seen[(("halflife_bars", h), ("profile_weight", w))] for w in (0.0, 1.0)}
        assert np.array_equal(pure[0.0], flat, equal_nan=True)
        assert np.array_equal(pure[1.0], tod, equal_nan=True)
        same = seen[(("flat_halflife_bars", h), ("halflife_bars", h), ("profile_weight", 0.4))]
        assert np.allclose(same, baselines.profile_blend(flat, tod, 0.4), equal_nan=True)


def test_empirical_residual_quantiles_follow_fat_tails() -> None:
    rng = np.random.default_rng(1)
    sigma = np.ones((40_000, 1))
    y = rng.standard_t(3, size=(40_000, 1))
    q = baselines.standardized_residuals(sigma, sigma, y, QUANTILES)
    assert np.allclose(q[0, 0], np.quantile(y, QUANTILES))


def test_rolling_quantiles_need_a_quarter_window_of_history() -> None:
    panel, _ = intraday_panel(days=1)
    q = baselines.rolling_quantiles(panel, np.array([50, 400]), QUANTILES, 1380)
    assert np.isnan(q[0]).all() and np.isfinite(q[1]).all()


def test_block_bootstrap_sees_a_real_difference_and_not_a_spurious_one() -> None:
    rng = np.random.default_rng(2)
    noise = np.repeat(rng.normal(0, 1, 200), 50)  # strongly dependent: blocks of 50 equal values
    assert block_bootstrap(noise + 0.5, block=100)["excludes_zero"]
    null = block_bootstrap(noise - noise.mean(), block=100)
    assert null["excludes_zero"] is False and null["ci95"][0] < 0 < null["ci95"][1]


def test_block_bootstrap_resamples_whole_blocks_cut_at_n() -> None:
    """Its interval is that of the replicates written out: k blocks drawn from the same
    generator, each wrapping round past the last window, joined, cut to n windows, averaged."""
    diff = np.random.default_rng(4).normal(0.001, 0.01, 23)
    block, replicates = 5, 300
    starts = np.random.default_rng(0).integers(0, 23, size=(replicates, 5))
    blocks = [[diff.take(range(s, s + block), mode="wrap") for s in row] for row in starts]
    means = [np.concatenate(row)[:23].mean() for row in blocks]
    result = block_bootstrap(diff, block=block, replicates=replicates, seed=0)
    assert np.allclose(result["ci95"], np.quantile(means, [0.025, 0.975]), rtol=0, atol=1e-15)


def scaled_panel(days: int, seed: int, daily: bool) -> Panel:
    """`intraday_panel`'s returns with the volatility scale's input columns."""
    bare, _ = intraday_panel(days, seed, daily)
    rows = [(bare.ts, bare.close, scale_inputs(bare.ts, bare.close), bare.warm)]
    return panel_from_arrays(["6EH4"], rows, 10, feature_names=SCALE_INPUTS)


def test_the_tft_scale_takes_the_profile_weight_its_windows_follow() -> None:
    """The TFT's output scale puts most of its weight on the time-of-day EWMA for returns that
    follow the profile and the least on it for returns without one, as the baseline's
    calibration does; the choice round-trips."""
    profile = fit_profile(
        intraday_panel(days=12)[0], int(START + 10 * MINUTES_PER_DAY * NS_PER_MIN)
    )
    for daily, weights in ((True, (0.8, 1.0)), (False, (min(SCALE_WEIGHTS),))):
        panel = scaled_panel(days=12, seed=1, daily=daily)
        ends = np.arange(100, len(panel.ts) - 10, 7)
        inputs = window_rows(panel.features, 60)[ends]
        scale = VolatilityScale.fit(
            profile, SCALE_INPUTS, inputs, panel.ts[ends], panel.targets[ends]
        )
        assert scale.weight in weights
        assert scale.halflife in SCALE_HALFLIVES and scale.flat_halflife in SCALE_FLAT_HALFLIVES
        again = VolatilityScale.from_dict(scale.to_dict())
        moves = ("weight", "halflife", "flat_halflife", "memory", "floor")
        assert [getattr(again, k) for k in moves] == [getattr(scale, k) for k in moves]
        assert np.array_equal(
            again.scale(panel.ts[ends], inputs, 10), scale.scale(panel.ts[ends], inputs, 10)
        )


def test_the_tft_scale_is_the_blended_baseline_computed_from_the_window() -> None:
    """Over a window long enough to forget its start, the scale equals `model.baselines`'
    time-of-day x plain EWMA blend at the same weight and half-lives (each its own)."""
    panel, _ = intraday_panel(days=3, seed=2)
    profile = fit_profile(panel, int(START + 2 * MINUTES_PER_DAY * NS_PER_MIN))
    scaled = scaled_panel(days=3, seed=2, daily=True)
    scale = VolatilityScale(profile, tuple(range(7)), 0.0, 0.4, 10.0, 25.0)
    ends = np.arange(2000, len(scaled.ts) - 10, 97)
    ours = scale.scale(scaled.ts[ends], window_rows(scaled.features, 1000)[ends], 10)
    tod = baselines.ewma_sigma(scaled, ends, profile, 10.0)
    flat = baselines.ewma_sigma(scaled, ends, TimeOfDayProfile.flat(), 25.0)
    theirs = baselines.profile_blend(flat, tod, 0.4)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_the_tft_scale_starts_from_the_oldest_rows_slow_level() -> None:
    """A window whose later rows are all gaps keeps its start: the plain EWMA the oldest row's
    slow level, the time-of-day one that level over the trailing profile of its minute."""
    profile = fit_profile(intraday_panel(days=2)[0], int(START + MINUTES_PER_DAY * NS_PER_MIN))
    panel = scaled_panel(days=1, seed=3, daily=True)
    inputs = window_rows(panel.features, 60)[np.array([300, 700])].copy()
    inputs[:, 1:, 3] = 1.0  # gap flags: no return after the first row counts
    inputs[:, 0, 4] = [2e-4, 5e-4]
    minute = minute_of_day(panel.ts[np.array([300, 700]) - 59])
    trailing = profile.trailing_rms(SCALE_LAMBDA)[minute]
    for weight in (0.2, 1.0):
        scale = VolatilityScale(profile, tuple(range(7)), 0.0, weight, 60.0, 10.0)
        expected = (
            np.array([2e-4, 5e-4]) ** (1 - weight) * (np.array([2e-4, 5e-4]) / trailing) ** weight
        )
        np.testing.assert_allclose(scale.level(inputs), expected, rtol=1e-9)


def test_the_tft_scale_carries_the_long_memory_of_the_last_row() -> None:
    """With all of the daily-shaped level on the day and week EWMAs, the level is their
    geometric blend at the window's last row, whatever the window's own returns did."""
    profile = fit_profile(intraday_panel(days=2)[0], int(START + MINUTES_PER_DAY * NS_PER_MIN))
    panel = scaled_panel(days=1, seed=3, daily=True)
    inputs = window_rows(panel.features, 60)[np.array([300, 700])].copy()
    inputs[:, -1, 5], inputs[:, -1, 6] = [1e-4, 4e-4], [9e-4, 1e-4]
    scale = VolatilityScale(profile, tuple(range(7)), 0.0, 1.0, 60.0, 10.0, (0.5, 0.5))
    np.testing.assert_allclose(scale.level(inputs), [3e-4, 2e-4], rtol=1e-9)
    inputs[:, :-1, 0] *= 10.0  # the window's returns: no effect on this blend
    np.testing.assert_allclose(scale.level(inputs), [3e-4, 2e-4], rtol=1e-9)


def test_a_scale_without_a_blend_is_refused_naming_the_fix() -> None:
    profile = fit_profile(intraday_panel(days=2)[0], int(START + MINUTES_PER_DAY * NS_PER_MIN))
    saved = VolatilityScale(profile, tuple(range(7)), 1e-6).to_dict()
    del saved["weight"]
    with pytest.raises(ValueError, match="retrain the checkpoint"):
        VolatilityScale.from_dict(saved)


def test_a_profile_fitted_on_the_calibration_bars_wins_where_the_checkpoints_is_wrong() -> None:
    """Offered the checkpoint's profile (flat: trained where the day had no shape) and one
    fitted on the calibration bars of returns with a strong daily shape, the time-of-day
    baselines and the HARs keep the latter, chosen on the calibration windows."""
    data, _ = intraday_panel(days=12, seed=3)
    fit = np.arange(2 * MINUTES_PER_DAY, 6 * MINUTES_PER_DAY, 3)
    ends = np.arange(6 * MINUTES_PER_DAY, 12 * MINUTES_PER_DAY - 10, 3)
    meta = SimpleNamespace(
        persistence_quantiles=np.zeros((10, 3)),
        volatility=SimpleNamespace(
            profile=TimeOfDayProfile.flat(),
            columns=(0,),
            scale=lambda ts, inputs, h: np.ones((len(ts), h)),
        ),
        config=SimpleNamespace(quantiles=QUANTILES, lookback=60, horizon=10, releases=False),
    )
    profiles = {
        "checkpoint": TimeOfDayProfile.flat(),
        "calibration bars": fit_profile(data, int(data.ts[fit[-1]]) + 1),
    }
    _, fitted, _ = calibrated_forecasts(data, ends, fit, meta, 1380, None, None, profiles)  # type: ignore[arg-type]
    for name in ("tod_ewma_gaussian", "har_tod_gaussian", "har_tod_ewma_gaussian"):
        assert fitted[name]["profile"] == "calibration bars", (name, fitted[name])
    assert "profile" not in fitted["ewma_gaussian"]


def test_release_scaling_multiplies_the_variance_of_the_flagged_minutes() -> None:
    """On Gaussian quantiles of a variance adding up over the minutes, the scaled forecast is
    the Gaussian of the variance with the flagged minute's share multiplied, exactly."""
    per_minute = np.array([1.0, 2.0, 1.0, 3.0]) * 1e-8
    sigma = np.sqrt(np.cumsum(per_minute))[None, :]
    at = np.array([[False, True, False, False]])
    scaled = baselines.release_scaled(baselines.gaussian(sigma, QUANTILES), at, 5.0)
    expected = np.sqrt(np.cumsum(per_minute * np.where(at[0], 5.0, 1.0)))[None, :]
    assert np.allclose(scaled, baselines.gaussian(expected, QUANTILES), rtol=1e-12)
    same = baselines.release_scaled(baselines.gaussian(sigma, QUANTILES), at, 1.0)
    assert np.allclose(same, baselines.gaussian(sigma, QUANTILES), rtol=1e-12)


def test_baselines_given_the_release_calendar_widen_at_releases_chosen_on_calibration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """For a checkpoint trained with releases, the time-of-day EWMA and HARs are offered with
    their variance at known release minutes scaled, the factor chosen on the calibration
    windows: with returns 8 times as volatile at a daily release, a factor above 1 wins there
    and the scored windows facing a release lose less."""
    shock = 13 * 60 + 30
    data, _ = intraday_panel(days=7, seed=3, shock_minute=shock)
    released = data.ts[minute_of_day(data.ts) == shock]
    calendar = ReleaseCalendar(released, np.zeros(len(released), np.int8), released - 10**15)
    monkeypatch.setattr(
        "model.calibrated_baselines.release_calendar", lambda on: calendar if on else None
    )
    fit = np.arange(2 * MINUTES_PER_DAY, 4 * MINUTES_PER_DAY)
    ends = np.arange(4 * MINUTES_PER_DAY, 7 * MINUTES_PER_DAY - 10)
    profile = fit_profile(data, int(data.ts[fit[0]]))
    meta = SimpleNamespace(
        persistence_quantiles=np.zeros((10, 3)),
        volatility=SimpleNamespace(
            profile=profile, columns=(0,), scale=lambda ts, inputs, h: np.ones((len(ts), h))
        ),
        config=SimpleNamespace(quantiles=QUANTILES, lookback=60, horizon=10, releases=True),
    )
    out, fitted, _ = calibrated_forecasts(data, ends, fit, meta, 1380)  # type: ignore[arg-type]
    facing = calendar.at_minutes(data.ts[ends], 10).any(axis=1)
    y = data.targets[ends]
    for name in ("tod_ewma_gaussian", "har_tod_gaussian", "har_tod_ewma_gaussian"):
        assert fitted[f"{name}_releases"]["release_factor"] > 1, fitted[f"{name}_releases"]
        with_calendar = pinball_per_window(y, out[f"{name}_releases"], QUANTILES)[facing]
        without = pinball_per_window(y, out[name], QUANTILES)[facing]
        assert with_calendar.mean() < without.mean(), name
    meta.config.releases = False
    plain, _, _ = calibrated_forecasts(data, ends, fit, meta, 1380)  # type: ignore[arg-type]
    assert not any(name.endswith("_releases") for name in plain)


def test_a_scales_inputs_are_its_columns_of_each_window_in_order() -> None:
    scale = VolatilityScale(TimeOfDayProfile.flat(), (5, 0, 3), floor=3e-4)
    windows = [np.arange(48.0).reshape(6, 8) + 100 * k for k in range(3)]
    inputs = scale.inputs([w[1:] for w in windows])  # views of a larger buffer, as served
    np.testing.assert_array_equal(inputs, np.stack([w[1:, [5, 0, 3]] for w in windows]))
