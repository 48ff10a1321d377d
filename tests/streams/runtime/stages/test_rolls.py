"""A roll through the corrections and features stages, in memory (no broker): the real 6EH4 bars
under `6E.c.0`, rolling to a second contract 0.25 % over it, give the feature rows of the same
bars without the jump, bit for bit, and the roll goes on to the next stage once, before the new
bars."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
import zstandard

from features import engine as feature_engine
from features.bars import PRICE_FIELDS, PRICE_SCALE, engine_columns
from features.corrections import bars_from_frame
from features.registry import FEATURE_NAMES
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import clean_history, served_history
from streams import schema
from streams.runtime.records import Control, FeatureRow, Record
from streams.runtime.stages.features import SymbolFeatures
from tests.checkpoints import make_checkpoint
from tests.roll_files import CONTINUOUS, MINUTE, NEW, OLD, SPREAD, roll_minute
from tests.streams.runtime.stages.test_corrections_features import stages
from tests.streams.runtime.test_stores import MemoryChangelogs

DAY = 86_400 * 10**9


@pytest.fixture(scope="module")
def three_days(sixe_bars: pd.DataFrame) -> pd.DataFrame:
    ts = sixe_bars.ts_event
    start = pd.Timestamp("2024-01-16", tz="UTC").value
    return sixe_bars[(ts >= start) & (ts < start + 3 * DAY)].reset_index(drop=True)


def raw_records(frame: pd.DataFrame, roll_ts: int, spread: float) -> list[Record]:
    """`bars.raw` as ingest keys it by the continuous symbol: 6EH4, the roll record, 6EM4
    (the same bars times `spread`)."""
    prices = ["open", "high", "low", "close"]
    after = frame.ts_event >= roll_ts
    moved = frame.copy()
    moved.loc[after, prices] = moved.loc[after, prices] * spread
    values = bars_from_frame(moved, symbol=CONTINUOUS, source="test")
    for value, new in zip(values, after, strict=True):
        value["raw_symbol"] = (NEW if new else OLD)[0]
    first = next(i for i, new in enumerate(after) if new)
    ratio = values[first]["open"] / values[first - 1]["close"]
    roll = schema.roll(roll_ts, CONTINUOUS, OLD[0], NEW[0], ratio)
    encoded = [orjson.dumps(v) for v in values]
    encoded.insert(first, schema.encode(roll))
    key = CONTINUOUS.encode()
    return [
        Record("bars.raw", 0, i, 0.0, key, v, schema.CONTROL_HEADERS if b'"control"' in v else [])
        for i, v in enumerate(encoded)
    ]


def run(records: list[Record], batch: int = 250) -> tuple[list, list, MemoryChangelogs, object]:
    """The records through both stages: bars.clean outputs, the rows and controls the
    features stage hands on; the stores and the corrections stage."""
    io = MemoryChangelogs()
    corrections, features = stages(io)
    clean, items = [], []
    for start in range(0, len(records), batch):
        cleaned = corrections.run(records[start : start + batch], now_ns=time.time_ns())
        assert not [o for o in cleaned.outputs if o.topic == "bars.dlq"], "a dead letter"
        clean += [o for o in cleaned.outputs if o.topic == "bars.clean"]
        items += features.run(cleaned.items).rows
    return clean, items, io, (corrections, features)


def test_a_roll_leaves_every_feature_as_without_the_jump(three_days: pd.DataFrame) -> None:
    roll_ts = roll_minute(three_days, "2024-01-17T15:00")
    clean, items, _, (corrections, features) = run(raw_records(three_days, roll_ts, SPREAD))
    _, plain_items, _, _ = run(raw_records(three_days, roll_ts, 1.0))
    assert corrections.stats.held == 0 and corrections.stats.rolls == 1  # type: ignore[attr-defined]
    values = [orjson.loads(o.value) for o in clean]
    rolls = [i for i, v in enumerate(values) if v.get("control") == "roll"]
    assert len(rolls) == 1 and values[rolls[0]]["ratio"] == pytest.approx(SPREAD, rel=1e-9)
    bars = [v for v in values if "control" not in v]
    assert all(v["ts_event"] < roll_ts for v in values[: rolls[0]] if "control" not in v)
    assert all(v["raw_symbol"] == NEW[0] for v in values[rolls[0] + 1 :])
    assert {v["status"] for v in bars} <= {"clean", "synthetic"}

    rows = [i for i in items if isinstance(i, FeatureRow)]
    plain_rows = [i for i in plain_items if isinstance(i, FeatureRow)]
    assert [r.ts_event for r in rows] == [r.ts_event for r in plain_rows]
    got, want = np.array([r.values for r in rows]), np.array([r.values for r in plain_rows])
    assert np.array_equal(got, want, equal_nan=True), "every feature, bit for bit"
    at = [r.ts_event for r in rows].index(roll_ts)
    assert got[at, FEATURE_NAMES.index("ret_1")] == want[at, FEATURE_NAMES.index("ret_1")]
    assert rows[at].close == pytest.approx(plain_rows[at].close * SPREAD, rel=1e-9), "its own"
    assert sum(isinstance(i, Control) and i.kind == "roll" for i in items) == 1
    state = features.store.read(CONTINUOUS.encode())  # type: ignore[attr-defined]
    assert state.scale == pytest.approx(1 / SPREAD, rel=1e-9) and state.rolled_at == roll_ts


def test_offline_replays_feed_the_engine_as_the_stage_does(three_days: pd.DataFrame) -> None:
    """model.serving.offline over the same `bars.raw` values: the stage's rows bit for bit."""
    roll_ts = roll_minute(three_days, "2024-01-17T15:00")
    records = raw_records(three_days, roll_ts, SPREAD)
    _, items, _, _ = run(records)
    rows = [i for i in items if isinstance(i, FeatureRow)]
    [clean] = clean_history(r.value for r in records).values()
    [(at, roll)] = clean.rolls
    assert clean.bars[at]["ts_event"] == roll.ts == roll_ts
    assert roll.ratio == pytest.approx(SPREAD, rel=1e-9)
    values, warm = feature_engine.compute_batch(*clean.columns())
    assert [b["ts_event"] for b in clean.bars] == [r.ts_event for r in rows]
    assert warm.tolist() == [r.warm for r in rows]
    assert np.array_equal(values, np.array([r.values for r in rows]), equal_nan=True)


def test_an_offline_replay_across_a_roll_publishes_what_the_unrolled_series_does(
    three_days: pd.DataFrame, tmp_path: Path
) -> None:
    """served_history: the model's quantiles bit for bit, every choice and calibration as
    without the jump, and the scores across the roll the market's move, to the ratio's
    rounding (a label that saw the spread would be off by 0.25 %)."""
    make_checkpoint(tmp_path)
    engine, roll_ts = ForecastEngine(tmp_path), roll_minute(three_days, "2024-01-17T15:00")
    rolled, plain = (
        served_history([r.value for r in raw_records(three_days, roll_ts, spread)], engine)
        for spread in (SPREAD, 1.0)
    )
    assert len(rolled[0]) == len(plain[0]) and rolled[1].keys() == plain[1].keys()
    for value, same in zip(rolled[0], plain[0], strict=True):
        assert value["source"] == same["source"] and value["raw_q50"] == same["raw_q50"]
        assert np.allclose(value["q10"], same["q10"], rtol=0, atol=1e-9)
    across = [k for k in rolled[1] if roll_ts - 10 * MINUTE <= k[1] < roll_ts]
    assert len(across) == 10 and all(rolled[1][k]["unscored"] is None for k in across)
    for key, score in rolled[1].items():
        assert score["unscored"] == plain[1][key]["unscored"], key
        if score["unscored"] is None:
            assert np.allclose(score["realized"], plain[1][key]["realized"], rtol=0, atol=1e-9)


def test_each_roll_scales_the_prices_fed_after_it_as_the_stage_does() -> None:
    """Two rolls, a third bar after each: `engine_columns` feeds what `SymbolFeatures` feeds."""
    ratios = (1.0025, 0.9961)
    bars = [{"ts_event": t, "volume": 1.0, "open": 1_101_234_567, "high": 1_101_934_567,
             "low": 1_100_234_567, "close": 1_101_534_567 + t} for t in range(9)]  # fmt: skip
    columns = engine_columns(bars, [(3, ratios[0]), (6, ratios[1])])
    symbol = SymbolFeatures()
    for t, bar in enumerate(bars):
        if t in (3, 6):
            assert symbol.roll(t, ratios[t // 3 - 1])
        fed = symbol.prices(bar) if t >= 3 else [bar[f] * PRICE_SCALE for f in PRICE_FIELDS]
        assert [column[t] for column in columns[1:5]] == fed
    assert columns[4][6] != engine_columns(bars, [(3, ratios[0])])[4][6]


def test_a_roll_published_again_upstream_is_taken_once(three_days: pd.DataFrame) -> None:
    """An upstream restart publishes the roll and the bars around it again: the corrections
    stage finds them repeats, and the features stage takes the roll record once."""
    roll_ts = roll_minute(three_days, "2024-01-17T15:00")
    records = raw_records(three_days, roll_ts, SPREAD)
    at = next(i for i, r in enumerate(records) if b'"roll"' in r.value)
    _, items, _, (corrections, features) = run(records)
    again = corrections.run(records[at - 5 : at + 5], now_ns=time.time_ns())  # type: ignore[attr-defined]
    assert not [o for o in again.outputs if o.topic == "bars.clean"], "repeats: nothing new"
    [roll] = [i for i in items if isinstance(i, Control) and i.kind == "roll"]
    assert features.run([roll]).rows == [roll]  # type: ignore[attr-defined]  # passed on
    state = features.store.read(CONTINUOUS.encode())  # type: ignore[attr-defined]
    assert state.scale == pytest.approx(1 / SPREAD, rel=1e-9)


def test_a_features_state_from_before_rolls_reads_and_a_rolled_one_round_trips() -> None:
    vector = feature_engine.new_states(1)[0]
    before = zstandard.ZstdCompressor().compress(
        struct.pack("<q", 7) + feature_engine.state_to_bytes(vector)
    )
    old = SymbolFeatures.from_bytes(before)
    assert (old.last_ts, old.scale) == (7, 1.0) and old.to_bytes() == SymbolFeatures(7).to_bytes()
    assert old.roll(8, 1.0025) and not old.roll(8, 1.0025), "taken once"
    again = SymbolFeatures.from_bytes(old.to_bytes())
    assert (again.last_ts, again.scale, again.rolled_at) == (7, 1 / 1.0025, 8)
