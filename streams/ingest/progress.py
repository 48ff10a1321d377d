"""A one-line progress bar for long ingests: records, rate and ETA, redrawn at most 10×/s.

Drawn only on a terminal, so logs and pipes get the final JSON summary and nothing else.
"""

from __future__ import annotations

import time
from typing import TextIO

WIDTH = 24
REDRAW_S = 0.1


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Progress by bytes of input (known up front even for compressed files)."""

    def __init__(self, total_bytes: int, stream: TextIO, enabled: bool | None = None):
        self.total = max(total_bytes, 1)
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self._start = time.monotonic()
        self._drawn = 0.0

    def update(self, records: int, done_bytes: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._drawn < REDRAW_S:
            return
        self._drawn = now
        elapsed = max(now - self._start, 1e-9)
        fraction = min(done_bytes / self.total, 1.0)
        filled = int(fraction * WIDTH)
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else 0.0
        self.stream.write(
            f"\r{fraction:4.0%} [{'#' * filled}{'.' * (WIDTH - filled)}] {records:,} records "
            f"{records / elapsed:,.0f}/s ETA {_clock(eta)} "
        )
        self.stream.flush()

    def close(self, records: int, done_bytes: int) -> None:
        if self.enabled:
            self.update(records, done_bytes, force=True)
            self.stream.write("\n")
            self.stream.flush()
