"""The bulk DBN reader against databento's own decoder, across versions, compression, mixed
streams and damage."""

from __future__ import annotations

import warnings
from pathlib import Path

import databento
import databento_dbn
import numpy as np
import pytest
import zstandard

from streams.ingest.convert import bars_to_records, ohlcv_metadata, write_dbn
from streams.ingest.dbn_source import OHLCV_DTYPE, OHLCV_FIELDS, DbnReader
from streams.ingest.errors import CorruptDbn, NotDbn

T0 = 1_704_067_200_000_000_000  # 2024-01-01
MINUTE = 60 * 10**9


def read_all(path: Path) -> tuple[np.ndarray, list[object], DbnReader]:
    with DbnReader(path) as reader:
        segments = list(reader.segments())
    bars = [s for s in segments if isinstance(s, np.ndarray)]
    others = [r for s in segments if isinstance(s, list) for r in s]
    joined = np.concatenate(bars) if bars else np.empty(0, OHLCV_DTYPE)
    return joined, others, reader


def sample_records(count: int, instrument_ids: tuple[int, ...] = (7, 8)) -> np.ndarray:
    records = np.zeros(count, OHLCV_DTYPE)
    records["length"], records["rtype"], records["publisher_id"] = 14, 33, 1
    records["instrument_id"] = np.resize(instrument_ids, count)
    records["ts_event"] = T0 + np.arange(count) // len(instrument_ids) * MINUTE
    for i, name in enumerate(("open", "high", "low", "close")):
        records[name] = 5_000_000_000_000 + np.arange(count) * 250_000_000 + i
    records["low"][0] = databento_dbn.UNDEF_PRICE
    records["volume"] = np.arange(count) + 1
    return records


def sample_metadata(version: int = 3) -> databento_dbn.Metadata:
    return ohlcv_metadata({"ESU4": 7, "NQU4": 8}, T0, T0 + 86_400 * 10**9, version=version)


def test_every_shared_file_decodes_like_databento(dbn_files: list[Path]) -> None:
    assert dbn_files, "no shared DBN files"
    for path in dbn_files:
        bars, others, reader = read_all(path)
        store = databento.DBNStore.from_file(path)
        expected = store.to_ndarray()
        assert reader.version == store.metadata.version
        if str(store.schema).startswith("ohlcv"):
            assert others == []
            for name, _ in OHLCV_FIELDS:
                assert np.array_equal(bars[name], expected[name]), (path.name, name)
        else:
            assert len(bars) == 0
            assert len(others) == len(expected)
            assert all(isinstance(r, databento_dbn.InstrumentDefMsg) for r in others)


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("suffix", [".dbn", ".dbn.zst"])
def test_reads_dbn_v1_v2_v3_plain_and_zstd(tmp_path: Path, version: int, suffix: str) -> None:
    records = sample_records(50)
    path = write_dbn(tmp_path / f"bars{suffix}", sample_metadata(version), records)
    bars, others, reader = read_all(path)
    assert (reader.version, reader.compressed) == (version, suffix.endswith(".zst"))
    assert others == []
    assert bars.tobytes() == records.tobytes()
    assert reader.metadata.mappings["ESU4"][0]["symbol"] == "7"


@pytest.mark.parametrize(
    ("schema", "rtype"),
    [(databento_dbn.Schema.OHLCV_1M, 33), (databento_dbn.Schema.OHLCV_1H, 34)],
)
def test_a_v1_files_deprecated_bars_take_their_schemas_rtype(
    tmp_path: Path, schema: databento_dbn.Schema, rtype: int
) -> None:
    """DBN v1 tagged bars ohlcv-deprecated (17) before the split by interval; the corrections
    stage, like Databento's current decoders, takes only the split rtypes."""
    records = sample_records(20)
    records["rtype"] = 17
    metadata = ohlcv_metadata({"ESU4": 7, "NQU4": 8}, T0, T0 + 86_400 * 10**9, schema, 1)
    bars, _, _ = read_all(write_dbn(tmp_path / "v1.dbn", metadata, records))
    assert set(bars["rtype"]) == {rtype}
    for name, _ in OHLCV_FIELDS:
        assert name == "rtype" or np.array_equal(bars[name], records[name]), name


def test_matches_databento_python_on_a_written_file(tmp_path: Path) -> None:
    records = sample_records(20)
    path = write_dbn(tmp_path / "bars.dbn.zst", sample_metadata(), records)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = databento.DBNStore.from_file(path).to_df(price_type="fixed")
    assert frame["low"].iloc[0] == databento_dbn.UNDEF_PRICE
    assert frame["close"].to_numpy().tolist() == records["close"].tolist()
    assert frame["symbol"].tolist() == ["ESU4", "NQU4"] * 10


def test_live_recording_keeps_mappings_and_bars_in_file_order(tmp_path: Path) -> None:
    SType = databento_dbn.SType
    metadata = databento_dbn.Metadata(
        "GLBX.MDP3", T0, SType.PARENT, SType.INSTRUMENT_ID, None, ["ES.FUT"], [], [], [],
        None, None, False, 3,
    )  # fmt: skip
    mapping = databento_dbn.SymbolMappingMsg(
        1, 7, T0, SType.PARENT, "ES.FUT", SType.RAW_SYMBOL, "ESU4", T0, 2**64 - 1
    )
    system = databento_dbn.SystemMsg(T0, "Heartbeat", databento_dbn.SystemCode.HEARTBEAT)
    records = sample_records(5, (7,))
    data = (
        metadata.encode() + bytes(mapping) + records[:2].tobytes() + bytes(system)
        + records[2:].tobytes()
    )  # fmt: skip
    path = tmp_path / "live.dbn"
    path.write_bytes(data)
    with DbnReader(path) as reader:
        kinds = [
            len(s) if isinstance(s, np.ndarray) else type(s[0]).__name__ for s in reader.segments()
        ]
    assert kinds == ["SymbolMappingMsg", 2, "SystemMsg", 3]
    assert reader.schema is None


def test_truncated_file_yields_every_complete_record_then_names_offset(tmp_path: Path) -> None:
    records = sample_records(10)
    full = write_dbn(tmp_path / "full.dbn", sample_metadata(), records).read_bytes()
    path = tmp_path / "cut.dbn"
    path.write_bytes(full[:-20])
    header = len(sample_metadata().encode())
    delivered: list[np.ndarray] = []
    with DbnReader(path) as reader, pytest.raises(CorruptDbn) as caught:
        for segment in reader.segments():
            delivered.append(segment)
    assert np.concatenate(delivered).tobytes() == records[:9].tobytes()
    assert caught.value.offset == header + 9 * OHLCV_DTYPE.itemsize
    assert str(path) in str(caught.value) and f"byte {caught.value.offset}" in str(caught.value)
    assert "36 of 56 bytes" in str(caught.value)


def test_truncated_zstd_stream_is_reported_after_the_readable_part(tmp_path: Path) -> None:
    records = sample_records(4000)
    data = sample_metadata().encode() + records.tobytes()
    path = tmp_path / "cut.dbn.zst"
    compressed = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(compressed[: len(compressed) * 2 // 3])
    delivered = 0
    with DbnReader(path) as reader, pytest.raises(CorruptDbn, match="truncated"):
        for segment in reader.segments():
            delivered += len(segment)
    assert delivered < 4000
    assert reader.offset == len(sample_metadata().encode()) + delivered * OHLCV_DTYPE.itemsize


def test_zero_length_record_is_corrupt_at_its_offset(tmp_path: Path) -> None:
    records = sample_records(3)
    path = tmp_path / "bad.dbn"
    path.write_bytes(sample_metadata().encode() + records.tobytes() + b"\x00" * 56)
    with DbnReader(path) as reader, pytest.raises(CorruptDbn, match="invalid record length 0"):
        list(reader.segments())
    assert reader.offset == len(sample_metadata().encode()) + 3 * 56


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"PAR1" + b"\x00" * 60, "not a DBN file: starts with b'PAR1'"),
        (b"DBN\x09" + b"\x00" * 60, "DBN version 9 is not supported"),
    ],
)
def test_not_dbn_is_refused_on_open(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "x.dbn"
    path.write_bytes(content)
    with pytest.raises(NotDbn, match=message):
        DbnReader(path)


def test_bars_to_records_layout_is_dbn(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame(
        {"ts_event": [T0], "open": [1.1], "high": [1.2], "low": [1.0], "close": [1.15],
         "volume": [3.0]}
    )  # fmt: skip
    record = bars_to_records(frame, 42)
    expected = databento_dbn.OHLCVMsg(
        33, 1, 42, T0, 1_100_000_000, 1_200_000_000, 1_000_000_000, 1_150_000_000, 3
    )
    assert record.tobytes() == bytes(expected)
