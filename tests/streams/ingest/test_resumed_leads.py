"""A restarted ingest following the lead resumes with each product's lead as last published:
what the bars' topic says it was (`published_leads`), and a continuity that starts from it
(unit tests), and a replay that goes on from the one before it through the real broker."""

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
from streams.ingest import live_cli
from streams.ingest.convert import bars_to_records, ohlcv_metadata
from streams.ingest.live import LiveIngest
from streams.ingest.live_options import LiveOptions
from streams.ingest.replay import Replay, ReplayOptions
from streams.ingest.resume import resume_leads
from streams.ingest.rolls import (
    GONE_AFTER_BARS,
    RESUME_DAYS,
    Continuity,
    Lead,
    published_leads,
)
from streams.ingest.symbols import Definition, SymbolBook
from streams.settings import Settings
from tests.roll_files import MINUTE, NEW, OLD, SPREAD, write_records
from tests.streams.ingest.test_rolls import DAY, T0, Recorded, bars
from tests.topic_logs import read_all


def bar_value(symbol: str, raw: str, ts: int, close: int) -> bytes:
    return orjson.dumps({"symbol": symbol, "raw_symbol": raw, "ts_event": ts, "close": close})


def roll_value(ts: int, symbol: str, old: str, new: str) -> bytes:
    return schema.encode(schema.roll(ts, symbol, old, new, 2.0))


def test_the_lead_is_the_contract_of_the_newest_bar_or_roll_of_each_product() -> None:
    """Keyed by the continuous symbol or by raw symbol; a roll comes after the old lead's bar of
    its minute, and names a contract whose close only a bar of it gives."""
    values = [
        bar_value("6E.v.0", "6EM4", T0 - MINUTE, 205),  # a lead before the one after it
        bar_value("6E.v.0", "6EH4", T0, 101),
        bar_value("ESH4", "ESH4", T0, 4800),
        roll_value(T0 + MINUTE, "ES.v.0", "ESH4", "ESM4"),
        bar_value("ESH4", "ESH4", T0 + MINUTE, 4801),  # the roll's minute, sent before it
        bar_value("NQH4", "NQH4", T0, 17000),
        roll_value(T0 + MINUTE, "NQ.v.0", "NQH4", "NQM4"),
        bar_value("NQM4", "NQM4", T0 + MINUTE, 17100),
        bar_value("EU.v.0", "6EZ4", T0, 108),  # the root a definition's asset made
    ]
    assert published_leads(values) == {
        "EU": Lead("6EZ4", T0, 108),
        "6E": Lead("6EH4", T0, 101),
        "ES": Lead("ESM4", T0 + MINUTE, None),
        "NQ": Lead("NQM4", T0 + MINUTE, 17100),
    }


def test_records_that_name_no_lead_are_passed_over() -> None:
    """Spreads, a Databento continuous symbol's roll, controls, another producer's values."""
    values = [
        bar_value("6EH4-6EM4", "6EH4-6EM4", T0, 3),
        roll_value(T0, "6E.c.0", "6EH4", "6EM4"),
        schema.encode(schema.end_of_interval(T0)),
        b"not json",
        b"[1, 2]",
        orjson.dumps({"symbol": "6EH4", "ts_event": T0}),
        orjson.dumps({"symbol": 7, "raw_symbol": "6EH4", "ts_event": T0, "close": 1}),
    ]
    assert published_leads(values) == {}


def test_a_topic_with_every_contracts_bars_names_no_lead() -> None:
    """Written with BARCAST_FOLLOW=all: two contracts' bars in its newest minute, no roll to
    say which led; a roll at that minute names it."""
    every = [bar_value("6EH4", "6EH4", T0, 101), bar_value("6EM4", "6EM4", T0, 205)]
    assert published_leads(every) == {}
    rolled = [*every, roll_value(T0, "6E.v.0", "6EH4", "6EM4")]
    assert published_leads(rolled) == {"6E": Lead("6EM4", T0, 205)}


def two_contracts() -> SymbolBook:
    book = SymbolBook()
    book.set(1, "6EH4")
    book.set(2, "6EM4")
    return book


def routed(continuity: Continuity, book: SymbolBook, rows: list) -> tuple[list[bool], list]:
    batch = bars(rows)
    out = continuity.route(batch, book.resolve(batch["instrument_id"], batch["ts_event"]))
    return out.keep.tolist(), [(row, r.old, r.new, r.ratio) for row, r in out.rolls]


@pytest.mark.parametrize("resumed", [True, False])
def test_a_resumed_lead_holds_although_another_contract_trades_first(resumed: bool) -> None:
    """A restart in the middle of a trading day: 6EM4's bar comes first in its minute. Resumed
    with 6EH4 it is skipped; ranked anew by the volume since the restart it takes the lead, and
    6EH4's larger bar takes it back: two false rolls."""
    book = two_contracts()
    leads = {"6E": Lead("6EH4", T0 - MINUTE, 100)} if resumed else {}
    continuity = Continuity(book, key_by="continuous", follow="lead", leads=leads)
    rows = [(2, T0, 200, 200, 3), (1, T0, 100, 101, 9), (2, T0 + MINUTE, 202, 202, 30)]
    keep, rolls = routed(continuity, book, rows)
    if resumed:
        assert keep == [False, True, False] and rolls == []
    else:
        assert keep == [True, True, True] and [r[:3] for r in rolls] == [
            (1, "6EM4", "6EH4"),
            (2, "6EH4", "6EM4"),
        ]


def test_live_ingest_resumes_with_the_lead_its_options_name() -> None:
    """What `barcast ingest-live` resumes with (live_cli.resumed) reaches the continuity."""
    sink = Recorded()
    lead = Lead(OLD[0], T0 - MINUTE, 1_100_000_000)
    options = LiveOptions(
        "GLBX.MDP3", "ohlcv-1m", "parent", ("6E.FUT",), key_by="continuous", follow="lead",
        leads={"6E": lead},
    )  # fmt: skip
    ingest = LiveIngest(options, "db-" + "k" * 29, sink)  # type: ignore[arg-type]
    for raw, iid in (NEW, OLD):
        ingest._handle(databento_dbn.SymbolMappingMsg(
            1, iid, T0, SType.PARENT, "6E.FUT", SType.RAW_SYMBOL, raw, T0,
            databento_dbn.UNDEF_TIMESTAMP,
        ))  # fmt: skip
        ingest._handle(databento_dbn.OHLCVMsg(33, 1, iid, T0, *[1_100_000_000] * 4, 7))
    assert [orjson.loads(v)["raw_symbol"] for v in sink.bars] == [OLD[0]]
    assert sink.rolls == [] and ingest.stats.not_lead == 1


@pytest.mark.parametrize(
    ("published", "held"),
    [
        (T0 + MINUTE, False),  # after the bars ingest gets: older bars replayed into the topic
        (T0 - (RESUME_DAYS + 1) * DAY, False),  # over RESUME_DAYS trading days before them
        (T0 - RESUME_DAYS * DAY, True),
    ],
)
def test_a_lead_published_after_the_bars_or_long_before_them_is_not_held(
    published: int, held: bool
) -> None:
    book = two_contracts()
    leads = {"6E": Lead("6EH4", published, 100)}
    continuity = Continuity(book, key_by="continuous", follow="lead", leads=leads)
    keep, _ = routed(continuity, book, [(2, T0, 200, 200, 3), (1, T0, 100, 101, 9)])
    assert keep == ([False, True] if held else [True, True])


def test_a_lead_keyed_by_its_raw_symbols_root_resumes_the_product_a_definition_names() -> None:
    """Keyed by raw symbol, a lead's root is read from its symbol; where the definitions name
    the product otherwise (asset EU), it still resumes the product's lead."""
    book = two_contracts()
    for raw in ("6EH4", "6EM4"):
        book.definitions[raw] = Definition(raw, asset="EU", instrument_class="F")
    leads = published_leads([bar_value("6EH4", "6EH4", T0 - MINUTE, 100)])
    assert leads == {"6E": Lead("6EH4", T0 - MINUTE, 100)}
    continuity = Continuity(book, key_by="continuous", follow="lead", leads=leads)
    keep, rolls = routed(continuity, book, [(2, T0, 200, 200, 3), (1, T0, 100, 101, 9)])
    assert keep == [False, True] and rolls == []


@pytest.mark.parametrize("close", [100, None])
def test_a_resumed_lead_gone_from_today_gives_way_with_a_roll_where_its_close_is_known(
    close: int | None,
) -> None:
    """The lead resumed with never trades (it expired while ingest was down): once 6EM4 traded
    GONE_AFTER_BARS bars it leads, rolled from the resumed lead's last close; with no close
    known, the lead changes with no roll record (the corrections roll at their own ratio)."""
    book = two_contracts()
    continuity = Continuity(
        book, key_by="continuous", follow="lead", leads={"6E": Lead("6EH4", T0 - MINUTE, close)}
    )
    rows = [(2, T0 + m * MINUTE, 200, 200 + m, 1) for m in range(GONE_AFTER_BARS)]
    keep, rolls = routed(continuity, book, rows)
    assert keep == [False] * (GONE_AFTER_BARS - 1) + [True]
    last = 200 + GONE_AFTER_BARS - 1
    expected = [(GONE_AFTER_BARS - 1, "6EH4", "6EM4", last / 100)] if close else []
    assert rolls == expected


def test_the_next_trading_day_ranks_by_the_volume_of_the_day_the_restart_saw() -> None:
    book = two_contracts()
    continuity = Continuity(
        book, key_by="continuous", follow="lead", leads={"6E": Lead("6EH4", T0 - MINUTE, 100)}
    )
    day = 86_400 * 10**9
    rows = [(2, T0, 200, 200, 50), (1, T0, 100, 100, 9), (1, T0 + day, 101, 101, 9)]
    rows += [(2, T0 + day, 203, 203, 1)]
    keep, rolls = routed(continuity, book, rows)
    assert keep == [False, True, False, True]
    assert rolls == [(3, "6EH4", "6EM4", 203 / 101)]


def parent_records(frame: pd.DataFrame, path: Path, back_first: bool) -> Path:
    """Both contracts' bars of `frame` (6EM4 at the spread, with a twentieth of the volume),
    each minute's 6EM4 bar first where `back_first`, as a gateway may send them."""
    old, new = frame.copy(), frame.copy()
    prices = ["open", "high", "low", "close"]
    new[prices] = new[prices] * SPREAD
    new["volume"] = (frame.volume / 20).round()
    records = np.concatenate([bars_to_records(old, OLD[1]), bars_to_records(new, NEW[1])])
    order = -records["instrument_id"].astype(np.int64) if back_first else records["instrument_id"]
    records = records[np.lexsort((order, records["ts_event"]))]
    start, end = int(frame.ts_event.iloc[0]), int(frame.ts_event.iloc[-1]) + MINUTE
    return write_records(path, ohlcv_metadata(dict([OLD, NEW]), start, end), [records.tobytes()])


@pytest.mark.integration
def test_a_replay_following_the_lead_goes_on_with_the_lead_the_one_before_published(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame
) -> None:
    """Two replays into one topic, three hours of a trading day and the hour after; the
    second's every minute sends the back month's bar first. Resumed with the lead the first
    published, it publishes the front month alone, with no roll."""
    settings = replace(broker_settings, key_by="continuous", follow="lead")
    ts = sixe_bars.ts_event
    first = sixe_bars[(ts >= T0) & (ts < T0 + 3 * 3600 * 10**9)].reset_index(drop=True)
    second = sixe_bars[(ts >= T0 + 3 * 3600 * 10**9) & (ts < T0 + 4 * 3600 * 10**9)]
    for part, frame, back_first in ((1, first, False), (2, second.reset_index(drop=True), True)):
        path = parent_records(frame, tmp_path / f"part{part}.dbn.zst", back_first)
        assert Replay(settings, ReplayOptions((path,), settings.topic_raw)).run().error is None
        if part == 1:
            sent = [orjson.loads(m.value) for m in read_all(settings.broker, settings.topic_raw)]
            last = max((v for v in sent if "control" not in v), key=lambda v: v["ts_event"])
            assert last["ts_event"] == int(first.ts_event.iloc[-1])
            leads = {"6E": Lead(OLD[0], last["ts_event"], last["close"])}
            assert resume_leads(settings, settings.topic_raw) == leads
            options = LiveOptions("GLBX.MDP3", "ohlcv-1m", "parent", ("6E.FUT",), follow="lead")
            assert live_cli.with_leads(options, settings, settings.topic_raw).leads == leads
    values = [orjson.loads(m.value) for m in read_all(settings.broker, settings.topic_raw)]
    assert [v for v in values if v.get("control") == "roll"] == []
    published = [v for v in values if "control" not in v]
    assert len(published) == len(first) + len(second)
    assert {(v["symbol"], v["raw_symbol"]) for v in published} == {("6E.v.0", OLD[0])}
