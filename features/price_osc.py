"""Advanced price features, oscillator half [46-74]: RSI (TA-Lib's Wilder RSI), stochastics,
channels, Aroon, ATR, CMO, vortex, choppiness, Ichimoku, Elder ray, session-relative prices.
"""

from __future__ import annotations

import math

import numpy as np

from features import core
from features.core import (
    F_AR,
    F_BOP,
    F_LH,
    F_LL,
    F_OC,
    F_R,
    F_TR,
    F_VIM,
    F_VIP,
    KP,
    RING_P,
    SUMS_P,
    mp,
)
from features.primitives import RING, W14, Layout, clip, extreme, kernel, rare, wsum
from features.spec import spec
from features.vectors import ratios4

GROUP = "advanced price"
FIRST = 46
RSI_PERIODS = (7, 14, 28)
STOCH_D = 3
INV_LN14 = 1.0 / math.log(14.0)
INV_STOCH_D = 1.0 / STOCH_D
INV_AROON = 1.0 / 19.0
# Rolling max log high / min log low ("channels") over these windows
CHANNELS = (14, 20, 60)
C14, C20, C60 = range(len(CHANNELS))

SPECS = (
    *(spec(f"rsi_{n}", n, f"RSI({n}), TA-Lib/Wilder, 0..100", period=n) for n in RSI_PERIODS),
    spec("stoch_k_14", 13, "(lnC - LL14) / (HH14 - LL14), HH/LL = max lnH/min lnL; 0.5 if flat"),
    spec("stoch_d_14", 13 + STOCH_D - 1, "mean of stoch_k_14 over 3 bars", smooth=STOCH_D),
    spec("stoch_k_60", 59, "(lnC - LL60) / (HH60 - LL60) over 60; 0.5 if flat"),
    spec("stochrsi_14", 14 + 13, "(RSI14 - min RSI14) / (max - min) over 14; 0.5 if flat"),
    spec("donchian_width_20", 19, "ln(max H / min L) over 20"),
    spec("donchian_width_60", 59, "ln(max H / min L) over 60"),
    spec("dist_high_60", 59, "ln(max H over 60 / C)"),
    spec("dist_low_60", 59, "ln(min L over 60 / C)"),
    spec("aroon_up_20", 19, "1 - (bars since HH20) / 19"),
    spec("aroon_down_20", 19, "1 - (bars since LL20) / 19"),
    spec("atr_rel", core.ATR_PERIOD, "ATR(14) / C (Wilder, seeded with the mean of 14 TRs)"),
    spec("cmo_14", 14, "Σr / Σ|r| over 14 (Chande momentum on log returns)"),
    spec("vortex_pos_14", 14, "Σ|lnH - lnL[-1]| / ΣTR over 14 (TR in log units)"),
    spec("vortex_neg_14", 14, "Σ|lnL - lnH[-1]| / ΣTR over 14"),
    spec("qstick_14", 13, "mean of ln(C / O) over 14"),
    spec("bop_14", 13, "mean of (C - O) / (H - L) over 14"),
    spec("chop_14", 14, "ln(ΣTR / ln(max H / min L)) / ln 14 over 14 (TR in logs), in [0, 1]"),
    spec("mid_dev_20", 19, "lnC - (max lnH + min lnL) / 2 over 20 (Donchian midline)"),
    spec("mid_dev_60", 59, "lnC - (max lnH + min lnL) / 2 over 60"),
    spec("mid_20_60", 59, "Donchian midline over 20 - midline over 60 (log units)"),
    spec("elder_bull_12", 11, "H / EMA(12) - 1"),
    spec("elder_bear_12", 11, "L / EMA(12) - 1"),
    spec("session_return", 0, "ln(C / first open of the Globex session)"),
    spec("session_range_pos", 0, "(C - session low) / (session high - session low); 0.5 if flat"),
    spec("prev_session_return", 0, "ln(C / last close of the previous session); 0 before one"),
    spec("ema_5_12", 11, "EMA(5) / EMA(12) - 1"),
)

LAYOUT = Layout("price_osc")
RSI = LAYOUT.add("rsi_gain_loss", 2 * len(RSI_PERIODS))
RSI_RING = LAYOUT.add("rsi14_ring", RING)
RSI_TRK = LAYOUT.add("rsi14_max_min", 4)
STOCH = LAYOUT.add("stoch_k_last", STOCH_D - 1)
TRK = LAYOUT.add("channel_trackers", 4 * len(CHANNELS))  # (high, bar, low, bar) per channel
SESS = LAYOUT.add("session_open_high_low_prev", 5)  # open lnO, high, low, prev lnC, has prev
SIZE = LAYOUT.size


@kernel
def wilder_rsi(gs: np.ndarray, off: int, diff: float, t: int, n: int) -> tuple[float, float]:
    """TA-Lib 0.8's RSI after the diff of bar t (t >= 1) as (gain, gain + loss), RSI = 100 ·
    ratio of the two: plain means of gains and losses over the first n diffs, then Wilder's
    x·(n-1), +diff, ·(1/n), in TA_RSI's order (0.8 scales by the reciprocal of n where earlier
    releases divided by n)."""
    inv = 1.0 / n
    if t > n:
        gs[off] *= n - 1
        gs[off + 1] *= n - 1
    if diff < 0.0:
        gs[off + 1] -= diff
    else:
        gs[off] += diff
    if rare(t < n):
        return 0.0, 0.0
    gs[off] *= inv
    gs[off + 1] *= inv
    return gs[off], gs[off] + gs[off + 1]


@kernel
def update(
    cs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray, ema5: float, ema12: float
) -> None:
    t = int(ctx[core.X_T])
    h, lo_, c, lc = ctx[core.X_H], ctx[core.X_L], ctx[core.X_C], ctx[core.X_LC]
    o = FIRST

    # Divisions go four at a time (vectors.ratios4), each lane guarded as its scalar form.
    rsi14, inv_ema12 = rsis(gs, ctx, t, c, ema12, out, o)
    o += len(RSI_PERIODS)

    for j in range(len(CHANNELS)):
        extreme(gs, TRK + 4 * j, cs, RING_P, KP, F_LH, t, CHANNELS[j], True)
        extreme(gs, TRK + 4 * j + 2, cs, RING_P, KP, F_LL, t, CHANNELS[j], False)
    hh14, ll14 = gs[TRK + 4 * C14], gs[TRK + 4 * C14 + 2]
    hh60, ll60 = gs[TRK + 4 * C60], gs[TRK + 4 * C60 + 2]
    sum_tr, span, cmo = stochastics(cs, gs, t, lc, rsi14, hh14, ll14, hh60, ll60, out, o)
    o += 4

    hh20, ll20 = gs[TRK + 4 * C20], gs[TRK + 4 * C20 + 2]
    out[o] = hh20 - ll20
    out[o + 1] = hh60 - ll60
    out[o + 2] = hh60 - lc
    out[o + 3] = ll60 - lc
    out[o + 4] = 1.0 - min(t - gs[TRK + 4 * C20 + 1], 19.0) * INV_AROON
    out[o + 5] = 1.0 - min(t - gs[TRK + 4 * C20 + 3], 19.0) * INV_AROON
    out[o + 6] = ctx[core.X_ATR_REL]
    o += 7

    track_session(gs, ctx, t, h, lo_)
    top, bottom = gs[SESS + 1], gs[SESS + 2]
    inv_tr, chop_arg, session_pos, _ = ratios4(
        (1.0, sum_tr, c - bottom, 0.0),
        (sum_tr, span if span > 0.0 else 0.0, top - bottom if top > bottom else 0.0, 0.0),
    )
    out[o] = cmo
    out[o + 1] = wsum(cs, SUMS_P, KP, W14, F_VIP) * inv_tr
    out[o + 2] = wsum(cs, SUMS_P, KP, W14, F_VIM) * inv_tr
    out[o + 3] = mp(ctx, W14, F_OC)
    out[o + 4] = mp(ctx, W14, F_BOP)
    out[o + 5] = clip(math.log(chop_arg) * INV_LN14, 0.0, 1.0) if span > 0.0 else 1.0
    o += 6

    mid20 = 0.5 * (hh20 + ll20)
    mid60 = 0.5 * (hh60 + ll60)
    out[o] = lc - mid20
    out[o + 1] = lc - mid60
    out[o + 2] = mid20 - mid60
    out[o + 3] = h * inv_ema12 - 1.0
    out[o + 4] = lo_ * inv_ema12 - 1.0
    o += 5

    out[o] = lc - gs[SESS]
    out[o + 1] = session_pos if top > bottom else 0.5
    out[o + 2] = lc - gs[SESS + 3] if gs[SESS + 4] > 0.0 else 0.0
    out[o + 3] = ema5 * inv_ema12 - 1.0


@kernel
def rsis(
    gs: np.ndarray, ctx: np.ndarray, t: int, c: float, ema12: float, out: np.ndarray, o: int
) -> tuple[float, float]:
    """Members [0, 3): RSI 7, 14 and 28. Returns RSI 14 (the stochastic RSI's input) and
    1 / EMA(12), which rides in the spare lane of the RSIs' division."""
    diff = c - ctx[core.X_PC]
    g7, n7 = wilder_rsi(gs, RSI, diff, t, RSI_PERIODS[0]) if t > 0 else (0.0, 0.0)
    g14, n14 = wilder_rsi(gs, RSI + 2, diff, t, RSI_PERIODS[1]) if t > 0 else (0.0, 0.0)
    g28, n28 = wilder_rsi(gs, RSI + 4, diff, t, RSI_PERIODS[2]) if t > 0 else (0.0, 0.0)
    rsi7, rsi14, rsi28, inv_ema12 = ratios4((g7, g14, g28, 1.0), (n7, n14, n28, ema12))
    rsi7, rsi14, rsi28 = 100.0 * rsi7, 100.0 * rsi14, 100.0 * rsi28
    out[o], out[o + 1], out[o + 2] = rsi7, rsi14, rsi28
    return rsi14, inv_ema12


@kernel
def stochastics(
    cs: np.ndarray,
    gs: np.ndarray,
    t: int,
    lc: float,
    rsi14: float,
    hh14: float,
    ll14: float,
    hh60: float,
    ll60: float,
    out: np.ndarray,
    o: int,
) -> tuple[float, float, float]:
    """Members [3, 7): stochastics of the close over 14 and 60 and of RSI 14. CMO's division
    rides in their batch; returns ΣTR over 14 and HH14 - LL14 (for vortex and choppiness) and
    CMO."""
    # Stochastic RSI over the RSI's own bar count, so the tracker only ever sees valid RSIs.
    ri = t - 14
    if ri >= 0:
        gs[RSI_RING + (ri & (RING - 1))] = rsi14
        extreme(gs, RSI_TRK, gs, RSI_RING, 1, 0, ri, 14, True)
        extreme(gs, RSI_TRK + 2, gs, RSI_RING, 1, 0, ri, 14, False)
    top, bottom = gs[RSI_TRK], gs[RSI_TRK + 2]
    sum_ar = wsum(cs, SUMS_P, KP, W14, F_AR)
    sum_tr = wsum(cs, SUMS_P, KP, W14, F_TR)
    span = hh14 - ll14
    k14, k60, stoch_rsi, cmo = ratios4(
        (lc - ll14, lc - ll60, rsi14 - bottom, wsum(cs, SUMS_P, KP, W14, F_R)),
        (
            span if hh14 > ll14 else 0.0,
            hh60 - ll60 if hh60 > ll60 else 0.0,
            top - bottom if top > bottom else 0.0,
            sum_ar,
        ),
    )
    k14 = k14 if hh14 > ll14 else 0.5
    out[o] = k14
    out[o + 1] = (k14 + gs[STOCH] + gs[STOCH + 1]) * INV_STOCH_D
    gs[STOCH + 1] = gs[STOCH]
    gs[STOCH] = k14
    out[o + 2] = k60 if hh60 > ll60 else 0.5
    out[o + 3] = stoch_rsi if top > bottom else 0.5
    return sum_tr, span, cmo


@kernel
def track_session(gs: np.ndarray, ctx: np.ndarray, t: int, h: float, lo_: float) -> None:
    """The Globex session's first log open, high and low so far, and the previous session's
    last log close (kept from the first session change on: before one there is none)."""
    if rare(ctx[core.X_NEW_SESSION] > 0.0):
        if t > 0:
            gs[SESS + 3] = ctx[core.X_PLC]
            gs[SESS + 4] = 1.0
        gs[SESS], gs[SESS + 1], gs[SESS + 2] = ctx[core.X_LO], h, lo_
    else:
        gs[SESS + 1] = max(gs[SESS + 1], h)
        gs[SESS + 2] = min(gs[SESS + 2], lo_)
