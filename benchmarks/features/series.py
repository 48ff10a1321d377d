"""Many different real series from one real month, for the feature benchmark.

Symbol `s` of `n` is the 6EH4 month's own bars, transformed deterministically:

- rotated: it starts at bar `s * bars // n` of the month and wraps around, so at any minute
  the symbols are at different points of the month;
- its path rebuilt from the bars' own log returns: each bar's open, high, low and close
  relative to the bar's previous close (the first bar's: its open), multiplied by a scale in
  [0.5, 2) (a golden-ratio sequence over `s`; symbol 0's is 1) and, for odd `s`, negated
  (reflected: a bar's high and low swap roles), chained from the real price where the rotation
  starts;
- volume rotated with its bar; timestamps stay on the month's own minute grid, the same for
  every symbol, as a live feed delivers one bar per symbol per minute.

Every bar keeps a real bar's shape (the order of its open, high, low and close, its volume);
symbol 0 is the month itself, up to rounding.
"""

from __future__ import annotations

import numpy as np

from features.bars import read_bar_csv
from streams.ingest.convert import SIXE_CSV
from streams.settings import Settings

COLUMNS = ("ts_event", "open", "high", "low", "close", "volume")
PRICES = ("open", "high", "low", "close")
GOLDEN = (5**0.5 - 1) / 2


def month_series(symbols: int, minutes: int | None = None) -> dict[str, np.ndarray]:
    """The first `minutes` minutes (default: all) of `symbols` different series, each column a
    (minutes, symbols) C-contiguous array: row i = minute i of every symbol."""
    frame = read_bar_csv(Settings.from_env().data_dir / SIXE_CSV)
    return derived_series({c: frame[c].to_numpy() for c in COLUMNS}, symbols, minutes)


def derived_series(
    month: dict[str, np.ndarray], symbols: int, minutes: int | None = None
) -> dict[str, np.ndarray]:
    """`symbols` series from one month's columns (1-D), as the module docstring describes."""
    n = len(month["close"])
    rows = n if minutes is None else minutes
    s = np.arange(symbols)
    index = (np.arange(rows)[:, None] + (s * n // symbols)[None, :]) % n  # (rows, symbols)
    log_prev = np.log(np.concatenate([month["open"][:1], month["close"][:-1]]))
    factor = 2.0 ** (2.0 * ((s * GOLDEN + 0.5) % 1.0) - 1.0) * np.where(s % 2, -1.0, 1.0)
    moves = {f: ((np.log(month[f]) - log_prev)[index] * factor) for f in PRICES}
    reflected = factor < 0
    moves["high"], moves["low"] = (
        np.where(reflected, moves["low"], moves["high"]),
        np.where(reflected, moves["high"], moves["low"]),
    )
    # Every field of a bar is its previous level plus its own move, so the order of a bar's
    # open, high, low and close is kept exactly (adding one level and exp are monotone).
    level = np.cumsum(moves["close"], axis=0) + log_prev[index[0]]
    previous = np.vstack([log_prev[index[0]][None, :], level[:-1]])
    out = {f: np.ascontiguousarray(np.exp(previous + moves[f])) for f in PRICES}
    out["volume"] = np.ascontiguousarray(month["volume"][index])
    out["ts_event"] = np.ascontiguousarray(
        np.repeat(month["ts_event"][:rows, None], symbols, axis=1)
    )
    return out
