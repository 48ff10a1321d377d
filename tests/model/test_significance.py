"""Significance tests with known answers: Diebold-Mariano (HLN, Newey-West), the model
confidence set, Student's t."""

from __future__ import annotations

import math

import numpy as np

from model.significance import (
    MIN_BLOCKS,
    block_bootstrap,
    block_means,
    diebold_mariano,
    model_confidence_set,
    newey_west_variance,
    regularized_beta,
    student_t_two_sided,
)


def test_student_t_p_values_are_the_tables() -> None:
    assert math.isclose(student_t_two_sided(2.228139, 10), 0.05, abs_tol=1e-6)
    assert math.isclose(student_t_two_sided(12.7062, 1), 0.05, abs_tol=1e-5)
    assert math.isclose(student_t_two_sided(1.959964, 1e9), 0.05, abs_tol=1e-6)
    assert student_t_two_sided(0.0, 5) == 1.0 and student_t_two_sided(math.inf, 5) == 0.0
    assert math.isclose(regularized_beta(0.3, 2.0, 3.0), 0.3483, abs_tol=1e-12)


def test_newey_west_variance_of_iid_and_of_repeated_values() -> None:
    rng = np.random.default_rng(0)
    iid = rng.normal(0, 2, 200_000)
    assert math.isclose(newey_west_variance(iid, 50), 4.0, rel_tol=0.03)
    # Each value held for 10 windows: the long-run variance is 10x the variance.
    held = np.repeat(rng.normal(0, 1, 20_000), 10)
    assert math.isclose(newey_west_variance(held, 100), 10 * held.var(), rel_tol=0.1)


def test_diebold_mariano_on_an_iid_differential_with_a_known_mean() -> None:
    rng = np.random.default_rng(1)
    n, mean = 10_000, 0.05
    result = diebold_mariano(rng.normal(mean, 1.0, n), lags=20)
    h = 21
    factor = math.sqrt((n + 1 - 2 * h + h * (h - 1) / n) / n)
    assert result["hln_factor"] == factor
    assert abs(result["statistic"] - mean * math.sqrt(n) * factor) < 3.0  # 5 = its mean, sd 1
    assert result["p_value"] < 0.01 and result["hac_lags"] == 20


def test_diebold_mariano_rejects_at_its_level_under_the_null_and_with_dependence() -> None:
    """A differential of mean zero, held for 30 windows at a time: with a day of lags the test
    rejects about 5 % of the time; ignoring the dependence (no lags) rejects far more often."""
    rng = np.random.default_rng(2)
    hac, naive = [], []
    for _ in range(300):
        diff = np.repeat(rng.normal(0, 1, 200), 30) + rng.normal(0, 0.1, 6000)
        hac.append(diebold_mariano(diff, lags=300)["p_value"] < 0.05)
        naive.append(diebold_mariano(diff, lags=0)["p_value"] < 0.05)
    assert 0.01 <= np.mean(hac) <= 0.10
    assert np.mean(naive) > 0.5


def test_identical_forecasters_are_not_different() -> None:
    result = diebold_mariano(np.zeros(5000))
    assert result["statistic"] == 0.0 and result["p_value"] == 1.0
    loss = np.random.default_rng(3).exponential(1.0, 3000)
    mcs = model_confidence_set({"a": loss, "b": loss.copy()}, block=100, replicates=200)
    assert mcs["included"] == ["a", "b"]


def test_the_model_confidence_set_drops_a_clearly_worse_forecaster_only() -> None:
    rng = np.random.default_rng(4)
    n = 20 * 1380
    common = np.repeat(rng.exponential(1.0, n // 60), 60)  # losses move together, by the hour
    losses = {
        "best": common + rng.exponential(1.0, n),
        "twin": common + rng.exponential(1.0, n),  # the same expected loss
        "worse": common + rng.exponential(1.0, n) + 0.2,
    }
    mcs = model_confidence_set(losses, replicates=500)
    assert set(mcs["included"]) == {"best", "twin"}
    assert mcs["p_values"]["worse"] < 0.01 and mcs["statistic"] == "T_max"
    assert min(mcs["p_values"]["best"], mcs["p_values"]["twin"]) > 0.1
    assert max(mcs["p_values"].values()) == 1.0


def test_the_bootstrap_weighs_every_window_alike() -> None:
    """Only the last day differs: a replicate draws its windows as often as any others (the
    blocks wrap round), so the replicates centre on the sample mean."""
    diff = np.zeros(40 * 100)
    diff[-100:] = 1.0
    means = block_means(diff[:, None], 100, 4000, seed=0)[:, 0]
    assert math.isclose(means.mean(), diff.mean(), rel_tol=0.05)


def test_too_few_days_of_windows_decide_nothing() -> None:
    """Under MIN_BLOCKS blocks, the interval and the test are too narrow to trust: reported,
    flagged, and the interval's verdict is None."""
    rng = np.random.default_rng(2)
    short, long = (rng.normal(1.0, 1.0, days * 50) for days in (MIN_BLOCKS - 1, MIN_BLOCKS))
    assert block_bootstrap(short, block=50)["excludes_zero"] is None
    assert block_bootstrap(short, block=50)["too_short"] is True
    assert block_bootstrap(long, block=50)["excludes_zero"] is True
    assert diebold_mariano(short, lags=49)["too_short"] is True
    assert diebold_mariano(long, lags=49)["too_short"] is False
