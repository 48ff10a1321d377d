"""The worker's Prometheus metrics: names (a contract with deploy/), semantics, isolation; and the
corrections agent's: `MetricsFeed` pushes the rules' counters batch by batch, and what `barcast
stats` reads back equals a count of the outcomes themselves."""

from __future__ import annotations

from collections import defaultdict
from importlib.metadata import version
from typing import NamedTuple

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from features.corrections import (
    SYNTHETIC,
    CorrectionConfig,
    CorrectionStats,
    Status,
    Step,
    SymbolState,
    correct,
    flush,
)
from streams.internals import InternalsMoved
from streams.metrics import BAR_OUTCOMES, Metrics, MetricsFeed, Outcome, Stage
from streams.tools import stats_cli
from tests.bar_streams import faulty_stream

EXPORTED = {
    "barcast_consumer_lag": "gauge",
    "barcast_bars": "counter",
    "barcast_corrections": "counter",
    "barcast_rejections": "counter",
    "barcast_dlq": "counter",
    "barcast_gaps": "counter",
    "barcast_gap_minutes": "counter",
    "barcast_rolls": "counter",
    "barcast_expired": "counter",
    "barcast_batch_size": "histogram",
    "barcast_inference_seconds": "histogram",
    "barcast_bar_to_forecast_seconds": "histogram",
    "barcast_forecasts": "counter",
    "barcast_model_info": "gauge",
    "barcast_model_reloads": "counter",
    "barcast_canary_info": "gauge",
    "barcast_canary_scored": "gauge",
    "barcast_canary_verdicts": "counter",
    "barcast_checkpoints": "counter",
    "barcast_full_collections": "counter",
    "barcast_loop_seconds": "counter",
    "barcast_fetch_max_wait_ms": "gauge",
    "barcast_forecast_coverage": "gauge",
    "barcast_forecast_pinball": "gauge",
    "barcast_forecast_skill": "gauge",
    "barcast_forecast_skill_lower": "gauge",
    "barcast_forecast_skill_upper": "gauge",
    "barcast_forecast_source_symbols": "gauge",
}


def samples(metrics: Metrics) -> dict[tuple[str, frozenset], float]:
    """Every sample of a render, parsed back with prometheus-client's own text parser."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return samples(metrics)[(name, frozenset(labels.items()))]


def test_render_exports_every_metric_with_its_type() -> None:
    families = {f.name: f.type for f in text_string_to_metric_families(Metrics().render().decode())}
    assert families == EXPORTED


def test_render_is_classic_prometheus_text_without_created_series() -> None:
    text = Metrics().render().decode()
    for name in ("barcast_bars_total", "barcast_dlq_total", "barcast_gap_minutes_total"):
        assert f"# TYPE {name} counter" in text
        assert f"\n{name}" in text
    assert "_created" not in text
    assert Metrics.content_type.startswith("text/plain; version=0.0.4")


def test_each_render_reads_the_scoring_figures_anew() -> None:
    metrics = Metrics()
    figures = {(1, "coverage"): 0.75, (1, "q90"): 2e-4}
    metrics.scoring_figures = lambda: figures
    coverage = ("barcast_forecast_coverage", frozenset({"horizon": "1"}.items()))
    assert samples(metrics)[coverage] == 0.75
    figures[(1, "coverage")] = 0.5
    exported = samples(metrics)
    assert exported[coverage] == 0.5
    assert (
        exported["barcast_forecast_pinball", frozenset({"horizon": "1", "quantile": "q90"}.items())]
        == 2e-4
    )
    figures.clear()  # the symbols left this worker (a rebalance): no figure is kept at its last
    assert not any(name.startswith("barcast_forecast_") for name, _ in samples(metrics))


def test_each_metrics_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.forecasts.inc(3)
    assert value(first, "barcast_forecasts_total") == 3
    assert value(second, "barcast_forecasts_total") == 0


def test_every_bar_outcome_exists_at_zero_before_any_bar() -> None:
    exported = samples(Metrics())
    for stage, outcomes in BAR_OUTCOMES.items():
        for outcome in outcomes:
            key = ("barcast_bars_total", frozenset({"stage": stage, "outcome": outcome}.items()))
            assert exported[key] == 0


def test_bar_counts_and_rejects_a_pair_no_stage_reports() -> None:
    metrics = Metrics()
    metrics.bar(Stage.CORRECTIONS, Outcome.IN, 5)
    metrics.bar(Stage.CORRECTIONS, Outcome.CORRECTED)
    metrics.bar(Stage.CORRECTIONS, Outcome.CORRECTED)
    assert value(metrics, "barcast_bars_total", stage="corrections", outcome="in") == 5
    assert value(metrics, "barcast_bars_total", stage="corrections", outcome="corrected") == 2
    with pytest.raises(ValueError, match="'duplicate' is not reported by stage 'forecast'"):
        metrics.bar(Stage.FORECAST, Outcome.DUPLICATE)


def test_counters_only_go_up() -> None:
    metrics = Metrics()
    metrics.corrections.labels(rule="high_below_low").inc()
    metrics.rejections.labels(reason="undefined_price").inc(2)
    metrics.gaps.inc()
    metrics.gap_minutes.inc(7)
    with pytest.raises(ValueError):
        metrics.dlq.inc(-1)
    assert value(metrics, "barcast_corrections_total", rule="high_below_low") == 1
    assert value(metrics, "barcast_rejections_total", reason="undefined_price") == 2
    assert value(metrics, "barcast_gap_minutes_total") == 7
    assert value(metrics, "barcast_dlq_total") == 0


def test_batch_size_histogram_buckets_are_powers_of_two_and_cumulative() -> None:
    metrics = Metrics()
    for size in (1, 3, 256, 256, 2000):
        metrics.batch_size.observe(size)
    exported = samples(metrics)
    buckets = {
        dict(labels)["le"]: v
        for (name, labels), v in exported.items()
        if name == "barcast_batch_size_bucket"
    }
    assert list(buckets) == [f"{2.0**i}" for i in range(11)] + ["+Inf"]
    assert buckets["1.0"] == 1
    assert buckets["2.0"] == 1
    assert buckets["4.0"] == 2
    assert buckets["256.0"] == 4
    assert buckets["1024.0"] == 4
    assert buckets["+Inf"] == 5
    assert value(metrics, "barcast_batch_size_count") == 5
    assert value(metrics, "barcast_batch_size_sum") == 1 + 3 + 256 + 256 + 2000


def test_latency_histograms_resolve_milliseconds_up_to_ten_seconds() -> None:
    metrics = Metrics()
    metrics.bar_to_forecast_seconds.observe(0.004)
    metrics.inference_seconds.observe(0.0007)
    assert value(metrics, "barcast_bar_to_forecast_seconds_bucket", le="0.0025") == 0
    assert value(metrics, "barcast_bar_to_forecast_seconds_bucket", le="0.005") == 1
    assert value(metrics, "barcast_bar_to_forecast_seconds_bucket", le="10.0") == 1
    assert value(metrics, "barcast_inference_seconds_bucket", le="0.0005") == 0
    assert value(metrics, "barcast_inference_seconds_bucket", le="0.001") == 1


def test_model_info_names_only_the_serving_checkpoint() -> None:
    metrics = Metrics()
    metrics.set_model("ckpt-a", "fp1")
    metrics.set_model("ckpt-b", "fp1")
    metrics.model_reloads.inc()
    info = {k: v for k, v in samples(metrics).items() if k[0] == "barcast_model_info"}
    assert info == {
        ("barcast_model_info", frozenset({"model_id": "ckpt-b", "fingerprint": "fp1"}.items())): 1
    }
    assert value(metrics, "barcast_model_reloads_total") == 1


class TP(NamedTuple):
    topic: str
    partition: int


class Consumer:
    """The three things `Metrics.record_lag` reads from a Faust consumer."""

    def __init__(self, highwaters: dict[TP, int | None], committed: dict[TP, int]) -> None:
        self.highwaters = highwaters
        self._committed_offset: dict = defaultdict(lambda: None, committed)

    def assignment(self) -> set[TP]:
        return set(self.highwaters)

    def highwater(self, tp: TP) -> int | None:
        return self.highwaters[tp]


def test_set_lag_labels_by_topic_and_partition_and_never_goes_negative() -> None:
    metrics = Metrics()
    metrics.set_lag("bars.raw", 3, 42)
    metrics.set_lag("bars.raw", 1, -5)
    assert value(metrics, "barcast_consumer_lag", topic="bars.raw", partition="3") == 42
    assert value(metrics, "barcast_consumer_lag", topic="bars.raw", partition="1") == 0


def test_record_lag_follows_the_assignment() -> None:
    metrics = Metrics()
    a, b, c = TP("bars.raw", 0), TP("bars.raw", 1), TP("features", 0)
    metrics.record_lag(Consumer({a: 100, b: 50, c: None}, {a: 90}))
    assert value(metrics, "barcast_consumer_lag", topic="bars.raw", partition="0") == 10
    # Nothing committed yet: the whole partition is lag.
    assert value(metrics, "barcast_consumer_lag", topic="bars.raw", partition="1") == 50
    # Unknown highwater (no fetch yet): no series rather than a made-up number.
    assert (
        "barcast_consumer_lag",
        frozenset({"topic": "features", "partition": "0"}.items()),
    ) not in samples(metrics)
    # A rebalance took partition 1 away: its series goes, partition 0 is updated.
    metrics.record_lag(Consumer({a: 120}, {a: 120}))
    lag = {k: v for k, v in samples(metrics).items() if k[0] == "barcast_consumer_lag"}
    assert lag == {
        ("barcast_consumer_lag", frozenset({"topic": "bars.raw", "partition": "0"}.items())): 0
    }


def test_committed_offsets_that_moved_fail_loudly_naming_the_versions() -> None:
    consumer = Consumer({TP("bars.raw", 0): 100}, {})
    del consumer._committed_offset  # where an upgrade of Faust no longer keeps them
    with pytest.raises(InternalsMoved) as error:
        Metrics().record_lag(consumer)
    message = str(error.value)
    assert "_committed_offset" in message and "streams.internals.COMMITTED" in message
    assert f"faust-streaming {version('faust-streaming')}" in message


def counted(steps: list[Step]) -> stats_cli.CorrectionsCounts:
    """The line's counters, counted from the outcomes, gaps and bars the steps released."""
    counts = stats_cli.CorrectionsCounts()
    for step in steps:
        for outcome in step.outcomes:
            counts.bars["in"] += 1
            counts.bars[outcome.status.value] += 1
            if outcome.status is Status.CORRECTED:
                counts.corrections.update({change.rule.value for change in outcome.changes})
            elif outcome.status is Status.REJECTED:
                counts.rejections[outcome.reason.value] += 1  # type: ignore[union-attr]
                counts.dlq += 1
        counts.bars["synthetic"] += sum(bar["status"] == SYNTHETIC for bar in step.clean)
        counts.gaps += len(step.gaps)
        counts.gap_minutes += sum(gap.missing for gap in step.gaps)
    return counts


def test_pushed_batches_add_up_to_every_outcome(sixe_bars: pd.DataFrame) -> None:
    values = faulty_stream(sixe_bars, 1500)
    config, stats, metrics = CorrectionConfig(), CorrectionStats(), Metrics()
    feed = MetricsFeed(stats, metrics)
    state = SymbolState()
    steps = []
    for offset, value in enumerate(values):
        steps.append(correct(value, state, config, stats, ref=["bars.raw", 0, offset]))
        if offset % 7 == 0:  # batches of uneven sizes, some with nothing new to push
            feed.push()
            feed.push()
    steps.append(flush(state, config, stats))
    feed.push()

    expected = counted(steps)
    assert expected.rejections["malformed"] and expected.corrections and expected.gaps
    assert stats_cli.parse(metrics.render().decode()).line() == expected.line()
