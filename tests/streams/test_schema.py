"""Every topic's codecs round-trip and refuse what is not of their topic; the JSON Schemas under
deploy/schemas/topics/ and the topic tables of docs/topics.md are the ones streams.topic_schemas
makes, and the schemas accept what barcast writes and refuse what it never writes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from jsonschema import Draft202012Validator

from benchmarks.docs.sections import generated
from features.corrections import correct_history
from model.covariates import FUTURE_NAMES, STATIC_NAMES
from streams import schema as s
from streams.topic_schemas import TOPICS, markdown_tables, schema, schema_file, schema_text
from tests.kafka_io import compiled_validator

RAW: s.RawBar = {
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
FEATURES: s.FeaturesValue = {
    "symbol": "6EH4",
    "ts_event": RAW["ts_event"],
    "close": 1.1005,
    "fingerprint": "0123456789abcdef",
    "warm": True,
    "synthetic": False,
    "values": s.encode_feature_values(np.arange(227, dtype=np.float64)),
}
FORECAST: dict[str, Any] = {
    "symbol": "6EH4",
    "ts_event": RAW["ts_event"],
    "close": 1.1005,
    "horizons": [1, 2],
    "q10": [-0.001, -0.002],
    "q50": [0.0, 0.0],
    "q90": [0.001, 0.002],
    "price_q10": [1.1, 1.09],
    "price_q50": [1.1005, 1.1005],
    "price_q90": [1.101, 1.102],
    "model_id": "m",
    "fingerprint": "0123456789abcdef",
    "batch_size": 3,
    "latency_ms": 1.5,
    "source": "model",
}
SCORE: dict[str, Any] = {
    "symbol": "6EH4",
    "ts_event": RAW["ts_event"],
    "model_id": "m",
    "horizons": [1, 2],
    "unscored": None,
    "realized": [0.0005, -0.003],
    "pinball": {"q10": [1e-4, 1e-4], "q50": [2e-4, 1e-3], "q90": [5e-5, 4e-3]},
    "inside": [True, False],
    "below_q10": [False, True],
    "above_q90": [False, False],
}
EXPLANATION: dict[str, Any] = {
    "symbol": "6EH4",
    "ts_event": RAW["ts_event"],
    "model_id": "m",
    "fingerprint": "0123456789abcdef",
    "schema_version": 1,
    "historical": [{"feature": "ret_1", "weight": 0.0123}, {"feature": "rsi_14", "weight": 0.01}],
    "historical_top_k": 0.0223,
    "static": dict.fromkeys(STATIC_NAMES, 0.1),
    "future": dict.fromkeys(FUTURE_NAMES, 0.1),
    "attention": {
        "entropy": 3.9,
        "entropy_by_horizon": [3.8, 4.0],
        "last_5": 0.2,
        "last_15": 0.4,
        "older": 0.5,
        "future": 0.1,
        "top_lags": [{"lag": 0, "weight": 0.05}, {"lag": 3, "weight": 0.04}],
    },
}
UNSCORED = {
    **SCORE,
    **dict.fromkeys(("realized", "pinball", "inside", "below_q10", "above_q90")),
    "unscored": "gap_fill",
}

SHADOWED = {  # with shadow baselines, one warming up
    **SCORE,
    "source": "tod_ewma",
    "baselines": {"volatility_scale": SCORE["pinball"], "tod_ewma": None},
}


def clean_bar() -> s.CleanBarValue:
    (bar,) = correct_history([orjson.dumps(RAW)]).clean
    return bar  # type: ignore[return-value]


def valid(topic: str, value: Any) -> bool:
    """The reference validator's verdict, which the compiled one that checks every message the
    integration tests read back must share."""
    reference = Draft202012Validator(schema(topic)).is_valid(value)
    assert compiled_validator(topic).is_valid(value) == reference, (topic, value)
    return reference


def test_values_round_trip_byte_for_byte() -> None:
    for control in (s.end_of_interval(RAW["ts_event"]), s.outage(RAW["ts_event"], 2 * 10**18)):
        assert s.decode_control(s.encode_control(control)) == control
    assert s.decode_raw(s.encode_raw(RAW)) == RAW
    bar = clean_bar()
    assert s.encode_clean(s.decode_clean(s.encode_clean(bar))) == s.encode_clean(bar)
    assert s.decode_features(s.encode_features(FEATURES)) == FEATURES
    assert s.decode_forecast(s.encode_forecast(FORECAST)) == FORECAST
    assert s.decode_explanation(s.encode_explanation(EXPLANATION)) == EXPLANATION
    values = np.array([1.5, np.nan, -0.0])
    assert s.decode_feature_values(s.encode_feature_values(values)).tobytes() == values.tobytes()


def test_keys_and_headers_round_trip() -> None:
    assert s.decode_key(s.encode_key("ESH4")) == "ESH4"
    assert s.decode_received_ns(s.bar_headers(123)) == 123
    assert s.decode_received_ns(s.bar_headers(None)) is None
    assert not s.is_control_headers(s.bar_headers(1)) and s.is_control_headers(s.CONTROL_HEADERS)
    dead = s.DeadLetterHeaders("bars.raw", 2, 7, "spike", "a spike")
    assert s.decode_dlq_headers(s.encode_dlq_headers(dead)) == dead
    unmapped = s.DeadLetterHeaders("bars.raw", None, None, "unmapped_symbol", "no symbol")
    assert s.decode_dlq_headers(dict(s.encode_dlq_headers(unmapped))) == unmapped


@pytest.mark.parametrize(
    ("decode", "data", "why"),
    [
        (s.decode_control, b'{"control": "end_of_interval"}', "control record"),
        (s.decode_control, b'{"control": "outage", "ts_event": 5}', "later"),
        (s.decode_control, b'{"control": "outage", "ts_event": 5, "end": 5}', "later"),
        (s.decode_control, b'{"control": "other", "ts_event": 5}', "control record"),
        (s.decode_control, b"[1]", "JSON object"),
        (s.decode_raw, b"{bad", "is JSON"),
        (s.decode_control, b'{"control": "end_of_interval", "ts_event": 5}', "2000 to 2100"),
        (s.decode_control, s.encode(s.expired(RAW["ts_event"], "ES\0x", 1)), "without a NUL"),
        (s.decode_clean, orjson.dumps({**RAW, "close": 1.1}), "not a bars.clean bar"),
        (s.decode_clean, orjson.dumps({**RAW, "ts_event": 2**63}), "outside 2000-01-01"),
        (s.decode_clean, orjson.dumps({**RAW, "symbol": "ES\0x"}), "NUL"),
        (s.decode_features, orjson.dumps({**FEATURES, "warm": 1}), "warm"),
        (s.decode_features, orjson.dumps({**FEATURES, "ts_event": 2**63 - 1}), "outside"),
        (s.decode_features, orjson.dumps({**FEATURES, "symbol": "ES\0x"}), "NUL"),
        (s.decode_forecast, b'"text"', "JSON object"),
        (s.decode_explanation, orjson.dumps({**EXPLANATION, "static": None}), "static"),
        (s.decode_explanation, orjson.dumps({**FORECAST, "schema_version": 1}), "historical"),
    ],
)
def test_decoders_refuse_other_records_saying_what_is_wrong(
    decode: Any, data: bytes, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        decode(data)


def test_a_dead_letter_without_its_reason_is_refused() -> None:
    headers = dict(s.encode_dlq_headers(s.DeadLetterHeaders("t", 0, 1, "r", "m")))
    del headers[s.DLQ_REASON]
    with pytest.raises(ValueError, match=s.DLQ_REASON):
        s.decode_dlq_headers(headers)


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_schema_files_are_the_modules(topic: str) -> None:
    Draft202012Validator.check_schema(schema(topic))
    assert schema_file(topic).read_text() == schema_text(topic), (
        "stale: run `python -m streams.topic_schemas`"
    )
    assert json.loads(schema_file(topic).read_text()) == schema(topic)


def test_schemas_take_what_barcast_writes_and_refuse_the_rest() -> None:
    control = s.end_of_interval(RAW["ts_event"])
    outage = s.outage(RAW["ts_event"], RAW["ts_event"] + 600 * 10**9)
    bar = clean_bar()
    for topic, value in [
        ("bars.raw", RAW),
        ("bars.raw", {**RAW, "note": "other producers' extra fields"}),
        ("bars.clean", bar),
        ("features", FEATURES),
        ("forecasts", FORECAST),
        ("forecasts.scores", SCORE),
        ("forecasts.scores", UNSCORED),
        ("forecasts.explain", EXPLANATION),
        ("forecasts", {**FORECAST, "raw_q10": [0.0, 0.0], "schema_version": 2}),  # calibrated
        ("forecasts", {**FORECAST, "source": "tod_ewma"}),  # a baseline served
        ("forecasts.scores", SHADOWED),
        ("forecasts.scores", {**UNSCORED, "source": "volatility_scale", "baselines": None}),
        *((topic, control) for topic in ("bars.raw", "bars.clean", "features")),
        *((topic, outage) for topic in ("bars.raw", "bars.clean", "features")),
    ]:
        assert valid(topic, value), (topic, value)
    for topic, value in [
        ("bars.clean", {**bar, "note": "x"}),
        ("bars.clean", {**bar, "status": "rejected"}),
        ("bars.clean", {**bar, "close": 1.1}),
        ("features", {**FEATURES, "values": 1}),
        ("forecasts", {**FORECAST, "q10": "x"}),
        ("forecasts", {key: v for key, v in FORECAST.items() if key != "model_id"}),
        ("forecasts.scores", {**SCORE, "unscored": "unknown"}),
        ("forecasts.scores", {key: v for key, v in SCORE.items() if key != "inside"}),
        ("forecasts", {key: v for key, v in FORECAST.items() if key != "source"}),
        ("forecasts", {**FORECAST, "source": "har"}),
        ("forecasts.scores", {**SHADOWED, "baselines": {"tod_ewma": {"q10": "x"}}}),
        ("features", {**control, "control": "other"}),
        ("bars.raw", {**control, "end": 1}),
        ("bars.raw", {**outage, "end": "later"}),
        ("bars.clean", {key: v for key, v in outage.items() if key != "end"}),
        ("forecasts.explain", {**EXPLANATION, "static": {"symbol_embedding": 1.0}}),
        ("forecasts.explain", {**EXPLANATION, "historical": [{"feature": "ret_1"}]}),
        ("forecasts.explain", {**EXPLANATION, "attention": {"entropy": 1.0}}),
        ("forecasts.explain", {key: v for key, v in EXPLANATION.items() if key != "model_id"}),
    ]:
        assert not valid(topic, value), (topic, value)


def test_the_docs_topic_tables_are_generated_from_the_module() -> None:
    assert generated("docs/topics.md", "topics-table").strip() == markdown_tables(), (
        "docs/topics.md's topic tables are stale: `.venv/bin/python -m benchmarks.docs --write`"
    )
