"""The record side of the error policy without a broker: what reaches bars.clean, what becomes a
dead letter and how large it may be, which failures stop the worker with which exit code, and
the checked path to the private consumer attribute barcast sets."""

from __future__ import annotations

from dataclasses import replace
from importlib.metadata import version
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from aiokafka.errors import KafkaTimeoutError, RequestTimedOutError
from confluent_kafka import KafkaError, KafkaException

from features.corrections import CorrectionConfig, CorrectionStats, Status, SymbolState, correct
from features.corrections import Reason as Rejected
from features.engine import FINGERPRINT, N_FEATURES
from streams import schema
from streams.exit_codes import ExitCode
from streams.internals import InternalsMoved, live_fetcher
from streams.metrics import Metrics
from streams.runtime.changelog import Changelog
from streams.runtime.policy import (
    KEPT_BYTES,
    NULL_VALUE_HEADER,
    SHA256_HEADER,
    TRUNCATED_HEADER,
    DeadLetterReason,
    dead_letter,
    exit_code,
    publishable,
    readable,
    record_bytes,
)
from streams.runtime.records import CleanBar, FeatureRow, Out, Record
from streams.runtime.stages import features
from streams.runtime.stages.corrections import Corrections
from streams.runtime.stages.features import features_value
from streams.runtime.stages.windows import read_feature_row
from streams.runtime.stores import StateStore
from streams.schema import DLQ_MESSAGE, DLQ_REASON, encode_feature_values, encode_features

BAR = {
    "instrument_id": 1,
    "symbol": "6EH4",
    "ts_event": 1_704_153_600_000_000_000,
    "rtype": 33,
    "publisher_id": 1,
    "open": 1_100_000_000,
    "high": 1_101_000_000,
    "low": 1_099_000_000,
    "close": 1_100_500_000,
    "volume": 10,
    "source": "test",
}
LIMIT = 100_000


def run(value: bytes, key: bytes = b"6EH4") -> tuple[Status, object, list[dict]]:
    step = correct(value, SymbolState(), CorrectionConfig(), CorrectionStats(), key=key)
    (outcome,) = step.outcomes
    return outcome.status, outcome.reason, step.clean


def test_unknown_fields_of_a_raw_bar_never_reach_bars_clean() -> None:
    status, _, clean = run(orjson.dumps({**BAR, "note": "x" * 10_000, "extra": [1, 2]}))
    assert status is Status.CLEAN
    assert set(clean[0]) == {*BAR, "status", "corrections"}
    assert len(orjson.dumps(clean[0])) < 400


def test_a_bar_larger_than_the_limit_is_rejected_oversized_before_it_is_parsed() -> None:
    limit = CorrectionConfig().max_bar_bytes
    big = orjson.dumps({**BAR, "note": "x" * limit})
    assert run(big)[:2] == (Status.REJECTED, Rejected.OVERSIZED)
    small = orjson.dumps(BAR)
    long_key = b"k" * (limit - len(small))
    assert run(small, key=long_key + b"k")[:2] == (Status.REJECTED, Rejected.OVERSIZED)
    assert (
        run(small, key=long_key)[1] is Rejected.MALFORMED
    )  # within the size: only its key is wrong


def test_a_bar_keyed_other_than_by_its_symbol_is_malformed() -> None:
    status, reason, _ = run(orjson.dumps(BAR), key=b"6EM4")
    assert (status, reason) == (Status.REJECTED, Rejected.MALFORMED)
    assert run(orjson.dumps(BAR), key=b"")[1] is Rejected.MALFORMED
    assert run(orjson.dumps(BAR))[0] is Status.CLEAN


@pytest.mark.parametrize("field", ["symbol", "source"])
def test_a_bar_with_an_overlong_string_is_malformed(field: str) -> None:
    assert run(orjson.dumps({**BAR, field: "E" * 300}))[:2] == (
        Status.REJECTED,
        Rejected.MALFORMED,
    )


def headers(record: Out) -> dict[str, bytes]:
    return dict(record.headers)


def test_records_within_the_limit_pass_unchanged() -> None:
    records = [Out("features", b"6EH4", b"x" * (LIMIT - 5_000), None, [], 0)]
    assert publishable(records, LIMIT, "dlq", Metrics()) is records


def test_an_output_over_the_limit_becomes_a_bounded_dead_letter() -> None:
    metrics = Metrics()
    value = b"v" * (LIMIT + 1)
    records = [
        Out("bars.clean", b"6EH4", b"{}", 1.0, [], 2),
        Out("features", b"k", value, 1.0, [], 3),
    ]
    small, letter = publishable(records, LIMIT, "dlq", metrics)
    assert small is records[0]
    assert (letter.topic, letter.partition, letter.key, letter.value) == (
        "dlq",
        3,
        b"k",
        value[:KEPT_BYTES],
    )
    meta = headers(letter)
    assert meta[DLQ_REASON] == DeadLetterReason.UNPUBLISHABLE.encode()
    assert meta["barcast-intended-topic"] == b"features"
    assert meta[TRUNCATED_HEADER] == f"1,{len(value)}".encode()
    assert len(meta[SHA256_HEADER]) == 64 and record_bytes(letter) <= LIMIT
    assert b"barcast_dlq_total 1.0" in metrics.render()


def test_a_dead_letter_over_the_limit_keeps_its_headers_and_says_it_was_cut() -> None:
    value = b"{" + b"x" * (2 * LIMIT)
    letter = dead_letter("dlq", b"6EH4", value, ("bars.raw", 1, 7), "oversized", "why", 1)
    (bounded,) = publishable([letter], LIMIT, "dlq", Metrics())
    meta = headers(bounded)
    assert meta[DLQ_REASON] == b"oversized" and meta["__connect.errors.offset"] == b"7"
    assert meta[TRUNCATED_HEADER] == f"4,{len(value)}".encode()
    assert bounded.value == value[:KEPT_BYTES] and record_bytes(bounded) <= LIMIT


def test_only_kafka_failures_exit_as_the_clusters() -> None:
    assert exit_code(KafkaTimeoutError()) == ExitCode.BROKER_FAILED
    assert exit_code(RequestTimedOutError()) == ExitCode.BROKER_FAILED
    assert exit_code(TimeoutError()) == ExitCode.BROKER_FAILED
    # librdkafka's (confluent-kafka): a restore's or a refetch's read, a committed-offset lookup
    assert exit_code(KafkaException(KafkaError(KafkaError._TIMED_OUT))) == ExitCode.BROKER_FAILED
    assert exit_code(KeyError("symbol")) == ExitCode.AGENT_FAILED


def test_the_fetcher_is_found_where_faust_keeps_it() -> None:
    fetcher = SimpleNamespace(_fetch_max_wait_ms=1500)
    consumer = SimpleNamespace(_thread=SimpleNamespace(_consumer=SimpleNamespace(_fetcher=fetcher)))
    assert live_fetcher(consumer) is fetcher


@pytest.mark.parametrize(
    ("consumer", "missing"),
    [
        (SimpleNamespace(), "_thread"),
        (SimpleNamespace(_thread=SimpleNamespace(_consumer=SimpleNamespace())), "_fetcher"),
        (
            SimpleNamespace(
                _thread=SimpleNamespace(_consumer=SimpleNamespace(_fetcher=SimpleNamespace()))
            ),
            "_fetcher._fetch_max_wait_ms",
        ),
    ],
)
def test_a_moved_fetcher_fails_loudly_naming_the_versions(consumer: object, missing: str) -> None:
    with pytest.raises(InternalsMoved) as error:
        live_fetcher(consumer)
    message = str(error.value)
    assert missing in message
    assert f"faust-streaming {version('faust-streaming')}" in message
    assert f"aiokafka {version('aiokafka')}" in message


def feature_message(bar: dict[str, object], values: np.ndarray, warm: bool) -> bytes:
    """The `features` value the features stage writes for `bar` (a `bars.clean` value)."""
    clean = CleanBar("bars.clean", b"6EH4", 0, 0, 0.0, bar, None)  # type: ignore[arg-type]
    return encode_features(features_value(features.feature_row(clean, values, warm)))


def features_event(value: bytes, key: bytes | None = b"6EH4") -> Record:
    return Record("features", 0, 5, 0.0, key, value, [])


def test_a_features_record_is_read_into_a_row() -> None:
    values = np.arange(N_FEATURES, dtype=np.float64)
    bar = {**BAR, "status": "clean"}
    row = read_feature_row(features_event(feature_message(bar, values, warm=True)))
    assert (row.symbol, row.ts_event, row.warm, row.synthetic) == (
        "6EH4",
        BAR["ts_event"],
        True,
        False,
    )
    assert np.array_equal(row.values, values)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda r: b"{not json", "unexpected"),
        (lambda r: orjson.dumps([r]), "JSON object"),
        (lambda r: orjson.dumps({k: v for k, v in r.items() if k != "warm"}), "warm"),
        (lambda r: orjson.dumps({**r, "ts_event": str(r["ts_event"])}), "ts_event"),
        (lambda r: orjson.dumps({**r, "values": "AAAA"}), "buffer size"),
        (lambda r: orjson.dumps({**r, "values": encode_feature_values(np.zeros(3))}), "3 features"),
    ],
)
def test_a_record_that_is_no_feature_row_raises_value_error_saying_why(
    change: object, why: str
) -> None:
    values = np.zeros(N_FEATURES)
    record = orjson.loads(feature_message({**BAR, "status": "clean"}, values, warm=True))
    with pytest.raises(ValueError, match=why):
        read_feature_row(features_event(change(record)))  # type: ignore[operator]
    for key in (None, b"6EM4"):  # a row must land in its own symbol's window
        with pytest.raises(ValueError, match="keyed"):
            read_feature_row(features_event(orjson.dumps(record), key=key))


def test_a_feature_row_of_another_feature_set_is_a_dead_letter_naming_both_fingerprints() -> None:
    row = orjson.loads(feature_message({**BAR, "status": "clean"}, np.zeros(N_FEATURES), True))
    stale = features_event(orjson.dumps({**row, "fingerprint": "0123456789abcdef"}))
    good = features_event(orjson.dumps(row))
    letter, read = readable([stale, good], "bars.dlq", read_feature_row, "not a features record: ")
    assert isinstance(letter, Out) and isinstance(read, FeatureRow)
    meta = headers(letter)
    assert letter.topic == "bars.dlq" and letter.value == stale.value
    assert meta[DLQ_REASON] == DeadLetterReason.FINGERPRINT_MISMATCH.encode()
    why = meta[DLQ_MESSAGE].decode()
    assert "0123456789abcdef" in why and FINGERPRINT in why and not why.startswith("not a")


@pytest.mark.parametrize("topic", ["bars.clean", "features"])
def test_a_tombstone_is_a_dead_letter_of_empty_bytes_saying_its_value_was_null(topic: str) -> None:
    read = features.read_clean_bar if topic == "bars.clean" else read_feature_row
    tombstone = Record(topic, 2, 9, 0.0, b"6EH4", None, [])
    (letter,) = readable([tombstone], "bars.dlq", read, "not a record: ")
    assert isinstance(letter, Out)
    assert (letter.topic, letter.key, letter.value, letter.partition) == (
        "bars.dlq",
        b"6EH4",
        b"",
        2,
    )
    meta = headers(letter)
    assert (
        meta[NULL_VALUE_HEADER] == b"true"
        and meta[DLQ_REASON] == DeadLetterReason.MALFORMED.encode()
    )
    assert b"null" in meta[DLQ_MESSAGE] and meta["__connect.errors.offset"] == b"9"
    assert publishable([letter], LIMIT, "bars.dlq", Metrics()) == [letter]


def test_a_tombstone_on_bars_raw_is_a_dead_letter_of_empty_bytes() -> None:
    changelog = Changelog("corrections-state", None)  # type: ignore[arg-type]  # never flushed
    store = StateStore(changelog, SymbolState.from_bytes, SymbolState.to_bytes, SymbolState)
    stage = Corrections(store, CorrectionConfig(), ("bars.raw", "bars.clean", "bars.dlq"))
    cleaned = stage.run([Record("bars.raw", 1, 4, 0.0, b"6EH4", None, [])], 0)
    (letter,) = cleaned.outputs
    assert (letter.topic, letter.value) == ("bars.dlq", b"")
    assert headers(letter)[NULL_VALUE_HEADER] == b"true"


@pytest.mark.parametrize(
    "control",
    [
        schema.roll(BAR["ts_event"], "6EH4", "6EH4", "6EM4", 1.01),
        schema.expired(BAR["ts_event"], "6EH4", BAR["ts_event"] - 60 * 10**9),
    ],
)
@pytest.mark.parametrize("key", [schema.CONTROL_KEY, b"6EM4"])
def test_a_roll_or_expiry_keyed_other_than_by_its_symbol_is_a_dead_letter(
    control: schema.ControlRecord, key: bytes
) -> None:
    """Taken, it would roll or drop the states of whatever its key names, on whatever partition
    it landed: the key is where a symbol's states are."""
    record = Record("bars.clean", 0, 3, 0.0, key, schema.encode(control), schema.CONTROL_HEADERS)
    (letter,) = readable([record], "bars.dlq", features.read_clean_bar, "not a bar: ")
    assert isinstance(letter, Out) and letter.value == record.value
    assert headers(letter)[DLQ_REASON] == DeadLetterReason.MALFORMED.encode()
    assert b"keyed by its symbol" in headers(letter)[DLQ_MESSAGE]
    changelog = Changelog("corrections-state", None)  # type: ignore[arg-type]  # never flushed
    store = StateStore(changelog, SymbolState.from_bytes, SymbolState.to_bytes, SymbolState)
    stage = Corrections(store, CorrectionConfig(), ("bars.raw", "bars.clean", "bars.dlq"))
    (letter,) = stage.run([replace(record, topic="bars.raw")], 0).outputs
    assert letter.topic == "bars.dlq"
    assert headers(letter)[DLQ_REASON] == DeadLetterReason.MALFORMED.encode()
    assert not store.states and not store.changed


def test_a_clean_bar_keyed_other_than_by_its_symbol_is_refused() -> None:
    value = orjson.dumps({**BAR, "status": "clean"})
    assert features.read_clean_bar(Record("bars.clean", 0, 1, 0.0, b"6EH4", value, [])).value
    for key in (None, b"6EM4"):
        with pytest.raises(ValueError, match="keyed"):
            features.read_clean_bar(Record("bars.clean", 0, 1, 0.0, key, value, []))


def test_a_state_of_no_bar_changed_in_the_batch_outlives_a_rejected_bar_of_its_key() -> None:
    """An older barcast stored states of no bar; one an OUTAGE marked changed in this batch is
    still written at the commit when a rejected bar of its key comes after it."""
    changelog = Changelog("corrections-state", None)  # type: ignore[arg-type]  # never flushed
    store = StateStore(changelog, SymbolState.from_bytes, SymbolState.to_bytes, SymbolState)
    store.write(b"6EH4", 1, 3, SymbolState())  # as an OUTAGE marks it
    stage = Corrections(store, CorrectionConfig(), ("bars.raw", "bars.clean", "bars.dlq"))
    (letter,) = stage.run([Record("bars.raw", 1, 4, 0.0, b"6EH4", b"not a bar", [])], 0).outputs
    assert letter.topic == "bars.dlq"
    store.put_changed()
    assert list(store.states) == [b"6EH4"] and not store.changed
