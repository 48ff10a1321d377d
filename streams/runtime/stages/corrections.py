"""Raw records -> clean bars and dead letters: the pure corrections rules, per batch.

Every input gets exactly one outcome; rejected bars go to the dead-letter topic with their
original key and value bytes and Kafka Connect-style headers naming the reason and the source
topic, partition and offset, so nothing disappears without a record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from streams.corrections import (
    CorrectionConfig,
    CorrectionStats,
    Status,
    Step,
    SymbolState,
    correct,
    flush,
)
from streams.metrics import BAR_OUTCOMES, Metrics, Stage
from streams.metrics import Outcome as BarOutcome
from streams.runtime.policy import dead_letter
from streams.runtime.records import CleanBar, Control, Out, Record
from streams.runtime.stores import StateStore
from streams.schema import CleanBarValue, bar_headers, decode_control, is_control_headers


@dataclass(slots=True)
class Cleaned:
    """A batch's outputs in order, and what the next stage reads of them, in order."""

    outputs: list[Out] = field(default_factory=list)
    items: list[CleanBar | Control] = field(default_factory=list)

    def clean_values(self) -> list[CleanBarValue]:
        return [item.value for item in self.items if isinstance(item, CleanBar)]


def control_of(record: Record) -> Control | None:
    """The record as an END_OF_INTERVAL, or None if it is not a valid one."""
    if not is_control_headers(record.headers):
        return None
    try:
        ts_event = decode_control(record.value)["ts_event"]
    except ValueError:
        return None
    p, o, ms = record.partition, record.offset, record.timestamp_ms
    return Control(p, o, record.key, record.value, ms, ts_event)


class Corrections:
    def __init__(
        self, store: StateStore[SymbolState], config: CorrectionConfig, topics: tuple[str, str, str]
    ) -> None:
        """`topics`: raw, clean and dead-letter topic names."""
        self.store, self.config = store, config
        self.raw_topic, self.clean_topic, self.dlq_topic = topics
        self.stats = CorrectionStats()

    def run(self, records: Sequence[Record], now_ns: int) -> Cleaned:
        """`now_ns`: when the batch's bars entered barcast (a header, so values stay
        comparable across restarts)."""
        out = Cleaned()
        headers = bar_headers(now_ns)
        for record in records:
            control = control_of(record)
            if control is None:  # a bar, or a record only claiming to be a control one
                self._bar(record, headers, now_ns, out)
            else:
                self._control(control, headers, now_ns, out)
        return out

    def _bar(self, record: Record, headers: Any, now_ns: int, out: Cleaned) -> None:
        key, partition = record.key or b"", record.partition
        state = self.store.read(key, partition)
        ref = [record.topic, partition, record.offset]
        step = correct(
            record.value, state, self.config, self.stats, ref=ref, now_ns=now_ns, key_bytes=len(key)
        )
        self.store.write(key, partition, record.offset, state)
        self._emit(key, step, (record.topic, partition, record.offset), headers, now_ns, out)

    def _control(self, control: Control, headers: Any, now_ns: int, out: Cleaned) -> None:
        """Decide the partition's held spike candidates that timed out, then pass the record
        on so the forecast stage can flush the minute."""
        partition = control.partition
        for key in self.store.keys_in(partition):
            state = self.store.read(key, partition)
            if state.held is not None:
                step = flush(state, self.config, self.stats, until_ts=control.ts_event)
                if step.outcomes:
                    self.store.write(key, partition, control.offset, state)
                    source = (self.raw_topic, partition, control.offset)
                    self._emit(key, step, source, headers, now_ns, out)
        out.outputs.append(control.forward(self.clean_topic))
        out.items.append(control)

    def _emit(
        self,
        key: bytes,
        step: Step,
        source: tuple[str, int, int],
        headers: Any,
        now_ns: int,
        out: Cleaned,
    ) -> None:
        """The step's outputs. (Its counts are in `stats`: `MetricsFeed` reports them.)"""
        topic, partition, offset = source
        for outcome in step.outcomes:
            if outcome.status is Status.REJECTED:
                value = outcome.value
                value = value if isinstance(value, bytes) else orjson.dumps(value)
                reason, why = outcome.reason.value, outcome.message
                letter = dead_letter(
                    self.dlq_topic, key, value, tuple(outcome.ref), reason, why, partition
                )
                out.outputs.append(letter)
        for bar in step.clean:
            ms = bar["ts_event"] / 1e6
            out.outputs.append(
                Out(self.clean_topic, key, orjson.dumps(bar), ms, headers, partition)
            )
            out.items.append(CleanBar(topic, key, partition, offset, ms, bar, now_ns))  # type: ignore[arg-type]


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
        self.pushed: Counter[Any] = Counter()

    def _counts(self) -> Counter[Any]:
        s = self.stats
        counts = Counter({f"rule:{rule.value}": n for rule, n in s.corrections.items()})
        counts.update({f"reason:{reason.value}": n for reason, n in s.rejections.items()})
        counts.update(
            {
                BarOutcome.IN: s.clean + s.corrected + s.duplicate + s.rejected,
                BarOutcome.CLEAN: s.clean,
                BarOutcome.CORRECTED: s.corrected,
                BarOutcome.DUPLICATE: s.duplicate,
                BarOutcome.REJECTED: s.rejected,
                BarOutcome.SYNTHETIC: s.synthetic,
                "gaps": s.gaps,
                "gap_minutes": s.gap_bars,
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
            elif name in ("gaps", "gap_minutes"):
                getattr(metrics, name).inc(n)
            else:
                kind, label = name.split(":", 1)
                family = metrics.corrections if kind == "rule" else metrics.rejections
                family.labels(**{kind: label}).inc(n)
        if moved[BarOutcome.REJECTED]:
            metrics.dlq.inc(moved[BarOutcome.REJECTED])
