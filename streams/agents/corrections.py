"""`bars.raw` → `bars.clean` + `bars.dlq`: the pure corrections rules, per `take()` batch.

Every input gets exactly one outcome; rejected bars go to the dead-letter topic with their
original key and value bytes and Kafka Connect-style headers naming the reason and the source
topic, partition and offset, so nothing disappears without a record.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from streams.agents.io import (
    BAR_HEADERS,
    CONTROL_HEADERS,
    Out,
    batches,
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
from streams.schema import RECEIVED_HEADER, decode

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
    """One take() batch: loads each symbol's state once, runs the rules, collects outputs."""

    def __init__(
        self, states: StateTable, config: CorrectionConfig, stats: CorrectionStats, settings: Any
    ) -> None:
        self.states, self.config, self.stats = states, config, stats
        self.clean_topic, self.dlq_topic = settings.topic_clean, settings.topic_dlq
        self.loaded: dict[bytes, tuple[int, SymbolState]] = {}
        self.touched: dict[bytes, int] = {}  # key -> partition
        self.outputs: list[Out] = []
        self.steps: list[Step] = []

    def state(self, key: bytes) -> tuple[int, SymbolState]:
        """(offset of the last source event applied, state) for `key`."""
        if key not in self.loaded:
            offset, payload = self.states.get(key)
            state = SymbolState() if payload is None else SymbolState.from_bytes(payload)
            self.loaded[key] = (offset, state)
        return self.loaded[key]

    def bar(self, event: EventT, received: bytes) -> None:
        message = event.message
        key = event.key or b""
        applied, state = self.state(key)
        if message.offset <= applied:  # applied before a crash: its outputs are already out
            return
        ref = [message.topic, message.partition, message.offset]
        step = correct(event.value, state, self.config, self.stats, ref=ref, now_ns=time.time_ns())
        self.loaded[key] = (message.offset, state)
        self._emit(key, step, message.partition, received)

    def control(self, event: EventT) -> None:
        """END_OF_INTERVAL: decide held spike candidates of this partition that timed out,
        then pass the record on so the forecast worker can flush the minute."""
        message = event.message
        until = decode(event.value).get("ts_event")
        for key in self.states.keys_in(message.partition):
            _, state = self.state(key)
            if state.held is not None:
                step = flush(state, self.config, self.stats, until_ts=until)
                self._emit(key, step, message.partition, b"")
        self.outputs.append(
            Out(
                self.clean_topic,
                event.key,
                event.value,
                message.timestamp * 1000.0,
                CONTROL_HEADERS,
                message.partition,
            )
        )

    def _emit(self, key: bytes, step: Step, partition: int, received: bytes) -> None:
        self.steps.append(step)
        self.touched[key] = partition
        headers = [*BAR_HEADERS, (RECEIVED_HEADER, received)]
        for outcome in step.outcomes:
            if outcome.status is Status.REJECTED:
                self.outputs.append(self._dead_letter(key, outcome, partition))
        for bar in step.clean:
            self.outputs.append(
                Out(
                    self.clean_topic,
                    key,
                    orjson.dumps(bar),
                    bar["ts_event"] / 1e6,
                    headers,
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

    def store(self) -> None:
        for key, partition in self.touched.items():
            offset, state = self.loaded[key]
            self.states.put(key, partition, offset, state.to_bytes())

    def record(self, metrics: Metrics) -> None:
        for step in self.steps:
            for outcome in step.outcomes:
                metrics.bar(Stage.CORRECTIONS, BarOutcome.IN)
                metrics.bar(Stage.CORRECTIONS, BarOutcome(outcome.status.value))
                if outcome.status is Status.CORRECTED:
                    for rule in {change.rule for change in outcome.changes}:
                        metrics.corrections.labels(rule=rule.value).inc()
                elif outcome.status is Status.REJECTED:
                    metrics.rejections.labels(reason=outcome.reason.value).inc()
                    metrics.dlq.inc()
            for gap in step.gaps:
                metrics.gaps.inc()
                metrics.gap_minutes.inc(gap.missing)
            synthetic = sum(1 for bar in step.clean if bar.get("status") == "synthetic")
            if synthetic:
                metrics.bar(Stage.CORRECTIONS, BarOutcome.SYNTHETIC, synthetic)


def register(app: BarcastApp) -> None:
    settings = app.barcast
    source = raw_topic(app, settings.topic_raw)
    raw_topic(app, settings.topic_clean)
    raw_topic(app, settings.topic_dlq)
    states = StateTable(app, "corrections-state")
    config = CorrectionConfig(fill_gaps=settings.fill_gaps)
    stats = CorrectionStats()

    @app.agent(source, name="corrections")
    async def correct_bars(stream):  # type: ignore[no-untyped-def]
        async for events in batches(stream):
            received = str(time.time_ns()).encode()
            batch = CorrectionsBatch(states, config, stats, settings)
            for event in events:
                if is_control_event(event):
                    batch.control(event)
                else:
                    batch.bar(event, received)
            await publish(app, batch.outputs)
            batch.store()
            batch.record(app.metrics)

    @app.timer(SUMMARY_INTERVAL_S)
    async def log_summary() -> None:
        if stats.total:
            log.info("corrections: %s", stats.summary())
