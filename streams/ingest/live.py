"""Databento Live into `bars.raw`, with gap recovery across disconnects.

Each connection is a fresh `databento.Live` client. When one drops, the next subscribes with
`start` = the newest `ts_event` seen (Databento's intraday replay resends from there,
inclusive), and bars already forwarded are dropped by their (rtype, instrument_id, ts_event), so
nothing is lost or doubled. Bars at that exact timestamp are why `start` is not "newest + 1":
of two instruments stamped the same minute, the connection may have dropped between them.

Symbols are resolved as replay resolves them, by one `SymbolBook`: from the session's metadata
mappings (a gateway replaying a historical file sends only those), instrument definitions and
SymbolMappingMsg records. A bar whose instrument none of them names goes to the dead-letter
topic with the reason `unmapped_symbol`, never only into a count. Calendar spreads, which a
parent subscription includes, are skipped and counted unless `keep_spreads`, as replay does.

END_OF_INTERVAL system messages become one control record per partition, forwarded once per
interval even when a replay repeats them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import databento_dbn
import numpy as np
import orjson

from streams import schema
from streams.ingest.bar_json import encode_bars, source_json
from streams.ingest.dbn_source import OHLCV_DTYPE
from streams.ingest.errors import AuthFailed, GatewayUnavailable
from streams.ingest.producer import BarProducer
from streams.ingest.symbols import SymbolBook, SymbolFilter, Verdict

log = logging.getLogger("barcast.live")

DEFAULT_PORT = 13000
DEDUPE_WINDOW_NS = 10 * 60 * 10**9
UNMAPPED = "unmapped_symbol"  # the dead-letter reason code of a bar no symbol source names
FATAL_ERROR_CODES = frozenset(
    {databento_dbn.ErrorCode.AUTH_FAILED, databento_dbn.ErrorCode.API_KEY_DEACTIVATED}
)
# databento raises these for transport problems; any other failure to subscribe is the gateway
# refusing the session (bad key, no entitlement), which retrying cannot fix.
TRANSIENT_PREFIXES = ("Connection to", "Authentication with")
INTERVAL_NS = {"ohlcv-1s": 10**9, "ohlcv-1m": 60 * 10**9, "ohlcv-1h": 3600 * 10**9}
DAY_NS = 86_400 * 10**9  # ohlcv-1d and ohlcv-eod
EVERY_SYMBOL = SymbolFilter()  # the subscription chose the symbols


def interval_start(ts_ns: int, schema: str) -> int:
    """The start of the bar interval `ts_ns` falls in: a bar is stamped there and sent at its
    end, so a resubscription from a first connection's start replays the bar under way then."""
    return ts_ns - ts_ns % INTERVAL_NS.get(schema, DAY_NS)


def redact(text: str, key: str) -> str:
    return text.replace(key, "db-***") if key else text


@dataclass(frozen=True)
class LiveOptions:
    dataset: str
    schema: str
    stype_in: str
    symbols: tuple[str, ...]
    start_ns: int | None = None
    gateway: str | None = None
    port: int = DEFAULT_PORT
    heartbeat_interval_s: int = 30
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    max_retries: int | None = None  # None: retry forever
    keep_spreads: bool = False


@dataclass
class LiveStats:
    bars: int = 0
    duplicates: int = 0
    unmapped: int = 0  # bars sent to the dead-letter topic
    spreads: int = 0  # calendar spread bars skipped
    controls: int = 0
    heartbeats: int = 0
    system: int = 0
    errors: int = 0
    mappings: int = 0  # SymbolMappingMsg and instrument definition records
    reconnects: int = 0
    last_ts_event: int | None = None

    def to_json(self) -> str:
        return orjson.dumps(asdict(self)).decode()


class RecentKeys:
    """Bar keys forwarded within `window_ns` of event time behind the newest one."""

    def __init__(self, window_ns: int = DEDUPE_WINDOW_NS):
        self.window_ns = window_ns
        self.newest: int | None = None
        self._keys: set[tuple[int, int, int]] = set()
        self._order: deque[tuple[int, tuple[int, int, int]]] = deque()

    def add(self, key: tuple[int, int, int]) -> bool:
        """Remember `key` = (rtype, instrument_id, ts_event); False if it was already seen."""
        if key in self._keys:
            return False
        ts = key[2]
        self._keys.add(key)
        self._order.append((ts, key))
        if self.newest is None or ts > self.newest:
            self.newest = ts
        horizon = self.newest - self.window_ns
        while self._order and self._order[0][0] < horizon:
            self._keys.discard(self._order.popleft()[1])
        return True


class _Disconnected(Exception):
    """A session ended without being asked to; the loop reconnects."""


class LiveIngest:
    """Runs sessions until `stop()`; raises `AuthFailed` or `GatewayUnavailable` when
    reconnecting cannot help."""

    def __init__(self, options: LiveOptions, key: str, sink: BarProducer):
        self.options = options
        self.stats = LiveStats()
        self._key = key
        self._sink = sink
        self._book = SymbolBook()
        self._seen = RecentKeys()
        self._source_name = f"live:{options.dataset}"
        self._source = source_json(self._source_name)
        self._metadata_read = False
        self._unmapped_ids: set[int] = set()
        self._last_control: int | None = None
        self._stop = threading.Event()
        self._client: Any = None
        self._fatal: Exception | None = None
        self._first_connect_ns: int | None = None

    def stop(self) -> None:
        """End the session in progress (its queued records are still forwarded) and return
        from `run`. Safe to call from a signal handler or another thread."""
        self._stop.set()
        client = self._client
        if client is not None:
            client.stop()

    def run(self) -> None:
        backoff = self.options.backoff_s
        failures = 0
        while not self._stop.is_set():
            start = self._resume_from()
            bars_before = self.stats.bars
            try:
                self._session(start)
                reason = "the gateway closed the session"
            except _Disconnected as exc:
                reason = str(exc)
            if self._stop.is_set():
                break
            if self.stats.bars > bars_before:
                backoff, failures = self.options.backoff_s, 0
            failures += 1
            if self.options.max_retries is not None and failures > self.options.max_retries:
                raise GatewayUnavailable(
                    f"gave up after {failures} attempts: {reason}; check the gateway address "
                    f"and your network, then rerun with --start to backfill the gap"
                )
            self.stats.reconnects += 1
            resume = self._resume_from()
            log.warning(
                "live: disconnected (%s); reconnecting in %.1fs, replaying from %s",
                reason,
                backoff,
                "now" if resume is None else _iso(resume),
            )
            self._stop.wait(backoff)
            backoff = min(backoff * 2, self.options.max_backoff_s)

    def _resume_from(self) -> int | None:
        if self._seen.newest is not None:
            return self._seen.newest
        if self.options.start_ns is not None:
            return self.options.start_ns
        return self._first_connect_ns

    def _session(self, start: int | None) -> None:
        import databento
        from databento.common.error import BentoError

        opts = self.options
        try:
            client = databento.Live(
                key=self._key,
                gateway=opts.gateway,
                port=opts.port,
                heartbeat_interval_s=opts.heartbeat_interval_s,
            )
        except ValueError as exc:
            raise AuthFailed(
                f"Databento rejected the API key format ({redact(str(exc), self._key)}); "
                f"set DATABENTO_API_KEY to the key from your Databento portal"
            ) from None
        if self._first_connect_ns is None:
            self._first_connect_ns = interval_start(time.time_ns(), opts.schema)
        self._fatal = None
        self._metadata_read = False
        # A callback (run on the client's event loop) sees every record from the first byte;
        # the client's iterator only queues records once it is enabled, after the session has
        # started, and can miss the symbol mappings sent first.
        client.add_callback(self._on_record, self._on_callback_error)
        self._client = client
        try:
            try:
                client.subscribe(
                    dataset=opts.dataset,
                    schema=opts.schema,
                    symbols=list(opts.symbols),
                    stype_in=opts.stype_in,
                    start=start,
                )
            except BentoError as exc:
                text = redact(str(exc), self._key)
                if text.startswith(TRANSIENT_PREFIXES):
                    raise _Disconnected(text) from None
                raise AuthFailed(
                    f"the Databento gateway refused the session: {text}; check "
                    f"DATABENTO_API_KEY and that it is entitled to {opts.dataset}"
                ) from None
            if self._stop.is_set():
                return
            client.start()
            try:
                client.block_for_close()
            except BentoError as exc:
                if self._fatal is None:
                    raise _Disconnected(redact(str(exc), self._key) or "connection lost") from None
            if self._fatal is not None:
                raise self._fatal
        finally:
            self._client = None
            client.terminate()

    def _on_record(self, record: Any) -> None:
        if self._fatal is None:
            if not self._metadata_read:
                self._read_metadata()
            self._handle(record)

    def _read_metadata(self) -> None:
        """The session's metadata arrives before its first record; a gateway that replays a
        historical file names the instruments only in its mappings."""
        client = self._client
        metadata = None if client is None else client.metadata
        if metadata is not None:
            self._metadata_read = True
            self._book.add_metadata(metadata)

    def _on_callback_error(self, exc: Exception) -> None:
        if self._fatal is None:
            self._fatal = exc
            client = self._client
            if client is not None:
                client.stop()

    def _handle(self, record: Any) -> None:
        if isinstance(record, databento_dbn.OHLCVMsg):
            self._bar(record)
        elif self._book.add_record(record):  # a SymbolMappingMsg or instrument definition
            self.stats.mappings += 1
        elif isinstance(record, databento_dbn.SystemMsg):
            self._system(record)
        elif isinstance(record, databento_dbn.ErrorMsg):
            self.stats.errors += 1
            text = redact(record.err, self._key)
            log.warning("live: gateway error %s: %s", record.code, text)
            if record.code in FATAL_ERROR_CODES:
                raise AuthFailed(f"the Databento gateway ended the session: {text}")

    def _system(self, record: databento_dbn.SystemMsg) -> None:
        if record.is_heartbeat():
            self.stats.heartbeats += 1
        elif record.code == databento_dbn.SystemCode.END_OF_INTERVAL:
            ts = record.ts_event
            if self._last_control is None or ts > self._last_control:
                self._last_control = ts
                self._sink.send_control(ts)
                self.stats.controls += 1
        else:
            self.stats.system += 1
            log.info("live: gateway: %s", record.msg)

    def _bar(self, record: databento_dbn.OHLCVMsg) -> None:
        if not self._seen.add((int(record.rtype), record.instrument_id, record.ts_event)):
            self.stats.duplicates += 1
            return
        bars = np.frombuffer(bytes(record), dtype=OHLCV_DTYPE)
        index = self._book.resolve(bars["instrument_id"], bars["ts_event"])
        verdicts = self._book.verdicts(EVERY_SYMBOL, self.options.keep_spreads)
        if index[0] < 0:
            self._dead_letter(bars[0])
        elif verdicts[index[0]] == Verdict.SPREAD:
            self.stats.spreads += 1
        else:
            values, keys, timestamps = encode_bars(bars, index, self._book, self._source)
            self._sink.send_bars(values, keys, timestamps)
            self.stats.bars += 1
        self.stats.last_ts_event = self._seen.newest

    def _dead_letter(self, bar: np.void) -> None:
        instrument_id = int(bar["instrument_id"])
        why = (
            f"instrument_id {instrument_id} has no raw symbol: the session named it in neither "
            f"its metadata mappings, a SymbolMappingMsg nor an instrument definition"
        )
        value = {
            name: None if name == "symbol" else int(bar[name])
            for name in schema.RawBar.__annotations__
            if name != "source"
        }
        value["source"] = self._source_name
        self._sink.send_dead_letter(
            str(instrument_id).encode(),
            orjson.dumps(value),
            int(bar["ts_event"]) // 1_000_000,
            UNMAPPED,
            why,
        )
        self.stats.unmapped += 1
        if instrument_id not in self._unmapped_ids:  # once per instrument, not once a bar
            self._unmapped_ids.add(instrument_id)
            log.warning("live: %s; its bars go to the dead-letter topic", why)


def _iso(ts_ns: int) -> str:
    return np.datetime64(ts_ns, "ns").astype(str) + "Z"
