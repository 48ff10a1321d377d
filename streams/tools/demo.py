"""`barcast demo`: the whole product on one machine, on real data, in a few minutes.

Starts the embedded broker, trains a small model on the 6EH4 month if none exists, starts a
real worker (`faust -A streams worker`), replays the 6EH4 month and the shared DBN files into
`bars.raw`, shows the latest forecasts as they arrive and the URL of the worker's live page,
saves that page (fan charts of every symbol) when the forecasts stop, and shuts everything
down; with `--serve`, only at Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import orjson

from streams.broker import EmbeddedBroker
from streams.exit_codes import ExitCode
from streams.kafka import confluent_config, ensure_topics, pipeline_topics
from streams.process import WorkerProcess
from streams.settings import Settings

FIRST_FORECAST_TIMEOUT_S = 300.0  # a cold start compiles the Numba kernels first
IDLE_EXIT_S = 8.0
REDRAW_S = 1.0
SERVE_POLL_S = 0.5
DEMO_TRAINING = {"epochs": 3, "windows_per_epoch": 2048}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the whole pipeline on the embedded broker and the shared real data"
    )
    parser.add_argument("--retrain", action="store_true", help="train even if a model exists")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep the worker and its live page up after the replay, until Ctrl-C",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams.ingest.convert import SIXE_CSV

    settings = Settings.from_env()
    data = settings.data_dir / SIXE_CSV  # the demo trains on it, and replays it
    if not data.is_file():
        print(
            f"barcast demo: {data} not found; set BARCAST_DATA_DIR to the folder holding "
            f"{SIXE_CSV} (the repository's shared data)",
            file=sys.stderr,
        )
        return ExitCode.FILE_NOT_FOUND
    demo_dir = settings.work_dir / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = ensure_checkpoint(settings, retrain=args.retrain)
    with EmbeddedBroker(demo_dir / "broker") as broker:
        print(f"[demo] embedded broker at {broker.bootstrap}", flush=True)
        run_settings = replace(
            settings,
            broker=broker.bootstrap,
            app_id=f"barcast-demo-{int(time.time())}",
            role="all",
            model_dir=checkpoint,
            work_dir=demo_dir,
        )
        ensure_topics(run_settings, pipeline_topics(run_settings))
        worker = WorkerProcess(run_settings, name="demo-worker")
        print(f"[demo] starting `faust -A streams worker` (log: {worker.log_path})", flush=True)
        with worker:
            url = f"http://127.0.0.1:{worker.settings.web_port}/"
            print(f"[demo] live page: {url}", flush=True)
            summary = replay(run_settings)
            print(f"[demo] replayed: {summary}", flush=True)
            forecasts = watch(run_settings)
            page = save_page(url, demo_dir / "live_page.html")
            if args.serve:
                serve(worker, url)
    latencies = np.array([f["latency_ms"] for f in forecasts.values()])
    if forecasts:
        print(
            f"[demo] {len(forecasts)} forecasts; bar-to-forecast latency p50 "
            f"{np.percentile(latencies, 50):.1f} ms, p99 {np.percentile(latencies, 99):.1f} ms"
        )
    print(f"[demo] the live page as the forecasts stopped: {page}")
    print("[demo] worker and broker stopped")
    return ExitCode.OK if forecasts else ExitCode.NOTHING_PUBLISHED


def save_page(url: str, path: Path) -> Path:
    """The live page, self-contained (its charts are SVG), to open after the worker stopped."""
    with urllib.request.urlopen(url, timeout=30) as response:
        path.write_bytes(response.read())
    return path


def serve(worker: WorkerProcess, url: str) -> None:
    """Keep the worker (and its page) up until Ctrl-C, or until it exits on its own."""
    try:
        print(f"[demo] serving {url} until Ctrl-C", flush=True)
        while worker.process is not None and worker.process.poll() is None:
            time.sleep(SERVE_POLL_S)
    except KeyboardInterrupt:
        print("\n[demo] Ctrl-C: stopping", flush=True)


def ensure_checkpoint(settings: Settings, retrain: bool) -> Path:
    """The newest checkpoint in the model directory, training a small one when there is none."""
    from model.serving.checkpoints import CheckpointWatcher

    newest = CheckpointWatcher(settings.model_dir).newest()
    if newest is not None and not retrain:
        problem = unusable(newest)
        if problem is None:
            print(f"[demo] using checkpoint {newest}", flush=True)
            return newest
        print(f"[demo] not using {newest}: {problem}", flush=True)
    from model.config import TFTConfig
    from model.train import TrainConfig, train
    from model.training_state import STATE_FILE
    from streams.ingest.convert import SIXE_CSV

    out = settings.model_dir / "demo"
    print(f"[demo] training a small TFT on {SIXE_CSV} into {out}", flush=True)
    train(
        [settings.data_dir / SIXE_CSV],
        out,
        TFTConfig(),
        TrainConfig(
            epochs=DEMO_TRAINING["epochs"], windows_per_epoch=DEMO_TRAINING["windows_per_epoch"]
        ),
        resume=(out / STATE_FILE).exists(),  # a demo stopped while training goes on from there
    )
    return out


def unusable(directory: Path) -> str | None:
    """Why the worker would refuse a checkpoint (another barcast version, another feature
    set), or None."""
    from features.engine import FINGERPRINT
    from model.checkpoint import CheckpointError, load

    try:
        load(directory, FINGERPRINT)
    except CheckpointError as exc:
        return str(exc)
    return None


def replay(settings: Settings) -> str:
    from streams.ingest.convert import sixe_dbn
    from streams.ingest.replay import Replay, ReplayOptions

    files = (sixe_dbn(settings), *sorted((settings.data_dir / "dbn").glob("*ohlcv-1m.dbn.zst")))
    print(f"[demo] replaying {', '.join(f.name for f in files)}", flush=True)
    summary = Replay(settings, ReplayOptions(files=files, topic=settings.topic_raw)).run()
    return f"{summary.produced} bars from {len(files)} files in {summary.seconds:.1f}s"


def watch(settings: Settings) -> dict[tuple[str, int], dict[str, Any]]:
    """Read forecasts until none arrived for a while, redrawing a table of the latest ones."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(confluent_config(settings, **{"group.id": "barcast-demo-watch"}))
    consumer.assign(
        [
            TopicPartition(settings.topic_forecasts, p, OFFSET_BEGINNING)
            for p in range(settings.partitions)
        ]
    )
    forecasts: dict[tuple[str, int], dict[str, Any]] = {}
    latest: dict[str, dict[str, Any]] = {}
    table = ForecastTable(sys.stdout)
    started = last_seen = last_draw = time.monotonic()
    try:
        while time.monotonic() - last_seen < IDLE_EXIT_S or (
            not forecasts and time.monotonic() - started < FIRST_FORECAST_TIMEOUT_S
        ):
            for message in consumer.consume(1000, timeout=0.2):
                if message.error():
                    continue
                value = orjson.loads(message.value())
                forecasts[(value["symbol"], value["ts_event"])] = value
                latest[value["symbol"]] = value
                last_seen = time.monotonic()
            if time.monotonic() - last_draw > REDRAW_S and latest:
                table.show(latest, len(forecasts))
                last_draw = time.monotonic()
    finally:
        consumer.close()
    if latest:
        table.show(latest, len(forecasts))
    return forecasts


class ForecastTable:
    """The latest forecasts, shown again only when they changed: redrawn in place on a
    terminal, appended to a log or pipe (where a table a second while the demo waits to exit
    would repeat itself)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.shown: str | None = None

    def show(self, latest: dict[str, dict[str, Any]], total: int) -> None:
        text = render(latest, total)
        if text == self.shown:
            return
        self.shown = text
        if self.out.isatty():
            self.out.write("\x1b[H\x1b[J")
        self.out.write(text + "\n")
        self.out.flush()


def render(latest: dict[str, dict[str, Any]], total: int) -> str:
    lines = [
        f"forecasts so far: {total}",
        f"{'symbol':<8} {'bar (UTC)':<17} {'close':>10} {'q10 h=1':>10} {'q50 h=1':>10} "
        f"{'q90 h=1':>10} {'q10 h=10':>10} {'q90 h=10':>10} {'latency':>9}",
    ]
    for symbol, f in sorted(latest.items()):
        stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(f["ts_event"] / 1e9))
        lines.append(
            f"{symbol:<8} {stamp:<17} {f['close']:>10.5f} {f['price_q10'][0]:>10.5f} "
            f"{f['price_q50'][0]:>10.5f} {f['price_q90'][0]:>10.5f} {f['price_q10'][-1]:>10.5f} "
            f"{f['price_q90'][-1]:>10.5f} {f['latency_ms']:>7.0f}ms"
        )
    return "\n".join(lines)
