"""Fixtures of the serving tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features import engine as feature_engine


@pytest.fixture(scope="module")
def feature_rows(sixe_bars: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bars = sixe_bars.iloc[:1200]
    values, warm = feature_engine.compute_batch(
        bars["ts_event"].to_numpy(),
        *(bars[c].to_numpy() for c in ("open", "high", "low", "close", "volume")),
        np.zeros(len(bars), dtype=np.bool_),
    )
    first = int(np.argmax(warm))
    return values[first:], bars["ts_event"].to_numpy()[first:], bars["close"].to_numpy()[first:]
