"""The engine alone beside a busy event loop: a thread that runs Python without pause, at the
worker's switch interval (streams.faust_app.SWITCH_INTERVAL_S). In a burst the worker's event
loop holds the interpreter most of the time, and every time the inference thread gives the
interpreter up it must win it back; this measures what that costs the engine beside Python
code alone. It is no bound on the worker: the real loop's C calls (and Faust's consumer
thread) hold the interpreter for their whole length, and the broker and the client share the
cores, so the engine can take longer in the worker than here."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from streams.faust_app import SWITCH_INTERVAL_S


@contextmanager
def busy_interpreter() -> Iterator[None]:
    """A thread running Python until the block ends, at the worker's switch interval."""
    stop = threading.Event()

    def spin() -> None:
        total = 0
        while not stop.is_set():
            for i in range(1000):
                total += i

    before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    thread = threading.Thread(target=spin, name="busy-loop", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(before)
