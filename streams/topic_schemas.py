"""The JSON Schema of every barcast topic's value, the files under deploy/schemas/topics/ and
the field tables of docs/topics.md, all from here (streams.schema holds the codecs).

`python -m streams.topic_schemas` rewrites the schema files and prints the tables; tests check
that the files, docs/topics.md and the messages the integration tests read agree with this
module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.covariates import FUTURE_NAMES, STATIC_NAMES
from model.releases import RELEASE_NAMES
from model.serving.canary import CANARY
from model.serving.explain import RECENT, TOP_LAGS
from model.serving.scoring import Unscored
from model.serving.skill import TRACKS
from streams.schema import (
    CONTROL_KEY,
    DLQ_MESSAGE,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC,
    KIND_HEADER,
    RECEIVED_HEADER,
    ControlKind,
)

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "deploy" / "schemas" / "topics"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

INT = {"type": "integer"}
PRICE = {"type": "integer", "description": "int64 fixed point, 1 unit = 1e-9"}


def _field(kind: dict[str, Any], meaning: str) -> dict[str, Any]:
    return {**kind, "description": meaning}


def _object(fields: dict[str, dict[str, Any]], required: list[str], extra: bool) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: spec for name, spec in fields.items() if "," not in name},
        "required": required,
        "additionalProperties": extra,
    }


RAW_FIELDS: dict[str, dict[str, Any]] = {
    "instrument_id": _field(INT, "Databento instrument id"),
    "symbol": _field(
        {"type": "string"},
        "the symbol it is keyed by: its raw symbol, or with BARCAST_KEY_BY=continuous the "
        "continuous symbol (`ES.c.0`, `ES.v.0`) it came under",
    ),
    "raw_symbol": _field({"type": "string"}, "its instrument's raw symbol (`ESH4`)"),
    "ts_event": _field(INT, "bar open, UNIX ns"),
    "rtype": _field(INT, "32/33/34/35/36 = ohlcv-1s/1m/1h/1d/eod"),
    "publisher_id": _field(INT, "Databento publisher"),
    **{
        name: _field(
            INT,
            "int64 fixed point (1 unit = 1e-9) exactly as in DBN, never converted to float at "
            "ingest; `UNDEF_PRICE` (2^63-1) passes through",
        )
        for name in ("open", "high", "low", "close")
    },
    "volume": _field({"type": "number"}, "volume"),
    "source": _field({"type": "string"}, "`replay:<file name>` or `live:<dataset>`"),
}
CLEAN_FIELDS: dict[str, dict[str, Any]] = {
    **RAW_FIELDS,
    "status": _field(
        {"enum": ["clean", "corrected", "synthetic"]},
        "`clean`, `corrected`, or `synthetic`: a flagged gap fill (O=H=L=C=previous close, "
        "volume 0)",
    ),
    "corrections": _field(
        {"type": "array", "items": {"type": "array", "prefixItems": [{"type": "string"}] * 2}},
        "the rules that changed the bar: `[rule, field, old, new]` each",
    ),
}
FEATURES_FIELDS: dict[str, dict[str, Any]] = {
    "symbol": RAW_FIELDS["symbol"],
    "raw_symbol": RAW_FIELDS["raw_symbol"],
    "ts_event": RAW_FIELDS["ts_event"],
    "close": _field({"type": "number"}, "close as a float"),
    "fingerprint": _field({"type": "string"}, "the feature set's fingerprint"),
    "warm": _field({"type": "boolean"}, "every feature past its warm-up"),
    "synthetic": _field({"type": "boolean"}, "the bar is a gap fill"),
    "values": _field(
        {"type": "string", "contentEncoding": "base64"},
        "the 227 features as base64 of 227 little-endian float64 (bit-exact, NaN-safe; "
        "`streams.schema.decode_feature_values`)",
    ),
}
SERIES = {"type": "array", "items": {"type": ["number", "null"]}}
FORECAST_FIELDS: dict[str, dict[str, Any]] = {
    "symbol": RAW_FIELDS["symbol"],
    "raw_symbol": _field({"type": "string"}, "its last bar's raw symbol, when it had one"),
    "ts_event": _field(INT, "the last bar of the window, UNIX ns"),
    "close": _field({"type": "number"}, "its close"),
    "horizons": _field({"type": "array", "items": INT}, "1..10 minutes ahead"),
    "q10, q50, q90": _field(SERIES, "cumulative log return of the close at each horizon"),
    "price_q10, price_q50, price_q90": _field(SERIES, "`close * exp(q)`"),
    "raw_q10, raw_q50, raw_q90": _field(
        SERIES, "with online calibration on: the model's own quantiles (`q10`... calibrated)"
    ),
    "model_id": _field({"type": "string"}, "hash of the checkpoint's weights"),
    "fingerprint": _field({"type": "string"}, "the feature set's fingerprint"),
    "batch_size": _field(INT, "how many windows the model ran at once (this delivery's)"),
    "latency_ms": _field({"type": "number"}, "bar entering barcast to forecast published"),
    "source": _field(
        {"enum": [*TRACKS, CANARY]},
        "what made the quantiles: `model` (the checkpoint `model_id`), or a shadow baseline of "
        "it served in the model's place (`BARCAST_SERVE`): `volatility_scale` (the "
        "checkpoint's volatility scale alone) or `tod_ewma` (the time-of-day EWMA blend), each "
        "calibrated as the model's; on `forecasts.shadow`, `canary`",
    ),
    "schema_version": _field(INT, "2 with online calibration on; absent without"),
}
OPTIONAL_FORECAST_FIELDS = ("schema_version", "raw_symbol")
QUANTILES = r"^(price_|raw_)?q[0-9]{2}$"
FLOATS = {"type": "array", "items": {"type": "number"}}
BOOLS = {"type": ["array", "null"], "items": {"type": "boolean"}}
SCORE_FIELDS: dict[str, dict[str, Any]] = {
    "symbol": RAW_FIELDS["symbol"],
    "ts_event": _field(INT, "the scored forecast's `ts_event`, UNIX ns"),
    "model_id": FORECAST_FIELDS["model_id"],
    "horizons": FORECAST_FIELDS["horizons"],
    "unscored": _field(
        {"enum": [None, *(u.value for u in Unscored)]},
        "null if scored, else why not (training's label rules): `session_break` (a minute of "
        "the label has no bar), `gap_fill` (a bar of it is a gap fill), `late` (its bars had "
        "left the retention), `outage` (a minute of it has no bar because live ingest lost "
        "it: an outage record); the fields below are then null",
    ),
    "realized": _field(
        {**FLOATS, "type": ["array", "null"]}, "log(close[t+k] / close[t]) per horizon"
    ),
    "pinball": _field(
        {"type": ["object", "null"], "additionalProperties": FLOATS},
        "pinball loss per quantile field (`q10`, `q50`, `q90`, as published) and horizon, in "
        "log-return units",
    ),
    "inside": _field(BOOLS, "q10 <= realized <= q90, per horizon"),
    "below_q10": _field(BOOLS, "realized < q10, per horizon"),
    "above_q90": _field(BOOLS, "realized > q90, per horizon"),
    "source": _field(
        {"enum": list(TRACKS)},
        "with shadow baselines on: the `source` of the forecast `forecasts` published for this "
        "bar (the fields above score the model's forecast whatever was published)",
    ),
    "baselines": _field(
        {
            "type": ["object", "null"],
            "additionalProperties": {"type": ["object", "null"], "additionalProperties": FLOATS},
        },
        "with shadow baselines on: each baseline's pinball, as `pinball` holds the model's, "
        "on the same bars (null for one not defined yet: its EWMAs warming up); null when "
        "unscored",
    ),
}
SCORE_FIELDS["canary"] = _field(
    {
        "type": "object",
        "properties": {"model_id": {"type": "string"}, "pinball": SCORE_FIELDS["pinball"]},
        "required": ["model_id", "pinball"],
        "additionalProperties": False,
    },
    "while a canary checkpoint runs beside the model (`forecasts.shadow`): its `model_id` and "
    "its forecast's pinball on the same bars; absent otherwise",
)
OPTIONAL_SCORE_FIELDS = ("source", "baselines", "canary")
NUMBER = {"type": "number"}


def _weights_of(names: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict.fromkeys(names + optional, NUMBER),
        "required": list(names),
        "additionalProperties": False,
    }


def _pairs(name: str, kind: dict[str, Any]) -> dict[str, Any]:
    """An array of `{name: ..., "weight": w}` objects."""
    pair = _object({name: kind, "weight": NUMBER}, [name, "weight"], False)
    return {"type": "array", "items": pair}


ATTENTION_FIELDS: dict[str, dict[str, Any]] = {
    "entropy": NUMBER,
    "entropy_by_horizon": FLOATS,
    "last_5": NUMBER,
    "last_15": NUMBER,
    "older": NUMBER,
    "future": NUMBER,
    "top_lags": _pairs("lag", INT),
}
EXPLAIN_FIELDS: dict[str, dict[str, Any]] = {
    "symbol": RAW_FIELDS["symbol"],
    "ts_event": _field(INT, "the explained forecast's `ts_event`, UNIX ns"),
    "model_id": FORECAST_FIELDS["model_id"],
    "fingerprint": FORECAST_FIELDS["fingerprint"],
    "schema_version": _field(INT, "1"),
    "historical": _field(
        _pairs("feature", {"type": "string"}),
        "the top `BARCAST_EXPLAIN_TOP_K` historical features by variable-selection weight, "
        "averaged over the window's bars, heaviest first: `{feature, weight}` each",
    ),
    "historical_top_k": _field(NUMBER, "their weights' sum (all features' sum to 1)"),
    "static": _field(_weights_of(STATIC_NAMES), "static variable-selection weight per variable"),
    "future": _field(
        _weights_of(FUTURE_NAMES, RELEASE_NAMES),
        "known-future variable-selection weight per calendar variable, averaged over the horizon "
        "(the release calendar's too, from a model trained with it)",
    ),
    "attention": _field(
        _object(ATTENTION_FIELDS, list(ATTENTION_FIELDS), False),
        "where the attention looked: `entropy` (nats, of each head's weights, mean over heads "
        "and horizons; 0 = one position) and `entropy_by_horizon`; of the heads' mean weights, "
        f"the mass on the last {RECENT[0]} bars (`last_{RECENT[0]}`), on the last {RECENT[1]} "
        f"(`last_{RECENT[1]}`), on the bars before those (`older`) and on the horizon's own "
        f"steps (`future`), mean over horizons, and `top_lags`: the {TOP_LAGS} bars with the "
        "most, `{lag, weight}` (lag 0 = the forecast's bar). Weights are rounded to 5 decimals",
    ),
}
CONTROL_FIELDS: dict[ControlKind, dict[str, dict[str, Any]]] = {
    ControlKind.END_OF_INTERVAL: {
        "ts_event": _field(INT, "every bar of the interval starting here was sent before it")
    },
    ControlKind.OUTAGE: {
        "ts_event": _field(
            INT,
            "live ingest could not recover the span from here (bars at this ts_event were "
            "sent for some instruments, maybe not all)",
        ),
        "end": _field(INT, "to here (exclusive): the first ts_event delivered after it"),
    },
    ControlKind.ROLL: {
        "ts_event": _field(INT, "the first bar of the new contract"),
        "symbol": _field({"type": "string"}, "the continuous symbol; also the record's key"),
        "raw_symbols": _field(
            {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
            "the old and the new contract's raw symbols",
        ),
        "ratio": _field(
            {"type": "number", "exclusiveMinimum": 0},
            "the new contract's price over the old one's: state carried over is scaled by it",
        ),
    },
    ControlKind.EXPIRED: {
        "ts_event": _field(INT, "the newest bar of the partition when the states were dropped"),
        "symbol": _field({"type": "string"}, "the symbol; also the record's key"),
        "last_ts": _field(
            INT, "its last bar, more than BARCAST_EXPIRE_DAYS before: a later bar starts anew"
        ),
    },
}
CONTROL_SCHEMA = {
    "description": f"a control record, key `{CONTROL_KEY.decode()}` (a roll's and an "
    "expiry's: the symbol)",
    "oneOf": [
        _object({"control": {"const": kind.value}, **fields}, ["control", *fields], False)
        for kind, fields in CONTROL_FIELDS.items()
    ],
}


def _with_control(bar: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [{**bar, "not": {"required": ["control"]}}, CONTROL_SCHEMA]}


BAR_REQUIRED = ["symbol", "ts_event", "open", "high", "low", "close", "volume"]
FORECAST_VALUE = {
    **_object(
        FORECAST_FIELDS,
        [n for n in FORECAST_FIELDS if "," not in n and n not in OPTIONAL_FORECAST_FIELDS],
        False,
    ),
    "patternProperties": {QUANTILES: SERIES},
}

# Topic (its default name) -> (what its value is, the value's JSON Schema)
TOPICS: dict[str, tuple[str, dict[str, Any]]] = {
    "bars.raw": (
        "one OHLCV bar, or a control record",
        _with_control(_object(RAW_FIELDS, BAR_REQUIRED, True)),
    ),
    "bars.clean": (
        "a bar as corrected (its `bars.raw` fields, any other dropped, and these), or a control "
        "record passed on",
        _with_control(_object(CLEAN_FIELDS, [*BAR_REQUIRED, "status", "corrections"], False)),
    ),
    "bars.dlq": ("the original bytes of a record that could not be processed: any bytes", {}),
    "features": (
        "one bar's feature row, or a control record passed on",
        _with_control(
            _object(FEATURES_FIELDS, [n for n in FEATURES_FIELDS if n != "raw_symbol"], False)
        ),
    ),
    "forecasts": ("the quantile forecast of one window", FORECAST_VALUE),
    "forecasts.shadow": (
        "with `BARCAST_CANARY=on`, while a new checkpoint runs in shadow: its forecast of one "
        "window, as on `forecasts` (its own `model_id`, calibrated online on its own, `source` "
        "`canary`)",
        FORECAST_VALUE,
    ),
    "forecasts.scores": (
        "the score of one forecast once the bars of its horizons are in (key = symbol)",
        _object(SCORE_FIELDS, [n for n in SCORE_FIELDS if n not in OPTIONAL_SCORE_FIELDS], False),
    ),
    "forecasts.explain": (
        "with `BARCAST_EXPLAIN=true`, what explains one forecast, from the forward pass that "
        "made it (key = symbol)",
        _object(EXPLAIN_FIELDS, list(EXPLAIN_FIELDS), False),
    ),
}

HEADERS = {
    KIND_HEADER: "`bar` or `control`, on every barcast topic but `bars.dlq`",
    RECEIVED_HEADER: "UNIX ns when corrections consumed the bar (`bars.clean`, `features`, "
    "`forecasts`): in a header so values stay byte-identical across restarts",
    DLQ_TOPIC: "`bars.dlq`: the topic the record came from",
    DLQ_PARTITION: "`bars.dlq`: its partition (none for a bar live ingest could not map)",
    DLQ_OFFSET: "`bars.dlq`: its offset (likewise)",
    DLQ_REASON: "`bars.dlq`: the reason code",
    DLQ_MESSAGE: "`bars.dlq`: why, for a human",
}


def schema(topic: str) -> dict[str, Any]:
    """The JSON Schema document of `topic`'s values (a topic's default name)."""
    what, value = TOPICS[topic]
    return {"$schema": DRAFT, "title": f"{topic} value", "description": what, **value}


def schema_file(topic: str) -> Path:
    return SCHEMA_DIR / f"{topic}.json"


def schema_text(topic: str) -> str:
    return json.dumps(schema(topic), indent=2) + "\n"


def field_table(fields: dict[str, dict[str, Any]]) -> str:
    """One row per field; consecutive fields of one meaning share a row."""
    merged: list[tuple[list[str], str]] = []
    for name, spec in fields.items():
        if merged and merged[-1][1] == spec["description"]:
            merged[-1][0].append(name)
        else:
            merged.append(([name], spec["description"]))
    rows = ["| field | meaning |", "| --- | --- |"]
    for names, meaning in merged:
        quoted = ", ".join(f"`{n.strip()}`" for name in names for n in name.split(","))
        rows.append(f"| {quoted} | {meaning} |")
    return "\n".join(rows)


def markdown_tables() -> str:
    """docs/topics.md's field tables (between its topics-table markers)."""
    added = {name: spec for name, spec in CLEAN_FIELDS.items() if name not in RAW_FIELDS}
    sections = [
        ("bars.raw", "", RAW_FIELDS),
        ("bars.clean", "", added),
        ("features", "", FEATURES_FIELDS),
        ("forecasts", "", FORECAST_FIELDS),
        ("forecasts.scores", "", SCORE_FIELDS),
        ("forecasts.explain", "", EXPLAIN_FIELDS),
    ]
    parts = [
        f"**`{topic}` values**: {lead}{TOPICS[topic][0]}\n\n{field_table(fields)}"
        for topic, lead, fields in sections
    ]
    parts.insert(4, f"**`forecasts.shadow` values**: {TOPICS['forecasts.shadow'][0]}.")
    headers = ["| header | meaning |", "| --- | --- |"]
    headers += [f"| `{name}` | {meaning} |" for name, meaning in HEADERS.items()]
    return "\n\n".join([*parts, "**Headers**\n\n" + "\n".join(headers)])


def main() -> None:
    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    for topic in TOPICS:
        schema_file(topic).write_text(schema_text(topic))
    print(markdown_tables())


if __name__ == "__main__":
    main()
