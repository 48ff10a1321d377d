"""Windows, splits and the embargo, leakage, normalization, labels and covariates."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from model.bar_files import DataError, load_bars
from model.covariates import (
    FUTURE_NAMES,
    N_FUTURE,
    AssetClass,
    SymbolVocab,
    future_covariates,
    product_root,
    static_reals,
)
from model.dataset import (
    TRAINING_DTYPE,
    Part,
    Split,
    WindowData,
    build_panel,
    fit_normalizer,
    forward_returns,
    input_rows,
    labels_over_gap_fills,
    panel_from_arrays,
    window_ends,
)
from model.normalization import Normalizer, Relative
from model.synthetic import START_NS, random_walk_bars, synthetic_panel
from model.volatility import TimeOfDayProfile, VolatilityScale

LOOKBACK, HORIZON = 20, 5
MIN = 60_000_000_000


def splits(panel, embargo: int = LOOKBACK + HORIZON) -> tuple[Split, dict[Part, np.ndarray]]:
    split = Split.from_fractions(panel.ts, 0.2, 0.15, 0.2, embargo)
    return split, {p: window_ends(panel, split, p, LOOKBACK, HORIZON) for p in Part}


def window_rows(ends: np.ndarray) -> np.ndarray:
    """Every row a window touches: inputs and label."""
    return ends[:, None] + np.arange(-LOOKBACK + 1, HORIZON + 1)


def test_embargo_separates_every_split() -> None:
    panel = synthetic_panel(n_bars=1500, symbols=("ESH4", "NQH4"), horizon=HORIZON)
    split, ends = splits(panel)
    parts = split.part_of(panel.ts)
    symbol = panel.row_symbol
    for part, e in ends.items():
        assert len(e) > 100
        rows = window_rows(e)
        assert np.all(parts[rows] == part), "a window crosses a split boundary"
        assert np.all(symbol[rows] == symbol[e][:, None]), "a window mixes symbols"
    for earlier, later in ((Part.TRAIN, Part.VAL), (Part.VAL, Part.CALIB), (Part.CALIB, Part.TEST)):
        for s in range(2):
            last = window_rows(ends[earlier][symbol[ends[earlier]] == s]).max()
            first = window_rows(ends[later][symbol[ends[later]] == s]).min()
            assert first - last > LOOKBACK + HORIZON


def test_embargo_shorter_than_a_window_is_refused() -> None:
    panel = synthetic_panel(n_bars=500, horizon=HORIZON)
    with pytest.raises(DataError, match="embargo"):
        splits(panel, embargo=LOOKBACK + HORIZON - 1)


def test_planted_marker_never_reaches_validation() -> None:
    """Each row carries its own index as a marker feature; the rows and labels that training
    windows use and those validation windows use are disjoint, and so are their markers."""
    panel = synthetic_panel(n_bars=1200, n_features=4, horizon=HORIZON)
    panel.features[:, 3] = np.arange(len(panel.ts))
    _, ends = splits(panel)
    normalizer = Normalizer(np.zeros(4), np.ones(4), clip=1e9)
    volatility = VolatilityScale(TimeOfDayProfile.flat(), columns=(0, 1, 1, 2, 2, 2, 2), floor=1e-6)
    data = WindowData(panel, normalizer, SymbolVocab(("ES",)), LOOKBACK, HORIZON, 1.0, volatility)
    seen = {}
    for part in (Part.TRAIN, Part.VAL):
        batch = data.batch(ends[part])
        markers = set(batch.x_hist[..., 3].flatten().int().tolist())
        label_rows = set((ends[part][:, None] + np.arange(1, HORIZON + 1)).ravel().tolist())
        seen[part] = markers | label_rows
    assert not seen[Part.TRAIN] & seen[Part.VAL]
    # Planting a huge return right after training's last label must not move any train label.
    last_label = window_rows(ends[Part.TRAIN]).max()
    panel.close[last_label + 1 :] *= 2.0
    moved = forward_returns(panel.ts, panel.close, HORIZON)
    np.testing.assert_array_equal(moved[ends[Part.TRAIN]], panel.targets[ends[Part.TRAIN]])


def test_a_batch_drops_its_symbols_all_together_or_not_at_all() -> None:
    """Its windows share rows, each encoded once with one window's symbol context: a symbol
    dropped for some windows only would reach the rows its neighbours share."""
    panel = synthetic_panel(n_bars=600, n_features=4, horizon=HORIZON)
    normalizer = Normalizer(np.zeros(4), np.ones(4), clip=1e9)
    volatility = VolatilityScale(TimeOfDayProfile.flat(), columns=(0, 1, 1, 2, 2, 2, 2), floor=1e-6)
    data = WindowData(panel, normalizer, SymbolVocab(("ES",)), LOOKBACK, HORIZON, 1.0, volatility)
    batch = data.batch(splits(panel)[1][Part.TRAIN][:8])  # consecutive windows: shared rows
    torch.manual_seed(0)
    draws = [batch.symbols_dropped(0.3).tolist() for _ in range(400)]
    assert {tuple(d) for d in draws} == {(0,) * 8, tuple(batch.symbol.tolist())}
    assert 0.2 < sum(d[0] == 0 for d in draws) / len(draws) < 0.4
    assert batch.symbol.tolist() == [1] * 8  # "ES", known: unchanged by the draws


def test_normalizer_is_fitted_on_training_rows_only() -> None:
    panel = synthetic_panel(n_bars=1200, n_features=5, horizon=HORIZON)
    split, ends = splits(panel)
    parts = split.part_of(panel.ts)
    panel.features[parts != Part.TRAIN, 2] = 1e6  # a regime change the model must not see
    panel.features[:, 4] = 7.0  # zero variance
    normalizer = fit_normalizer(panel, ends[Part.TRAIN], LOOKBACK)
    assert abs(normalizer.center[2]) < 1 and normalizer.scale[2] < 10
    assert normalizer.ignored.tolist() == [False, False, False, False, True]
    panel.features[parts != Part.TRAIN, 4] = 9.0  # serving sees a value training never did
    z = normalizer.apply(panel.features)
    assert z.dtype == np.float32 and np.all(np.isfinite(z))
    assert np.all(z[:, 4] == 0) and z[parts != Part.TRAIN, 2].max() == normalizer.clip
    assert normalizer.apply(np.full((1, 5), np.nan)).tolist() == [[0.0] * 5]
    restored = Normalizer.from_dict(normalizer.to_dict())
    np.testing.assert_array_equal(restored.apply(panel.features), z)


def test_return_unit_features_are_stated_relative_to_the_rows_slow_volatility() -> None:
    """A calm and a wild market, or ES and 6E, feed the network the same inputs when only the
    size of the moves differs: every return-unit feature and the reference times k give the
    same normalized row; the other features are left as they are."""
    names = ("ewma_vol_week", "rv_5", "ret_1", "tod_sin")
    rng = np.random.default_rng(3)
    calm = np.column_stack(
        [
            rng.uniform(1e-4, 2e-4, 500),
            rng.uniform(0.0, 3e-4, 500),
            rng.normal(0.0, 1e-4, 500),
            rng.uniform(-1.0, 1.0, 500),
        ]
    )
    wild = calm * np.array([7.0, 7.0, 7.0, 1.0])
    relative = Relative.of(names)
    assert (relative.reference, relative.log_ratio.tolist(), relative.ratio.tolist()) == (
        0,
        [1, 0],
        [2],
    )
    normalizer = Normalizer.fit(calm, relative=relative)
    np.testing.assert_allclose(normalizer.apply(wild), normalizer.apply(calm), atol=1e-5)
    assert normalizer.ignored.tolist() == [True, False, False, False]  # log(ref / ref) = 0
    restored = Normalizer.from_dict(normalizer.to_dict())
    np.testing.assert_array_equal(restored.apply(wild), normalizer.apply(wild))
    before = {k: v for k, v in normalizer.to_dict().items() if k not in ("reference", "ratio")}
    assert Normalizer.from_dict(before).relative.reference == -1  # a checkpoint saved before
    flat = calm.copy()
    flat[:, 1] = 0.0  # five bars without a move: the floor, not -inf
    assert np.isfinite(normalizer.apply(flat)).all()


def test_date_features_whose_cycle_training_does_not_span_are_left_out() -> None:
    """A model trained on part of a month has seen day-of-month values only up to its last
    training day: serving would feed its untrained weights values it never saw."""
    panel = synthetic_panel(n_bars=1200, n_features=4, horizon=HORIZON)
    names = ("dow_sin", "dom_frac", "moy_cos", "tod_sin")
    ends = np.arange(LOOKBACK, len(panel.ts))
    for minutes, left_out in ((1, [True, True, True, False]), (12, [False, True, True, False])):
        ts = START_NS + np.arange(len(panel.ts)) * minutes * MIN  # a day, then ten days
        spread = replace(panel, ts=ts, feature_names=names)
        normalizer = fit_normalizer(spread, ends, LOOKBACK)
        assert normalizer.ignored.tolist() == left_out
        assert not normalizer.apply(spread.features)[:, np.array(left_out)].any()


def test_labels_are_cumulative_log_returns_and_stop_at_gaps() -> None:
    ts = START_NS + np.array([0, 1, 2, 3, 70, 71, 72]) * MIN
    close = np.array([100.0, 101.0, 99.0, 100.0, 105.0, 104.0, 104.0])
    y = forward_returns(ts, close, 2)
    np.testing.assert_allclose(y[0], [np.log(1.01), np.log(0.99)])
    assert np.isnan(y[2, 1]) and np.isnan(y[3]).all(), "labels must not span the 66-min gap"
    np.testing.assert_allclose(y[4], [np.log(104 / 105), np.log(104 / 105)])
    assert np.isnan(y[6]).all()


def test_cold_rows_start_no_window() -> None:
    panel = synthetic_panel(n_bars=600, horizon=HORIZON)
    panel.warm[:100] = False
    panel.warm[300] = False
    end = int(panel.ts.max()) + 1
    split = Split(train_end=end, val_end=end, calib_end=end, embargo=25)
    ends = window_ends(panel, split, Part.TRAIN, LOOKBACK, HORIZON)
    rows = ends[:, None] + np.arange(-LOOKBACK + 1, 1)
    assert panel.warm[rows].all() and ends.min() == 100 + LOOKBACK - 1


def test_no_window_ends_on_a_gap_fill_and_gap_labels_are_flagged() -> None:
    panel = synthetic_panel(n_bars=400, horizon=HORIZON)
    panel.synthetic[[150, 151, 152]] = True
    end = int(panel.ts.max()) + 1
    split = Split(train_end=end, val_end=end, calib_end=end, embargo=25)
    ends = window_ends(panel, split, Part.TRAIN, LOOKBACK, HORIZON)
    assert not np.isin([150, 151, 152], ends).any() and np.isin([149, 153], ends).all()
    over = labels_over_gap_fills(panel, ends, HORIZON)
    assert set(ends[over]) == {145, 146, 147, 148, 149}


def test_split_fractions_count_bars_not_time() -> None:
    """A weekend inside the span moves no boundary: each part holds its share of the bars."""
    panel = synthetic_panel(n_bars=1000, horizon=HORIZON)
    ts = panel.ts.copy()
    ts[500:] += 2 * 24 * 60 * MIN
    split = Split.from_fractions(ts, 0.1, 0.1, 0.25, 30)
    counts = np.bincount(split.part_of(ts), minlength=4) / len(ts)
    np.testing.assert_allclose(counts, [0.55, 0.1, 0.1, 0.25], atol=0.002)


def test_static_covariates_from_the_symbol() -> None:
    assert product_root("6EH4") == "6E" and product_root("ZNH24") == "ZN"
    assert product_root("ESU4") == "ES" and product_root("ESU4-ESZ4") == "ESU4-ESZ4"
    six_e = static_reals("6EH4")
    assert six_e[AssetClass.FX] == 1 and six_e[: len(AssetClass)].sum() == 1
    assert six_e[len(AssetClass)] == pytest.approx(np.log10(0.00005))
    assert static_reals("XYZH4")[AssetClass.OTHER] == 1
    vocab = SymbolVocab.from_symbols(["ESU4", "NQU4", "ESH4"])
    ids, reals = vocab.encode(["ESZ4", "NQU4", "CLZ4"])
    assert vocab.size == 3 and ids.tolist() == [1, 2, 0] and reals.shape == (3, 9)


def test_future_covariates_follow_exchange_time() -> None:
    # 13:29 UTC is 07:29 in Chicago in January (CST) and 08:29 in July (CDT).
    winter = int(np.datetime64("2024-01-10T13:29", "ns").astype(np.int64))
    summer = int(np.datetime64("2024-07-10T13:29", "ns").astype(np.int64))
    cov = future_covariates(np.array([winter, summer]), 3)
    assert cov.shape == (2, 3, N_FUTURE) and cov.dtype == np.float32
    rth = FUTURE_NAMES.index("us_regular_hours")
    assert cov[0, :, rth].tolist() == [0, 0, 0]  # 07:30..07:32 CST
    assert cov[1, :, rth].tolist() == [1, 1, 1]  # 08:30..08:32 CDT
    step = FUTURE_NAMES.index("horizon_step")
    np.testing.assert_allclose(cov[0, :, step], [1 / 3, 2 / 3, 1])


def test_panel_concatenates_symbols_in_order() -> None:
    ts = START_NS + np.arange(4) * MIN
    rows = [
        (ts, np.full(4, 1.0 + i), np.full((4, 2), float(i)), np.ones(4, bool)) for i in range(2)
    ]
    panel = panel_from_arrays(["A", "B"], rows, 1)
    assert panel.offsets.tolist() == [0, 4, 8]
    assert panel.row_symbol.tolist() == [0] * 4 + [1] * 4
    assert np.isnan(panel.targets[3, 0]) and panel.targets[0, 0] == 0.0


def test_bars_load_from_dbn_and_csv_through_the_corrections(
    dbn_files: list[Path], sixe_csv: Path, tmp_path: Path
) -> None:
    ohlcv = [p for p in dbn_files if "ohlcv" in p.name]
    bars, report = load_bars(ohlcv)
    assert {b.symbol: len(b) for b in bars} == {
        "ESH1": 4,
        "ESM4": 10,
        "ESU4": 30,
        "NQM4": 10,
        "NQU4": 30,
    }
    assert report["raw_bars"] == 84 and report["corrections"]["clean"] == 84
    es = next(b for b in bars if b.symbol == "ESU4")
    assert np.all(np.diff(es.ts_event) == MIN) and 1000 < es.close[0] < 10_000
    with pytest.raises(DataError, match="ohlcv-1m"):
        load_bars([p for p in dbn_files if "definition" in p.name])
    (tmp_path / "bars.parquet").touch()
    with pytest.raises(DataError, match="unknown format"):
        load_bars([tmp_path / "bars.parquet"])
    with gzip.open(sixe_csv, "rt") as f:
        lines = f.read().splitlines()[:200]
    (tmp_path / "6EH4.part.csv").write_text("\n".join(lines) + "\n")
    (six_e,), report = load_bars([tmp_path / "6EH4.part.csv"])
    assert six_e.symbol == "6EH4" and report["raw_bars"] == 199
    # the CSV stamps bar closes; ts_event is the bar open, one minute earlier
    assert six_e.ts_event[0] == np.datetime64("2024-01-01T23:00", "ns").astype(np.int64)
    assert len(six_e) == 199 + report["corrections"]["synthetic"]


def test_features_computed_in_chunks_equal_one_pass_and_train_in_float32() -> None:
    from features.engine import compute_batch

    bars = [random_walk_bars("ESH4", 700, 0), random_walk_bars("NQH4", 500, 1)]
    whole = build_panel(bars, HORIZON, np.float64, chunk=10**6)
    chunked = build_panel(bars, HORIZON, np.float64, chunk=97)
    small = build_panel(bars, HORIZON, TRAINING_DTYPE, chunk=97)
    values, warm = compute_batch(*(getattr(bars[1], f) for f in BAR_FIELDS))
    np.testing.assert_array_equal(whole.features[700:], values)
    np.testing.assert_array_equal(whole.warm[700:], warm)
    np.testing.assert_array_equal(chunked.features, whole.features)
    assert small.features.dtype == np.float32 and whole.features.dtype == np.float64
    np.testing.assert_array_equal(small.features, whole.features.astype(np.float32))
    np.testing.assert_array_equal(small.targets, whole.targets)
    assert small.offsets.tolist() == [0, 700, 1200] and small.symbols == ["ESH4", "NQH4"]


BAR_FIELDS = ("ts_event", "open", "high", "low", "close", "volume", "synthetic")


def test_normalization_fitted_feature_block_by_block_equals_one_fit() -> None:
    """With relative features in other blocks than their reference column (ret_1 and the
    EWMA volatilities among the scale's inputs, two more renamed), a NaN and a constant."""
    panel = synthetic_panel(n_bars=1500, n_features=37, horizon=HORIZON, dtype=np.float32)
    names = list(panel.feature_names)
    names[20], names[33] = "roc_5", "rv_20"
    panel = replace(panel, feature_names=tuple(names))
    panel.features[:, [20, 33]] = np.abs(panel.features[:, [20, 33]])
    panel.features[::5, 3] = np.nan
    panel.features[:, 30] = 2.0
    _, ends = splits(panel)
    rows = np.unique((ends[Part.TRAIN][:, None] + np.arange(-LOOKBACK + 1, 1)).ravel())
    assert np.flatnonzero(input_rows(len(panel.ts), ends[Part.TRAIN], LOOKBACK)).tolist() == (
        rows.tolist()
    )
    relative = Relative.of(panel.feature_names)
    assert {2, 20}.issubset(relative.ratio) and {6, 7, 8, 33}.issubset(relative.log_ratio)
    one = Normalizer.fit(panel.features[rows], relative=relative)
    blocks = fit_normalizer(panel, ends[Part.TRAIN], LOOKBACK, block=8)
    for field in ("center", "scale", "ignored", "log_ratio", "ratio", "reference"):
        np.testing.assert_array_equal(getattr(blocks, field), getattr(one, field))


def test_split_dates_set_the_boundaries_and_refuse_an_impossible_order() -> None:
    panel = synthetic_panel(n_bars=3000, horizon=HORIZON)  # 2024-01-01 23:00 + 50 hours
    at = {d: int(pd.Timestamp(d, tz="UTC").value) for d in ("2024-01-02", "2024-01-03")}
    val, calib, test = at["2024-01-02"], at["2024-01-02"] + 600 * MIN, at["2024-01-03"]
    split = Split.from_dates(panel.ts, val, calib, test, 30)
    assert split.bounds == (val, calib, test)
    parts = split.part_of(panel.ts)
    assert panel.ts[parts == Part.VAL].min() == val and panel.ts[parts == Part.TEST].min() == test
    assert Split.from_dates(panel.ts, val, calib, None, 30).calib_end == panel.ts.max() + 1
    with pytest.raises(DataError, match=r"--calib-start .* is not before --test-start"):
        Split.from_dates(panel.ts, val, test, calib, 30)
    with pytest.raises(DataError, match=r"--val-start .* is not before --calib-start"):
        Split.from_dates(panel.ts, calib, calib, test, 30)
    with pytest.raises(DataError, match="no bar is left to train on"):
        Split.from_dates(panel.ts, int(panel.ts[0]), calib, test, 30)
    with pytest.raises(DataError, match="no bar is left to calibrate on"):
        Split.from_dates(panel.ts, val, int(panel.ts[-1]) + MIN, None, 30)
