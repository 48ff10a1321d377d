"""The stored form of a serving state (a scoring state, a shadow state): a format byte, a JSON
header, then the state's floats as little-endian doubles. A symbol's state goes to its
changelog every minute, and a float as JSON text is two or three times the bytes."""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from typing import Any

import orjson

_FRAME = struct.Struct("<BI")  # format, header bytes


def framed(version: int, header: bytes, *floats: bytes) -> bytes:
    """`header` (JSON) and the `floats` (packed doubles) behind format byte `version`."""
    return b"".join([_FRAME.pack(version, len(header)), header, *floats])


def unframed(data: bytes, version: int, what: str) -> tuple[Any, Iterator[float]]:
    """A `framed` state's header, decoded, and its doubles in order; ValueError for another
    format (a newer barcast's), naming `what` and the fix."""
    if data[0] != version:
        raise ValueError(
            f"{what} format {data[0]} is not {version}: a newer barcast wrote it; run that "
            "version (or newer) on this changelog"
        )
    _, size = _FRAME.unpack_from(data)
    start = _FRAME.size + size
    return orjson.loads(data[_FRAME.size : start]), iter(array("d", data[start:]).tolist())
