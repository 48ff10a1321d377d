"""Continuous symbols and rolls at ingest: which symbol a bar is keyed by, and when the contract
behind a continuous symbol changes.

A continuous symbol (`ES.c.0`) names one contract at a time: Databento maps it in a session's
SymbolMappingMsg records (a new one at each roll) or a historical file's metadata. With
`BARCAST_FOLLOW=lead` ingest makes one itself for each product of a parent subscription,
`ROOT.v.0`: the contract that traded the most on the previous trading day (on the first day
ingest sees, the most so far), the other contracts' bars skipped. A contract that has not traded
today while another of its product has traded `GONE_AFTER_BARS` bars is passed over (expired,
most likely: else the product would go unpublished for the day): the lead is the next by the
day before's volume, among those that traded today.

When the contract behind a continuous symbol changes, that is a roll: a `roll` control record,
keyed by the continuous symbol so that it precedes the new contract's first bar on its
partition, carries the ratio of the new contract's price to the old one's. Following the lead,
both contracts trade: the ratio is of the new lead's first close and the old one's latest.
Under Databento's continuous symbols only the symbol's contract is sent: it is the new
contract's first open over the old one's last close, the nearest two prices in time.

With `BARCAST_KEY_BY=continuous` bars are keyed by their continuous symbol, so the workers'
states follow it across rolls and rescale at each (every bar still names its raw symbol); by
default they are keyed by raw symbol, and a roll starts new states.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from features.bars import UNDEF_PRICE
from streams import schema
from streams.ingest.symbols import MONTH_CODES, SymbolBook

DAY_NS = 86_400 * 10**9
# CME's trading day opens at 17:00 Chicago: 22:00 UTC in summer, 23:00 in winter, when the hour
# before is the daily halt; so a trading day is a UTC day shifted by two hours.
TRADING_DAY_SHIFT_NS = 2 * 3600 * 10**9
LEAD_SUFFIX = ".v.0"
# A lead never trades this late in its day while another contract trades every minute
GONE_AFTER_BARS = 30
CONTRACT = re.compile(rf"(.+?)[{MONTH_CODES}]\d{{1,2}}")


@dataclass(frozen=True)
class Roll:
    ts_event: int
    symbol: str  # the continuous symbol
    old: str  # raw symbols
    new: str
    ratio: float  # new's price over old's

    def record(self) -> schema.ControlRecord:
        return schema.roll(self.ts_event, self.symbol, self.old, self.new, self.ratio)

    def describe(self) -> str:
        when = np.datetime64(self.ts_event, "ns").astype(str)
        return (
            f"roll: {self.symbol} from {self.old} to {self.new} at {when}Z, ratio {self.ratio:.6f}"
        )


@dataclass
class Behind:
    """The contract behind a continuous symbol, and its last close (fixed point)."""

    instrument_id: int
    raw: int  # symbol index
    close: int


@dataclass
class Product:
    """Following a product's lead: the trading day, each contract's volume on it and on the
    day before, and each contract's last close."""

    day: int = -1
    today: dict[int, int] = field(default_factory=dict)
    bars: int = 0  # of the contract that traded the most bars today
    counts: dict[int, int] = field(default_factory=dict)  # bars today, per contract
    previous: dict[int, int] | None = None
    behind: int | None = None  # the contract last published as the lead
    closes: dict[int, int] = field(default_factory=dict)


@dataclass
class Routed:
    """A batch of bars routed: the symbol index each is keyed by, which are published, and the
    rolls, each before the bar (its row) it comes at."""

    keys: np.ndarray
    keep: np.ndarray
    rolls: list[tuple[int, Roll]]


def product_root(symbol: str, book: SymbolBook) -> str:
    definition = book.definitions.get(symbol)
    if definition is not None and definition.asset:
        return definition.asset
    match = CONTRACT.fullmatch(symbol)
    return symbol if match is None else match.group(1)


class Continuity:
    """Keys, the lead filter and rolls, over the bars ingest sends, in their order."""

    def __init__(self, book: SymbolBook, key_by: str = "raw", follow: str = "all"):
        self.book = book
        self.by_continuous = key_by == "continuous"
        self.follow_lead = follow == "lead"
        self._behind: dict[int, Behind] = {}  # continuous symbol index
        self._products: dict[int, Product] = {}  # lead symbol index

    def route(self, bars: np.ndarray, raw: np.ndarray) -> Routed:
        """`bars` (OHLCV records) whose raw symbol indices are `raw`."""
        keys, keep = raw.astype(np.int64), np.ones(len(bars), dtype=np.bool_)
        rolls: list[tuple[int, Roll]] = []
        if not (self.follow_lead or self.book.has_continuous):
            return Routed(keys, keep, rolls)
        ts, ids = bars["ts_event"], bars["instrument_id"]
        continuous = self.book.continuous(ids, ts)
        columns = (ids.tolist(), ts.tolist(), bars["open"].tolist(), bars["close"].tolist())
        volume = bars["volume"].tolist()
        for i, (iid, t, open_, close) in enumerate(zip(*columns, strict=True)):
            symbol = int(continuous[i])
            if self.follow_lead:
                symbol, keep[i], roll = self._lead(int(raw[i]), t, close, volume[i])
            else:
                roll = (
                    None if symbol < 0 else self._behind_symbol(symbol, iid, int(raw[i]), t, open_)
                )
            if roll is not None:
                rolls.append((i, roll))
            if symbol >= 0:
                if not self.follow_lead:
                    self._behind[symbol].close = close
                if self.by_continuous:
                    keys[i] = symbol
        return Routed(keys, keep, rolls)

    def _behind_symbol(self, symbol: int, iid: int, raw: int, ts: int, open_: int) -> Roll | None:
        behind = self._behind.get(symbol)
        self._behind[symbol] = Behind(iid, raw, 0 if behind is None else behind.close)
        if behind is None:
            return None
        priced = 0 < behind.close < UNDEF_PRICE and 0 < open_ < UNDEF_PRICE
        if behind.instrument_id == iid or not priced:
            return None
        names = self.book.symbols
        return Roll(ts, names[symbol], names[behind.raw], names[raw], open_ / behind.close)

    def _lead(self, raw: int, ts: int, close: int, volume: int) -> tuple[int, bool, Roll | None]:
        names = self.book.symbols
        symbol = self.book.index_of(product_root(names[raw], self.book) + LEAD_SUFFIX)
        product = self._products.setdefault(symbol, Product())
        day = (ts + TRADING_DAY_SHIFT_NS) // DAY_NS
        if day != product.day:
            if product.today:
                product.previous = product.today
            product.day, product.today, product.counts, product.bars = day, {}, {}, 0
        product.today[raw] = product.today.get(raw, 0) + volume
        product.counts[raw] = count = product.counts.get(raw, 0) + 1
        product.bars = max(product.bars, count)
        product.closes[raw] = close
        ranked = _ranked(product)
        if raw != max(ranked, key=lambda r: (ranked[r], names[r])):
            return symbol, False, None
        old, product.behind = product.behind, raw
        if old is None or old == raw:
            return symbol, True, None
        ratio = close / product.closes[old]  # at the new lead's first bar: the nearest prices
        return symbol, True, Roll(ts, names[symbol], names[old], names[raw], ratio)


def _ranked(product: Product) -> dict[int, int]:
    """The volumes the lead is chosen by: the day before's, less the contracts gone from today
    (`GONE_AFTER_BARS`); today's so far on the first day, or if all of them are gone."""
    previous = product.previous
    if previous is None:
        return product.today
    if product.bars < GONE_AFTER_BARS:
        return previous
    trading = {raw: volume for raw, volume in previous.items() if raw in product.today}
    return trading or product.today
