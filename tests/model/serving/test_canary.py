"""A canary's verdict (model.serving.canary): none before enough of its forecasts are scored;
refused when its pinball is clearly worse than the incumbent's, or its interval's coverage is
outside the alert band; promoted when it forecasts no worse; its states round-trip exactly."""

from __future__ import annotations

import numpy as np

from model.serving.canary import (
    CanaryTrack,
    PartitionCanary,
    Reason,
    Verdict,
    decide,
    scored_count,
)
from model.serving.conformal import CalibrationConfig, SymbolCalibration
from model.serving.scoring import Decided, ForecastFields, LabelBar, score_all, score_decided
from model.serving.shadow import CANARY, Pending, SymbolShadow
from model.serving.skill import ServeMode

MINUTE = 60 * 10**9


def track(n: int, seed: int, worse: float = 0.0, inside: int = 8, start: int = 0) -> CanaryTrack:
    """A symbol's `n` scored canary forecasts, its losses `worse` x the incumbent's plus noise,
    `inside` of 10 labels inside its interval."""
    rng = np.random.default_rng(seed)
    t = CanaryTrack("c", start)
    for i in range(n):
        incumbent = rng.uniform(1.0, 2.0)
        own = incumbent * (1 + worse) * rng.uniform(0.95, 1.05)
        t.scored.append((start + i * MINUTE, own, incumbent, inside, 10))
    return t


def test_no_verdict_before_enough_forecasts_are_scored() -> None:
    tracks = [track(100, 0), track(99, 1)]
    assert scored_count(tracks) == 199
    assert decide(tracks, 200) is None
    assert decide([*tracks, track(1, 2)], 200) is not None


def test_a_clearly_worse_canary_is_refused_for_its_pinball() -> None:
    decision = decide([track(150, 3, worse=0.2), track(150, 4, worse=0.2)], 300)
    assert decision is not None and decision.verdict is Verdict.REFUSED
    assert decision.reason is Reason.PINBALL and decision.skill.upper < 0
    assert decision.forecasts == 300 and "skill over the incumbent" in decision.describe()


def test_a_canary_no_worse_is_promoted_unless_its_coverage_is_off() -> None:
    same = decide([track(300, 5)], 300)
    assert same is not None and same.verdict is Verdict.PROMOTED and same.coverage == 0.8
    better = decide([track(300, 6, worse=-0.2)], 300)
    assert better is not None and better.verdict is Verdict.PROMOTED
    narrow = decide([track(300, 7, worse=-0.2, inside=5)], 300)
    assert narrow is not None and narrow.verdict is Verdict.REFUSED
    assert narrow.reason is Reason.COVERAGE and narrow.coverage == 0.5


def test_states_round_trip_and_a_promoted_canary_keeps_its_calibration() -> None:
    state = PartitionCanary("a", "c", 123, {"b": "refused: pinball"})
    assert PartitionCanary.from_bytes(state.to_bytes()) == state
    t = track(5, 8, start=7 * MINUTE)
    t.calibration = SymbolCalibration(
        "canary", 7 * MINUTE, [[0.1, -0.2]], 4, [(9, (True,), (False,))]
    )
    assert CanaryTrack.from_dict(t.to_dict()) == t
    promoted = t.promoted()
    assert promoted.model_id == "c" and promoted.log_scale == [[0.1, -0.2]] and promoted.n == 4
    shadow = SymbolShadow(window_size=20)
    shadow.serve("a")
    shadow.canary = t
    back = SymbolShadow.from_bytes(shadow.to_bytes())
    assert back.canary == t and back.to_bytes() == shadow.to_bytes()


def test_a_replaced_canarys_pending_forecasts_count_for_neither_canary() -> None:
    """Canary c1 forecasts minute 0, then c2 replaces it from minute 1 (a newer checkpoint
    landed): once minute 0's label is decided, its score joins no verdict and no record names
    c2 beside it."""
    h, config, shadow = 3, CalibrationConfig(), SymbolShadow()
    shadow.serve("a")
    quantiles = {"q10": [-0.01] * h, "q50": [0.0] * h, "q90": [0.01] * h}
    for ts, canary in ((0, "c1"), (MINUTE, "c2")):
        value = {"symbol": "ES", "ts_event": ts, "close": 100.0, "horizons": [1, 2, 3]}
        _, scored = shadow.canary_forecast(value | quantiles | {"model_id": canary}, config)
        shadow.pending.append(Pending(ts, "model", {CANARY: scored}))
    forecast = ForecastFields(
        "ES", 0, 100.0, (1, 2, 3), "a", *(tuple(q) for q in quantiles.values())
    )
    bars = tuple(LabelBar(m * MINUTE, 100.0 + 0.1 * m, False) for m in range(1, h + 1))
    record, _ = score_decided([Decided(forecast, bars)])[0]
    entry, shadows = shadow.decided(Decided(forecast, bars))
    shadow.scored(record, entry, score_all(shadows), ServeMode.MODEL, calibrating=True)
    assert shadow.canary is not None and shadow.canary.model_id == "c2"
    assert shadow.canary.scored == [] and "canary" not in record


def test_with_calibration_off_restored_calibrations_take_no_score() -> None:
    """BARCAST_ONLINE_CALIBRATION turned off across a restart: the baselines' and the canary's
    calibrations restored from the run with it on take no score (nothing would apply them, and
    the state is written after every score)."""
    h, on, off = 3, CalibrationConfig(enabled=True), CalibrationConfig(enabled=False)
    quantiles = {"q10": [-0.01] * h, "q50": [0.0] * h, "q90": [0.01] * h}
    raw = {"volatility_scale": tuple(quantiles.values()), "tod_ewma": tuple(quantiles.values())}

    def value(ts: int, model_id: str) -> dict:
        base = {"symbol": "ES", "ts_event": ts, "close": 100.0, "horizons": [1, 2, 3]}
        return base | quantiles | {"model_id": model_id}

    shadow = SymbolShadow()
    shadow.serve("a")
    shadow.forecast(value(0, "a"), raw, on, ServeMode.MODEL)
    shadow.canary_forecast(value(0, "c"), on)
    shadow = SymbolShadow.from_bytes(shadow.to_bytes())  # the restart, with calibration off
    for minute in range(1, 40):
        ts = minute * MINUTE
        _, pending = shadow.forecast(value(ts, "a"), raw, off, ServeMode.MODEL)
        _, canary = shadow.canary_forecast(value(ts, "c"), off)
        pending.quantiles[CANARY] = canary
        shadow.pending.append(pending)
        forecast = ForecastFields("ES", ts, 100.0, (1, 2, 3), "a", *map(tuple, quantiles.values()))
        bars = tuple(LabelBar(ts + m * MINUTE, 100.0, False) for m in range(1, h + 1))
        record, _ = score_decided([Decided(forecast, bars)])[0]
        entry, shadows = shadow.decided(Decided(forecast, bars))
        shadow.scored(record, entry, score_all(shadows), ServeMode.MODEL, calibrating=False)
    assert set(shadow.calibrations) == {"volatility_scale", "tod_ewma"}
    assert shadow.canary is not None and shadow.canary.calibration.model_id == CANARY
    assert [len(c.waiting) for c in shadow.calibrations.values()] == [0, 0]
    assert shadow.canary.calibration.waiting == [] and len(shadow.canary.scored) == 39
