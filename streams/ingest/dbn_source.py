"""Read DBN files (v1–v3, plain or zstd) as numpy record arrays, in bulk.

OHLCV records are fixed-size, so a run of them is one `np.frombuffer` view on the decoded
bytes: no per-record Python objects on the hot path. Anything else (symbol mappings,
definitions, system messages in live recordings) is handed to databento_dbn's own decoder, a run
at a time, and comes back as record objects (upgraded to DBN v3) in file order between the bar
arrays.

A damaged file yields every complete record before the damage, then raises `CorruptDbn` with the
decoded byte offset where reading stopped.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import databento_dbn
import numpy as np

from features.bars import ZSTD_MAGIC, TruncatedZstd, zstd_decoded
from streams.ingest.errors import CorruptDbn, InputNotFound, NotDbn

DBN_MAGIC = b"DBN"
DBN_VERSIONS = (1, 2, 3)
READ_SIZE = 1 << 20
ZSTD_READ_SIZE = 1 << 16  # OHLCV compresses well: 64 KiB in is megabytes out
BATCH_RECORDS = 1 << 15  # bars per yielded array: large enough to amortize, cache-sized
MIN_RECORD_SIZE = 16  # the record header alone

# OHLCV's layout is identical in DBN v1, v2 and v3; spelled little-endian explicitly because
# DBN is little-endian whatever the host.
OHLCV_FIELDS: list[tuple[str, str]] = [
    ("length", "u1"),
    ("rtype", "u1"),
    ("publisher_id", "<u2"),
    ("instrument_id", "<u4"),
    ("ts_event", "<u8"),
    ("open", "<i8"),
    ("high", "<i8"),
    ("low", "<i8"),
    ("close", "<i8"),
    ("volume", "<u8"),
]
OHLCV_DTYPE = np.dtype(OHLCV_FIELDS)
# ohlcv-deprecated (17) is how DBN v1 files from before the 1s/1m/1h/1d split tag their bars;
# the reader gives them their file schema's rtype, the one the rest of barcast takes.
DEPRECATED_RTYPE = 17
OHLCV_RTYPES = (DEPRECATED_RTYPE, 32, 33, 34, 35, 36)
OHLCV_SCHEMAS = ("ohlcv-1s", "ohlcv-1m", "ohlcv-1h", "ohlcv-1d", "ohlcv-eod")
SCHEMA_RTYPES = dict(zip(OHLCV_SCHEMAS, OHLCV_RTYPES[1:], strict=True))
_IS_OHLCV = np.zeros(256, dtype=bool)
_IS_OHLCV[list(OHLCV_RTYPES)] = True

Segment = np.ndarray | list[Any]
"""Either a structured array of OHLCV records or a list of decoded non-OHLCV records."""


class _Truncated(Exception):
    """The compressed stream ended or broke; the reader turns it into `CorruptDbn`."""


class DbnReader:
    """One DBN file: the header is read on open, `segments()` streams the records.

    `offset` is the decoded-stream position of the first record not yet delivered;
    `file_pos` and `file_size` (bytes on disk) drive progress bars.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.name = str(path)
        try:
            self._file: BinaryIO = self.path.open("rb")
        except FileNotFoundError:
            raise InputNotFound(f"{path}: no such file; check the path") from None
        except IsADirectoryError:
            raise InputNotFound(f"{path}: is a directory, not a DBN file") from None
        except OSError as exc:
            raise InputNotFound(f"{path}: cannot be read ({exc.strerror})") from None
        self.file_size = self.path.stat().st_size
        self.file_pos = 0
        self.offset = 0
        try:
            head = self._file.read(4)
            self._file.seek(0)
            self.compressed = head == ZSTD_MAGIC
            self._read_size = ZSTD_READ_SIZE if self.compressed else READ_SIZE
            self._chunks = self._decoded_chunks()
            self.version, self.metadata, self._rest = self._read_header()
        except BaseException:
            self._file.close()
            raise
        self.ts_out = bool(self.metadata.ts_out)
        # Live recordings with ts_out carry the gateway send time after each record.
        self.bar_dtype = (
            np.dtype([*OHLCV_FIELDS, ("ts_out", "<u8")]) if self.ts_out else OHLCV_DTYPE
        )
        self._decoder = databento_dbn.DBNDecoder(
            has_metadata=False,
            ts_out=self.ts_out,
            input_version=self.version,
            upgrade_policy=databento_dbn.VersionUpgradePolicy.UPGRADE_TO_V3,
        )

    @property
    def schema(self) -> str | None:
        schema = self.metadata.schema
        return None if schema is None else str(schema)

    def segments(self) -> Iterator[Segment]:
        """Records in file order; raises `CorruptDbn` after the last readable one."""
        carry, self._rest = self._rest, b""
        while True:
            if carry:
                used = yield from self._split(carry)
                carry = carry[used:]
            try:
                chunk = next(self._chunks, None)
            except _Truncated as exc:
                raise CorruptDbn(self.name, self.offset, str(exc)) from None
            if chunk is None:
                break
            carry = carry + chunk if carry else chunk
        if carry:
            size = carry[0] * 4
            raise CorruptDbn(
                self.name,
                self.offset,
                f"truncated record ({len(carry)} of {size} bytes)" if size else "truncated record",
            )

    def _split(self, data: bytes) -> Generator[Segment, None, int]:
        """Yield the complete records of `data`; return how many bytes they took."""
        size = self.bar_dtype.itemsize
        words = size // 4
        pos, end = 0, len(data)
        while pos < end:
            count = min((end - pos) // size, BATCH_RECORDS)
            if count:
                bars = np.frombuffer(data, dtype=self.bar_dtype, count=count, offset=pos)
                ok = (bars["length"] == words) & _IS_OHLCV[bars["rtype"]]
                good = count if ok.all() else int(ok.argmin())
                if good:
                    pos += good * size
                    self.offset += good * size
                    yield self._upgraded(bars[:good])
                    continue
            run = pos
            while pos < end:
                length = data[pos] * 4
                if length < MIN_RECORD_SIZE:
                    raise CorruptDbn(
                        self.name, self.offset + pos - run, f"invalid record length {length}"
                    )
                if pos + length > end or (length == size and _IS_OHLCV[data[pos + 1]]):
                    break
                pos += length
            if pos == run:
                break
            records = self._decode(data[run:pos])
            self.offset += pos - run
            yield records
        return pos

    def _upgraded(self, bars: np.ndarray) -> np.ndarray:
        """`bars`, those tagged ohlcv-deprecated given the rtype of the file's schema (a file of
        several schemas names no interval: its deprecated bars stay as they are)."""
        rtype = SCHEMA_RTYPES.get(self.schema or "")
        deprecated = bars["rtype"] == DEPRECATED_RTYPE
        if rtype is None or not deprecated.any():
            return bars
        bars = bars.copy()
        bars["rtype"][deprecated] = rtype
        return bars

    def _decode(self, raw: bytes) -> list[Any]:
        try:
            return self._decoder.write_and_decode(raw)
        except Exception as exc:
            raise CorruptDbn(self.name, self.offset, f"undecodable record ({exc})") from None

    def _read_header(self) -> tuple[int, databento_dbn.Metadata, bytes]:
        if self.file_size == 0:
            raise NotDbn(f"{self.name}: empty file (0 bytes); expected a DBN file")
        buf = self._read_at_least(b"", 8)
        if len(buf) < 4 or buf[:3] != DBN_MAGIC:
            what = "decodes to" if self.compressed else "starts with"
            raise NotDbn(
                f"{self.name}: not a DBN file: {what} {buf[:4]!r}, expected b'DBN' (plain or "
                f"zstd-compressed DBN from Databento)"
            )
        version = buf[3]
        if version not in DBN_VERSIONS:
            raise NotDbn(
                f"{self.name}: DBN version {version} is not supported (barcast reads v1-v3); "
                f"convert it with a current `dbn` CLI"
            )
        if len(buf) < 8:
            raise CorruptDbn(self.name, len(buf), "truncated metadata header")
        size = 8 + int.from_bytes(buf[4:8], "little")
        buf = self._read_at_least(buf, size)
        if len(buf) < size:
            raise CorruptDbn(self.name, len(buf), f"truncated metadata ({size} bytes expected)")
        try:
            metadata = databento_dbn.Metadata.decode(bytes(buf[:size]))
        except Exception as exc:
            raise NotDbn(f"{self.name}: unreadable DBN metadata ({exc})") from None
        self.offset = size
        return version, metadata, buf[size:]

    def _read_at_least(self, buf: bytes, size: int) -> bytes:
        try:
            while len(buf) < size:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                buf += chunk
        except _Truncated:
            pass
        return buf

    def _decoded_chunks(self) -> Iterator[bytes]:
        """Decoded bytes of the file; zstd files may hold several frames (Databento writes the
        metadata in a frame of its own)."""
        if not self.compressed:
            while raw := self._read_raw():
                yield raw
            return
        try:
            yield from zstd_decoded(self._read_raw)
        except TruncatedZstd as exc:
            raise _Truncated(str(exc)) from None

    def _read_raw(self) -> bytes:
        raw = self._file.read(self._read_size)
        self.file_pos += len(raw)
        return raw

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> DbnReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
