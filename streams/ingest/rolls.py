"""Continuous symbols and rolls at ingest: which symbol a bar is keyed by, and when the contract
behind a continuous symbol changes.

A continuous symbol (`ES.c.0`) names one contract at a time: Databento maps it in a session's
SymbolMappingMsg records (a new one at each roll) or a historical file's metadata. With
`BARCAST_FOLLOW=lead` ingest makes one itself for each product of a parent subscription,
`ROOT.v.0`: the contract that traded the most on the previous trading day (on the first day
ingest sees, the most so far), the other contracts' bars skipped. A contract that has not traded
today while another of its product has traded `GONE_AFTER_BARS` bars is passed over (expired,
most likely: else the product would go unpublished for the day): the lead is the next by the
day before's volume, among those that traded today, and the roll's ratio is of the two
contracts' closes before today.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import orjson

from features.bars import UNDEF_PRICE
from streams import schema
from streams.ingest.symbols import MONTH_CODES, SymbolBook, is_spread

DAY_NS = 86_400 * 10**9
# CME's trading day opens at 17:00 Chicago: 22:00 UTC in summer, 23:00 in winter, when the hour
# before is the daily halt; so a trading day is a UTC day shifted by two hours.
TRADING_DAY_SHIFT_NS = 2 * 3600 * 10**9
LEAD_SUFFIX = ".v.0"
# A live lead trades before another contract of its product has traded this many bars in the
# day (CME's front months trade every minute), so one that has not is gone: expired, most likely
GONE_AFTER_BARS = 30
# A lead last published over this many trading days before ingest goes on (a long weekend
# and a holiday) says little of the market now: the first day ranks by its own volume
RESUME_DAYS = 4
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


@dataclass(frozen=True)
class Lead:
    """A product's lead as ingest last published it, which a restarted ingest resumes with."""

    raw: str
    ts_event: int
    close: int | None  # fixed point; None where the tail holds only the roll to it


def published_leads(values: Iterable[bytes]) -> dict[str, Lead]:
    """Each product's lead by the newest of its records among `values` (the tail of the bars'
    topic, which following the lead publishes only the leads' bars to): a roll names the
    contract it rolls to (it comes after the old lead's bar of its minute), a bar its own
    contract; none where several contracts' bars share the newest minute with no roll (a topic
    written with every contract, not the lead's). Keyed by product root: the continuous
    symbol's, or the raw symbol's (`CONTRACT`). Records not barcast's are passed over."""
    newest: dict[str, tuple[int, set[str]]] = {}  # root -> (ts, the contracts with a bar then)
    rolled: dict[str, tuple[int, str]] = {}  # root -> (ts, the contract rolled to)
    closes: dict[str, tuple[int, int]] = {}  # raw symbol -> (ts, close)
    for value in values:
        found = _lead_record(value)
        if found is None:
            continue
        root, raw, ts, close = found
        if close is None:
            rolled[root] = max(rolled.get(root, (ts, raw)), (ts, raw))
            continue
        closes[raw] = max(closes.get(raw, (ts, close)), (ts, close))
        last, contracts = newest.get(root, (-1, set()))
        if ts > last:
            newest[root] = ts, {raw}
        elif ts == last:
            contracts.add(raw)
    leads = {}
    for root in newest.keys() | rolled.keys():
        ts, contracts = newest.get(root, (-1, set()))
        if root in rolled and rolled[root][0] >= ts:
            ts, contracts = rolled[root][0], {rolled[root][1]}
        if len(contracts) == 1:
            [raw] = contracts
            leads[root] = Lead(raw, ts, closes[raw][1] if raw in closes else None)
    return leads


def _lead_record(value: bytes) -> tuple[str, str, int, int | None] | None:
    """(product root, contract, ts_event, close or None for a roll) of a lead's bar or roll."""
    try:
        record = orjson.loads(value)
        ts = int(record["ts_event"])
        if record.get("control") == schema.ControlKind.ROLL.value:
            symbol, raw, close = record["symbol"], record["raw_symbols"][1], None
            if not symbol.endswith(LEAD_SUFFIX):
                return None
        elif "control" not in record:
            symbol, raw, close = record["symbol"], record["raw_symbol"], int(record["close"])
        else:
            return None
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    if not isinstance(symbol, str) or not isinstance(raw, str) or is_spread(raw):
        return None
    root = symbol[: -len(LEAD_SUFFIX)] if symbol.endswith(LEAD_SUFFIX) else None
    return root or product_root(raw, SymbolBook()), raw, ts, close


@dataclass
class Product:
    """Following a product's lead: the trading day, each contract's volume and bars on it and
    its volume the day before, and each contract's last close, now and before today."""

    day: int = -1
    today: dict[int, int] = field(default_factory=dict)
    previous: dict[int, int] | None = None
    behind: int | None = None  # the contract last published as the lead
    closes: dict[int, int] = field(default_factory=dict)
    closing: dict[int, int] = field(default_factory=dict)  # the closes before today
    counts: dict[int, int] = field(default_factory=dict)  # bars today, per contract
    bars: int = 0  # of the contract that traded the most bars today
    ranked: int | None = None  # the lead by the day before's volume, until that can change
    held: int | None = None  # the lead a restarted ingest resumes with (`published_leads`)

    def add(self, day: int, raw: int, close: int, volume: int) -> None:
        """A bar of contract `raw` on trading day `day`."""
        if day != self.day:
            if self.today:
                self.previous = self.today
            self.day, self.today, self.counts, self.bars = day, {}, {}, 0
            self.closing, self.ranked = dict(self.closes), None
        if raw not in self.today:  # one more contract trading today
            self.ranked = None
        self.today[raw] = self.today.get(raw, 0) + volume
        self.counts[raw] = count = self.counts.get(raw, 0) + 1
        if count > self.bars:
            self.bars = count
            if count == GONE_AFTER_BARS:  # the contracts gone from today are known now
                self.ranked = None
        self.closes[raw] = close

    def lead(self, names: list[str]) -> int:
        """The contract that traded the most the day before, less those gone from today
        (`GONE_AFTER_BARS`); by today's volume so far on the first day, or if all are gone. A
        restarted ingest's first day keeps the lead it resumes with unless that is gone."""
        if self.ranked is not None:
            return self.ranked
        held = self.held if self.previous is None else None
        if held is not None and (held in self.today or self.bars < GONE_AFTER_BARS):
            return held
        ranked = self.today if self.previous is None else self.previous
        if self.previous is not None and self.bars >= GONE_AFTER_BARS:
            trading = {raw: v for raw, v in self.previous.items() if raw in self.today}
            ranked = trading or self.today
        lead = max(ranked, key=lambda r: (ranked[r], names[r]))
        if ranked is not self.today:  # today's volume changes with every bar
            self.ranked = lead
        return lead

    def ratio(self, new: int, old: int) -> float | None:
        """`new`'s price over `old`'s at the nearest two prices: their latest closes, or, for an
        `old` gone from today, both closes of before today where `new` has one; None where one
        is not a price above 0 (a spread's, or an undefined one), or is not known (a lead a
        restarted ingest resumes with, before it trades)."""
        closes = self.closing if old not in self.today and new in self.closing else self.closes
        new_close, old_close = closes.get(new, UNDEF_PRICE), closes.get(old, UNDEF_PRICE)
        return new_close / old_close if priced(new_close, old_close) else None


@dataclass
class Routed:
    """A batch of bars routed: the symbol index each is keyed by, which are published, and the
    rolls, each before the bar (its row) it comes at."""

    keys: np.ndarray
    keep: np.ndarray
    rolls: list[tuple[int, Roll]]


def trading_day(ts: int) -> int:
    return (ts + TRADING_DAY_SHIFT_NS) // DAY_NS


def priced(*prices: int) -> bool:
    """Whether fixed-point `prices` are all prices above 0, which a roll's ratio needs."""
    return all(0 < price < UNDEF_PRICE for price in prices)


def product_root(symbol: str, book: SymbolBook) -> str:
    definition = book.definitions.get(symbol)
    if definition is not None and definition.asset:
        return definition.asset
    match = CONTRACT.fullmatch(symbol)
    return symbol if match is None else match.group(1)


class Continuity:
    """Keys, the lead filter and rolls, over the bars ingest sends, in their order."""

    def __init__(
        self,
        book: SymbolBook,
        key_by: str = "raw",
        follow: str = "all",
        leads: Mapping[str, Lead] | None = None,
    ):
        self.book = book
        self.by_continuous = key_by == "continuous"
        self.follow_lead = follow == "lead"
        self._behind: dict[int, Behind] = {}  # continuous symbol index
        self._products: dict[int, Product] = {}  # lead symbol index
        self._leads = dict(leads or {})  # product root -> the lead to resume with

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
            if self.follow_lead and not self._spread(int(raw[i])):
                symbol, keep[i], roll = self._lead(int(raw[i]), t, close, volume[i])
            elif self.follow_lead:  # a spread kept (--keep-spreads): never a product's lead
                symbol, roll = -1, None
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
        if behind.instrument_id == iid or not priced(behind.close, open_):
            return None
        names = self.book.symbols
        return Roll(ts, names[symbol], names[behind.raw], names[raw], open_ / behind.close)

    def _spread(self, raw: int) -> bool:
        name = self.book.symbols[raw]
        return is_spread(name, self.book.definitions.get(name))

    def _lead(self, raw: int, ts: int, close: int, volume: int) -> tuple[int, bool, Roll | None]:
        names = self.book.symbols
        root = product_root(names[raw], self.book)
        symbol = self.book.index_of(root + LEAD_SUFFIX)
        product = self._products.get(symbol) or self._resumed(symbol, root, ts)
        product.add(trading_day(ts), raw, close, volume)
        if raw != product.lead(names):
            return symbol, False, None
        old, product.behind = product.behind, raw
        if old is None or old == raw:
            return symbol, True, None
        ratio = product.ratio(raw, old)
        if ratio is None:  # the corrections roll the state at their own ratio, or at 1
            return symbol, True, None
        return symbol, True, Roll(ts, names[symbol], names[old], names[raw], ratio)

    def _resumed(self, symbol: int, root: str, ts: int) -> Product:
        """A product first seen by this process, at `ts`: it resumes with the lead last
        published (`_resumable`)."""
        product = self._products[symbol] = Product()
        lead = self._resumable(root, ts)
        if lead is not None:
            held = product.behind = product.held = self.book.index_of(lead.raw)
            if lead.close is not None:
                product.closes[held] = lead.close  # a close before today, from the first bar on
        return product

    def _resumable(self, root: str, ts: int) -> Lead | None:
        """`root`'s lead as last published (under its root, or a raw symbol's root the regex
        read where a definition names another), if published before `ts` (not when older bars
        are replayed into the topic) and within `RESUME_DAYS` trading days of it."""
        key = root if root in self._leads else None
        for name, lead in self._leads.items():
            if key is None and product_root(lead.raw, self.book) == root:
                key = name
        lead = None if key is None else self._leads.pop(key)
        if lead is None or lead.ts_event > ts:
            return None
        return lead if trading_day(ts) - trading_day(lead.ts_event) <= RESUME_DAYS else None
