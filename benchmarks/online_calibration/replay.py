"""Scoring and online calibration replayed offline as the worker runs them, and the coverage
figures of the scored records: shared by the online-calibration benchmark and its reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from model.serving.conformal import CalibrationConfig, Calibrator
from model.serving.scoring import QUANTILES, ScoreValue
from model.serving.scoring_state import Rolling, Scorer, pooled_figures

START = 300  # scored forecasts before the mechanism check begins
BAND = 0.03  # the 80 +- 3 %


def replay(
    clean: list[dict[str, Any]], forecasts: list[dict[str, Any]], config: CalibrationConfig
) -> list[ScoreValue]:
    """The worker's order: bar t reaches the scorer before the forecast of t is calibrated,
    published and handed to the scorer. The scored records, in order."""
    calibrator = Calibrator(config)
    scorer, records = Scorer(), []
    by_ts = {v["ts_event"]: v for v in forecasts}
    for bar in clean:
        new = scorer.on_bar(bar)
        calibrator.update(new)
        value = by_ts.get(bar["ts_event"])
        if value is not None:
            later = scorer.on_forecast(calibrator.apply(value))
            calibrator.update(later)
            new += later
        records += new
    return [r for r in records if r["unscored"] is None]


def coverage_series(records: list[ScoreValue], window: int) -> dict[str, np.ndarray]:
    """After each scored forecast: the rolling coverage the dashboard shows (mean over
    horizons of `barcast_forecast_coverage`) and the cumulative coverage since the start."""
    rolling, shown = Rolling(window=window), []
    for record in records:
        rolling.add(record)
        figures = pooled_figures([rolling])
        shown.append(np.mean([v for (_, name), v in figures.items() if name == "coverage"]))
    inside = np.array([np.mean(r["inside"] or []) for r in records])
    return {
        "ts": np.array([r["ts_event"] for r in records]),
        "rolling": np.array(shown),
        "cumulative": np.cumsum(inside) / np.arange(1, len(inside) + 1),
    }


def summary(records: list[ScoreValue]) -> dict[str, float]:
    """Coverage, tails and mean pinball (bp, over horizons and quantiles) of scored records."""

    def mean(name: str) -> float:
        return float(np.mean([r[name] for r in records]))  # type: ignore[literal-required]

    pinball = [np.mean([r["pinball"][q] for q in QUANTILES]) for r in records if r["pinball"]]
    return {
        "n": len(records),
        "coverage": mean("inside"),
        "below_q10": mean("below_q10"),
        "above_q90": mean("above_q90"),
        "mean_pinball_bp": float(np.mean(pinball) * 1e4),
    }


def band(series: dict[str, np.ndarray], start: int, key: str) -> dict[str, Any]:
    """Range of a coverage series from `start` scored forecasts on, and the first count from
    which it stays within 80 +- 3 % (None: it leaves the band at the end)."""
    values = series[key]
    outside = np.flatnonzero(np.abs(values - 0.8) > BAND)
    settled = 0 if not len(outside) else int(outside[-1]) + 1
    return {
        "min": float(values[start:].min()),
        "max": float(values[start:].max()),
        "within_80pm3_from": settled if settled < len(values) else None,
    }
