"""Regime transition probabilities [216-220]: a 3-state Markov chain of bar returns.

Each bar is down, flat or up: flat when |r| <= 0.5σ (σ² = bias-corrected EWMA of r² before the
bar). Transition counts decay by λ = 0.98 per bar (half-life ≈ 34 bars) before the latest
transition is added, and P[i][j] = (N[i][j] + 0.1) / (Σ_j N[i][j] + 0.3) (additive prior, so a
state never seen reads uniform instead of 0/0)."""

from __future__ import annotations

import math

import numpy as np

from features import core
from features.primitives import Layout, kernel
from features.spec import spec
from features.vectors import ratios4

GROUP = "regime transition probabilities"
FIRST = 216
FLAT_K = 0.5
DECAY = 0.98
PRIOR = 0.1
DOWN, FLAT, UP = 0, 1, 2
WARMUP = 20
LN3 = math.log(3.0)

SPECS = (
    spec(
        "p_stay",
        WARMUP,
        "P[s][s]: probability the current state persists",
        flat_k=FLAT_K,
        decay=DECAY,
        prior=PRIOR,
    ),
    spec("p_up_next", WARMUP, "P[s][up]", flat_k=FLAT_K, decay=DECAY, prior=PRIOR),
    spec("p_down_next", WARMUP, "P[s][down]", flat_k=FLAT_K, decay=DECAY, prior=PRIOR),
    spec(
        "row_entropy",
        WARMUP,
        "-Σ_j P[s][j] ln P[s][j] / ln 3",
        flat_k=FLAT_K,
        decay=DECAY,
        prior=PRIOR,
    ),
    spec(
        "p_stay_mean",
        WARMUP,
        "(P[down][down] + P[flat][flat] + P[up][up]) / 3",
        flat_k=FLAT_K,
        decay=DECAY,
        prior=PRIOR,
    ),
)

LAYOUT = Layout("regime")
COUNTS = LAYOUT.add("decayed_counts", 9)
STATE = LAYOUT.add("last_state")
SIZE = LAYOUT.size


@kernel
def classify(r: float, ewma_var_before: float) -> int:
    if abs(r) <= FLAT_K * math.sqrt(ewma_var_before):
        return FLAT
    return UP if r > 0.0 else DOWN


@kernel
def count(gs: np.ndarray, i: int, j: int) -> float:
    """N[i][j] + PRIOR: P[i][j] is this over its row's total (see row_total)."""
    return gs[COUNTS + 3 * i + j] + PRIOR


@kernel
def row_total(gs: np.ndarray, i: int) -> float:
    return gs[COUNTS + 3 * i] + gs[COUNTS + 3 * i + 1] + gs[COUNTS + 3 * i + 2] + 3.0 * PRIOR


@kernel
def update(gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    t = int(ctx[core.X_T])
    s = classify(ctx[core.X_R], ctx[core.X_EVF_PREV])
    if t > 0:
        for k in range(9):
            gs[COUNTS + k] *= DECAY
        gs[COUNTS + 3 * int(gs[STATE]) + s] += 1.0
    gs[STATE] = s
    o = FIRST
    # Divisions four at a time (vectors.ratios4): every row total is at least 3·PRIOR.
    rows = (row_total(gs, DOWN), row_total(gs, FLAT), row_total(gs, UP))
    row = rows[s]
    p0, p1, p2, stay0 = ratios4(
        (count(gs, s, DOWN), count(gs, s, FLAT), count(gs, s, UP), count(gs, DOWN, DOWN)),
        (row, row, row, rows[0]),
    )
    stay1, stay2, _, _ = ratios4(
        (count(gs, FLAT, FLAT), count(gs, UP, UP), 0.0, 0.0), (rows[1], rows[2], 0.0, 0.0)
    )
    out[o] = (p0, p1, p2)[s]
    out[o + 1] = p2
    out[o + 2] = p0
    out[o + 3] = -(p0 * math.log(p0) + p1 * math.log(p1) + p2 * math.log(p2)) / LN3
    out[o + 4] = (stay0 + stay1 + stay2) / 3.0
