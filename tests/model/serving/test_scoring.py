"""Scoring (model.serving.scoring and scoring_state; the stage that runs it in the worker is
tests/streams/runtime/stages/test_scores.py's): records equal a hand computation and the
training label rules, do not depend on how bars and forecasts interleave, and survive a state
round trip exactly."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from features.bars import FIXED_PER_UNIT
from model.covariates import NS_PER_MIN
from model.dataset import forward_returns, labels_over_gap_fills, panel_from_arrays
from model.serving.scoring import (
    Decided,
    LabelBar,
    Unscored,
    decode_score,
    encode_score,
    forecast_fields,
    label_minutes,
    score_all,
    score_increments,
    score_offline,
)
from model.serving.scoring_state import (
    STATE_FORMAT,
    Rolling,
    Scorer,
    SymbolScoring,
    pooled_figures,
)
from streams.forecast_metrics import ScoringMetrics

T0 = 1_704_700_800_000_000_000  # 2024-01-08 08:00 UTC, a bar open


def bar(symbol: str, minute: int, price: float, status: str = "clean") -> dict[str, Any]:
    return {
        "symbol": symbol,
        "ts_event": T0 + minute * NS_PER_MIN,
        "close": round(price * FIXED_PER_UNIT),
        "status": status,
    }


def forecast(
    symbol: str, minute: int, close: float, q: list[list[float]], model_id: str = "m"
) -> dict[str, Any]:
    """A `forecasts` value; q[h] = [q10, q50, q90] at horizon h + 1."""
    return {
        "symbol": symbol,
        "ts_event": T0 + minute * NS_PER_MIN,
        "close": round(close * FIXED_PER_UNIT) * 1e-9,
        "horizons": list(range(1, len(q) + 1)),
        "q10": [row[0] for row in q],
        "q50": [row[1] for row in q],
        "q90": [row[2] for row in q],
        "model_id": model_id,
    }


def random_history(
    symbol: str, seed: int, minutes: int = 400, horizon: int = 10
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Bars with session breaks and gap fills, and a forecast of each real bar."""
    rng = np.random.default_rng(seed)
    bars, forecasts, price, minute = [], [], 1.1, 0
    while len(bars) < minutes:
        minute += 1 + (45 if rng.random() < 0.01 else 0)  # a session break now and then
        synthetic = rng.random() < 0.05
        price = price if synthetic else price * math.exp(rng.normal(0, 2e-4))
        bars.append(bar(symbol, minute, price, "synthetic" if synthetic else "clean"))
        if not synthetic:
            width = rng.uniform(1e-4, 4e-4) * np.sqrt(np.arange(1, horizon + 1))
            rows = [[-w, rng.normal(0, 1e-5), w] for w in width]
            forecasts.append(forecast(symbol, minute, price, rows))
    return bars, forecasts


def test_a_score_equals_the_hand_computation() -> None:
    scorer = Scorer()
    value = forecast("6EH4", 0, 1.1, [[-1e-4, 0.0, 1e-4], [-2e-4, 1e-5, 2e-4]])
    assert scorer.on_forecast(value) == []
    assert scorer.on_bar(bar("6EH4", 0, 1.1)) == []
    assert scorer.on_bar(bar("6EH4", 1, 1.1002)) == []  # horizon 2 not yet known
    (record,) = scorer.on_bar(bar("6EH4", 2, 1.0997))
    y = [math.log(1.1002 / 1.1), math.log(1.0997 / 1.1)]
    assert record["unscored"] is None
    assert record["realized"] == pytest.approx(y, rel=1e-12)
    # y1 = +1.8 bp: above q90 (1 bp); y2 = -2.7 bp: below q10 (-2 bp).
    assert record["above_q90"] == [True, False]
    assert record["below_q10"] == [False, True]
    assert record["inside"] == [False, False]
    expected = {
        "q10": [0.1 * (y[0] + 1e-4), 0.9 * (-2e-4 - y[1])],
        "q50": [0.5 * y[0], 0.5 * (1e-5 - y[1])],
        "q90": [0.9 * (y[0] - 1e-4), 0.1 * (2e-4 - y[1])],
    }
    assert record["pinball"] is not None
    for name, losses in expected.items():
        assert record["pinball"][name] == pytest.approx(losses, rel=1e-9), name
    assert decode_score(encode_score(record)) == record


@pytest.mark.parametrize(
    ("bars", "reason"),
    [
        ([bar("X", 1, 1.1), bar("X", 3, 1.1)], Unscored.SESSION_BREAK),  # minute 2 has no bar
        ([bar("X", 1, 1.1), bar("X", 2, 1.1, "synthetic")], Unscored.GAP_FILL),
        ([bar("X", 1, 1.1, "synthetic"), bar("X", 4, 1.1)], Unscored.SESSION_BREAK),
    ],
)
def test_labels_across_a_break_or_over_gap_fills_are_not_scored(
    bars: list[dict[str, Any]], reason: Unscored
) -> None:
    scorer = Scorer()
    scorer.on_forecast(forecast("X", 0, 1.1, [[-1e-4, 0.0, 1e-4]] * 2))
    records = [r for b in bars for r in scorer.on_bar(b)]
    assert [r["unscored"] for r in records] == [reason.value]
    assert records[0]["pinball"] is None and records[0]["inside"] is None


def test_decisions_follow_the_training_label_rules() -> None:
    bars, forecasts = random_history("X", seed=3)
    records = score_offline(forecasts, bars)
    ts = np.array([b["ts_event"] for b in bars])
    close = np.array([b["close"] for b in bars], dtype=np.float64) * 1e-9
    synthetic = np.array([b["status"] == "synthetic" for b in bars])
    labels = forward_returns(ts, close, 10)
    panel = panel_from_arrays(
        ["X"], [(ts, close, np.zeros((len(ts), 1)), np.ones(len(ts), bool))], 10, [synthetic]
    )
    ends = np.flatnonzero(~synthetic & (ts <= ts[-1] - 10 * NS_PER_MIN))
    over_gap = labels_over_gap_fills(panel, ends, 10)
    reasons = {r["unscored"] for r in records.values()}
    assert reasons == {None, "session_break", "gap_fill"}, "the history lacks a case"
    assert len(records) == len(ends)
    for end, gap in zip(ends, over_gap, strict=True):
        record = records[("X", int(ts[end]))]
        if not np.isfinite(labels[end]).all():
            assert record["unscored"] == Unscored.SESSION_BREAK.value
        elif gap:
            assert record["unscored"] == Unscored.GAP_FILL.value
        else:
            assert record["unscored"] is None
            np.testing.assert_allclose(record["realized"], labels[end], rtol=1e-12)


def interleave(rng: random.Random, *streams: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """A random merge keeping each stream's order (what two consumed topics may look like)."""
    queues = [list(s) for s in streams if s]
    out = []
    while queues:
        queue = rng.choice(queues)
        out.append(queue.pop(0))
        queues = [q for q in queues if q]
    return out


def run(events: list[tuple[str, dict[str, Any]]], scorer: Scorer) -> list[Any]:
    out = []
    for kind, value in events:
        out += scorer.on_bar(value) if kind == "bar" else scorer.on_forecast(value)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_score_offline_equals_the_stream_in_any_interleaving(seed: int) -> None:
    rng = random.Random(seed)
    histories = [random_history(symbol, seed * 10 + i) for i, symbol in enumerate("AB")]
    bars = [b for h in histories for b in h[0]]
    forecasts = [f for h in histories for f in h[1]]
    streams = [[("bar", b) for b in h[0]] for h in histories]
    streams += [[("forecast", f) for f in h[1]] for h in histories]
    events = interleave(rng, *streams)
    # a restarted worker repeats some records; each is recorded once
    for i in sorted(rng.sample(range(len(events)), 20), reverse=True):
        events.insert(i + 1, events[i])
    records = run(events, Scorer())
    expected = score_offline(forecasts, bars)
    assert len(records) == len(expected)
    assert {(r["symbol"], r["ts_event"]): r for r in records} == expected
    for symbol in "AB":  # each symbol's records in forecast order
        own = [r["ts_event"] for r in records if r["symbol"] == symbol]
        assert own == sorted(own)


def test_state_round_trip_is_exact_and_resumes_identically() -> None:
    bars, forecasts = random_history("X", seed=5)
    events = interleave(
        random.Random(5), [("bar", b) for b in bars], [("forecast", f) for f in forecasts]
    )
    whole = Scorer(window=50)
    expected = run(events, whole)
    first, second = Scorer(window=50), Scorer(window=50)
    half = len(events) // 2
    out = run(events[:half], first)
    data = first.state("X").to_bytes()
    restored = SymbolScoring.from_bytes(data)
    assert restored.to_bytes() == data
    assert restored == first.state("X")
    second.symbols["X"] = restored
    out += run(events[half:], second)
    assert out == expected
    assert second.state("X").to_bytes() == whole.state("X").to_bytes()


def test_a_state_is_stored_as_doubles_and_one_stored_as_json_still_loads() -> None:
    """A state written before STATE_FORMAT (one JSON document) restores to the same state; the
    stored form now is a fraction of that JSON's bytes."""
    bars, forecasts = random_history("X", seed=3)
    events = interleave(
        random.Random(3), [("bar", b) for b in bars], [("forecast", f) for f in forecasts]
    )
    scorer = Scorer(window=50)
    run(events[: len(events) // 2], scorer)
    state = scorer.state("X")
    assert len(state.pending) >= 5
    legacy = orjson.dumps(
        {
            "window": state.window,
            "retention": state.retention,
            "pending": [f._asdict() for f in state.pending],
            "bars": [list(b) for b in state.bars.values()],
            "last_bar_ts": state.last_bar_ts,
            "last_forecast_ts": state.last_forecast_ts,
            "dropped_through": state.dropped_through,
            "rolling": state.rolling.sums.tolist(),
        }
    )
    assert SymbolScoring.from_bytes(legacy) == state
    assert SymbolScoring.from_bytes(legacy).to_bytes() == state.to_bytes()
    assert len(state.to_bytes()) < 0.6 * len(legacy)
    with pytest.raises(ValueError, match="a newer barcast wrote it"):
        SymbolScoring.from_bytes(bytes([STATE_FORMAT + 1]) + state.to_bytes()[1:])


def test_a_forecast_after_its_bars_left_the_retention_is_late() -> None:
    scorer = Scorer(retention=5)
    for minute in range(1, 21):
        scorer.on_bar(bar("X", minute, 1.1))
    (record,) = scorer.on_forecast(forecast("X", 3, 1.1, [[-1e-4, 0.0, 1e-4]] * 2))
    assert record["unscored"] == Unscored.LATE.value
    (record,) = scorer.on_forecast(forecast("X", 17, 1.1, [[-1e-4, 0.0, 1e-4]] * 2))
    assert record["unscored"] is None
    assert len(scorer.state("X").bars) <= 5


def test_rolling_figures_are_exponentially_weighted_means() -> None:
    bars, forecasts = random_history("X", seed=7)
    scored = [r for r in score_offline(forecasts, bars).values() if r["unscored"] is None]
    rolling = Rolling(window=20)
    for record in scored:
        rolling.add(record)
    weights = (1 - 1 / 20) ** np.arange(len(scored))[::-1]
    inside = np.array([r["inside"][3] for r in scored], dtype=float)
    q90 = np.array([r["pinball"]["q90"][3] for r in scored])
    figures = pooled_figures([rolling])
    assert figures[(4, "coverage")] == pytest.approx(weights @ inside / weights.sum(), rel=1e-9)
    assert figures[(4, "q90")] == pytest.approx(weights @ q90 / weights.sum(), rel=1e-9)
    two = pooled_figures([rolling, rolling])
    assert two[(4, "coverage")] == pytest.approx(figures[(4, "coverage")], rel=1e-12)


def test_rolling_figures_keep_only_the_horizons_still_forecast() -> None:
    """After a model of fewer horizons, the horizons it does not forecast leave the figures
    (their means would otherwise stay frozen at the old model's); the others go on."""
    bars, forecasts = random_history("X", seed=7)
    scored = [r for r in score_offline(forecasts, bars).values() if r["unscored"] is None]
    short = [score_increments(r)[:3] for r in scored]
    rolling, alone = Rolling(window=20), Rolling(window=20)
    for record, three in zip(scored, short, strict=True):
        rolling.add(record, None if len(alone.sums) == 0 else three)
        alone.add(record, three)
    assert len(rolling.sums) == 3 and np.array_equal(rolling.sums, alone.sums)
    assert set(pooled_figures([rolling])) == set(pooled_figures([alone]))


def test_metrics_export_the_pooled_figures() -> None:
    registry = CollectorRegistry()
    metrics = ScoringMetrics(registry)
    metrics.set({(1, "coverage"): 0.8, (1, "q10"): 2e-5})
    text = generate_latest(registry).decode()
    assert 'barcast_forecast_coverage{horizon="1"} 0.8' in text
    assert 'barcast_forecast_pinball{horizon="1",quantile="q10"} 2e-05' in text


def test_malformed_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="lacks \\['q90'\\]"):
        Scorer().on_forecast(
            {k: v for k, v in forecast("X", 0, 1.1, [[0, 0, 0]]).items() if k != "q90"}
        )
    with pytest.raises(ValueError, match=r"forecasts\.scores record lacks"):
        decode_score(b'{"symbol": "X"}')


def test_a_batch_scores_each_forecast_as_if_alone() -> None:
    """The stage scores an agent's batch's decided forecasts together (`score_all`): each record
    is bit-equal to its forecast scored alone, whatever else is in the batch."""
    bars, forecasts = random_history("X", seed=11)
    short = [dict(f, **{name: f[name][:3] for name in ("horizons", "q10", "q50", "q90")})
             for f in forecasts[::7]]  # fmt: skip
    known = {b["ts_event"]: LabelBar.from_clean(b) for b in bars}
    decided = [
        Decided(f, tuple(known.get(ts) for ts in label_minutes(f)))
        for f in (forecast_fields(v) for v in [*forecasts, *short])
        if label_minutes(f)[-1] <= max(known)
    ]
    together = score_all(decided)
    alone = [score_all([d])[0] for d in decided]
    assert orjson.dumps(together) == orjson.dumps(alone)
    assert {len(r["horizons"]) for r in together if r["unscored"] is None} == {3, 10}
    assert {r["unscored"] for r in together} == {None, "session_break", "gap_fill"}
