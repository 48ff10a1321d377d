"""The bar format (features.bars): float prices to DBN fixed point."""

from __future__ import annotations

import numpy as np

from features.bars import UNDEF_PRICE, to_fixed


def test_a_price_fixed_point_cannot_hold_is_undefined_not_wrapped_negative() -> None:
    """An infinity or a price of 9.3e9 and up would wrap past int64 to a negative number, and
    the corrections would name the wrong fault (nonpositive): it is undefined, as NaN is."""
    prices = np.array([1.5, -1.0, 9.2e9, np.nan, np.inf, -np.inf, 9.3e9, -9.3e9])
    fixed = to_fixed(prices)
    assert fixed[:3].tolist() == [1_500_000_000, -1_000_000_000, 9_200_000_000 * 10**9]
    assert (fixed[3:] == UNDEF_PRICE).all()
