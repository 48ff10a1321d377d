"""Training bars: bar sources -> the corrections rules, streamed a week at a time -> clean
per-symbol arrays.

A source (`--data`) is a bar file (6EH4-style CSV, DBN OHLCV-1m) or a folder of FirstRate day
files (`ES=/path/dailydata`, `features.firstrate`), each read within an optional UTC range
[start, end). The corrections are the very code the streaming agent runs
(`features.corrections`), so the model trains on the bars the worker will see; every
correction, rejection and gap fill is counted in the returned report, never applied silently.
They run as a stream over the sources' bars merged in time order a week at a time, keeping only
each symbol's state and its clean bars as arrays: years of bars never exist as one list of
dicts, and the result equals one pass over the whole history.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from features.bars import (
    PRICE_FIELDS,
    engine_columns,
    to_fixed,
)
from features.corrections import (
    CorrectionConfig,
    CorrectionStats,
    SymbolState,
    bars_from_frame,
    correct_steps,
    is_calendar_spread,
)
from features.firstrate import day_files, eastern_date, eastern_midnight, read_day
from model.bar_formats import DBN_SUFFIXES, DataError, read_frame
from model.checkpoint import file_sha256

NS_PER_DAY = 86_400 * 10**9
CHUNK_NS = 7 * NS_PER_DAY  # the span of bars corrected per step of the stream
COLUMN_BATCH = 65_536  # clean bars converted to arrays at a time
COLUMNS = ("ts_event", *PRICE_FIELDS, "volume", "symbol")


@dataclass(frozen=True)
class CleanBars:
    """One symbol's corrected 1-minute bars in ts order (synthetic = gap fill, volume 0)."""

    symbol: str
    ts_event: np.ndarray  # int64 UTC ns, bar open
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    synthetic: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.ts_event)


@dataclass(frozen=True)
class BarSource:
    """One `--data` input: a bar file or a FirstRate folder, the symbol its bars take (a file
    names its own; a folder needs one), and the UTC range of bar opens to read, [start, end)."""

    path: Path
    symbol: str | None = None
    start: int | None = None  # UTC ns, inclusive
    end: int | None = None  # UTC ns, exclusive

    @classmethod
    def parse(cls, text: str | Path, start: int | None = None, end: int | None = None) -> BarSource:
        """`PATH` or `SYMBOL=PATH` (a path that exists as given is never split)."""
        text = str(text)
        symbol, sep, rest = text.partition("=")
        if sep and symbol and "/" not in symbol and not Path(text).exists():
            return cls(Path(rest), symbol, start, end)
        return cls(Path(text), None, start, end)

    def __str__(self) -> str:
        return f"{self.symbol}={self.path}" if self.symbol else str(self.path)

    def describe(self) -> dict[str, str | None]:
        """The source as a report records it: `--data`, and the range read (UTC)."""
        start, end = (None if t is None else iso_utc(t) for t in (self.start, self.end))
        return {"data": str(self), "start": start, "end": end}

    def within(self, ts: np.ndarray) -> np.ndarray:
        """(n,) whether each bar open is in the source's range."""
        lo = np.iinfo(np.int64).min if self.start is None else self.start
        hi = np.iinfo(np.int64).max if self.end is None else self.end
        return (ts >= lo) & (ts < hi)


def parse_utc(text: str, option: str) -> int:
    """A date or date-time option (`2013-01-01`, `2013-01-01T14:30`; UTC unless it names an
    offset) as int64 UTC ns."""
    try:
        stamp = pd.Timestamp(text)
    except ValueError:
        stamp = None
    if stamp is None or stamp is pd.NaT:
        raise DataError(f"{option} {text!r}: not a date; use YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC)")
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    try:
        return int(stamp.as_unit("ns").value)
    except (ValueError, OverflowError):  # pandas' nanoseconds end in 2262
        raise DataError(f"{option} {text!r}: out of range; use a date from 1678 to 2261") from None


def iso_utc(ts: int) -> str:
    return str(pd.Timestamp(int(ts), unit="ns", tz="UTC"))


class _Reader(Protocol):
    files: dict[str, str]  # path -> sha256 of every file read

    def span(self) -> tuple[int, int] | None:
        """[first, end) UTC ns that holds every bar the source will give, or None if none."""
        ...

    def frame(self, lo: int, hi: int) -> pd.DataFrame:
        """The source's bars opening in [lo, hi), in time order (ties in the file's order):
        ts_event, open..close, volume, symbol."""
        ...


class _FileReader:
    """A CSV or DBN file, read whole (each is one download; years come as folders)."""

    def __init__(self, source: BarSource) -> None:
        frame = read_frame(source.path)
        if source.symbol is not None:
            if source.path.name.lower().endswith(DBN_SUFFIXES):
                raise DataError(
                    f"--data {source}: a DBN file names its own instruments; drop "
                    f"'{source.symbol}='"
                )
            frame["symbol"] = source.symbol
        frame = standard(frame[source.within(frame["ts_event"].to_numpy())])
        self.bars = frame.sort_values("ts_event", kind="stable", ignore_index=True)
        self.ts = self.bars["ts_event"].to_numpy()
        self.files = {str(source.path): file_sha256(source.path)}

    def span(self) -> tuple[int, int] | None:
        return (int(self.ts[0]), int(self.ts[-1]) + 1) if len(self.ts) else None

    def frame(self, lo: int, hi: int) -> pd.DataFrame:
        a, b = np.searchsorted(self.ts, [lo, hi])
        return self.bars.iloc[a:b]


class _DayFolder:
    """A FirstRate folder: only the day files a range needs, each read once."""

    def __init__(self, source: BarSource) -> None:
        if source.symbol is None:
            raise DataError(
                f"--data {source}: a folder of day files names no symbol; say which it is, "
                f"e.g. --data ES={source.path}"
            )
        self.source = source
        self.days = day_files(source.path)
        self.dates = list(self.days)
        if not self.days:
            raise DataError(
                f"--data {source}: no day file (YYYY-MM-DD.json) in the folder; point it at "
                "FirstRate's dailydata/ folder"
            )
        self.files: dict[str, str] = {}
        self._read: dict[dt.date, pd.DataFrame] = {}  # the last days read, for the next range

    def span(self) -> tuple[int, int] | None:
        start, end = self.source.start, self.source.end
        lo = eastern_midnight(self.dates[0])
        hi = eastern_midnight(self.dates[-1] + dt.timedelta(days=1))
        lo = lo if start is None else max(lo, start)
        hi = hi if end is None else min(hi, end)
        return (lo, hi) if lo < hi else None

    def frame(self, lo: int, hi: int) -> pd.DataFrame:
        first, last = eastern_date(lo), eastern_date(hi - 1)
        self._read = {day: f for day, f in self._read.items() if day >= first}
        a, b = bisect.bisect_left(self.dates, first), bisect.bisect_right(self.dates, last)
        parts = [self._day(day) for day in self.dates[a:b]]
        if not parts:
            return pd.DataFrame(columns=list(COLUMNS))
        frame = pd.concat(parts, ignore_index=True)
        ts = frame["ts_event"].to_numpy()
        return frame[(ts >= lo) & (ts < hi) & self.source.within(ts)]

    def _day(self, day: dt.date) -> pd.DataFrame:
        if day not in self._read:
            path = self.days[day]
            try:
                frame, self.files[str(path)] = read_day(path)
            except ValueError as exc:
                raise DataError(f"--data {self.source}: {exc}") from None
            self._read[day] = standard(frame.assign(symbol=self.source.symbol))
        return self._read[day]


def standard(frame: pd.DataFrame) -> pd.DataFrame:
    """`COLUMNS` only, prices in fixed point (a DBN file's already are), volume float64: so
    frames of every format concatenate without NaN columns or mixed price units."""
    columns = {"ts_event": frame["ts_event"].to_numpy(dtype=np.int64)}
    for name in PRICE_FIELDS:
        prices = frame[name].to_numpy()
        columns[name] = prices.astype(np.int64) if prices.dtype.kind in "iu" else to_fixed(prices)
    columns["volume"] = frame["volume"].to_numpy(dtype=np.float64)
    columns["symbol"] = frame["symbol"].to_numpy()
    return pd.DataFrame(columns)


def open_source(source: BarSource) -> _Reader:
    if source.start is not None and source.end is not None and source.start >= source.end:
        raise DataError(
            f"--data {source}: --start {iso_utc(source.start)} is not before --end "
            f"{iso_utc(source.end)}; give a range that holds bars"
        )
    return _DayFolder(source) if source.path.is_dir() else _FileReader(source)


def raw_chunks(readers: list[_Reader]) -> Iterator[pd.DataFrame]:
    """Every source's bars merged in time order, a `CHUNK_NS` span at a time (ties in the
    order of the sources, then of their files: as one stable sort of everything)."""
    spans = [s for r in readers if (s := r.span()) is not None]
    if not spans:
        return
    start, end = min(s[0] for s in spans), max(s[1] for s in spans)
    for lo in range(start, end, CHUNK_NS):
        parts = [r.frame(lo, min(lo + CHUNK_NS, end)) for r in readers]
        frame = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
        if len(frame):
            yield frame.sort_values("ts_event", kind="stable")


@dataclass
class _CleanColumns:
    """Clean bars as they come out of the corrections, kept per symbol as engine columns."""

    pending: list[dict[str, Any]] = field(default_factory=list)
    columns: dict[str, list[tuple[np.ndarray, ...]]] = field(default_factory=dict)

    def add(self, clean: list[dict[str, Any]]) -> None:
        self.pending += clean
        if len(self.pending) >= COLUMN_BATCH:
            self.convert()

    def convert(self) -> None:
        per_symbol: dict[str, list[dict[str, Any]]] = {}
        for bar in self.pending:
            per_symbol.setdefault(bar["symbol"], []).append(bar)
        for symbol, rows in per_symbol.items():
            # Converted exactly as for the feature engine: training bars equal what serving sees
            self.columns.setdefault(symbol, []).append(engine_columns(rows))
        self.pending = []

    def bars(self) -> list[CleanBars]:
        self.convert()
        return [
            CleanBars(symbol, *(np.concatenate(c) for c in zip(*parts, strict=True)))
            for symbol, parts in sorted(self.columns.items())
        ]


def load_bars(
    sources: list[BarSource] | list[Path], config: CorrectionConfig | None = None
) -> tuple[list[CleanBars], dict[str, Any]]:
    """Read, correct (with the agent's rules, as a stream) and split the bars by symbol.

    `sources`: `BarSource`s, or paths/`SYMBOL=PATH` strings (read whole). Returns the clean
    bars of every symbol and a report: the sources and their ranges, per-file sha256 (each day
    file read, for a folder), the bars whose volume was missing (read as 0), the bars of
    calendar spreads skipped (`is_calendar_spread`: their prices cross zero, no level a return
    is taken of), the corrections counters (`clean`, `corrected.*`, `rejected.*`,
    `synthetic`, ...), bars per symbol, and the seconds spent reading and correcting.
    """
    if not sources:
        raise DataError("no --data given")
    given = [s if isinstance(s, BarSource) else BarSource.parse(s) for s in sources]
    readers = [open_source(s) for s in given]
    started, reading, raw, no_volume = time.perf_counter(), [0.0], [0], [0]
    spreads: Counter[str] = Counter()  # a calendar spread's price is no level a return is taken of

    def raw_bars() -> Iterator[dict[str, Any]]:
        chunks = raw_chunks(readers)
        while True:
            read_from = time.perf_counter()
            frame = next(chunks, None)
            reading[0] += time.perf_counter() - read_from
            if frame is None:
                return
            raw[0] += len(frame)
            no_volume[0] += int(frame["volume"].isna().sum())  # read as 0: said, not hidden
            for bar in bars_from_frame(frame, source="training"):
                if is_calendar_spread(bar["symbol"]):
                    spreads[bar["symbol"]] += 1
                else:
                    yield bar

    stats, clean = CorrectionStats(), _CleanColumns()
    states: dict[str, SymbolState] = {}
    for step in correct_steps(raw_bars(), config, stats, states):
        clean.add(step.clean)
    bars = clean.bars()
    if not bars:
        what = "no bar in its range" if raw[0] == 0 else "no bar survived the corrections"
        if spreads:
            what += f" ({sum(spreads.values()):,} bars of calendar spreads skipped: train on "
            what += "outright contracts)"
        raise DataError(f"--data {' '.join(str(s) for s in given)}: {what}")
    report = {
        "sources": [s.describe() for s in given],
        "files": {path: digest for r in readers for path, digest in r.files.items()},
        "raw_bars": raw[0],
        "spread_bars_skipped": dict(spreads),
        "volume_missing_read_as_zero": no_volume[0],
        "corrections": stats.as_dict(),
        "bars_per_symbol": {b.symbol: len(b) for b in bars},
        "seconds": {
            "read": reading[0],
            "corrections": time.perf_counter() - started - reading[0],
        },
    }
    return bars, report


def data_fingerprint(report: dict[str, Any]) -> str:
    """One hash of the input files' contents (order-independent)."""
    hashes = sorted(report["files"].values())
    return hashlib.sha256("".join(hashes).encode()).hexdigest()
