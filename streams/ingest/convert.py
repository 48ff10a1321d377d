"""Turn the shared 6EH4 CSV into a real DBN ohlcv-1m file, and write DBN files in general.

The CSV stamps each bar at its close; Databento's `ts_event` is the bar's open, so one minute
is subtracted. Prices become DBN fixed-point exactly: `round(price * 1e9)`. The CSV carries no
instrument_id, so the converted file uses `SIXE_INSTRUMENT_ID`, a synthetic id (900,000,001)
far from real GLBX.MDP3 ids, mapped to raw symbol 6EH4 in the metadata as Databento would.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import databento_dbn
import numpy as np
import pandas as pd
import zstandard

from features.bars import PRICE_FIELDS, read_bar_csv, to_fixed
from streams.ingest.dbn_source import OHLCV_DTYPE
from streams.settings import Settings

SIXE_CSV = "6EH4.XCME_1min_bars_20240101_20240131.csv.gz"
SIXE_SYMBOL = "6EH4"
SIXE_INSTRUMENT_ID = 900_000_001
DATASET = "GLBX.MDP3"
GLBX_PUBLISHER_ID = 1  # GLBX.MDP3.GLBX
OHLCV_1M_RTYPE = int(databento_dbn.RType.OHLCV_1M.value)
NANOS_PER_MINUTE = 60 * 10**9


def bars_to_records(
    frame: pd.DataFrame,
    instrument_id: int,
    rtype: int = OHLCV_1M_RTYPE,
    publisher_id: int = GLBX_PUBLISHER_ID,
) -> np.ndarray:
    """A bar frame (as from `read_bar_csv`) as DBN OHLCV records."""
    records = np.zeros(len(frame), dtype=OHLCV_DTYPE)
    records["length"] = OHLCV_DTYPE.itemsize // 4
    records["rtype"] = rtype
    records["publisher_id"] = publisher_id
    records["instrument_id"] = instrument_id
    records["ts_event"] = frame["ts_event"].to_numpy(dtype=np.int64)
    for name in PRICE_FIELDS:
        records[name] = to_fixed(frame[name].to_numpy(dtype=np.float64))
    records["volume"] = np.rint(frame["volume"].to_numpy(dtype=np.float64)).astype(np.uint64)
    return records


def covering_days(start_ns: int, end_ns: int) -> tuple[date, date]:
    """The UTC dates [first, last) whose days cover [start_ns, end_ns): what a Databento
    request's start and end dates are."""
    first, last = (
        datetime.fromtimestamp(ts // 10**9, tz=UTC).date() for ts in (start_ns, end_ns - 1)
    )
    return first, last + timedelta(days=1)


def ohlcv_metadata(
    symbols: Mapping[str, int],
    start_ns: int,
    end_ns: int,
    schema: databento_dbn.Schema = databento_dbn.Schema.OHLCV_1M,
    version: int = databento_dbn.DBN_VERSION,
) -> databento_dbn.Metadata:
    """Metadata of a historical `raw_symbol` request for `symbols` (raw symbol → id) over
    [start_ns, end_ns), with the symbol mappings Databento writes for it."""
    first, last = covering_days(start_ns, end_ns)
    mappings = [
        SimpleNamespace(
            raw_symbol=symbol,
            intervals=[SimpleNamespace(start_date=first, end_date=last, symbol=str(iid))],
        )
        for symbol, iid in symbols.items()
    ]
    return databento_dbn.Metadata(
        DATASET,
        start_ns,
        databento_dbn.SType.RAW_SYMBOL,
        databento_dbn.SType.INSTRUMENT_ID,
        schema,
        list(symbols),
        [],
        [],
        mappings,
        end_ns,
        0,
        False,
        version,
    )


def write_dbn(path: Path, metadata: databento_dbn.Metadata, records: np.ndarray) -> Path:
    """Write a DBN file (zstd when the name ends in .zst) atomically: metadata as encoded by
    databento_dbn, then the records' bytes, which are DBN's own little-endian layout."""
    data = metadata.encode() + np.ascontiguousarray(records).tobytes()
    if path.suffix == ".zst":
        data = zstandard.ZstdCompressor(level=3).compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)
    return path


def csv_to_dbn(
    csv_path: Path,
    out_path: Path,
    symbol: str = SIXE_SYMBOL,
    instrument_id: int = SIXE_INSTRUMENT_ID,
) -> Path:
    """Convert a bar CSV into a DBN ohlcv-1m file of GLBX.MDP3 with raw-symbol mappings."""
    return frame_to_dbn(read_bar_csv(csv_path), out_path, symbol, instrument_id)


def frame_to_dbn(
    frame: pd.DataFrame,
    out_path: Path,
    symbol: str = SIXE_SYMBOL,
    instrument_id: int = SIXE_INSTRUMENT_ID,
) -> Path:
    """`csv_to_dbn` of bars already read (as from `read_bar_csv`)."""
    records = bars_to_records(frame, instrument_id)
    ts = records["ts_event"]
    day = 86_400 * 10**9
    start = int(ts.min()) // day * day
    metadata = ohlcv_metadata({symbol: instrument_id}, start, int(ts.max()) + NANOS_PER_MINUTE)
    return write_dbn(out_path, metadata, records)


def sixe_dbn(settings: Settings) -> Path:
    """The 6EH4 month as DBN under `work_dir`, converted on first use (and when the CSV is
    newer than the conversion)."""
    csv_path = settings.data_dir / SIXE_CSV
    if not csv_path.exists():
        raise FileNotFoundError(
            f"{csv_path} not found; set BARCAST_DATA_DIR to the folder holding {SIXE_CSV}"
        )
    out = settings.work_dir / "dbn" / "glbx-mdp3.6eh4.202401.ohlcv-1m.dbn.zst"
    if not out.exists() or out.stat().st_mtime < csv_path.stat().st_mtime:
        csv_to_dbn(csv_path, out)
    return out
