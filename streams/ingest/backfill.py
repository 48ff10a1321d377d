"""A live outage's bars from Databento Historical (`barcast ingest-live --backfill`).

The span a live resubscription cannot replay is requested from the historical API with the live
subscription's dataset, schema, symbology and symbols; its records then go through live
ingest's own path (symbols, resends, spreads), so a bar comes once whichever side sends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import databento_dbn


class BackfillFailed(Exception):
    """The historical API did not deliver the span; the message says why."""


@dataclass(frozen=True)
class Subscription:
    dataset: str
    schema: str
    stype_in: str
    symbols: tuple[str, ...]


def fetch(
    key: str, gateway: str | None, subscription: Subscription, start: int, end: int
) -> tuple[databento_dbn.Metadata, list[Any]]:
    """The metadata and records of [start, end) (UNIX ns); BackfillFailed if not delivered
    (no entitlement, the span not yet available historically, the network)."""
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
        return store.metadata, list(store)
    except (BentoError, requests.RequestException, ValueError) as exc:
        raise BackfillFailed(str(exc).replace(key, "db-***") if key else str(exc)) from None
