"""Skill and the serve choice (model.serving.skill): known answers for the point and the
moving-block bootstrap interval, the pooled gauges' figures, and the choice's hysteresis and
timing; the shadow state round-trips exactly, its skill window slot by slot."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from model.covariates import NS_PER_MIN
from model.serving.conformal import SymbolCalibration
from model.serving.shadow import Pending, SymbolShadow
from model.serving.skill import (
    BLOCK,
    MIN_SCORED,
    MODEL,
    ServeChoice,
    ServeMode,
    SkillWindow,
    block_starts,
    block_sums,
    pooled_skill,
    skill_interval,
)
from streams.runtime.changelog import Changelog
from streams.runtime.stores import ShadowStore
from tests.streams.runtime.test_stores import MemoryChangelogs, flush

H = 10


def losses(n: int, seed: int, worse: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Paired losses of a baseline and a model `worse` x worse in expectation, with the
    dependence of overlapping labels (a moving average over 10 forecasts)."""
    rng = np.random.default_rng(seed)
    noise = np.convolve(rng.exponential(1.0, n + 9), np.ones(10) / 10, "valid")
    baseline = noise * rng.uniform(0.8, 1.2, n)
    return baseline * (1 + worse) * rng.uniform(0.9, 1.1, n), baseline


def test_block_sums_are_the_sums_of_every_block_wrapping_round() -> None:
    """The newest forecasts start blocks as often as any (wrapping round to the oldest): in a
    resample they weigh as much as the others."""
    x = np.random.default_rng(0).normal(size=97)
    expected = [x.take(range(i, i + BLOCK), mode="wrap").sum() for i in range(97)]
    assert np.allclose(block_sums(x), expected)
    starts = block_starts(97)
    assert starts.shape[1] == -(-97 // BLOCK) and starts.max() > 97 - BLOCK
    assert np.array_equal(starts, block_starts(97)) and not starts.flags.writeable


def test_a_forecaster_equal_to_the_baseline_has_no_skill_and_a_zero_interval() -> None:
    _, baseline = losses(240, 0)
    found = skill_interval(baseline, baseline)
    assert found is not None and found.skill == found.lower == found.upper == 0.0


def test_a_worse_model_is_told_apart_and_an_equal_one_is_not() -> None:
    worse = skill_interval(*losses(240, 1, worse=0.2))
    assert worse is not None and worse.upper < 0 and -0.3 < worse.skill < -0.1
    equal = [skill_interval(*losses(240, seed)) for seed in range(100)]
    # A 90 % interval; the bootstrap's covers 86 % at 240 forecasts, 90 % at 1,000
    assert sum(s.lower <= 0 <= s.upper for s in equal if s) >= 80


def test_skill_needs_enough_forecasts_and_is_a_function_of_the_losses() -> None:
    model, baseline = losses(MIN_SCORED - 1, 2)
    assert skill_interval(model, baseline) is None
    model, baseline = losses(MIN_SCORED, 2)
    assert skill_interval(model, baseline) == skill_interval(model.copy(), baseline.copy())


def window_of(rows: list[np.ndarray], size: int = 240) -> SkillWindow:
    window = SkillWindow(size)
    for row in rows:
        window.append(row)
    return window


def rows(n: int, seed: int, worse: float = 0.0, tod: float | None = None) -> list[np.ndarray]:
    """Skill-window rows: the model's losses, the volatility scale's, the tod EWMA's (NaN:
    undefined), the same at every horizon."""
    model, baseline = losses(n, seed, worse)
    other = baseline * (1.0 if tod is None else tod)
    return [
        np.column_stack([np.full(H, m), np.full(H, b), np.full(H, np.nan if tod is None else o)])
        for m, b, o in zip(model, baseline, other, strict=True)
    ]


def test_the_pooled_skill_of_one_symbol_is_its_own_and_a_window_keeps_its_newest() -> None:
    window = window_of(rows(300, 3, worse=0.2), size=240)
    assert window.count == 300 and len(window.rows()) == 240
    pooled = pooled_skill([window])
    assert {baseline for _, baseline in pooled} == {"volatility_scale"}  # tod never defined
    model, baseline = losses(300, 3, 0.2)
    assert pooled[(1, "volatility_scale")] == skill_interval(model[-240:], baseline[-240:])
    assert window.skill("volatility_scale") == pooled[(H, "volatility_scale")]


def test_windows_pool_aligned_by_age() -> None:
    a, b = window_of(rows(240, 4, 0.1)), window_of(rows(100, 5, 0.1))
    pooled = pooled_skill([a, b])[(1, "volatility_scale")]
    newest_first = [a.ordered()[::-1, 0], b.ordered()[::-1, 0]]
    model = np.zeros(240)
    baseline = np.zeros(240)
    for losses_ in newest_first:
        model[: len(losses_)] += losses_[:, 0]
        baseline[: len(losses_)] += losses_[:, 1]
    assert pooled == skill_interval(model[::-1], baseline[::-1])


def test_auto_serves_the_best_baseline_while_the_model_is_clearly_worse_with_hysteresis() -> None:
    choice, ts = ServeChoice(), 0
    window = SkillWindow(240)
    changes = []
    history = rows(200, 6, worse=0.3, tod=0.95) + rows(400, 7, worse=-0.1, tod=1.2)
    for i, row in enumerate(history):
        window.append(row)
        ts = i * NS_PER_MIN
        if choice.revisit(window, ServeMode.AUTO, ts, H) is not None:
            changes.append((i, choice.due[-1]))
    first, back = changes[0], changes[1]
    assert first[0] == MIN_SCORED - 1 and first[1] == (
        ts_of(first[0]) + (H + 1) * NS_PER_MIN,
        "tod_ewma",
    )
    assert back[1][1] == MODEL and back[0] > 200 and len(changes) == 2
    assert choice.at(ts_of(first[0]) + H * NS_PER_MIN, ServeMode.AUTO) == MODEL  # not yet due
    assert choice.at(first[1][0], ServeMode.AUTO) == "tod_ewma"
    assert choice.at(back[1][0], ServeMode.AUTO) == MODEL
    assert choice.at(back[1][0], ServeMode.BASELINE) == "volatility_scale"  # never chosen
    assert choice.at(back[1][0], ServeMode.MODEL) == MODEL


def ts_of(i: int) -> int:
    return i * NS_PER_MIN


def test_a_model_equal_to_a_baseline_keeps_serving() -> None:
    choice, window = ServeChoice(), SkillWindow(240)
    for i, row in enumerate(rows(600, 8)):
        row[:, 0] = row[:, 1] * (1 + 1e-7)  # float32 against float64
        window.append(row)
        assert choice.revisit(window, ServeMode.AUTO, ts_of(i), H) is None


def test_the_shadow_state_round_trips_its_skill_window_slot_by_slot() -> None:
    state = SymbolShadow(window_size=50)
    state.serve("m")
    state.ewma[:] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    state.calibrations["tod_ewma"] = SymbolCalibration(
        "tod_ewma", 5, [[0.1, -0.2]], 3, [(9, (True,), (False,))]
    )
    state.pending.append(Pending(7, "tod_ewma", {"tod_ewma": tuple(np.linspace(0, 1, 30))}))
    for row in rows(73, 9, tod=1.1):
        state.window.append(row)
    state.choice = ServeChoice("tod_ewma", [(11, MODEL)])
    io = MemoryChangelogs()
    store = ShadowStore(Changelog("t-shadow-state-changelog", io), 50)
    store.write(b"6EH4", 0, 1, state)
    store.put_changed()
    asyncio.run(flush(store))
    restored = ShadowStore(Changelog("t-shadow-state-changelog", io), 50)
    asyncio.run(restored.restore(0, 2))
    back = restored.read(b"6EH4")
    assert back.to_bytes() == state.to_bytes() and back.window == state.window
    assert back.calibrations == state.calibrations and back.pending == state.pending
    smaller = ShadowStore(Changelog("t-shadow-state-changelog", io), 20)
    asyncio.run(smaller.restore(0, 2))
    resized = smaller.read(b"6EH4").window
    assert np.array_equal(resized.ordered(), state.window.ordered()[-20:], equal_nan=True)


@pytest.mark.parametrize("written", [1, 51, 120])
def test_a_flush_writes_only_the_slots_scored_since(written: int) -> None:
    io = MemoryChangelogs()
    store = ShadowStore(Changelog("t-shadow-state-changelog", io), 50)
    state = store.read(b"X")
    for row in rows(written, 10):
        state.window.append(row)
    store.write(b"X", 0, 1, state)
    store.put_changed()
    assert len(store.changelog.unsent[0]) == min(written, 50) + 1
    asyncio.run(flush(store))
    state.window.append(rows(1, 11)[0])
    store.write(b"X", 0, 2, state)
    store.put_changed()
    assert len(store.changelog.unsent[0]) == 2


def test_a_partitions_symbols_are_those_stored_restored_or_changed_never_slots() -> None:
    io = MemoryChangelogs()
    store = ShadowStore(Changelog("t-shadow-state-changelog", io), 50)
    for key, partition in ((b"A", 0), (b"B", 1), (b"C", 0)):
        state = store.read(key)
        for row in rows(5, 12):
            state.window.append(row)
        store.write(key, partition, 1, state)
    asyncio.run(flush(store))
    store.write(b"D", 0, 2, store.read(b"D"))  # changed since the flush
    assert sorted(store.symbols_in(0)) == [b"A", b"C", b"D"]
    assert store.symbols_in(1) == [b"B"]
    scanned = [key for key in store.keys_in(0) if b"\x00" not in key]  # a scan, slots too
    assert len(store.keys_in(0)) > 10 and sorted(scanned) == sorted(store.symbols_in(0))
    restored = ShadowStore(Changelog("t-shadow-state-changelog", io), 50)
    asyncio.run(restored.restore(0, 2))
    assert sorted(restored.symbols_in(0)) == [b"A", b"C"] and restored.symbols_in(1) == []
    restored.forget()
    assert restored.symbols_in(0) == []


@pytest.mark.parametrize("between", [2, 35])  # rows scored before the next flush
def test_a_window_started_afresh_is_stored_whole_and_restores_as_it_is(between: int) -> None:
    """Another checkpoint serves a restored symbol: its baselines' skill window starts afresh,
    and every slot it fills is written, not only those past the old window's count (a
    restart would load the old checkpoint's rows into them)."""
    io = MemoryChangelogs()

    async def run() -> tuple[SymbolShadow, SymbolShadow]:
        await scored(ShadowStore(Changelog("t-shadow-state-changelog", io), 20), 1, 30, "A")
        second = ShadowStore(Changelog("t-shadow-state-changelog", io), 20)
        await second.restore(0, boundary=2)
        state = await scored(second, 2, between, "B")
        third = ShadowStore(Changelog("t-shadow-state-changelog", io), 20)
        await third.restore(0, boundary=3)
        return state, third.read(b"s")

    live, restored = asyncio.run(run())
    assert live.window.count == between and restored.window == live.window


async def scored(
    store: ShadowStore, offset: int, n: int, model_id: str | None = None
) -> SymbolShadow:
    """Symbol `s`'s shadow state in `store`, serving `model_id` (if given), with `n` more
    scored rows in its window, written at source `offset` and flushed."""
    state = store.read(b"s")
    if model_id is not None:
        state.serve(model_id)
    for row in rows(n, offset):
        state.window.append(row)
    store.write(b"s", 0, offset, state)
    await flush(store)
    return state
