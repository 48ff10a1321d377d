"""Advanced price features, trend half [15-45]: moving averages, MACD, momentum, Bollinger,
linear regression, TRIX/DEMA, ATR-scaled distances. Levels are ratios to the close or log
differences, so ES at 5000 and 6E at 1.08 give comparable numbers.

SMA, EMA and MACD follow TA-Lib 0.8 operation for operation (running SMA total, EMA seeded with
the mean of its first inputs, MACD's fast EMA seeded late so both EMAs start on the same bar).
"""

from __future__ import annotations

import numpy as np

from features import core
from features.core import F_C, F_LC, F_X, F_X2, KP, LINREG, RING_P, SUMS_P, mp
from features.primitives import (
    VAR_FLOOR,
    W20,
    W60,
    WINDOWS,
    Layout,
    ema_seeded,
    ema_step,
    kernel,
    slot,
    sqrt0,
    wsum,
)
from features.spec import spec
from features.vectors import ratios4

GROUP = "advanced price"
FIRST = 15
SMA_PERIODS = (5, 10, 20, 60)
EMA_PERIODS = (5, 12, 26, 60)
MACD_FAST, MACD_SLOW, MACD_SIGNAL = 12, 26, 9
MACD_WARMUP = MACD_SLOW - 1 + MACD_SIGNAL - 1  # TA-Lib's MACD lookback
ROC_LAGS = (5, 10, 20, 60)
TRIX_PERIOD = 15
DEMA_PERIOD = 20
KELTNER_PERIOD = 20
CROSS_AGE_CAP = 100
BB_K = 2.0

SPECS = (
    *(spec(f"sma_{n}_dev", n - 1, f"C / SMA({n}) - 1", period=n) for n in SMA_PERIODS),
    *(spec(f"ema_{n}_dev", n - 1, f"C / EMA({n}) - 1 (TA-Lib EMA)", period=n) for n in EMA_PERIODS),
    spec("sma_5_20", 19, "SMA(5) / SMA(20) - 1"),
    spec("sma_20_60", 59, "SMA(20) / SMA(60) - 1"),
    spec("ema_12_26", 25, "EMA(12) / EMA(26) - 1"),
    spec("macd_rel", MACD_WARMUP, "MACD line(12, 26, 9) / C (TA-Lib MACD)"),
    spec("macd_signal_rel", MACD_WARMUP, "MACD signal / C"),
    spec("macd_hist_rel", MACD_WARMUP, "(MACD line - signal) / C"),
    *(spec(f"roc_{k}", k, f"ln(C / C[-{k}])", lag=k) for k in ROC_LAGS),
    spec("ema_12_slope", 12, "EMA(12) / EMA(12)[-1] - 1"),
    spec(
        "bb_pctb_20",
        19,
        "(lnC - (m - 2s)) / 4s; m, s = mean, std of lnC over 20; 0.5 if s = 0",
        k=BB_K,
    ),
    spec("bb_width_20", 19, "4s: Bollinger width of lnC over 20 (log units)", k=BB_K),
    spec("linreg_slope_20", 19, "OLS slope of lnC on bar index over 20 bars"),
    spec("linreg_r2_20", 19, "R² of that regression; 0 if lnC is flat"),
    spec("linreg_resid_20", 19, "lnC - fitted value of that regression at the last bar"),
    spec("linreg_slope_60", 59, "OLS slope of lnC on bar index over 60 bars"),
    spec("linreg_r2_60", 59, "R² of the 60-bar regression"),
    spec(
        "trix_15",
        3 * TRIX_PERIOD,
        "E3 - E3[-1]; E3 = EMA(15) applied 3 times to lnC (seeded with the first value)",
        period=TRIX_PERIOD,
    ),
    spec(
        "dema_20_dev",
        2 * DEMA_PERIOD,
        "C / (2 EMA(20) - EMA(EMA(20))) - 1 (seeded with the first value)",
        period=DEMA_PERIOD,
    ),
    spec("sma60_atr_z", 59, "(C - SMA(60)) / ATR(14); 0 if ATR = 0"),
    spec("keltner_pos", KELTNER_PERIOD - 1, "(C - EMA(20)) / (2 ATR(14)); 0 if ATR = 0"),
    spec(
        "macd_cross_age",
        MACD_WARMUP,
        f"bars since MACD line crossed its signal / {CROSS_AGE_CAP}, capped at 1",
        cap=CROSS_AGE_CAP,
    ),
)

LAYOUT = Layout("price_trend")
SMA = LAYOUT.add("sma_totals", len(SMA_PERIODS))
EMA = LAYOUT.add("ema", 2 * len(EMA_PERIODS))  # (value, seed sum) per period
MACD_F = LAYOUT.add("macd_fast_ema", 2)
MACD_S = LAYOUT.add("macd_signal_ema", 2)
KELT = LAYOUT.add("keltner_ema", 2)
TRIX = LAYOUT.add("trix_emas", 4)  # three EMAs and the previous E3
DEMA = LAYOUT.add("dema_emas", 2)
PREV_EMA12 = LAYOUT.add("prev_ema12")
CROSS = LAYOUT.add("macd_cross", 2)  # sign of (line - signal), bars since it changed
SIZE = LAYOUT.size

# OLS against j = 1..n by window bar count n, tabulated so that no bar divides by a function of
# n: Σj, 1/n and 1/(nΣj² - (Σj)²) (0 where n < 2: no slope).
_N = np.arange(WINDOWS.max() + 1, dtype=np.float64)
LR_SJ = _N * (_N + 1.0) / 2.0
_DJJ = _N * (_N * (_N + 1.0) * (2.0 * _N + 1.0) / 6.0) - LR_SJ * LR_SJ
LR_INV_DJJ = np.where(_DJJ > 0.0, 1.0 / np.maximum(_DJJ, 1.0), 0.0)
INV_N = 1.0 / np.maximum(_N, 1.0)
INV_CROSS_AGE_CAP = 1.0 / CROSS_AGE_CAP
SMA_N = tuple(float(n) for n in SMA_PERIODS)  # the SMAs' divisors


@kernel
def update(cs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> tuple[float, float]:
    """Writes the trend features; returns (EMA(5), EMA(12)) for the oscillator half."""
    t = int(ctx[core.X_T])
    c, lc, atr = ctx[core.X_C], ctx[core.X_LC], ctx[core.X_ATR]
    o = FIRST

    # Divisions go four at a time (vectors.ratios4); every denominator is a positive price
    # level (or guarded, as the TA-Lib-style ratios are), so each lane equals its scalar form.
    sma5, sma10, sma20, sma60 = ratios4(sma_totals(cs, gs, t, c), SMA_N)
    ema5, ema12, ema26, ema60, line, signal = emas_macd(gs, t, c)
    cc = (c, c, c, c)
    dev_sma = ratios4(cc, (sma5, sma10, sma20, sma60))
    dev_ema = ratios4(cc, (ema5, ema12, ema26, ema60))
    cross = ratios4((sma5, sma20, ema12, line), (sma20, sma60, ema26, c))
    signal_rel, hist_rel, slope, inv_atr = ratios4(
        (signal, line - signal, ema12, 1.0), (c, c, gs[PREV_EMA12], atr)
    )
    for i in range(4):
        out[o + i] = dev_sma[i] - 1.0
        out[o + 4 + i] = dev_ema[i] - 1.0
    o += len(SMA_PERIODS) + len(EMA_PERIODS)
    out[o] = cross[0] - 1.0
    out[o + 1] = cross[1] - 1.0
    out[o + 2] = cross[2] - 1.0
    o += 3
    out[o] = cross[3]
    out[o + 1] = signal_rel
    out[o + 2] = hist_rel
    o += 3

    for i in range(len(ROC_LAGS)):
        k = ROC_LAGS[i]
        out[o + i] = lc - cs[slot(RING_P, KP, t, k) + F_LC] if t >= k else 0.0
    o += len(ROC_LAGS)

    out[o] = slope - 1.0 if t > 0 else 0.0
    gs[PREV_EMA12] = ema12
    o += 1

    # Bollinger and linear regression on x = lnC - anchor (see core): same sums, no cancellation.
    x = cs[slot(RING_P, KP, t, 0) + F_X]
    bollinger(ctx, x, out, o)
    linreg(cs, t, x, W20, 0, True, out, o + 2)
    linreg(cs, t, x, W60, 1, False, out, o + 5)
    o += 7

    trix_dema(gs, t, c, lc, out, o)
    o += 2

    out[o] = (c - sma60) * inv_atr
    kelt = ema_seeded(gs, KELT, c, t, KELTNER_PERIOD)
    out[o + 1] = (c - kelt) * (0.5 * inv_atr)
    o += 2

    out[o] = macd_cross_age(gs, line, signal)
    return ema5, ema12


@kernel
def emas_macd(gs: np.ndarray, t: int, c: float) -> tuple[float, float, float, float, float, float]:
    """EMA 5, 12, 26 and 60 of the close, then the MACD line and signal."""
    ema5 = ema_seeded(gs, EMA, c, t, EMA_PERIODS[0])
    ema12 = ema_seeded(gs, EMA + 2, c, t, EMA_PERIODS[1])
    ema26 = ema_seeded(gs, EMA + 4, c, t, EMA_PERIODS[2])
    ema60 = ema_seeded(gs, EMA + 6, c, t, EMA_PERIODS[3])
    # MACD: the fast EMA starts MACD_SLOW - MACD_FAST bars late so both first print on bar 25.
    start = MACD_SLOW - MACD_FAST
    fast = ema_seeded(gs, MACD_F, c, t - start, MACD_FAST) if t >= start else 0.0
    line = fast - ema26
    first = MACD_SLOW - 1
    signal = ema_seeded(gs, MACD_S, line, t - first, MACD_SIGNAL) if t >= first else 0.0
    return ema5, ema12, ema26, ema60, line, signal


@kernel
def trix_dema(gs: np.ndarray, t: int, c: float, lc: float, out: np.ndarray, o: int) -> None:
    """TRIX and DEMA use EMAs seeded with their first input (their warm-ups cover the seed)."""
    a = 2.0 / (TRIX_PERIOD + 1)
    for j in range(3):
        src = lc if j == 0 else gs[TRIX + j - 1]
        gs[TRIX + j] = src if t == 0 else ema_step(gs[TRIX + j], src, a)
    out[o] = gs[TRIX + 2] - gs[TRIX + 3] if t > 0 else 0.0
    gs[TRIX + 3] = gs[TRIX + 2]
    b = 2.0 / (DEMA_PERIOD + 1)
    gs[DEMA] = c if t == 0 else ema_step(gs[DEMA], c, b)
    gs[DEMA + 1] = c if t == 0 else ema_step(gs[DEMA + 1], gs[DEMA], b)
    out[o + 1] = c / (2.0 * gs[DEMA] - gs[DEMA + 1]) - 1.0


@kernel
def macd_cross_age(gs: np.ndarray, line: float, signal: float) -> float:
    """Bars since the MACD line last crossed its signal, over CROSS_AGE_CAP, capped at 1."""
    side = 1.0 if line >= signal else -1.0
    gs[CROSS + 1] = 0.0 if side != gs[CROSS] else gs[CROSS + 1] + 1.0
    gs[CROSS] = side
    return min(gs[CROSS + 1], CROSS_AGE_CAP) * INV_CROSS_AGE_CAP


@kernel
def sma_totals(
    cs: np.ndarray, gs: np.ndarray, t: int, c: float
) -> tuple[float, float, float, float]:
    """TA-Lib's SMA running totals: each drops the oldest close, then adds the newest."""
    for i in range(len(SMA_PERIODS)):
        n = SMA_PERIODS[i]
        if t >= n:
            gs[SMA + i] -= cs[slot(RING_P, KP, t, n) + F_C]
        gs[SMA + i] += c
    return gs[SMA], gs[SMA + 1], gs[SMA + 2], gs[SMA + 3]


@kernel
def bollinger(ctx: np.ndarray, x: float, out: np.ndarray, o: int) -> None:
    mean = mp(ctx, W20, F_X)
    sd = sqrt0(mp(ctx, W20, F_X2) - mean * mean)
    out[o] = (x - (mean - BB_K * sd)) / (2.0 * BB_K * sd) if sd > 0.0 else 0.5
    out[o + 1] = 2.0 * BB_K * sd


@kernel
def linreg(
    cs: np.ndarray, t: int, x: float, w: int, i: int, resid: bool, out: np.ndarray, o: int
) -> None:
    """OLS of x on j = 1..n from Σx, Σx², Σj·x (x = lnC - anchor; the anchor cancels)."""
    k = min(t + 1, WINDOWS[w])
    n = float(k)
    sx = wsum(cs, SUMS_P, KP, w, F_X)
    sxx = wsum(cs, SUMS_P, KP, w, F_X2)
    sjx = cs[LINREG + i]
    sj = LR_SJ[k]
    inv_djj = LR_INV_DJJ[k]
    djx = n * sjx - sj * sx
    dxx = n * sxx - sx * sx
    slope = djx * inv_djj
    out[o] = slope
    flat = dxx <= VAR_FLOOR * n * n
    out[o + 1] = 0.0 if flat or k < 2 else min(djx * (djx * inv_djj) / dxx, 1.0)
    if resid:
        intercept = (sx - slope * sj) * INV_N[k]
        out[o + 2] = x - (intercept + slope * n)
