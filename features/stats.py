"""Statistical features [105-144] of one-minute log returns r and log ranges: realized and
range-based volatility (Parkinson, Garman–Klass, Rogers–Satchell, Yang–Zhang), higher moments,
autocorrelation, t-statistics, EWMA volatility. All moments come from the core window sums."""

from __future__ import annotations

import math

import numpy as np

from features import core
from features.core import (
    F_AR,
    F_ARR1,
    F_GK,
    F_LC,
    F_OC,
    F_OC2,
    F_ON,
    F_ON2,
    F_R,
    F_R2,
    F_R3,
    F_R4,
    F_RNG,
    F_RNG2,
    F_RR1,
    F_RR2,
    F_RR5,
    F_RS,
    F_UP,
    F_UP2,
    KP,
    RING_P,
    mp,
    varp,
)
from features.primitives import (
    VAR_FLOOR,
    W5,
    W10,
    W20,
    W60,
    WINDOWS,
    Layout,
    clip,
    count,
    extreme,
    kernel,
    ratio,
    slot,
    sqrt0,
)
from features.spec import spec

GROUP = "statistical"
FIRST = 105
EWMA_WARMUP = 20  # bias-corrected EWMA (see core.ewma_var): no zero seed to wait out
RUN_CAP = 20
FOUR_LN2 = 4.0 * math.log(2.0)

SPECS = (
    *(spec(f"rv_{n}", n, f"std of r over {n}", window=n) for n in (5, 10, 20, 60)),
    *(
        spec(f"parkinson_{n}", n - 1, f"sqrt(mean (lnH - lnL)² / 4ln2) over {n}", window=n)
        for n in (20, 60)
    ),
    *(
        spec(
            f"garman_klass_{n}",
            n - 1,
            f"sqrt(mean 0.5(lnH/L)² - (2ln2 - 1)(lnC/O)²) over {n}",
            window=n,
        )
        for n in (20, 60)
    ),
    *(
        spec(
            f"rogers_satchell_{n}",
            n - 1,
            f"sqrt(mean ln(H/C)ln(H/O) + ln(L/C)ln(L/O)) over {n}",
            window=n,
        )
        for n in (20, 60)
    ),
    *(
        spec(
            f"yang_zhang_{n}",
            n,
            f"sqrt(σ²(ln O/C[-1]) + kσ²(ln C/O) + (1-k)σ²_RS) over {n}, "
            "k = 0.34 / (1.34 + (n+1)/(n-1))",
            window=n,
        )
        for n in (20, 60)
    ),
    spec("vol_ratio_5_60", 60, "rv_5 / rv_60; 0 if rv_60 = 0"),
    spec("vol_ratio_20_60", 60, "rv_20 / rv_60; 0 if rv_60 = 0"),
    *(spec(f"skew_{n}", n, f"skewness of r over {n}; 0 if flat", window=n) for n in (20, 60)),
    *(
        spec(f"kurt_{n}", n, f"excess kurtosis of r over {n}; 0 if flat", window=n)
        for n in (20, 60)
    ),
    spec("ac1_20", 21, "autocorrelation of r at lag 1 over 20"),
    spec("ac1_60", 61, "autocorrelation of r at lag 1 over 60"),
    spec("ac2_60", 62, "autocorrelation of r at lag 2 over 60"),
    spec("ac5_60", 65, "autocorrelation of r at lag 5 over 60"),
    spec("tstat_20", 20, "Σr / (std · √n) over 20"),
    spec("tstat_60", 60, "Σr / (std · √n) over 60"),
    spec("ret_z_20", 20, "r / rv_20"),
    spec("ret_z_60", 60, "r / rv_60"),
    spec("absret_ratio_20", 20, "mean |r| / sqrt(mean r²) over 20"),
    spec("downside_share_20", 20, "Σ r² over down bars / Σ r² over 20; 0.5 if flat"),
    spec("updown_vol_diff_20", 20, "(sqrt(mean r²⁺) - sqrt(mean r²⁻)) / sqrt(mean r²) over 20"),
    spec("range_ratio_20", 19, "ln(H/L) / mean ln(H/L) over 20"),
    spec(
        "ewma_vol_fast",
        EWMA_WARMUP,
        "sqrt(EWMA r², λ = 0.94), bias-corrected",
        decay=core.EWMA_FAST,
    ),
    spec(
        "ewma_vol_slow",
        EWMA_WARMUP,
        "sqrt(EWMA r², λ = 0.99), bias-corrected",
        decay=core.EWMA_SLOW,
    ),
    spec("up_fraction_20", 20, "share of up bars over 20"),
    spec(
        "run_length",
        1,
        f"signed count of consecutive same-sign returns / {RUN_CAP}, clipped",
        cap=RUN_CAP,
    ),
    spec("max_abs_ret_ratio_20", 20, "max |r| over 20 / rv_20"),
    spec("ewma_vol_ratio", EWMA_WARMUP, "ewma_vol_fast / ewma_vol_slow"),
    spec("absret_cv_20", 20, "std |r| / mean |r| over 20"),
    spec("absret_ac1_20", 21, "autocorrelation of |r| at lag 1 over 20"),
    spec("hl_vol_ratio_20", 20, "parkinson_20 / rv_20"),
    spec("ret_60_z", 60, "ln(C / C[-60]) / (rv_60 · √60)"),
)

LAYOUT = Layout("stats")
RUN = LAYOUT.add("run_length")
MAX_AR = LAYOUT.add("max_abs_ret_20", 2)
SIZE = LAYOUT.size


@kernel
def moments(ctx: np.ndarray, w: int) -> tuple[float, float, float]:
    """(variance, skewness, excess kurtosis) of r over window w from raw power sums."""
    m1 = mp(ctx, w, F_R)
    m2 = mp(ctx, w, F_R2)
    m3 = mp(ctx, w, F_R3)
    m4 = mp(ctx, w, F_R4)
    var = m2 - m1 * m1
    if var <= VAR_FLOOR:
        return 0.0, 0.0, 0.0
    c3 = m3 - 3.0 * m1 * m2 + 2.0 * m1 * m1 * m1
    c4 = m4 - 4.0 * m1 * m3 + 6.0 * m1 * m1 * m2 - 3.0 * m1 * m1 * m1 * m1
    return var, c3 / (var * math.sqrt(var)), c4 / (var * var) - 3.0


@kernel
def autocorr(ctx: np.ndarray, w: int, f_prod: int) -> float:
    m = mp(ctx, w, F_R)
    var = mp(ctx, w, F_R2) - m * m
    if var <= VAR_FLOOR:
        return 0.0
    return clip((mp(ctx, w, f_prod) - m * m) / var, -1.0, 1.0)


@kernel
def yang_zhang(ctx: np.ndarray, w: int, t: int) -> float:
    n = count(t, w)
    if n < 2:
        return 0.0
    k = 0.34 / (1.34 + (n + 1.0) / (n - 1.0))
    scale = n / (n - 1.0)  # sample variances
    var_on = varp(ctx, w, F_ON, F_ON2) * scale
    var_oc = varp(ctx, w, F_OC, F_OC2) * scale
    var_rs = max(mp(ctx, w, F_RS), 0.0)
    return sqrt0(var_on + k * var_oc + (1.0 - k) * var_rs)


@kernel
def update(cs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    t = int(ctx[core.X_T])
    r = ctx[core.X_R]
    o = FIRST
    rv5 = sqrt0(varp(ctx, W5, F_R, F_R2))
    rv20 = sqrt0(varp(ctx, W20, F_R, F_R2))
    rv60 = sqrt0(varp(ctx, W60, F_R, F_R2))
    out[o], out[o + 2], out[o + 3] = rv5, rv20, rv60
    out[o + 1] = sqrt0(varp(ctx, W10, F_R, F_R2))
    o += 4
    park20 = 0.0
    for i in range(2):
        w = (W20, W60)[i]
        park = sqrt0(mp(ctx, w, F_RNG2) / FOUR_LN2)
        park20 = park if i == 0 else park20
        out[o + i] = park
        out[o + 2 + i] = sqrt0(mp(ctx, w, F_GK))
        out[o + 4 + i] = sqrt0(mp(ctx, w, F_RS))
        out[o + 6 + i] = yang_zhang(ctx, w, t)
    o += 8
    out[o] = ratio(rv5, rv60)
    out[o + 1] = ratio(rv20, rv60)
    o += 2
    _, skew20, kurt20 = moments(ctx, W20)
    _, skew60, kurt60 = moments(ctx, W60)
    out[o], out[o + 1], out[o + 2], out[o + 3] = skew20, skew60, kurt20, kurt60
    o += 4
    out[o] = autocorr(ctx, W20, F_RR1)
    out[o + 1] = autocorr(ctx, W60, F_RR1)
    out[o + 2] = autocorr(ctx, W60, F_RR2)
    out[o + 3] = autocorr(ctx, W60, F_RR5)
    o += 4
    for i in range(2):
        w = (W20, W60)[i]
        sd = rv20 if i == 0 else rv60
        n = count(t, w)
        out[o + i] = ratio(mp(ctx, w, F_R) * n, sd * math.sqrt(n))
        out[o + 2 + i] = ratio(r, sd)
    o += 4

    ms = mp(ctx, W20, F_R2)
    mabs = mp(ctx, W20, F_AR)
    mup2 = mp(ctx, W20, F_UP2)
    rms = sqrt0(ms)
    out[o] = ratio(mabs, rms)
    out[o + 1] = (ms - mup2) / ms if ms > VAR_FLOOR else 0.5
    out[o + 2] = ratio(sqrt0(mup2) - sqrt0(ms - mup2), rms)
    rng = cs[slot(RING_P, KP, t, 0) + F_RNG]
    out[o + 3] = ratio(rng, mp(ctx, W20, F_RNG))
    evf, evs = sqrt0(ctx[core.X_EVF]), sqrt0(ctx[core.X_EVS])
    out[o + 4], out[o + 5] = evf, evs
    out[o + 6] = mp(ctx, W20, F_UP)
    o += 7

    run = gs[RUN]
    run = (run + 1.0 if run > 0.0 else 1.0) if r > 0.0 else (run - 1.0 if run < 0.0 else -1.0)
    gs[RUN] = run if r != 0.0 else 0.0
    out[o] = clip(gs[RUN] / RUN_CAP, -1.0, 1.0)
    extreme(gs, MAX_AR, cs, RING_P, KP, F_AR, t, WINDOWS[W20], True)
    out[o + 1] = ratio(gs[MAX_AR], rv20)
    out[o + 2] = ratio(evf, evs)
    var_abs = ms - mabs * mabs
    out[o + 3] = ratio(sqrt0(var_abs), mabs)
    out[o + 4] = (
        clip((mp(ctx, W20, F_ARR1) - mabs * mabs) / var_abs, -1.0, 1.0)
        if var_abs > VAR_FLOOR
        else 0.0
    )
    out[o + 5] = ratio(park20, rv20)
    lag = WINDOWS[W60]
    move = ctx[core.X_LC] - cs[slot(RING_P, KP, t, lag) + F_LC] if t >= lag else 0.0
    out[o + 6] = ratio(move, rv60 * math.sqrt(lag))
