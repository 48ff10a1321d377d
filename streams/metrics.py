"""The worker's Prometheus metrics, served as text exposition on the Faust web port (`/metrics`).

One `Metrics` per Faust app owns its own `CollectorRegistry`: nothing is registered in
prometheus-client's process-global registry, so two apps (or two tests) in one process never
share or clash on series. The metric names are a contract with `deploy/grafana` and
`deploy/prometheus` (a test checks the dashboard against `render()`), so rename nothing here
without changing them too.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric

from streams.forecast_metrics import ScoringMetrics, SkillMetrics
from streams.internals import committed_offsets

if TYPE_CHECKING:
    from features.corrections import CorrectionStats


class Stage(StrEnum):
    CORRECTIONS = "corrections"
    FEATURES = "features"
    FORECAST = "forecast"


class Outcome(StrEnum):
    IN = "in"
    OUT = "out"
    CLEAN = "clean"
    CORRECTED = "corrected"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    SYNTHETIC = "synthetic"


# The (stage, outcome) pairs a worker can report. They are created at zero up front so that
# `rate()` and `increase()` see a series from the first scrape instead of a gap, and a typo in
# a caller fails loudly instead of inventing a new series the dashboard never shows.
BAR_OUTCOMES: dict[Stage, tuple[Outcome, ...]] = {
    Stage.CORRECTIONS: (
        Outcome.IN,
        Outcome.CLEAN,
        Outcome.CORRECTED,
        Outcome.DUPLICATE,
        Outcome.REJECTED,
        Outcome.SYNTHETIC,
    ),
    Stage.FEATURES: (Outcome.IN, Outcome.OUT),
    Stage.FORECAST: (Outcome.IN, Outcome.OUT),
}

BATCH_SIZE_BUCKETS = tuple(float(2**i) for i in range(11))  # 1, 2, 4, ..., 1024
INFERENCE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BAR_TO_FORECAST_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class LagSource(Protocol):
    """The part of a Faust consumer (`app.consumer`) that consumer lag is computed from, with
    its committed offsets (streams.internals.committed_offsets: no public API has them)."""

    def assignment(self) -> Iterable: ...

    def highwater(self, tp: object) -> int | None: ...


class Metrics:
    """Every barcast metric, typed, in a registry of its own; `render()` is the `/metrics` body."""

    content_type = CONTENT_TYPE_PLAIN_0_0_4

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._stream_metrics(self.registry)
        self._runtime_metrics(self.registry)
        self._forecast_metrics(self.registry)
        # The scoring stage's rolling figures, read from its states at each render: the
        # worker's forecast stage points `scoring_figures` at them (other roles export none).
        self.scoring = ScoringMetrics(self.registry)
        self.scoring_figures: Callable[[], dict[tuple[int, str], float]] = dict
        # Likewise the shadow baselines' skill and each source's symbols
        self.skill = SkillMetrics(self.registry)
        self.skill_figures: Callable[[], dict[tuple[int, str], Any]] = dict
        self.source_counts: Callable[[], dict[str, int]] = dict
        for stage, outcomes in BAR_OUTCOMES.items():
            for outcome in outcomes:
                self.bars.labels(stage=stage.value, outcome=outcome.value)

    def _stream_metrics(self, reg: CollectorRegistry) -> None:
        """What the consumer and the corrections count."""
        self.consumer_lag = Gauge(
            "barcast_consumer_lag",
            "Messages not yet committed by this worker: highwater - committed offset.",
            ["topic", "partition"],
            registry=reg,
        )
        self.bars = Counter(
            "barcast_bars_total",
            "Bars seen per pipeline stage and outcome.",
            ["stage", "outcome"],
            registry=reg,
        )
        self.corrections = Counter(
            "barcast_corrections_total",
            "Field corrections applied, per correction rule.",
            ["rule"],
            registry=reg,
        )
        self.rejections = Counter(
            "barcast_rejections_total",
            "Bars rejected to the dead-letter topic, per reason.",
            ["reason"],
            registry=reg,
        )
        self.dlq = Counter(
            "barcast_dlq_total", "Records written to the dead-letter topic.", registry=reg
        )
        self.gaps = Counter(
            "barcast_gaps_total", "Gaps (missing minutes) detected in bar streams.", registry=reg
        )
        self.gap_minutes = Counter(
            "barcast_gap_minutes_total", "Minutes missing across all detected gaps.", registry=reg
        )
        self.rolls = Counter(
            "barcast_rolls_total",
            "Rolls: a symbol's states carried over to its next contract.",
            registry=reg,
        )
        self.expired = Counter("barcast_expired_total", "Symbols expired.", registry=reg)

    def _runtime_metrics(self, reg: CollectorRegistry) -> None:
        """What the runtime counts: commits, the event loop's time, collections, fetches."""
        self.commits = Counter(  # named before the runtime's commit was called one
            "barcast_checkpoints_total",
            "Checkpoints done: states stored and the consumed offsets they cover released.",
            registry=reg,
        )
        self.loop_seconds = Counter(
            "barcast_loop_seconds",
            "Event-loop time (wall) by work: `agent` an agent's stages on a batch, `publish` "
            "the forecast stage publishing a micro-batch.",
            ["work"],
            registry=reg,
        )
        self.full_collections = Counter(
            "barcast_full_collections_total",
            "Full collections of the cycle collector, each in a quiet (streams.runtime.heap).",
            registry=reg,
        )
        self.fetch_max_wait_ms = Gauge(
            "barcast_fetch_max_wait_ms",
            "Longest wait of the live consumer's fetches (ms), read back from it.",
            registry=reg,
        )

    def _forecast_metrics(self, reg: CollectorRegistry) -> None:
        """What the forecast stage and its model count."""
        self.batch_size = Histogram(
            "barcast_batch_size",
            "Windows per inference micro-batch.",
            buckets=BATCH_SIZE_BUCKETS,
            registry=reg,
        )
        self.inference_seconds = Histogram(
            "barcast_inference_seconds",
            "Model forward time per micro-batch.",
            buckets=INFERENCE_BUCKETS,
            registry=reg,
        )
        self.bar_to_forecast_seconds = Histogram(
            "barcast_bar_to_forecast_seconds",
            "Time from a bar's arrival to its forecast being published.",
            buckets=BAR_TO_FORECAST_BUCKETS,
            registry=reg,
        )
        self.forecasts = Counter("barcast_forecasts_total", "Forecasts published.", registry=reg)
        self.model_info = Gauge(
            "barcast_model_info",
            "The checkpoint serving forecasts (value is always 1).",
            ["model_id", "fingerprint"],
            registry=reg,
        )
        self.model_reloads = Counter(
            "barcast_model_reloads_total", "Checkpoints hot-reloaded since start.", registry=reg
        )
        self.canary_info = Gauge(
            "barcast_canary_info",
            "The checkpoint forecasting in shadow beside the serving one (value is always 1).",
            ["model_id"],
            registry=reg,
        )
        self.canary_scored = Gauge(
            "barcast_canary_scored",
            "The canary's forecasts scored so far, on the partition that last looked for its "
            "verdict (it is decided at BARCAST_CANARY_FORECASTS).",
            registry=reg,
        )
        self.canary_verdicts = Counter(
            "barcast_canary_verdicts_total",
            "Canaries decided, per partition: promoted, refused (with the reason: pinball, "
            "coverage, missing) or forced (barcast promote).",
            ["verdict", "reason"],
            registry=reg,
        )

    def bar(self, stage: Stage, outcome: Outcome, count: int = 1) -> None:
        if outcome not in BAR_OUTCOMES[stage]:
            allowed = ", ".join(o.value for o in BAR_OUTCOMES[stage])
            raise ValueError(
                f"outcome {outcome.value!r} is not reported by stage {stage.value!r}; "
                f"use one of: {allowed}"
            )
        self.bars.labels(stage=stage.value, outcome=outcome.value).inc(count)

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        self.consumer_lag.labels(topic=topic, partition=str(partition)).set(max(lag, 0))

    def record_lag(self, consumer: LagSource) -> None:
        """Set the lag of every assigned partition and drop partitions no longer assigned
        (after a rebalance another worker reports them; a stale value here would double them).

        A partition with nothing committed yet counts from the highwater: all of it is lag.
        Partitions whose highwater is unknown (no fetch yet) are skipped until it is.
        InternalsMoved if Faust no longer keeps the committed offsets where barcast reads them.
        """
        current: set[tuple[str, str]] = set()
        offsets = committed_offsets(consumer)
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if highwater is None:
                continue
            committed = offsets.get(tp) or 0
            self.set_lag(tp.topic, tp.partition, highwater - committed)
            current.add((tp.topic, str(tp.partition)))
        for labels in self._lag_labels() - current:
            self.consumer_lag.remove(*labels)

    def set_model(self, model_id: str, fingerprint: str) -> None:
        """Point `barcast_model_info` at the serving checkpoint (and only at it)."""
        self.model_info.clear()
        self.model_info.labels(model_id=model_id, fingerprint=fingerprint).set(1)

    def set_canary(self, model_id: str | None) -> None:
        """Point `barcast_canary_info` at the canary running now (none: no series)."""
        self.canary_info.clear()
        if model_id is not None:
            self.canary_info.labels(model_id=model_id).set(1)

    def render(self) -> bytes:
        self.scoring.set(self.scoring_figures())
        self.skill.set(self.skill_figures(), self.source_counts())
        return generate_latest(_WithoutCreated(self.registry))

    def _lag_labels(self) -> set[tuple[str, str]]:
        return {
            (sample.labels["topic"], sample.labels["partition"])
            for metric in self.consumer_lag.collect()
            for sample in metric.samples
        }


class _WithoutCreated:
    """A registry view without the `*_created` samples. In the classic text format they turn
    into a separate gauge per counter and histogram series that nothing here reads; dropping
    them per render avoids prometheus-client's process-global `disable_created_metrics()`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            created = family.name + "_created"
            family.samples = [s for s in family.samples if s.name != created]
            yield family


class MetricsFeed:
    """Adds to the metrics what `CorrectionStats` counted since the last `push()`.

    The rules count every outcome, gap and synthetic bar in the stats anyway; the agent pushes
    the difference once per batch instead of counting its outputs again per bar, and touches
    only the series that moved (a labelled Prometheus lookup costs more than a bar's rules)."""

    def __init__(self, stats: CorrectionStats, metrics: Metrics) -> None:
        self.stats, self.metrics = stats, metrics
        outcomes = BAR_OUTCOMES[Stage.CORRECTIONS]
        self.series = {
            o: metrics.bars.labels(stage=Stage.CORRECTIONS.value, outcome=o.value) for o in outcomes
        }
        self.pushed: Tally[Any] = Tally()

    def _counts(self) -> Tally[Any]:
        s = self.stats
        counts = Tally({f"rule:{rule.value}": n for rule, n in s.corrections.items()})
        counts.update({f"reason:{reason.value}": n for reason, n in s.rejections.items()})
        counts.update(
            {
                Outcome.IN: s.clean + s.corrected + s.duplicate + s.rejected,
                Outcome.CLEAN: s.clean,
                Outcome.CORRECTED: s.corrected,
                Outcome.DUPLICATE: s.duplicate,
                Outcome.REJECTED: s.rejected,
                Outcome.SYNTHETIC: s.synthetic,
                "gaps": s.gaps,
                "gap_minutes": s.gap_bars,
                "rolls": s.rolls,
                "expired": s.expired,
            }
        )
        return counts

    def push(self) -> None:
        counts = self._counts()
        moved, self.pushed = counts - self.pushed, counts
        metrics = self.metrics
        for name, n in moved.items():
            if name in self.series:
                self.series[name].inc(n)
            elif name in ("gaps", "gap_minutes", "rolls", "expired"):
                getattr(metrics, name).inc(n)
            else:
                kind, label = name.split(":", 1)
                family = metrics.corrections if kind == "rule" else metrics.rejections
                family.labels(**{kind: label}).inc(n)
        if moved[Outcome.REJECTED]:
            metrics.dlq.inc(moved[Outcome.REJECTED])
