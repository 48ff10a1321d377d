"""CUSUM features [201-210]: the symmetric CUSUM filter (López de Prado, AFML §2.5.2.1) on
one-minute log returns, with a volatility-scaled threshold h = 3σ, σ² the bias-corrected EWMA
of r² known before the bar. S⁺ = max(0, S⁺ + r), S⁻ = min(0, S⁻ + r); a down event (checked
first, as in AFML) fires when S⁻ < -h, an up event when S⁺ > h, and the firing side resets."""

from __future__ import annotations

import math

import numpy as np

from features import core
from features.primitives import W60, Layout, advance_sums, count, kernel, slot, wsum
from features.spec import spec
from features.vectors import ratios4

GROUP = "CUSUM"
FIRST = 201
CUSUM_K = 3.0
H_FLOOR = 1e-9  # threshold while σ is still 0 (flat start): below any real tick's return
WARMUP = 20
SINCE_CAP = 240  # bars: "since" features saturate after four hours

SPECS = (
    spec("cusum_pos", WARMUP, "S⁺ / h", k=CUSUM_K, floor=H_FLOOR),
    spec("cusum_neg", WARMUP, "S⁻ / h", k=CUSUM_K, floor=H_FLOOR),
    spec("cusum_event", WARMUP, "+1 on an up event, -1 on a down event, else 0"),
    spec("cusum_since_up", WARMUP, "min(bars since the last up event, 240) / 240", cap=SINCE_CAP),
    spec(
        "cusum_since_down", WARMUP, "min(bars since the last down event, 240) / 240", cap=SINCE_CAP
    ),
    spec("cusum_since_event", WARMUP, "min(bars since the last event, 240) / 240", cap=SINCE_CAP),
    spec("cusum_up_rate_60", 59, "up events per bar over 60"),
    spec("cusum_down_rate_60", 59, "down events per bar over 60"),
    spec("cusum_last_dir", WARMUP, "direction of the last event (+1/-1), 0 before one"),
    spec("cusum_threshold", WARMUP, "h = max(3σ, 1e-9), σ = sqrt(EWMA r², λ = 0.94)"),
)

LAYOUT = Layout("cusum")
S = LAYOUT.add("s_pos_neg", 2)
LAST = LAYOUT.add("last_up_down_any_plus_one", 3)  # bar index + 1 of the last event, 0 = none
DIR = LAYOUT.add("last_direction")
RING_E, SUMS_E = LAYOUT.rolling("events", 2)
SIZE = LAYOUT.size
PAIR = (0, 0, 0, 0, 2)  # both fields summed over 60 bars: the only window read


@kernel
def threshold(ewma_var_before: float) -> float:
    return max(CUSUM_K * math.sqrt(ewma_var_before), H_FLOOR)


@kernel
def since(gs: np.ndarray, t: int, i: int) -> float:
    """Bars since the last event of kind i (up, down, any), capped."""
    return min(t + 1.0 - gs[LAST + i], SINCE_CAP)


@kernel
def update(gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    t = int(ctx[core.X_T])
    r = ctx[core.X_R]
    h = threshold(ctx[core.X_EVF_PREV])
    pos = max(0.0, gs[S] + r)
    neg = min(0.0, gs[S + 1] + r)
    event = 0.0
    if neg < -h:
        neg = 0.0
        event = -1.0
    elif pos > h:
        pos = 0.0
        event = 1.0
    gs[S], gs[S + 1] = pos, neg
    if event != 0.0:
        gs[LAST + (0 if event > 0.0 else 1)] = t + 1.0
        gs[LAST + 2] = t + 1.0
        gs[DIR] = event
    rec = slot(RING_E, 2, t, 0)
    gs[rec] = 1.0 if event > 0.0 else 0.0
    gs[rec + 1] = 1.0 if event < 0.0 else 0.0
    advance_sums(gs, RING_E, SUMS_E, 2, PAIR, t)
    o = FIRST
    # Divisions four at a time (vectors.ratios4): h, the cap and the bar count are > 0.
    cap, n = float(SINCE_CAP), float(count(t, W60))
    rel_pos, rel_neg, since_up, since_down = ratios4(
        (pos, neg, since(gs, t, 0), since(gs, t, 1)), (h, h, cap, cap)
    )
    since_any, up_share, down_share, _ = ratios4(
        (since(gs, t, 2), wsum(gs, SUMS_E, 2, W60, 0), wsum(gs, SUMS_E, 2, W60, 1), 0.0),
        (cap, n, n, 0.0),
    )
    out[o], out[o + 1], out[o + 2] = rel_pos, rel_neg, event
    out[o + 3], out[o + 4], out[o + 5] = since_up, since_down, since_any
    out[o + 6], out[o + 7] = up_share, down_share
    out[o + 8] = gs[DIR]
    out[o + 9] = h
