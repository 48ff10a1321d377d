"""Long-memory volatility [225-226]: EWMAs of squared one-minute returns over about a day and
about a week, the slow components of an intraday HAR model (Corsi 2009).

Volatility clusters over days and weeks, far beyond a 60-bar window: these two carry that
memory into every feature row, so a forecast built from a window's rows alone can lean on it.
Each decay's mean lag (1 / (1 - λ) bars) is a rolling window's (half its length): a Globex
trading day of 1380 bars, and five of them. Like `ewma_vol_slow`, they fold only returns of
consecutive minutes (a session break's jump is not a one-minute move).
"""

from __future__ import annotations

import numpy as np

from features import core
from features.primitives import Layout, kernel
from features.spec import spec
from features.vectors import ratios4, roots4

GROUP = "long memory"
FIRST = 225
DAY_BARS = 1380
EWMA_DAY = 1.0 - 2.0 / DAY_BARS
EWMA_WEEK = 1.0 - 2.0 / (5 * DAY_BARS)
WARMUP = 20  # bias-corrected (core.ewma_fold): no zero seed to wait out

SPECS = (
    spec(
        "ewma_vol_day",
        WARMUP,
        "sqrt(EWMA r², λ = 1 - 2/1380) of consecutive minutes, bias-corrected",
        decay=EWMA_DAY,
    ),
    spec(
        "ewma_vol_week",
        WARMUP,
        "sqrt(EWMA r², λ = 1 - 2/6900) of consecutive minutes, bias-corrected",
        decay=EWMA_WEEK,
    ),
)

LAYOUT = Layout("long_memory")
EVD, EVW = LAYOUT.add("ewma_var_day", 2), LAYOUT.add("ewma_var_week", 2)  # (sum, weight)
SIZE = LAYOUT.size


@kernel
def update(gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    if ctx[core.X_T] > 0 and ctx[core.X_GAP_MIN] == 1.0:
        r = ctx[core.X_R]
        core.ewma_fold(gs, EVD, r, EWMA_DAY)
        core.ewma_fold(gs, EVW, r, EWMA_WEEK)
    day, week, _, _ = ratios4((gs[EVD], gs[EVW], 0.0, 0.0), (gs[EVD + 1], gs[EVW + 1], 0.0, 0.0))
    out[FIRST], out[FIRST + 1], _, _ = roots4((day, week, 0.0, 0.0))
