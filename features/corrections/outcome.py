"""What a corrections step returns: one outcome per input bar, the codes, and the counters."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

SYNTHETIC = "synthetic"
"""`status` of a gap-fill bar on `bars.clean`. Never an outcome: gap fills answer no input."""


class Status(StrEnum):
    """The one outcome every input message gets."""

    CLEAN = "clean"
    CORRECTED = "corrected"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"


class Rule(StrEnum):
    """A repair that changed a field of an accepted bar (the `rule` of a correction)."""

    UNDEFINED_PRICE = "undefined_price"
    SCALE_ERROR = "scale_error"
    ENVELOPE = "envelope"


class Reason(StrEnum):
    """Why a bar was rejected: the reason code of its `bars.dlq` record."""

    MALFORMED = "malformed"
    OVERSIZED = "oversized"
    LATE = "late"
    CONFLICTING_DUPLICATE = "conflicting_duplicate"
    UNDEFINED_PRICE = "undefined_price"
    NONPOSITIVE_PRICE = "nonpositive_price"
    SCALE_ERROR = "scale_error"
    SPIKE = "spike"


class Change(NamedTuple):
    """One changed field: `old` is None where the input held null or NaN."""

    rule: Rule
    field: str
    old: int | None
    new: int

    def as_list(self) -> list[Any]:
        """The `[rule, field, old, new]` form written to `bars.clean`."""
        return [self.rule.value, self.field, self.old, self.new]


@dataclass(slots=True)
class Outcome:
    """The fate of one input message.

    `value` is the input exactly as received (the dead-letter record carries it unchanged),
    `bar` the `bars.clean` value for clean and corrected bars, `ref` whatever the caller passed
    with the input (e.g. topic, partition and offset for the dead-letter headers).
    """

    status: Status
    value: Any
    bar: dict[str, Any] | None = None
    changes: tuple[Change, ...] = ()
    reason: Reason | None = None
    message: str = ""
    ref: Any = None


@dataclass(slots=True)
class Gap:
    """Missing 1-minute bars between two accepted bars of a symbol."""

    symbol: str
    after_ts: int
    missing: int
    filled: bool


@dataclass(slots=True)
class Step:
    """What one call released: outcomes (this input's and/or a held one's), in decision order;
    `clean` = the `bars.clean` values in ts_event order (accepted bars and synthetic gap fills);
    `gaps` = the gaps those accepted bars closed."""

    outcomes: list[Outcome] = field(default_factory=list)
    clean: list[dict[str, Any]] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    roll: Roll | None = None  # the symbol's contract changed before clean[roll.at]


@dataclass(frozen=True, slots=True)
class Roll:
    """The contract behind `symbol` changed at `ts` (the new contract's first bar): `old` and
    `new` raw symbols, and `ratio`, new's price over old's, by which the state's price levels
    were rescaled; the bars from `Step.clean[at]` on are the new contract's."""

    symbol: str
    ts: int
    old: str
    new: str
    ratio: float
    at: int


@dataclass(slots=True)
class CorrectionStats:
    """Counters of one corrections process (metrics; not part of the per-symbol state).

    One counter per outcome status; `corrections` counts corrected bars per rule, `rejections`
    rejected bars per reason; `held` counts bars held back for spike confirmation,
    `confirmed` spike candidates the market confirmed (accepted), `synthetic` gap-fill bars,
    `expired` symbols whose states the worker dropped (streams.runtime.stages.corrections).
    """

    clean: int = 0
    corrected: int = 0
    duplicate: int = 0
    rejected: int = 0
    corrections: Counter[Rule] = field(default_factory=Counter)
    rejections: Counter[Reason] = field(default_factory=Counter)
    gaps: int = 0
    gap_bars: int = 0
    synthetic: int = 0
    held: int = 0
    confirmed: int = 0
    rolls: int = 0
    expired: int = 0

    @property
    def total(self) -> int:
        return self.clean + self.corrected + self.duplicate + self.rejected

    def record(self, outcome: Outcome) -> None:
        status = outcome.status
        if status is Status.CLEAN:
            self.clean += 1
        elif status is Status.CORRECTED:
            self.corrected += 1
            self.corrections.update({change.rule for change in outcome.changes})
        elif status is Status.DUPLICATE:
            self.duplicate += 1
        else:
            self.rejected += 1
            self.rejections[outcome.reason] += 1  # type: ignore[index]  # set on rejections

    def record_gap(self, gap: Gap) -> None:
        self.gaps += 1
        self.gap_bars += gap.missing
        if gap.filled:
            self.synthetic += gap.missing

    def as_dict(self) -> dict[str, int]:
        """Flat metric names: `clean`, `corrected.envelope`, `rejected.spike`, `gaps`, ..."""
        flat = {status.value: getattr(self, status.value) for status in Status}
        flat.update({f"corrected.{rule.value}": self.corrections[rule] for rule in Rule})
        flat.update({f"rejected.{reason.value}": self.rejections[reason] for reason in Reason})
        flat.update(
            gaps=self.gaps,
            gap_bars=self.gap_bars,
            synthetic=self.synthetic,
            held=self.held,
            confirmed=self.confirmed,
            rolls=self.rolls,
            expired=self.expired,
        )
        return flat

    def summary(self) -> str:
        """One line for logs and `barcast replay --follow`."""

        def detail(counts: Counter[Any]) -> str:
            parts = [f"{key.value}={n}" for key, n in sorted(counts.items()) if n]
            return f" ({' '.join(parts)})" if parts else ""

        return (
            f"bars={self.total} clean={self.clean} "
            f"corrected={self.corrected}{detail(self.corrections)} "
            f"duplicate={self.duplicate} rejected={self.rejected}{detail(self.rejections)} "
            f"gaps={self.gaps} ({self.gap_bars} bars, {self.synthetic} filled) "
            f"spike_held={self.held} spike_confirmed={self.confirmed} rolls={self.rolls}"
        )
