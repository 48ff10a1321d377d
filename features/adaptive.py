"""Adaptive strategy metrics [221-224]: Kaufman's efficiency ratio, the Lo–MacKinlay variance
ratio (trend vs mean reversion), and Kaufman's adaptive moving average."""

from __future__ import annotations

import numpy as np

from features import core
from features.core import F_AR, F_LC, F_R2, F_R5SQ, KP, RING_P, SUMS_P
from features.primitives import VAR_FLOOR, W10, W20, W60, Layout, kernel, ratio, slot, wsum
from features.spec import spec

GROUP = "adaptive strategy metrics"
FIRST = 221
ER_LAG = 20
VR_Q = 5
KAMA_ER, KAMA_FAST, KAMA_SLOW = 10, 2, 30
KAMA_WARMUP = KAMA_SLOW

SPECS = (
    spec("efficiency_ratio_20", ER_LAG, "|ln(C / C[-20])| / Σ|r| over 20; 0 if flat"),
    spec(
        "variance_ratio_5",
        60 + VR_Q - 1,
        "mean (ln C/C[-5])² / (5 · mean r²) over 60; 1 if flat",
        q=VR_Q,
    ),
    spec(
        "kama_dev",
        KAMA_WARMUP,
        "C / KAMA(10, 2, 30) - 1 (seeded with the first close)",
        er=KAMA_ER,
        fast=KAMA_FAST,
        slow=KAMA_SLOW,
    ),
    spec("kama_slope", KAMA_WARMUP + 1, "KAMA / KAMA[-1] - 1"),
)

LAYOUT = Layout("adaptive")
KAMA = LAYOUT.add("kama")
SIZE = LAYOUT.size
SC_FAST = 2.0 / (KAMA_FAST + 1)
SC_SLOW = 2.0 / (KAMA_SLOW + 1)


@kernel
def efficiency(cs: np.ndarray, t: int, lc: float, w: int, lag: int) -> float:
    move = abs(lc - cs[slot(RING_P, KP, t, lag) + F_LC]) if t >= lag else 0.0
    return ratio(move, wsum(cs, SUMS_P, KP, w, F_AR))


@kernel
def update(cs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    t = int(ctx[core.X_T])
    c, lc = ctx[core.X_C], ctx[core.X_LC]
    o = FIRST
    out[o] = efficiency(cs, t, lc, W20, ER_LAG)
    var1 = wsum(cs, SUMS_P, KP, W60, F_R2)
    out[o + 1] = wsum(cs, SUMS_P, KP, W60, F_R5SQ) / (VR_Q * var1) if var1 > VAR_FLOOR else 1.0
    prev = gs[KAMA]
    if t == 0:
        gs[KAMA] = c
    else:
        er = efficiency(cs, t, lc, W10, KAMA_ER)
        sc = er * (SC_FAST - SC_SLOW) + SC_SLOW
        gs[KAMA] = prev + sc * sc * (c - prev)
    out[o + 2] = c / gs[KAMA] - 1.0
    out[o + 3] = gs[KAMA] / prev - 1.0 if t > 0 else 0.0
