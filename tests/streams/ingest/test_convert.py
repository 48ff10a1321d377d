"""The 6EH4 CSV as a real DBN ohlcv-1m file."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import databento
import databento_dbn
import pandas as pd

from streams.ingest.convert import (
    SIXE_INSTRUMENT_ID,
    csv_to_dbn,
    sixe_dbn,
)
from streams.settings import Settings


def test_sixe_csv_converts_to_real_dbn(
    sixe_csv: Path, sixe_bars: pd.DataFrame, tmp_path: Path
) -> None:
    path = csv_to_dbn(sixe_csv, tmp_path / "6eh4.dbn.zst")
    store = databento.DBNStore.from_file(path)
    meta = store.metadata
    assert (meta.dataset, str(meta.schema), str(meta.stype_in)) == (
        "GLBX.MDP3", "ohlcv-1m", "raw_symbol"
    )  # fmt: skip
    assert meta.symbols == ["6EH4"]
    assert [iv["symbol"] for iv in meta.mappings["6EH4"]] == [str(SIXE_INSTRUMENT_ID)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = store.to_df(price_type="fixed", pretty_ts=False).reset_index()
    assert len(frame) == len(sixe_bars) == 29_996
    assert frame["ts_event"].to_numpy().tolist() == sixe_bars["ts_event"].tolist()
    for name in ("open", "high", "low", "close"):
        assert frame[name].tolist() == [round(p * 1e9) for p in sixe_bars[name]], name
    assert frame["volume"].tolist() == sixe_bars["volume"].astype(int).tolist()
    assert set(frame["symbol"]) == {"6EH4"}
    first = next(iter(store))
    row = sixe_bars.iloc[0]
    assert bytes(first) == bytes(
        databento_dbn.OHLCVMsg(
            33, 1, SIXE_INSTRUMENT_ID, int(row.ts_event), round(row.open * 1e9),
            round(row.high * 1e9), round(row.low * 1e9), round(row.close * 1e9), int(row.volume),
        )
    )  # fmt: skip


def test_loader_stamps_bars_at_their_open(sixe_bars: pd.DataFrame) -> None:
    # The CSV's first row is stamped 2024-01-01 23:01 (its close); the bar opened at 23:00.
    assert sixe_bars["ts_event"].iloc[0] == 1_704_150_000_000_000_000
    assert len(sixe_bars) == 29_996 and sixe_bars["ts_event"].is_monotonic_increasing


def test_sixe_dbn_is_converted_once_into_work_dir(data_dir: Path, tmp_path: Path) -> None:
    settings = replace(Settings(), data_dir=data_dir, work_dir=tmp_path)
    path = sixe_dbn(settings)
    assert path.is_relative_to(tmp_path) and path.name.endswith(".dbn.zst")
    written = path.stat().st_mtime_ns
    assert sixe_dbn(settings) == path and path.stat().st_mtime_ns == written
