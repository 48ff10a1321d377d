"""`barcast demo`: the whole product on one machine, on real data, in a few minutes.

Starts the embedded broker, trains a small model on the 6EH4 month if none exists, starts a
real worker (`faust -A streams worker`), replays the 6EH4 month and the shared DBN files into
`bars.raw`, shows the latest forecasts as they arrive, writes a fan chart of forecasts against
what happened, and shuts everything down.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import orjson

from streams.broker import EmbeddedBroker
from streams.kafka import confluent_config, ensure_topics, pipeline_topics
from streams.process import WorkerProcess
from streams.settings import Settings

FIRST_FORECAST_TIMEOUT_S = 300.0  # a cold start compiles the Numba kernels first
IDLE_EXIT_S = 8.0
REDRAW_S = 1.0
DEMO_TRAINING = {"hidden": 32, "heads": 4, "epochs": 3, "windows_per_epoch": 2048}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the whole pipeline on the embedded broker and the shared real data"
    )
    parser.add_argument("--retrain", action="store_true", help="train even if a model exists")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
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
            summary = replay(run_settings)
            print(f"[demo] replayed: {summary}", flush=True)
            forecasts = watch(run_settings)
    chart = fan_chart(forecasts, demo_dir / "fan_chart.png")
    latencies = np.array([f["latency_ms"] for f in forecasts.values()])
    print(
        f"[demo] {len(forecasts)} forecasts; bar-to-forecast latency p50 "
        f"{np.percentile(latencies, 50):.1f} ms, p99 {np.percentile(latencies, 99):.1f} ms"
    )
    print(f"[demo] fan chart: {chart}")
    print("[demo] worker and broker stopped")
    return 0 if forecasts else 1


def ensure_checkpoint(settings: Settings, retrain: bool) -> Path:
    """The newest checkpoint in the model directory, training a small one when there is none."""
    from streams.forecast.checkpoints import CheckpointWatcher

    newest = CheckpointWatcher(settings.model_dir).newest()
    if newest is not None and not retrain:
        problem = unusable(newest)
        if problem is None:
            print(f"[demo] using checkpoint {newest}", flush=True)
            return newest
        print(f"[demo] not using {newest}: {problem}", flush=True)
    from model.config import TFTConfig
    from model.train import TrainConfig, train
    from streams.ingest.convert import SIXE_CSV

    out = settings.model_dir / "demo"
    print(f"[demo] training a small TFT on {SIXE_CSV} into {out}", flush=True)
    config = TFTConfig(hidden=DEMO_TRAINING["hidden"], heads=DEMO_TRAINING["heads"])
    train(
        [settings.data_dir / SIXE_CSV],
        out,
        config,
        TrainConfig(
            epochs=DEMO_TRAINING["epochs"], windows_per_epoch=DEMO_TRAINING["windows_per_epoch"]
        ),
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
    from streams.ingest.producer import BarProducer
    from streams.ingest.replay import Replay, ReplayOptions

    files = (sixe_dbn(settings), *sorted((settings.data_dir / "dbn").glob("*ohlcv-1m.dbn.zst")))
    print(f"[demo] replaying {', '.join(f.name for f in files)}", flush=True)
    summary = Replay(settings, ReplayOptions(files=files, topic=settings.topic_raw)).run()
    # The end of the data completes the last minute: flush held bars and the last batch.
    producer = BarProducer(settings, settings.topic_raw)
    producer.send_control(int(time.time_ns()))
    producer.flush()
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


def fan_chart(forecasts: dict[tuple[str, int], dict[str, Any]], path: Path) -> Path:
    """The busiest symbol's last 240 bars with 10-step forecast fans every 30 bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_symbol: dict[str, list[dict[str, Any]]] = {}
    for (symbol, _), value in sorted(forecasts.items()):
        by_symbol.setdefault(symbol, []).append(value)
    fig, ax = plt.subplots(figsize=(11, 5))
    if by_symbol:
        symbol, series = max(by_symbol.items(), key=lambda item: len(item[1]))
        series = series[-240:]
        minutes = np.array([f["ts_event"] for f in series]) // 60_000_000_000
        ax.plot(
            minutes - minutes[0],
            [f["close"] for f in series],
            color="black",
            lw=1,
            label=f"{symbol} close (what happened)",
        )
        for f in series[::30]:
            start = f["ts_event"] // 60_000_000_000 - minutes[0]
            steps = start + np.asarray(f["horizons"])
            ax.fill_between(steps, f["price_q10"], f["price_q90"], color="tab:blue", alpha=0.25)
            ax.plot(steps, f["price_q50"], color="tab:blue", lw=1)
        ax.set_title(f"barcast: 10-minute q10-q90 forecast fans vs realized close, {symbol}")
        ax.set_xlabel("minutes")
        ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
