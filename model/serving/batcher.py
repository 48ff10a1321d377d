"""The dynamic micro-batcher: flush at `max_batch`, after `max_delay`, or on demand.

Pure bookkeeping with an injectable clock; the agent owns the asyncio side (when to call
`due()` and `take()`), so the rules are unit-testable without an event loop.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class Queued(Generic[T]):
    item: T
    since: float


@dataclass
class MicroBatcher(Generic[T]):
    max_batch: int
    max_delay_s: float
    clock: Callable[[], float] = time.monotonic
    _queue: deque[Queued[T]] = field(default_factory=deque)
    _flushing: int = 0  # of the oldest items, how many waited when their minute completed

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch={self.max_batch} must be >= 1 (BARCAST_MAX_BATCH)")
        if self.max_delay_s < 0:
            raise ValueError(f"max_delay={self.max_delay_s}s must be >= 0 (BARCAST_MAX_DELAY_MS)")

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, item: T) -> None:
        self._queue.append(Queued(item, self.clock()))

    def flush_now(self) -> None:
        """The minute is complete (END_OF_INTERVAL): whatever waits goes out at once; bars
        that arrive later belong to the next minute and wait as usual."""
        self._flushing = len(self._queue)

    def due(self) -> bool:
        if not self._queue:
            return False
        return (
            self._flushing > 0
            or len(self._queue) >= self.max_batch
            or self.clock() - self._queue[0].since >= self.max_delay_s
        )

    def seconds_until_due(self) -> float | None:
        """How long the oldest item may still wait; None when nothing waits."""
        if not self._queue:
            return None
        if self._flushing > 0 or len(self._queue) >= self.max_batch:
            return 0.0
        return max(0.0, self._queue[0].since + self.max_delay_s - self.clock())

    def take(self) -> list[T]:
        """Up to `max_batch` items, oldest first."""
        count = min(self.max_batch, len(self._queue))
        batch = [self._queue.popleft().item for _ in range(count)]
        self._flushing = max(0, self._flushing - count)
        return batch
