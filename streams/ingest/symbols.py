"""Symbology for ingest: instrument_id → raw symbol, the `--symbols` filter, spread detection.

Raw symbols come from instrument definitions (undated: an instrument's name on any date), the
DBN metadata's symbol mappings (files requested with `stype_in=raw_symbol`: dated, by day) and
SymbolMappingMsg records in the stream (live sessions and their recordings: dated from their
`start_ts`, floored to the day as Databento's own symbol map does, to their `end_ts`). For a
bar, a dated mapping covering its date wins over an undated one, and a record over metadata:
instrument ids are reused over the years, so a definition file or another file's records must
not rename bars of dates that their own file maps.

Parent filters (`ES.FUT`) are decided with the instrument's definition when one was read (its
`asset` is the root, its `instrument_class` says future or spread); without a definition, by the
CME symbol pattern: the root, one month code, a one- or two-digit year (`ESU4`, `ESU24`), so
`ES.FUT` never matches `MESU4`. Calendar spreads (`ESU4-ESZ4`, or a spread instrument class)
belong to their first leg's parent and are dropped unless spreads are kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import IntEnum
from typing import Any

import databento_dbn
import numpy as np
import orjson

from features.corrections import is_calendar_spread
from streams.ingest.errors import UnknownSymbol

PARENT_SUFFIX = ".FUT"
MONTH_CODES = "FGHJKMNQUVXZ"
FUTURE_CLASSES = frozenset("FS")  # outright future, future spread
SPREAD_CLASSES = frozenset("STM")  # future spread, option spread, mixed spread
NANOS_PER_DAY = 86_400 * 10**9


class Verdict(IntEnum):
    """What ingest does with an instrument's bars."""

    KEEP = 0
    FILTERED = 1
    SPREAD = 2


@dataclass(frozen=True)
class Definition:
    raw_symbol: str
    asset: str
    instrument_class: str


def is_spread(symbol: str, definition: Definition | None = None) -> bool:
    if definition is not None and definition.instrument_class in SPREAD_CLASSES:
        return True
    return is_calendar_spread(symbol)


def root_matches(root: str, symbol: str, definition: Definition | None = None) -> bool:
    """Whether `symbol` is a future (or spread) of the parent `root`."""
    if definition is not None and definition.asset:
        return definition.asset == root and definition.instrument_class in FUTURE_CLASSES
    first_leg = symbol.split("-", 1)[0]
    return re.fullmatch(rf"{re.escape(root)}[{MONTH_CODES}]\d{{1,2}}", first_leg) is not None


class SymbolFilter:
    """`--symbols`: parent symbols (`ES.FUT`) and raw symbols (`ESU4`); empty keeps all."""

    def __init__(self, entries: Sequence[str] = ()):
        self.entries = [e.strip() for e in entries if e.strip()]
        self._roots: dict[str, str] = {}
        self._raw: set[str] = set()
        for entry in self.entries:
            if "." not in entry:
                self._raw.add(entry)
                continue
            root, _, suffix = entry.rpartition(".")
            if f".{suffix}".upper() != PARENT_SUFFIX or not root.isalnum():
                raise UnknownSymbol(
                    f"symbol filter {entry!r} is not supported: use parent symbols such as "
                    f"ES.FUT or raw symbols such as ESU4"
                )
            self._roots[root] = entry

    @property
    def active(self) -> bool:
        return bool(self.entries)

    def match(self, symbol: str, definition: Definition | None = None) -> str | None:
        """The filter entry that selects `symbol`, or None."""
        if symbol in self._raw:
            return symbol
        for root, entry in self._roots.items():
            if root_matches(root, symbol, definition):
                return entry
        return None

    def unmatched(self, book: SymbolBook) -> list[str]:
        hits = {self.match(s, book.definitions.get(s)) for s in book.symbols}
        return [e for e in self.entries if e not in hits]


def verdict(
    symbol: str, definition: Definition | None, symbols: SymbolFilter, keep_spreads: bool
) -> Verdict:
    if symbols.active and symbols.match(symbol, definition) is None:
        return Verdict.FILTERED
    if not keep_spreads and is_spread(symbol, definition):
        return Verdict.SPREAD
    return Verdict.KEEP


def _day_ns(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()) * 10**9


Span = tuple[int, int, int]  # [start, end) in UNIX ns, symbol index
EVER = (0, 2**64 - 1)


class SymbolBook:
    """instrument_id → raw symbol, resolved for whole arrays of records at once.

    Symbols get small integer indices; `tables()` holds their pre-encoded JSON strings and Kafka
    keys so encoding a batch never touches a Python string per record.
    """

    def __init__(self) -> None:
        self.symbols: list[str] = []
        self.definitions: dict[str, Definition] = {}
        self._index: dict[str, int] = {}
        # Every source's mappings are kept, per instrument, lowest precedence first: metadata
        # can map one instrument_id to different symbols on different days, within a file or
        # across files (ids are reused).
        self._undated: dict[int, int] = {}
        self._metadata: dict[int, list[Span]] = {}
        self._records: dict[int, list[Span]] = {}
        self._plans: dict[int, int | list[Span]] = {}  # per instrument: one index, or spans
        # Continuous symbols (`ES.c.0`) per instrument: a metadata mapping of a `continuous`
        # request, or the SymbolMappingMsg of a continuous subscription, which a roll ends.
        self._continuous: dict[int, list[Span]] = {}
        self._holders: dict[int, int] = {}  # continuous symbol index: its instrument now
        self._tables: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._verdicts: dict[tuple[int, int, bool], np.ndarray] = {}

    def index_of(self, symbol: str) -> int:
        index = self._index.get(symbol)
        if index is None:
            index = self._index[symbol] = len(self.symbols)
            self.symbols.append(symbol)
            self._tables = None
        return index

    def set(self, instrument_id: int, symbol: str) -> None:
        """Name `instrument_id` on every date no dated mapping covers."""
        if symbol:
            self._undated[instrument_id] = self.index_of(symbol)
            self._plans.pop(instrument_id, None)

    def add_metadata(self, metadata: databento_dbn.Metadata) -> bool:
        """Take the raw symbols of the metadata's mappings; False when it has none (e.g. a
        `parent` request, whose mappings name parents, not instruments)."""
        raw, ids = databento_dbn.SType.RAW_SYMBOL, databento_dbn.SType.INSTRUMENT_ID
        if metadata.stype_in == databento_dbn.SType.CONTINUOUS and metadata.stype_out == ids:
            for key, ivs in metadata.mappings.items():
                for iv in ivs:
                    if iv["symbol"]:
                        days = (_day_ns(iv["start_date"]), _day_ns(iv["end_date"]))
                        span = (*days, self.index_of(key))
                        _add_span(self._continuous, int(iv["symbol"]), span)
            return False
        if metadata.stype_in == raw and metadata.stype_out == ids:
            pairs = [
                (int(iv["symbol"]), key, iv)
                for key, ivs in metadata.mappings.items()
                for iv in ivs
                if iv["symbol"]
            ]
        elif metadata.stype_in == ids and metadata.stype_out == raw:
            pairs = [
                (int(key), iv["symbol"], iv)
                for key, ivs in metadata.mappings.items()
                for iv in ivs
                if iv["symbol"]
            ]
        else:
            return False
        for instrument_id, symbol, interval in pairs:
            self._add_dated(instrument_id, symbol, interval["start_date"], interval["end_date"])
        return bool(pairs)

    def add_resolution(self, result: dict[str, list[dict[str, str]]]) -> None:
        """Take a symbology.resolve result from instrument ids to raw symbols (`{id: [{"d0":
        start date, "d1": end date, "s": raw symbol}]}`), as dated as metadata mappings."""
        for instrument_id, intervals in result.items():
            for iv in intervals:
                if iv["s"]:
                    start, end = date.fromisoformat(iv["d0"]), date.fromisoformat(iv["d1"])
                    self._add_dated(int(instrument_id), iv["s"], start, end)

    def _add_dated(self, instrument_id: int, symbol: str, start: date, end: date) -> None:
        span = (_day_ns(start), _day_ns(end), self.index_of(symbol))
        if _add_span(self._metadata, instrument_id, span):
            self._plans.pop(instrument_id, None)

    def add_record(self, record: Any) -> bool:
        """Learn from a SymbolMappingMsg or an instrument definition; False for other records."""
        if isinstance(record, databento_dbn.SymbolMappingMsg):
            if record.stype_in == databento_dbn.SType.RAW_SYMBOL:
                symbol = record.stype_in_symbol
            else:
                symbol = record.stype_out_symbol
            if symbol:
                undefined = databento_dbn.UNDEF_TIMESTAMP
                start = EVER[0] if record.start_ts == undefined else record.start_ts
                end = EVER[1] if record.end_ts == undefined else record.end_ts
                span = (start - start % NANOS_PER_DAY, end, self.index_of(symbol))
                if _add_span(self._records, record.instrument_id, span):
                    self._plans.pop(record.instrument_id, None)
                if record.stype_in == databento_dbn.SType.CONTINUOUS:
                    self._hold(record.instrument_id, record.stype_in_symbol, span, start)
            return True
        if isinstance(record, databento_dbn.InstrumentDefMsg):
            symbol = record.raw_symbol
            self.definitions[symbol] = Definition(
                symbol, record.asset, str(record.instrument_class)
            )
            self.set(record.instrument_id, symbol)
            self._verdicts.clear()
            return True
        return False

    def _hold(self, instrument_id: int, symbol: str, span: Span, start: int) -> None:
        """`instrument_id` is behind continuous `symbol` from `start`: the instrument that was
        is no longer from there (a roll)."""
        index = self.index_of(symbol)
        before = self._holders.get(index)
        if before == instrument_id:
            return  # still behind it: a reconnect's mapping again
        if before is not None:
            spans = self._continuous[before]
            last = max(i for i, span in enumerate(spans) if span[2] == index)
            spans[last] = (spans[last][0], min(spans[last][1], start), index)
        self._holders[index] = instrument_id
        self._continuous.setdefault(instrument_id, []).append((span[0], span[1], index))

    @property
    def has_continuous(self) -> bool:
        return bool(self._continuous)

    def continuous(self, instrument_ids: np.ndarray, ts_event: np.ndarray) -> np.ndarray:
        """Continuous symbol index per record, -1 where none names its instrument then."""
        out = np.full(len(instrument_ids), -1, dtype=np.int32)
        if self._continuous:
            for instrument_id in np.unique(instrument_ids).tolist():
                spans = self._continuous.get(instrument_id)
                if spans:
                    rows = np.flatnonzero(instrument_ids == instrument_id)
                    ts = ts_event[rows]
                    for start, end, index in spans:
                        out[rows[(ts >= start) & (ts < end)]] = index
        return out

    def _plan(self, instrument_id: int) -> int | list[Span]:
        """The instrument's symbol index if it has one name (on every date: so is a file's
        single mapping, as Databento's own readers take it), else its spans, lowest precedence
        first; -1 if nothing names it."""
        plan = self._plans.get(instrument_id)
        if plan is None:
            undated = self._undated.get(instrument_id)
            spans = [] if undated is None else [(*EVER, undated)]
            spans += self._metadata.get(instrument_id, [])
            spans += self._records.get(instrument_id, [])
            names = {index for _, _, index in spans}
            plan = self._plans[instrument_id] = names.pop() if len(names) == 1 else spans or -1
        return plan

    def resolve(self, instrument_ids: np.ndarray, ts_event: np.ndarray) -> np.ndarray:
        """Symbol index per record, -1 where the instrument has no known raw symbol."""
        unique, inverse = np.unique(instrument_ids, return_inverse=True)
        plans = [self._plan(i) for i in unique.tolist()]
        constant = [plan if isinstance(plan, int) else -2 for plan in plans]
        out = np.array(constant, dtype=np.int32)[inverse]
        for instrument_id, plan in zip(unique.tolist(), plans, strict=True):
            if isinstance(plan, list):
                rows = np.flatnonzero(instrument_ids == instrument_id)
                ts = ts_event[rows]
                found = np.full(len(rows), -1, dtype=np.int32)
                for start, end, index in plan:  # each a higher precedence than the last
                    found[(ts >= start) & (ts < end)] = index
                out[rows] = found
        return out

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(JSON-encoded symbols as one uint8 blob, their offsets, Kafka keys as bytes)."""
        if self._tables is None:
            encoded = [orjson.dumps(s) for s in self.symbols]
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            offsets[1:] = np.cumsum([len(e) for e in encoded])
            blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
            keys = np.empty(len(self.symbols), dtype=object)
            keys[:] = [s.encode() for s in self.symbols]
            self._tables = (blob, offsets, keys)
        return self._tables

    def verdicts(self, symbols: SymbolFilter, keep_spreads: bool) -> np.ndarray:
        """`Verdict` per symbol index, cached until new symbols or definitions arrive."""
        cache_key = (len(self.symbols), id(symbols), keep_spreads)
        table = self._verdicts.get(cache_key)
        if table is None:
            self._verdicts.clear()
            table = self._verdicts[cache_key] = np.array(
                [verdict(s, self.definitions.get(s), symbols, keep_spreads) for s in self.symbols],
                dtype=np.uint8,
            )
        return table


def known_symbols(book: SymbolBook, limit: int = 12) -> str:
    names = sorted(book.symbols)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "") or "none"


def check_filter(symbols: SymbolFilter, book: SymbolBook, where: Iterable[str]) -> None:
    """Refuse filter entries that select none of the instruments `book` knows."""
    missing = symbols.unmatched(book)
    if missing:
        raise UnknownSymbol(
            f"symbol filter {', '.join(missing)} matches no instrument in "
            f"{', '.join(where)} (they hold {known_symbols(book)})"
        )


def _add_span(table: dict[int, list[Any]], instrument_id: int, span: tuple[int, ...]) -> bool:
    """`span` into the instrument's spans unless there already: each reconnect names every
    instrument again, and each backfill resolves them again. Whether it was new."""
    spans = table.setdefault(instrument_id, [])
    if span in spans:
        return False
    spans.append(span)
    return True
