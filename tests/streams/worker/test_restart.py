"""SIGKILL the stream worker mid-stream, twice, and restart it: de-duplicated by key, bars.clean,
bars.dlq and features equal an uninterrupted run's outputs exactly.

The uninterrupted run is the pure code over the same input (`correct_history`, then
`compute_batch` per symbol): test_corrections_agent and test_features_agent show that a worker
that is never killed publishes exactly that. Repeats of a key are allowed (the window between a
publish and the commit of its source offset) but must be byte-identical to the first. A worker
stopped by SIGTERM instead repeats nothing.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace

import orjson
import pandas as pd
import pytest

from features import engine
from features.corrections import Status, correct_history
from streams.kafka import ensure_topics, pipeline_topics
from streams.schema import decode_feature_values
from streams.settings import Settings
from tests.bar_streams import expected_features, tiled_stream
from tests.kafka_io import produce
from tests.topic_logs import CleanLog, DeadLetterLog, FeatureLog, wait_for_metric
from tests.worker import Worker, tail

pytestmark = pytest.mark.integration  # the embedded broker and real worker processes

SYMBOLS = ["6EH4", "6EM4", "6EU4", "6EZ4"]
BARS_PER_SYMBOL = 2500  # ~10k messages: long enough that both kills land mid-stream
CHECKPOINTS = "barcast_checkpoints_total"


def stream_logs(settings: Settings) -> tuple[CleanLog, DeadLetterLog, FeatureLog]:
    """What the stream role publishes, each read from the beginning."""
    return (
        CleanLog(settings.broker, settings.topic_clean, settings.partitions),
        DeadLetterLog(settings.broker, settings.topic_dlq, settings.partitions),
        FeatureLog(settings.broker, settings.topic_features, settings.partitions),
    )


def test_killed_worker_resumes_exactly(broker_settings: Settings, sixe_bars: pd.DataFrame) -> None:
    # A worker that never goes quiet checkpoints every checkpoint_max_s: often enough here
    # that each kill lands after one, so the restarts resume from stored state.
    settings = replace(broker_settings, role="stream", checkpoint_max_s=0.5)
    ensure_topics(settings, pipeline_topics(settings))
    records = tiled_stream(sixe_bars, BARS_PER_SYMBOL, SYMBOLS)
    expected = correct_history(value for _, value in records)
    rejected = [o.value for o in expected.outcomes if o.status is Status.REJECTED]
    assert expected.stats.held == 0  # no spike candidate: the worker decides every bar at once
    # The input goes in three parts, the next after each kill: neither kill can come after its
    # stage has finished, however far behind the worker this test's reading is, and each
    # restarted worker has records to checkpoint.
    cuts = (len(records) * 2 // 5, len(records) * 7 // 10)
    parts = records[: cuts[0]], records[cuts[0] : cuts[1]], records[cuts[1] :]
    two_clean = sum(o.status is not Status.REJECTED for o in expected.outcomes[: cuts[1]])
    produce(settings.broker, settings.topic_raw, parts[0])

    clean, dlq, features = logs = stream_logs(settings)
    total = len(expected.clean)
    try:
        # Each kill lands after a checkpoint of the worker (the next one restores from it) and
        # mid-stream for the stage it targets: corrections a third through, then features.
        first = Worker(settings, "first").start()
        wait_for_metric(first, CHECKPOINTS, 1)
        clean.read_until(total // 3)
        first.kill()
        assert clean.read_to_end() < total, "kill 1 came after corrections"
        done = features.read_to_end()
        produce(settings.broker, settings.topic_raw, parts[1])
        second = Worker(settings, "second").start()
        wait_for_metric(second, CHECKPOINTS, 1)
        features.read_until((done + two_clean) // 2)
        second.kill()
        assert features.read_to_end() < total, "kill 2 came after features"
        produce(settings.broker, settings.topic_raw, parts[2])
        with Worker(settings, "third") as third:
            assert clean.read_until(total) == total
            assert dlq.read_until(len(rejected)) == len(rejected)
            assert features.read_until(total) == total
        for worker in (second, third):
            assert "Restoring state from changelog topics" in worker.log()
    finally:
        for log in logs:
            log.close()

    assert_outputs_equal_the_pure_engines(expected.clean, rejected, *logs)


def assert_outputs_equal_the_pure_engines(
    expected_clean: list[dict[str, object]],
    rejected: list[object],
    clean: CleanLog,
    dlq: DeadLetterLog,
    features: FeatureLog,
) -> None:
    assert sorted(clean.values) == sorted(
        (bar["symbol"], bar["ts_event"], bar["rtype"]) for bar in expected_clean
    )
    for bar in expected_clean:
        assert orjson.loads(clean.values[bar["symbol"], bar["ts_event"], bar["rtype"]]) == bar
    assert sorted(dlq.values.values()) == sorted(
        v if isinstance(v, bytes) else orjson.dumps(v) for v in rejected
    )
    per_symbol: dict[str, list[dict[str, object]]] = defaultdict(list)
    for bar in expected_clean:
        per_symbol[str(bar["symbol"])].append(bar)
    for symbol, bars in per_symbol.items():
        values, warm = expected_features(bars)
        for i, bar in enumerate(bars):
            row = orjson.loads(features.values[symbol, bar["ts_event"]])
            assert decode_feature_values(row["values"]).tobytes() == values[i].tobytes()
            assert row["warm"] == bool(warm[i]) and row["fingerprint"] == engine.FINGERPRINT


def test_a_stopped_worker_resumes_without_repeating_an_output(
    broker_settings: Settings, sixe_bars: pd.DataFrame
) -> None:
    """SIGTERM, as a rolling deploy sends it, to a worker holding uncommitted outputs: it
    takes a last checkpoint and exits 0, and the next one resumes exactly where it stopped, so
    no key is published twice (a kill may repeat outputs; a graceful stop has no reason to)."""
    # It commits nothing before the stop: the stop's commit always has outputs to commit, and
    # a worker that runs through its whole input before this test's reader starts (on
    # starved cores) still does.
    settings = replace(broker_settings, role="stream", checkpoint_min_s=60, checkpoint_max_s=60)
    ensure_topics(settings, pipeline_topics(settings))
    records = tiled_stream(sixe_bars, BARS_PER_SYMBOL, SYMBOLS)
    expected = correct_history(value for _, value in records)
    # The last quarter goes in after the stop: the next worker always has records to resume on.
    cut = len(records) * 3 // 4
    before, after = records[:cut], records[cut:]
    produce(settings.broker, settings.topic_raw, before)
    clean, dlq, features = logs = stream_logs(settings)
    total = len(expected.clean)
    try:
        first = Worker(settings, "first").start()
        clean.read_until(total // 8)
        assert first.stop() == 0, tail(first.log())
        # It stopped holding outputs since its last checkpoint (else nothing could repeat).
        assert re.search(r"last checkpoint before the stop: [1-9]\d* records", first.log())
        produce(settings.broker, settings.topic_raw, after)
        with Worker(settings, "second") as second:
            assert clean.read_until(total) == features.read_until(total) == total
            assert dlq.read_until(expected.stats.rejected) == expected.stats.rejected
        assert "Restoring state from changelog topics" in second.log()
    finally:
        for log in logs:
            log.close()
    assert clean.repeats == dlq.repeats == features.repeats == []
    rejected = [o.value for o in expected.outcomes if o.status is Status.REJECTED]
    assert_outputs_equal_the_pure_engines(expected.clean, rejected, *logs)
