"""The training loop: every epoch draws its windows from the whole history."""

from __future__ import annotations

import numpy as np

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
