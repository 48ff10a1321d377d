"""Thresholds and switches of the corrections rules (one frozen dataclass)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# Two or more futures contracts (root, month code, year) joined by '-': a CME calendar spread's
# raw symbol (ESH4-ESM4). BTC-PERP has a '-' and is no spread.
_CONTRACT = r"[A-Z0-9]{1,6}[FGHJKMNQUVXZ]\d{1,2}"
CALENDAR_SPREAD = re.compile(rf"{_CONTRACT}(?:-{_CONTRACT})+")


def is_calendar_spread(symbol: str) -> bool:
    """Whether `symbol` is a calendar spread's raw symbol: its price is a difference of two
    contracts', at or below zero at times."""
    return CALENDAR_SPREAD.fullmatch(symbol) is not None


@dataclass(frozen=True, slots=True)
class CorrectionConfig:
    """Every knob of the rules; the defaults are the ones the tests measure on real data.

    fill_gaps: emit flagged synthetic bars for missing minutes (ohlcv-1m).
    max_fill: longest gap (missing minutes) that is filled; longer ones are session breaks
        (the daily CME maintenance hour, weekends): reported, never filled.
    allow_negative: symbols whose prices may be zero or negative (rule nonpositive_price off;
        the scale and spike rules, defined on log prices, are off for them too).
    spreads_allow_negative: treat CME calendar spreads (`is_calendar_spread`) as listed.
    scale_tolerance: how far (in decades) a price may sit from an exact power of ten of the
        reference and still be taken for a fixed-point scale error.
    spike_z: robust z-score (vs the rolling median/MAD of log returns) a move must reach.
    spike_min_move: absolute log move a price must reach too (> 0), so quiet-market MADs of
        one tick do not flag ordinary news bars.
    spike_confirm: fraction of a suspicious move that later trades must retrace toward the
        suspicious price for the market to confirm it.
    spike_window: accepted close-to-close log returns kept for the robust statistics.
    hold_timeout_s: a held spike candidate with no later bar is decided (unconfirmed) once the
        stream is this far past it (`flush(until_ts=...)`).
    recent_keys: accepted (ts_event, rtype) keys remembered per symbol to tell duplicates
        (identical or conflicting) from late bars; older re-sends are rejected as late. Each
        key adds ~45 bytes to the serialized state.
    max_future_s: with `now_ns` given, a ts_event further than this in the future is malformed.
    max_bar_bytes: a message whose key and value together exceed this is rejected `oversized`
        before it is parsed (a real bar is ~250 bytes): it would otherwise sit in the symbol's
        state as a held spike candidate, and its dead letter is bounded anyway.
    """

    fill_gaps: bool = True
    max_fill: int = 30
    allow_negative: frozenset[str] = frozenset()
    spreads_allow_negative: bool = True
    scale_tolerance: float = 0.15
    spike_z: float = 10.0
    spike_min_move: float = 0.005
    spike_confirm: float = 0.25
    spike_window: int = 60
    hold_timeout_s: float = 120.0
    recent_keys: int = 64
    max_future_s: float = 86_400.0
    max_bar_bytes: int = 16_384
    # Derived in __post_init__, since the rules read them for every bar. spike_band: the
    # factors of the reference close within which a price moved less than spike_min_move.
    hold_timeout_ns: int = field(init=False, repr=False, compare=False)
    max_future_ns: int = field(init=False, repr=False, compare=False)
    spike_band: tuple[float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        checks = {
            "max_fill": self.max_fill >= 0,
            "scale_tolerance": 0.0 < self.scale_tolerance < 0.5,
            "spike_z": self.spike_z > 0.0,
            "spike_min_move": self.spike_min_move > 0.0,  # a move of 0 is no move to confirm
            "spike_confirm": 0.0 < self.spike_confirm <= 1.0,
            "spike_window": self.spike_window >= 2,
            "hold_timeout_s": self.hold_timeout_s >= 0.0,
            "recent_keys": self.recent_keys >= 1,
            "max_future_s": self.max_future_s >= 0.0,
            "max_bar_bytes": self.max_bar_bytes >= 256,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"CorrectionConfig: invalid {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)}"
                "; see the CorrectionConfig docstring for the allowed ranges"
            )
        if isinstance(self.allow_negative, str):
            raise ValueError(
                f"CorrectionConfig.allow_negative must be a set of symbols, got the string "
                f"{self.allow_negative!r}; write frozenset({{{self.allow_negative!r}}})"
            )
        object.__setattr__(self, "allow_negative", frozenset(self.allow_negative))
        object.__setattr__(self, "hold_timeout_ns", round(self.hold_timeout_s * 1e9))
        object.__setattr__(self, "max_future_ns", round(self.max_future_s * 1e9))
        band = (math.exp(-self.spike_min_move), math.exp(self.spike_min_move))
        object.__setattr__(self, "spike_band", band)

    def allows_negative(self, symbol: str) -> bool:
        listed = symbol in self.allow_negative
        return listed or (self.spreads_allow_negative and is_calendar_spread(symbol))
