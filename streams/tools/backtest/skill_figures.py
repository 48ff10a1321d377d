"""The backtest's skill figures: the model's forecasts against the shadow baselines the worker
scored beside each (model.serving.shadow), read from its `forecasts.scores` records. Over the
whole run, all symbols' scored forecasts in time order: skill (1 - pinball(model) /
pinball(baseline)) with its circular block bootstrap interval (model.serving.skill), overall and
per horizon and per symbol; and how many forecasts each source published."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from model.serving.baselines import BASELINES
from model.serving.shadow import mean_losses
from model.serving.skill import Skill, skill_interval

Key = tuple[str, int]


def skill_figures(scores: dict[Key, dict[str, Any]]) -> dict[str, Any]:
    """`scores`: the run's `forecasts.scores` values by (symbol, ts_event)."""
    order = sorted(scores, key=lambda key: (key[1], key[0]))
    sources = Counter(str(scores[k].get("source", "model")) for k in order)
    scored = [k for k in order if scores[k]["unscored"] is None and scores[k].get("baselines")]
    out: dict[str, Any] = {"sources": dict(sorted(sources.items())), "baselines": {}}
    if not scored:
        return out
    model = np.array([mean_losses(scores[k]["pinball"]) for k in scored])  # (n, H)
    symbols = np.array([symbol for symbol, _ in scored])
    for name in BASELINES:
        pinballs = [scores[k]["baselines"].get(name) for k in scored]
        both = np.array([p is not None for p in pinballs])
        if not both.any():
            continue
        baseline = np.array([mean_losses(p) for p in pinballs if p is not None])
        paired = model[both]
        figures = {"overall": figure(skill_interval(paired.mean(1), baseline.mean(1)))}
        figures["by_horizon"] = [
            figure(skill_interval(paired[:, h], baseline[:, h])) for h in range(model.shape[1])
        ]
        figures["by_symbol"] = {
            symbol: figure(skill_interval(paired[rows].mean(1), baseline[rows].mean(1)))
            for symbol in sorted(set(symbols.tolist()))
            if (rows := symbols[both] == symbol).any()
        }
        out["baselines"][name] = figures
    return out


def figure(found: Skill | None) -> dict[str, Any] | None:
    """A skill and its interval as the report holds them (None: too few forecasts)."""
    if found is None:
        return None
    return {"skill": found.skill, "lower": found.lower, "upper": found.upper, "forecasts": found.n}
