"""DBN files with a contract roll, built from the real 6EH4 month for the roll tests.

The second contract (6EM4) is the 6EH4 series times a calendar spread (`SPREAD`: the June euro
future traded about 0.25 % over March in January 2024, the two currencies' three-month
interest differential); so its returns are 6EH4's, and a roll that rescales state by the ratio
of the two contracts must leave every return, feature and score as it was without the jump.

`continuous_recording` is what a Databento Live session subscribed to `6E.c.0` sends (and what
replay reads from its recording): SymbolMappingMsg records naming the contract behind the
continuous symbol, a new one at the roll minute, and each contract's bars while it is behind
it. `parent_file` is a parent subscription's bars of both contracts, each with its own volume,
for following the lead by volume.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import databento_dbn
import numpy as np
import pandas as pd
import zstandard
from databento_dbn import SType

from streams.ingest.convert import DATASET, bars_to_records, ohlcv_metadata

SPREAD = 1.0025
CONTINUOUS = "6E.c.0"
OLD, NEW = ("6EH4", 900_000_001), ("6EM4", 900_000_002)
MINUTE = 60 * 10**9


@dataclass(frozen=True)
class RollFile:
    path: Path
    roll_ts: int  # the first bar of the new contract
    bars: pd.DataFrame  # the series under the continuous symbol, as sent (the jump in it)


def roll_minute(frame: pd.DataFrame, after: str) -> int:
    """The first minute after `after` (UTC) whose bar follows the previous minute's and opens
    at its close: there, the old contract's last close and the new one's first open are one
    price, so the ratio a roll reads from them is the spread exactly."""
    ts, open_, close = (frame[c].to_numpy() for c in ("ts_event", "open", "close"))
    start = pd.Timestamp(after, tz="UTC").value
    ok = (ts[1:] > start) & (np.diff(ts) == MINUTE) & (open_[1:] == close[:-1])
    return int(ts[1:][ok][0])


def mapping(instrument_id: int, symbol: str, start: int) -> databento_dbn.SymbolMappingMsg:
    """What a continuous subscription's gateway sends: `6E.c.0` is `symbol` from `start`."""
    return databento_dbn.SymbolMappingMsg(
        1, instrument_id, start, SType.CONTINUOUS, CONTINUOUS, SType.RAW_SYMBOL, symbol, start,
        databento_dbn.UNDEF_TIMESTAMP,
    )  # fmt: skip


def write_records(path: Path, metadata: databento_dbn.Metadata, parts: list[bytes]) -> Path:
    data = metadata.encode() + b"".join(parts)
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
    return path


def continuous_recording(
    frame: pd.DataFrame, path: Path, roll_ts: int, spread: float = SPREAD
) -> RollFile:
    """`frame` (bars as from read_bar_csv) under `6E.c.0`: 6EH4 before `roll_ts`, 6EM4 (the
    same bars times `spread`) from it; `spread=1.0` is the same series without the jump."""
    before, after = frame[frame.ts_event < roll_ts], frame[frame.ts_event >= roll_ts].copy()
    prices = ["open", "high", "low", "close"]
    after[prices] = after[prices] * spread
    start = int(frame.ts_event.iloc[0])
    metadata = databento_dbn.Metadata(
        DATASET, start, SType.CONTINUOUS, SType.INSTRUMENT_ID, databento_dbn.Schema.OHLCV_1M,
        [CONTINUOUS], [], [], [], int(frame.ts_event.iloc[-1]) + MINUTE, 0, False, 3,
    )  # fmt: skip
    parts = [
        bytes(mapping(OLD[1], OLD[0], start)),
        bars_to_records(before, OLD[1]).tobytes(),
        bytes(mapping(NEW[1], NEW[0], roll_ts)),
        bars_to_records(after, NEW[1]).tobytes(),
    ]
    write_records(path, metadata, parts)
    return RollFile(path, roll_ts, pd.concat([before, after], ignore_index=True))


def parent_file(frame: pd.DataFrame, path: Path, switch_ts: int) -> Path:
    """Both contracts' bars, as a parent subscription (`6E.FUT`) gets them: 6EH4 with its
    volume, 6EM4 (times the spread) with a twentieth of it; from `switch_ts` on the volumes
    trade places, as around a roll date."""
    old, new = frame.copy(), frame.copy()
    prices = ["open", "high", "low", "close"]
    new[prices] = new[prices] * SPREAD
    late = frame.ts_event >= switch_ts
    thin = (frame.volume / 20).round()
    old.loc[late, "volume"], new.loc[~late, "volume"] = thin[late], thin[~late]
    records = np.concatenate([bars_to_records(old, OLD[1]), bars_to_records(new, NEW[1])])
    records = records[np.lexsort((records["instrument_id"], records["ts_event"]))]
    start, end = int(frame.ts_event.iloc[0]), int(frame.ts_event.iloc[-1]) + MINUTE
    metadata = ohlcv_metadata(dict([OLD, NEW]), start, end)
    return write_records(path, metadata, [records.tobytes()])
