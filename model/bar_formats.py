"""One bar file as a frame of raw bars: a CSV of the 6EH4 layout or a DBN OHLCV-1m file
(`model.bar_files` reads sources of them, and folders of FirstRate day files)."""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path

import pandas as pd

from features.bars import ZSTD_MAGIC, read_bar_csv, zstd_decoded

CSV_SUFFIXES = (".csv", ".csv.gz")
DBN_SUFFIXES = (".dbn", ".dbn.zst")


class DataError(ValueError):
    """Training or evaluation data barcast cannot use; the message says what to change."""


def read_frame(path: Path) -> pd.DataFrame:
    """Raw bars of one file: columns ts_event (int64 ns, bar open), open..close, volume, symbol.

    CSV: the 6EH4 layout (timestamp_utc = bar close, so ts_event = timestamp - 1 min), symbol
    from the file name (`6EH4.XCME_1min_bars...` -> `6EH4`).
    DBN: OHLCV-1m records read with `databento.DBNStore.from_file`.
    """
    name = path.name.lower()
    if not path.exists():
        raise DataError(f"--data {path}: no such file or folder")
    if name.endswith(CSV_SUFFIXES):
        return _read_csv(path)
    if name.endswith(DBN_SUFFIXES):
        return _read_dbn(path)
    raise DataError(
        f"--data {path}: unknown format; use a CSV ({', '.join(CSV_SUFFIXES)}) with columns "
        f"timestamp_utc,open,high,low,close,volume, a DBN file ({', '.join(DBN_SUFFIXES)}) or "
        "SYMBOL=FOLDER for a folder of FirstRate day files"
    )


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        frame = read_bar_csv(path)
    except (KeyError, ValueError) as exc:
        raise DataError(
            f"--data {path}: not a bar CSV with columns timestamp_utc,open,high,"
            f"low,close,volume ({exc})"
        ) from None
    except (OSError, EOFError) as exc:  # a damaged or truncated compressed file
        raise DataError(f"--data {path}: unreadable ({exc}); re-download it") from None
    frame["symbol"] = path.name.split(".")[0]
    return frame


def _read_dbn(path: Path) -> pd.DataFrame:
    import databento
    from databento.common.error import BentoDeprecationWarning, BentoError, BentoWarning
    from databento_dbn import DBNError
    from zstandard import ZstdError

    try:
        with path.open("rb") as f:  # databento reads a zstd file cut short without a word
            if f.read(4) == ZSTD_MAGIC:
                f.seek(0)
                for _ in zstd_decoded(partial(f.read, 1 << 20)):
                    pass
        store = databento.DBNStore.from_file(path)
        schema = str(store.schema)
        if schema == "ohlcv-1m":
            with warnings.catch_warnings():  # databento 0.88 uses a keyword pandas 3.1 deprecates
                warnings.filterwarnings("ignore", message="The inplace keyword")
                # databento only warns of a file that ends inside a record: its bars would be cut
                warnings.filterwarnings("error", category=BentoWarning)
                warnings.filterwarnings("default", category=BentoDeprecationWarning)
                frame = store.to_df(price_type="fixed", pretty_ts=False, map_symbols=True)
    except (BentoError, BentoWarning, DBNError, ZstdError, ValueError, OSError, EOFError) as exc:
        raise DataError(f"--data {path}: not a readable DBN file ({exc}); re-download it") from None
    if schema != "ohlcv-1m":
        raise DataError(f"--data {path}: DBN schema is {schema}; barcast trains on ohlcv-1m")
    frame = frame.reset_index()
    frame["ts_event"] = frame["ts_event"].astype("int64")
    return frame
