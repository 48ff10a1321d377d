"""Per-symbol sliding windows of feature rows, stored slot by slot so a restart rebuilds them.

In memory a window's rows sit in order in a buffer with room for `spare(lookback)` more: a new
row goes after the last, so the window is a view (`latest`) that later rows leave as it is, and
a forecast's request holds it without copying it. A full buffer's last rows move to a new one;
the old one lives as long as the views of it. Its small columns (time, close, flags) are a ring
of `lookback` slots. In its store (streams.runtime.stores) each
slot has a key of its own (symbol, slot) and one meta record holds the row count, the feature
set's fingerprint and the lookback (a window of another feature set or lookback is not restored:
its rows would mix, or sit in other slots): a new bar writes one slot (~1.8 kB) instead of the
whole window (~108 kB). A flush that never committed is not restored at all, so a restarted
worker's first forecast sees exactly the window an uninterrupted worker would.
"""

from __future__ import annotations

import struct

import numpy as np

_SLOT_HEAD = struct.Struct("<qd??")  # ts_event, close, synthetic, warm
_META = struct.Struct("<q")  # rows appended so far


def spare(lookback: int) -> int:
    """Rows a window's buffer holds beyond its `lookback`: a move copies `lookback - 1` rows
    once every `spare` rows appended."""
    return max(1, lookback // 4)


class SymbolWindow:
    def __init__(self, lookback: int, n_features: int) -> None:
        self.lookback = lookback
        self.buffer = np.zeros((lookback + spare(lookback), n_features), dtype=np.float64)
        self.end = 0  # the buffer's rows in use: the window's are the last `lookback` of them
        self.ts_event = np.zeros(lookback, dtype=np.int64)
        self.close = np.zeros(lookback, dtype=np.float64)
        self.synthetic = np.zeros(lookback, dtype=np.bool_)
        self.warm = np.zeros(lookback, dtype=np.bool_)
        self.count = 0

    @property
    def ready(self) -> bool:
        return self.count >= self.lookback

    @property
    def last_ts(self) -> int:
        return int(self.ts_event[(self.count - 1) % self.lookback])

    @property
    def all_warm(self) -> bool:
        """Every row of the window is past its features' warm-up (what the model trained on)."""
        return bool(self.warm.all())

    def append(
        self, ts_event: int, close: float, synthetic: bool, warm: bool, values: np.ndarray
    ) -> int:
        """Add a row; returns the slot it went into."""
        slot = self.count % self.lookback
        if self.end == len(self.buffer):
            self._move()
        self.buffer[self.end] = values
        self.end += 1
        self.ts_event[slot] = ts_event
        self.close[slot] = close
        self.synthetic[slot] = synthetic
        self.warm[slot] = warm
        self.count += 1
        return slot

    def latest(self) -> np.ndarray:
        """The rows, oldest first: a read-only view, which rows appended later leave as it is."""
        view = self.buffer[max(0, self.end - self.lookback) : self.end]
        view.flags.writeable = False
        return view

    def _move(self) -> None:
        """The rows the next window keeps into a new buffer (views keep the old one alive)."""
        kept = self.lookback - 1
        buffer = np.empty_like(self.buffer)
        buffer[:kept] = self.buffer[self.end - kept : self.end]
        self.buffer, self.end = buffer, kept

    def _position(self, slot: int) -> int:
        """Where the window's row of store slot `slot` sits in the buffer."""
        rows = self.rows()
        return self.end - len(rows) + (slot - self.slot_of(rows.start)) % self.lookback

    def slot_bytes(self, slot: int) -> bytes:
        head = _SLOT_HEAD.pack(
            int(self.ts_event[slot]),
            float(self.close[slot]),
            bool(self.synthetic[slot]),
            bool(self.warm[slot]),
        )
        return head + self.buffer[self._position(slot)].astype("<f8").tobytes()

    def load_slot(self, slot: int, data: bytes) -> None:
        ts_event, close, synthetic, warm = _SLOT_HEAD.unpack_from(data)
        self.ts_event[slot] = ts_event
        self.close[slot] = close
        self.synthetic[slot] = synthetic
        self.warm[slot] = warm
        self.buffer[self._position(slot)] = np.frombuffer(data, dtype="<f8", offset=_SLOT_HEAD.size)

    def meta_bytes(self, fingerprint: str) -> bytes:
        """The row count, the feature set (`fingerprint`) the rows are of, and the lookback."""
        return _META.pack(self.count) + f"{fingerprint}\x00{self.lookback}".encode()

    def load_meta(self, data: bytes) -> None:
        """The row count; the rows themselves come slot by slot (`load_slot`)."""
        (self.count,) = _META.unpack_from(data)
        self.end = len(self.rows())

    def rows(self) -> range:
        """Row numbers (1-based, counting every row ever appended) the window holds."""
        return range(max(1, self.count - self.lookback + 1), self.count + 1)

    def slot_of(self, row: int) -> int:
        return (row - 1) % self.lookback


def meta_layout(data: bytes) -> tuple[str, int | None]:
    """The feature set a stored window's rows are of ("" if stored before windows said), and its
    lookback (None if stored before windows said)."""
    fingerprint, said, lookback = data[_META.size :].decode().partition("\x00")
    return fingerprint, int(lookback) if said else None


def slot_key(symbol: bytes, slot: int) -> bytes:
    return symbol + b"\x00" + slot.to_bytes(8, "little")


def meta_key(symbol: bytes) -> bytes:
    return symbol + b"\x00meta"
