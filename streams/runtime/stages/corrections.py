"""Raw records -> clean bars and dead letters: the pure corrections rules, per batch. Every
input gets exactly one outcome; a rejected bar goes to the dead-letter topic with its original
bytes and headers naming the reason and its source record (streams.runtime.policy).

A symbol expires at the first END_OF_INTERVAL of its partition once the partition's newest bar
is more than BARCAST_EXPIRE_DAYS after the symbol's last: its state is dropped, and an EXPIRED
record, in its place among the bars, tells the next stages to drop theirs. The stage decides it
alone, so every stage's states of a symbol end at the same record, whichever worker runs them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from features import corrections as rules
from streams.runtime.policy import dead_letter
from streams.runtime.records import (
    CleanBar,
    Control,
    Out,
    Record,
    control_of,
    misrouted,
    stage_control,
)
from streams.runtime.stores import StateStore
from streams.schema import ControlKind, Headers, bar_headers, expired, roll

log = logging.getLogger("barcast.corrections")
Topics = tuple[str, str, str]  # raw, clean and dead-letter topic names


@dataclass(slots=True)
class Cleaned:
    """A batch's outputs, and what the next stage reads of them, in order; `now_ns`: when its
    bars entered barcast (a header, so values stay comparable across restarts)."""

    now_ns: int
    headers: Headers
    outputs: list[Out] = field(default_factory=list)
    items: list[CleanBar | Control] = field(default_factory=list)


class Corrections:
    def __init__(
        self,
        store: StateStore[rules.SymbolState],
        config: rules.CorrectionConfig,
        topics: Topics,
        expire_ns: int = 0,  # a symbol's states live this long past its last bar; 0: forever
    ) -> None:
        self.store, self.config, self.expire_ns = store, config, expire_ns
        self.raw_topic, self.clean_topic, self.dlq_topic = topics
        self.stats = rules.CorrectionStats()  # streams.metrics.MetricsFeed reports its counts

    def run(self, records: Sequence[Record], now_ns: int) -> Cleaned:
        out = Cleaned(now_ns, bar_headers(now_ns))
        for record in records:
            control = control_of(record)
            # A bar, or a record only claiming to be a control one: an EXPIRED is this stage's,
            # and a ROLL not keyed by its symbol would roll another symbol's state
            if control is None or control.kind == ControlKind.EXPIRED or misrouted(control):
                self._bar(record, out)
            else:
                self._control(control, out)
        return out

    def _bar(self, record: Record, out: Cleaned) -> None:
        key, source = record.key or b"", (record.topic, record.partition, record.offset)
        state = self.store.read(key)
        step = rules.correct(
            record.value,
            state,
            self.config,
            self.stats,
            ref=list(source),
            now_ns=out.now_ns,
            key=key,
            expired_ts=self.store.gone.get(key),
        )
        # No bar of the key yet: nothing to keep (nor to write over a note), unless a state of
        # no bar an older barcast stored was changed in this batch (an OUTAGE marked it).
        if state.last_ts < 0 and key not in self.store.changed:
            self.store.states.pop(key, None)
        else:
            self.store.write(key, record.partition, record.offset, state)
        self._emit(key, step, source, out)

    def _control(self, control: Control, out: Cleaned) -> None:
        """Decide the partition's held spike candidates that timed out (an OUTAGE also marks
        every symbol's state: no gap fill across it), then pass the record on so the forecast
        stage can flush the minute. A ROLL is taken by its symbol's state and not passed on:
        the bar that rolls it sends the roll on (`_emit`)."""
        partition, offset, kind = control.partition, control.offset, control.kind
        if kind == ControlKind.ROLL:
            self._announced(control)
            return
        expiring = kind == ControlKind.END_OF_INTERVAL and self.expire_ns
        last: dict[bytes, int] = {}  # each key's last bar once decided: what expires
        for key in self.store.keys_in(partition):
            state = self.store.read(key)
            step, changed = rules.take_control(state, control.decoded, self.config, self.stats)
            if step.outcomes:
                self._emit(key, step, (self.raw_topic, partition, offset), out)
            if changed:
                self.store.write(key, partition, offset, state)
            if expiring:
                last[key] = state.last_ts
        if expiring:
            self._expire(control, last, out)
        out.outputs.append(control.forward(self.clean_topic))
        out.items.append(control)

    def _expire(self, control: Control, last: dict[bytes, int], out: Cleaned) -> None:
        """Drop the states of the partition's symbols (`last`: their last bars) whose last bar
        is more than `expire_ns` before its newest, at `control` (an END_OF_INTERVAL; the bars
        tell the time, as a replay's last END_OF_INTERVAL is the wall clock's); an EXPIRED
        record on for each that sent bars."""
        partition, offset = control.partition, control.offset
        newest = max(last.values(), default=-1)
        for key, ts in last.items():
            if ts >= newest - self.expire_ns:
                continue
            self.store.evict(key, partition, offset, ts if ts >= 0 else None)
            if ts >= 0:  # else a state of no bar (older barcasts stored them): nothing went on
                log.info("corrections: %s expired, its last bar at %d", key.decode(), ts)
                self.stats.expired += 1
                record = expired(newest, key.decode(), ts)
                item = stage_control(self.raw_topic, partition, offset, key, record)
                out.outputs.append(item.forward(self.clean_topic))
                out.items.append(item)

    def _announced(self, control: Control) -> None:
        roll_value = control.decoded
        key = roll_value["symbol"].encode()
        state = self.store.read(key)
        if state.last is not None:  # else no bar of the symbol yet: its first one starts it
            rules.expect_roll(state, roll_value["raw_symbols"][1], roll_value["ratio"])
            self.store.write(key, control.partition, control.offset, state)

    def _emit(
        self, key: bytes, step: rules.Step, source: tuple[str, int, int], out: Cleaned
    ) -> None:
        topic, partition, offset = source
        for outcome in step.outcomes:
            if outcome.status is rules.Status.REJECTED:
                value = outcome.value
                if not (value is None or isinstance(value, bytes)):  # None: a tombstone's
                    value = orjson.dumps(value)
                ref, reason, why = tuple(outcome.ref), outcome.reason.value, outcome.message
                out.outputs.append(
                    dead_letter(self.dlq_topic, key, value, ref, reason, why, partition)
                )
        rolled = step.roll
        for i, bar in enumerate(step.clean):
            if rolled is not None and i == rolled.at:
                self._roll(key, rolled, source, out)
            ms = bar["ts_event"] / 1e6
            value = orjson.dumps(bar)
            out.outputs.append(Out(self.clean_topic, key, value, ms, out.headers, partition))
            out.items.append(CleanBar(topic, key, partition, offset, ms, bar, out.now_ns))  # type: ignore[arg-type]
        if rolled is not None and rolled.at == len(step.clean):  # its bar held as a candidate
            self._roll(key, rolled, source, out)

    def _roll(
        self, key: bytes, rolled: rules.Roll, source: tuple[str, int, int], out: Cleaned
    ) -> None:
        """The roll `key`'s state took, on to the next stage, before the new contract's bars."""
        topic, partition, offset = source
        value = roll(rolled.ts, key.decode(), rolled.old, rolled.new, rolled.ratio)
        log.info(
            "corrections: %s rolled from %s to %s at ratio %.6f",
            key.decode(),
            rolled.old,
            rolled.new,
            rolled.ratio,
        )
        item = stage_control(topic, partition, offset, key, value)
        out.outputs.append(item.forward(self.clean_topic))
        out.items.append(item)
