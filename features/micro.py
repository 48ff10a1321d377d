"""Microstructure features from OHLCV [145-190]: spread estimators (Roll, Corwin–Schultz,
Abdi–Ranaldo), illiquidity (Amihud, Kyle's λ), bulk-volume order imbalance, bar shape and
price-discreteness statistics. Volume-based members come from the real-bar block and repeat
the last real bar's values on synthetic bars (see flow)."""

from __future__ import annotations

import math

import numpy as np

from features import core, flow
from features.core import (
    F_ABODY,
    F_AON,
    F_ARP,
    F_CH,
    F_CL,
    F_CLV,
    F_CS,
    F_DOJI,
    F_GAP,
    F_LC,
    F_LW,
    F_R,
    F_R2,
    F_REV,
    F_RNG,
    F_RNG2,
    F_RR1,
    F_RRNG1,
    F_SAME,
    F_SYN,
    F_TR,
    F_UW,
    F_ZERO,
    KP,
    RING_P,
    SUMS_P,
    mp,
    varp,
)
from features.flow import KV, SUMS_V, V_AR, V_BVC, V_FRC, V_R, V_RNG, V_RSG, V_SG, V_SG2, V_V, mv
from features.primitives import VAR_FLOOR, W20, W60, Layout, clip, kernel, ratio, slot, wsum
from features.spec import spec
from features.vectors import ratios4, roots4

GROUP = "microstructure"
FIRST = 145
N = 46
FLOW_OUT = (4, 5, 6, 7, 8, 9, 30, 33, 44)  # positions (from FIRST) of the volume-based members

SPECS = (
    spec("roll_spread_20", 21, "2·sqrt(max(-cov(r, r[-1]), 0)) over 20 (Roll 1984)"),
    spec("roll_spread_60", 61, "Roll spread over 60"),
    spec("cs_spread_20", 20, "mean two-bar Corwin–Schultz spread over 20 (negatives read 0)"),
    spec("cs_spread_60", 60, "mean Corwin–Schultz spread over 60"),
    spec("amihud_20", 20, "mean |r| / (mean V20 / mean V60): return per unit of relative volume"),
    spec("amihud_60", 60, "mean |r| over 60 real bars (relative volume = 1 by construction)"),
    spec("kyle_lambda_20", 20, "cov(r, s) / var(s), s = sign(r)·ln(1+V), over 20 real bars"),
    spec("kyle_lambda_60", 60, "Kyle's λ over 60 real bars"),
    spec("bvc_imbalance_20", 20, "Σ V(2Φ(r/σ) - 1) / ΣV over 20 (bulk volume classification)"),
    spec("bvc_imbalance_60", 60, "bulk-volume order imbalance over 60"),
    spec("clv_mean_20", 19, "mean close location value over 20"),
    spec("clv_mean_60", 59, "mean close location value over 60"),
    spec("close_to_high_20", 19, "mean ln(H / C) over 20"),
    spec("close_to_low_20", 19, "mean ln(C / L) over 20"),
    spec("body_to_range_20", 19, "Σ|ln C/O| / Σ ln(H/L) over 20"),
    spec("upper_wick_share_20", 19, "Σ upper wick / Σ ln(H/L) over 20"),
    spec("lower_wick_share_20", 19, "Σ lower wick / Σ ln(H/L) over 20"),
    spec("range_expansion", 59, "mean ln(H/L) over 20 / over 60"),
    spec("tr_log", 1, "ln(max(H, C[-1]) / min(L, C[-1])): true range in log units"),
    spec("tr_atr", core.ATR_PERIOD, "TR / ATR(14)"),
    spec("gap_abs_mean_20", 20, "mean |ln(O / C[-1])| over 20"),
    spec("reversal_rate_20", 21, "share of bars whose return reverses the previous one, 20"),
    spec("zero_return_share_20", 20, "share of bars with C = C[-1] over 20 (price discreteness)"),
    spec("zero_return_share_60", 60, "share of bars with C = C[-1] over 60"),
    spec("doji_share_20", 19, "share of bars with |C - O| <= 0.1(H - L) over 20"),
    spec("inside_bar", 1, "1 if H <= H[-1] and L >= L[-1]"),
    spec("outside_bar", 1, "1 if H > H[-1] and L < L[-1]"),
    spec("higher_high", 1, "1 if H > H[-1]"),
    spec("lower_low", 1, "1 if L < L[-1]"),
    spec("range_efficiency_20", 20, "|ln(C / C[-20])| / Σ ln(H/L) over 20"),
    spec("vol_per_range", 19, "ln((1 + V / mean V) / (1 + ln(H/L) / mean ln(H/L))), 20 real bars"),
    spec("abdi_ranaldo_20", 20, "sqrt(max(mean 4(c[-1] - η[-1])(c[-1] - η), 0)), η = ln√(HL), 20"),
    spec("abdi_ranaldo_60", 60, "Abdi–Ranaldo spread over 60"),
    spec("impact_now", 60, "|r| / (V / mean V60) of this real bar; 0 if V = 0"),
    spec("wick_skew_20", 19, "(Σ upper wick - Σ lower wick) / Σ ln(H/L) over 20"),
    spec("roll_to_vol_20", 21, "roll_spread_20 / rv_20"),
    spec("sign_persistence_60", 61, "share of bars continuing the previous return's sign, 60"),
    spec("range_ac1_20", 21, "autocorrelation of ln(H/L) at lag 1 over 20"),
    spec("body_to_range_60", 59, "Σ|ln C/O| / Σ ln(H/L) over 60"),
    spec("synthetic_share_60", 59, "share of synthetic gap-fill bars over 60"),
    spec("gap_share_60", 60, "share of bars with O != C[-1] over 60"),
    spec("gap_share_20", 20, "share of bars with O != C[-1] over 20"),
    spec("open_pos_in_range", 0, "(O - L) / (H - L); 0.5 if H = L"),
    spec("close_vs_prev_range", 1, "(C - L[-1]) / (H[-1] - L[-1]) clipped to [-3, 4]; 0.5 if flat"),
    spec("vwr_20", 20, "Σ r·V / ΣV over 20 real bars (volume-weighted return)"),
    spec("hl_to_tr_20", 20, "Σ ln(H/L) / Σ TR over 20"),
)

LAYOUT = Layout("micro")
HELD = LAYOUT.add("last_real_values", len(FLOW_OUT))
SIZE = LAYOUT.size


@kernel
def roll_spread(ctx: np.ndarray, w: int) -> float:
    m = mp(ctx, w, F_R)
    cov = mp(ctx, w, F_RR1) - m * m
    return 2.0 * math.sqrt(-cov) if cov < 0.0 else 0.0


@kernel
def update(
    cs: np.ndarray, fs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray, real: bool
) -> None:
    t = int(ctx[core.X_T])
    o = FIRST
    h, lo_, c = ctx[core.X_H], ctx[core.X_L], ctx[core.X_C]
    ph, pl = ctx[core.X_PH], ctx[core.X_PL]
    rng20 = wsum(cs, SUMS_P, KP, W20, F_RNG)
    rng60 = wsum(cs, SUMS_P, KP, W60, F_RNG)
    mrng20 = mp(ctx, W20, F_RNG)
    roll20 = roll_spread(ctx, W20)
    # Roots and divisions four at a time (vectors.roots4, ratios4), each lane guarded as
    # its scalar form; 1/Σ ln(H/L) over 20 is shared by the shares of the range.
    ar20, ar60, rv20, _ = roots4(
        (mp(ctx, W20, F_ARP), mp(ctx, W60, F_ARP), varp(ctx, W20, F_R, F_R2), 0.0)
    )
    var = mp(ctx, W20, F_RNG2) - mrng20 * mrng20
    cov = mp(ctx, W20, F_RRNG1) - mrng20 * mrng20
    inv_rng20, expansion, tr_atr, range_ac = ratios4(
        (1.0, mrng20, ctx[core.X_TR], cov),
        (rng20, mp(ctx, W60, F_RNG), ctx[core.X_ATR], var if var > VAR_FLOOR else 0.0),
    )
    span = h - lo_
    pspan = ph - pl
    roll_vol, body60, open_pos, close_pos = ratios4(
        (roll20, wsum(cs, SUMS_P, KP, W60, F_ABODY), ctx[core.X_O] - lo_, c - pl),
        (rv20, rng60, span if span > 0.0 else 0.0, pspan if pspan > 0.0 else 0.0),
    )
    out[o] = roll20
    out[o + 1] = roll_spread(ctx, W60)
    out[o + 2] = mp(ctx, W20, F_CS)
    out[o + 3] = mp(ctx, W60, F_CS)
    if real:
        flow_features(fs, ctx, gs[HELD : HELD + len(FLOW_OUT)])
    for i in range(len(FLOW_OUT)):
        out[o + FLOW_OUT[i]] = gs[HELD + i]
    uw20, lw20 = bar_shape(cs, ctx, t, inv_rng20, expansion, tr_atr, out, o)
    out[o + 31] = ar20
    out[o + 32] = ar60
    out[o + 34] = (uw20 - lw20) * inv_rng20
    out[o + 35] = roll_vol
    out[o + 36] = mp(ctx, W60, F_SAME)
    out[o + 37] = clip(range_ac, -1.0, 1.0) if var > VAR_FLOOR else 0.0
    out[o + 38] = body60
    out[o + 39] = mp(ctx, W60, F_SYN)
    out[o + 40] = mp(ctx, W60, F_GAP)
    out[o + 41] = mp(ctx, W20, F_GAP)
    out[o + 42] = open_pos if span > 0.0 else 0.5
    out[o + 43] = clip(close_pos, -3.0, 4.0) if pspan > 0.0 else 0.5
    out[o + 45] = ratio(rng20, wsum(cs, SUMS_P, KP, W20, F_TR))


@kernel
def bar_shape(
    cs: np.ndarray,
    ctx: np.ndarray,
    t: int,
    inv_rng20: float,
    expansion: float,
    tr_atr: float,
    out: np.ndarray,
    o: int,
) -> tuple[float, float]:
    """Members [10, 30): where closes, bodies and wicks sit in the range, gaps and price
    discreteness, and this bar against the previous one. Returns Σ upper and Σ lower wick over
    20 for wick_skew_20 (the ratios come from update's batched divisions)."""
    h, lo_ = ctx[core.X_H], ctx[core.X_L]
    ph, pl = ctx[core.X_PH], ctx[core.X_PL]
    rec = slot(RING_P, KP, t, 0)
    out[o + 10] = mp(ctx, W20, F_CLV)
    out[o + 11] = mp(ctx, W60, F_CLV)
    out[o + 12] = mp(ctx, W20, F_CH)
    out[o + 13] = mp(ctx, W20, F_CL)
    out[o + 14] = wsum(cs, SUMS_P, KP, W20, F_ABODY) * inv_rng20
    uw20 = wsum(cs, SUMS_P, KP, W20, F_UW)
    lw20 = wsum(cs, SUMS_P, KP, W20, F_LW)
    out[o + 15] = uw20 * inv_rng20
    out[o + 16] = lw20 * inv_rng20
    out[o + 17] = expansion
    out[o + 18] = cs[rec + F_TR]
    out[o + 19] = tr_atr
    out[o + 20] = mp(ctx, W20, F_AON)
    out[o + 21] = mp(ctx, W20, F_REV)
    out[o + 22] = mp(ctx, W20, F_ZERO)
    out[o + 23] = mp(ctx, W60, F_ZERO)
    out[o + 24] = mp(ctx, W20, F_DOJI)
    first = t == 0
    out[o + 25] = 1.0 if not first and h <= ph and lo_ >= pl else 0.0
    out[o + 26] = 1.0 if not first and h > ph and lo_ < pl else 0.0
    out[o + 27] = 1.0 if not first and h > ph else 0.0
    out[o + 28] = 1.0 if not first and lo_ < pl else 0.0
    move = abs(ctx[core.X_LC] - cs[slot(RING_P, KP, t, 20) + F_LC]) if t >= 20 else 0.0
    out[o + 29] = move * inv_rng20
    return uw20, lw20


@kernel
def flow_features(fs: np.ndarray, ctx: np.ndarray, res: np.ndarray) -> None:
    """The FLOW_OUT members, in that order, from the real-bar block. Divisions go four at a
    time (vectors.ratios4), each lane guarded as its scalar form."""
    tv = int(fs[flow.NV]) - 1
    v = ctx[core.X_V]
    mv20 = mv(ctx, W20, V_V)
    mv60 = mv(ctx, W60, V_V)
    sv20 = wsum(fs, SUMS_V, KV, W20, V_V)
    inv_mv20, inv_sv20, bvc60, rel_rng = ratios4(
        (1.0, 1.0, wsum(fs, SUMS_V, KV, W60, V_BVC), ctx[core.X_LH] - ctx[core.X_LL]),
        (mv20, sv20, wsum(fs, SUMS_V, KV, W60, V_V), mv(ctx, W20, V_RNG)),
    )
    rel_v = v * inv_mv20
    r = fs[slot(flow.RING_V, KV, tv, 0) + V_R]
    num20, den20 = kyle(ctx, W20)
    num60, den60 = kyle(ctx, W60)
    kyle20, kyle60, impact, shape = ratios4(
        (num20, num60, abs(r) * mv60, 1.0 + rel_v), (den20, den60, v, 1.0 + rel_rng)
    )
    res[0] = mv(ctx, W20, V_AR) * mv60 * inv_mv20
    res[1] = mv(ctx, W60, V_AR)
    res[2] = kyle20
    res[3] = kyle60
    res[4] = wsum(fs, SUMS_V, KV, W20, V_BVC) * inv_sv20
    res[5] = bvc60
    res[6] = math.log(shape)
    res[7] = impact
    res[8] = wsum(fs, SUMS_V, KV, W20, V_FRC) * inv_sv20


@kernel
def kyle(ctx: np.ndarray, w: int) -> tuple[float, float]:
    """Kyle's λ over window w as (cov(r, s), var(s)); var reads 0 where s is flat."""
    ms = mv(ctx, w, V_SG)
    var = mv(ctx, w, V_SG2) - ms * ms
    mr = mv(ctx, w, V_R)
    return mv(ctx, w, V_RSG) - mr * ms, var if var > VAR_FLOOR else 0.0
