"""Normalization features [191-200]: rolling and exponentially weighted z-scores of price,
range, volume, ATR, absolute return, body and opening gap. Flat inputs give 0, not ±inf."""

from __future__ import annotations

import math

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
from features.primitives import (
    VAR_FLOOR,
    W20,
    W60,
    Layout,
    advance_sums,
    kernel,
    slot,
    wmean,
)
from features.spec import spec

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
PAIR = (2, 2, 2, 2, 2)  # both fields summed over every window


@kernel
def zscore(x: float, m: float, m2: float) -> float:
    """(x - m) / std from the window means of x and x²; 0 when the window is flat."""
    var = m2 - m * m
    return (x - m) / math.sqrt(var) if var > VAR_FLOOR else 0.0


@kernel
def zwin(cs: np.ndarray, ctx: np.ndarray, rec: int, w: int, f: int, f2: int) -> float:
    """z-score of this bar's field f within window w of the price block."""
    return zscore(cs[rec + f], mp(ctx, w, f), mp(ctx, w, f2))


@kernel
def ewz(gs: np.ndarray, off: int, x: float, t: int, span: int) -> float:
    """Exponentially weighted z-score; West's update keeps the variance non-negative."""
    if t == 0:
        gs[off], gs[off + 1] = x, 0.0
        return 0.0
    a = 2.0 / (span + 1)
    d = x - gs[off]
    gs[off] += a * d
    gs[off + 1] = (1.0 - a) * (gs[off + 1] + a * d * d)
    var = gs[off + 1]
    return (x - gs[off]) / math.sqrt(var) if var > VAR_FLOOR else 0.0


@kernel
def update(
    cs: np.ndarray, fs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray, real: bool
) -> None:
    t = int(ctx[core.X_T])
    o = FIRST
    rec = slot(RING_P, KP, t, 0)
    out[o] = zwin(cs, ctx, rec, W20, F_X, F_X2)
    out[o + 1] = zwin(cs, ctx, rec, W60, F_X, F_X2)
    lc = ctx[core.X_LC]
    out[o + 2] = ewz(gs, EW, lc, t, EW_FAST)
    out[o + 3] = ewz(gs, EW + 2, lc, t, EW_SLOW)
    out[o + 4] = zwin(cs, ctx, rec, W60, F_RNG, F_RNG2)
    if real:
        tv = int(fs[flow.NV]) - 1
        lv = fs[slot(flow.RING_V, KV, tv, 0) + V_LV]
        m, m2 = mv(ctx, W60, V_LV), mv(ctx, W60, V_LV2)
        gs[HELD_VOL] = zscore(lv, m, m2)
    out[o + 5] = gs[HELD_VOL]
    ta = t - core.ATR_PERIOD  # ATR exists from bar 14 on: its ring counts from there
    if ta >= 0:
        a = ctx[core.X_ATR] / ctx[core.X_C]
        ra = slot(RING_A, 2, ta, 0)
        gs[ra], gs[ra + 1] = a, a * a
        advance_sums(gs, RING_A, SUMS_A, 2, PAIR, ta)
        out[o + 6] = zscore(a, wmean(gs, SUMS_A, 2, W60, 0, ta), wmean(gs, SUMS_A, 2, W60, 1, ta))
    else:
        out[o + 6] = 0.0
    out[o + 7] = zscore(cs[rec + F_AR], mp(ctx, W60, F_AR), mp(ctx, W60, F_R2))
    out[o + 8] = zwin(cs, ctx, rec, W60, F_OC, F_OC2)
    out[o + 9] = zwin(cs, ctx, rec, W60, F_ON, F_ON2)
