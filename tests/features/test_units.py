"""features.units: exactly the listed features scale with the size of the price path's moves."""

from __future__ import annotations

import numpy as np
import pandas as pd

from features import units
from features.engine import FEATURE_NAMES, compute_batch


def bars(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    out = {c: frame[c].to_numpy() for c in frame.columns}
    out["synthetic"] = np.zeros(len(frame), dtype=bool)
    return out


def scaled_ratio(sixe_bars: pd.DataFrame, k: float) -> dict[str, np.ndarray]:
    """Each feature's values on the path with every log move times k, over its values on the
    real path (where the latter is not ~0)."""
    b = bars(sixe_bars)
    c0 = b["close"][0]

    def stretched(x: np.ndarray) -> np.ndarray:
        return c0 * np.exp(k * np.log(x / c0))

    args = (b["ts_event"], b["open"], b["high"], b["low"], b["close"], b["volume"])
    base, warm = compute_batch(*args, b["synthetic"])
    moved, _ = compute_batch(
        args[0],
        *(stretched(b[c]) for c in ("open", "high", "low", "close")),
        args[5],
        b["synthetic"],
    )
    out = {}
    for i, name in enumerate(FEATURE_NAMES):
        a, m = base[warm, i], moved[warm, i]
        ok = np.isfinite(a) & np.isfinite(m) & (np.abs(a) > 1e-12)
        out[name] = m[ok] / a[ok]
    return out


def test_exactly_the_listed_features_are_in_return_units(sixe_bars: pd.DataFrame) -> None:
    ratios = scaled_ratio(sixe_bars, 2.0)
    listed = set(units.VOLATILITY_LEVELS) | set(units.RETURN_SIZED)
    assert listed <= set(FEATURE_NAMES) and units.REFERENCE in units.VOLATILITY_LEVELS
    assert not set(units.VOLATILITY_LEVELS) & set(units.RETURN_SIZED)
    for name, r in ratios.items():
        follows = len(r) > 100 and bool(np.all(np.abs(np.percentile(r, [5, 50, 95]) - 2.0) < 0.2))
        assert follows == (name in listed), name


def test_volatility_levels_are_never_negative(sixe_bars: pd.DataFrame) -> None:
    b = bars(sixe_bars)
    values, warm = compute_batch(
        *(b[c] for c in ("ts_event", "open", "high", "low", "close", "volume", "synthetic"))
    )
    for name in units.VOLATILITY_LEVELS:
        assert (values[warm, FEATURE_NAMES.index(name)] >= 0).all(), name
