"""The backtest's forecasts scored by the live path's own rules
(model.serving.scoring.score_offline), as arrays the report's figures reduce."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from model.serving.scoring import score_offline
from streams.tools.backtest.collect import Key
from streams.web.score_summary import horizon_scores

UNDECIDED = "undecided"  # the label runs past the last bar: the stream has not scored it either


@dataclass(frozen=True)
class ScoreTable:
    keys: list[Key]  # (symbol, ts_event) of each forecast, in order
    pinball: np.ndarray  # (n, H, Q) pinball loss, log-return units; NaN where not scored
    inside: np.ndarray  # (n, H) 1.0 inside [q_low, q_high], 0.0 outside; NaN where not scored
    unscored: dict[str, int]  # forecasts not scored, by reason


def score_table(
    forecasts: dict[Key, dict[str, Any]],
    clean: dict[Key, dict[str, Any]],
    horizon: int,
    quantiles: list[str],
) -> ScoreTable:
    keys = sorted(forecasts)
    records = score_offline([forecasts[k] for k in keys], [clean[k] for k in sorted(clean)])
    pinball = np.full((len(keys), horizon, len(quantiles)), np.nan)
    inside = np.full((len(keys), horizon), np.nan)
    unscored: Counter[str] = Counter()
    for i, key in enumerate(keys):
        record = records.get(key)
        if record is None or record["unscored"] is not None:
            unscored[UNDECIDED if record is None else str(record["unscored"])] += 1
            continue
        for h, score in enumerate(horizon_scores(record, quantiles)):
            pinball[i, h] = score.pinball
            inside[i, h] = float(score.inside)
    return ScoreTable(keys, pinball, inside, dict(sorted(unscored.items())))
