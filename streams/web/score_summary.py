"""Score records (model.serving.scoring's ScoreValue: one per decided forecast) read the one
way the page and the backtest both need: per horizon, inside the 80 % interval or not and the
pinball loss per quantile; or, for a forecast not scored, why. And reduced to the sums the
page's rolling figures add up."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from model.serving.baselines import BASELINES

BASIS_POINTS = 1e4  # pinball is shown in basis points of log return, as the model report does


class HorizonScore(NamedTuple):
    inside: bool
    pinball: tuple[float, ...]  # per quantile, log-return units


@dataclass(frozen=True)
class ScoreSummary:
    labels: int = 0
    inside: int = 0
    pinball_sum: float = 0.0  # summed over labels of the mean over quantiles, bp
    unscored: str | None = None  # why the forecast was not scored
    # Mean pinball over quantiles and horizons of the model's forecast, then of each shadow
    # baseline's (BASELINES' order; NaN: it had none), bp: what skill is computed from
    losses: tuple[float, ...] = ()


def horizon_scores(score_value: Mapping[str, Any], quantiles: Sequence[str]) -> list[HorizonScore]:
    """One entry per horizon of a scored forecast (`unscored` is None), losses in the order
    of `quantiles` (the record's `pinball` field names: q10, q50, q90)."""
    pinball = score_value["pinball"]
    return [
        HorizonScore(bool(hit), tuple(float(pinball[name][h]) for name in quantiles))
        for h, hit in enumerate(score_value["inside"])
    ]


def summarize_score(score_value: Mapping[str, Any]) -> ScoreSummary:
    reason = score_value["unscored"]
    if reason is not None:
        return ScoreSummary(unscored=str(reason))
    # Once per scored forecast on the event loop: sums over the record's lists, not a
    # `horizon_scores` entry per horizon; the same additions in the same order.
    means = horizon_means(score_value["pinball"])
    shadows = score_value.get("baselines") or {}
    baselines = [shadows.get(name) for name in BASELINES] if shadows else []
    return ScoreSummary(
        labels=len(score_value["inside"]),
        inside=sum(map(bool, score_value["inside"])),
        pinball_sum=sum(means) * BASIS_POINTS,
        losses=tuple(
            math.nan
            if pinball is None
            else sum(m := horizon_means(pinball)) / len(m) * BASIS_POINTS
            for pinball in [score_value["pinball"], *baselines]
        )
        if baselines
        else (),
    )


def horizon_means(pinball: Mapping[str, Sequence[float]]) -> list[float]:
    """Per horizon, a record's pinball averaged over its quantile fields."""
    losses = list(pinball.values())
    return [sum(per_horizon) / len(losses) for per_horizon in zip(*losses, strict=True)]
