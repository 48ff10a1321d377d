"""The backtest's input files: checked, described by name, size and sha256 for the report, and
bar CSVs (the shared 6EH4 month) converted to DBN for the replay."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from features.bars import read_bar_csv
from streams.exit_codes import ExitCode
from streams.ingest.convert import frame_to_dbn
from streams.ingest.dbn_source import DbnReader
from streams.ingest.errors import CorruptDbn, IngestError
from streams.ingest.replay import check_schema

CSV_SUFFIXES = (".csv", ".csv.gz")
CHUNK = 1 << 20


class InputError(ValueError):
    """An input file that cannot be backtested; the message names it and the fix."""

    def __init__(self, message: str, exit_code: int = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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
    """The DBN files to replay, each read through before the broker and the worker start: DBN
    inputs as they are, CSVs converted (their raw symbol is the name's first dot-separated
    part, as in `6EH4.XCME_1min_bars_....csv.gz`)."""
    out = []
    for i, path in enumerate(files):
        if path.name.endswith(CSV_SUFFIXES):
            symbol = path.name.split(".")[0]
            out.append(converted(path, work_dir / f"{i}-{symbol}.ohlcv-1m.dbn.zst", symbol))
        else:
            out.append(checked(path))
    return tuple(out)


def converted(path: Path, out: Path, symbol: str) -> Path:
    """`path` read (apart, so that an error writing `out` is not taken for a damaged input),
    then converted into `out`."""
    try:
        frame = read_bar_csv(path)
    except (OSError, EOFError) as exc:  # a damaged or truncated compressed file
        raise InputError(f"{path}: unreadable ({exc}); re-download it", ExitCode.CORRUPT) from None
    except (ValueError, KeyError) as exc:
        raise InputError(
            f"{path}: not a bar CSV ({type(exc).__name__}: {exc}); pass one with timestamp_utc, "
            f"open, high, low, close and volume columns and at least one bar"
        ) from None
    if frame.empty:
        raise InputError(f"{path}: holds no bar, only a header; pass a bar CSV with bars")
    return frame_to_dbn(frame, out, symbol)


def checked(path: Path) -> Path:
    """`path`, a DBN file replay takes, read to its end (a damaged one would stop the replay
    part way, with the worker already started)."""
    try:
        with DbnReader(path) as reader:
            check_schema(reader)
            for _ in reader.segments():
                pass
    except CorruptDbn as exc:  # its own message speaks of a replay that ingested records
        raise InputError(
            f"{exc.path}: {exc.detail} at byte {exc.offset} of the decoded DBN stream; nothing "
            f"was replayed. Re-download or re-export the file",
            exc.exit_code,
        ) from None
    except IngestError as exc:
        raise InputError(str(exc), exc.exit_code) from None
    return path
