"""Replay throughput: `barcast replay --speed max` against a bare librdkafka producer.

Builds a DBN file of >= 1,000,000 ohlcv-1m records by tiling the real 6EH4 month over
synthetic instruments (generated here, in a temporary folder under BARCAST_WORK_DIR), starts an
embedded broker, and in the same run measures:

- barcast: the full replay (read and decompress DBN, map symbols, filter, encode JSON,
  produce, flush) of the file into one topic;
- anchor: confluent-kafka's `Producer` sending the very same messages (value, key,
  timestamp, header), serialized beforehand, with the same producer configuration, into
  another topic of the same broker.

Both are timed to the end of `flush()`: records per second delivered. The ratio
barcast / anchor is what barcast's decoding and encoding cost on top of the producer itself.
Each side runs `--repeats` times, each run on a fresh broker, in pairs whose order alternates
(anchor first, then barcast first, ...): load that drifts over the run lands on both alike.
The ratio is of the two sides' medians; the median of the pairs' own ratios is reported beside
it, and the goal is met only when both clear it.

    .venv/bin/python -m benchmarks.replay [--records 1000000] [--repeats 4]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson

from benchmarks.provenance import loadavg, run_metadata
from features.bars import read_bar_csv
from streams.broker import EmbeddedBroker
from streams.ingest.bar_json import encode_bars, source_json
from streams.ingest.convert import SIXE_CSV, bars_to_records, ohlcv_metadata, write_dbn
from streams.ingest.dbn_source import DbnReader
from streams.ingest.producer import BAR_HEADERS, PRODUCER_TUNING, producer_config
from streams.ingest.replay import Replay, ReplayOptions
from streams.ingest.symbols import SymbolBook
from streams.kafka import ensure_topics
from streams.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "benchmarks" / "results" / "replay.json"
FIRST_ID = 900_000_001
GOAL = 0.5  # barcast records/s over the bare producer's


def build_file(settings: Settings, folder: Path, records: int) -> tuple[Path, int]:
    """The 6EH4 month once per synthetic instrument, interleaved by minute like a real
    multi-instrument file."""
    month = bars_to_records(read_bar_csv(settings.data_dir / SIXE_CSV), FIRST_ID)
    copies = math.ceil(records / len(month))
    tiled = np.repeat(month, copies)  # each minute `copies` times in a row
    tiled["instrument_id"] = FIRST_ID + np.tile(np.arange(copies), len(month))
    symbols = {f"SYN{k:02d}H4": FIRST_ID + k for k in range(copies)}
    ts = tiled["ts_event"]
    metadata = ohlcv_metadata(symbols, int(ts.min()), int(ts.max()) + 60 * 10**9)
    return write_dbn(folder / "tiled.ohlcv-1m.dbn.zst", metadata, tiled), len(tiled)


def serialize(path: Path) -> tuple[list[bytes], list[bytes], list[int]]:
    """Every message barcast would send for `path`, built before the anchor's clock starts."""
    values: list[bytes] = []
    keys: list[bytes] = []
    timestamps: list[int] = []
    book = SymbolBook()
    source = source_json(f"replay:{path.name}")
    with DbnReader(path) as reader:
        book.add_metadata(reader.metadata)
        for segment in reader.segments():
            index = book.resolve(segment["instrument_id"], segment["ts_event"])
            batch = encode_bars(segment, index, book, source)
            for out, part in zip((values, keys, timestamps), batch, strict=True):
                out.extend(part)
    return values, keys, timestamps


def run_anchor(settings: Settings, topic: str, messages: tuple[list, list, list]) -> float:
    from confluent_kafka import Producer

    ensure_topics(settings, [topic])
    failed: list[object] = []
    config = producer_config(settings, linger_ms=50.0)
    config["on_delivery"] = lambda err, _msg: failed.append(err)  # errors only, as barcast's
    producer = Producer(config)
    produce = producer.produce
    started = time.perf_counter()
    for i, (value, key, timestamp) in enumerate(zip(*messages, strict=True)):
        while True:
            try:
                produce(topic, value, key, timestamp=timestamp, headers=BAR_HEADERS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20_000 == 0:
            producer.poll(0)
    remaining = producer.flush(300)
    seconds = time.perf_counter() - started
    assert remaining == 0 and not failed, f"anchor: {remaining + len(failed)} not delivered"
    return seconds


def run_barcast(
    settings: Settings, topic: str, path: Path, records: int, dry_run: bool = False
) -> float:
    started = time.perf_counter()
    summary = Replay(settings, ReplayOptions(files=(path,), topic=topic, dry_run=dry_run)).run()
    seconds = time.perf_counter() - started
    done = summary.encoded if dry_run else summary.produced
    assert done == records, f"barcast sent {done} of {records}"
    return seconds


def alternated(
    base: Settings,
    folder: Path,
    sides: dict[str, Callable[[Settings], float]],
    repeats: int,
    records: int,
) -> dict[str, list[float]]:
    """Each side's seconds over `repeats` pairs of runs, which side first alternating."""
    runs: dict[str, list[float]] = {side: [] for side in sides}
    for round_ in range(repeats):
        for side in sorted(sides, reverse=round_ % 2 == 1):
            # A fresh broker per run: Tansu keeps every message in memory and slows as it
            # fills, which would penalize whichever side runs second.
            with EmbeddedBroker(folder) as broker:
                settings = replace(base, broker=broker.bootstrap, connect_timeout_s=30.0)
                runs[side].append(sides[side](settings))
        print(
            f"round {round_ + 1}: "
            + ", ".join(f"{side} {records / runs[side][-1]:,.0f}/s" for side in sides),
            flush=True,
        )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()

    provenance = run_metadata()  # now: others may commit while this runs
    base = Settings.from_env()
    base.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base.work_dir, prefix="bench-replay-") as tmp:
        folder = Path(tmp)
        path, records = build_file(base, folder, args.records)
        messages = serialize(path)
        # Without Kafka: what decoding, symbol mapping and encoding alone sustain.
        encode_only = statistics.median(run_barcast(base, "unused", path, records, dry_run=True)
                                        for _ in range(args.repeats))  # fmt: skip
        sides = {
            "anchor": lambda settings: run_anchor(settings, "bench.anchor", messages),
            "barcast": lambda settings: run_barcast(settings, "bench.barcast", path, records),
        }
        runs = alternated(base, folder, sides, args.repeats, records)
        file_bytes = path.stat().st_size

    anchor, barcast = runs["anchor"], runs["barcast"]
    anchor_s, barcast_s = statistics.median(anchor), statistics.median(barcast)
    ratio = anchor_s / barcast_s  # barcast's records/s over the anchor's
    per_pair = [a / b for a, b in zip(anchor, barcast, strict=True)]
    print(f"\nreplay of {records:,} ohlcv-1m records ({file_bytes / 1e6:.1f} MB .dbn.zst)")
    print(f"{'medians':28}{'seconds':>10}{'records/s':>14}")
    print(f"{'librdkafka Producer (bare)':28}{anchor_s:>10.2f}{records / anchor_s:>14,.0f}")
    print(f"{'barcast replay --speed max':28}{barcast_s:>10.2f}{records / barcast_s:>14,.0f}")
    print(f"{'ratio barcast / bare':28}{'':>10}{ratio:>14.2f}   (goal >= {GOAL})")
    print(f"{'  median of the pairs':28}{'':>10}{statistics.median(per_pair):>14.2f}")
    print(f"{'barcast without Kafka':28}{encode_only:>10.2f}{records / encode_only:>14,.0f}"
          "   (decode + map + encode: headroom over the broker)")  # fmt: skip
    result = {
        "records": records,
        "barcast_rps": round(records / barcast_s),
        "librdkafka_rps": round(records / anchor_s),
        "ratio": round(ratio, 3),
        "ratio_per_pair": [round(r, 3) for r in per_pair],
        "ratio_paired_median": round(statistics.median(per_pair), 3),
        "order": "alternating",  # which side ran first, pair by pair
        "barcast_encode_only_rps": round(records / encode_only),
        "barcast_seconds": [round(s, 3) for s in barcast],
        "librdkafka_seconds": [round(s, 3) for s in anchor],
        "file_bytes": file_bytes,
        "producer": {**PRODUCER_TUNING, "linger.ms": 50.0},
        "goal_ratio": GOAL,
        "provenance": provenance | {"loadavg_end": loadavg()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")
