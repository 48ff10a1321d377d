"""A rebalance in the middle of a canary (streams.runtime.stages.serving): the stores forget
every partition and restore each at its first record after, and what the stage publishes is
what a stage never rebalanced publishes, though a partition decides (or a `barcast promote`
lands) before another's state is restored."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from model.serving.forecast_engine import ForecastEngine
from streams.runtime.records import Out
from tests.checkpoints import make_checkpoint
from tests.streams.runtime.stages.test_serving import CANARY_AT, END, published, rows, stage, states
from tests.streams.runtime.test_stores import flush

PROMOTED_AT = 70  # the minute `barcast promote` names the canary, in the promoted case
VERDICT_AT = 80  # the minute the canary is refused by a stage never rebalanced


async def run(models: Path, canary: str, promote: bool, rebalance_at: int | None) -> Any:
    """Each minute's rows one record a batch; at `rebalance_at`, every store flushed and
    forgotten, each partition restored at its first record after (Committer.on_revoked,
    Committer._start). What it published and each partition's canary state at the end."""
    forecasting, producer = stage(models)
    returned: list[Out] = []
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
    return published(producer, returned), states(forecasting)


@pytest.mark.parametrize("promote", [False, True])
def test_a_rebalance_before_a_verdict_changes_nothing_published(
    tmp_path: Path, promote: bool
) -> None:
    make_checkpoint(tmp_path / "serving")
    canary = make_checkpoint(tmp_path / "canary", seed=1)
    rebalance_at = PROMOTED_AT if promote else VERDICT_AT
    never, decided = asyncio.run(run(tmp_path, canary, promote, None))
    assert all(canary in state.verdicts for state in decided)
    assert asyncio.run(run(tmp_path, canary, promote, rebalance_at)) == (never, decided)
