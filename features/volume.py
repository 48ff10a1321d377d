"""Volume features [90-104] from the real-bar volume block (see flow): relative volume, OBV,
VWAP deviations, MFI, Chaikin money flow and oscillator, force index, return/volume coupling.
On synthetic bars the group repeats the last real bar's values."""

from __future__ import annotations

import math

import numpy as np

from features import core, flow
from features.flow import (
    KV,
    SUMS_V,
    V_CLVV,
    V_LV,
    V_LV2,
    V_MFN,
    V_MFP,
    V_NVR,
    V_R,
    V_R2,
    V_RLV,
    V_SV,
    V_TPV,
    V_UPV,
    V_V,
    mv,
)
from features.primitives import VAR_FLOOR, W5, W14, W20, W60, Layout, kernel, sqrt0, wsum
from features.spec import spec
from features.vectors import ratios4

GROUP = "volume"
FIRST = 90
N = 15

SPECS = (
    spec("vol_ratio_20", 19, "V / mean V over 20 real bars; 0 if that mean is 0"),
    spec("vol_ratio_60", 59, "V / mean V over 60 real bars"),
    spec("vol_z_20", 19, "z-score of ln(1+V) over 20 real bars; 0 if flat"),
    spec("obv_flow_20", 20, "Σ sign(r)·V / ΣV over 20 real bars (OBV change per unit volume)"),
    spec("vwap_dev_20", 19, "C / VWAP20 - 1, VWAP20 = Σ TP·V / ΣV, TP = (H + L + C) / 3"),
    spec("vwap_dev_session", 0, "C / session VWAP - 1 (VWAP since the Globex open)"),
    spec("mfi_14", 14, "100 · Σ positive money flow / Σ money flow over 14; 50 if none"),
    spec("cmf_20", 19, "Σ CLV·V / ΣV over 20 (Chaikin money flow)"),
    spec("chaikin_osc", 19, "(EMA3(ADL) - EMA10(ADL)) / mean V20, ADL = Σ CLV·V"),
    spec("force_13", 20, "EMA13(r · V) / mean V20"),
    spec("vol_trend_5_20", 19, "mean V5 / mean V20 - 1"),
    spec("up_volume_share_20", 20, "Σ V over up bars / ΣV over 20"),
    spec("ret_volume_corr_20", 20, "correlation of r and ln(1+V) over 20 real bars"),
    spec("nvi_ret_20", 20, "Σ r over bars whose volume fell, last 20 real bars"),
    spec("lv_slope_5_20", 19, "mean ln(1+V) over 5 - over 20"),
)

LAYOUT = Layout("volume")
HELD = LAYOUT.add("last_real_values", N)
SIZE = LAYOUT.size


@kernel
def update(fs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray, real: bool) -> None:
    if real:
        compute(fs, ctx, gs[HELD : HELD + N])
    for i in range(N):
        out[FIRST + i] = gs[HELD + i]


@kernel
def compute(fs: np.ndarray, ctx: np.ndarray, res: np.ndarray) -> None:
    # One reciprocal per denominator (ΣV and mean V over 20), shared by the features over it.
    c, v = ctx[core.X_C], ctx[core.X_V]
    mv20 = mv(ctx, W20, V_V)
    mv60 = mv(ctx, W60, V_V)
    # Divisions four at a time (vectors.ratios4), each lane guarded as its scalar form.
    sv20 = wsum(fs, SUMS_V, KV, W20, V_V)
    m = mv(ctx, W20, V_LV)
    var = mv(ctx, W20, V_LV2) - m * m
    # C / VWAP = C·ΣV / ΣTP·V, positive whenever any volume traded (prices are > 0)
    tpv20 = wsum(fs, SUMS_V, KV, W20, V_TPV)
    vwap = tpv20 > 0.0 and sv20 > 0.0
    s_tpv, s_v = fs[flow.S_TPV], fs[flow.S_V]
    session = s_tpv > 0.0 and s_v > 0.0
    pos = wsum(fs, SUMS_V, KV, W14, V_MFP)
    flow_total = pos + wsum(fs, SUMS_V, KV, W14, V_MFN)
    inv_sv20, inv_mv20, rel60, vwap_rel = ratios4(
        (1.0, 1.0, v, c * sv20), (sv20, mv20, mv60, tpv20 if vwap else 0.0)
    )
    session_rel, mfi, lv_z, _ = ratios4(
        (c * s_v, 100.0 * pos, ctx[core.X_LV] - m, 0.0),
        (s_tpv if session else 0.0, flow_total if flow_total > 0.0 else 0.0, sqrt0(var), 0.0),
    )
    res[0] = v * inv_mv20
    res[1] = rel60
    res[2] = lv_z
    res[3] = wsum(fs, SUMS_V, KV, W20, V_SV) * inv_sv20
    res[4] = vwap_rel - 1.0 if vwap else 0.0
    res[5] = session_rel - 1.0 if session else 0.0
    res[6] = mfi if flow_total > 0.0 else 50.0
    res[7] = wsum(fs, SUMS_V, KV, W20, V_CLVV) * inv_sv20
    res[8] = (fs[flow.ADL_E] - fs[flow.ADL_E + 1]) * inv_mv20
    res[9] = fs[flow.FORCE_E] * inv_mv20
    res[10] = mv(ctx, W5, V_V) * inv_mv20 - 1.0 if mv20 > 0.0 else 0.0
    res[11] = wsum(fs, SUMS_V, KV, W20, V_UPV) * inv_sv20
    res[12] = correlation(ctx, V_R, V_R2, V_LV, V_LV2, V_RLV)
    res[13] = wsum(fs, SUMS_V, KV, W20, V_NVR)
    res[14] = mv(ctx, W5, V_LV) - m


@kernel
def correlation(ctx: np.ndarray, fx: int, fxx: int, fy: int, fyy: int, fxy: int) -> float:
    """Pearson correlation over 20 real bars from window sums; 0 if either side is flat."""
    mx = mv(ctx, W20, fx)
    my = mv(ctx, W20, fy)
    vx = mv(ctx, W20, fxx) - mx * mx
    vy = mv(ctx, W20, fyy) - my * my
    if vx <= VAR_FLOOR or vy <= VAR_FLOOR:
        return 0.0
    cov = mv(ctx, W20, fxy) - mx * my
    return max(min(cov / math.sqrt(vx * vy), 1.0), -1.0)
