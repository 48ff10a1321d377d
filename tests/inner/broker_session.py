"""Run by test_foundation_broker in a child pytest: records the broker's pid, then idles."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from streams.broker import EmbeddedBroker

# A shell's background job starts with SIGINT ignored, and Python then never turns it into
# KeyboardInterrupt: the interrupt this session stands for would be lost.
signal.signal(signal.SIGINT, signal.default_int_handler)

pytestmark = pytest.mark.integration  # the embedded broker it starts is the point


def test_record_broker_pid(embedded_broker: EmbeddedBroker) -> None:
    assert embedded_broker.pid is not None
    Path(os.environ["BARCAST_TEST_PID_FILE"]).write_text(str(embedded_broker.pid))
    time.sleep(float(os.environ.get("BARCAST_TEST_IDLE_S", "0")))
