"""Feature rows -> forecast requests: a request for every real bar whose window holds `lookback`
warm rows (the rule streams.forecast.offline replays). A row at or before the window's last
ts_event is one a restarted features worker re-published: skipped."""

from __future__ import annotations

import time

from features.engine import FINGERPRINT, N_FEATURES
from streams.forecast.engine import WindowRequest
from streams.runtime.records import FeatureRow, Record
from streams.runtime.stores import WindowStore
from streams.schema import decode_feature_values, decode_features, decode_received_ns


def feature_row(record: Record) -> FeatureRow:
    """A `features` record as a row; ValueError saying what is wrong if it is not one."""
    if not record.key:
        raise ValueError("a features record is keyed by its symbol")
    value = decode_features(record.value)
    values = decode_feature_values(value["values"])
    if values.size != N_FEATURES:
        raise ValueError(f"values hold {values.size} features, not {N_FEATURES}")
    return FeatureRow(
        key=record.key,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp_ms,
        received_ns=decode_received_ns(record.headers),
        symbol=value["symbol"],
        ts_event=value["ts_event"],
        close=value["close"],
        synthetic=value["synthetic"],
        warm=value["warm"],
        values=values,
        fingerprint=value["fingerprint"],
    )


def slide(store: WindowStore, row: FeatureRow, forecast: bool) -> WindowRequest | None:
    """Slide the row into its symbol's window; the request to forecast it, if `forecast` (a
    model is served) and the window is ready."""
    if row.fingerprint != FINGERPRINT:  # a served checkpoint's is this one, too
        raise RuntimeError(
            f"feature row for {row.symbol} has fingerprint {row.fingerprint} but this "
            f"worker's feature set is {FINGERPRINT}: run the stream workers and the "
            "forecast worker from the same barcast version"
        )
    window = store.read(row.key, row.partition)
    if window.count and row.ts_event <= window.last_ts:
        return None
    window.append(row.ts_event, row.close, row.synthetic, row.warm, row.values)
    store.write(row.key, row.partition, row.offset, window)
    if not (forecast and window.ready and window.all_warm and not row.synthetic):
        return None
    return WindowRequest(
        symbol=row.symbol,
        key=row.key,
        partition=row.partition,
        count=window.count,
        values=window.ordered_values(),
        ts_event=row.ts_event,
        close=row.close,
        received_ns=time.time_ns() if row.received_ns is None else row.received_ns,
    )
