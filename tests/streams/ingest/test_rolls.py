"""Continuous symbols and rolls at ingest: keys, raw symbols, the lead by volume, roll control
records (unit tests of the pieces; replay through the real broker)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import databento_dbn
import numpy as np
import orjson
import pandas as pd
import pytest
from databento_dbn import SType

from streams import schema
from streams.ingest.dbn_source import OHLCV_DTYPE
from streams.ingest.live import LiveIngest
from streams.ingest.live_options import LiveOptions
from streams.ingest.replay import Replay, ReplayOptions
from streams.ingest.rolls import GONE_AFTER_BARS, TRADING_DAY_SHIFT_NS, Continuity
from streams.ingest.symbols import SymbolBook
from streams.settings import Settings
from tests.kafka_io import Message
from tests.roll_files import (
    CONTINUOUS,
    MINUTE,
    NEW,
    OLD,
    SPREAD,
    continuous_recording,
    mapping,
    parent_file,
    roll_minute,
)
from tests.topic_logs import read_all

DAY = 86_400 * 10**9
T0 = 1_705_449_600 * 10**9  # 2024-01-17


def bars(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    """(instrument_id, ts_event, open, close, volume) each, as OHLCV records."""
    out = np.zeros(len(rows), OHLCV_DTYPE)
    names = ("instrument_id", "ts_event", "open", "close", "volume")
    for name, column in zip(names, zip(*rows, strict=True), strict=True):
        out[name] = column
    out["high"], out["low"], out["rtype"] = np.maximum(out["open"], out["close"]), 1, 33
    return out


def continuous_book() -> SymbolBook:
    """6E.c.0 on 6EH4 (id 1) from T0, on 6EM4 (id 2) from T0 + 10 minutes."""
    book = SymbolBook()
    for iid, raw, start in ((1, "6EH4", T0), (2, "6EM4", T0 + 10 * MINUTE)):
        book.add_record(databento_dbn.SymbolMappingMsg(
            1, iid, start, SType.CONTINUOUS, CONTINUOUS, SType.RAW_SYMBOL, raw, start,
            databento_dbn.UNDEF_TIMESTAMP,
        ))  # fmt: skip
    return book


def test_a_continuous_mapping_names_its_contract_until_the_next_one_takes_the_symbol() -> None:
    book = continuous_book()
    ids = np.array([1, 1, 2, 2], np.uint32)
    ts = np.array([T0, T0 + 10 * MINUTE, T0 + 10 * MINUTE, T0 + 9 * MINUTE], np.uint64)
    names = [book.symbols[i] if i >= 0 else None for i in book.continuous(ids, ts)]
    assert names == [CONTINUOUS, None, CONTINUOUS, CONTINUOUS], "the new one from its day"
    assert [book.symbols[i] for i in book.resolve(ids, ts)] == ["6EH4", "6EH4", "6EM4", "6EM4"]


def test_a_continuous_requests_metadata_names_the_symbol_by_day() -> None:
    from datetime import date
    from types import SimpleNamespace as NS

    intervals = [
        NS(start_date=date(2024, 1, 17), end_date=date(2024, 1, 18), symbol="1"),
        NS(start_date=date(2024, 1, 18), end_date=date(2024, 1, 19), symbol="2"),
    ]
    metadata = databento_dbn.Metadata(
        "GLBX.MDP3", T0, SType.CONTINUOUS, SType.INSTRUMENT_ID, databento_dbn.Schema.OHLCV_1M,
        [CONTINUOUS], [], [], [NS(raw_symbol=CONTINUOUS, intervals=intervals)], T0 + 2 * DAY,
        0, False, 3,
    )  # fmt: skip
    book = SymbolBook()
    assert book.add_metadata(metadata) is False, "it names no raw symbols"
    ids, ts = np.array([1, 1, 2], np.uint32), np.array([T0, T0 + DAY, T0 + DAY], np.uint64)
    assert book.continuous(ids, ts).tolist() == [0, -1, 0]


@pytest.mark.parametrize("key_by", ["raw", "continuous"])
def test_a_new_contract_behind_a_continuous_symbol_is_a_roll(key_by: str) -> None:
    """The ratio is the new contract's first open over the old one's last close; the bars are
    keyed by the continuous symbol or, by default, their raw one."""
    book = continuous_book()
    continuity = Continuity(book, key_by=key_by)
    old = bars([(1, T0 + i * MINUTE, 100, 101 + i, 5) for i in range(10)])
    new = bars([(2, T0 + (10 + i) * MINUTE, 221, 222, 5) for i in range(3)])
    first = continuity.route(old, book.resolve(old["instrument_id"], old["ts_event"]))
    assert first.rolls == [] and first.keep.all()
    routed = continuity.route(new, book.resolve(new["instrument_id"], new["ts_event"]))
    [(row, roll)] = routed.rolls
    assert (row, roll.symbol, roll.old, roll.new, roll.ts_event) == (
        0, CONTINUOUS, "6EH4", "6EM4", T0 + 10 * MINUTE
    )  # fmt: skip
    assert roll.ratio == 221 / 110
    keys = [book.symbols[k] for k in routed.keys]
    assert keys == ([CONTINUOUS] * 3 if key_by == "continuous" else ["6EM4"] * 3)


def test_following_the_lead_keeps_the_contract_that_traded_most_the_trading_day_before() -> None:
    """Day 1 (no day before): the most so far; day 2: day 1's lead although 2 trades more;
    day 3: 2, which traded most on day 2. A trading day starts at 22:00 UTC."""
    book = SymbolBook()
    book.set(1, "6EH4")
    book.set(2, "6EM4")
    day = lambda n: T0 + n * DAY - TRADING_DAY_SHIFT_NS  # noqa: E731  (22:00 the day before)
    rows = [
        (2, day(0), 200, 200, 3), (1, day(0) + MINUTE, 100, 100, 9),
        (2, day(0) + 2 * MINUTE, 201, 201, 1),
        (1, day(1), 102, 102, 1), (2, day(1) + MINUTE, 204, 204, 50),
        (1, day(2), 103, 103, 1), (2, day(2), 208, 208, 1),
    ]  # fmt: skip
    continuity = Continuity(book, key_by="continuous", follow="lead")
    batch = bars(rows)
    routed = continuity.route(batch, book.resolve(batch["instrument_id"], batch["ts_event"]))
    assert routed.keep.tolist() == [True, True, False, True, False, False, True]
    assert {book.symbols[k] for k in routed.keys} == {"6E.v.0"}
    assert [(row, r.old, r.new, r.ratio) for row, r in routed.rolls] == [
        (1, "6EM4", "6EH4", 100 / 200),  # 9 lots of 6EH4 pass 3 of 6EM4 on the first day
        (6, "6EH4", "6EM4", 208 / 103),  # day 2's volume decides day 3: at 6EM4's first bar
    ]


def test_on_the_first_day_the_lead_is_the_most_traded_so_far_bar_by_bar() -> None:
    book = SymbolBook()
    book.set(1, "6EH4")
    book.set(2, "6EM4")
    rows = [(1, T0, 100, 100, 5), (2, T0, 200, 200, 3), (2, T0 + MINUTE, 202, 202, 3)]
    continuity = Continuity(book, key_by="continuous", follow="lead")
    batch = bars(rows)
    routed = continuity.route(batch, book.resolve(batch["instrument_id"], batch["ts_event"]))
    assert routed.keep.tolist() == [True, False, True]
    assert [(row, r.old, r.new, r.ratio) for row, r in routed.rolls] == [
        (2, "6EH4", "6EM4", 202 / 100)
    ]


def test_a_spread_kept_is_published_under_its_own_symbol_never_as_a_lead() -> None:
    """With --keep-spreads a calendar spread's bars go on, keyed by its raw symbol: however
    much it trades, the product's lead stays an outright, with no roll to or from it."""
    book = SymbolBook()
    for iid, raw in ((1, "6EH4"), (2, "6EH4-6EM4")):
        book.set(iid, raw)
    rows = [(1, T0, 100, 100, 5), (2, T0, 1, 1, 500), (1, T0 + MINUTE, 101, 101, 5)]
    continuity = Continuity(book, key_by="continuous", follow="lead")
    batch = bars(rows)
    routed = continuity.route(batch, book.resolve(batch["instrument_id"], batch["ts_event"]))
    assert routed.keep.tolist() == [True, True, True] and routed.rolls == []
    assert [book.symbols[k] for k in routed.keys] == ["6E.v.0", "6EH4-6EM4", "6E.v.0"]


@pytest.mark.parametrize("old_close", [0, -5])
def test_a_new_lead_after_a_close_that_is_no_price_sends_no_roll(old_close: int) -> None:
    """A roll's ratio needs two prices above 0: without, the lead changes with no roll
    record (the corrections roll the state at their own), and ingest goes on."""
    book = SymbolBook()
    book.set(1, "6EH4")
    book.set(2, "6EM4")
    rows = [(1, T0, 100, old_close, 5), (2, T0 + MINUTE, 200, 200, 9)]
    continuity = Continuity(book, key_by="continuous", follow="lead")
    batch = bars(rows)
    routed = continuity.route(batch, book.resolve(batch["instrument_id"], batch["ts_event"]))
    assert routed.keep.tolist() == [True, True] and routed.rolls == []


@pytest.mark.parametrize("traded_before", [True, False])
def test_a_lead_gone_from_today_gives_way_once_another_contract_traded_long_enough(
    traded_before: bool,
) -> None:
    """Day 1's lead (6EH4) expired: on day 2 only 6EM4 trades. Its first GONE_AFTER_BARS - 1
    bars are skipped, as 6EH4 might still trade; from the next one it is the lead, after a roll,
    whether it traded on day 1 or not. A third contract, with less (or no) volume the day
    before, stays out; 6EH4 back (it had not expired) is the lead again."""
    book = SymbolBook()
    for iid, raw in ((1, "6EH4"), (2, "6EM4"), (3, "6EU4")):
        book.set(iid, raw)
    day2 = T0 + DAY - TRADING_DAY_SHIFT_NS
    rows = [(1, day2 - DAY, 100, 100, 9)] + [(2, day2 - DAY + MINUTE, 200, 200, 3)] * traded_before
    rows += [(2, day2 + m * MINUTE, 201, 201 + m, 1) for m in range(GONE_AFTER_BARS + 1)]
    rows += [(3, day2 + GONE_AFTER_BARS * MINUTE, 300, 300, 1)]
    rows += [(1, day2 + (GONE_AFTER_BARS + 1) * MINUTE, 110, 110, 1)]
    continuity = Continuity(book, key_by="continuous", follow="lead")
    batch = bars(rows)
    routed = continuity.route(batch, book.resolve(batch["instrument_id"], batch["ts_event"]))
    day1 = [True, False][: 1 + traded_before]
    skipped = [False] * (GONE_AFTER_BARS - 1)
    assert routed.keep.tolist() == [*day1, *skipped, True, True, False, True]
    first = len(day1) + GONE_AFTER_BARS - 1  # 6EM4's bar that makes GONE_AFTER_BARS today
    # Of the two closes of day 1, or without one of 6EM4, its close now over 6EH4's last
    ratio = 200 / 100 if traded_before else (201 + GONE_AFTER_BARS - 1) / 100
    assert [(row, r.old, r.new, r.ratio) for row, r in routed.rolls] == [
        (first, "6EH4", "6EM4", ratio),
        (len(rows) - 1, "6EM4", "6EH4", 110 / (201 + GONE_AFTER_BARS)),
    ]


class Recorded:
    def __init__(self) -> None:
        self.bars: list[bytes] = []
        self.rolls: list[schema.ControlRecord] = []

    def send_bars(self, values: list[bytes], keys: list[bytes], timestamps: list[int]) -> None:
        self.bars += values

    def send_roll(self, roll: schema.ControlRecord) -> None:
        self.rolls.append(roll)


def test_live_ingest_of_a_continuous_subscription_sends_a_roll_before_the_new_contract() -> None:
    sink = Recorded()
    options = LiveOptions("GLBX.MDP3", "ohlcv-1m", "continuous", (CONTINUOUS,), key_by="continuous")
    ingest = LiveIngest(options, "db-" + "k" * 29, sink)  # type: ignore[arg-type]

    def bar(iid: int, ts: int, price: int) -> databento_dbn.OHLCVMsg:
        return databento_dbn.OHLCVMsg(33, 1, iid, ts, price, price, price, price, 7)

    for record in (
        mapping(OLD[1], OLD[0], T0), bar(OLD[1], T0, 400), bar(OLD[1], T0 + MINUTE, 404),
        mapping(NEW[1], NEW[0], T0 + 2 * MINUTE), bar(NEW[1], T0 + 2 * MINUTE, 1010),
    ):  # fmt: skip
        ingest._handle(record)
    values = [orjson.loads(v) for v in sink.bars]
    assert [(v["symbol"], v["raw_symbol"]) for v in values] == [
        (CONTINUOUS, "6EH4"), (CONTINUOUS, "6EH4"), (CONTINUOUS, "6EM4")
    ]  # fmt: skip
    assert sink.rolls == [schema.roll(T0 + 2 * MINUTE, CONTINUOUS, "6EH4", "6EM4", 1010 / 404)]
    assert ingest.stats.rolls == 1


@pytest.fixture(scope="module")
def three_days(sixe_bars: pd.DataFrame) -> pd.DataFrame:
    """The real 6EH4 bars of 2024-01-16 to 18 (UTC)."""
    ts = sixe_bars.ts_event
    return sixe_bars[(ts >= T0 - DAY) & (ts < T0 + 2 * DAY)].reset_index(drop=True)


def replayed(settings: Settings, path: Path) -> tuple[list[Message], list[Message]]:
    """Replay `path` into bars.raw; its bar and roll records, each in partition order."""
    summary = Replay(settings, ReplayOptions((path,), settings.topic_raw)).run()
    assert summary.error is None
    messages = read_all(settings.broker, settings.topic_raw)
    rolls = [m for m in messages if orjson.loads(m.value).get("control") == "roll"]
    return [m for m in messages if m.key != schema.CONTROL_KEY and m not in rolls], rolls


@pytest.mark.integration
@pytest.mark.parametrize("key_by", ["raw", "continuous"])
def test_a_replayed_continuous_recording_sends_its_roll_between_the_two_contracts(
    broker_settings: Settings, tmp_path: Path, three_days: pd.DataFrame, key_by: str
) -> None:
    roll_ts = roll_minute(three_days, "2024-01-17T15:00")
    recording = continuous_recording(three_days, tmp_path / "c.dbn.zst", roll_ts)
    settings = replace(broker_settings, key_by=key_by)
    bars, [roll] = replayed(settings, recording.path)
    assert len(bars) == len(three_days)
    value = orjson.loads(roll.value)
    assert value == {**schema.roll(roll_ts, CONTINUOUS, OLD[0], NEW[0], value["ratio"])}
    assert value["ratio"] == pytest.approx(SPREAD, rel=1e-9) and roll.key == CONTINUOUS.encode()
    values = [orjson.loads(m.value) for m in bars]
    assert [v["raw_symbol"] for v in values] == [
        OLD[0] if v["ts_event"] < roll_ts else NEW[0] for v in values
    ]
    if key_by == "raw":
        assert [v["symbol"] for v in values] == [v["raw_symbol"] for v in values]
        return
    assert {(m.key, m.partition) for m in bars} == {(CONTINUOUS.encode(), roll.partition)}
    ts = [(m.offset < roll.offset, v["ts_event"]) for m, v in zip(bars, values, strict=True)]
    assert (
        max(t for before, t in ts if before) < roll_ts == min(t for before, t in ts if not before)
    )


@pytest.mark.integration
def test_following_the_lead_of_a_parent_subscription_publishes_one_contract_at_a_time(
    broker_settings: Settings, tmp_path: Path, three_days: pd.DataFrame
) -> None:
    """6EM4 trades most from the second trading day (2024-01-17, from 22:00 UTC the day
    before): the lead rolls to it at the third's first bar, at the ratio of the two closes."""
    switch = T0 - TRADING_DAY_SHIFT_NS
    path = parent_file(three_days, tmp_path / "parent.dbn.zst", switch)
    settings = replace(broker_settings, key_by="continuous", follow="lead")
    bars, [roll] = replayed(settings, path)
    first = int(three_days.ts_event[three_days.ts_event >= switch + DAY].iloc[0])
    values = [orjson.loads(m.value) for m in bars]
    assert [(v["raw_symbol"], v["ts_event"]) for v in values] == [
        (OLD[0] if ts < first else NEW[0], ts) for ts in three_days.ts_event
    ]
    assert {v["symbol"] for v in values} == {"6E.v.0"}
    value = orjson.loads(roll.value)
    assert (value["ts_event"], value["raw_symbols"]) == (first, [OLD[0], NEW[0]])
    assert value["ratio"] == pytest.approx(SPREAD, rel=1e-9)
