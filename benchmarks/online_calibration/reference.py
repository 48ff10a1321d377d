"""The online-calibration benchmark's reference (d): a forecaster calibrated by construction,
scored, rolled and tracked by barcast's own scoring stage and calibrator.

A Gaussian random walk of 1-minute log returns and, at every minute, its true q10/q50/q90 for
horizons 1..10. Its rolling coverage (the dashboard's: an exponentially weighted mean over
`window` scored forecasts, horizons pooled) shows how far sampling alone moves a rolling coverage
that nothing could improve. Then the same forecaster through the quantile tracking at the
product's settings and at fixed steps: on a calibrated forecaster every move of the scales is
noise, so a larger step holds the rolling coverage nearer 80 % only by making each forecast
worse; the pinball cost against the true quantiles says how much.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any

import numpy as np

from benchmarks.online_calibration.replay import BAND, START, band, coverage_series, replay, summary
from features.bars import PRICE_SCALE
from model.covariates import NS_PER_MIN
from model.serving.conformal import CalibrationConfig
from model.serving.scoring import QUANTILES

SIGMA = 1e-4  # a minute's log-return volatility (1 bp: 6E's order of magnitude)
HORIZONS = 10
T0 = 1_704_067_200 * 10**9  # 2024-01-01 UTC
FIXED_STEPS = (0.01, 0.03, 0.1, 0.3)


def random_walk(n: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`bars.clean` values of n + HORIZONS minutes and the exact forecasts of the first n."""
    rng = np.random.default_rng(seed)
    log_price = np.log(1.1) + SIGMA * np.cumsum(rng.normal(size=n + HORIZONS))
    closes = np.rint(np.exp(log_price) / PRICE_SCALE).astype(np.int64).tolist()
    ts = (T0 + NS_PER_MIN * np.arange(n + HORIZONS)).tolist()
    bars = [
        {"symbol": "RW", "ts_event": t, "close": c, "status": "clean"}
        for t, c in zip(ts, closes, strict=True)
    ]
    spread = SIGMA * np.sqrt(np.arange(1, HORIZONS + 1))
    exact = {
        name: (NormalDist().inv_cdf(level) * spread).tolist() for name, level in QUANTILES.items()
    }
    forecasts = [
        {
            "symbol": "RW",
            "ts_event": ts[i],
            "close": closes[i] * PRICE_SCALE,
            "horizons": list(range(1, HORIZONS + 1)),
            "model_id": "exact",
            **exact,
        }
        for i in range(n)
    ]
    return bars, forecasts


def trackers() -> dict[str, CalibrationConfig]:
    """The calibrations compared with none: the product's and the tracking at fixed steps."""
    fixed = {f"fixed step {s}": CalibrationConfig(step=s, floor=s) for s in FIXED_STEPS}
    return {"product": CalibrationConfig()} | fixed


def reference(
    n: int, window: int, seeds: int, calibrations: dict[str, CalibrationConfig] | None = None
) -> dict[str, Any]:
    """Without calibration ("static") and with each of `calibrations` (default `trackers()`),
    over `seeds` random walks of n forecasts: the medians of the rolling coverage's minimum and
    maximum from the START-th scored forecast on, the share of walks whose rolling (and
    cumulative) coverage stays within 80 +- 3 % from there, and the mean pinball over the exact
    quantiles' minus 1."""
    walks = [random_walk(n, seed) for seed in range(seeds)]
    compared = {"static": CalibrationConfig(enabled=False)} | (
        trackers() if calibrations is None else calibrations
    )
    runs: dict[str, list[dict[str, float]]] = {}
    for name, config in compared.items():
        for bars, forecasts in walks:
            records = replay(bars, forecasts, config)
            series = coverage_series(records, window)
            rolling, cumulative = band(series, START, "rolling"), band(series, START, "cumulative")
            settled = cumulative["within_80pm3_from"]
            runs.setdefault(name, []).append({
                "min": rolling["min"],
                "max": rolling["max"],
                "within": float(max(abs(rolling["min"] - 0.8), abs(rolling["max"] - 0.8)) <= BAND),
                "cumulative_within": float(settled is not None and settled <= START),
            } | summary(records))  # fmt: skip
    static = np.array([run["mean_pinball_bp"] for run in runs["static"]])
    return {
        "forecasts": n,
        "seeds": seeds,
        "window": window,
        "calibrations": {name: summarize(rows, static) for name, rows in runs.items()},
    }


def summarize(rows: list[dict[str, float]], static_pinball: np.ndarray) -> dict[str, float]:
    pinball = np.array([row["mean_pinball_bp"] for row in rows])
    return {
        "rolling_min_median": float(np.median([row["min"] for row in rows])),
        "rolling_max_median": float(np.median([row["max"] for row in rows])),
        "rolling_within_80pm3_share": float(np.mean([row["within"] for row in rows])),
        "cumulative_within_80pm3_from_start_share": float(
            np.mean([row["cumulative_within"] for row in rows])
        ),
        "coverage": float(np.mean([row["coverage"] for row in rows])),
        "pinball_cost": float(np.mean(pinball / static_pinball) - 1.0),
    }
