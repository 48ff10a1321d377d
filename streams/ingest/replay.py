"""Replay DBN files into `bars.raw`: every OHLCV record either produced or counted as skipped
with a reason, so `read == produced + sum(skipped)` when nothing failed.

Files are checked before anything is sent (exists, is DBN, supported schema, symbol filter
matches), then opened again one at a time and streamed in the order given (a file changed in
between fails where it changed); each file's records keep their order; with the symbol as the
key, that is per-instrument order on the topic.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from itertools import pairwise
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import orjson
from tqdm import tqdm

from streams.ingest.bar_json import encode_bars, source_json
from streams.ingest.dbn_source import OHLCV_SCHEMAS, DbnReader
from streams.ingest.errors import BrokerDown, UnsupportedSchema
from streams.ingest.producer import BarProducer
from streams.ingest.resume import resume_leads
from streams.ingest.rolls import Continuity, Lead, Roll
from streams.ingest.symbols import SymbolBook, SymbolFilter, Verdict, check_filter
from streams.kafka import BrokerUnavailable
from streams.settings import Settings

log = logging.getLogger("barcast.replay")

DEFINITION_SCHEMA = "definition"


class Skip(StrEnum):
    """Why a record read from a file was not produced."""

    UNMAPPED = "unmapped"  # no raw symbol known for its instrument_id
    SYMBOL_FILTER = "symbol_filter"
    SPREAD = "spread"
    TIME_RANGE = "time_range"
    NON_OHLCV = "non_ohlcv"
    NOT_LEAD = "not_lead"  # BARCAST_FOLLOW=lead: not its product's lead contract


@dataclass(frozen=True)
class ReplayOptions:
    files: tuple[Path, ...]
    topic: str
    speed: float | None = None  # None: as fast as the broker takes it
    symbols: tuple[str, ...] = ()
    start_ns: int | None = None
    end_ns: int | None = None
    keep_spreads: bool = False
    dry_run: bool = False
    end_control: bool = True  # False: more data follows in another run (day-by-day replays)


@dataclass
class ReplaySummary:
    topic: str
    dry_run: bool
    files: int = 0
    read: int = 0
    encoded: int = 0
    produced: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in Skip})
    non_ohlcv: dict[str, int] = field(default_factory=dict)
    rolls: int = 0
    bytes: int = 0
    dbn_bytes: int = 0
    seconds: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["records_per_s"] = round(self.read / self.seconds) if self.seconds > 0 else 0
        out["seconds"] = round(self.seconds, 3)
        return out

    def to_json(self) -> str:
        return orjson.dumps(self.as_dict()).decode()


class Pacer:
    """Holds bars back until their `ts_event`, scaled by `speed`, has come on the wall clock.

    The clock is anchored at the first bar and re-anchored if event time goes backwards, so
    bars out of order are sent at once instead of stalling the replay.
    """

    def __init__(
        self,
        speed: float,
        wait: Callable[[float], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.speed = speed
        self._wait = wait
        self._clock = clock
        self._anchor: tuple[float, int] | None = None

    def groups(self, ts_event: np.ndarray) -> Iterator[tuple[int, int]]:
        """(start, stop) runs of equal ts_event, each yielded once it is due."""
        changes = np.flatnonzero(ts_event[1:] != ts_event[:-1]) + 1
        bounds = [0, *changes.tolist(), len(ts_event)]
        for start, stop in pairwise(bounds):
            ts = int(ts_event[start])
            if self._anchor is None or ts < self._anchor[1]:
                self._anchor = (self._clock(), ts)
            due = self._anchor[0] + (ts - self._anchor[1]) / 1e9 / self.speed
            while (delay := due - self._clock()) > 0:
                self._wait(min(delay, 0.5))
            yield start, stop


def check_schema(reader: DbnReader) -> None:
    """Refuse a file replay does not take (`UnsupportedSchema`)."""
    schema = reader.schema
    if schema is not None and schema not in OHLCV_SCHEMAS and schema != DEFINITION_SCHEMA:
        raise UnsupportedSchema(
            f"{reader.name}: schema {schema} is not supported; replay takes OHLCV files "
            f"({', '.join(OHLCV_SCHEMAS)}), definition files (for symbology) and live "
            f"recordings"
        )


class Replay:
    """One `barcast replay` run; `summary` holds its progress even when `run` raises."""

    def __init__(self, settings: Settings, options: ReplayOptions, progress: TextIO | None = None):
        self.settings = settings
        self.options = options
        self.summary = ReplaySummary(topic=options.topic, dry_run=options.dry_run)
        self._progress_stream = progress
        self._unmapped: set[int] = set()
        self._continuity = Continuity(SymbolBook())

    def run(self) -> ReplaySummary:
        started = time.monotonic()
        sink: BarProducer | None = None
        try:
            symbols = SymbolFilter(self.options.symbols)
            book, complete, bar_files = self._read_headers(symbols)
            names = [str(p) for p in self.options.files]
            if symbols.active and complete:
                check_filter(symbols, book, names)
            if not self.options.dry_run:
                sink = BarProducer(self.settings, self.options.topic)
            self._continuity = Continuity(
                book, self.settings.key_by, self.settings.follow, self._published_leads(sink)
            )
            # the definition files, read already, count in the total as in the bar's progress
            total = self.summary.bytes + sum(size for _, size in bar_files)
            with self._progress_bar(total) as progress:
                # One file open at a time: years of daily files outnumber a process's files.
                for path, _ in bar_files:
                    with DbnReader(path) as reader:
                        self._read_file(reader, book, symbols, sink, progress)
            if symbols.active and not complete:
                check_filter(symbols, book, names)
            if sink is not None and self.options.end_control:
                # The end of the data completes its last minute: the workers decide held spike
                # candidates and flush their batches. A run that more data follows sends none,
                # so the next run's bars decide what this one's last bars left open.
                sink.send_control(time.time_ns())
        finally:
            if sink is not None:
                self.summary.produced = self.summary.encoded - sink.flush()
            self.summary.seconds = time.monotonic() - started
            self._report_unmapped()
        if sink is not None:
            sink.check()
        return self.summary

    def _read_headers(
        self, symbols: SymbolFilter
    ) -> tuple[SymbolBook, bool, list[tuple[Path, int]]]:
        """Every file's header checked and its symbology in a book, definition files read
        whole; whether every bar file names its instruments in its metadata, and the bar files
        with their sizes (the progress bar's total)."""
        book, complete, bar_files = SymbolBook(), True, []
        for path in self.options.files:
            with DbnReader(path) as reader:
                check_schema(reader)
                named = book.add_metadata(reader.metadata)
                if reader.schema == DEFINITION_SCHEMA:
                    self._read_file(reader, book, symbols, None)
                else:
                    complete = complete and named
                    bar_files.append((Path(path), reader.file_size))
        return book, complete, bar_files

    def _published_leads(self, sink: BarProducer | None) -> dict[str, Lead]:
        """Following the lead into a topic that holds bars (a replay of the day after the last
        one's), each product's lead as last published there (`resume_leads`)."""
        if sink is None or self.settings.follow != "lead":
            return {}
        try:
            return resume_leads(self.settings, self.options.topic)
        except BrokerUnavailable as exc:
            raise BrokerDown(str(exc)) from None

    def _progress_bar(self, total_bytes: int) -> tqdm:
        """Bytes of input read (known up front even for compressed files), with rate and ETA;
        drawn only on a terminal (`disable=None`), so logs and pipes get the JSON summary alone."""
        stream = self._progress_stream
        return tqdm(
            total=total_bytes,
            file=stream,
            disable=None if stream is not None else True,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc="replay",
            mininterval=0.1,
        )

    def _read_file(
        self,
        reader: DbnReader,
        book: SymbolBook,
        symbols: SymbolFilter,
        sink: BarProducer | None,
        progress: tqdm | None = None,
    ) -> None:
        source = source_json(f"replay:{reader.path.name}")
        wait = sink.poll if sink is not None else time.sleep
        pacer = Pacer(self.options.speed, wait) if self.options.speed else None
        done = self.summary.bytes
        try:
            for segment in reader.segments():
                if isinstance(segment, np.ndarray):
                    self._bars(segment, book, symbols, sink, source, pacer)
                else:
                    self._others(segment, book)
                if progress is not None:
                    progress.set_postfix_str(f"{self.summary.read:,} records", refresh=False)
                    progress.update(done + reader.file_pos - progress.n)
        finally:
            self.summary.bytes = done + reader.file_pos
            self.summary.dbn_bytes += reader.offset
        self.summary.files += 1

    def _others(self, records: list[Any], book: SymbolBook) -> None:
        for record in records:
            book.add_record(record)
            kind = str(record.rtype)
            self.summary.non_ohlcv[kind] = self.summary.non_ohlcv.get(kind, 0) + 1
        self.summary.read += len(records)
        self.summary.skipped[Skip.NON_OHLCV] += len(records)

    def _bars(
        self,
        bars: np.ndarray,
        book: SymbolBook,
        symbols: SymbolFilter,
        sink: BarProducer | None,
        source: np.ndarray,
        pacer: Pacer | None,
    ) -> None:
        summary = self.summary
        summary.read += len(bars)
        ts_event = bars["ts_event"]
        index = book.resolve(bars["instrument_id"], ts_event)
        mapped = index >= 0
        if not mapped.all():
            self._unmapped.update(np.unique(bars["instrument_id"][~mapped]).tolist())
        verdicts = book.verdicts(symbols, self.options.keep_spreads)
        verdict = np.where(mapped, verdicts[np.maximum(index, 0)] if len(verdicts) else 0, 255)
        reasons = Counter(
            {
                Skip.UNMAPPED: int((~mapped).sum()),
                Skip.SYMBOL_FILTER: int((verdict == Verdict.FILTERED).sum()),
                Skip.SPREAD: int((verdict == Verdict.SPREAD).sum()),
            }
        )
        keep = verdict == Verdict.KEEP
        start, end = self.options.start_ns, self.options.end_ns
        if start is not None or end is not None:
            in_range = (ts_event >= (start or 0)) & (ts_event < (end or np.iinfo(np.uint64).max))
            reasons[Skip.TIME_RANGE] = int((keep & ~in_range).sum())
            keep &= in_range
        for reason, count in reasons.items():
            summary.skipped[reason] += count
        if not keep.all():
            bars, index = bars[keep], index[keep]
        routed = self._continuity.route(bars, index)
        rolls = routed.rolls
        if not routed.keep.all():
            summary.skipped[Skip.NOT_LEAD] += int((~routed.keep).sum())
            before = np.cumsum(routed.keep) - routed.keep  # kept bars before each row
            rolls = [(int(before[row]), roll) for row, roll in rolls]
            bars, index = bars[routed.keep], index[routed.keep]
            routed.keys = routed.keys[routed.keep]
        values, keys, timestamps = encode_bars(bars, routed.keys, book, source, index)
        summary.encoded += len(values)
        summary.rolls += len(rolls)
        start = 0
        for stop, roll in [*rolls, (len(values), None)]:
            self._send(sink, pacer, bars, (values, keys, timestamps), start, stop)
            if roll is not None:
                self._roll(sink, roll)
            start = stop

    def _send(
        self,
        sink: BarProducer | None,
        pacer: Pacer | None,
        bars: np.ndarray,
        encoded: tuple[list[bytes], list[bytes], list[int]],
        start: int,
        stop: int,
    ) -> None:
        """Bars [start, stop) of a batch, paced."""
        if stop == start:
            return
        values, keys, timestamps = encoded
        if pacer is None:
            groups: Iterator[tuple[int, int]] = iter([(0, stop - start)])
        else:
            groups = pacer.groups(bars["ts_event"][start:stop])
        for lo, hi in groups:
            if sink is not None:
                lo, hi = lo + start, hi + start
                sink.send_bars(values[lo:hi], keys[lo:hi], timestamps[lo:hi])

    def _roll(self, sink: BarProducer | None, roll: Roll) -> None:
        log.info("%s", roll.describe())
        if sink is not None:
            sink.send_roll(roll.record())

    def _report_unmapped(self) -> None:
        if self._unmapped:
            shown = ", ".join(str(i) for i in sorted(self._unmapped)[:10])
            log.warning(
                "skipped %d bars of instrument_id %s%s: no raw symbol in the files' metadata or "
                "stream; add the matching definition file to the replay to map them",
                self.summary.skipped[Skip.UNMAPPED],
                shown,
                " and more" if len(self._unmapped) > 10 else "",
            )
