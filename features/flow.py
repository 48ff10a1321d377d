"""The volume rolling block: one record per REAL bar (ring indexed by the real-bar count).

Synthetic gap-fill bars carry no trades, so they never enter this block: every volume-based
feature is a function of the real bars alone, and on a synthetic bar the groups repeat the
values of the last real bar. Inserting gap fills therefore cannot move any volume feature.
"""

from __future__ import annotations

import math

import numpy as np

from features import core
from features.primitives import N_WINDOWS, Layout, advance_means, ema_step, kernel, rare, slot
from features.vectors import ratios4, whole_vectors

EWMA_FAST = core.EWMA_FAST

# Window w sums the first NF[w] fields, rounded up to whole vectors (W5, W10: v, lv; W14: + money
# flows; W60: up to rsg; W20: all).
FIELDS = (
    "v", "lv", "mfp", "mfn", "lv2", "r", "ar", "bvc", "sg", "sg2", "rsg",
    "tpv", "sv", "clvv", "upv", "frc", "r2", "rlv", "nvr", "rng",
)  # fmt: skip
(V_V, V_LV, V_MFP, V_MFN, V_LV2, V_R, V_AR, V_BVC, V_SG, V_SG2, V_RSG,
 V_TPV, V_SV, V_CLVV, V_UPV, V_FRC, V_R2, V_RLV, V_NVR, V_RNG) = range(len(FIELDS))  # fmt: skip
KV = len(FIELDS)
NF = whole_vectors(V_LV + 1, V_LV + 1, V_MFN + 1, KV, V_RSG + 1)
XV = core.XM + N_WINDOWS * core.KP  # ctx[XV + w*KV + f]: mean of volume field f (see mv)
N_CTX = XV + N_WINDOWS * KV  # ctx's size: shared scalars, then price and volume means
ADL_FAST, ADL_SLOW, FORCE_PERIOD = 3, 10, 13
INV_SQRT2 = 1.0 / math.sqrt(2.0)

LAYOUT = Layout("flow")
NV = LAYOUT.add("real_bars")
PLC, PTP, PV = LAYOUT.add("prev_lnC"), LAYOUT.add("prev_typical"), LAYOUT.add("prev_volume")
EV = LAYOUT.add("ewma_var_real_returns", 2)  # (sum, weight), see core.ewma_fold
SESSION, S_TPV, S_V = LAYOUT.add("session"), LAYOUT.add("session_tpv"), LAYOUT.add("session_v")
ADL, ADL_E, FORCE_E = LAYOUT.add("adl"), LAYOUT.add("adl_emas", 2), LAYOUT.add("force_ema")
RING_V, SUMS_V = LAYOUT.rolling("volume", KV)
SIZE = LAYOUT.size


@kernel
def norm_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z * INV_SQRT2))


@kernel
def mv(ctx: np.ndarray, w: int, f: int) -> float:
    """Mean of volume field f over window w at this real bar (valid on real bars only)."""
    return ctx[XV + w * KV + f]


@kernel
def update(fs: np.ndarray, ctx: np.ndarray) -> None:
    """Record one real bar: its record in the ring, the session and flow sums; `roll` then
    folds the record into the window sums."""
    tv = int(fs[NV])
    h, lo_, c, v = ctx[core.X_H], ctx[core.X_L], ctx[core.X_C], ctx[core.X_V]
    lc = ctx[core.X_LC]
    first = tv == 0
    r = 0.0 if first else lc - fs[PLC]
    lv = ctx[core.X_LV]
    # Bulk volume classification: the buy share of V is Φ(r / σ), σ known before this bar.
    sd = 0.0 if first else math.sqrt(core.ewma_var(fs, EV, r, EWMA_FAST))
    span = h - lo_
    # Three divisions in one (vectors.ratios4). The typical price is divided by 3, not
    # multiplied by 1/3: MFI splits on exact ties between successive TPs.
    tp, z, clv, _ = ratios4(
        (h + lo_ + c, r, (c - lo_) - (h - c), 0.0), (3.0, sd, span if span > 0.0 else 0.0, 0.0)
    )
    bvc = v * (2.0 * norm_cdf(z) - 1.0) if sd > 0.0 else 0.0
    sg = (1.0 if r > 0.0 else -1.0 if r < 0.0 else 0.0) * lv

    rec = slot(RING_V, KV, tv, 0)
    fs[rec + V_V], fs[rec + V_LV], fs[rec + V_LV2] = v, lv, lv * lv
    fs[rec + V_TPV] = tp * v
    fs[rec + V_SV] = v if r > 0.0 else -v if r < 0.0 else 0.0
    fs[rec + V_CLVV] = clv * v
    fs[rec + V_UPV] = v if r > 0.0 else 0.0
    fs[rec + V_MFP] = tp * v if not first and tp > fs[PTP] else 0.0
    fs[rec + V_MFN] = tp * v if not first and tp < fs[PTP] else 0.0
    fs[rec + V_FRC] = r * v
    fs[rec + V_R], fs[rec + V_R2], fs[rec + V_RLV] = r, r * r, r * lv
    fs[rec + V_BVC] = bvc
    fs[rec + V_SG], fs[rec + V_SG2], fs[rec + V_RSG] = sg, sg * sg, r * sg
    fs[rec + V_AR] = abs(r)
    fs[rec + V_NVR] = r if not first and v < fs[PV] else 0.0
    fs[rec + V_RNG] = ctx[core.X_LH] - ctx[core.X_LL]

    session = ctx[core.X_SESSION]
    if rare(first or session != fs[SESSION]):
        fs[SESSION], fs[S_TPV], fs[S_V] = session, 0.0, 0.0
    fs[S_TPV] += tp * v
    fs[S_V] += v
    fs[ADL] += clv * v
    if rare(first):
        fs[ADL_E], fs[ADL_E + 1], fs[FORCE_E] = fs[ADL], fs[ADL], r * v
    else:
        fs[ADL_E] = ema_step(fs[ADL_E], fs[ADL], 2.0 / (ADL_FAST + 1))
        fs[ADL_E + 1] = ema_step(fs[ADL_E + 1], fs[ADL], 2.0 / (ADL_SLOW + 1))
        fs[FORCE_E] = ema_step(fs[FORCE_E], r * v, 2.0 / (FORCE_PERIOD + 1))
    fs[PLC], fs[PTP], fs[PV] = lc, tp, v
    fs[NV] = tv + 1


@kernel
def roll(fs: np.ndarray, ctx: np.ndarray) -> None:
    """The window sums and means with the real bar `update` recorded. The engine runs a few
    groups in between, so that the record's scalar stores reach the cache before the sums'
    vector loads read them back (a load spanning pending stores waits for them)."""
    advance_means(fs, RING_V, SUMS_V, KV, NF, int(fs[NV]) - 1, ctx, XV)
