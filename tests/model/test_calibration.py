"""model.calibration: the pull toward the volatility scale's Gaussian, fitted on calibration
windows, keeps what the network knows and drops what it does not."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from model.calibration import SHRINK_WEIGHTS, fit_shrink, toward_scale

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
