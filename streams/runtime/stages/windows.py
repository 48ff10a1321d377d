"""Feature rows -> forecast requests: a request for every real bar whose window holds `lookback`
warm rows (the rule model.serving.offline replays). A row at or before the window's last
ts_event is one a restarted features worker re-published: skipped. A row of another feature set
(a features worker of another barcast version) goes to the dead-letter topic: the model was
trained on this worker's feature set, and the row's offset must not block the ones after it."""

from __future__ import annotations

import time

from features.engine import FINGERPRINT, N_FEATURES
from model.serving.forecast_engine import WindowRequest
from streams.runtime.policy import DeadLetterReason, Refused
from streams.runtime.records import FeatureRow, Record
from streams.runtime.stores import WindowStore
from streams.schema import decode_feature_values, decode_features, decode_received_ns


def read_feature_row(record: Record) -> FeatureRow:
    """A `features` record as a row; ValueError saying what is wrong if it is not one, Refused
    if it is one of another feature set."""
    value = decode_features(record.value)
    if record.key != value["symbol"].encode():  # the window is the key's, the cache the symbol's
        raise ValueError(
            f"keyed {record.key!r}, but its symbol is {value['symbol']!r}: a features record is "
            "keyed by its symbol"
        )
    if value["fingerprint"] != FINGERPRINT:  # a served checkpoint's is this one, too
        raise Refused(
            DeadLetterReason.FINGERPRINT_MISMATCH,
            f"the feature row for {value['symbol']} has feature fingerprint "
            f"{value['fingerprint']} but this forecast worker's is {FINGERPRINT}: run the "
            "stream workers and the forecast worker from the same barcast version",
        )
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
        raw_symbol=value.get("raw_symbol"),
    )


def slide(store: WindowStore, row: FeatureRow, forecast: bool) -> WindowRequest | None:
    """Slide the row into its symbol's window; the request to forecast it, if `forecast` (a
    model is served) and the window is ready; `row` is of this worker's feature set (a
    `read_feature_row`, or one this process computed)."""
    window = store.read(row.key)
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
        values=window.latest(),
        ts_event=row.ts_event,
        close=row.close,
        received_ns=time.time_ns() if row.received_ns is None else row.received_ns,
        raw_symbol=row.raw_symbol,
        offset=row.offset,
    )
