"""When agents checkpoint their state: not in the middle of a burst, yet never too late."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from streams.metrics import Metrics
from streams.runtime.commit import (
    MAX_HELD,
    QUIET_S,
    Committer,
    Runtime,
    commit_due,
)
from streams.runtime.observers import notify
from streams.runtime.records import Record
from streams.settings import Settings

MIN_S, MAX_S = 0.5, 2.0


def test_nothing_held_is_never_due() -> None:
    assert not commit_due(0, held_s=10 * MAX_S, quiet_s=10.0, min_s=MIN_S, max_s=MAX_S)


def test_a_quiet_worker_checkpoints_once_the_interval_has_passed() -> None:
    assert not commit_due(10, held_s=MIN_S / 2, quiet_s=QUIET_S, min_s=MIN_S, max_s=MAX_S)
    assert commit_due(10, held_s=MIN_S, quiet_s=QUIET_S, min_s=MIN_S, max_s=MAX_S)


def test_a_busy_worker_waits_for_a_quiet_moment() -> None:
    # A burst: events held past the interval, but the worker did stream work just now.
    assert not commit_due(1_000, held_s=MIN_S * 2, quiet_s=QUIET_S / 10, min_s=MIN_S, max_s=MAX_S)
    assert commit_due(1_000, held_s=MIN_S * 2, quiet_s=QUIET_S, min_s=MIN_S, max_s=MAX_S)


def test_a_minimum_over_the_maximum_acts_as_the_maximum() -> None:
    assert not commit_due(10, held_s=MAX_S * 0.99, quiet_s=QUIET_S, min_s=2 * MAX_S, max_s=MAX_S)
    assert commit_due(10, held_s=MAX_S, quiet_s=QUIET_S, min_s=2 * MAX_S, max_s=MAX_S)


def test_a_worker_that_is_never_quiet_still_checkpoints() -> None:
    assert not commit_due(10, held_s=MAX_S * 0.99, quiet_s=0.0, min_s=MIN_S, max_s=MAX_S)
    assert commit_due(10, held_s=MAX_S, quiet_s=0.0, min_s=MIN_S, max_s=MAX_S)
    assert commit_due(MAX_HELD, held_s=0.0, quiet_s=0.0, min_s=MIN_S, max_s=MAX_S)


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


async def committed(committer: Committer) -> None:
    """A commit, through its last step."""
    await committer.commit()
    await asyncio.gather(*committer.completing)


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
        await committed(committer)
        return ran, events

    ran, events = asyncio.run(run())
    assert ran == [1]
    assert [e.acked for e in events] == [False, True]


def test_records_before_where_the_stores_resume_are_skipped_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a reset of the group's offsets, or a topic made anew, the records before the mark
    are never run: the worker says so, once per partition started."""

    async def run() -> list[int]:
        async def commit() -> None:
            pass

        runtime = Runtime(Settings(), Metrics(), "t", lambda topic: {0, 1}, commit)
        committer = Committer(runtime, "bars.raw", [])
        committer.next = {0: 100, 1: 0}  # partition 0 resumes at its mark, 100
        ran: list[int] = []

        async def stages(batch: list[Record]) -> None:
            ran.extend(r.offset for r in batch)

        for offsets in ((5, 6, 7), (8, 9), (100,)):
            records = [Record("bars.raw", 0, o, 0.0, b"k", b"v", []) for o in offsets]
            await committer.run(records, [Event() for _ in records], stages)
        await committer.run([Record("bars.raw", 1, 0, 0.0, b"k", b"v", [])], [Event()], stages)
        return ran

    with caplog.at_level(logging.INFO, logger="barcast.runtime"):
        ran = asyncio.run(run())
    assert ran == [100, 0]
    told = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert told == [
        "bars.raw[0]: skipped 3 record(s) at offsets 5..7, before offset 100 where the stores "
        "resume: their effects are in the stores already (a commit marked them); if the "
        "group's offsets were reset or the topic made anew, they were never run: see "
        "docs/operations.md, Replaying a day of history"
    ]


def test_no_batch_runs_while_partitions_move() -> None:
    """From the revoke to the next assignment, records fetched before the revoke are neither
    run nor acked: the partition's next owner runs them. Assigned again, batches run."""

    async def run() -> tuple[list[int], list[Event]]:
        async def commit() -> None:
            pass

        runtime = Runtime(Settings(), Metrics(), "t", lambda topic: {0}, commit)
        committer = Committer(runtime, "bars.raw", [])
        committer.next = {0: 0}
        ran: list[int] = []

        async def stages(batch: list[Record]) -> None:
            ran.extend(r.offset for r in batch)

        events = [Event(), Event()]
        await committer.on_revoked()
        assert committer.next == {}  # forgotten: restored from its mark when it runs again
        committer.next = {0: 0}  # as restored, without a broker
        await committer.run([Record("bars.raw", 0, 0, 0.0, b"k", b"v", [])], events[:1], stages)
        committer.on_assigned()
        await committer.run([Record("bars.raw", 0, 0, 0.0, b"k", b"v", [])], events[1:], stages)
        await committed(committer)
        return ran, events

    ran, events = asyncio.run(run())
    assert ran == [0]
    assert [e.acked for e in events] == [False, True]
