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

from streams.agents.checkpoint import INTERVAL_S, Checkpointer, StateCache
from streams.agents.io import (
    BAR_HEADERS,
    CONTROL_HEADERS,
    Out,
    each_batch,
    is_control_event,
    publish,
    raw_topic,
)
from streams.agents.state import StateTable
from streams.corrections import (
    CorrectionConfig,
    CorrectionStats,
    Status,
    Step,
    SymbolState,
    correct,
    flush,
)
from streams.metrics import Outcome as BarOutcome
from streams.metrics import Stage
from streams.schema import RECEIVED_HEADER, Control, decode, is_control

if TYPE_CHECKING:
    from faust.types import EventT

    from streams.faust_app import BarcastApp
    from streams.metrics import Metrics

log = logging.getLogger("barcast.corrections")
SUMMARY_INTERVAL_S = 30.0

# Kafka Connect's dead-letter header names, so existing DLQ tooling reads ours.
DLQ_TOPIC = "__connect.errors.topic"
DLQ_PARTITION = "__connect.errors.partition"
DLQ_OFFSET = "__connect.errors.offset"
DLQ_REASON = "__connect.errors.exception.class.name"
DLQ_MESSAGE = "__connect.errors.exception.message"


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
        # Metrics of the batch, counted as outputs are made and recorded once per series.
        self.statuses: Counter[Status] = Counter()
        self.rules: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.released = self.gaps = self.gap_minutes = 0

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
        step = correct(event.value, state, self.config, self.stats, ref=ref, now_ns=self.now_ns)
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
        for outcome in step.outcomes:
            status = outcome.status
            self.statuses[status] += 1
            if status is Status.REJECTED:
                self.reasons[outcome.reason.value] += 1  # type: ignore[union-attr]
                self.outputs.append(self._dead_letter(key, outcome, partition))
            elif status is Status.CORRECTED:
                self.rules.update({change.rule.value for change in outcome.changes})
        self.released += len(step.clean)
        if step.gaps:
            self.gaps += len(step.gaps)
            self.gap_minutes += sum(gap.missing for gap in step.gaps)
        for bar in step.clean:
            self.outputs.append(
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
        topic, source_partition, offset = outcome.ref
        value = outcome.value if isinstance(outcome.value, bytes) else orjson.dumps(outcome.value)
        headers = [
            (DLQ_TOPIC, str(topic).encode()),
            (DLQ_PARTITION, str(source_partition).encode()),
            (DLQ_OFFSET, str(offset).encode()),
            (DLQ_REASON, outcome.reason.value.encode()),
            (DLQ_MESSAGE, outcome.message.encode()),
        ]
        return Out(self.dlq_topic, key, value, None, headers, partition)

    def record(self, metrics: Metrics) -> None:
        """Add the batch's outcomes to the metrics, one increment per series."""
        statuses = self.statuses
        accepted = statuses[Status.CLEAN] + statuses[Status.CORRECTED]
        counts = {BarOutcome(status.value): n for status, n in statuses.items()}
        counts[BarOutcome.IN] = statuses.total()
        counts[BarOutcome.SYNTHETIC] = self.released - accepted  # each accepted bar is one
        for outcome, n in counts.items():
            if n:
                metrics.bar(Stage.CORRECTIONS, outcome, n)
        for rule, n in self.rules.items():
            metrics.corrections.labels(rule=rule).inc(n)
        for reason, n in self.reasons.items():
            metrics.rejections.labels(reason=reason).inc(n)
        if self.reasons:
            metrics.dlq.inc(self.reasons.total())
        if self.gaps:
            metrics.gaps.inc(self.gaps)
            metrics.gap_minutes.inc(self.gap_minutes)


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


def register(app: BarcastApp) -> None:
    settings = app.barcast
    source = raw_topic(app, settings.topic_raw)
    raw_topic(app, settings.topic_clean)
    raw_topic(app, settings.topic_dlq)
    states = StateCache(
        StateTable(app, "corrections-state"),
        SymbolState.from_bytes,
        SymbolState.to_bytes,
        SymbolState,
    )
    checkpointer = Checkpointer(app, settings.topic_raw, states)
    config = CorrectionConfig(fill_gaps=settings.fill_gaps)
    stats = CorrectionStats()

    async def handle(events: Sequence[EventT]) -> None:
        batch = CorrectionsBatch(states, config, stats, settings)
        for event in events:
            batch.add(event)
        await publish(app, batch.outputs)
        batch.record(app.metrics)

    @app.agent(source, name="corrections")
    async def correct_bars(stream):  # type: ignore[no-untyped-def]
        await each_batch(stream, lambda events: checkpointer.run(events, handle))

    @app.timer(INTERVAL_S)
    async def corrections_checkpoint() -> None:
        await checkpointer.tick()

    @app.timer(SUMMARY_INTERVAL_S)
    async def log_summary() -> None:
        if stats.total:
            log.info("corrections: %s", stats.summary())
