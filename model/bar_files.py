"""Training bars: CSV or DBN files -> the corrections rules in batch -> clean per-symbol arrays.

The corrections are the very code the streaming agent runs (`features.corrections`), so the
model trains on the bars the worker will see; every correction, rejection and gap fill is
counted in the returned report, never applied silently.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from features.bars import engine_columns, read_bar_csv
from features.corrections import CorrectionConfig, bars_from_frame, correct_history
from model.checkpoint import file_sha256

CSV_SUFFIXES = (".csv", ".csv.gz")
DBN_SUFFIXES = (".dbn", ".dbn.zst")


class DataError(ValueError):
    """Training or evaluation data barcast cannot use; the message says what to change."""


@dataclass(frozen=True)
class CleanBars:
    """One symbol's corrected 1-minute bars in ts order (synthetic = gap fill, volume 0)."""

    symbol: str
    ts_event: np.ndarray  # int64 UTC ns, bar open
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    synthetic: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.ts_event)


def read_frame(path: Path) -> pd.DataFrame:
    """Raw bars of one file: columns ts_event (int64 ns, bar open), open..close, volume, symbol.

    CSV: the 6EH4 layout (timestamp_utc = bar close, so ts_event = timestamp - 1 min), symbol
    from the file name (`6EH4.XCME_1min_bars...` -> `6EH4`).
    DBN: OHLCV-1m records read with `databento.DBNStore.from_file`.
    """
    name = path.name.lower()
    if not path.exists():
        raise DataError(f"--data {path}: no such file")
    if name.endswith(CSV_SUFFIXES):
        return _read_csv(path)
    if name.endswith(DBN_SUFFIXES):
        return _read_dbn(path)
    raise DataError(
        f"--data {path}: unknown format; use a CSV ({', '.join(CSV_SUFFIXES)}) with columns "
        f"timestamp_utc,open,high,low,close,volume or a DBN file ({', '.join(DBN_SUFFIXES)})"
    )


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        frame = read_bar_csv(path)
    except (KeyError, ValueError) as exc:
        raise DataError(
            f"--data {path}: not a bar CSV with columns timestamp_utc,open,high,"
            f"low,close,volume ({exc})"
        ) from None
    frame["symbol"] = path.name.split(".")[0]
    return frame


def _read_dbn(path: Path) -> pd.DataFrame:
    import databento

    store = databento.DBNStore.from_file(path)
    if str(store.schema) != "ohlcv-1m":
        raise DataError(f"--data {path}: DBN schema is {store.schema}; barcast trains on ohlcv-1m")
    with warnings.catch_warnings():  # databento 0.88 uses a pandas keyword pandas 3.1 deprecates
        warnings.filterwarnings("ignore", message="The inplace keyword")
        frame = store.to_df(price_type="fixed", pretty_ts=False, map_symbols=True)
    frame = frame.reset_index()
    frame["ts_event"] = frame["ts_event"].astype("int64")
    return frame


def load_bars(
    paths: list[Path], config: CorrectionConfig | None = None
) -> tuple[list[CleanBars], dict[str, Any]]:
    """Read, correct (in batch, with the agent's rules) and split the bars by symbol.

    Returns the clean bars of every symbol and a report: per-file sha256, the corrections
    counters (`clean`, `corrected.*`, `rejected.*`, `synthetic`, ...) and bars per symbol.
    """
    if not paths:
        raise DataError("no --data files given")
    frames = [read_frame(Path(p)) for p in paths]
    raw = pd.concat(frames, ignore_index=True).sort_values("ts_event", kind="stable")
    history = correct_history(bars_from_frame(raw, source="training"), config)
    per_symbol: dict[str, list[dict[str, Any]]] = {}
    for bar in history.clean:
        per_symbol.setdefault(bar["symbol"], []).append(bar)
    # Converted exactly as for the feature engine, so training bars equal what serving sees
    bars = [CleanBars(symbol, *engine_columns(rows)) for symbol, rows in sorted(per_symbol.items())]
    if not bars:
        raise DataError(f"--data {[str(p) for p in paths]}: no bar survived the corrections")
    report = {
        "files": {str(p): file_sha256(Path(p)) for p in paths},
        "raw_bars": len(raw),
        "corrections": history.stats.as_dict(),
        "bars_per_symbol": {b.symbol: len(b) for b in bars},
    }
    return bars, report


def data_fingerprint(report: dict[str, Any]) -> str:
    """One hash of the input files' contents (order-independent)."""
    hashes = sorted(report["files"].values())
    return hashlib.sha256("".join(hashes).encode()).hexdigest()
