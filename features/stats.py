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
    slot,
)
from features.spec import spec
from features.vectors import ratios4, roots4

GROUP = "statistical"
FIRST = 105
EWMA_WARMUP = 20  # bias-corrected EWMA (see core.ewma_fold): no zero seed to wait out
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
        "sqrt(EWMA r², λ = 0.997) of consecutive minutes (no session-break jump), bias-corrected",
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

# Functions of a window's bar count n, tabulated (frozen into the kernel) so that no bar divides
# by a constant: Yang–Zhang's k and sample-variance factor n/(n-1) (n >= 2), and √n.
_N = np.arange(WINDOWS.max() + 1, dtype=np.float64)
_N1 = np.maximum(_N - 1.0, 1.0)
YZ_K = np.where(_N >= 2, 0.34 / (1.34 + (_N + 1.0) / _N1), 0.0)
YZ_SCALE = np.where(_N >= 2, _N / _N1, 0.0)
SQRT_N = np.sqrt(_N)
INV_FOUR_LN2 = 1.0 / FOUR_LN2
INV_RUN_CAP = 1.0 / RUN_CAP
INV_SQRT_W60 = 1.0 / math.sqrt(WINDOWS[W60])


@kernel
def moments(
    ctx: np.ndarray, w: int, m1: float, inv_var: float, inv_sd: float
) -> tuple[float, float]:
    """(skewness, excess kurtosis) of r over window w from raw power sums; 0 if flat."""
    if inv_var == 0.0:
        return 0.0, 0.0
    m2 = mp(ctx, w, F_R2)
    m3 = mp(ctx, w, F_R3)
    m4 = mp(ctx, w, F_R4)
    c3 = m3 - 3.0 * m1 * m2 + 2.0 * m1 * m1 * m1
    c4 = m4 - 4.0 * m1 * m3 + 6.0 * m1 * m1 * m2 - 3.0 * m1 * m1 * m1 * m1
    return c3 * (inv_var * inv_sd), c4 * (inv_var * inv_var) - 3.0


@kernel
def autocorr(ctx: np.ndarray, w: int, f_prod: int, m: float, inv_var: float) -> float:
    if inv_var == 0.0:
        return 0.0
    return clip((mp(ctx, w, f_prod) - m * m) * inv_var, -1.0, 1.0)


@kernel
def yang_zhang_var(ctx: np.ndarray, w: int, t: int) -> float:
    n = count(t, w)
    if n < 2:
        return 0.0
    k = YZ_K[n]
    var_on = varp(ctx, w, F_ON, F_ON2) * YZ_SCALE[n]
    var_oc = varp(ctx, w, F_OC, F_OC2) * YZ_SCALE[n]
    var_rs = max(mp(ctx, w, F_RS), 0.0)
    return var_on + k * var_oc + (1.0 - k) * var_rs


@kernel
def update(cs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    # Square roots and divisions are gathered into batches of independent operands (roots4,
    # ratios4), and each window's 1/std is taken once and multiplied wherever a feature
    # divides by it: they are the kernel's slowest instructions.
    t = int(ctx[core.X_T])
    r = ctx[core.X_R]
    o = FIRST
    rv5, rv20, rv60, park20 = volatility(ctx, t, out, o)

    ms = mp(ctx, W20, F_R2)
    mabs = mp(ctx, W20, F_AR)
    mup2 = mp(ctx, W20, F_UP2)
    var_abs = ms - mabs * mabs
    rms, rms_up, rms_down, evf = roots4((ms, mup2, ms - mup2, ctx[core.X_EVF]))
    evs, sd_abs, _, _ = roots4((ctx[core.X_EVS], var_abs, 0.0, 0.0))
    is20, is60, inv_ms, range_ratio = ratios4(
        (1.0, 1.0, 1.0, cs[slot(RING_P, KP, t, 0) + F_RNG]),
        (rv20, rv60, ms if ms > VAR_FLOOR else 0.0, mp(ctx, W20, F_RNG)),
    )
    ewma_ratio, abs_cv, abs_ac1, _ = ratios4(
        (evf, sd_abs, mp(ctx, W20, F_ARR1) - mabs * mabs, 0.0),
        (evs, mabs, var_abs if var_abs > VAR_FLOOR else 0.0, 0.0),
    )
    o += 12
    return_moments(ctx, t, r, rv5, rv20, is20, is60, out, o)
    o += 14

    inv_rms = rms * inv_ms
    out[o] = mabs * inv_rms
    out[o + 1] = (ms - mup2) * inv_ms if ms > VAR_FLOOR else 0.5
    out[o + 2] = (rms_up - rms_down) * inv_rms
    out[o + 3] = range_ratio
    out[o + 4], out[o + 5] = evf, evs
    out[o + 6] = mp(ctx, W20, F_UP)
    o += 7

    out[o] = run_length(gs, r)
    extreme(gs, MAX_AR, cs, RING_P, KP, F_AR, t, WINDOWS[W20], True)
    out[o + 1] = gs[MAX_AR] * is20
    out[o + 2] = ewma_ratio
    out[o + 3] = abs_cv
    out[o + 4] = clip(abs_ac1, -1.0, 1.0)
    out[o + 5] = park20 * is20
    lag = WINDOWS[W60]
    move = ctx[core.X_LC] - cs[slot(RING_P, KP, t, lag) + F_LC] if t >= lag else 0.0
    out[o + 6] = move * is60 * INV_SQRT_W60


@kernel
def volatility(
    ctx: np.ndarray, t: int, out: np.ndarray, o: int
) -> tuple[float, float, float, float]:
    """Members [0, 12): rv 5/10/20/60, then Parkinson, Garman–Klass, Rogers–Satchell,
    Yang–Zhang over 20 and 60, three batches of four roots. Returns (rv5, rv20, rv60,
    parkinson_20), which later members scale by."""
    rv = roots4(
        (
            varp(ctx, W5, F_R, F_R2),
            varp(ctx, W10, F_R, F_R2),
            varp(ctx, W20, F_R, F_R2),
            varp(ctx, W60, F_R, F_R2),
        )
    )
    hl = roots4(
        (
            mp(ctx, W20, F_RNG2) * INV_FOUR_LN2,
            mp(ctx, W60, F_RNG2) * INV_FOUR_LN2,
            mp(ctx, W20, F_GK),
            mp(ctx, W60, F_GK),
        )
    )
    rs = roots4(
        (
            mp(ctx, W20, F_RS),
            mp(ctx, W60, F_RS),
            yang_zhang_var(ctx, W20, t),
            yang_zhang_var(ctx, W60, t),
        )
    )
    for i in range(4):
        out[o + i], out[o + 4 + i], out[o + 8 + i] = rv[i], hl[i], rs[i]
    return rv[0], rv[2], rv[3], hl[0]


@kernel
def return_moments(
    ctx: np.ndarray,
    t: int,
    r: float,
    rv5: float,
    rv20: float,
    is20: float,
    is60: float,
    out: np.ndarray,
    o: int,
) -> None:
    """Members [12, 26): volatility ratios, skewness and kurtosis, autocorrelations,
    t-statistics and z-scores of r, all scaled by the windows' 1/std (is20, is60)."""
    iv20, iv60 = is20 * is20, is60 * is60
    m20, m60 = mp(ctx, W20, F_R), mp(ctx, W60, F_R)
    out[o] = rv5 * is60
    out[o + 1] = rv20 * is60
    o += 2
    out[o], out[o + 2] = moments(ctx, W20, m20, iv20, is20)
    out[o + 1], out[o + 3] = moments(ctx, W60, m60, iv60, is60)
    o += 4
    out[o] = autocorr(ctx, W20, F_RR1, m20, iv20)
    out[o + 1] = autocorr(ctx, W60, F_RR1, m60, iv60)
    out[o + 2] = autocorr(ctx, W60, F_RR2, m60, iv60)
    out[o + 3] = autocorr(ctx, W60, F_RR5, m60, iv60)
    o += 4
    # Σr / (std·√n) = mean·√n / std
    out[o] = m20 * SQRT_N[count(t, W20)] * is20
    out[o + 1] = m60 * SQRT_N[count(t, W60)] * is60
    out[o + 2] = r * is20
    out[o + 3] = r * is60


@kernel
def run_length(gs: np.ndarray, r: float) -> float:
    """Extends the signed run of same-sign returns by r (a zero return ends it) and returns
    it scaled by RUN_CAP, clipped to [-1, 1]."""
    run = gs[RUN]
    run = (run + 1.0 if run > 0.0 else 1.0) if r > 0.0 else (run - 1.0 if run < 0.0 else -1.0)
    gs[RUN] = run if r != 0.0 else 0.0
    return clip(gs[RUN] * INV_RUN_CAP, -1.0, 1.0)
