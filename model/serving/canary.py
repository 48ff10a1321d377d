"""A shadow checkpoint (canary): a new checkpoint forecasts beside the one serving, and serves
only once it has proven itself on live data.

Each forecast of the canary is calibrated online like the serving model's (its own
`SymbolCalibration` per symbol, from its first forecast), waits with the serving model's in the
symbol's shadow state (model.serving.shadow) and is scored on the same bars. Per source
partition (`PartitionCanary`) the verdict comes once `needed` of its forecasts are scored over
the partition's symbols: promoted if its pinball is not worse than the incumbent's (the skill
interval of its losses over the incumbent's, model.serving.skill, does not lie wholly below
zero) and its interval's coverage is inside the coverage alert's band; refused otherwise, with
the reason. A partition's records come in one order, and the verdict is taken at the first row
of an event minute with every row before it scored: so it is a function of the data alone, and a
worker killed in the middle of a canary reaches it at the same row. Each partition decides for
its own symbols (a worker's partitions usually agree; `barcast promote` forces the promotion).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np
import orjson

from model.serving.conformal import SymbolCalibration
from model.serving.skill import TIE, Skill, skill_interval

CANARY = "canary"  # its track's name in a symbol's shadow state, and on `forecasts.shadow`
COVERAGE_BAND = (0.7, 0.9)  # the coverage alert's (deploy/prometheus/alerts.yml)


class Verdict(StrEnum):
    PROMOTED = "promoted"
    REFUSED = "refused"
    FORCED = "forced"  # promoted by `barcast promote`
    REPLACED = "replaced"  # served until `barcast promote` put another in its place


class Reason(StrEnum):
    """Why a canary was refused (docs/operations.md, Rolling out a new checkpoint)."""

    PINBALL = "pinball"  # its pinball is worse than the incumbent's
    COVERAGE = "coverage"  # its 80 % interval covers outside the alert band
    MISSING = "missing"  # its checkpoint left the model directory before the verdict


@dataclass
class CanaryTrack:
    """One symbol's forecasts of the canary `model_id`: their calibration, and per scored
    forecast (ts, its mean pinball, the serving model's, labels inside q10..q90, labels)."""

    model_id: str
    since: int  # ts of its first forecast of the symbol
    calibration: SymbolCalibration = field(default_factory=SymbolCalibration)
    scored: list[tuple[int, float, float, int, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "since": self.since,
            "calibration": self.calibration.__dict__,
            "scored": self.scored,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> CanaryTrack:
        calibration = SymbolCalibration.from_bytes(orjson.dumps(values["calibration"]))
        scored = [tuple(row) for row in values["scored"]]
        return cls(values["model_id"], values["since"], calibration, scored)  # type: ignore[arg-type]

    def promoted(self) -> SymbolCalibration:
        """The calibration the model's calibration store takes on when the canary serves."""
        c = self.calibration
        return SymbolCalibration(self.model_id, self.since, c.log_scale, c.n, c.waiting)


@dataclass
class PartitionCanary:
    """A source partition's checkpoints: the one serving its symbols (None: the worker's
    default), the canary beside it, the event minute of its last row, and each decided canary's
    verdict (a refused one is not tried again)."""

    serving: str | None = None
    candidate: str | None = None
    minute: int = -1
    verdicts: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.__dict__)

    @classmethod
    def from_bytes(cls, data: bytes) -> PartitionCanary:
        return cls(**orjson.loads(data))


class Decision(NamedTuple):
    verdict: Verdict
    reason: Reason | None
    skill: Skill  # the canary's over the incumbent
    coverage: float
    forecasts: int

    def describe(self) -> str:
        s = self.skill
        return (
            f"{self.forecasts} forecasts scored, skill over the incumbent {s.skill:+.2%} "
            f"[{s.lower:+.2%}, {s.upper:+.2%}], coverage {self.coverage:.1%}"
        )


def scored_count(tracks: list[CanaryTrack]) -> int:
    return sum(len(t.scored) for t in tracks)


def decide(tracks: list[CanaryTrack], needed: int) -> Decision | None:
    """The verdict on a canary from its tracks (a partition's symbols', in key order), once
    `needed` forecasts are scored; its pinball against the incumbent's on the same forecasts,
    all symbols' in time order."""
    rows = sorted((row, i) for i, track in enumerate(tracks) for row in track.scored)
    if len(rows) < max(needed, 1):
        return None
    table = np.array([row for row, _ in rows], dtype=float)
    skill = skill_interval(table[:, 1], table[:, 2])
    if skill is None:  # too few for an interval, or losses of 0 (a flat market)
        skill = Skill(0.0, 0.0, 0.0, len(rows))
    coverage = float(table[:, 3].sum() / max(table[:, 4].sum(), 1.0))
    if skill.upper < -TIE:
        return Decision(Verdict.REFUSED, Reason.PINBALL, skill, coverage, len(rows))
    low, high = COVERAGE_BAND
    if not low <= coverage <= high:
        return Decision(Verdict.REFUSED, Reason.COVERAGE, skill, coverage, len(rows))
    return Decision(Verdict.PROMOTED, None, skill, coverage, len(rows))
