"""Rollouts with a rebalance or a restart in their middle (streams.runtime.stages.serving,
carried): what the forecast stage publishes is what a stage never interrupted publishes.

A rebalance makes the stores forget every partition and restore each at its first record after,
though a partition decides (or a `barcast promote` lands) before another's state is restored. A
stream-encoder checkpoint promoted back a few minutes after it stopped serving starts its
symbols' streams from their windows, as a restarted worker, which has no stream of it, does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from model.serving.canary import PartitionCanary, Verdict
from model.serving.checkpoints import CheckpointWatcher
from model.serving.forecast_engine import ForecastEngine
from streams.runtime.records import Out
from streams.runtime.stages.forecasts import Forecasting
from streams.runtime.stages.serving import partition_key
from tests.checkpoints import make_checkpoint
from tests.streams.runtime.stages.test_serving import CANARY_AT, END, published, rows, stage, states
from tests.streams.runtime.test_stores import MemoryChangelogs, flush

PROMOTED_AT = 70  # the minute `barcast promote` names the canary, in the promoted case
VERDICT_AT = 80  # the minute the canary is refused by a stage never rebalanced


async def run(models: Path, canary: str, promote: bool, rebalance_at: int | None) -> Any:
    """Each minute's rows one record a batch; at `rebalance_at`, every store flushed and
    forgotten, each partition restored at its first record after (Committer.on_revoked,
    Committer._start). What it published, each partition's canary state at the end and the
    minute each first held a verdict on the canary."""
    forecasting, producer = stage(models)
    returned: list[Out] = []
    decided_at: dict[int, int] = {}
    for minute in range(END):
        if minute == CANARY_AT:
            forecasting.serving.propose(
                ForecastEngine.from_settings(models / "canary", forecasting.settings)
            )
        if promote and minute == PROMOTED_AT:
            await forecasting.serving.force(canary)
        restore = set()
        if minute == rebalance_at:
            await forecasting.drain()
            for store in forecasting.stores:
                await flush(store)
                store.forget()
            restore = {0, 1}
        for row in rows(minute):  # partition 0's row first: it decides before 1 is restored
            if row.partition in restore:
                for store in forecasting.stores:
                    await store.restore(row.partition, 2 * minute)
                restore.discard(row.partition)
            returned.extend(await forecasting.add([row]))
        await forecasting.drain()
        for partition in (0, 1):  # those in memory only: a read would make a blank state
            state = forecasting.serving.store.states.get(partition_key(partition))
            if state is not None and canary in state.verdicts:
                decided_at.setdefault(partition, minute)
    return published(producer, returned), states(forecasting), decided_at


@pytest.mark.parametrize("promote", [False, True])
def test_a_rebalance_before_a_verdict_changes_nothing_published(
    tmp_path: Path, promote: bool
) -> None:
    make_checkpoint(tmp_path / "serving")
    canary = make_checkpoint(tmp_path / "canary", seed=1)
    rebalance_at = PROMOTED_AT if promote else VERDICT_AT
    never = asyncio.run(run(tmp_path, canary, promote, None))
    decided, decided_at = never[1:]
    assert all(canary in state.verdicts for state in decided)
    assert decided_at[0] == (PROMOTED_AT if promote else VERDICT_AT)  # the rebalance's minute
    assert asyncio.run(run(tmp_path, canary, promote, rebalance_at)) == never


def test_a_stream_checkpoint_rolled_back_forecasts_as_after_a_restart(tmp_path: Path) -> None:
    """Stream encoders: A serves, B runs beside it; `barcast promote` B, then A again three
    minutes later, within A's lookback. Partition 1's symbols pause, so A stays loaded. A
    worker restarted from the commit between the promotes publishes what the live one does."""
    serving = make_checkpoint(tmp_path / "serving", encoder="stream")
    canary = make_checkpoint(tmp_path / "canary", seed=1, encoder="stream")
    io = MemoryChangelogs()

    async def minute(forecasting: Forecasting, at: int, out: list[Out]) -> None:
        if at == CANARY_AT:
            engine = ForecastEngine.from_settings(tmp_path / "canary", forecasting.settings)
            forecasting.serving.propose(engine)
        for at_minute, model_id in ((64, canary), (67, serving)):
            if at == at_minute:
                await forecasting.serving.force(model_id)
        out.extend(await forecasting.add([r for r in rows(at) if at < 64 or r.partition == 0]))
        await forecasting.drain()

    async def run() -> tuple[dict[Any, Any], dict[Any, Any]]:
        live, live_out = stage(tmp_path, changelogs=io)
        live.watch(CheckpointWatcher(tmp_path))  # how a promote loads a checkpoint let go
        returned: list[Out] = []
        for at in range(66):
            await minute(live, at, returned)
        for store in live.stores:  # the commit after minute 65
            await flush(store)
        committed = MemoryChangelogs()
        committed.partitions = {k: list(v) for k, v in io.partitions.items()}
        committed.last_write = dict(io.last_write)
        # The newest checkpoint serves a worker started with partitions of no state
        again, again_out = stage(tmp_path, changelogs=committed, default="canary")
        again.watch(CheckpointWatcher(tmp_path))
        for store in again.stores:
            for partition in (0, 1):
                await store.restore(partition, 2 * 66)
        await again.serving.force(canary)  # as the live worker's promote file named it
        sent, returned, again_returned = len(live_out.calls), [], []
        for at in range(66, 75):
            await minute(live, at, returned)
            await minute(again, at, again_returned)
        live_out.calls[:sent] = []
        return published(live_out, returned), published(again_out, again_returned)

    live, restarted = asyncio.run(run())
    assert sum(topic == "forecasts" for topic, *_ in live) == 18  # 9 minutes of partition 0's
    assert restarted == live


@pytest.mark.parametrize("held_before", [False, True])
def test_a_partition_restored_proposes_the_default_only_when_first_held(
    tmp_path: Path, held_before: bool
) -> None:
    """A partition whose state names a checkpoint other than the worker's default, and no
    verdict on the default: held for the first time (a started worker), the default is
    proposed as a canary, a checkpoint that landed while no worker ran; restored after a
    rebalance, it is not (the default then is what the worker's rollouts left, not the newest
    checkpoint, and a worker never rebalanced proposes nothing)."""
    make_checkpoint(tmp_path / "serving")
    promoted = make_checkpoint(tmp_path / "canary", seed=1)
    forecasting, _ = stage(tmp_path)
    forecasting.watch(CheckpointWatcher(tmp_path))
    serving, row = forecasting.serving, rows(0)[0]
    assert serving.store is not None and row.partition == 0
    state = PartitionCanary(serving=promoted, verdicts={promoted: Verdict.FORCED})

    async def run() -> PartitionCanary:
        serving.store.write(partition_key(0), 0, 0, state)
        await flush(serving.store)
        serving.store.forget()  # a rebalance, or a start
        if held_before:
            serving.held.add(0)
        await serving.store.restore(0, boundary=1)
        await serving.before(row, lambda: asyncio.sleep(0))
        return serving.store.read(partition_key(0))

    after = asyncio.run(run())
    assert (serving.candidate is None) == held_before
    assert after.serving == promoted and (after.candidate is None) == held_before


@pytest.mark.parametrize("first", [0, 1])
def test_a_started_worker_proposes_its_newer_default_whichever_partition_comes_first(
    tmp_path: Path, first: int
) -> None:
    """A checkpoint landed while no worker ran, and partition 0's state names an older canary
    (partition 1's refused it): the newer one is the canary of both partitions, as it would
    have been had the worker run, whichever partition's row comes first."""
    newest = make_checkpoint(tmp_path / "serving")
    served = make_checkpoint(tmp_path / "canary", seed=1)
    older = make_checkpoint(tmp_path / "older", seed=2)
    forecasting, _ = stage(tmp_path)
    forecasting.watch(CheckpointWatcher(tmp_path))
    serving = forecasting.serving
    assert serving.store is not None
    states = {
        0: PartitionCanary(serving=served, candidate=older),
        1: PartitionCanary(serving=served, verdicts={older: Verdict.REFUSED}),
    }

    async def run() -> dict[int, str | None]:
        for partition, state in states.items():
            serving.store.write(partition_key(partition), partition, 0, state)
            await flush(serving.store)
        serving.store.forget()  # a start
        by_partition = {row.partition: row for row in rows(0)}
        for partition in (first, 1 - first):
            await serving.store.restore(partition, boundary=1)
            await serving.before(by_partition[partition], lambda: asyncio.sleep(0))
        return {p: serving.store.read(partition_key(p)).candidate for p in states}

    assert asyncio.run(run()) == {0: newest, 1: newest}
    assert serving.candidate is not None and serving.candidate.model_id == newest


def test_a_late_row_does_not_make_its_minute_new_again(tmp_path: Path) -> None:
    """A held spike candidate's row of minute 5 comes after a row of minute 6: the verdict's
    sync runs once at minute 6, not again at its next row."""
    make_checkpoint(tmp_path / "serving")
    make_checkpoint(tmp_path / "canary", seed=1)
    forecasting, _ = stage(tmp_path)
    serving = forecasting.serving
    serving.propose(ForecastEngine.from_settings(tmp_path / "canary", forecasting.settings))
    synced: list[int] = []

    async def run() -> None:
        for minute in (5, 6, 5, 6):
            row = rows(minute)[0]

            async def sync(minute: int = minute) -> None:
                synced.append(minute)

            await serving.before(row, sync)

    asyncio.run(run())
    assert synced == [6]


def test_a_partition_gained_later_leaves_a_canary_proposed_since_the_start(
    tmp_path: Path,
) -> None:
    """A checkpoint lands after the start and is the canary; a rebalance then brings a
    partition where another worker promoted it: the worker's older default is not proposed in
    its place, and partition 0 keeps its canary."""
    default = make_checkpoint(tmp_path / "serving")
    forecasting, _ = stage(tmp_path)
    forecasting.watch(CheckpointWatcher(tmp_path))
    serving = forecasting.serving
    assert serving.store is not None
    newer = make_checkpoint(tmp_path / "canary", seed=1)
    serving.propose(ForecastEngine.from_settings(tmp_path / "canary", forecasting.settings))
    first, later = ({row.partition: row for row in rows(m)} for m in (0, 1))

    async def run() -> None:
        await serving.before(first[0], lambda: asyncio.sleep(0))
        state = PartitionCanary(serving=newer, verdicts={newer: Verdict.PROMOTED})
        serving.store.write(partition_key(1), 1, 0, state)
        await flush(serving.store)
        serving.store.states.pop(partition_key(1))  # gained in a rebalance
        await serving.store.restore(1, boundary=1)
        await serving.before(first[1], lambda: asyncio.sleep(0))
        await serving.before(later[0], lambda: asyncio.sleep(0))

    asyncio.run(run())
    assert serving.candidate is not None and serving.candidate.model_id == newer != default
    canary = serving.route(0)[1]
    assert canary is not None and canary.model_id == newer


def test_a_checkpoint_rolled_back_by_promote_is_not_offered_again_after_a_restart(
    tmp_path: Path,
) -> None:
    """`barcast promote` serves an older checkpoint in place of the newest, which stays in the
    model directory: a restarted worker, whose default is that newest one, does not run it as a
    canary (it would be promoted back, undoing the rollback)."""
    newest = make_checkpoint(tmp_path / "serving")
    older = make_checkpoint(tmp_path / "canary", seed=1)
    changelogs = MemoryChangelogs()

    async def run() -> tuple[PartitionCanary, str | None]:
        before, _ = stage(tmp_path, changelogs=changelogs)
        before.watch(CheckpointWatcher(tmp_path))
        row = {r.partition: r for r in rows(0)}[0]
        await before.serving.force(older)
        await before.serving.before(row, lambda: asyncio.sleep(0))
        for store in before.stores:
            await flush(store)
        after, _ = stage(tmp_path, changelogs=changelogs)  # the restarted worker
        after.watch(CheckpointWatcher(tmp_path))
        assert after.serving.store is not None
        await after.serving.store.restore(0, boundary=2)  # the mark after minute 0's rows
        await after.serving.before({r.partition: r for r in rows(1)}[0], lambda: asyncio.sleep(0))
        candidate = after.serving.candidate
        return after.serving.store.read(partition_key(0)), candidate and candidate.model_id

    state, candidate = asyncio.run(run())
    assert state.serving == older and state.verdicts == {older: "forced", newest: "replaced"}
    assert candidate is None
