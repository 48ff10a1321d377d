"""Databento Live into `bars.raw`, with gap recovery across disconnects.

Each connection is a fresh `databento.Live` client. When one drops, the next subscribes with
`start` = the newest `ts_event` published (Databento's intraday replay resends from there,
inclusive), and a bar not newer than the last one published for its instrument is dropped and
counted as `resent`, whatever the gateway sends again: nothing is lost or doubled
(`streams.ingest.resume`). A start older than the gateway's replay window is clamped to the
window; the span before it is backfilled from Databento Historical with `backfill`, or else
recorded as an OUTAGE control record on every partition, between the bars before it and after.

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
from collections.abc import Callable
from typing import Any

import databento_dbn
import numpy as np
import orjson

from streams import schema
from streams.ingest import backfill
from streams.ingest.bar_json import encode_bars, source_json
from streams.ingest.dbn_source import OHLCV_DTYPE
from streams.ingest.errors import AuthFailed, GatewayUnavailable
from streams.ingest.live_options import LiveOptions, LiveStats
from streams.ingest.producer import BarProducer
from streams.ingest.resume import Published, earliest_start, interval_ns, interval_start
from streams.ingest.rolls import Continuity
from streams.ingest.symbols import SymbolBook, SymbolFilter, Verdict

log = logging.getLogger("barcast.live")

UNMAPPED = "unmapped_symbol"  # the dead-letter reason code of a bar no symbol source names
FATAL_ERROR_CODES = frozenset(
    {databento_dbn.ErrorCode.AUTH_FAILED, databento_dbn.ErrorCode.API_KEY_DEACTIVATED}
)
# The gateway skips records after these, and goes on: the span is backfilled or an outage
LOST_ERROR_CODES = frozenset(
    {
        databento_dbn.ErrorCode.REPLAY_DATA_AGED_OUT,
        databento_dbn.ErrorCode.SKIPPED_RECORDS_AFTER_SLOW_READING,
    }
)
# databento raises these for transport problems; any other failure to subscribe is the gateway
# refusing the session (bad key, no entitlement), which retrying cannot fix.
TRANSIENT_PREFIXES = ("Connection to", "Authentication with")
EVERY_SYMBOL = SymbolFilter()  # the subscription chose the symbols


def redact(text: str, key: str) -> str:
    return text.replace(key, "db-***") if key else text


class _Disconnected(Exception):
    """A session ended without being asked to; the loop reconnects."""


class LiveIngest:
    """Runs sessions until `stop()`; raises `AuthFailed` or `GatewayUnavailable` when
    reconnecting cannot help."""

    def __init__(
        self,
        options: LiveOptions,
        key: str,
        sink: BarProducer,
        clock: Callable[[], int] = time.time_ns,
    ):
        self.options = options
        self.stats = LiveStats()
        self._key = key
        self._sink = sink
        self._clock = clock  # the gateway's time: its replay window ends there
        self._book = SymbolBook()
        self._continuity = Continuity(self._book, options.key_by, options.follow, options.leads)
        self._published = Published()
        self._source_name = f"live:{options.dataset}"
        self._source = source_json(self._source_name)
        self._metadata_read = False
        self._unmapped_ids: set[int] = set()
        self._last_control: int | None = None
        self._stop = threading.Event()
        self._client: Any = None
        self._fatal: Exception | None = None
        self._first_connect_ns: int | None = None
        self._settled: int | None = None  # every bar before it published, or an outage
        self._session_start: int | None = None  # the running session's subscription start
        # Lost from here to the next bar the gateway sends; True: through that bar's minute (a
        # slow reader's skip may end within a minute, an aged-out replay's at its start)
        self._aged_out: tuple[int, bool] | None = None

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
            start = self._start()
            heard_before = self._heard()
            try:
                self._session(start)
                reason = "the gateway closed the session"
            except _Disconnected as exc:
                reason = str(exc)
            if self._stop.is_set():
                break
            if self._heard() > heard_before:  # a session that ran: not a failed attempt
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

    def _heard(self) -> int:
        """The records that show a session ran: new bars, and the heartbeats and END_OF_INTERVALs
        a session without bars gets (a weekend, a holiday, a halt); not bars sent again, which
        every resubscription's replay starts with."""
        stats = self.stats
        return stats.bars + stats.heartbeats + stats.controls

    def _resume_from(self) -> int | None:
        resume = self._published.newest
        if resume is None:
            start = self.options.start_ns
            resume = self._first_connect_ns if start is None else start
        if self._settled is not None and (resume is None or resume < self._settled):
            return self._settled
        return resume

    def _start(self) -> int | None:
        """The next subscription's start: where to resume, clamped to the gateway's replay
        window; the span the clamp leaves out backfilled or recorded as an outage. What the
        last session's replay skipped is this one's to replay or recover, not that one's."""
        self._aged_out = None
        wanted = self._resume_from()
        if wanted is None:
            return None
        opts = self.options
        earliest = earliest_start(self._clock(), opts.replay_window_s, opts.schema)
        if wanted >= earliest:
            return wanted
        self._recover(
            wanted, earliest, f"older than the {opts.replay_window_s:.0f} s replay window"
        )
        return earliest

    def _recover(self, start: int, end: int, why: str, settled: int | None = None) -> None:
        """A span the gateway will not replay: backfilled, or else recorded as an outage; every
        bar before `settled` (default: `end`) is then published or inside it."""
        self._settled = end if settled is None else settled
        if self.options.backfill and self._backfill(start, end):
            return
        self._sink.send_outage(start, end)
        self.stats.outages += 1
        log.warning(
            "live: %s to %s is lost (%s): recorded as an outage%s",
            _iso(start),
            _iso(end),
            why,
            "" if self.options.backfill else "; --backfill fetches it from Databento Historical",
        )

    def _backfill(self, start: int, end: int) -> bool:
        """[start, end) from Databento Historical through the live path; False if not had."""
        try:
            fetched = backfill.fetch(
                self._key, self.options.historical_gateway, self.options.subscription(), start, end
            )
        except backfill.BackfillFailed as exc:
            log.warning("live: backfill of %s to %s failed: %s", _iso(start), _iso(end), exc)
            return False
        self._book.add_metadata(fetched.metadata)
        self._book.add_resolution(fetched.names)
        before = self.stats.bars
        for record in fetched.records:
            self._handle(record)
        count = self.stats.bars - before
        self.stats.backfilled += count
        log.info("live: backfilled %d bars of %s to %s", count, _iso(start), _iso(end))
        return True

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
            self._first_connect_ns = interval_start(self._clock(), opts.schema)
        self._fatal = None
        self._metadata_read = False
        self._session_start, self._aged_out = start, None
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
            if record.code in LOST_ERROR_CODES:
                # Skipped (aged out of the replay, or for reading too slowly): lost from where
                # it stands to its next bar.
                start = max(self._session_start or 0, self._published.newest or 0) or None
                slow = record.code == databento_dbn.ErrorCode.SKIPPED_RECORDS_AFTER_SLOW_READING
                self._aged_out = None if start is None else (start, slow)

    def _system(self, record: databento_dbn.SystemMsg) -> None:
        if record.is_heartbeat():
            self.stats.heartbeats += 1
        elif record.code == databento_dbn.SystemCode.END_OF_INTERVAL:
            # Databento stamps it with the interval's exclusive end; the control record, with
            # the start of the interval it closes (its schema in streams.topic_schemas).
            ts = record.ts_event - interval_ns(self.options.schema)
            if self._last_control is None or ts > self._last_control:
                self._last_control = ts
                self._sink.send_control(ts)
                self.stats.controls += 1
        else:
            self.stats.system += 1
            log.info("live: gateway: %s", record.msg)

    def _bar(self, record: databento_dbn.OHLCVMsg) -> None:
        aged_out = self._aged_out
        if aged_out is not None and record.ts_event > aged_out[0]:
            self._aged_out = None
            # Through this bar's minute, its bars still to come published all the same (one
            # sent again is dropped as a repeat)
            end = record.ts_event + (interval_ns(self.options.schema) if aged_out[1] else 0)
            self._recover(aged_out[0], end, "the gateway skipped them", settled=record.ts_event)
        if not self._published.add(int(record.rtype), record.instrument_id, record.ts_event):
            self.stats.resent += 1
            return
        bars = np.frombuffer(bytes(record), dtype=OHLCV_DTYPE)
        index = self._book.resolve(bars["instrument_id"], bars["ts_event"])
        verdicts = self._book.verdicts(EVERY_SYMBOL, self.options.keep_spreads)
        if index[0] < 0:
            self._dead_letter(bars[0])
        elif verdicts[index[0]] == Verdict.SPREAD:
            self.stats.spreads += 1
        else:
            self._publish(bars, index)
        self.stats.last_ts_event = self._published.newest

    def _publish(self, bars: np.ndarray, index: np.ndarray) -> None:
        routed = self._continuity.route(bars, index)
        for _, roll in routed.rolls:
            log.info("live: %s", roll.describe())
            self._sink.send_roll(roll.record())
            self.stats.rolls += 1
        if not routed.keep[0]:
            self.stats.not_lead += 1
            return
        values, keys, timestamps = encode_bars(bars, routed.keys, self._book, self._source, index)
        self._sink.send_bars(values, keys, timestamps)
        self.stats.bars += 1

    def _dead_letter(self, bar: np.void) -> None:
        instrument_id = int(bar["instrument_id"])
        why = (
            f"instrument_id {instrument_id} has no raw symbol: the session named it in neither "
            f"its metadata mappings, a SymbolMappingMsg nor an instrument definition"
        )
        value = {
            name: None if name in ("symbol", "raw_symbol") else int(bar[name])
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
