"""What a live ingest is asked to do (`LiveOptions`) and what it counts (`LiveStats`, its
summary line)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import orjson

from streams.ingest import backfill
from streams.ingest.resume import REPLAY_WINDOW_S
from streams.ingest.rolls import Lead

DEFAULT_PORT = 13000


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
    replay_window_s: float = REPLAY_WINDOW_S  # how far back the gateway can replay
    backfill: bool = False  # an unrecoverable span from Databento Historical
    historical_gateway: str | None = None  # None: Databento's
    key_by: str = "raw"  # BARCAST_KEY_BY
    follow: str = "all"  # BARCAST_FOLLOW
    leads: Mapping[str, Lead] = field(default_factory=dict)  # following the lead, resumed with

    def subscription(self) -> backfill.Subscription:
        return backfill.Subscription(self.dataset, self.schema, self.stype_in, self.symbols)


@dataclass
class LiveStats:
    bars: int = 0
    resent: int = 0  # bars not newer than the last one published for their instrument
    unmapped: int = 0  # bars sent to the dead-letter topic
    spreads: int = 0  # calendar spread bars skipped
    controls: int = 0
    heartbeats: int = 0
    system: int = 0
    errors: int = 0
    mappings: int = 0  # SymbolMappingMsg and instrument definition records
    reconnects: int = 0
    rolls: int = 0  # ROLL control records: the contract behind a continuous symbol changed
    not_lead: int = 0  # BARCAST_FOLLOW=lead: bars of contracts other than their product's lead
    outages: int = 0  # unrecoverable spans recorded as OUTAGE control records
    backfilled: int = 0  # bars published from Databento Historical
    last_ts_event: int | None = None

    def to_json(self) -> str:
        return orjson.dumps(asdict(self)).decode()
