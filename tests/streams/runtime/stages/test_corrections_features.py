"""The corrections and features stages (role `stream`), chained in memory without a broker or
Faust as build_pipeline wires them, equal the pure engines; the stages import no Faust and no
Kafka client."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import orjson
import pandas as pd

from features.corrections import correct_history
from streams.metrics import Metrics
from streams.runtime.commit import Runtime
from streams.runtime.pipeline import build_pipeline
from streams.runtime.records import Record
from streams.runtime.stages.corrections import Corrections
from streams.runtime.stages.features import Features
from streams.schema import DLQ_TOPIC
from streams.settings import Settings
from tests.bar_streams import expected_features, faulty_stream
from tests.streams.runtime.test_stores import MemoryChangelogs


def stages(io: MemoryChangelogs) -> tuple[Corrections, Features]:
    """Role `stream`'s stages, as build_pipeline wires them, their stores in `io`."""
    settings = Settings(role="stream")
    runtime = Runtime(settings, Metrics(), "t", lambda topic: {0}, asyncio.sleep)
    runtime.changelogs = io  # type: ignore[assignment]
    pipeline = build_pipeline(settings, runtime)
    assert pipeline.corrections is not None and pipeline.features is not None
    return pipeline.corrections, pipeline.features


def test_the_stages_chained_in_memory_equal_the_pure_engines(sixe_bars: pd.DataFrame) -> None:
    """No broker, no Faust: raw records through corrections and features, in three batches."""
    values = faulty_stream(sixe_bars, 600)
    expected = correct_history(values)
    raw = [Record("bars.raw", 0, i, 0.0, b"6EH4", v, []) for i, v in enumerate(values)]
    corrections, features = stages(MemoryChangelogs())
    clean, letters, rows = [], [], []
    for start in range(0, len(raw), 250):
        cleaned = corrections.run(raw[start : start + 250], now_ns=time.time_ns())
        featured = features.run(cleaned.items)
        clean += [o for o in cleaned.outputs if o.topic == "bars.clean"]
        letters += [o for o in cleaned.outputs if o.topic == "bars.dlq"]
        rows += featured.rows
    assert [orjson.loads(o.value) for o in clean] == expected.clean
    assert len(letters) == expected.stats.rejected
    assert all(dict(o.headers)[DLQ_TOPIC] == b"bars.raw" for o in letters)
    values_, warm = expected_features(expected.clean)
    assert [r.values.tobytes() for r in rows] == [v.tobytes() for v in values_]  # type: ignore[union-attr]
    assert [r.warm for r in rows] == list(warm)  # type: ignore[union-attr]
    again = features.run(cleaned.items)  # a repeat, as an upstream restart re-publishes it
    assert again.rows == [] and again.outputs == []


def test_the_stages_import_no_faust_and_no_kafka_client() -> None:
    stages = ("corrections", "features", "windows")
    code = "import sys\n" + "".join(f"import streams.runtime.stages.{s}\n" for s in stages)
    code += "print(sorted({m.split('.')[0] for m in sys.modules} & {'faust', 'mode', "
    code += "'aiokafka', 'confluent_kafka'}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
