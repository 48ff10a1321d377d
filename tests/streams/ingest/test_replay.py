"""`barcast replay` end to end: through the embedded broker, read back with a plain consumer."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import databento
import databento_dbn
import orjson
import pandas as pd
import pytest

from streams import schema
from streams.broker import free_port
from streams.exit_codes import ExitCode
from streams.ingest import replay as replay_module
from streams.ingest import replay_cli
from streams.ingest.convert import ohlcv_metadata, write_dbn
from streams.ingest.replay import Pacer
from streams.settings import REPO_ROOT, Settings
from tests.streams.ingest.test_dbn_source import T0, sample_metadata, sample_records
from tests.topic_logs import read_all

PRICES = ("open", "high", "low", "close")


def use_settings(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)


def replay(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, dict, str]:
    code = replay_cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, orjson.loads(out.strip().splitlines()[-1]), err


def fixed_frame(path: Path) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return databento.DBNStore.from_file(path).to_df(price_type="fixed", pretty_ts=False)


def test_pacer_releases_each_timestamp_at_its_scaled_time() -> None:
    now = [100.0]
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    pacer = Pacer(speed=60.0, wait=wait, clock=lambda: now[0])
    minute = 60 * 10**9
    ts = pd.array([T0, T0, T0 + minute, T0 + 3 * minute], dtype="uint64").to_numpy()
    released = [(start, stop, now[0]) for start, stop in pacer.groups(ts)]
    assert [(a, b) for a, b, _ in released] == [(0, 2), (2, 3), (3, 4)]
    assert [t - 100.0 for _, _, t in released] == pytest.approx([0.0, 1.0, 3.0])


def test_dry_run_accounts_for_every_record_by_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ids 7 ESU4, 8 NQU4, 9 the ESU4-ESZ4 spread, 10 unknown to the metadata; 10 minutes each.
    records = sample_records(40, (7, 8, 9, 10))
    symbols = {"ESU4": 7, "NQU4": 8, "ESU4-ESZ4": 9}
    metadata = ohlcv_metadata(symbols, T0, T0 + 86_400 * 10**9)
    path = write_dbn(tmp_path / "mixed.dbn.zst", metadata, records)
    code, summary, _ = replay(
        capsys, path, "--dry-run", "--symbols", "ES.FUT",
        "--start", "2024-01-01T00:02", "--end", "2024-01-01T00:07",
    )  # fmt: skip
    assert code == ExitCode.OK
    assert summary["skipped"] == {
        "unmapped": 10, "symbol_filter": 10, "spread": 10, "time_range": 5, "non_ohlcv": 0,
        "not_lead": 0,
    }  # fmt: skip
    assert (summary["read"], summary["encoded"], summary["produced"]) == (40, 5, 0)


def test_files_are_read_one_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Years of daily files outnumber the files a process may hold open: each is opened for
    its header, then again for its records, and closed in between."""
    open_now, most = [0], [0]

    class Counted(replay_module.DbnReader):
        def __init__(self, path: Path | str) -> None:
            super().__init__(path)
            open_now[0] += 1
            most[0] = max(most[0], open_now[0])

        def close(self) -> None:
            open_now[0] -= 1
            super().close()

    monkeypatch.setattr(replay_module, "DbnReader", Counted)
    days = [
        write_dbn(tmp_path / f"day{i}.dbn.zst", sample_metadata(), sample_records(10))
        for i in range(5)
    ]
    code, summary, _ = replay(capsys, *days, "--dry-run")
    assert code == ExitCode.OK and summary["read"] == 50
    assert most[0] == 1 and open_now[0] == 0


@pytest.mark.integration
def test_replaying_every_shared_file_sends_each_bar_once_bit_identical(
    broker_settings: Settings,
    dbn_files: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_settings(monkeypatch, broker_settings)
    code, summary, err = replay(capsys, *dbn_files)
    assert code == ExitCode.OK, err

    expected = {}
    for path in dbn_files:
        frame = fixed_frame(path)
        if "open" in frame:
            for row in frame.reset_index().itertuples():
                expected[(row.symbol, row.ts_event)] = (row, f"replay:{path.name}")
    everything = read_all(broker_settings.broker, broker_settings.topic_raw)  # replay flushed
    messages = [m for m in everything if m.key != schema.CONTROL_KEY]
    controls = [m for m in everything if m.key == schema.CONTROL_KEY]
    last = {m.partition: m for m in everything}  # each partition's last record: the end's control
    assert sorted(m.partition for m in controls) == list(range(broker_settings.partitions))
    assert all(last[m.partition] is m for m in controls)
    assert {orjson.loads(m.value)["control"] for m in controls} == {"end_of_interval"}

    assert len(messages) == len(expected) == 84
    seen = Counter((orjson.loads(m.value)["symbol"], orjson.loads(m.value)["ts_event"])
                   for m in messages)  # fmt: skip
    assert set(seen) == set(expected) and set(seen.values()) == {1}
    last_ts: dict[bytes, int] = {}
    for message in messages:
        value = orjson.loads(message.value)
        row, source = expected[(value["symbol"], value["ts_event"])]
        for name in PRICES:
            assert type(value[name]) is int and value[name] == getattr(row, name)
        assert (value["volume"], value["instrument_id"], value["rtype"], value["source"]) == (
            row.volume, row.instrument_id, row.rtype, source
        )  # fmt: skip
        assert message.key == value["symbol"].encode()
        assert message.timestamp_ms == value["ts_event"] // 1_000_000
        assert message.headers == {schema.KIND_HEADER: b"bar"}
        assert value["ts_event"] >= last_ts.get(message.key, 0), "per-symbol order broken"
        last_ts[message.key] = value["ts_event"]

    assert summary["read"] == 86 and summary["produced"] == 84
    assert summary["skipped"]["non_ohlcv"] == 2 and summary["non_ohlcv"] == {"instrument-def": 2}
    assert summary["read"] == summary["produced"] + sum(summary["skipped"].values())
    assert summary["error"] is None and summary["files"] == 4 and summary["bytes"] > 0


@pytest.mark.integration
def test_truncated_file_produces_the_readable_part_and_says_where_it_stopped(
    broker_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_settings(monkeypatch, broker_settings)
    full = write_dbn(tmp_path / "full.dbn", sample_metadata(), sample_records(10)).read_bytes()
    cut = tmp_path / "cut.dbn"
    cut.write_bytes(full[:-20])
    code, summary, err = replay(capsys, cut)

    offset = len(sample_metadata().encode()) + 9 * 56
    assert code == ExitCode.CORRUPT
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{cut}: truncated record" in err and f"byte {offset}" in err
    assert summary["read"] == summary["produced"] == 9 and summary["error"] in err
    assert len(read_all(broker_settings.broker, broker_settings.topic_raw)) == 9  # no end control


def write_mbo(path: Path) -> Path:
    SType = databento_dbn.SType
    metadata = databento_dbn.Metadata(
        "GLBX.MDP3", T0, SType.RAW_SYMBOL, SType.INSTRUMENT_ID, databento_dbn.Schema.MBO,
        ["ESU4"], [], [], [], T0 + 10**9, 0, False, 3,
    )  # fmt: skip
    record = databento_dbn.MBOMsg(
        1, 7, T0, 1, 5_000_000_000_000, 1, databento_dbn.Action.ADD, databento_dbn.Side.BID, T0
    )
    path.write_bytes(metadata.encode() + bytes(record))
    return path


def bad_file(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.dbn"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "magic":
        path.write_bytes(b"PK\x03\x04" + b"\x00" * 80)
    elif kind == "mbo":
        write_mbo(path)
    elif kind == "bars":
        write_dbn(path, sample_metadata(), sample_records(4))
    return path


@pytest.mark.parametrize(
    ("kind", "extra", "exit_code", "message"),
    [
        ("missing", (), ExitCode.FILE_NOT_FOUND, "no such file"),
        ("empty", (), ExitCode.NOT_DBN, "empty file"),
        ("magic", (), ExitCode.NOT_DBN, "not a DBN file: starts with b'PK"),
        ("mbo", (), ExitCode.UNSUPPORTED_SCHEMA, "schema mbo is not supported"),
        ("bars", ("--symbols", "ZN.FUT"), ExitCode.UNKNOWN_SYMBOL, "ZN.FUT matches no instrument"),
    ],
)
def test_bad_input_is_one_line_with_its_exit_code_and_nothing_sent(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    extra: tuple[str, ...],
    exit_code: ExitCode,
    message: str,
) -> None:
    # A good file first: bad input anywhere on the command line stops the run before any send.
    good = write_dbn(tmp_path / "good.dbn", sample_metadata(), sample_records(4))
    bad = bad_file(kind, tmp_path)
    code, summary, err = replay(capsys, good, bad, *extra)
    assert code == exit_code
    assert err.count("\n") == 1 and "Traceback" not in err
    assert message in err and str(bad) in err
    assert summary["produced"] == 0 and summary["error"] in err


@pytest.mark.integration
def test_unreachable_broker_fails_within_the_connect_timeout_with_one_line(
    tmp_path: Path,
) -> None:
    path = write_dbn(tmp_path / "bars.dbn", sample_metadata(), sample_records(4))
    env = {
        **os.environ,
        "BARCAST_BROKER": f"127.0.0.1:{free_port()}",
        "BARCAST_CONNECT_TIMEOUT_S": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "streams.ingest.replay_cli", str(path)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == ExitCode.BROKER_UNAVAILABLE
    assert done.stderr.startswith("barcast replay: no Kafka broker answered at 127.0.0.1:")
    assert done.stderr.count("\n") == 1, done.stderr  # no librdkafka log lines
    summary = orjson.loads(done.stdout)
    assert summary["produced"] == 0
    # The replay's own time, not the interpreter's start-up (on a loaded machine that alone
    # can take many seconds): generous, the point is that it does not hang.
    assert summary["seconds"] < 1 + 20
