"""Normalization features [191-200]: rolling and exponentially weighted z-scores of price,
range, volume, ATR, absolute return, body and opening gap. Flat inputs give 0, not ±inf."""

from __future__ import annotations

import numpy as np

from features import core, flow
from features.core import (
    F_AR,
    F_OC,
    F_OC2,
    F_ON,
    F_ON2,
    F_R2,
    F_RNG,
    F_RNG2,
    F_X,
    F_X2,
    KP,
    RING_P,
    mp,
)
from features.flow import KV, V_LV, V_LV2, mv
from features.primitives import W20, W60, Layout, advance_sums, kernel, rare, slot, wmean
from features.spec import spec
from features.vectors import ratios4, roots4

GROUP = "normalization"
FIRST = 191
EW_FAST, EW_SLOW = 20, 60  # EWMA spans of the exponential z-scores
ATR_Z_WARMUP = core.ATR_PERIOD + 59

SPECS = (
    spec("z_lc_20", 19, "(lnC - mean) / std of lnC over 20"),
    spec("z_lc_60", 59, "(lnC - mean) / std of lnC over 60"),
    spec("ewz_lc_20", EW_FAST, "(lnC - EWM mean) / EWM std of lnC, span 20", span=EW_FAST),
    spec("ewz_lc_60", EW_SLOW, "(lnC - EWM mean) / EWM std of lnC, span 60", span=EW_SLOW),
    spec("z_range_60", 59, "z-score of ln(H/L) over 60"),
    spec("z_volume_60", 59, "z-score of ln(1+V) over 60 real bars"),
    spec("z_atr_60", ATR_Z_WARMUP, "z-score of ATR(14)/C over 60"),
    spec("z_absret_60", 60, "z-score of |r| over 60"),
    spec("z_body_60", 59, "z-score of ln(C/O) over 60"),
    spec("z_gap_60", 60, "z-score of ln(O / C[-1]) over 60"),
)

LAYOUT = Layout("norm")
EW = LAYOUT.add("ewm_mean_var", 4)
HELD_VOL = LAYOUT.add("last_real_volume_z")
RING_A, SUMS_A = LAYOUT.rolling("atr_rel", 2)
SIZE = LAYOUT.size
PAIR = (0, 0, 0, 0, 2)  # both fields summed over 60 bars: the only window read


# Every feature here is a z-score: each bar gathers the deviations and variances, then roots
# and divides them in packed instructions (see vectors.roots4), four features at a time.


@kernel
def spread(x: float, m: float, m2: float) -> tuple[float, float]:
    """(deviation, variance) of x against the window means of x (m) and x² (m2)."""
    return x - m, m2 - m * m


@kernel
def spread_win(ctx: np.ndarray, x: float, w: int, f: int, f2: int) -> tuple[float, float]:
    """spread of this bar's field f (value x) within window w of the price block."""
    return spread(x, mp(ctx, w, f), mp(ctx, w, f2))


@kernel
def ew_spread(gs: np.ndarray, off: int, x: float, t: int, span: int) -> tuple[float, float]:
    """x against its exponentially weighted mean and variance (West's update keeps the variance
    non-negative)."""
    if rare(t == 0):
        gs[off], gs[off + 1] = x, 0.0
        return 0.0, 0.0
    a = 2.0 / (span + 1)
    d = x - gs[off]
    gs[off] += a * d
    gs[off + 1] = (1.0 - a) * (gs[off + 1] + a * d * d)
    return x - gs[off], gs[off + 1]


@kernel
def zscores(
    dev: tuple[float, float, float, float], var: tuple[float, float, float, float]
) -> tuple[float, float, float, float]:
    return ratios4(dev, roots4(var))  # 0 where flat: sqrt0 gave 0


@kernel
def update(
    cs: np.ndarray, fs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray, real: bool
) -> None:
    t = int(ctx[core.X_T])
    rec = slot(RING_P, KP, t, 0)
    d0, v0 = spread_win(ctx, cs[rec + F_X], W20, F_X, F_X2)
    d1, v1 = spread_win(ctx, cs[rec + F_X], W60, F_X, F_X2)
    lc = ctx[core.X_LC]
    d2, v2 = ew_spread(gs, EW, lc, t, EW_FAST)
    d3, v3 = ew_spread(gs, EW + 2, lc, t, EW_SLOW)
    z = zscores((d0, d1, d2, d3), (v0, v1, v2, v3))
    for i in range(4):
        out[FIRST + i] = z[i]
    d4, v4 = spread_win(ctx, cs[rec + F_RNG], W60, F_RNG, F_RNG2)
    d5, v5 = 0.0, 0.0
    if real:
        tv = int(fs[flow.NV]) - 1
        lv = fs[slot(flow.RING_V, KV, tv, 0) + V_LV]
        d5, v5 = spread(lv, mv(ctx, W60, V_LV), mv(ctx, W60, V_LV2))
    ta = t - core.ATR_PERIOD  # ATR exists from bar 14 on: its ring counts from there
    d6, v6 = 0.0, 0.0
    if ta >= 0:
        a = ctx[core.X_ATR_REL]
        ra = slot(RING_A, 2, ta, 0)
        gs[ra], gs[ra + 1] = a, a * a
        advance_sums(gs, RING_A, SUMS_A, 2, PAIR, ta)
        d6, v6 = spread(a, wmean(gs, SUMS_A, 2, W60, 0, ta), wmean(gs, SUMS_A, 2, W60, 1, ta))
    d7, v7 = spread(cs[rec + F_AR], mp(ctx, W60, F_AR), mp(ctx, W60, F_R2))
    z = zscores((d4, d5, d6, d7), (v4, v5, v6, v7))
    for i in range(4):
        out[FIRST + 4 + i] = z[i]
    d8, v8 = spread_win(ctx, cs[rec + F_OC], W60, F_OC, F_OC2)
    d9, v9 = spread_win(ctx, cs[rec + F_ON], W60, F_ON, F_ON2)
    z = zscores((d8, d9, 0.0, 0.0), (v8, v9, 0.0, 0.0))
    out[FIRST + 8], out[FIRST + 9] = z[0], z[1]
    # the volume z-score holds its last real bar's value on synthetic bars
    if real:
        gs[HELD_VOL] = out[FIRST + 5]
    out[FIRST + 5] = gs[HELD_VOL]
