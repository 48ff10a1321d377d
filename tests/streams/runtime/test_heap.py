"""The worker's full collections: none while a burst makes survivors, one in the quiet after."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from streams.runtime.commit import QUIET_S
from streams.runtime.heap import (
    INTERVAL_S,
    MAX_S,
    QuietCollections,
    defer_full_collections,
    full_collection_due,
)

SURVIVORS = 400_000  # past a quarter of what a test process's oldest generation holds


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """Each full collection from here on, noted; the collector's thresholds restored after."""
    thresholds, noted = gc.get_threshold(), []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            noted.append(1)

    gc.collect()  # the oldest generation's count as of now
    gc.callbacks.append(note)
    try:
        yield noted
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*thresholds)


def burst() -> list[list[list[int]]]:
    """What a burst leaves alive, in objects the collector tracks."""
    return [[[i]] for i in range(SURVIVORS)]


def test_the_interpreter_makes_a_full_collection_in_such_a_burst(
    full_collections: list[int],
) -> None:
    kept = burst()
    assert full_collections, "no full collection: the test below would pass for nothing"
    del kept


def test_deferred_none_runs_in_the_burst_and_one_runs_once_quiet(
    full_collections: list[int],
) -> None:
    collections = QuietCollections(now=0.0)
    defer_full_collections()
    kept = burst()
    assert not full_collections
    at = INTERVAL_S
    assert not collections.tick(at, worked=at)  # busy: the next burst could be in flight
    assert not full_collections
    assert collections.tick(at + QUIET_S, worked=at)
    assert full_collections == [1] and collections.count == 1
    assert not collections.tick(at + 2 * QUIET_S, worked=at)  # one per INTERVAL_S at most
    del kept


@pytest.mark.parametrize(
    ("since_s", "quiet_s", "due"),
    [
        (INTERVAL_S, QUIET_S, True),
        (INTERVAL_S - 1, 10.0, False),  # at most one a minute
        (INTERVAL_S, QUIET_S / 2, False),  # not in a burst
        (MAX_S, 0.0, True),  # a worker never quiet still collects
    ],
)
def test_a_full_collection_is_due_in_a_quiet_or_after_the_longest_wait(
    since_s: float, quiet_s: float, due: bool
) -> None:
    assert full_collection_due(since_s, quiet_s) is due
