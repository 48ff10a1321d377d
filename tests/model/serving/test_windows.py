"""The forecast stage's per-symbol windows: order after the ring wraps and the buffer moves,
views that later rows leave as they are, and their stored form."""

from __future__ import annotations

import numpy as np
import pytest

from model.serving.windows import SymbolWindow, meta_layout

LOOKBACK, FEATURES = 5, 3


def filled(rows: int) -> SymbolWindow:
    window = SymbolWindow(LOOKBACK, FEATURES)
    for row in range(1, rows + 1):
        window.append(row * 60, 1.0 + row, row % 3 == 0, row > 2, np.full(FEATURES, float(row)))
    return window


def rows_of(first: int, last: int) -> np.ndarray:
    return np.repeat(np.arange(first, last + 1, dtype=float), FEATURES).reshape(-1, FEATURES)


def test_latest_is_the_last_rows_oldest_first_whatever_the_ring_and_buffer_position() -> None:
    for rows in range(1, 5 * LOOKBACK + 1):
        window = filled(rows)
        assert np.array_equal(window.latest(), rows_of(max(1, rows - LOOKBACK + 1), rows))
        assert window.last_ts == rows * 60
        assert list(window.rows()) == list(range(max(1, rows - LOOKBACK + 1), rows + 1))


def test_a_view_stays_as_it_was_while_rows_come_and_the_buffer_moves() -> None:
    window = filled(LOOKBACK + 2)
    views = {}
    for row in range(LOOKBACK + 3, 6 * LOOKBACK):  # several moves to a new buffer
        views[row - 1] = window.latest()
        window.append(row * 60, 1.0, False, True, np.full(FEATURES, float(row)))
    for last, view in views.items():
        assert np.array_equal(view, rows_of(last - LOOKBACK + 1, last)), last


def test_a_view_is_read_only() -> None:
    view = filled(LOOKBACK + 2).latest()
    with pytest.raises(ValueError, match="read-only"):
        view[0, 0] = 0.0


@pytest.mark.parametrize("rows", range(1, 4 * LOOKBACK))
def test_a_window_rebuilt_from_its_stored_rows_is_identical_and_goes_on_alike(rows: int) -> None:
    window = filled(rows)
    rebuilt = SymbolWindow(LOOKBACK, FEATURES)
    rebuilt.load_meta(window.meta_bytes("f"))
    for row in rebuilt.rows():
        slot = window.slot_of(row)
        rebuilt.load_slot(rebuilt.slot_of(row), window.slot_bytes(slot))
    for row in range(rows + 1, rows + 2 * LOOKBACK):
        assert np.array_equal(rebuilt.latest(), window.latest())
        for name in ("ts_event", "close", "synthetic", "warm"):
            assert np.array_equal(getattr(rebuilt, name), getattr(window, name)), name
        assert rebuilt.count == window.count and rebuilt.all_warm == window.all_warm
        for each in (window, rebuilt):
            each.append(row * 60, 1.0, False, True, np.full(FEATURES, float(row)))


def test_a_window_meta_says_its_feature_set_and_lookback_and_reads_older_metas() -> None:
    window = filled(LOOKBACK + 1)
    assert meta_layout(window.meta_bytes("f")) == ("f", LOOKBACK)
    older = window.meta_bytes("f").rsplit(b"\x00", 1)[0]  # as stored before windows said
    assert meta_layout(older) == ("f", None)
    rebuilt = SymbolWindow(LOOKBACK, FEATURES)
    rebuilt.load_meta(older)
    assert rebuilt.count == LOOKBACK + 1
