"""A live outage's bars from Databento Historical (`barcast ingest-live --backfill`).

The span a live resubscription cannot replay is requested from the historical API with the live
subscription's dataset, schema, symbology and symbols; its records then go through live
ingest's own path (symbols, resends, spreads), so a bar comes once whichever side sends it.
The instruments of a `parent` or `continuous` request are named by symbology.resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import databento_dbn

from streams.ingest.convert import covering_days

RESOLVE_MAX = 2000  # symbols per symbology.resolve request, Databento's limit


class BackfillFailed(Exception):
    """The historical API did not deliver the span; the message says why."""


@dataclass(frozen=True)
class Subscription:
    dataset: str
    schema: str
    stype_in: str
    symbols: tuple[str, ...]


@dataclass(frozen=True)
class Fetched:
    metadata: databento_dbn.Metadata
    records: list[Any]
    # instrument id -> raw symbols by date (symbology.resolve): the metadata of a `parent` or
    # `continuous` request names none, and no live session may have named them yet
    names: dict[str, list[dict[str, str]]]


def fetch(
    key: str, gateway: str | None, subscription: Subscription, start: int, end: int
) -> Fetched:
    """The metadata, records and instruments' raw symbols of [start, end) (UNIX ns);
    BackfillFailed if not delivered (no entitlement, the span not yet available historically,
    the network)."""
    import databento
    import requests
    from databento.common.error import BentoError

    try:
        client = (
            databento.Historical(key=key)
            if gateway is None
            else databento.Historical(key=key, gateway=gateway)
        )
        store = client.timeseries.get_range(
            dataset=subscription.dataset,
            start=start,
            end=end,
            symbols=list(subscription.symbols),
            schema=subscription.schema,
            stype_in=subscription.stype_in,
        )
        records = list(store)
        names = {}
        if subscription.stype_in != "raw_symbol":
            names = _raw_symbols(client, subscription.dataset, records, start, end)
        return Fetched(store.metadata, records, names)
    except (BentoError, requests.RequestException, ValueError) as exc:
        raise BackfillFailed(str(exc).replace(key, "db-***") if key else str(exc)) from None


def _raw_symbols(
    client: Any, dataset: str, records: list[Any], start: int, end: int
) -> dict[str, list[dict[str, str]]]:
    """The raw symbols of the records' instruments over the days of [start, end)."""
    ids = sorted({r.instrument_id for r in records})
    first, last = covering_days(start, end)
    names: dict[str, list[dict[str, str]]] = {}
    for at in range(0, len(ids), RESOLVE_MAX):
        resolution = client.symbology.resolve(
            dataset=dataset,
            symbols=ids[at : at + RESOLVE_MAX],
            stype_in="instrument_id",
            stype_out="raw_symbol",
            start_date=first,
            end_date=last,
        )
        names.update(resolution["result"])
    return names
