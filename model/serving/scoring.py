"""The scoring stage: each published forecast against the `bars.clean` bars of its horizons.

Pure: no Faust, no Kafka. A forecast of bar t (its `ts_event`) waits until the symbol's bars
have passed t + H minutes; then it is decided with the training label rules (`model.dataset`):
the label at horizon k is log(close[t+k] / close[t]); a label with a minute missing (a session
break the corrections did not fill, `forward_returns`' NaN) is not scored, nor one over a gap
fill (`labels_over_gap_fills`: no trade moved the price there). A forecast is decided only once
every bar of its label is known, so its record is a function of the forecast and those bars
alone, never of how the two topics interleaved: `score_offline` recomputes every record. This
module holds what a score is; a symbol's state over time is `model.serving.scoring_state`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

import numpy as np
import orjson

from features.bars import PRICE_SCALE
from model.checkpoint import CheckpointError
from model.covariates import NS_PER_MIN
from model.metrics import pinball_losses

QUANTILES = {"q10": 0.1, "q50": 0.5, "q90": 0.9}  # the `forecasts` value's quantile fields
LOWER, UPPER = "q10", "q90"  # the 80 % interval


def check_quantiles(path: Path, quantiles: Sequence[float]) -> None:
    """Refuse a checkpoint whose model forecasts other quantiles than a `forecasts` value holds
    (the calibration, the baselines and the scores take those)."""
    served = tuple(QUANTILES.values())
    if tuple(quantiles) != served:
        raise CheckpointError(
            f"{path}: its model forecasts the quantiles {tuple(quantiles)}, and the worker "
            f"publishes {served} (q10, q50, q90); serve a checkpoint trained with those"
        )


_LOWER, _UPPER = list(QUANTILES).index(LOWER), list(QUANTILES).index(UPPER)


class Unscored(StrEnum):
    """Why a forecast got no score."""

    SESSION_BREAK = "session_break"  # a minute of the label has no bar: the session ended
    GAP_FILL = "gap_fill"  # a bar of the label is a synthetic gap fill
    LATE = "late"  # the forecast came after its label's bars left the retention
    OUTAGE = "outage"  # a minute of the label has no bar: live ingest lost it (an outage)


class _ScoreFields(TypedDict):
    """The `forecasts.scores` value (key = symbol); the metric fields are null when unscored."""

    symbol: str
    ts_event: int
    model_id: str
    horizons: list[int]
    unscored: str | None
    realized: list[float] | None  # log(close[t+k] / close[t]) per horizon
    pinball: dict[str, list[float]] | None  # per quantile field, per horizon (log-return units)
    inside: list[bool] | None  # q10 <= realized <= q90
    below_q10: list[bool] | None
    above_q90: list[bool] | None


class ScoreValue(_ScoreFields, total=False):
    """With shadow baselines (model.serving.shadow), the worker sets these too; records of a
    barcast before them, or of a worker without them, lack them."""

    source: str  # what `forecasts` published for this bar (`model`, a baseline's name)
    # each shadow baseline's pinball as `pinball` holds the model's (None: it had no forecast);
    # None when unscored
    baselines: dict[str, dict[str, list[float]] | None] | None
    # while a shadow checkpoint runs beside the model (model.serving.canary): its id and pinball
    canary: dict[str, Any]


def encode_score(value: ScoreValue) -> bytes:
    return orjson.dumps(value)


def decode_score(data: bytes) -> ScoreValue:
    value = orjson.loads(data)
    missing = ScoreValue.__required_keys__ - set(value)
    if missing:
        raise ValueError(f"forecasts.scores record lacks {sorted(missing)}: {data[:200]!r}")
    return value  # type: ignore[no-any-return]


class LabelBar(NamedTuple):
    """What a label needs of a `bars.clean` bar: its close as the feature engine sees it."""

    ts_event: int
    close: float
    synthetic: bool

    @classmethod
    def from_clean(cls, bar: dict[str, Any]) -> LabelBar:
        return cls(int(bar["ts_event"]), bar["close"] * PRICE_SCALE, bar["status"] == "synthetic")


class ForecastFields(NamedTuple):
    """The fields of a `forecasts` value a score needs (what a pending forecast keeps)."""

    symbol: str
    ts_event: int
    close: float
    horizons: tuple[int, ...]
    model_id: str
    q10: tuple[float, ...]
    q50: tuple[float, ...]
    q90: tuple[float, ...]


def forecast_fields(value: dict[str, Any]) -> ForecastFields:
    """What a score needs of a `forecasts` value (or of a stored pending forecast)."""
    try:  # plain Python numbers, as the values came off the topic
        return ForecastFields(
            value["symbol"],
            int(value["ts_event"]),
            float(value["close"]),
            tuple(map(int, value["horizons"])),
            value["model_id"],
            *(tuple(map(float, value[name])) for name in QUANTILES),
        )
    except KeyError:
        missing = {"symbol", "ts_event", "close", "horizons", "model_id", *QUANTILES} - set(value)
        raise ValueError(
            f"forecasts value of {value.get('symbol')!r} at {value.get('ts_event')!r} lacks "
            f"{sorted(missing)}; the scoring stage reads the `forecasts` fields of docs/topics.md"
        ) from None


def unscored(forecast: ForecastFields, reason: Unscored) -> ScoreValue:
    return ScoreValue(
        symbol=forecast.symbol,
        ts_event=forecast.ts_event,
        model_id=forecast.model_id,
        horizons=list(forecast.horizons),
        unscored=reason.value,
        realized=None,
        pinball=None,
        inside=None,
        below_q10=None,
        above_q90=None,
    )


class Decided(NamedTuple):
    """A forecast whose label is known: its bars at t+1..t+H minutes (None: no bar that minute),
    or None if they left the retention before it came; `outage`: a minute without a bar lies in
    an outage."""

    forecast: ForecastFields
    bars: tuple[LabelBar | None, ...] | None
    outage: bool = False


class Score(NamedTuple):
    """A decided forecast's record and, if scored, its `score_increments`."""

    record: ScoreValue
    increments: np.ndarray | None


def score_all(decided: list[Decided]) -> list[ScoreValue]:
    return [record for record, _ in score_decided(decided)]


def score_decided(decided: list[Decided]) -> list[Score]:
    """The records of decided forecasts, in order; those with a whole label are scored in one
    numpy pass per horizon count (a record per forecast in Python is what a burst of a thousand
    symbols pays for), with the training labels' logarithms (`forward_returns`) and the training
    metric's pinball (`model.metrics.pinball_losses`): a forecast's record does not depend on
    the others scored with it."""
    scores: list[Score | None] = [None] * len(decided)
    whole: dict[int, list[int]] = {}  # horizons -> indices of forecasts with a whole label
    for i, (forecast, bars, outage) in enumerate(decided):
        if bars is None:
            scores[i] = Score(unscored(forecast, Unscored.LATE), None)
        elif None in bars:
            reason = Unscored.OUTAGE if outage else Unscored.SESSION_BREAK
            scores[i] = Score(unscored(forecast, reason), None)
        elif True in [b.synthetic for b in bars]:  # type: ignore[union-attr]
            scores[i] = Score(unscored(forecast, Unscored.GAP_FILL), None)
        else:
            whole.setdefault(len(bars), []).append(i)
    for indices in whole.values():
        for i, score in zip(indices, _scored([decided[i] for i in indices]), strict=True):
            scores[i] = score
    return scores  # type: ignore[return-value]


def score_increments(record: ScoreValue) -> np.ndarray:
    """A scored record's terms of the rolling means, `(H, 2 + Q)`: per horizon
    [1, inside, pinball per quantile field]."""
    inside, losses = record["inside"] or [], record["pinball"] or {}
    return np.array([[1.0] * len(inside), inside, *(losses[q] for q in QUANTILES)], dtype=float).T


def _scored(decided: list[Decided]) -> list[Score]:
    """Scores of forecasts with whole labels of one length."""
    closes = np.array([[f.close, *[b.close for b in bars]] for f, bars, _ in decided])  # type: ignore[union-attr]
    logs = np.log(closes)
    y = logs[:, 1:] - logs[:, :1]
    q = np.array([f.q10 + f.q50 + f.q90 for f, *_ in decided])  # QUANTILES' order
    q = q.reshape(len(decided), len(QUANTILES), -1).swapaxes(1, 2)
    losses = pinball_losses(y, q, tuple(QUANTILES.values()))
    below, above = y < q[..., _LOWER], y > q[..., _UPPER]
    inside = ~(below | above)
    increments = np.concatenate([np.ones_like(y)[..., None], inside[..., None], losses], axis=2)
    records = zip(
        decided,
        y.tolist(),
        losses.swapaxes(1, 2).tolist(),
        inside.tolist(),
        below.tolist(),
        above.tolist(),
        strict=True,
    )
    return [
        Score(
            {
                "symbol": f.symbol,
                "ts_event": f.ts_event,
                "model_id": f.model_id,
                "horizons": list(f.horizons),
                "unscored": None,
                "realized": realized,
                "pinball": dict(zip(QUANTILES, loss, strict=True)),
                "inside": covered,
                "below_q10": low,
                "above_q90": high,
            },
            rows,
        )
        for ((f, *_), realized, loss, covered, low, high), rows in zip(
            records, increments, strict=True
        )
    ]


def label_minutes(forecast: ForecastFields) -> list[int]:
    return [forecast.ts_event + h * NS_PER_MIN for h in forecast.horizons]


def score_offline(
    forecasts: list[dict[str, Any]], clean_bars: list[dict[str, Any]]
) -> dict[tuple[str, int], ScoreValue]:
    """Every record the scoring stage publishes for these `forecasts` and `bars.clean` values,
    by (symbol, ts_event), from the whole histories at once; a forecast whose label runs past
    the last bar is not decided yet, as in the stream."""
    bars: dict[str, dict[int, LabelBar]] = {}
    for value in clean_bars:
        bar = LabelBar.from_clean(value)
        bars.setdefault(value["symbol"], {}).setdefault(bar.ts_event, bar)
    decided: dict[tuple[str, int], Decided] = {}
    for value in forecasts:
        forecast = forecast_fields(value)
        key = (forecast.symbol, forecast.ts_event)
        known = bars.get(key[0], {})
        minutes = label_minutes(forecast)
        if key not in decided and known and max(known) >= minutes[-1]:
            decided[key] = Decided(forecast, tuple(known.get(ts) for ts in minutes))
    return dict(zip(decided, score_all(list(decided.values())), strict=True))
