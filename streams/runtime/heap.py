"""When the worker's cycle collector makes its full collections: in a quiet, never in a burst.

The interpreter runs a full collection (every tracked object not frozen) once enough objects
have survived since the last one. A thousand symbols' states are many objects, and a full
collection stalls whatever the loop runs at the time: at a minute boundary, the burst in flight.
So the worker turns the interpreter's own full collections off (`defer_full_collections`) and
makes them itself (`QuietCollections.tick`, from a timer): once the worker is quiet, at most
every `INTERVAL_S`, or after `MAX_S` on a worker never quiet (a replay at full speed), which
bounds the garbage cycles can hold. The young generations' collections, short, run as usual;
what lives as long as the worker is frozen out of every collection (`BarcastApp.freeze_heap`).
"""

from __future__ import annotations

import gc

from streams.runtime.commit import QUIET_S

INTERVAL_S = 60.0
MAX_S = 300.0
NEVER = 2**31 - 1  # collections of the middle generation before the interpreter's full one


def defer_full_collections() -> None:
    """The interpreter's full collections off; the young generations' as they were."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, NEVER)


def full_collection_due(since_s: float, quiet_s: float) -> bool:
    """Whether a full collection is due `since_s` after the last, on a worker quiet for
    `quiet_s`."""
    return since_s >= MAX_S or (since_s >= INTERVAL_S and quiet_s >= QUIET_S)


class QuietCollections:
    """The worker's full collections, each when due (`full_collection_due`)."""

    def __init__(self, now: float) -> None:
        self.last = now
        self.count = 0

    def tick(self, now: float, worked: float) -> bool:
        """A full collection if one is due at `now` (time.monotonic()) on a worker whose stream
        work last ran at `worked`; whether it ran."""
        if not full_collection_due(now - self.last, now - worked):
            return False
        gc.collect()
        self.last, self.count = now, self.count + 1
        return True
