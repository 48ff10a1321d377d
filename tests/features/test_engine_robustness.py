"""Real and hostile inputs: DBN files, flat prices, zero volume, synthetic gap fills, a series's
first bars, other price levels, and the exchange clock across DST changes."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import databento as db
import numpy as np
import pandas as pd
import pytest

from features import engine, micro, volume

COLUMNS = ("ts_event", "open", "high", "low", "close", "volume")
INDEX = {name: i for i, name in enumerate(engine.FEATURE_NAMES)}
WARMUPS = np.array(engine.WARMUPS)
MINUTE = 60_000_000_000
CHICAGO = ZoneInfo("America/Chicago")


def assert_finite_after_warmup(values: np.ndarray, bar_index: np.ndarray) -> None:
    """Feature j of a row is finite iff the row is the symbol's bar WARMUPS[j] or later."""
    defined = bar_index[:, None] >= WARMUPS[None, :]
    assert np.isfinite(values[defined]).all(), [
        engine.FEATURE_NAMES[j] for j in np.where((~np.isfinite(values) & defined).any(0))[0]
    ]
    assert np.isnan(values[~defined]).all()


@pytest.mark.filterwarnings("ignore:The inplace keyword")  # inside databento's to_df (pandas 3)
def test_dbn_files_stream_finite_features(dbn_files: list[Path]) -> None:
    ohlcv = [p for p in dbn_files if "ohlcv" in p.name]
    assert len(ohlcv) >= 3
    for path in ohlcv:
        frame = db.DBNStore.from_file(path).to_df(price_type="float").reset_index()
        ids = frame["instrument_id"].to_numpy()
        symbols = {s: row for row, s in enumerate(np.unique(ids))}
        rows = np.array([symbols[s] for s in ids], dtype=np.int64)
        ts = frame["ts_event"].astype("int64").to_numpy()
        prices = [frame[c].to_numpy(dtype=np.float64) for c in COLUMNS[1:]]
        states = engine.new_states(len(symbols))
        values, warm = engine.update_many(states, rows, ts, *prices, np.zeros(len(ts), bool))
        bar_index = np.array([np.sum(rows[:i] == r) for i, r in enumerate(rows)])
        assert_finite_after_warmup(values, bar_index)
        assert not warm.any()  # at most 30 bars per symbol: nothing is fully warm yet


@pytest.mark.parametrize("vol", [0.0, 25.0])
def test_flat_prices_and_constant_volume(vol: float) -> None:
    n = 400
    ts = 1_704_150_000 * 10**9 + np.arange(n, dtype=np.int64) * MINUTE
    flat = np.full(n, 1.0875)
    values, warm = engine.compute_batch(ts, flat, flat, flat, flat, np.full(n, vol))
    assert_finite_after_warmup(values, np.arange(n))
    last = values[-1]
    assert last[INDEX["rv_20"]] == 0.0 and last[INDEX["ret_1"]] == 0.0
    assert last[INDEX["rsi_14"]] == 0.0  # TA-Lib's answer when there was neither gain nor loss
    assert last[INDEX["stoch_k_14"]] == 0.5 and last[INDEX["bb_pctb_20"]] == 0.5
    assert last[INDEX["vol_ratio_20"]] == (1.0 if vol else 0.0)
    assert warm[-1]


def with_gap_fills(bars: pd.DataFrame, max_gap: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The bars with every missing minute (gaps up to max_gap) filled by a synthetic bar."""
    ts = bars["ts_event"].to_numpy()
    out = {c: [] for c in COLUMNS}
    synthetic = []
    for i in range(len(ts)):
        missing = (ts[i] - ts[i - 1]) // MINUTE - 1 if i else 0
        for k in range(1, missing + 1 if missing <= max_gap else 1):
            close = out["close"][-1]
            fill = (ts[i - 1] + k * MINUTE, close, close, close, close, 0.0)
            for c, x in zip(COLUMNS, fill, strict=True):
                out[c].append(x)
            synthetic.append(True)
        for c in COLUMNS:
            out[c].append(bars[c].iat[i])
        synthetic.append(False)
    cols = [np.array(out[c], dtype=np.int64 if c == "ts_event" else np.float64) for c in COLUMNS]
    return cols, np.array(synthetic)


def test_synthetic_gap_fills_are_finite_and_leave_volume_features_alone(
    sixe_bars: pd.DataFrame,
) -> None:
    bars = sixe_bars.iloc[:8000]
    cols, synthetic = with_gap_fills(bars, max_gap=30)
    assert synthetic.sum() > 60
    filled, _ = engine.compute_batch(*cols, synthetic)
    assert_finite_after_warmup(filled, np.arange(len(synthetic)))
    plain, _ = engine.compute_batch(*(bars[c].to_numpy() for c in COLUMNS))
    volume_based = [
        INDEX["log_volume"],
        INDEX["dlog_volume"],
        *range(volume.FIRST, volume.FIRST + volume.N),
        *(micro.FIRST + k for k in micro.FLOW_OUT),
        INDEX["z_volume_60"],
    ]
    real = filled[~synthetic][:, volume_based]
    expected = plain[:, volume_based]
    # warm-ups count all bars, so with gap fills a few more early values are defined
    defined = ~np.isnan(expected)
    assert np.array_equal(real[defined], expected[defined])
    # on a gap fill the volume-based features repeat the previous bar's; the bar's own volume is 0
    fills = np.where(synthetic)[0]
    held = volume_based[2:]
    assert np.array_equal(filled[fills][:, held], filled[fills - 1][:, held], equal_nan=True)
    assert (filled[fills][:, volume_based[:2]] == 0.0).all()
    assert (filled[fills][:, INDEX["synthetic"]] == 1.0).all()


@pytest.mark.parametrize("n", [1, 2, 5, 40])
def test_first_bars_of_a_series(sixe_bars: pd.DataFrame, n: int) -> None:
    cols = [sixe_bars[c].to_numpy()[:n] for c in COLUMNS]
    values, warm = engine.compute_batch(*cols)
    assert values.shape == (n, engine.N_FEATURES) and not warm.any()
    assert_finite_after_warmup(values, np.arange(n))


@pytest.mark.parametrize("scale", [4096.0, 1.0 / 128.0])
def test_features_are_scale_free(sixe_bars: pd.DataFrame, scale: float) -> None:
    """The same moves at an ES-like (4400) or JPY-like (0.0085) price level give the same
    features. A power-of-two scale keeps every price difference and tie exact, so only the
    logs' rounding differs; threshold events (CUSUM, flat/up/down) may flip on it."""
    bars = sixe_bars.iloc[:6000]
    base, _ = engine.compute_batch(*(bars[c].to_numpy() for c in COLUMNS))
    scaled_cols = [bars[c].to_numpy() * (scale if c in COLUMNS[1:5] else 1) for c in COLUMNS]
    scaled, _ = engine.compute_batch(*scaled_cols)
    w = engine.MAX_WARMUP
    share = np.isclose(scaled[w:], base[w:], rtol=1e-6, atol=1e-9).mean(axis=0)
    flipped = {engine.FEATURE_NAMES[j]: s for j, s in enumerate(share) if s < 0.98}
    assert not flipped
    assert share.mean() > 0.999


def central_reference(ts_ns: int) -> dict[str, float]:
    local = datetime.fromtimestamp(ts_ns / 1e9, CHICAGO)
    minute = local.hour * 60 + local.minute
    trade_date = local.date() + timedelta(days=1 if minute >= 17 * 60 else 0)
    angle = 2 * np.pi * minute / 1440
    return {
        "tod_sin": np.sin(angle),
        "tod_cos": np.cos(angle),
        "us_dst": float(bool(local.dst())),
        "session_elapsed": min((minute - 17 * 60) % 1440, 1380) / 1380,
        "dow_sin": np.sin(2 * np.pi * trade_date.weekday() / 7),
        "region_us": float(8 * 60 + 30 <= minute < 16 * 60),
        "moy_cos": np.cos(2 * np.pi * (trade_date.month - 1) / 12),
    }


def test_exchange_clock_matches_zoneinfo_across_dst() -> None:
    edges = [
        "2024-03-10 07:59",
        "2024-03-10 08:00",
        "2024-11-03 06:59",
        "2024-11-03 07:00",
        "2006-04-02 07:59",
        "2006-04-02 08:00",
        "2006-10-29 06:59",
        "2006-10-29 07:00",
        "2024-01-07 23:00",
        "2024-02-29 22:59",
        "1999-12-31 23:59",
    ]
    rng = np.random.default_rng(3)
    random = rng.integers(567_993_600, 2_145_916_800, size=3000) * 10**9  # 1988 .. 2037
    ts = np.unique(np.concatenate([pd.to_datetime(edges, utc=True).as_unit("ns").asi8, random]))
    ts = ts - ts % MINUTE
    ts = np.unique(ts)
    price = np.full(len(ts), 100.0)
    values, _ = engine.compute_batch(ts, price, price, price, price, np.ones(len(ts)))
    for i, t in enumerate(ts):
        for name, expected in central_reference(int(t)).items():
            assert values[i, INDEX[name]] == pytest.approx(expected, abs=1e-12), (name, t)
