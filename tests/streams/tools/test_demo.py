"""`barcast demo`: it trains a new checkpoint rather than start a worker that would refuse the old
one, its forecast table in a log or pipe is shown again only when it changed, and with
`--serve` the worker stays up until Ctrl-C, or until it exits on its own."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from model.checkpoint import CONFIG
from streams.kafka import ensure_topics
from streams.process import WorkerProcess
from streams.settings import Settings
from streams.tools import demo
from streams.tools.cli import main
from streams.tools.demo import unusable
from tests.checkpoints import make_checkpoint
from tests.kafka_io import produce

MINUTE = 60 * 10**9


def forecast(symbol: str, minute: int) -> dict[str, Any]:
    steps = [1.0 + i / 1000 for i in range(10)]
    return {
        "symbol": symbol,
        "ts_event": 1_719_877_200 * 10**9 + minute * MINUTE,
        "close": 1.0,
        "price_q10": steps,
        "price_q50": steps,
        "price_q90": steps,
        "latency_ms": 12.0,
    }


def test_the_table_is_written_again_only_when_it_changed() -> None:
    out = io.StringIO()
    table = demo.ForecastTable(out)
    first = {"ESU4": forecast("ESU4", 0)}
    table.show(first, 1)
    table.show(first, 1)
    table.show({"ESU4": forecast("ESU4", 1)}, 2)
    text = out.getvalue()
    assert text.count("forecasts so far") == 2 and "\x1b" not in text
    assert "forecasts so far: 1" in text and "forecasts so far: 2" in text


@pytest.mark.integration
def test_watching_idle_forecasts_prints_their_table_once(
    broker_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = broker_settings.topic_forecasts
    ensure_topics(broker_settings, [topic])
    values = [forecast(symbol, m) for symbol in ("ESU4", "NQU4") for m in range(3)]
    produce(
        broker_settings.broker, topic, [(v["symbol"].encode(), orjson.dumps(v)) for v in values]
    )
    # Idle for several redraw intervals after the last forecast: a table a second would repeat.
    monkeypatch.setattr(demo, "IDLE_EXIT_S", 4 * demo.REDRAW_S)
    forecasts = demo.watch(broker_settings)
    out = capsys.readouterr().out
    assert len(forecasts) == len(values)
    # (a slow broker may hand over the first forecasts in an earlier table of their own)
    assert out.count(f"forecasts so far: {len(values)}") == 1, out


def test_a_checkpoint_of_another_format_version_is_unusable(tmp_path: Path) -> None:
    make_checkpoint(tmp_path)
    assert unusable(tmp_path) is None
    config = json.loads((tmp_path / CONFIG).read_text())
    (tmp_path / CONFIG).write_text(json.dumps(config | {"version": 1}))
    problem = unusable(tmp_path)
    assert problem is not None and "version 1" in problem and "retrain" in problem


# A child Python serving a stand-in worker process (a `sleep`): Ctrl-C must reach the demo,
# end serving, and leave the worker for the demo's own orderly stop. The child takes SIGINT as
# a terminal's Ctrl-C reaches a foreground process, even when this run was started with it
# ignored (a shell's background job, as CI runs it), which its children would inherit.
CHILD = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from streams.tools import demo
from streams.tools.cli import main
from streams.process import WorkerProcess
from streams.settings import Settings
worker = WorkerProcess(Settings(work_dir=Path(sys.argv[1])))
worker.process = subprocess.Popen(["sleep", "300"])
demo.serve(worker, "http://127.0.0.1:1/")
print("served; worker alive:", worker.process.poll() is None, flush=True)
worker.process.kill()
"""


def test_serving_ends_when_the_worker_exits(tmp_path: Path) -> None:
    worker = WorkerProcess(replace(Settings(), work_dir=tmp_path))
    worker.process = subprocess.Popen(["true"])
    worker.process.wait()
    demo.serve(worker, "http://127.0.0.1:1/")  # returns: nothing left to serve


def test_ctrl_c_ends_serving_and_leaves_the_stop_to_the_demo(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first = child.stdout.readline()  # printed once serving has begun: then send Ctrl-C
    assert "serving http://127.0.0.1:1/ until Ctrl-C" in first
    child.send_signal(signal.SIGINT)
    rest, _ = child.communicate(timeout=30)
    assert child.returncode == 0, rest
    assert "Ctrl-C: stopping" in rest and "served; worker alive: True" in rest


def test_the_demo_without_its_data_names_the_setting_that_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BARCAST_DATA_DIR", str(tmp_path / "nodata"))
    monkeypatch.setenv("BARCAST_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("BARCAST_WORK_DIR", str(tmp_path / "var"))
    assert main(["demo"]) == 4
    assert "set BARCAST_DATA_DIR to the folder holding 6EH4" in capsys.readouterr().err
    assert not (tmp_path / "models").exists()
