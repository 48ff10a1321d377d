"""The forecast stage's per-symbol windows: order after the ring wraps, and their stored form."""

from __future__ import annotations

import numpy as np

from model.serving.windows import SymbolWindow, meta_layout

LOOKBACK, FEATURES = 5, 3


def filled(rows: int) -> SymbolWindow:
    window = SymbolWindow(LOOKBACK, FEATURES)
    for row in range(1, rows + 1):
        window.append(row * 60, 1.0 + row, row % 3 == 0, row > 2, np.full(FEATURES, float(row)))
    return window


def test_ordered_values_are_the_last_rows_oldest_first_whatever_the_ring_position() -> None:
    for rows in range(LOOKBACK, 3 * LOOKBACK + 1):
        window = filled(rows)
        expected = np.repeat(np.arange(rows - LOOKBACK + 1, rows + 1, dtype=float), FEATURES)
        assert np.array_equal(window.ordered_values(), expected.reshape(LOOKBACK, FEATURES))
        assert window.last_ts == rows * 60
        assert list(window.rows()) == list(range(rows - LOOKBACK + 1, rows + 1))


def test_ordered_values_are_a_copy() -> None:
    window = filled(LOOKBACK + 2)
    values = window.ordered_values()
    window.append(10_000, 1.0, False, True, np.zeros(FEATURES))
    assert values[-1, 0] == LOOKBACK + 2


def test_a_window_rebuilt_from_its_stored_rows_is_identical() -> None:
    window = filled(2 * LOOKBACK + 3)
    rebuilt = SymbolWindow(LOOKBACK, FEATURES)
    rebuilt.load_meta(window.meta_bytes("f"))
    for row in rebuilt.rows():
        slot = window.slot_of(row)
        rebuilt.load_slot(rebuilt.slot_of(row), window.slot_bytes(slot))
    assert np.array_equal(rebuilt.ordered_values(), window.ordered_values())
    for name in ("ts_event", "close", "synthetic", "warm"):
        assert np.array_equal(getattr(rebuilt, name), getattr(window, name)), name
    assert rebuilt.count == window.count and rebuilt.all_warm == window.all_warm


def test_a_window_meta_says_its_feature_set_and_lookback_and_reads_older_metas() -> None:
    window = filled(LOOKBACK + 1)
    assert meta_layout(window.meta_bytes("f")) == ("f", LOOKBACK)
    older = window.meta_bytes("f").rsplit(b"\x00", 1)[0]  # as stored before windows said
    assert meta_layout(older) == ("f", None)
    rebuilt = SymbolWindow(LOOKBACK, FEATURES)
    rebuilt.load_meta(older)
    assert rebuilt.count == LOOKBACK + 1
