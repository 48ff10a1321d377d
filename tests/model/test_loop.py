"""The training loop: every epoch draws its windows from the whole history."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from model.config import AUTO_EPOCH_WINDOWS, TrainConfig
from model.loop import epoch_order


def test_every_epoch_draws_its_windows_from_the_whole_history() -> None:
    """A partial epoch (`windows_per_epoch`) samples every decile of the history about
    equally, each epoch other windows; a full epoch holds every window once."""
    ends = np.arange(100_000, dtype=np.int64)
    rng = np.random.default_rng(0)
    first = epoch_order(ends, 8, rng)[:20_000]
    per_decile = np.histogram(first, bins=10, range=(0, len(ends)))[0]
    assert per_decile.min() > 1_700 and per_decile.max() < 2_300
    second = epoch_order(ends, 8, rng)[:20_000]
    assert len(np.intersect1d(first, second)) < 5_000  # about 20 % by chance
    np.testing.assert_array_equal(np.sort(epoch_order(ends, 8, rng)), ends)


def test_an_epoch_scales_with_the_training_windows() -> None:
    """By default an epoch is a tenth of the training windows within AUTO_EPOCH_WINDOWS, all of
    them when fewer; a windows_per_epoch given is taken as it is, capped at the windows there."""
    recipe = TrainConfig()
    low, high = AUTO_EPOCH_WINDOWS
    assert recipe.epoch_windows(5_000) == 5_000
    assert recipe.epoch_windows(150_000) == low
    assert recipe.epoch_windows(700_000) == 70_000
    assert recipe.epoch_windows(5_000_000) == high
    assert replace(recipe, windows_per_epoch=3_000).epoch_windows(700_000) == 3_000
    assert replace(recipe, windows_per_epoch=3_000).epoch_windows(1_000) == 1_000
