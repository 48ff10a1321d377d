"""Where a live resubscription starts, and which bars it resends.

A resubscription asks the gateway to replay from the newest `ts_event` published (inclusive: of
two instruments stamped the same minute, the connection may have dropped between them). The
gateway replays only its intraday window (Databento's: the last 24 hours, less over weekends),
so an older start is clamped to the window and the span before it is unrecoverable: an outage,
which ingest records, or backfills from Databento Historical.

Whatever a gateway sends again (a replay from an earlier start, or a gateway that resends its
whole session on every connection), a bar not newer than the last one handled for its
instrument can never be new: `Published` drops it.

A restarted ingest (a deploy, a crash, a node drained) resumes where its topic ends
(`resume_start`), so the bars the gateway sent while no ingest ran are replayed, or, beyond the
window, recorded as an outage, instead of missing without a trace. Following the lead, ingest
goes on with each product's lead as last published (`resume_leads`): ranked anew by the volume
of a partial day, a back month's first bar could take the lead and send two false rolls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from streams.ingest.rolls import Lead, published_leads
from streams.kafka import newest_values, tail_values
from streams.schema import ControlKind

if TYPE_CHECKING:
    from streams.settings import Settings

INTERVAL_NS = {"ohlcv-1s": 10**9, "ohlcv-1m": 60 * 10**9, "ohlcv-1h": 3600 * 10**9}
DAY_NS = 86_400 * 10**9  # ohlcv-1d and ohlcv-eod
REPLAY_WINDOW_S = 86_400.0  # Databento Live's intraday replay
# A clamped start lies this far inside the window: the gateway's clock has moved on by the time
# it reads the subscription, and a start it finds outside its window is refused.
CLAMP_MARGIN_NS = 60 * 10**9
# Following the lead, ingest goes on with each product's lead among this many records at the
# end of each partition: a product with none there starts as on ingest's first day.
LEAD_TAIL_RECORDS = 10_000


def interval_ns(schema: str) -> int:
    return INTERVAL_NS.get(schema, DAY_NS)


def interval_start(ts_ns: int, schema: str) -> int:
    """The start of the bar interval `ts_ns` falls in: a bar is stamped there and sent at its
    end, so a resubscription from a first connection's start replays the bar under way then."""
    return ts_ns - ts_ns % interval_ns(schema)


def earliest_start(now_ns: int, window_s: float, schema: str) -> int:
    """The first bar interval the gateway can still replay at `now_ns`, with a margin."""
    earliest = now_ns - int(window_s * 1e9) + CLAMP_MARGIN_NS
    return -(-earliest // interval_ns(schema)) * interval_ns(schema)


class Published:
    """The newest `ts_event` handled per (rtype, instrument_id), and the newest of all."""

    def __init__(self) -> None:
        self.newest: int | None = None
        self._last: dict[tuple[int, int], int] = {}

    def add(self, rtype: int, instrument_id: int, ts_event: int) -> bool:
        """Take a bar; False if its instrument already had one as new or newer (a resend)."""
        key = (rtype, instrument_id)
        last = self._last.get(key)
        if last is not None and ts_event <= last:
            return False
        self._last[key] = ts_event
        if self.newest is None or ts_event > self.newest:
            self.newest = ts_event
        return True


def complete_until(value: bytes, schema: str) -> int:
    """What a partition whose last record is `value` holds every bar before: a bar or roll says
    its interval may be partial; END_OF_INTERVAL closes its interval; an outage, its span."""
    record = orjson.loads(value)
    control = record.get("control")
    if control == ControlKind.END_OF_INTERVAL:
        return int(record["ts_event"]) + interval_ns(schema)
    if control == ControlKind.OUTAGE:
        return int(record["end"])
    return int(record["ts_event"])


def topic_resume(newest: dict[int, bytes], schema: str) -> int | None:
    """The earliest of the partitions' `complete_until`: every bar before it is on every
    partition (a partition is written in order). None for a topic without records."""
    ends = [complete_until(value, schema) for value in newest.values()]
    return min(ends) if ends else None


def resume_start(settings: Settings, topic: str, schema: str) -> int | None:
    """Where live ingest into `topic` resumes after a restart (`topic_resume`)."""
    return topic_resume(newest_values(settings, topic), schema)


def resume_leads(settings: Settings, topic: str) -> dict[str, Lead]:
    """Each product's lead as ingest last published it to `topic` (`published_leads`), for a
    restart (or the next replay) following the lead to go on with, not a partial day's volume
    ranked anew."""
    tails = tail_values(settings, topic, LEAD_TAIL_RECORDS)
    return published_leads(value for values in tails.values() for value in values)
