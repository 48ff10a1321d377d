"""The time-of-day EWMA chosen by Gaussian likelihood on the selection windows, the TFT's
scale's rule (`tod_ewma_gaussian_likelihood`, model/calibrated_baselines.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from model.calibrated_baselines import (
    BLEND_WEIGHTS,
    HALFLIVES,
    calibrated_forecasts,
    volatility_candidates,
)
from model.dataset import fit_profile
from model.volatility import MINUTES_PER_DAY, TimeOfDayProfile, gaussian_misfit
from tests.model.test_baselines import QUANTILES, intraday_panel


def test_the_blend_chosen_by_likelihood_on_the_selection_windows_is_the_datas() -> None:
    """`tod_ewma_gaussian_likelihood` takes the blend that the TFT's scale's rule (Gaussian
    likelihood on the checkpoint's validation windows) prefers: most of the profile for returns
    that follow it, the least of it for returns without one; calibrated like every baseline."""
    panel, _ = intraday_panel(days=16)
    profile = fit_profile(panel, int(panel.ts[8 * MINUTES_PER_DAY]))
    select = np.arange(8 * MINUTES_PER_DAY, 11 * MINUTES_PER_DAY, 3)
    fit = np.arange(11 * MINUTES_PER_DAY, 13 * MINUTES_PER_DAY, 3)
    ends = np.arange(13 * MINUTES_PER_DAY, 16 * MINUTES_PER_DAY - 10, 3)
    meta = scale_free_meta(profile)
    for daily, weights in ((True, (0.8, 1.0)), (False, (0.0, min(BLEND_WEIGHTS)))):
        data, _ = intraday_panel(days=16, seed=1, daily=daily)
        out, fitted, _ = calibrated_forecasts(data, ends, fit, meta, 1380, None, select)  # type: ignore[arg-type]
        chosen = fitted["tod_ewma_gaussian_likelihood"]
        assert chosen["profile_weight"] in weights, chosen
        assert out["tod_ewma_gaussian_likelihood"].shape == (len(ends), 10, 3)
        # the lowest misfit on the selection windows alone, among the time-of-day blends
        misfits = {
            tuple(sorted(choice.items())): gaussian_misfit(sigma, data.targets[select])
            for choice, sigma in volatility_candidates(data, select, profile)
            if choice["profile_weight"] > 0
        }
        best = min(misfits, key=misfits.__getitem__)
        assert best == tuple(sorted((k, v) for k, v in chosen.items() if k in dict(best)))
    without, _, _ = calibrated_forecasts(data, ends, fit, meta, 1380)  # type: ignore[arg-type]
    assert "tod_ewma_gaussian_likelihood" not in without


def test_the_blend_chosen_by_likelihood_judges_every_candidate_on_the_same_windows() -> None:
    """Selection windows from a panel's start, where the longest half-lives are not yet defined:
    those candidates still compete, on the windows where every candidate is defined (dropped
    instead, the baseline would choose from fewer than the TFT's scale does)."""
    data, _ = intraday_panel(days=16, seed=1)
    profile = fit_profile(data, int(data.ts[8 * MINUTES_PER_DAY]))
    select = np.arange(60, 3 * MINUTES_PER_DAY, 3)
    fit = np.arange(11 * MINUTES_PER_DAY, 13 * MINUTES_PER_DAY, 3)
    ends = np.arange(13 * MINUTES_PER_DAY, 16 * MINUTES_PER_DAY - 10, 3)
    candidates = [c for c in volatility_candidates(data, select, profile) if c[0]["profile_weight"]]
    defined = np.logical_and.reduce([np.isfinite(sigma).all(axis=1) for _, sigma in candidates])
    assert 0 < defined.sum() < len(select), "some windows lack the longest half-lives' history"
    misfits = [gaussian_misfit(s[defined], data.targets[select[defined]]) for _, s in candidates]
    best = candidates[int(np.argmin(misfits))][0]
    _, fitted, _ = calibrated_forecasts(
        data, ends, fit, scale_free_meta(profile), 1380, None, select
    )  # type: ignore[arg-type]
    chosen = fitted["tod_ewma_gaussian_likelihood"]
    assert {k: chosen[k] for k in best} == best and best["halflife_bars"] == max(HALFLIVES)


def scale_free_meta(profile: TimeOfDayProfile) -> SimpleNamespace:
    """What `calibrated_forecasts` reads of a checkpoint, its own volatility scale flat."""
    return SimpleNamespace(
        persistence_quantiles=np.zeros((10, 3)),
        volatility=SimpleNamespace(  # the checkpoint's own scale: not what these tests are about
            profile=profile, columns=(0,), scale=lambda ts, inputs, h: np.ones((len(ts), h))
        ),
        config=SimpleNamespace(quantiles=QUANTILES, lookback=60, horizon=10, releases=False),
    )
