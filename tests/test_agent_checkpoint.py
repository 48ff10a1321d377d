"""When agents checkpoint their state: not in the middle of a burst, yet never too late."""

from __future__ import annotations

from streams.agents.checkpoint import INTERVAL_S, MAX_HELD, QUIET_S, checkpoint_due

MAX_S = 2.0


def test_nothing_held_is_never_due() -> None:
    assert not checkpoint_due(0, held_s=10 * MAX_S, quiet_s=10.0, max_s=MAX_S)


def test_a_quiet_worker_checkpoints_once_the_interval_has_passed() -> None:
    assert not checkpoint_due(10, held_s=INTERVAL_S / 2, quiet_s=QUIET_S, max_s=MAX_S)
    assert checkpoint_due(10, held_s=INTERVAL_S, quiet_s=QUIET_S, max_s=MAX_S)


def test_a_busy_worker_waits_for_a_quiet_moment() -> None:
    # A burst: events held past the interval, but the worker did stream work just now.
    assert not checkpoint_due(1_000, held_s=INTERVAL_S * 2, quiet_s=QUIET_S / 10, max_s=MAX_S)
    assert checkpoint_due(1_000, held_s=INTERVAL_S * 2, quiet_s=QUIET_S, max_s=MAX_S)


def test_a_worker_that_is_never_quiet_still_checkpoints() -> None:
    assert not checkpoint_due(10, held_s=MAX_S * 0.99, quiet_s=0.0, max_s=MAX_S)
    assert checkpoint_due(10, held_s=MAX_S, quiet_s=0.0, max_s=MAX_S)
    assert checkpoint_due(MAX_HELD, held_s=0.0, quiet_s=0.0, max_s=MAX_S)
