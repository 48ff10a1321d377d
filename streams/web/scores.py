"""One score record (streams.forecast.scoring: one per scored forecast) reduced to what rolling
figures need: labels scored, how many fell inside the interval, their pinball loss, and the
labels left unscored with their reasons."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BASIS_POINTS = 1e4  # pinball is shown in basis points of log return, as the model report does


@dataclass(frozen=True)
class ScoreSummary:
    labels: int = 0
    inside: int = 0
    pinball_sum: float = 0.0  # summed over scored labels of the mean over quantiles, bp
    unscored: dict[str, int] = field(default_factory=dict)


def summarize_score(score_value: Mapping[str, Any]) -> ScoreSummary:
    """A score's `inside` (per horizon: True, False, or None when not scored), `pinball` (per
    horizon: the loss per quantile, or None) and `reasons` (per horizon: why not scored)."""
    inside, pinball = score_value["inside"], score_value["pinball"]
    reasons = score_value.get("reasons") or [None] * len(inside)
    labels = hits = 0
    total = 0.0
    unscored: dict[str, int] = {}
    for hit, losses, reason in zip(inside, pinball, reasons, strict=True):
        if hit is None or losses is None:
            unscored[str(reason)] = unscored.get(str(reason), 0) + 1
            continue
        labels += 1
        hits += bool(hit)
        total += sum(losses) / len(losses) * BASIS_POINTS
    return ScoreSummary(labels, hits, total, unscored)
