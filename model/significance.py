"""Is one forecaster's mean loss really lower, and which forecasters might be the best?

Window losses are serially dependent: neighbouring windows share most of their label bars and
volatility clusters for hours and returns to the next day's same minutes. So every figure here
treats a day of consecutive windows as the unit of dependence:

- `block_bootstrap`: a circular block bootstrap (Politis & Romano 1992) of the mean
  difference, blocks of a trading day of windows, so the interval is not the far too narrow
  one an i.i.d. bootstrap would give; circular, so that the first and last windows weigh in a
  replicate as much as the others and the interval is centred on the sample mean;
- `diebold_mariano`: the Diebold-Mariano test of equal mean loss with a Newey-West (Bartlett)
  long-run variance over a trading day of lags and the Harvey-Leybourne-Newbold small-sample
  correction, against Student's t;
- `model_confidence_set`: the model confidence set of Hansen, Lunde & Nason (2011) over every
  forecaster, by the T_max statistic with the same block bootstrap.

The series is a symbol's windows in time order (several symbols' follow one another). Over
fewer than `MIN_BLOCKS` days of windows, a day-long block leaves too few blocks for either the
bootstrap or the long-run variance to be right (both come out too narrow): the figures are
reported, flagged `too_short`, and the bootstrap's `excludes_zero` is None, deciding nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

BLOCK = 1380  # consecutive windows per block: one CME Globex trading day of one symbol
REPLICATES = 2000
HAC_LAGS = 1380  # Newey-West lags: a trading day of windows
MCS_ALPHA = 0.1  # the set holds the best forecaster with probability 90 %
MCS_REPLICATES = 1000
MIN_BLOCKS = 20  # days of windows a comparison needs before its interval or test decides


def block_bootstrap(
    diff: np.ndarray, block: int = BLOCK, replicates: int = REPLICATES, seed: int = 0
) -> dict[str, Any]:
    """Mean of `diff` (one value per window, in time order) and its 95 % percentile interval."""
    n = len(diff)
    if n == 0:
        raise ValueError("no window to compare")
    short = n < MIN_BLOCKS * block
    block = max(1, min(block, n))
    means = block_means(diff[:, None], block, replicates, seed)[:, 0]
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {
        "mean": float(diff.mean()),
        "ci95": [float(lo), float(hi)],
        "excludes_zero": None if short else bool(lo > 0 or hi < 0),
        "too_short": short,
        "method": "circular block",
        "block": block,
        "replicates": replicates,
    }


def block_means(values: np.ndarray, block: int, replicates: int, seed: int) -> np.ndarray:
    """`(replicates, m)` column means of `values` `(n, m)` resampled as circular blocks of
    `block` rows (a block starting near the end wraps to the start), the same blocks for every
    column, joined and cut at n rows."""
    n = len(values)
    rng = np.random.default_rng(seed)
    k = -(-n // block)
    starts = rng.integers(0, n, size=(replicates, k))
    # Block sums from prefix sums: memory replicates x k x m, not replicates x n.
    wrapped = np.concatenate([values, values[: block - 1]])
    prefix = np.concatenate([np.zeros((1, values.shape[1])), np.cumsum(wrapped, axis=0)])
    lengths = np.full(k, block)
    lengths[-1] = n - (k - 1) * block  # the last block is cut where n windows are reached
    return (prefix[starts + lengths] - prefix[starts]).sum(axis=1) / n


def newey_west_variance(diff: np.ndarray, lags: int) -> float:
    """Long-run variance of `diff`: autocovariances up to `lags` with Bartlett weights."""
    d = diff - diff.mean()
    n = len(d)
    variance = float(d @ d) / n
    for k in range(1, min(lags, n - 1) + 1):
        variance += 2.0 * (1.0 - k / (lags + 1)) * float(d[k:] @ d[:-k]) / n
    return variance


def diebold_mariano(diff: np.ndarray, lags: int = HAC_LAGS) -> dict[str, Any]:
    """Test of a zero mean loss differential `diff` (baseline minus forecaster: > 0, the
    forecaster is better). DM = mean / sqrt(long-run variance / n), times the Harvey, Leybourne
    & Newbold (1997) factor sqrt((n + 1 - 2h + h (h - 1) / n) / n) with h - 1 = `lags`, against
    Student's t with n - 1 degrees of freedom; two-sided p-value."""
    n = len(diff)
    if n < 2:
        raise ValueError(f"a Diebold-Mariano test needs at least 2 windows, got {n}")
    lags = min(lags, n - 1)
    h = lags + 1
    variance = max(newey_west_variance(diff, lags), 0.0)  # Bartlett weights keep it >= 0
    mean = float(diff.mean())
    factor = math.sqrt(max(n + 1 - 2 * h + h * (h - 1) / n, 0.0) / n)
    if variance == 0.0:  # every window the same difference: none, or a certain one
        statistic = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    else:
        statistic = mean / math.sqrt(variance / n) * factor
    return {
        "mean": mean,
        "statistic": statistic,
        "p_value": student_t_two_sided(statistic, n - 1),
        "too_short": n < MIN_BLOCKS * h,
        "hac_lags": lags,
        "hln_factor": factor,
        "n": n,
    }


def model_confidence_set(
    losses: dict[str, np.ndarray],
    alpha: float = MCS_ALPHA,
    block: int = BLOCK,
    replicates: int = MCS_REPLICATES,
    seed: int = 0,
) -> dict[str, Any]:
    """Hansen, Lunde & Nason's model confidence set by the T_max statistic: per-window losses
    (the same windows for all, in time order) -> each forecaster's MCS p-value and the set at
    level 1 - `alpha`. Forecasters are eliminated one at a time, the one with the largest
    studentized excess loss over the set's mean, while equal predictive ability is rejected;
    elimination goes on to the last one, so every forecaster gets its p-value (the running
    maximum of the tests' p-values), and the set is those with a p-value of at least `alpha`."""
    names = list(losses)
    table = np.column_stack([np.asarray(losses[name], dtype=np.float64) for name in names])
    if table.shape[0] == 0:
        raise ValueError("no window to compare")
    block = max(1, min(block, len(table)))
    means = table.mean(axis=0)
    boot = block_means(table, block, replicates, seed)  # (replicates, m)
    alive, p_values, running = list(range(len(names))), {}, 0.0
    while len(alive) > 1:
        excess = means[alive] - means[alive].mean()
        boot_excess = boot[:, alive] - boot[:, alive].mean(axis=1, keepdims=True) - excess
        sd = np.sqrt((boot_excess**2).mean(axis=0))
        ok = sd > 0  # a forecaster equal to the set's mean in every replicate: t = 0
        t = np.where(ok, excess / np.where(ok, sd, 1.0), 0.0)
        t_boot = np.where(ok, boot_excess / np.where(ok, sd, 1.0), 0.0).max(axis=1)
        running = max(running, float((t_boot >= t.max()).mean()))
        worst = alive[int(np.argmax(t))]
        p_values[names[worst]] = running
        alive.remove(worst)
    p_values[names[alive[0]]] = 1.0
    return {
        "statistic": "T_max",
        "alpha": alpha,
        "included": [name for name in names if p_values[name] >= alpha],
        "p_values": {name: p_values[name] for name in names},
        "block": block,
        "replicates": replicates,
    }


def student_t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom: I_x(df/2, 1/2) at
    x = df / (df + t²), the regularized incomplete beta function."""
    if math.isinf(t):
        return 0.0
    return regularized_beta(df / (df + t * t), df / 2.0, 0.5)


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) by its continued fraction (modified Lentz), on the side where it converges."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - regularized_beta(1.0 - x, b, a)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a
