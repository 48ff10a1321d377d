"""Every symbol's feature-engine state as a row of one array, so that a batch's engine call
runs on the states in place. Gathering a minute's states into one array for the call and
copying them back moved every state (tens of KB each) twice a burst, on the event loop.

A placed symbol's `vector` is a view of its row. When the array grows, each placed symbol's
view moves to the new array; rows whose symbol its store no longer holds (forgotten when
partitions move) are reused first, their symbols given a copy of their state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from features import engine

FIRST_ROWS = 64


class Placeable(Protocol):
    vector: np.ndarray
    row: int  # its row in the array, or -1 while it holds its own vector


class EngineRows:
    """The array of engine states a stage's symbols live in (`array`), and whose row is whose."""

    def __init__(self, held: Callable[[bytes, Placeable], bool]) -> None:
        """`held(key, symbol)`: whether the stage's store still holds `symbol` as `key`'s."""
        self.held = held
        self.array = engine.new_states(0)
        self.owners: list[tuple[bytes, Placeable] | None] = []
        self.free: list[int] = []

    def place(self, key: bytes, symbol: Placeable) -> int:
        """`symbol`'s row, its state moved into the array on first sight."""
        row = symbol.row
        if row >= 0:
            return row
        if not self.free:
            self._reclaim()
        if not self.free:
            self._grow()
        row = self.free.pop()
        self.array[row] = symbol.vector
        symbol.vector, symbol.row = self.array[row], row
        self.owners[row] = (key, symbol)
        return row

    def _reclaim(self) -> None:
        """Free the rows of symbols the store no longer holds."""
        for row, owner in enumerate(self.owners):
            if owner is not None and not self.held(*owner):
                symbol = owner[1]
                symbol.vector, symbol.row = symbol.vector.copy(), -1
                self.owners[row] = None
                self.free.append(row)

    def _grow(self) -> None:
        size = len(self.owners)
        grown = engine.new_states(max(FIRST_ROWS, 2 * size))
        grown[:size] = self.array
        self.array = grown
        for row, owner in enumerate(self.owners):
            if owner is not None:
                owner[1].vector = grown[row]
        self.owners += [None] * (len(grown) - size)
        self.free += range(len(grown) - 1, size - 1, -1)  # the lowest row first
