"""The backtest's input files: checked, described by name, size and sha256 for the report, and
bar CSVs (the shared 6EH4 month) converted to DBN for the replay."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from streams.ingest.convert import csv_to_dbn

CSV_SUFFIXES = (".csv", ".csv.gz")
CHUNK = 1 << 20


class InputError(ValueError):
    """An input file that cannot be backtested; the message names it and the fix."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def describe(files: list[Path]) -> list[dict[str, Any]]:
    """Name (not the path: the report must not depend on where the files lie), size, hash."""
    for path in files:
        if not path.is_file():
            raise InputError(f"{path}: no such file; pass DBN OHLCV files or a bar CSV")
    return [{"name": p.name, "bytes": p.stat().st_size, "sha256": sha256(p)} for p in files]


def replay_files(files: list[Path], work_dir: Path) -> tuple[Path, ...]:
    """The DBN files to replay: DBN inputs as they are, CSVs converted (their raw symbol is
    the name's first dot-separated part, as in `6EH4.XCME_1min_bars_....csv.gz`)."""
    out = []
    for i, path in enumerate(files):
        if path.name.endswith(CSV_SUFFIXES):
            symbol = path.name.split(".")[0]
            out.append(csv_to_dbn(path, work_dir / f"{i}-{symbol}.ohlcv-1m.dbn.zst", symbol))
        else:
            out.append(path)
    return tuple(out)
