"""Live ingest through the real `databento.Live` client against the local gateway."""

from __future__ import annotations

import threading
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import databento
import databento_dbn
import orjson
import pytest
from databento_dbn import UNDEF_TIMESTAMP, SType

from features.bars import is_control
from streams import schema
from streams.exit_codes import ExitCode
from streams.ingest import live_cli
from streams.ingest.errors import GatewayUnavailable
from streams.ingest.live import LiveIngest
from streams.ingest.live_options import LiveOptions, LiveStats
from streams.ingest.producer import BarProducer
from streams.ingest.resume import interval_start
from streams.schema import DLQ_MESSAGE, DLQ_REASON, DLQ_TOPIC
from streams.settings import Settings
from tests.kafka_io import Message
from tests.live_gateway import LiveGateway, Mappings
from tests.topic_logs import read_all

KEY = "db-" + "k" * 24 + "BUCKT"
SYMBOLS = ("ES.FUT", "NQ.FUT", "6E.FUT", "ZN.FUT")


def wait_until(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the live ingest"
        time.sleep(0.05)


def test_a_resubscription_before_any_bar_starts_where_the_bar_under_way_began() -> None:
    connected = 1_716_999_960 * 10**9 + 30 * 10**9 + 5  # 30 s and 5 ns into a minute
    assert interval_start(connected, "ohlcv-1m") == connected - 30 * 10**9 - 5
    assert interval_start(connected, "ohlcv-1s") == connected - 5
    assert interval_start(connected, "ohlcv-1d") % (86_400 * 10**9) == 0
    assert 0 <= connected - interval_start(connected, "ohlcv-1h") < 3600 * 10**9


def test_a_new_subscription_takes_over_what_the_last_one_skipped() -> None:
    """A session cut after REPLAY_DATA_AGED_OUT, before any bar: the next subscription resumes
    from the newest bar published, so the skipped span is its to replay or recover; a backfill
    at its start must not recover that span a second time."""
    options = LiveOptions("GLBX.MDP3", "ohlcv-1m", "parent", SYMBOLS)
    ingest = LiveIngest(options, KEY, sink=None)  # type: ignore[arg-type]  # sends nothing here
    ingest._aged_out = 1_716_999_960 * 10**9
    ingest._start()
    assert ingest._aged_out is None


def file_rows(path: Path) -> dict[tuple[str, int], Any]:
    """The file's bars by (raw symbol, ts_event), as databento's own reader maps them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = databento.DBNStore.from_file(path).to_df(price_type="fixed", pretty_ts=False)
    return {(r.symbol, r.ts_event): r for r in expected.reset_index().itertuples()}


def ingest_live(
    settings: Settings,
    gateway: LiveGateway,
    done: Callable[[LiveStats], bool],
    **options: Any,
) -> LiveStats:
    """Live ingest from `gateway`, on its clock, into `settings`' topics until `done` and a
    heartbeat (the gateway has sent everything); `options` go to LiveOptions."""
    sink = BarProducer(settings, settings.topic_raw, linger_ms=5, dead_letters=settings.topic_dlq)
    live_options = LiveOptions(
        "GLBX.MDP3", "ohlcv-1m", "parent", SYMBOLS, gateway="127.0.0.1", port=gateway.port,
        backoff_s=0.1, **options,
    )  # fmt: skip
    ingest = LiveIngest(live_options, KEY, sink, clock=gateway.clock)
    worker = threading.Thread(target=ingest.run)
    worker.start()
    try:
        wait_until(lambda: done(ingest.stats) and ingest.stats.heartbeats > 0)
    finally:
        ingest.stop()
        worker.join(30)
    sink.flush()
    sink.check()
    assert not worker.is_alive()
    return ingest.stats


def ingest_across_a_hang_up(
    settings: Settings, path: Path, mappings: Mappings, done: Callable[[LiveStats], bool]
) -> tuple[LiveGateway, LiveStats]:
    """Live ingest of `path` until `done`, with the first session cut after 23 bars: odd, so
    the cut falls between ESU4 and NQU4 of the same minute, and the resubscription from that
    minute must both drop a resent bar and deliver a bar not seen yet."""
    with LiveGateway(path, KEY, hang_ups=(23,), mappings=mappings) as gateway:
        stats = ingest_live(settings, gateway, done)
    first = gateway.sessions[0]
    assert first.aborted and first.bars_sent == 23 and first.subscriptions[0].start is None
    assert stats.reconnects == 1 and stats.resent >= 1 and stats.outages == 0
    return gateway, stats


@pytest.mark.integration
@pytest.mark.parametrize("mappings", [Mappings.RECORDS, Mappings.METADATA])
def test_forced_disconnect_loses_and_doubles_nothing(
    broker_settings: Settings, dbn_files: list[Path], mappings: Mappings
) -> None:
    """With SymbolMappingMsg records, or (a gateway replaying a historical file) with the
    instruments named only in the metadata's mappings, as `barcast replay` reads them."""
    path = next(p for p in dbn_files if "esu4-nqu4" in p.name)
    rows = file_rows(path)
    gateway, stats = ingest_across_a_hang_up(
        broker_settings, path, mappings, lambda stats: stats.bars >= len(rows)
    )
    assert gateway.sessions[1].subscriptions[0].start in {ts for _, ts in rows}
    assert (stats.bars, stats.unmapped) == (len(rows), 0)
    assert stats.errors >= 2  # 6E.FUT and ZN.FUT resolve to nothing
    assert stats.mappings == (4 if mappings == Mappings.RECORDS else 0)  # 2 per session
    assert read_all(broker_settings.broker, broker_settings.topic_dlq) == []

    messages = read_all(broker_settings.broker, broker_settings.topic_raw)
    bars = [m for m in messages if m.headers[schema.KIND_HEADER] == b"bar"]
    controls = [m for m in messages if m.headers[schema.KIND_HEADER] == b"control"]
    got = [orjson.loads(m.value) for m in bars]
    assert sorted((v["symbol"], v["ts_event"]) for v in got) == sorted(rows)
    for message, value in zip(bars, got, strict=True):
        row = rows[(value["symbol"], value["ts_event"])]
        assert [value[f] for f in ("open", "high", "low", "close", "volume")] == [
            row.open, row.high, row.low, row.close, row.volume
        ]  # fmt: skip
        assert value["source"] == "live:GLBX.MDP3" and message.key == value["symbol"].encode()
    by_key: dict[tuple[int, bytes | None], list[int]] = defaultdict(list)
    for message in messages:
        by_key[(message.partition, message.key)].append(orjson.loads(message.value)["ts_event"])
    for sequence in by_key.values():
        assert sequence == sorted(set(sequence)), "out of order or doubled"
    minutes = sorted({ts for _, ts in rows})
    assert all(is_control(orjson.loads(m.value)) for m in controls)
    assert all(m.key == schema.CONTROL_KEY for m in controls)
    for partition in range(broker_settings.partitions):
        assert by_key[(partition, schema.CONTROL_KEY)] == minutes


def test_max_retries_counts_failed_sessions_in_a_row_not_quiet_ones() -> None:
    """--max-retries 2: sessions that ran without a bar (heartbeats, END_OF_INTERVALs: a
    weekend, a halt) are not failures; two reconnects in a row that heard nothing new are."""
    options = LiveOptions(
        "GLBX.MDP3", "ohlcv-1m", "parent", ("ES.FUT",), max_retries=2, backoff_s=0.0
    )
    ingest = LiveIngest(options, "db-" + "k" * 29, sink=None)  # type: ignore[arg-type]
    # the last two: a session that heard only bars sent again, then one that heard nothing
    heard = iter([("heartbeats", 600), ("controls", 3), ("heartbeats", 1), ("resent", 5), ("", 0)])
    sessions: list[int | None] = []

    def session(start: int | None) -> None:
        sessions.append(start)
        name, count = next(heard)
        if name:
            setattr(ingest.stats, name, getattr(ingest.stats, name) + count)

    ingest._session = session  # type: ignore[method-assign]
    with pytest.raises(GatewayUnavailable, match="gave up after 3 attempts"):
        ingest.run()
    assert len(sessions) == 5 and ingest.stats.reconnects == 4


@pytest.mark.parametrize(
    ("option", "value"),
    [("--schema", "trades"), ("--schema", "ohlcv-5m"), ("--stype-in", "parnet")],
)
def test_a_schema_or_symbology_ingest_cannot_take_is_a_usage_error(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before Kafka and the gateway: Databento streams a schema of other records, which
    ingest would drop without a word, and raises on a name it does not know."""
    with pytest.raises(SystemExit) as exited:
        live_cli.main(["--symbols", "ES.FUT", option, value])
    _, err = capsys.readouterr()
    assert exited.value.code == ExitCode.USAGE
    assert f"argument {option}: invalid choice: '{value}'" in err
    assert "ohlcv-1m" in err or "parent" in err  # the choices are named


@pytest.mark.integration
def test_rejected_key_exits_with_auth_code_and_never_prints_the_key(
    broker_settings: Settings,
    dbn_files: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = "db-" + "w" * 24 + "WRONG"
    for name, value in broker_settings.to_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(live_cli.KEY_VARIABLE, wrong)
    with LiveGateway(dbn_files[0], KEY) as gateway:
        code = live_cli.main(
            ["--symbols", "ES.FUT", "--gateway", "127.0.0.1", "--port", str(gateway.port)]
        )
    out, err = capsys.readouterr()
    assert code == ExitCode.AUTH_FAILED
    assert err.startswith("barcast ingest-live: the Databento gateway refused the session")
    assert "Authentication failed" in err and err.count("\n") == 1
    assert wrong not in out + err + caplog.text


@pytest.mark.integration
def test_bars_of_unnamed_instruments_go_to_the_dead_letter_topic_once(
    broker_settings: Settings, dbn_files: list[Path]
) -> None:
    path = next(p for p in dbn_files if "esu4-nqu4" in p.name)
    rows = file_rows(path)
    ids = {row.instrument_id: symbol for (symbol, _), row in rows.items()}
    _, stats = ingest_across_a_hang_up(
        broker_settings, path, Mappings.NONE, lambda stats: stats.unmapped >= len(rows)
    )
    assert (stats.bars, stats.unmapped, stats.mappings) == (0, len(rows), 0)
    raw = read_all(broker_settings.broker, broker_settings.topic_raw)
    assert raw and {m.headers[schema.KIND_HEADER] for m in raw} == {b"control"}
    letters = read_all(broker_settings.broker, broker_settings.topic_dlq)
    got = sorted((ids[v["instrument_id"]], v["ts_event"]) for v in map(dead_letter, letters))
    assert got == sorted(rows), "every bar once, none doubled by the replay after the hang-up"
    for message in letters:
        value = orjson.loads(message.value)
        row = rows[(ids[value["instrument_id"]], value["ts_event"])]
        assert [value[f] for f in ("open", "high", "low", "close", "volume")] == [
            row.open, row.high, row.low, row.close, row.volume
        ]  # fmt: skip
        assert message.key == str(value["instrument_id"]).encode()
        assert message.headers[DLQ_TOPIC] == broker_settings.topic_raw.encode()
        assert f"instrument_id {value['instrument_id']} has no raw symbol" in (
            message.headers[DLQ_MESSAGE].decode()
        )


def dead_letter(message: Message) -> dict[str, Any]:
    """A bars.dlq record of live ingest: the bars.raw value without a symbol."""
    value = orjson.loads(message.value)
    assert message.headers[DLQ_REASON] == b"unmapped_symbol"
    assert value["symbol"] is None and value["source"] == "live:GLBX.MDP3"
    assert list(value) == list(schema.RawBar.__annotations__)
    return value


class Recorded:
    """What live ingest hands its sink, kept in memory: a unit test of the symbol sources."""

    def __init__(self) -> None:
        self.bars: list[bytes] = []
        self.dead_letters: list[str] = []

    def send_bars(self, values: list[bytes], keys: list[bytes], timestamps: list[int]) -> None:
        self.bars += values

    def send_dead_letter(self, key: bytes, value: bytes, ts: int, reason: str, why: str) -> None:
        self.dead_letters.append(reason)


def test_instrument_definitions_name_live_bars(dbn_files: list[Path]) -> None:
    definitions = next(p for p in dbn_files if "definition" in p.name)
    sink = Recorded()
    options = LiveOptions("GLBX.MDP3", "ohlcv-1m", "parent", ("ES.FUT",))
    ingest = LiveIngest(options, KEY, sink)  # type: ignore[arg-type]
    minute = 60 * 10**9
    bar = lambda i: databento_dbn.OHLCVMsg(33, 1, 95414, i * minute, 4, 5, 3, 4, 7)  # noqa: E731
    ingest._handle(bar(28_000_000))
    for record in databento.DBNStore.from_file(definitions):
        ingest._handle(record)
    ingest._handle(bar(28_000_001))
    assert sink.dead_letters == ["unmapped_symbol"]
    assert [orjson.loads(v)["symbol"] for v in sink.bars] == ["ESM3"]
    assert ingest.stats.mappings == 2 and ingest.stats.unmapped == 1


@pytest.mark.parametrize("keep_spreads", [False, True])
def test_calendar_spreads_of_a_parent_subscription_are_skipped_and_counted_as_replay_does(
    keep_spreads: bool,
) -> None:
    sink = Recorded()
    options = LiveOptions("GLBX.MDP3", "ohlcv-1m", "parent", ("ES.FUT",), keep_spreads=keep_spreads)
    ingest = LiveIngest(options, KEY, sink)  # type: ignore[arg-type]
    ts, symbols = 28_000_000 * 60 * 10**9, {95414: "ESU4", 95415: "ESU4-ESZ4"}
    for iid, symbol in symbols.items():
        ingest._handle(databento_dbn.SymbolMappingMsg(
            1, iid, ts, SType.PARENT, "ES.FUT", SType.RAW_SYMBOL, symbol, ts, UNDEF_TIMESTAMP
        ))  # fmt: skip
    for iid in symbols:
        ingest._handle(databento_dbn.OHLCVMsg(33, 1, iid, ts, 4, 5, 3, 4, 7))
    sent = [orjson.loads(v)["symbol"] for v in sink.bars]
    assert sent == (["ESU4", "ESU4-ESZ4"] if keep_spreads else ["ESU4"])
    assert (ingest.stats.bars, ingest.stats.spreads) == ((2, 0) if keep_spreads else (1, 1))
