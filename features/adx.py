"""ADX family [211-215]: +DI, -DI, DX, ADX, ADXR (period 14), reproducing TA-Lib 0.8 exactly.

TA-Lib sums the first 13 one-bar DMs and TRs, then smooths with Wilder's x - x/14 + new; DI
and DX print from bar 14. ADX is the mean of the 14 DX of bars 14..27 (a DX is skipped, not
zeroed, when TR or +DI + -DI is exactly 0: TA-Lib 0.8 keeps dividing down to subnormal TRs),
then (ADX·13 + DX) / 14. Where TR is 0, +DI/-DI print 0 and DX repeats its last value.
ADXR = (ADX + ADX 13 bars ago) / 2.
"""

from __future__ import annotations

import numpy as np

from features import core
from features.primitives import Layout, kernel, rare
from features.spec import spec
from features.vectors import ratios4

GROUP = "ADX family"
FIRST = 211
PERIOD = 14
ADX_WARMUP = 2 * PERIOD - 1
ADXR_WARMUP = ADX_WARMUP + PERIOD - 1
ADXR_RING = 16  # power of two above the ADXR lag
WILDER = float(PERIOD)  # Wilder's divisor

SPECS = (
    spec(
        "plus_di_14",
        PERIOD,
        "+DI(14) = 100 · Wilder(+DM) / Wilder(TR) (TA-Lib PLUS_DI)",
        period=PERIOD,
    ),
    spec(
        "minus_di_14",
        PERIOD,
        "-DI(14) = 100 · Wilder(-DM) / Wilder(TR) (TA-Lib MINUS_DI)",
        period=PERIOD,
    ),
    spec("dx_14", PERIOD, "100 · |+DI - -DI| / (+DI + -DI) (TA-Lib DX)", period=PERIOD),
    spec("adx_14", ADX_WARMUP, "Wilder average of DX (TA-Lib ADX)", period=PERIOD),
    spec("adxr_14", ADXR_WARMUP, "(ADX + ADX[-13]) / 2 (TA-Lib ADXR)", period=PERIOD),
)

LAYOUT = Layout("adx")
DM = LAYOUT.add("plus_minus_dm", 2)
TR = LAYOUT.add("tr")
DX = LAYOUT.add("last_dx")
ADX = LAYOUT.add("adx_or_dx_sum")
RING = LAYOUT.add("adx_ring", ADXR_RING)
SIZE = LAYOUT.size


@kernel
def is_zero(v: float) -> bool:
    return v == 0.0


@kernel
def update(gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    t = int(ctx[core.X_T])
    o = FIRST
    if rare(t == 0):
        out[o : o + 5] = 0.0
        return
    h, lo_ = ctx[core.X_H], ctx[core.X_L]
    diff_p = h - ctx[core.X_PH]
    diff_m = ctx[core.X_PL] - lo_
    tr = max(h - lo_, abs(h - ctx[core.X_PC]), abs(lo_ - ctx[core.X_PC]))
    # Divisions four at a time (vectors.ratios4): Wilder's x / 14 of the three sums here,
    # both DIs below (where TR is not 0); each lane is TA-Lib's division.
    dm_m, dm_p, tr_sum = gs[DM + 1], gs[DM], gs[TR]
    cut_m, cut_p, cut_tr, _ = ratios4((dm_m, dm_p, tr_sum, 0.0), (WILDER, WILDER, WILDER, 0.0))
    if t >= PERIOD:
        gs[DM + 1] = dm_m - cut_m
        gs[DM] = dm_p - cut_p
    if diff_m > 0.0 and diff_p < diff_m:
        gs[DM + 1] += diff_m
    elif diff_p > 0.0 and diff_p > diff_m:
        gs[DM] += diff_p
    gs[TR] = tr_sum + tr if t < PERIOD else tr_sum - cut_tr + tr
    if rare(t < PERIOD):
        out[o : o + 5] = 0.0
        return

    plus_di = minus_di = 0.0
    valid = False
    dx = gs[DX] if t > PERIOD else 0.0
    if not is_zero(gs[TR]):
        di_m, di_p, _, _ = ratios4((gs[DM + 1], gs[DM], 0.0, 0.0), (gs[TR], gs[TR], 0.0, 0.0))
        minus_di = 100.0 * di_m
        plus_di = 100.0 * di_p
        total = minus_di + plus_di
        if not is_zero(total):
            dx = 100.0 * (abs(minus_di - plus_di) / total)
            valid = True
    gs[DX] = dx

    if rare(t <= ADX_WARMUP):
        gs[ADX] += dx if valid else 0.0
        if t == ADX_WARMUP:
            gs[ADX] /= PERIOD
    elif valid:
        gs[ADX] = (gs[ADX] * (PERIOD - 1) + dx) / PERIOD
    adx = gs[ADX]
    gs[RING + (t & (ADXR_RING - 1))] = adx
    out[o] = plus_di
    out[o + 1] = minus_di
    out[o + 2] = dx
    out[o + 3] = adx
    out[o + 4] = (adx + gs[RING + ((t - (PERIOD - 1)) & (ADXR_RING - 1))]) / 2.0
