"""Bar sources: FirstRate folders and files within a UTC range, the corrections as a stream."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import zstandard

from features.bars import engine_columns
from features.corrections import bars_from_frame, correct_history
from model import bar_files
from model.bar_files import BarSource, DataError, load_bars, parse_utc
from streams.ingest.convert import csv_to_dbn
from tests.firstrate_days import minutes, write_day, write_sessions

MIN = 60_000_000_000


def test_a_range_reads_only_the_day_files_it_needs(tmp_path: Path) -> None:
    folder = tmp_path / "dailydata"
    write_sessions(folder, "2012-01-09", days=10)  # two weeks of weekdays
    start, end = parse_utc("2012-01-12", "--start"), parse_utc("2012-01-14T03:00", "--end")
    (es,), report = load_bars([BarSource(folder, "ES", start, end)])
    # UTC Jan 12 00:00 is Jan 11 19:00 Eastern; Jan 14 02:59 UTC is Jan 13 21:59 Eastern
    assert sorted(Path(p).name for p in report["files"]) == [
        "2012-01-11.json",
        "2012-01-12.json",
        "2012-01-13.json",
    ]
    assert es.symbol == "ES" and es.ts_event[0] == start and es.ts_event[-1] == end - MIN
    assert report["sources"] == [
        {
            "data": f"ES={folder}",
            "start": "2012-01-12 00:00:00+00:00",
            "end": "2012-01-14 03:00:00+00:00",
        }
    ]
    assert report["raw_bars"] == np.sum(~es.synthetic)


def test_a_range_applies_to_bar_files_too(sixe_csv: Path, tmp_path: Path) -> None:
    with gzip.open(sixe_csv, "rt") as f:
        lines = f.read().splitlines()[:400]
    path = tmp_path / "6EH4.part.csv"
    path.write_text("\n".join(lines) + "\n")
    start, end = parse_utc("2024-01-02T01:00", "--start"), parse_utc("2024-01-02T02:00", "--end")
    (six_e,), report = load_bars([BarSource(path, None, start, end)])
    assert six_e.ts_event[0] >= start and six_e.ts_event[-1] < end
    assert report["raw_bars"] == 60 and six_e.symbol == "6EH4"


def test_the_corrections_stream_equals_one_pass_over_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder and two CSV files (one another symbol, one re-sending some of the folder's
    bars), bad bars among them, streamed an hour at a time and converted 50 bars at a time:
    the clean bars and every counter are those of `correct_history` over the whole history
    merged in time order."""
    folder = tmp_path / "dailydata"
    path = write_day(folder, "2012-03-05", minutes("09:30", "12:29"))
    rows = json.loads(path.read_text())
    rows[40]["high"] = rows[40]["close"] = rows[40]["close"] * 1.2  # a spike that reverts
    rows[90] |= dict.fromkeys(("open", "high", "low", "close"), -1.0)  # a non-positive price
    path.write_text(json.dumps(rows))
    write_csv(tmp_path / "NQ.csv", rows[100:130], scale=2.0)
    write_csv(tmp_path / "ES.csv", rows[60:70])  # bars the folder holds too
    monkeypatch.setattr(bar_files, "CHUNK_NS", 60 * MIN)
    monkeypatch.setattr(bar_files, "COLUMN_BATCH", 50)
    sources = [BarSource(folder, "ES"), BarSource(tmp_path / "NQ.csv"), tmp_path / "ES.csv"]
    bars, report = load_bars(sources)

    whole = [bar_files.open_source(BarSource.parse(s)).frame(0, 2**62) for s in sources]
    merged = pd.concat(whole).sort_values("ts_event", kind="stable")
    history = correct_history(bars_from_frame(merged))
    counters = report["corrections"]
    assert counters == history.stats.as_dict()
    assert counters["rejected.spike"] == counters["rejected.nonpositive_price"] == 1
    assert counters["duplicate"] == 10
    assert [b.symbol for b in bars] == ["ES", "NQ"]
    for b in bars:
        expected = engine_columns([c for c in history.clean if c["symbol"] == b.symbol])
        got = (b.ts_event, b.open, b.high, b.low, b.close, b.volume, b.synthetic)
        for column, want in zip(got, expected, strict=True):
            np.testing.assert_array_equal(column, want)


def write_csv(path: Path, rows: list[dict[str, Any]], scale: float = 1.0) -> None:
    """Day-file bars as a bar CSV (timestamp_utc = bar close)."""
    opens = pd.to_datetime([r["dateTime"] for r in rows]).tz_localize("America/New_York")
    frame = pd.DataFrame({"timestamp_utc": opens.tz_convert("UTC") + pd.Timedelta("1min")})
    for name in ("open", "high", "low", "close"):
        frame[name] = [r[name] * scale for r in rows]
    frame["volume"] = [r["volume"] for r in rows]
    frame.to_csv(path, index=False)


def test_sources_are_named_and_wrong_ones_say_how_to_fix_them(
    tmp_path: Path, dbn_files: list[Path]
) -> None:
    folder = tmp_path / "dailydata"
    write_day(folder, "2012-03-05", ["09:30"])
    assert BarSource.parse(f"ES={folder}") == BarSource(folder, "ES")
    odd = tmp_path / "a=b.csv"
    odd.touch()
    assert BarSource.parse(str(odd)) == BarSource(odd)  # a path as given is never split
    with pytest.raises(DataError, match=f"--data ES={folder}"):
        load_bars([BarSource(folder)])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no day file"):
        load_bars([BarSource(tmp_path / "empty", "ES")])
    dbn = next(p for p in dbn_files if "ohlcv" in p.name)
    with pytest.raises(DataError, match="names its own instruments"):
        load_bars([BarSource(dbn, "ES")])
    late, early = parse_utc("2012-03-06", "--start"), parse_utc("2012-03-05", "--end")
    with pytest.raises(DataError, match="is not before --end"):
        load_bars([BarSource(folder, "ES", late, early)])
    with pytest.raises(DataError, match="no bar in its range"):
        load_bars([BarSource(folder, "ES", parse_utc("2013-01-01", "--start"))])
    with pytest.raises(DataError, match="--start '2012-13-01': not a date"):
        parse_utc("2012-13-01", "--start")
    with pytest.raises(DataError, match="--end '3000-01-01': out of range"):
        parse_utc("3000-01-01", "--end")


def test_a_damaged_file_is_named_and_a_truncated_dbn_is_not_read_in_part(
    tmp_path: Path, sixe_csv: Path, dbn_files: list[Path]
) -> None:
    """A gzip cut short, a file that is no DBN, a DBN that ends inside a record: each a
    DataError naming it (not a traceback, and not training on the part before the cut)."""
    cut_csv = tmp_path / "cut.csv.gz"
    cut_csv.write_bytes(sixe_csv.read_bytes()[:5000])
    dbn = next(p for p in dbn_files if "esu4-nqu4" in p.name)
    raw = zstandard.ZstdDecompressor().stream_reader(dbn.read_bytes()).read()
    cut_dbn = tmp_path / "cut.dbn"
    cut_dbn.write_bytes(raw[: len(raw) - 7])
    not_dbn = tmp_path / "x.dbn.zst"
    not_dbn.write_bytes(b"PAR1" * 16)
    whole = csv_to_dbn(sixe_csv, tmp_path / "6e.dbn.zst").read_bytes()
    cut_zst = tmp_path / "cut.dbn.zst"  # databento would read the bars before the cut
    cut_zst.write_bytes(whole[: len(whole) // 2])
    misnamed = tmp_path / "cut-zstd.dbn"  # a zstd file is known by its bytes, not its name
    misnamed.write_bytes(cut_zst.read_bytes())
    for path in (cut_csv, not_dbn, cut_dbn, cut_zst, misnamed):
        with pytest.raises(DataError, match=f"--data {path}: .*re-download it"):
            load_bars([BarSource(path)])
    plain = tmp_path / "plain.dbn.zst"  # an uncompressed DBN under a zstd name reads
    plain.write_bytes(raw)
    assert load_bars([BarSource(plain)])[0]


def test_calendar_spreads_are_skipped_and_missing_volumes_counted(
    sixe_csv: Path, tmp_path: Path
) -> None:
    """A parent symbol's DBN download holds its calendar spreads too: their prices cross zero,
    no level a return is taken of; they are counted in the report, never trained on."""
    with gzip.open(sixe_csv, "rt") as f:
        header, *rows = f.read().splitlines()[:121]
    outright = tmp_path / "6EH4.part.csv"
    outright.write_text("\n".join([header, *rows]) + "\n")
    spread = tmp_path / "6EH4-6EM4.part.csv"  # its prices around zero, some negative
    lines = [",".join([r.split(",")[0], "0.25", "0.5", "-0.25", "-0.125", "3"]) for r in rows]
    spread.write_text("\n".join([header, *lines]) + "\n")
    rows[5] = rows[5].rsplit(",", 1)[0] + ","  # a bar without its volume: read as 0, and said
    outright.write_text("\n".join([header, *rows]) + "\n")
    (six_e,), report = load_bars([outright, spread])
    assert six_e.symbol == "6EH4" and report["spread_bars_skipped"] == {"6EH4-6EM4": 120}
    assert report["volume_missing_read_as_zero"] == 1 and six_e.volume[5] == 0
    with pytest.raises(DataError, match="120 bars of calendar spreads skipped"):
        load_bars([spread])
