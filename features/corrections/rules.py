"""Price repairs of one bar: undefined prices, zero/negative prices, fixed-point scale errors and
the OHLC envelope. Pure functions of the bar, the symbol's reference close and its tick grid."""

from __future__ import annotations

import math
from dataclasses import dataclass

from features.bars import PRICE_FIELDS, PRICE_SCALE
from features.corrections.outcome import Change, Reason, Rule

OPEN, HIGH, LOW, CLOSE = range(4)
MAX_DECADES = 9  # DBN prices have 9 decimals: a scale slip cannot exceed 10^9
BAND = 3  # prices within a factor 3 of the anchor cannot be a power-of-ten slip
# A price grid coarser than this fraction of the price is no tick but the gcd of too few prices
# (a flat first bar's is its price): a restore checked against it would be checked against none.
MAX_TICK = 0.01


@dataclass(frozen=True, slots=True)
class Rejection:
    reason: Reason
    message: str


def fmt(price: int) -> str:
    """A fixed-point price for humans."""
    return f"{price * PRICE_SCALE:.10g}"


def repair(
    prices: list[int | None], ref: int, tick: int, allow_negative: bool, tolerance: float
) -> tuple[list[int], list[Change]] | Rejection:
    """Repaired open, high, low, close and what changed, or why the bar cannot be repaired.

    `ref` is the symbol's last accepted close (0 before the first one), `tick` its learned
    price grid (0 when unknown).
    """
    o, h, low, c = prices
    if (
        o is not None
        and h is not None
        and low is not None
        and c is not None
        and h >= o
        and h >= c
        and low <= o
        and low <= c
    ):
        if allow_negative:
            return prices, []  # type: ignore[return-value]  # all defined: list[int]
        # Within a factor BAND of the anchor (hence positive): no scale slip possible.
        anchor = ref if ref > 0 else low
        if anchor > 0 and anchor < BAND * low and h < BAND * anchor:
            return prices, []  # type: ignore[return-value]
    return _repair_slow(prices, ref, tick, allow_negative, tolerance)


def _repair_slow(
    prices: list[int | None], ref: int, tick: int, allow_negative: bool, tolerance: float
) -> tuple[list[int], list[Change]] | Rejection:
    defined = [i for i, p in enumerate(prices) if p is not None]
    if not defined:
        return Rejection(Reason.UNDEFINED_PRICE, "all four prices are undefined")
    fixed = list(prices)
    changes: list[Change] = []
    if not allow_negative:
        nonpositive = [
            f"{PRICE_FIELDS[i]}={fmt(p)}" for i, p in enumerate(prices) if p is not None and p <= 0
        ]
        if nonpositive:
            return Rejection(
                Reason.NONPOSITIVE_PRICE,
                f"{', '.join(nonpositive)} at or below zero; if this symbol trades there "
                "(a spread), list it in CorrectionConfig.allow_negative",
            )
        rejection = _rescale(fixed, defined, ref, tick, tolerance, changes)
        if rejection is not None:
            return rejection
    values = [p for p in fixed if p is not None]
    top = fixed[HIGH] if fixed[HIGH] is not None else max(values)
    bottom = fixed[LOW] if fixed[LOW] is not None else min(values)
    for i, derived in ((HIGH, top), (LOW, bottom), (OPEN, None), (CLOSE, None)):
        if fixed[i] is not None:
            continue
        if derived is None:
            if top != bottom:
                return Rejection(
                    Reason.UNDEFINED_PRICE,
                    f"{PRICE_FIELDS[i]} is undefined and high {fmt(top)} != low {fmt(bottom)}: "
                    "it cannot be derived from the bar's own fields",
                )
            derived = top
        fixed[i] = derived
        changes.append(Change(Rule.UNDEFINED_PRICE, PRICE_FIELDS[i], None, derived))
    full: list[int] = fixed  # type: ignore[assignment]  # every None was filled above
    top, bottom = max(full), min(full)
    for i, edge in ((HIGH, top), (LOW, bottom)):
        if full[i] != edge:
            changes.append(Change(Rule.ENVELOPE, PRICE_FIELDS[i], full[i], edge))
            full[i] = edge
    return full, changes


def _rescale(
    fixed: list[int | None],
    defined: list[int],
    ref: int,
    tick: int,
    tolerance: float,
    changes: list[Change],
) -> Rejection | None:
    """Undo power-of-ten slips (10^1..10^9 either way) against the reference, in place."""
    values = sorted(fixed[i] for i in defined)  # type: ignore[type-var]
    anchor = ref if ref > 0 else values[len(values) // 2]
    for i in defined:
        price: int = fixed[i]  # type: ignore[assignment]
        if anchor < BAND * price < BAND * BAND * anchor:
            continue
        decades = math.log10(price / anchor)
        k = round(decades)
        if k == 0 or abs(k) > MAX_DECADES or abs(decades - k) > tolerance:
            continue  # not a scale slip: the spike rule judges it
        if k > 0:
            new = (price + 10**k // 2) // 10**k
        else:
            new = price * 10**-k
            # A price divided by 10^k lost up to 10^k units: within one tick only if 10^k <= tick.
            others = math.gcd(anchor, *(p for p in fixed if p is not None and p != price))
            grid = next((g for g in (tick, others) if 0 < g <= MAX_TICK * anchor), 0)
            if 10**-k > grid:
                return Rejection(
                    Reason.SCALE_ERROR,
                    f"{PRICE_FIELDS[i]} {fmt(price)} is 10^{k} times the reference {fmt(anchor)}"
                    f" and lost digits below one tick ({fmt(grid)}): cannot restore it",
                )
        fixed[i] = new
        changes.append(Change(Rule.SCALE_ERROR, PRICE_FIELDS[i], price, new))
    return None
