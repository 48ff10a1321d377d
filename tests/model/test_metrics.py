"""Metric sanity: known answers, so a broken metric (the old report's val loss of exactly 0)
cannot pass for a good model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model.loop import pinball_loss
from model.metrics import attention_entropy, coverage, pinball, pinball_losses, q_risk, summarize

QS = (0.1, 0.5, 0.9)


def test_perfect_forecast_scores_zero() -> None:
    y = np.random.default_rng(0).normal(size=(50, 4))
    q = np.repeat(y[..., None], 3, axis=-1)
    assert np.all(pinball(y, q, QS) == 0) and np.all(q_risk(y, q, QS) == 0)
    report = summarize(y, q, QS)
    assert report["mean_pinball"] == 0 and report["mae_median"] == 0
    assert report["coverage_interval"] == 1.0


def test_constant_forecast_has_the_known_loss() -> None:
    """y = +1 or -1 with equal counts, forecast 0: pinball = (q + (1 - q)) / 2 = 0.5 for every
    quantile, q-risk = 2 * sum(QL) / sum|y| = 1, half the outcomes below each quantile."""
    y = np.array([[1.0], [-1.0]] * 10)
    q = np.zeros((20, 1, 3))
    np.testing.assert_allclose(pinball(y, q, QS), [[0.5, 0.5, 0.5]])
    np.testing.assert_allclose(q_risk(y, q, QS), [1.0, 1.0, 1.0])
    below, inside = coverage(y, q)
    np.testing.assert_allclose(below, [[0.5, 0.5, 0.5]])
    assert inside.tolist() == [0.0]
    report = summarize(y, q, QS, unit=1.0)
    assert report["mean_pinball"] == pytest.approx(0.5) and report["mae_median"] == 1.0


def test_pinball_is_asymmetric() -> None:
    y = np.array([[2.0]])
    q = np.zeros((1, 1, 3))  # all quantiles 2 below the outcome
    np.testing.assert_allclose(pinball(y, q, QS)[0], [0.2, 1.0, 1.8])


def test_torch_training_loss_matches_the_metric() -> None:
    g = np.random.default_rng(1)
    y, q = g.normal(size=(30, 4)), g.normal(size=(30, 4, 3))
    loss = pinball_loss(torch.from_numpy(q), torch.from_numpy(y), torch.tensor(QS))
    assert loss.item() == pytest.approx(pinball(y, q, QS).mean())


def test_pinball_is_the_mean_of_the_losses_the_worker_scores() -> None:
    rng = np.random.default_rng(3)
    y, q = rng.normal(size=(5, 10)) * 1e-3, rng.normal(size=(5, 10, 3)) * 1e-3
    losses = pinball_losses(y, q, QS)
    assert losses.shape == (5, 10, 3)
    assert (losses >= 0).all()
    assert np.array_equal(pinball(y, q, QS), losses.mean(axis=0))
    # One window's losses do not depend on the others scored with it.
    assert np.array_equal(pinball_losses(y[2:3], q[2:3], QS), losses[2:3])


def test_q_risk_refuses_all_zero_outcomes() -> None:
    with pytest.raises(ValueError, match="undefined"):
        q_risk(np.zeros((3, 2)), np.zeros((3, 2, 3)), QS)


def test_attention_entropy() -> None:
    uniform = np.full((2, 3, 4), 0.25)
    assert attention_entropy(uniform) == pytest.approx(np.log(4))
    one_hot = np.zeros((2, 3, 4))
    one_hot[..., 1] = 1.0
    assert attention_entropy(one_hot) == 0.0
    masked = np.array([[0.5, 0.5, 0.0, 0.0]])  # masked positions hold exactly 0
    assert attention_entropy(masked) == pytest.approx(np.log(2))
