"""Live resubscription: resends dropped by instrument, the gateway's replay window, outages and
their backfill from Databento Historical, through the real `databento` clients, local gateways
and the real broker."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from streams import schema
from streams.exit_codes import ExitCode
from streams.ingest import live_cli
from streams.ingest.resume import (
    CLAMP_MARGIN_NS,
    Published,
    earliest_start,
    resume_start,
    topic_resume,
)
from streams.settings import Settings
from tests.historical_gateway import HistoricalGateway
from tests.kafka_io import Message
from tests.live_gateway import MINUTE_NS, LiveGateway
from tests.streams.ingest.test_live import KEY, SYMBOLS, file_rows, ingest_live
from tests.tls_certs import make_certificates
from tests.topic_logs import read_all


def test_a_bar_not_newer_than_its_instruments_last_is_a_resend() -> None:
    published = Published()
    assert published.add(33, 1, 1000) and published.add(33, 2, 1000)
    assert not published.add(33, 1, 1000) and not published.add(33, 1, 400)
    assert published.add(33, 1, 1060) and published.add(32, 1, 1000), "another rtype"
    assert not published.add(33, 2, 999), "however old: never forgotten"
    assert published.newest == 1060


def test_the_earliest_start_is_a_bar_boundary_inside_the_window() -> None:
    now = 1_719_877_230 * 10**9 + 7  # 30 s and 7 ns into a minute
    earliest = earliest_start(now, 300.0, "ohlcv-1m")
    assert earliest % MINUTE_NS == 0
    assert now - 300 * 10**9 + CLAMP_MARGIN_NS <= earliest < now - 240 * 10**9 + MINUTE_NS


def test_a_restart_resumes_where_every_partition_holds_every_bar_before() -> None:
    m = 1_719_877_200 * 10**9
    bar = {"symbol": "ESU4", "ts_event": m, "close": 5500.25}
    roll = schema.roll(m - MINUTE_NS, "ES.c.0", "ESU4", "ESZ4", 1.01)
    newest = {
        0: schema.encode(schema.end_of_interval(m)),  # minute m complete
        1: orjson.dumps(bar),  # minute m under way: its other bars may not have come
        2: schema.encode(schema.outage(m - 9 * MINUTE_NS, m + 2 * MINUTE_NS)),
        3: schema.encode(roll),
    }
    assert topic_resume(newest, "ohlcv-1m") == m - MINUTE_NS
    del newest[3]
    assert topic_resume(newest, "ohlcv-1m") == m
    assert topic_resume({0: newest[0], 2: newest[2]}, "ohlcv-1m") == m + MINUTE_NS
    assert topic_resume({0: newest[0]}, "ohlcv-1s") == m + 10**9
    assert topic_resume({}, "ohlcv-1m") is None, "an empty topic: from now"


def esu4_nqu4(dbn_files: list[Path]) -> Path:
    """60 bars: ESU4 and NQU4, 30 minutes from 2024-07-01 23:40."""
    return next(p for p in dbn_files if "esu4-nqu4" in p.name)


def raw_topic(settings: Settings) -> tuple[list[dict], dict[int, list[Message]]]:
    """bars.raw: its bar values, and each partition's messages in order."""
    messages = read_all(settings.broker, settings.topic_raw)
    partitions: dict[int, list[Message]] = defaultdict(list)
    for message in messages:
        partitions[message.partition].append(message)
    bars = [orjson.loads(m.value) for m in messages if m.key != schema.CONTROL_KEY]
    return bars, partitions


def sent_before_the_cut(gateway: LiveGateway, cut: int) -> tuple[int, set[tuple[str, int]]]:
    """The newest ts_event and the bars of the first `cut` the gateway sent."""
    bars = gateway.bars[:cut]
    return bars[-1].ts_event, {(gateway.symbols[b.instrument_id], b.ts_event) for b in bars}


def assert_each_once(bars: list[dict], expected: set[tuple[str, int]]) -> None:
    got = [(b["symbol"], b["ts_event"]) for b in bars]
    assert len(got) == len(set(got)), "a bar was published twice"
    assert set(got) == expected, (sorted(expected - set(got))[:4], sorted(set(got) - expected)[:4])


@pytest.mark.integration
def test_a_gateway_resending_its_whole_file_on_every_connection_publishes_each_bar_once(
    broker_settings: Settings, dbn_files: list[Path]
) -> None:
    """Three hang-ups, each session starting again from the file's first bar (as Databento's
    mock gateway does): whatever it resends, no bar twice, and the resends counted."""
    path = esu4_nqu4(dbn_files)
    rows = set(file_rows(path))
    cuts = (23, 40, 51)
    with LiveGateway(path, KEY, hang_ups=cuts, resend_all=True) as gateway:
        stats = ingest_live(broker_settings, gateway, lambda s: s.bars >= len(rows))
    assert [s.bars_sent for s in gateway.sessions] == [*cuts, len(rows)]
    assert (stats.bars, stats.reconnects, stats.outages) == (len(rows), 3, 0)
    # Session k resends what sessions before it delivered: all but, per cut, the one bar a
    # hang-up may catch unsent in the gateway's buffer.
    assert sum(cuts) - 2 * len(cuts) <= stats.resent <= sum(cuts)
    bars, _ = raw_topic(broker_settings)
    assert_each_once(bars, rows)


def outage_controls(partitions: dict[int, list[Message]]) -> dict[int, list[dict]]:
    return {
        p: [v for m in ms if (v := orjson.loads(m.value)).get("control") == "outage"]
        for p, ms in partitions.items()
    }


def assert_outage_between(
    partitions: dict[int, list[Message]], start: int, end: int, resumed: int | None = None
) -> None:
    """One OUTAGE record on every partition, after every bar before the span and before every
    bar after it, and no bar inside it but those of the minute the gateway `resumed` in."""
    for messages in partitions.values():
        values = [orjson.loads(m.value) for m in messages]
        kinds = [v.get("control") for v in values]
        assert kinds.count("outage") == 1
        at = kinds.index("outage")
        assert values[at] == {"control": "outage", "ts_event": start, "end": end}
        bars = [(i, v["ts_event"]) for i, v in enumerate(values) if "symbol" in v]
        assert all(ts <= start for i, ts in bars if i < at)
        assert all(ts >= (end if resumed is None else resumed) for i, ts in bars if i > at)


@pytest.mark.integration
def test_a_resubscription_older_than_the_replay_window_is_clamped_and_the_rest_an_outage(
    broker_settings: Settings, dbn_files: list[Path]
) -> None:
    """The client is away 10 minutes, the gateway replays 5: the resubscription starts inside
    the window (refused otherwise), and the minutes it cannot have are an OUTAGE record."""
    path = esu4_nqu4(dbn_files)
    rows = file_rows(path)
    with LiveGateway(path, KEY, hang_ups=(23,), downtime_s=600, replay_window_s=300) as gateway:
        cut_minute, before = sent_before_the_cut(gateway, 23)  # one of the minute's two bars
        end = cut_minute + 6 * MINUTE_NS  # away to minute 10, window from 5, 1 minute margin
        lost = {(symbol, ts) for symbol, ts in rows if cut_minute <= ts < end} - before
        stats = ingest_live(
            broker_settings, gateway, lambda s: s.outages >= 1 and s.bars >= len(rows) - len(lost),
            replay_window_s=300,
        )  # fmt: skip
    assert [s.subscriptions[0].start for s in gateway.sessions] == [None, end]
    assert (stats.bars, stats.outages, stats.backfilled, len(lost)) == (len(rows) - 11, 1, 0, 11)
    bars, partitions = raw_topic(broker_settings)
    assert_each_once(bars, set(rows) - lost)
    assert_outage_between(partitions, cut_minute, end)


@pytest.mark.integration
def test_minutes_the_gateways_replay_aged_out_are_an_outage(
    broker_settings: Settings, dbn_files: list[Path]
) -> None:
    """The gateway replays less than the client expects (over a weekend, Databento's "may
    report less than 24 hours"): it skips to its window and says REPLAY_DATA_AGED_OUT."""
    path = esu4_nqu4(dbn_files)
    rows = file_rows(path)
    gateway = LiveGateway(
        path, KEY, hang_ups=(23,), downtime_s=600, replay_window_s=300, ages_out=True
    )
    with gateway:
        cut_minute, before = sent_before_the_cut(gateway, 23)
        end = cut_minute + 5 * MINUTE_NS  # away to minute 10, the gateway's window from 5
        lost = {(symbol, ts) for symbol, ts in rows if cut_minute <= ts < end} - before
        stats = ingest_live(
            broker_settings, gateway, lambda s: s.outages >= 1 and s.bars >= len(rows) - len(lost)
        )
    assert gateway.sessions[1].subscriptions[0].start == cut_minute
    assert (stats.bars, stats.outages, len(lost)) == (len(rows) - 9, 1, 9)
    bars, partitions = raw_topic(broker_settings)
    assert_each_once(bars, set(rows) - lost)
    assert_outage_between(partitions, cut_minute, end)


@pytest.mark.integration
@pytest.mark.parametrize("skipped", [9, 8])  # up to a minute's end, and within a minute
def test_bars_the_gateway_skips_for_a_slow_reader_are_an_outage(
    broker_settings: Settings, dbn_files: list[Path], skipped: int
) -> None:
    """The gateway skips records a slow client has not read, says
    SKIPPED_RECORDS_AFTER_SLOW_READING and goes on: the skipped span is an outage, through the
    end of the minute it resumes in."""
    path = esu4_nqu4(dbn_files)
    rows = file_rows(path)
    gateway = LiveGateway(path, KEY, slow_skip=(23, skipped))
    with gateway:
        cut_minute, _ = sent_before_the_cut(gateway, 23)
        skips = gateway.bars[23 : 23 + skipped]
        lost = {(gateway.symbols[b.instrument_id], b.ts_event) for b in skips}
        resumed = gateway.bars[23 + skipped].ts_event
        stats = ingest_live(
            broker_settings,
            gateway,
            lambda s: s.outages >= 1 and s.bars >= len(rows) - skipped,
        )
    assert (stats.bars, stats.outages, stats.reconnects) == (len(rows) - skipped, 1, 0)
    bars, partitions = raw_topic(broker_settings)
    assert_each_once(bars, set(rows) - lost)
    assert_outage_between(partitions, cut_minute, resumed + MINUTE_NS, resumed)
    # what each case is: a skip of 8 ends within the minute the gateway resumes in
    assert (max(b.ts_event for b in skips) == resumed) == (skipped == 8)


@pytest.mark.integration
def test_backfill_fetches_the_unrecoverable_span_from_historical_once(
    broker_settings: Settings,
    dbn_files: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the clamp test, with `--backfill` against a local Historical endpoint: the span's
    bars arrive once (the one published before the hang-up is not sent again), and no outage."""
    path = esu4_nqu4(dbn_files)
    rows = file_rows(path)
    tls = make_certificates(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca))  # requests trusts the test CA
    live = LiveGateway(path, KEY, hang_ups=(23,), downtime_s=600, replay_window_s=300)
    with live, HistoricalGateway(path, KEY, tls) as historical:
        cut_minute, _ = sent_before_the_cut(live, 23)
        stats = ingest_live(
            broker_settings, live, lambda s: s.bars >= len(rows), replay_window_s=300,
            backfill=True, historical_gateway=historical.url,
        )  # fmt: skip
    end = cut_minute + 6 * MINUTE_NS
    [request] = historical.requests
    assert (request.start, request.end, request.symbols) == (cut_minute, end, tuple(SYMBOLS))
    assert (request.dataset, request.schema, request.stype_in) == (
        "GLBX.MDP3",
        "ohlcv-1m",
        "parent",
    )
    assert (stats.bars, stats.backfilled, stats.outages) == (len(rows), 11, 0)
    assert stats.resent >= 1  # the cut minute's bar published before the hang-up
    bars, partitions = raw_topic(broker_settings)
    assert_each_once(bars, set(rows))
    assert not any(outage_controls(partitions).values())
    assert {b["source"] for b in bars} == {"live:GLBX.MDP3"}


@pytest.mark.integration
def test_a_backfill_before_any_session_names_its_bars_by_symbology(
    broker_settings: Settings,
    dbn_files: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restart 10 minutes after its start point, the gateway replaying 5: the span before
    the window is backfilled before any session has named an instrument, and a `parent`
    request's metadata names none either; symbology.resolve does, so no bar is dead-lettered."""
    path = esu4_nqu4(dbn_files)
    rows = file_rows(path)
    tls = make_certificates(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca))
    live = LiveGateway(path, KEY, replay_window_s=300)
    first = live.now
    live.now = first + 10 * MINUTE_NS
    with live, HistoricalGateway(path, KEY, tls) as historical:
        stats = ingest_live(
            broker_settings, live, lambda s: s.bars >= len(rows), replay_window_s=300,
            backfill=True, historical_gateway=historical.url, start_ns=first,
        )  # fmt: skip
    [request] = historical.requests
    assert (request.start, request.end) == (first, first + 6 * MINUTE_NS)
    [resolved] = historical.resolved
    assert sorted(resolved["symbols"].split(",")) == sorted({str(i) for i in live.symbols})
    assert (stats.bars, stats.backfilled, stats.unmapped, stats.outages) == (len(rows), 12, 0, 0)
    assert read_all(broker_settings.broker, broker_settings.topic_dlq) == []
    assert_each_once(raw_topic(broker_settings)[0], set(rows))


@pytest.mark.integration
def test_a_restarted_ingest_resumes_where_its_topic_ends(
    broker_settings: Settings,
    dbn_files: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`barcast ingest-live` (no --start, the topic empty: from now) dies with its session
    after 23 bars (no retries: as a process killed); the next subscribes from where every
    partition of bars.raw is complete. Nothing is lost, and only bars of the minute under way
    at the death come twice."""
    settings, path = broker_settings, esu4_nqu4(dbn_files)
    rows = set(file_rows(path))
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(live_cli.KEY_VARIABLE, KEY)
    caplog.set_level(logging.INFO, logger="barcast.live")
    with LiveGateway(path, KEY, hang_ups=(23,)) as gateway:
        where = ["--gateway", "127.0.0.1", "--port", str(gateway.port)]
        code = live_cli.main(["--symbols", ",".join(SYMBOLS), *where, "--max-retries", "0"])
    assert code == ExitCode.GATEWAY_UNAVAILABLE
    assert "holds no records yet: subscribing from now" in caplog.text
    assert gateway.sessions[0].subscriptions[0].start is None
    first = {(b["symbol"], b["ts_event"]) for b in raw_topic(settings)[0]}
    start = resume_start(settings, settings.topic_raw, "ohlcv-1m")
    assert start is not None and start >= max(ts for _, ts in first), "nothing replayed needlessly"
    assert all(ts >= start for _, ts in rows - first), "every bar not published is replayed"
    later = {(symbol, ts) for symbol, ts in rows if ts >= start}
    with LiveGateway(path, KEY) as gateway:
        ingest_live(settings, gateway, lambda s: s.bars >= len(later), start_ns=start)
    assert gateway.sessions[0].subscriptions[0].start == start
    got = [(b["symbol"], b["ts_event"]) for b in raw_topic(settings)[0]]
    assert set(got) == rows
    assert {ts for key in got if got.count(key) > 1 for _, ts in [key]} <= {start}
