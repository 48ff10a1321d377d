"""model.calibration: the pull toward the volatility scale's Gaussian, and toward a fast EWMA's,
fitted on calibration windows, keeps what the network knows and drops what it does not."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from model.calibration import (
    FAST_SHARES,
    SHRINK_WEIGHTS,
    FastBlend,
    fit_fast,
    fit_shrink,
    toward_scale,
)

QUANTILES = (0.1, 0.5, 0.9)
Z = np.array([NormalDist().inv_cdf(q) for q in QUANTILES])


def test_toward_scale_spans_the_scales_gaussian_to_the_networks_own() -> None:
    q = np.array([[[-3.0, 0.2, 0.5], [-0.1, 0.0, 4.0]]])
    np.testing.assert_array_equal(toward_scale(q, 1.0, QUANTILES), q)
    gaussian = toward_scale(q, 0.0, QUANTILES)
    np.testing.assert_allclose(gaussian, q[..., 1:2] + Z)
    half = toward_scale(q, 0.5, QUANTILES)
    np.testing.assert_allclose(
        half[0, 0], [0.2 - np.sqrt(3.2 * -Z[0]), 0.2, 0.2 + np.sqrt(0.3 * Z[2])]
    )


@pytest.mark.parametrize("informed", [True, False])
def test_the_fitted_share_keeps_a_network_that_knows_and_drops_one_that_guesses(
    informed: bool,
) -> None:
    """Returns with a hidden volatility multiplier m around the scale: a network whose
    intervals follow m keeps its whole share; one whose intervals follow noise of the same
    size is pulled most of the way back to the scale."""
    rng = np.random.default_rng(0)
    n, horizons = 20_000, 2
    unit = rng.uniform(1e-4, 3e-4, (n, horizons))
    m = np.exp(rng.normal(0.0, 0.5, (n, 1)))
    y = rng.normal(size=(n, horizons)) * unit * m
    believed = m if informed else np.exp(rng.normal(0.0, 0.5, (n, 1)))
    q = (believed[..., None] * Z) * np.ones((n, horizons, 1)) * unit[..., None]
    share = fit_shrink(q, y, unit, QUANTILES)
    assert share in SHRINK_WEIGHTS
    assert share == 1.0 if informed else share <= 0.3


def test_toward_a_gaussian_of_another_volatility_blends_with_its_gaps() -> None:
    q = np.array([[[-3.0, 0.0, 0.5], [-0.1, 0.0, 4.0]]])
    ratio = np.array([[2.0, 0.5]])
    np.testing.assert_allclose(toward_scale(q, 0.0, QUANTILES, ratio), Z * ratio[..., None])
    half = toward_scale(q, 0.5, QUANTILES, ratio)
    np.testing.assert_allclose(half[0, 1], [-np.sqrt(0.1 * -Z[0] * 0.5), 0.0, np.sqrt(2 * Z[2])])


def regime(n: int, horizons: int, seed: int) -> tuple[np.ndarray, ...]:
    """Windows whose returns follow a recent volatility `fast` (times the scale `unit`) that a
    network, trained on other years, does not see: it forecasts the scale alone."""
    rng = np.random.default_rng(seed)
    unit = rng.uniform(1e-4, 3e-4, (n, horizons))
    fast = np.exp(rng.normal(0.0, 0.4, (n, 1))) * np.ones((1, horizons))
    y = rng.normal(size=(n, horizons)) * unit * fast
    q = Z * np.ones((n, horizons, 1)) * unit[..., None]
    return q, y, unit, fast


def test_the_fast_share_follows_a_recent_volatility_the_network_misses() -> None:
    q, y, unit, fast = regime(20_000, 2, 1)
    noise = np.exp(np.random.default_rng(2).normal(0.0, 0.4, fast.shape))
    chosen = fit_fast(q, y, unit, {10.0: noise, 30.0: fast}, QUANTILES)
    assert chosen.halflife == 30.0 and chosen.share >= 0.8


def test_the_fast_share_stays_off_where_the_network_already_knows() -> None:
    _, y, unit, fast = regime(20_000, 2, 3)
    knows = fast[..., None] * Z * unit[..., None]  # the network's intervals follow it exactly
    noise = np.exp(np.random.default_rng(4).normal(0.0, 0.4, fast.shape))
    chosen = fit_fast(knows, y, unit, {10.0: noise}, QUANTILES)
    assert chosen == FastBlend() and chosen.share in FAST_SHARES


@pytest.mark.parametrize(
    "values", [{"halflife": 0, "share": 0.5}, {"halflife": 10, "share": 1.5}, {"share": 0.2}]
)
def test_a_fast_blend_that_is_not_a_half_life_and_a_share_is_refused(
    values: dict[str, float],
) -> None:
    with pytest.raises(ValueError, match="is not a positive half-life and a share"):
        FastBlend.from_dict(values)
