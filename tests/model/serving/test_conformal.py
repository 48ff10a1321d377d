"""Online calibration: a miscalibrated forecaster is pulled to nominal coverage, a calibrated one
stays calibrated, the state round-trips exactly and the off switch is the identity."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from features.bars import FIXED_PER_UNIT
from model.covariates import NS_PER_MIN
from model.serving.conformal import (
    SCHEMA_VERSION,
    CalibrationConfig,
    Calibrator,
    SymbolCalibration,
)
from model.serving.scoring import ScoreValue
from model.serving.scoring_state import Scorer, SymbolScoring

T0 = 1_704_700_800_000_000_000
H = 10
SIGMA = 1e-4  # per-minute log-return volatility of the synthetic market
Z90 = 1.2815515655446004  # the standard normal's 0.9 quantile


def market(seed: int, minutes: int, width: float) -> tuple[list[dict[str, Any]], list[dict]]:
    """Gaussian 1-minute log returns of a known scale, and a forecaster whose 80 % interval is
    `width` x the true one (q50 = 0, the true median)."""
    rng = np.random.default_rng(seed)
    log_price = math.log(1.1) + np.cumsum(rng.normal(0.0, SIGMA, minutes))
    bars, forecasts = [], []
    half = width * Z90 * SIGMA * np.sqrt(np.arange(1, H + 1))
    for i, level in enumerate(log_price):
        ts = T0 + i * NS_PER_MIN
        fixed = round(math.exp(level) * FIXED_PER_UNIT)
        bars.append({"symbol": "X", "ts_event": ts, "close": fixed, "status": "clean"})
        close = fixed * 1e-9
        value: dict[str, Any] = {"symbol": "X", "ts_event": ts, "close": close}
        value["horizons"] = list(range(1, H + 1))
        for name, q in (("q10", -half), ("q50", 0 * half), ("q90", half)):
            value[name] = q.tolist()
            value["price_" + name] = (close * np.exp(q)).tolist()
        value.update(model_id="m", fingerprint="f", batch_size=1, latency_ms=0.0)
        forecasts.append(value)
    return bars, forecasts


def run(
    bars: list[dict[str, Any]],
    forecasts: list[dict[str, Any]],
    calibrator: Calibrator,
    ahead: int = 0,
    scorer: Scorer | None = None,
    start: int = 0,
) -> tuple[list[dict[str, Any]], list[ScoreValue]]:
    """The worker's order from forecast `start` on: every bar up to t (and `ahead` more) reaches
    the scorer before the forecast of t is calibrated, published and handed to the scorer."""
    scorer = scorer or Scorer()
    published: list[dict[str, Any]] = []
    records: list[ScoreValue] = []
    fed = start + ahead if start else 0  # a resumed run's scorer has seen those bars
    for i in range(start, len(forecasts)):
        while fed < min(len(bars), i + 1 + ahead):
            new = scorer.on_bar(bars[fed])
            calibrator.update(new)
            records += new
            fed += 1
        published.append(calibrator.apply(forecasts[i]))
        new = scorer.on_forecast(published[-1])
        calibrator.update(new)
        records += new
    return published, records


def coverage(records: list[ScoreValue]) -> tuple[float, float, float]:
    inside = np.array([r["inside"] for r in records], dtype=float)
    below = np.array([r["below_q10"] for r in records], dtype=float)
    above = np.array([r["above_q90"] for r in records], dtype=float)
    return inside.mean(), below.mean(), above.mean()


@pytest.mark.parametrize("width", [0.5, 2.0])
def test_a_miscalibrated_forecaster_is_pulled_to_nominal_coverage(width: float) -> None:
    bars, forecasts = market(seed=1, minutes=4000, width=width)
    _, raw = run(bars, forecasts, Calibrator(CalibrationConfig(enabled=False)))
    assert abs(coverage(raw)[0] - 0.8) > 0.15, "the raw forecaster is not miscalibrated"
    _, records = run(bars, forecasts, Calibrator())
    inside, below, above = coverage(records[1000:])  # after 1,000 scored forecasts
    assert inside == pytest.approx(0.8, abs=0.03)
    assert below == pytest.approx(0.1, abs=0.02) and above == pytest.approx(0.1, abs=0.02)


def test_the_learned_scale_undoes_the_miscalibration() -> None:
    bars, forecasts = market(seed=2, minutes=4000, width=0.5)
    calibrator = Calibrator()
    run(bars, forecasts, calibrator)
    scale = np.exp(np.array(calibrator.state("X").log_scale))
    np.testing.assert_allclose(scale, 2.0, rtol=0.25)


def test_a_calibrated_forecaster_stays_calibrated() -> None:
    bars, forecasts = market(seed=3, minutes=4000, width=1.0)
    calibrator = Calibrator()
    _, records = run(bars, forecasts, calibrator)
    assert coverage(records)[0] == pytest.approx(0.8, abs=0.03)
    np.testing.assert_allclose(np.exp(np.array(calibrator.state("X").log_scale)), 1.0, rtol=0.25)


def test_published_values_carry_calibrated_and_raw_quantiles() -> None:
    bars, forecasts = market(seed=4, minutes=300, width=0.5)
    published, _ = run(bars, forecasts, Calibrator())
    last, raw = published[-1], forecasts[-1]
    assert last["schema_version"] == SCHEMA_VERSION
    for name in ("q10", "q50", "q90"):
        assert last["raw_" + name] == raw[name]
    assert last["q50"] == raw["q50"] and last["price_q50"] == raw["price_q50"]
    assert last["q90"][0] > raw["q90"][0] and last["q10"][0] < raw["q10"][0]  # widened
    np.testing.assert_allclose(last["price_q90"], last["close"] * np.exp(last["q90"]), rtol=1e-15)


def test_calibration_does_not_depend_on_how_far_the_bars_are_ahead() -> None:
    bars, forecasts = market(seed=5, minutes=600, width=0.5)
    lockstep, _ = run(bars, forecasts, Calibrator())
    ahead, _ = run(bars, forecasts, Calibrator(), ahead=7)
    assert ahead == lockstep


def test_state_round_trip_is_exact_and_resumes_identically() -> None:
    bars, forecasts = market(seed=6, minutes=600, width=0.5)
    expected, _ = run(bars, forecasts, Calibrator())
    first, scorer = Calibrator(), Scorer()
    published, _ = run(bars, forecasts[:300], first, scorer=scorer)
    data = first.state("X").to_bytes()
    restored = SymbolCalibration.from_bytes(data)
    assert restored == first.state("X") and restored.to_bytes() == data
    second = Calibrator()
    second.symbols["X"] = restored
    resumed = Scorer()
    resumed.symbols["X"] = SymbolScoring.from_bytes(scorer.state("X").to_bytes())
    rest, _ = run(bars, forecasts, second, scorer=resumed, start=300)
    assert published + rest == expected


def test_the_off_switch_is_the_identity() -> None:
    bars, forecasts = market(seed=7, minutes=300, width=0.5)
    calibrator = Calibrator(CalibrationConfig(enabled=False))
    published, _ = run(bars, forecasts, calibrator)
    assert published == forecasts
    assert calibrator.state("X") == SymbolCalibration()


def test_another_checkpoint_starts_afresh() -> None:
    bars, forecasts = market(seed=8, minutes=300, width=0.5)
    calibrator = Calibrator()
    run(bars, forecasts, calibrator)
    assert calibrator.state("X").n > 0
    swapped = dict(forecasts[-1], model_id="other", ts_event=forecasts[-1]["ts_event"] + 1)
    out = calibrator.apply(swapped)
    assert calibrator.state("X").n == 0
    assert out["q10"] == swapped["q10"] and out["raw_q10"] == swapped["q10"]
