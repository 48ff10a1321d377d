"""Basic bar features [0-14]: the bar itself in scale-free form (log differences, ratios)."""

from __future__ import annotations

import numpy as np

from features import core
from features.core import F_BOP, F_CLV, KP, RING_P
from features.primitives import Layout, kernel, sign, slot
from features.spec import spec

GROUP = "basic bar"
FIRST = 0
SPECS = (
    spec("ret_1", 1, "ln(C / C[-1])"),
    spec("ret_oc", 0, "ln(C / O)"),
    spec("range_hl", 0, "ln(H / L)"),
    spec("upper_wick", 0, "ln(H / max(O, C))"),
    spec("lower_wick", 0, "ln(min(O, C) / L)"),
    spec("gap_open", 1, "ln(O / C[-1])"),
    spec("clv", 0, "((C - L) - (H - C)) / (H - L); 0 if H = L"),
    spec("body_ratio", 0, "|C - O| / (H - L); 0 if H = L"),
    spec("log_volume", 0, "ln(1 + V)"),
    spec("dlog_volume", 1, "ln(1 + V) - ln(1 + V of the previous real bar); 0 on synthetic bars"),
    spec("typical_dev", 0, "((H + L + C) / 3) / C - 1"),
    spec("median_dev", 0, "((H + L) / 2) / C - 1"),
    spec("bar_direction", 0, "sign(C - O)"),
    spec("synthetic", 0, "1 if the bar is a synthetic gap fill (no trades), else 0"),
    spec("ret_sign", 1, "sign(ln(C / C[-1]))"),
)

LAYOUT = Layout("basic")
PREV_LV = LAYOUT.add("prev_log_volume")  # of the last real bar: gap fills trade nothing
HAS_PREV = LAYOUT.add("has_prev_real_bar")
SIZE = LAYOUT.size


@kernel
def update(cs: np.ndarray, gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    o, h, lo_, c = ctx[core.X_O], ctx[core.X_H], ctx[core.X_L], ctx[core.X_C]
    lo, lh, ll, lc = ctx[core.X_LO], ctx[core.X_LH], ctx[core.X_LL], ctx[core.X_LC]
    r = ctx[core.X_R]
    rec = slot(RING_P, KP, int(ctx[core.X_T]), 0)
    lv = ctx[core.X_LV]
    out[0] = r
    out[1] = lc - lo
    out[2] = lh - ll
    out[3] = lh - max(lo, lc)
    out[4] = min(lo, lc) - ll
    out[5] = lo - ctx[core.X_PLC]
    out[6] = cs[rec + F_CLV]
    out[7] = abs(cs[rec + F_BOP])
    out[8] = lv
    syn = ctx[core.X_SYN] > 0.0
    out[9] = lv - gs[PREV_LV] if gs[HAS_PREV] > 0.0 and not syn else 0.0
    inv_c = 1.0 / c
    out[10] = (h + lo_ + c) * (inv_c / 3.0) - 1.0
    out[11] = (h + lo_) * (0.5 * inv_c) - 1.0
    out[12] = sign(c - o)
    out[13] = ctx[core.X_SYN]
    out[14] = sign(r)
    if not syn:
        gs[PREV_LV] = lv
        gs[HAS_PREV] = 1.0
