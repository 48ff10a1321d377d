"""`bars.raw` → `bars.clean` + `bars.dlq`: the pure corrections rules, per `take()` batch.

Every input gets exactly one outcome; rejected bars go to the dead-letter topic with their
original key and value bytes and Kafka Connect-style headers naming the reason and the source
topic, partition and offset, so nothing disappears without a record.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from streams.agents.checkpoint import Checkpointer, StateCache
from streams.agents.dlq import dead_letter
from streams.agents.io import (
    BAR_HEADERS,
    CONTROL_HEADERS,
    Out,
    is_control_event,
    publish,
    raw_topic,
)
from streams.agents.state import StateTable
from streams.corrections import (
    CorrectionConfig,
    CorrectionStats,
    Reason,
    Rule,
    Status,
    Step,
    SymbolState,
    correct,
    flush,
)
from streams.metrics import BAR_OUTCOMES, Stage
from streams.metrics import Outcome as BarOutcome
from streams.runtime.observers import notify
from streams.schema import RECEIVED_HEADER, Control, decode, is_control

if TYPE_CHECKING:
    from faust.types import EventT

    from streams.faust_app import BarcastApp
    from streams.metrics import Metrics

log = logging.getLogger("barcast.corrections")
SUMMARY_INTERVAL_S = 30.0


class CorrectionsBatch:
    """One take() batch: runs the rules on each event and collects the outputs."""

    def __init__(
        self,
        states: StateCache[SymbolState],
        config: CorrectionConfig,
        stats: CorrectionStats,
        settings: Any,
    ) -> None:
        self.states, self.config, self.stats = states, config, stats
        self.clean_topic, self.dlq_topic = settings.topic_clean, settings.topic_dlq
        self.now_ns = time.time_ns()
        # When the bars entered barcast: a header, so values stay comparable across restarts.
        self.headers = [*BAR_HEADERS, (RECEIVED_HEADER, str(self.now_ns).encode())]
        self.outputs: list[Out] = []
        self.clean: list[dict[str, Any]] = []  # the clean bars' values, for observers

    def add(self, event: EventT) -> None:
        if is_control_event(event):
            until = control_ts(event.value)
            if until is not None:
                self.control(event, until)
                return
        # A bar, or a record only claiming to be a control one: the rules reject it if malformed.
        self.bar(event)

    def bar(self, event: EventT) -> None:
        message = event.message
        key, partition, offset = event.key or b"", message.partition, message.offset
        applied, state = self.states.get(key, partition)
        if offset <= applied:  # applied before a crash: its outputs are already out
            return
        ref = [message.topic, partition, offset]
        step = correct(
            event.value,
            state,
            self.config,
            self.stats,
            ref=ref,
            now_ns=self.now_ns,
            key_bytes=len(key),
        )
        self.states.set(key, partition, offset, state)
        self._emit(key, step, partition)

    def control(self, event: EventT, until: int) -> None:
        """END_OF_INTERVAL: decide held spike candidates of this partition that timed out,
        then pass the record on so the forecast worker can flush the minute."""
        message = event.message
        partition = message.partition
        for key in self.states.keys_in(partition):
            applied, state = self.states.get(key, partition)
            if state.held is not None:
                step = flush(state, self.config, self.stats, until_ts=until)
                if step.outcomes:
                    self.states.set(key, partition, applied, state)
                    self._emit(key, step, partition)
        self.outputs.append(
            Out(
                self.clean_topic,
                event.key,
                event.value,
                message.timestamp * 1000.0,
                CONTROL_HEADERS,
                partition,
            )
        )

    def _emit(self, key: bytes, step: Step, partition: int) -> None:
        """The step's outputs. (Its counts are in `stats`: `MetricsFeed` reports them.)"""
        outputs = self.outputs
        for outcome in step.outcomes:
            if outcome.status is Status.REJECTED:
                outputs.append(self._dead_letter(key, outcome, partition))
        self.clean += step.clean
        for bar in step.clean:
            outputs.append(
                Out(
                    self.clean_topic,
                    key,
                    orjson.dumps(bar),
                    bar["ts_event"] / 1e6,
                    self.headers,
                    partition,
                )
            )

    def _dead_letter(self, key: bytes, outcome: Any, partition: int) -> Out:
        value = outcome.value if isinstance(outcome.value, bytes) else orjson.dumps(outcome.value)
        source = tuple(outcome.ref)
        reason = outcome.reason.value
        return dead_letter(self.dlq_topic, key, value, source, reason, outcome.message, partition)


class MetricsFeed:
    """Adds to the metrics what `CorrectionStats` counted since the last `push()`.

    The rules count every outcome, gap and synthetic bar in the stats anyway; the agent pushes
    the difference once per batch instead of counting its outputs again per bar, and touches
    only the series that moved (a labelled Prometheus lookup costs more than a bar's rules)."""

    def __init__(self, stats: CorrectionStats, metrics: Metrics) -> None:
        self.stats, self.metrics = stats, metrics
        bars = metrics.bars
        self.series = {
            outcome: bars.labels(stage=Stage.CORRECTIONS.value, outcome=outcome.value)
            for outcome in BAR_OUTCOMES[Stage.CORRECTIONS]
        }
        self.pushed = self._counts()
        self.corrections: Counter[Rule] = Counter()
        self.rejections: Counter[Reason] = Counter()

    def _counts(self) -> tuple[int, ...]:
        stats = self.stats
        return (
            stats.clean,
            stats.corrected,
            stats.duplicate,
            stats.rejected,
            stats.synthetic,
            stats.gaps,
            stats.gap_bars,
        )

    def push(self) -> None:
        counts = self._counts()
        if counts == self.pushed:
            return
        clean, corrected, duplicate, rejected, synthetic, gaps, gap_bars = (
            now - before for now, before in zip(counts, self.pushed, strict=True)
        )
        self.pushed = counts
        series = self.series
        for outcome, n in (
            (BarOutcome.IN, clean + corrected + duplicate + rejected),
            (BarOutcome.CLEAN, clean),
            (BarOutcome.CORRECTED, corrected),
            (BarOutcome.DUPLICATE, duplicate),
            (BarOutcome.REJECTED, rejected),
            (BarOutcome.SYNTHETIC, synthetic),
        ):
            if n:
                series[outcome].inc(n)
        metrics = self.metrics
        if corrected:
            for rule, n in _moved(self.stats.corrections, self.corrections).items():
                metrics.corrections.labels(rule=rule.value).inc(n)
        if rejected:
            for reason, n in _moved(self.stats.rejections, self.rejections).items():
                metrics.rejections.labels(reason=reason.value).inc(n)
            metrics.dlq.inc(rejected)
        if gaps:
            metrics.gaps.inc(gaps)
            metrics.gap_minutes.inc(gap_bars)


def _moved(counts: Counter[Any], pushed: Counter[Any]) -> Counter[Any]:
    """What `counts` gained over `pushed`; `pushed` catches up."""
    moved = counts - pushed
    pushed.update(moved)
    return moved


def control_ts(value: bytes) -> int | None:
    """ts_event of an END_OF_INTERVAL record, or None if `value` is not a valid one."""
    try:
        record = decode(value)
    except orjson.JSONDecodeError:
        return None
    if not is_control(record) or record.get("control") != Control.END_OF_INTERVAL:
        return None
    until = record.get("ts_event")
    return until if type(until) is int else None


class CorrectionsStage:
    """The corrections stage of this worker: its topics, state, rules' config and counters;
    what feeds it raw records is the caller's (the `corrections` agent, or the one-agent
    pipeline)."""

    def __init__(self, app: BarcastApp) -> None:
        settings = app.barcast
        raw_topic(app, settings.topic_clean)
        raw_topic(app, settings.topic_dlq)
        self.settings = settings
        self.states = StateCache(
            StateTable(app, "corrections-state"),
            SymbolState.from_bytes,
            SymbolState.to_bytes,
            SymbolState,
        )
        self.config = CorrectionConfig(fill_gaps=settings.fill_gaps)
        self.stats = CorrectionStats()
        self.feed = MetricsFeed(self.stats, app.metrics)

        @app.timer(SUMMARY_INTERVAL_S)
        async def log_summary() -> None:
            if self.stats.total:
                log.info("corrections: %s", self.stats.summary())

    def batch(self) -> CorrectionsBatch:
        return CorrectionsBatch(self.states, self.config, self.stats, self.settings)


def register(app: BarcastApp) -> None:
    """The `corrections` agent: `bars.raw` into `bars.clean` and `bars.dlq`."""
    settings = app.barcast
    stage = CorrectionsStage(app)
    checkpointer = Checkpointer(app, settings.topic_raw, [stage.states])

    async def handle(events: Sequence[EventT]) -> None:
        batch = stage.batch()
        for event in events:
            batch.add(event)
        await publish(app, batch.outputs)
        if app.observers:
            notify(app.observers, "observe_bar", batch.clean)
        stage.feed.push()

    checkpointer.serve("corrections", handle)
