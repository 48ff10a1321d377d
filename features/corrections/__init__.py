"""Price corrections: every `bars.raw` message gets exactly one outcome.

Pure (no Faust, no Kafka): `correct(value, state, config, stats)` takes one message (orjson
bytes or a decoded dict) and the state of its symbol, updates the state in place and returns a
`Step`; the worker keeps each `SymbolState` as `to_bytes()` in its store. `correct_history` runs
the same code over a whole history (cleaning training data).

Outcomes: `clean` (unchanged), `corrected` (with `Change(rule, field, old, new)`s),
`duplicate` (dropped, counted) or `rejected` (a `Reason` and a human message). Rules, in order:

- oversized: key and value over `max_bar_bytes` (16 KiB) → rejected `oversized`, unparsed.
- malformed: not JSON, not an object, missing fields, wrong types (prices must be int64
  fixed-point, UNDEF_PRICE/null/NaN when undefined), ids out of range, an rtype that is not
  OHLCV, ts_event before 2000, after 2100, off its interval grid, or more than `max_future_s`
  ahead of `now_ns`, a symbol over 64 or a source over 256 characters; a symbol that changes
  its rtype → rejected `malformed`. Fields other than the `bars.raw` ones are dropped.
- duplicates on (symbol, ts_event, rtype), remembered for the last `recent_keys` accepted bars:
  identical content → `duplicate`; other prices or volume → the first is kept, the second
  rejected `conflicting_duplicate`.
- late: ts_event at or before the symbol's last accepted (or held) bar → rejected `late`.
- undefined prices: all four undefined → rejected `undefined_price`; otherwise repaired by the
  narrowest consistent envelope: high = max and low = min of the defined prices, open or close
  only when that envelope pins them (high == low); else rejected `undefined_price`.
- zero or negative prices → rejected `nonpositive_price`, unless the symbol is listed in
  `allow_negative` (or is a '-' spread); for those the scale and spike rules are off.
- scale errors: a price a power of ten (10^1..10^9, within `scale_tolerance` decades) off the
  symbol's last accepted close (the bar's median before the first one) is rescaled. A price
  divided by 10^k lost up to 10^k units, so it is restored only if 10^k <= the symbol's tick
  (learned as the gcd of accepted prices; one coarser than 1 % of the price is the gcd of too
  few prices, no tick): always within one tick; otherwise `scale_error`.
- envelope: high < max(open, close), low > min(open, close) or high < low → high/low become
  max/min of the four prices (the narrowest consistent envelope; an inverted pair is swapped).
- spikes: a price whose log move from the last accepted close is at least `spike_min_move`
  (0.5 %) and `spike_z` (10) robust z-scores (median/MAD of the last `spike_window` close-to-
  close log returns, floored at one tick, or at `spike_min_move` if a tick learned from few
  prices is coarser) is a candidate. It stands if later trades went at least `spike_confirm`
  (1/4) of the way from the reference toward it: for an open, high or low the bar's own close
  counts; for a close only the next bar does. A real fast market moves and
  stays (the next bar trades near the new level: confirmed, accepted); a bad print reverts (the
  next bar trades back at the old level: rejected `spike`). A spike lasting two or more bars is
  indistinguishable from a real move and is accepted.

Latency of the spike rule: a candidate that its own close does not confirm is held in the
state (`SymbolState.held`, serialized with it) and released, accepted or rejected, by the next
bar of the same symbol (its outcome comes first in that call's `Step`), or by `flush()` once an
END_OF_INTERVAL record is `hold_timeout_s` past it (unconfirmed: rejected), or at the end of a
history. A candidate rejected at its timeout is evidence for the next candidate, as a next bar
would have been: in a thin market, whose next bar comes after the timeout, a real move is
accepted from its second bar on instead of being rejected bar after bar. Only candidates wait
(none of the real 6EH4 month's bars); every other bar is decided in its own call.

Gaps (ohlcv-1m): when an accepted bar follows the previous one by more than a minute, the
missing minutes are reported (`Gap`) and, with `fill_gaps` and at most `max_fill` missing
(longer gaps are session breaks), filled with synthetic bars (`status: "synthetic"`,
O=H=L=C=previous close, volume 0) placed before it in `Step.clean`. Synthetic bars answer no
input, so they are no outcome and never enter the statistics of real bars. A gap over an outage
(`outage()`: live ingest lost those minutes) is a session break too: an outage is not a quiet
market.

Rolls: a bar whose `raw_symbol` is not the last bar's (a symbol keyed by its continuous symbol
changed contract) rolls the state first: its price levels are multiplied by the ratio of the new
contract's price to the old one's (announced by a ROLL record, `expect_roll()`; else the bar's
open over the last close), so no return, spike test or gap fill sees the calendar spread; a
held candidate is decided by the bar's prices brought back to the old contract (`Step.roll`).
"""

from features.corrections.config import CorrectionConfig, is_calendar_spread
from features.corrections.history import (
    History,
    bars_from_frame,
    correct_history,
    correct_steps,
)
from features.corrections.outcome import (
    SYNTHETIC,
    Change,
    CorrectionStats,
    Gap,
    Outcome,
    Reason,
    Roll,
    Rule,
    Status,
    Step,
)
from features.corrections.state import SymbolState
from features.corrections.step import correct, expect_roll, flush, outage, take_control

__all__ = [
    "SYNTHETIC",
    "Change",
    "CorrectionConfig",
    "CorrectionStats",
    "Gap",
    "History",
    "Outcome",
    "Reason",
    "Roll",
    "Rule",
    "Status",
    "Step",
    "SymbolState",
    "bars_from_frame",
    "correct",
    "correct_history",
    "correct_steps",
    "expect_roll",
    "flush",
    "is_calendar_spread",
    "outage",
    "take_control",
]
