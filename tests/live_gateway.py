"""A local Databento Live gateway for tests: the unmodified `databento.Live` client connects to
it (`gateway="127.0.0.1", port=gateway.port`) and gets a DBN file as a live session.

Protocol, as databento-python's `live/protocol.py` and `live/gateway.py` speak it: the gateway
greets with `lsg_version=...` and a `cram=...` challenge; the client answers
`auth=sha256("{cram}|{key}")-{last 5 of key}|dataset=...|encoding=dbn|...`; the gateway replies
`success=1|session_id=...` (or `success=0|error=...`). The client then sends subscription lines
(`schema=...|stype_in=...|symbols=...|start=...|...`) and `start_session=0`, after which the
gateway streams DBN: metadata, then records. Subscriptions name parents (`ES.FUT`) or raw
symbols; the gateway resolves them against the file with its own rules, announces each
instrument with a SymbolMappingMsg, reports unresolvable symbols with an ErrorMsg, acknowledges
the subscription, streams the bars at or after `start` (intraday replay, inclusive), ends each
minute with an END_OF_INTERVAL system message (stamped, as Databento's, with the minute's
exclusive end), and sends heartbeats while idle.

How it names the instruments is `mappings`: SymbolMappingMsg records (a live session), only the
file's own symbol mappings in the metadata (a gateway replaying a historical file, as
Databento's test gateway does), or not at all.

Failures a test asks for: `hang_ups` cuts the n-th session's TCP connection after that many bars
(no goodbye, like a network failure); `resend_all` sends the whole file on every connection,
whatever the start (Databento's own mock gateway does). The gateway keeps event time (`clock`):
a bar is sent at its interval's end, and a hang-up keeps the client away `downtime_s`; with
`replay_window_s` it replays only that far back: an older start is refused
(INVALID_SUBSCRIPTION), or with `ages_out` streamed from the window's start after a
REPLAY_DATA_AGED_OUT error, the minutes before it skipped. `slow_skip` (n, k): the first
session skips k bars after n, then says SKIPPED_RECORDS_AFTER_SLOW_READING, as the gateway does
to a client that reads too slowly.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import groupby
from pathlib import Path
from types import SimpleNamespace, TracebackType

import databento
import databento_dbn
from databento_dbn import SType, SystemCode

LSG_VERSION = "0.0.0-barcast-tests"
MONTH_CODES = "FGHJKMNQUVXZ"
MINUTE_NS = 60 * 10**9


class Mappings(StrEnum):
    """Where a session names its instruments."""

    RECORDS = "records"  # SymbolMappingMsg records after the metadata
    METADATA = "metadata"  # the file's raw_symbol -> instrument_id mappings in the metadata
    NONE = "none"


@dataclass
class Subscription:
    schema: str
    stype_in: str
    symbols: list[str]
    start: int | None


@dataclass
class Session:
    """What one client connection did, for tests to assert on."""

    authenticated: bool = False
    heartbeat_interval_s: int | None = None
    subscriptions: list[Subscription] = field(default_factory=list)
    bars_sent: int = 0
    aborted: bool = False
    to_skip: int = 0  # bars still to skip at `slow_skip`'s point


def _fields(line: bytes) -> dict[str, str]:
    pairs = (token.partition("=") for token in line.decode().strip().split("|"))
    return {k: v for k, _, v in pairs}


def cram_response(challenge: str, key: str) -> str:
    digest = hashlib.sha256(f"{challenge}|{key}".encode()).hexdigest()
    return f"{digest}-{key[-5:]}"


def resolves(subscribed: str, stype_in: str, raw_symbol: str) -> bool:
    if stype_in == SType.PARENT.value and subscribed.endswith(".FUT"):
        root = re.escape(subscribed[: -len(".FUT")])
        return re.fullmatch(rf"{root}[{MONTH_CODES}]\d{{1,2}}", raw_symbol) is not None
    return subscribed == raw_symbol


class LiveGateway:
    """Serves `dbn_path` (ohlcv-1m) to every session; the failures are the module's."""

    def __init__(
        self,
        dbn_path: Path,
        api_key: str,
        hang_ups: Sequence[int] = (),
        idle_heartbeat_s: float = 0.2,
        mappings: Mappings = Mappings.RECORDS,
        resend_all: bool = False,
        downtime_s: float = 0.0,
        replay_window_s: float | None = None,
        ages_out: bool = False,
        slow_skip: tuple[int, int] | None = None,
    ):
        store = databento.DBNStore.from_file(dbn_path)
        self.dataset = store.metadata.dataset
        self.mappings = mappings
        self.file_mappings = [
            SimpleNamespace(raw_symbol=raw, intervals=[SimpleNamespace(**iv) for iv in ivs])
            for raw, ivs in store.metadata.mappings.items()
        ]
        self.bars = [r for r in store if isinstance(r, databento_dbn.OHLCVMsg)]
        self.symbols = {
            int(iv["symbol"]): raw
            for raw, intervals in store.metadata.mappings.items()
            for iv in intervals
        }
        self.api_key = api_key
        self.hang_ups, self.resend_all = tuple(hang_ups), resend_all
        self.downtime_ns = int(downtime_s * 1e9)
        self.window_ns = None if replay_window_s is None else int(replay_window_s * 1e9)
        self.ages_out = ages_out
        self.slow_skip = slow_skip
        self.now = self.bars[0].ts_event if self.bars else 0  # event time: the first bar is due
        self.idle_heartbeat_s = idle_heartbeat_s
        self.sessions: list[Session] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def clock(self) -> int:
        """The gateway's time, in event time (UNIX ns)."""
        return self.now

    def __enter__(self) -> LiveGateway:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = Session()
        self.sessions.append(session)
        try:
            if await self._handshake(session, reader, writer):
                await self._stream(session, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; that is its right
        finally:
            if not session.aborted:
                writer.close()

    async def _handshake(
        self, session: Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        challenge = secrets.token_hex(16)
        writer.write(f"lsg_version={LSG_VERSION}\ncram={challenge}\n".encode())
        await writer.drain()
        auth = _fields(await reader.readline())
        if auth.get("auth") != cram_response(challenge, self.api_key):
            writer.write(b"success=0|error=Authentication failed.\n")
            await writer.drain()
            return False
        session.authenticated = True
        heartbeat = auth.get("heartbeat_interval_s")
        session.heartbeat_interval_s = int(heartbeat) if heartbeat else None
        writer.write(f"success=1|session_id={len(self.sessions)}\n".encode())
        await writer.drain()
        while True:
            line = await reader.readline()
            if not line:
                return False
            request = _fields(line)
            if "start_session" in request:
                return True
            start = request.get("start")
            session.subscriptions.append(
                Subscription(
                    schema=request["schema"],
                    stype_in=request["stype_in"],
                    symbols=request["symbols"].split(","),
                    start=int(start) if start else None,
                )
            )

    def _resolve(self, sub: Subscription) -> tuple[dict[int, str], list[str]]:
        """({instrument_id: subscribed symbol}, [symbols that resolve to nothing])."""
        found: dict[int, str] = {}
        for symbol in sub.symbols:
            for iid, raw in self.symbols.items():
                if resolves(symbol, sub.stype_in, raw):
                    found[iid] = symbol
        return found, [s for s in sub.symbols if s not in found.values()]

    async def _stream(
        self, session: Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        sub = session.subscriptions[0]
        start = self.now if sub.start is None else sub.start
        out: list[bytes] = []
        if self.window_ns is not None and start < self.now - self.window_ns:
            if not self.ages_out:
                writer.write(self._refusal(sub, start))
                return
            start = self.now - self.window_ns
            out.append(bytes(databento_dbn.ErrorMsg(
                self.now, "Replay data aged out", False,
                databento_dbn.ErrorCode.REPLAY_DATA_AGED_OUT,
            )))  # fmt: skip
        if self.resend_all:
            start = self.bars[0].ts_event
        resolved, missing = self._resolve(sub)
        out.insert(0, self._metadata(sub, start).encode())
        for iid, subscribed in resolved.items() if self.mappings == Mappings.RECORDS else ():
            out.append(bytes(databento_dbn.SymbolMappingMsg(
                1, iid, start, SType(sub.stype_in), subscribed, SType.RAW_SYMBOL,
                self.symbols[iid], start, databento_dbn.UNDEF_TIMESTAMP,
            )))  # fmt: skip
        for symbol in missing:
            out.append(bytes(databento_dbn.ErrorMsg(
                start, f"Failed to resolve symbol: {symbol}", True,
                databento_dbn.ErrorCode.SYMBOL_RESOLUTION_FAILED,
            )))  # fmt: skip
        out.append(self._system(start, "Subscription 0 succeeded", SystemCode.SUBSCRIPTION_ACK))
        writer.write(b"".join(out))
        index = self.sessions.index(session)
        cut = self.hang_ups[index] if index < len(self.hang_ups) else None
        if self.slow_skip and index == 0:
            session.to_skip = self.slow_skip[1]
        end_of_interval = f"End of interval for {sub.schema}"
        for ts, group in self._intervals(start, resolved):
            for bar in group:
                if session.bars_sent == cut:
                    session.aborted = True
                    writer.transport.abort()
                    self.now += self.downtime_ns
                    return
                if self._skipped(session, bar, writer):
                    continue
                writer.write(bytes(bar))
                session.bars_sent += 1
            # Databento stamps it with the interval's exclusive end: 14:31 follows the bars
            # stamped 14:30
            writer.write(self._system(ts + MINUTE_NS, end_of_interval, SystemCode.END_OF_INTERVAL))
            self.now = max(self.now, ts + MINUTE_NS)
            await writer.drain()
        while True:  # idle, as a live feed is between bars: heartbeats until the client leaves
            try:
                if not await asyncio.wait_for(reader.read(1024), self.idle_heartbeat_s):
                    return
            except TimeoutError:
                writer.write(self._system(time.time_ns(), "Heartbeat", SystemCode.HEARTBEAT))
                await writer.drain()

    def _skipped(
        self, session: Session, bar: databento_dbn.OHLCVMsg, writer: asyncio.StreamWriter
    ) -> bool:
        """Whether `slow_skip` skips `bar`; after the last one skipped, the error saying so."""
        if not (session.to_skip and self.slow_skip and session.bars_sent == self.slow_skip[0]):
            return False
        session.to_skip -= 1
        if not session.to_skip:
            writer.write(bytes(databento_dbn.ErrorMsg(
                bar.ts_event, "Skipped records after slow reading", False,
                databento_dbn.ErrorCode.SKIPPED_RECORDS_AFTER_SLOW_READING,
            )))  # fmt: skip
        return True

    def _refusal(self, sub: Subscription, start: int) -> bytes:
        """The session's metadata and the error that refuses a start outside the window."""
        error = databento_dbn.ErrorMsg(
            self.now, f"start {start} is before the intraday replay window", True,
            databento_dbn.ErrorCode.INVALID_SUBSCRIPTION,
        )  # fmt: skip
        return self._metadata(sub, start).encode() + bytes(error)

    def _metadata(self, sub: Subscription, start: int) -> databento_dbn.Metadata:
        if self.mappings == Mappings.METADATA:  # the historical file's own symbology
            stype_in, mappings = SType.RAW_SYMBOL, self.file_mappings
        else:
            stype_in, mappings = SType(sub.stype_in), []
        return databento_dbn.Metadata(
            self.dataset, start, stype_in, SType.INSTRUMENT_ID, databento_dbn.Schema(sub.schema),
            sub.symbols, [], [], mappings, None, None, False, 3,
        )  # fmt: skip

    def _intervals(
        self, start: int, resolved: dict[int, str]
    ) -> Iterator[tuple[int, list[databento_dbn.OHLCVMsg]]]:
        bars = [b for b in self.bars if b.ts_event >= start and b.instrument_id in resolved]
        for ts, group in groupby(bars, key=lambda b: b.ts_event):
            yield ts, list(group)

    @staticmethod
    def _system(ts_event: int, msg: str, code: SystemCode) -> bytes:
        return bytes(databento_dbn.SystemMsg(ts_event, msg, code))
