"""The micro-batcher's flush rules, with a hand-driven clock."""

from __future__ import annotations

import pytest

from model.serving.batcher import MicroBatcher


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_flushes_when_full_in_arrival_order() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(max_batch=3, max_delay_s=1.0, clock=Clock())
    for i in range(2):
        batcher.add(i)
    assert not batcher.due()
    batcher.add(2)
    batcher.add(3)
    assert batcher.due() and batcher.seconds_until_due() == 0.0
    assert batcher.take() == [0, 1, 2]
    assert batcher.take() == [3]
    assert not batcher.due() and batcher.seconds_until_due() is None


def test_flushes_when_the_oldest_waited_max_delay() -> None:
    clock = Clock()
    batcher: MicroBatcher[str] = MicroBatcher(max_batch=256, max_delay_s=0.005, clock=clock)
    batcher.add("a")
    clock.now = 0.003
    batcher.add("b")
    assert not batcher.due()
    assert batcher.seconds_until_due() == pytest.approx(0.002)
    clock.now = 0.005
    assert batcher.due()
    assert batcher.take() == ["a", "b"]


def test_end_of_interval_flushes_at_once_and_resets() -> None:
    clock = Clock()
    batcher: MicroBatcher[int] = MicroBatcher(max_batch=256, max_delay_s=60.0, clock=clock)
    batcher.flush_now()  # nothing waits: the next minute's bars wait as usual
    batcher.add(1)
    assert not batcher.due()
    batcher.flush_now()
    assert batcher.due()
    assert batcher.take() == [1]
    batcher.add(2)
    assert not batcher.due()


def test_only_the_completed_minutes_bars_go_at_once() -> None:
    """More waited than a batch holds when the minute completed: those go batch by batch at
    once, and the next minute's bars queued behind them wait as usual."""
    batcher: MicroBatcher[int] = MicroBatcher(max_batch=2, max_delay_s=60.0, clock=Clock())
    for i in range(3):
        batcher.add(i)
    batcher.flush_now()
    assert batcher.take() == [0, 1]
    for i in (3, 4):  # the next minute's
        batcher.add(i)
    assert batcher.due() and batcher.take() == [2, 3]
    assert not batcher.due() and batcher.seconds_until_due() == 60.0


@pytest.mark.parametrize(("max_batch", "delay"), [(0, 0.005), (8, -1.0)])
def test_rejects_settings_that_cannot_work(max_batch: int, delay: float) -> None:
    with pytest.raises(ValueError, match="BARCAST_MAX_"):
        MicroBatcher(max_batch=max_batch, max_delay_s=delay)
