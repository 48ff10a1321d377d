"""Which checkpoint serves each source partition's symbols, and the canary beside it
(model.serving.canary): the forecast stage asks `route` for a request's engines, and `before`
each row, so that a canary starts, and is decided, at a row.

With BARCAST_CANARY on, a new valid checkpoint (`propose`) does not serve at once: from each
partition's next row it forecasts beside the serving one (its forecasts to `forecasts.shadow`,
scored), and at the first row of each event minute, once every row before is scored (`sync`:
the forecast stage's flush and settle, where the partition's rows still wait), the partition's
verdict is looked for. Each partition's state (`PartitionCanary`, in the canary store) says
what serves it, so a restarted worker serves and decides as one never stopped, loading the
checkpoints it names from the model directory. `barcast promote` (`force`) promotes a canary
without a verdict, at each partition's next row. Without a canary store (BARCAST_CANARY off)
every partition is served the worker's one checkpoint, swapped in as it lands.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from model.covariates import NS_PER_MIN
from model.serving.canary import (
    CanaryTrack,
    Decision,
    PartitionCanary,
    Reason,
    Verdict,
    decide,
    scored_count,
)
from model.serving.conformal import SymbolCalibration
from streams.runtime.records import FeatureRow
from streams.runtime.stores import ShadowStore, StateStore

if TYPE_CHECKING:
    from model.serving.forecast_engine import ForecastEngine
    from streams.metrics import Metrics

log = logging.getLogger("barcast.forecast")
Load = Callable[[str], Awaitable["ForecastEngine | None"]]  # a checkpoint by model id


def partition_key(partition: int) -> bytes:
    return b"partition:%d" % partition


class Serving:
    def __init__(
        self,
        engine: ForecastEngine | None,
        metrics: Metrics,
        needed: int,
        store: StateStore[PartitionCanary] | None = None,
        shadows: ShadowStore | None = None,
        calibrations: StateStore[SymbolCalibration] | None = None,
    ) -> None:
        self.default = engine  # what serves a partition with no state of its own
        self.engines: dict[str, ForecastEngine] = {engine.model_id: engine} if engine else {}
        self.candidate: ForecastEngine | None = None  # the canary
        self.restored = False  # the canary is one a restored state named, not one proposed
        self.forced: set[str] = set()  # model ids `barcast promote` named
        self.held: set[int] = set()  # partitions this worker has held since it started
        self.metrics, self.needed = metrics, needed
        self.store, self.shadows, self.calibrations = store, shadows, calibrations
        self.load: Load | None = None  # set with the model directory's watcher

    @property
    def canaries(self) -> bool:
        return self.store is not None

    def route(self, partition: int) -> tuple[ForecastEngine | None, ForecastEngine | None]:
        """The engine serving `partition`'s symbols, and the canary beside it (or None)."""
        state = self.store.states.get(partition_key(partition)) if self.store else None
        if state is None:
            return self.default, None
        serving = self.engines.get(state.serving or "", self.default)
        canary = self.candidate
        if canary is None or state.candidate != canary.model_id:
            canary = None
        return serving, canary

    def swap(self, engine: ForecastEngine) -> None:
        """Without canaries: `engine` serves every partition from now on."""
        self.default = engine

    def propose(self, engine: ForecastEngine) -> None:
        """A new valid checkpoint: the canary from each partition's next row."""
        self.engines[engine.model_id] = engine
        self.candidate, self.restored = engine, False
        self.metrics.set_canary(engine.model_id)
        log.info(
            "canary %s runs beside %s: its forecasts go to forecasts.shadow, and each partition "
            "promotes it once %d of them are scored and it forecasts no worse",
            engine.model_id, self.default.model_id if self.default else None, self.needed,
        )  # fmt: skip

    async def force(self, model_id: str) -> None:
        """`barcast promote`: serve `model_id` from each partition's next row (loaded again
        if it was let go, as a refused canary is)."""
        if model_id in self.forced:
            return
        self.forced.add(model_id)
        if model_id not in self.engines and self.load is not None:
            engine = await self.load(model_id)
            if engine is None:  # a later promote of it tries again
                log.error("barcast promote: checkpoint %s is not in the model directory", model_id)
                self.forced.discard(model_id)
                return
            self.engines[model_id] = engine
        log.info("barcast promote: %s serves from each partition's next row", model_id)

    async def before(self, row: FeatureRow, sync: Callable[[], Awaitable[None]]) -> None:
        """At a row of a partition: its state loaded; a verdict due before it (`sync` first);
        the canary starting with it."""
        if self.store is None or self.default is None:
            return
        key, partition = partition_key(row.partition), row.partition
        # The partition's first row since its state was restored (a start, a rebalance: the
        # store forgot it): the checkpoints its state names are loaded
        restored = key not in self.store.states
        state = self.store.read(key)
        changed = restored and await self._loaded(state, row)
        if state.serving is None:  # a partition's first row: what serves it is its state
            state.serving, changed = self.default.model_id, True
        minute = row.ts_event // NS_PER_MIN
        forced = self._forced(state)
        if forced is not None or (state.candidate is not None and minute > state.minute):
            await sync()
            changed |= self._decide(state, row, forced)
        candidate = self.candidate
        if (
            candidate is not None
            and state.candidate != candidate.model_id
            and candidate.model_id not in state.verdicts
            and candidate.model_id != state.serving
        ):
            state.candidate, changed = candidate.model_id, True
        # Never back: a spike candidate's row, held to its symbol's next bar, comes after
        # rows of the minute after it, and the verdict's sync is once a minute.
        if state.candidate is not None and minute > state.minute:
            state.minute, changed = minute, True
        if changed:
            self.store.write(key, partition, row.offset, state)

    def _forced(self, state: PartitionCanary) -> str | None:
        serving = state.serving or (self.default.model_id if self.default else None)
        for model_id in sorted(self.forced):
            forced = state.verdicts.get(model_id) == Verdict.FORCED
            if model_id in self.engines and model_id != serving and not forced:
                return model_id
        return None

    async def _loaded(self, state: PartitionCanary, row: FeatureRow) -> bool:
        """The checkpoints a restored partition names, loaded; one gone from the model
        directory serves no more (its canary is refused). Whether the state changed."""
        first, changed = row.partition not in self.held, False
        self.held.add(row.partition)
        for model_id in (state.serving, state.candidate):
            if model_id is None or self.load is None:
                continue
            engine = self.engines.get(model_id) or await self.load(model_id)
            if engine is not None:
                self.engines[model_id] = engine
                if model_id == state.candidate and self.candidate is None:
                    self.candidate, self.restored = engine, True
                    self.metrics.set_canary(model_id)
                continue
            log.error(
                "partition %d: checkpoint %s is no longer in the model directory",
                row.partition, model_id,
            )  # fmt: skip
            if model_id == state.candidate:
                self._refuse(state, row, Reason.MISSING, None)
            else:
                state.serving = None
            changed = True
        default = self.default
        candidate = self.candidate
        if (  # a checkpoint that landed while no worker ran: a canary, as if it ran, in place
            first  # of an older one a state names, whichever partition's row comes first
            and default is not None  # (the default is the newest until it rolls out)
            and (candidate is None or (self.restored and candidate.model_id != default.model_id))
            and state.serving not in (None, default.model_id)
            and default.model_id not in state.verdicts
        ):
            self.propose(default)
        return changed

    def _decide(self, state: PartitionCanary, row: FeatureRow, forced: str | None) -> bool:
        """The verdict due at this row, if any; whether the state changed."""
        if forced is not None:
            self._promote(state, row, forced, Verdict.FORCED, None)
            return True
        tracks = self._tracks(row.partition, state.candidate)
        self.metrics.canary_scored.set(scored_count([t for _, t in tracks]))
        decision = decide([t for _, t in tracks], self.needed)
        if decision is None:
            return False
        if decision.verdict is Verdict.PROMOTED:
            self._promote(state, row, state.candidate, Verdict.PROMOTED, decision)  # type: ignore[arg-type]
        else:
            self._refuse(state, row, decision.reason, decision)  # type: ignore[arg-type]
        return True

    def _tracks(self, partition: int, model_id: str | None) -> list[tuple[bytes, CanaryTrack]]:
        """The partition's symbols' tracks of canary `model_id`, in key order."""
        assert self.shadows is not None
        tracks = []
        for key in sorted(self.shadows.symbols_in(partition)):
            track = self.shadows.read(key).canary
            if track is not None and track.model_id == model_id:
                tracks.append((key, track))
        return tracks

    def _promote(
        self,
        state: PartitionCanary,
        row: FeatureRow,
        model_id: str,
        verdict: Verdict,
        decision: Decision | None,
    ) -> None:
        """`model_id` serves the partition; its symbols' calibrations carry on from the
        canary's."""
        assert self.shadows is not None and self.calibrations is not None
        for key, track in self._tracks(row.partition, model_id):
            self.calibrations.write(key, row.partition, row.offset, track.promoted())
            self._end_track(key, row)
        incumbent = state.serving
        state.serving, state.verdicts[model_id] = model_id, verdict.value
        if verdict is Verdict.FORCED and incumbent is not None and incumbent != model_id:
            # a rollback by hand: a restart must not offer the newer checkpoint back as a canary
            state.verdicts.setdefault(incumbent, Verdict.REPLACED.value)
        if state.candidate == model_id:
            state.candidate = None
        self.metrics.canary_verdicts.labels(verdict=verdict.value, reason="").inc()
        why = "by barcast promote" if decision is None else decision.describe()
        log.info(
            "canary %s promoted on partition %d at %s, replacing %s: %s",
            model_id, row.partition, row.ts_event, incumbent, why,
        )  # fmt: skip
        self._tidy()

    def _refuse(
        self, state: PartitionCanary, row: FeatureRow, reason: Reason, decision: Decision | None
    ) -> None:
        model_id = state.candidate
        assert model_id is not None
        if self.shadows is not None:
            for key, _ in self._tracks(row.partition, model_id):
                self._end_track(key, row)
        state.candidate = None
        state.verdicts[model_id] = f"{Verdict.REFUSED.value}: {reason.value}"
        self.metrics.canary_verdicts.labels(verdict=Verdict.REFUSED.value, reason=reason).inc()
        figures = "" if decision is None else f" ({decision.describe()})"
        log.error(
            "canary %s refused on partition %d (reason %s: %s)%s; %s keeps serving "
            "(docs/operations.md, Rolling out a new checkpoint)",
            model_id, row.partition, reason.value, EXPLAINED[reason], figures, state.serving,
        )  # fmt: skip
        self._tidy()

    def _end_track(self, key: bytes, row: FeatureRow) -> None:
        assert self.shadows is not None
        shadow = self.shadows.read(key)
        shadow.canary = None
        self.shadows.write(key, row.partition, row.offset, shadow)

    def _tidy(self) -> None:
        """Once every partition whose state this worker holds has decided the canary (or serves
        it), it is done: one proposed just as a partition decided the canary before it is not
        taken up yet, and stays. Once they all serve one checkpoint, that one is the worker's
        default. A checkpoint none of them serves or runs is let go: its weights and per-symbol
        caches would otherwise stay for as long as the worker runs, one more with each rollout
        (a partition that names it later loads it again, `_loaded`)."""
        assert self.store is not None
        # Those in memory only: reading one not restored yet would make it a blank state
        states = [self.store.states[key] for key in sorted(self.store.states)]
        proposed = None if self.candidate is None else self.candidate.model_id
        if proposed is not None and all(
            proposed in s.verdicts or s.serving == proposed for s in states
        ):
            self.candidate = None
            self.metrics.set_canary(None)
        served = {s.serving for s in states if s.serving is not None}
        if len(served) == 1 and (only := next(iter(served))) in self.engines:
            self.default = self.engines[only]
            self.metrics.set_model(only, self.default.fingerprint)
        used = served | {s.candidate for s in states} | self.forced
        used |= {e.model_id for e in (self.default, self.candidate) if e is not None}
        for model_id in set(self.engines) - used:
            del self.engines[model_id]


EXPLAINED = {
    Reason.PINBALL: "its pinball is worse than the serving checkpoint's on the same forecasts",
    Reason.COVERAGE: "its 80 % interval's coverage is outside the alert band (70-90 %)",
    Reason.MISSING: "its checkpoint left the model directory",
}
