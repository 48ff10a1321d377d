"""When agents checkpoint their state: not in the middle of a burst, yet never too late."""

from __future__ import annotations

import asyncio
import time

from streams.metrics import Metrics
from streams.runtime.commit import (
    INTERVAL_S,
    MAX_HELD,
    QUIET_S,
    Committer,
    Runtime,
    commit_due,
)
from streams.runtime.observers import notify
from streams.runtime.records import Record
from streams.settings import Settings

MAX_S = 2.0


def test_nothing_held_is_never_due() -> None:
    assert not commit_due(0, held_s=10 * MAX_S, quiet_s=10.0, max_s=MAX_S)


def test_a_quiet_worker_checkpoints_once_the_interval_has_passed() -> None:
    assert not commit_due(10, held_s=INTERVAL_S / 2, quiet_s=QUIET_S, max_s=MAX_S)
    assert commit_due(10, held_s=INTERVAL_S, quiet_s=QUIET_S, max_s=MAX_S)


def test_a_busy_worker_waits_for_a_quiet_moment() -> None:
    # A burst: events held past the interval, but the worker did stream work just now.
    assert not commit_due(1_000, held_s=INTERVAL_S * 2, quiet_s=QUIET_S / 10, max_s=MAX_S)
    assert commit_due(1_000, held_s=INTERVAL_S * 2, quiet_s=QUIET_S, max_s=MAX_S)


def test_a_worker_that_is_never_quiet_still_checkpoints() -> None:
    assert not commit_due(10, held_s=MAX_S * 0.99, quiet_s=0.0, max_s=MAX_S)
    assert commit_due(10, held_s=MAX_S, quiet_s=0.0, max_s=MAX_S)
    assert commit_due(MAX_HELD, held_s=0.0, quiet_s=0.0, max_s=MAX_S)


class Recorder:
    def __init__(self) -> None:
        self.bars: list[dict[str, object]] = []

    def observe_bar(self, clean_bar_value: dict[str, object]) -> None:
        if clean_bar_value.get("fail"):
            raise ValueError("a broken observer")
        self.bars.append(clean_bar_value)

    def observe_forecast(self, forecast_value: dict[str, object]) -> None:
        raise AssertionError("not called")

    def observe_score(self, score_value: dict[str, object]) -> None:
        raise AssertionError("not called")


def test_observers_see_every_value_in_order_and_one_failing_never_stops_the_others() -> None:
    first, second = Recorder(), Recorder()
    values = [{"n": 1}, {"n": 2, "fail": True}, {"n": 3}]
    notify([first, second], "observe_bar", values)
    assert first.bars == second.bars == [{"n": 1}, {"n": 3}]


class Event:
    def __init__(self) -> None:
        self.acked = False

    def ack(self) -> bool:
        self.acked = True
        return True


def held_long_ago(committer: Committer) -> Event:
    """An event held past every bound, the worker quiet since: a checkpoint is due."""
    event = Event()
    committer.held, committer.held_since = [event], time.monotonic() - 10 * MAX_S
    return event


async def tick_behind_the_lock(committer: Committer, agent_meanwhile: bool) -> None:
    """A timer's tick that finds a checkpoint due, then waits for the lock the agent holds;
    `agent_meanwhile`: the agent checkpoints and takes a new burst's first records before it
    lets go."""
    async with committer.lock:
        tick = asyncio.ensure_future(committer.tick())
        await asyncio.sleep(0)  # one turn of the loop: the tick is past its check, at the lock
        assert not tick.done()
        if agent_meanwhile:
            committer.held, committer.held_since = [Event()], time.monotonic()
            committer.runtime.worked = time.monotonic()
    await tick


def test_a_tick_checks_again_under_the_lock_whether_a_checkpoint_is_due() -> None:
    async def run() -> None:
        commits: list[None] = []

        async def commit() -> None:
            commits.append(None)

        runtime = Runtime(Settings(), Metrics(), "t", lambda topic: {0}, commit)
        committer = Committer(runtime, "bars.raw", [])
        held_long_ago(committer)
        await tick_behind_the_lock(committer, agent_meanwhile=True)
        assert len(committer.held) == 1 and commits == []  # the new burst is not cut
        event = held_long_ago(committer)
        await tick_behind_the_lock(committer, agent_meanwhile=False)
        await asyncio.gather(*committer.completing)
        assert committer.held == [] and event.acked and commits == [None]

    asyncio.run(run())


def test_records_of_a_partition_no_longer_assigned_are_neither_run_nor_acked() -> None:
    """Acked, a record the worker never ran would let its commit pass the record if the
    partition came back to it."""

    async def run() -> tuple[list[int], list[Event]]:
        async def commit() -> None:
            pass

        runtime = Runtime(Settings(), Metrics(), "t", lambda topic: {1}, commit)
        committer = Committer(runtime, "bars.raw", [])
        committer.next = {0: 0, 1: 0}  # both partitions seen: no restore
        records = [Record("bars.raw", p, 0, 0.0, b"k", b"v", []) for p in (0, 1)]
        events = [Event(), Event()]
        ran: list[int] = []

        async def stages(batch: list[Record]) -> None:
            ran.extend(r.partition for r in batch)

        await committer.run(records, events, stages)
        await committer.commit()
        await asyncio.gather(*committer.completing)
        return ran, events

    ran, events = asyncio.run(run())
    assert ran == [1]
    assert [e.acked for e in events] == [False, True]
