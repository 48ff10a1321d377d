"""Per-symbol sliding windows of feature rows, stored slot by slot so a restart rebuilds them.

In memory a window is a ring of `lookback` slots. In its store (streams.runtime.stores) each
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


class SymbolWindow:
    def __init__(self, lookback: int, n_features: int) -> None:
        self.lookback = lookback
        self.values = np.zeros((lookback, n_features), dtype=np.float64)
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
        self.values[slot] = values
        self.ts_event[slot] = ts_event
        self.close[slot] = close
        self.synthetic[slot] = synthetic
        self.warm[slot] = warm
        self.count += 1
        return slot

    def ordered_values(self) -> np.ndarray:
        """A copy of the rows, oldest first (two slices: half the cost of a fancy index)."""
        start = self.count % self.lookback if self.ready else 0
        return np.concatenate((self.values[start:], self.values[:start]))

    def slot_bytes(self, slot: int) -> bytes:
        head = _SLOT_HEAD.pack(
            int(self.ts_event[slot]),
            float(self.close[slot]),
            bool(self.synthetic[slot]),
            bool(self.warm[slot]),
        )
        return head + self.values[slot].astype("<f8").tobytes()

    def load_slot(self, slot: int, data: bytes) -> None:
        ts_event, close, synthetic, warm = _SLOT_HEAD.unpack_from(data)
        self.ts_event[slot] = ts_event
        self.close[slot] = close
        self.synthetic[slot] = synthetic
        self.warm[slot] = warm
        self.values[slot] = np.frombuffer(data, dtype="<f8", offset=_SLOT_HEAD.size)

    def meta_bytes(self, fingerprint: str) -> bytes:
        """The row count, the feature set (`fingerprint`) the rows are of, and the lookback."""
        return _META.pack(self.count) + f"{fingerprint}\x00{self.lookback}".encode()

    def load_meta(self, data: bytes) -> None:
        (self.count,) = _META.unpack_from(data)

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
