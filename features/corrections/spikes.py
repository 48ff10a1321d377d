"""Spike rule: a price far from the symbol's reference close, measured against the robust
spread of its recent log returns, is a spike candidate that later trades must confirm."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from features.bars import PRICE_FIELDS
from features.corrections.config import CorrectionConfig
from features.corrections.rules import CLOSE, HIGH, LOW, fmt

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample times this estimates its standard deviation


class Move(NamedTuple):
    """A suspicious price: its index (open, high, low, close), log move vs the reference close
    and robust z-score."""

    index: int
    move: float
    z: float


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def suspicious(
    prices: Sequence[int], ref: int, returns: Sequence[float], tick: int, config: CorrectionConfig
) -> tuple[Move, ...]:
    """Prices whose log move from `ref` reaches both `spike_min_move` and `spike_z` robust
    z-scores (rolling median/MAD of `returns`, floored at one tick so quiet markets with a zero
    MAD do not turn every tick into a spike)."""
    # Repaired prices have low <= open, close <= high: two comparisons clear the common case.
    below, above = config.spike_band
    if ref * below < prices[LOW] and prices[HIGH] < ref * above:
        return ()
    m = config.spike_min_move
    center = median(returns) if returns else 0.0
    spread = MAD_TO_SIGMA * median([abs(r - center) for r in returns]) if returns else 0.0
    # One tick floors the scale, but never above spike_min_move: a tick learned from few prices
    # (the gcd of a flat first bar's is the price) would otherwise ask a move of ten times the
    # price, and no spike would be one; a coarse real tick (corn's, oats') stays the floor.
    scale = max(spread, min(tick / ref, m), 1e-12)
    moves = []
    for index, price in enumerate(prices):
        move = math.log(price / ref)
        z = abs(move - center) / scale
        if abs(move) >= m and z >= config.spike_z:
            moves.append(Move(index, move, z))
    return tuple(moves)


def confirmed(
    moves: Sequence[Move], close: int, later: Sequence[int], ref: int, confirm: float
) -> bool:
    """Did trades after each suspicious price go at least `confirm` of the way from `ref`
    toward it? Evidence for the close is the next bar; for open, high and low it is also the
    bar's own close, which trades after them."""
    log_ref = math.log(ref)
    for index, move, _ in moves:
        evidence = list(later) if index == CLOSE else [*later, close]
        if not evidence or max((math.log(q) - log_ref) / move for q in evidence) < confirm:
            return False
    return True


def describe(moves: Sequence[Move], prices: Sequence[int], ref: int) -> str:
    return "; ".join(
        f"{PRICE_FIELDS[m.index]} {fmt(prices[m.index])} moved {math.expm1(m.move):+.2%} from "
        f"the reference close {fmt(ref)} (robust z {m.z:.0f})"
        for m in moves
    )
