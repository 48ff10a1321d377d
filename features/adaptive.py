"""Adaptive strategy metrics [221-224]: Kaufman's efficiency ratio, the Lo–MacKinlay variance
ratio (trend vs mean reversion), and Kaufman's adaptive moving average."""

from __future__ import annotations

import numpy as np

from features import core
from features.core import F_AR, F_LC, F_R2, F_R5SQ, KP, RING_P, SUMS_P
from features.primitives import VAR_FLOOR, W10, W20, W60, Layout, kernel, rare, slot, wsum
from features.spec import spec
from features.vectors import ratios4

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
def move(cs: np.ndarray, t: int, lc: float, lag: int) -> float:
    """|ln(C / C[-lag])|: an efficiency ratio's numerator (its denominator is Σ|r|)."""
    return abs(lc - cs[slot(RING_P, KP, t, lag) + F_LC]) if t >= lag else 0.0


@kernel
def update(cs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    t = int(ctx[core.X_T])
    c, lc = ctx[core.X_C], ctx[core.X_LC]
    o = FIRST
    # Divisions four at a time (vectors.ratios4), each lane guarded as its scalar form
    # (KAMA is an average of positive closes).
    var1 = wsum(cs, SUMS_P, KP, W60, F_R2)
    er20, er10, vr, _ = ratios4(
        (move(cs, t, lc, ER_LAG), move(cs, t, lc, KAMA_ER), wsum(cs, SUMS_P, KP, W60, F_R5SQ), 0.0),
        (
            wsum(cs, SUMS_P, KP, W20, F_AR),
            wsum(cs, SUMS_P, KP, W10, F_AR),
            VR_Q * var1 if var1 > VAR_FLOOR else 0.0,
            0.0,
        ),
    )
    out[o] = er20
    out[o + 1] = vr if var1 > VAR_FLOOR else 1.0
    prev = gs[KAMA]
    if rare(t == 0):
        gs[KAMA] = c
    else:
        sc = er10 * (SC_FAST - SC_SLOW) + SC_SLOW
        gs[KAMA] = prev + sc * sc * (c - prev)
    dev, change, _, _ = ratios4((c, gs[KAMA], 0.0, 0.0), (gs[KAMA], prev, 0.0, 0.0))
    out[o + 2] = dev - 1.0
    out[o + 3] = change - 1.0 if t > 0 else 0.0
