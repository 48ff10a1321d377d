"""The shadow baselines the worker forms beside every forecast (model.serving.baselines) are the
ones `barcast evaluate` scores: the checkpoint's volatility scale alone as Gaussian quantiles,
and the time-of-day EWMA blend whose EWMAs run over the symbol's rows, calibrated with the fit
`barcast train` writes beside the checkpoint (or unit scales without one)."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from model import baselines, checkpoint
from model.bar_files import load_bars
from model.calibrated_baselines import fit_served, scale_alone
from model.dataset import build_panel, one_bar_returns, window_rows
from model.serving.baselines import (
    FILE,
    TOD_EWMA,
    VOLATILITY_SCALE,
    BaselineSpec,
    EwmaChoice,
    ShadowBaselines,
    new_ewma,
)
from model.serving.shadow import columns_of
from model.train import fast_ratios
from model.volatility import TimeOfDayProfile
from tests.checkpoints import make_checkpoint

BARS = 3000
LEVELS = (0.1, 0.5, 0.9)


@pytest.fixture(scope="module")
def panel_and_meta(sixe_csv: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Two days of the real 6EH4 month as a panel, and a checkpoint's metadata with a daily
    profile fitted on them (an untrained one's is flat, which would hide the time of day)."""
    folder = tmp_path_factory.mktemp("shadow")
    path = folder / "6EH4.slice.csv"
    pd.read_csv(sixe_csv, nrows=BARS).to_csv(path, index=False)
    bars, _ = load_bars([path])
    panel = build_panel(bars, 10)
    make_checkpoint(folder / "ck")
    _, meta, _ = checkpoint.load(folder / "ck")
    profile = TimeOfDayProfile.fit(panel.ts, one_bar_returns(panel), 60)
    meta = replace(meta, volatility=replace(meta.volatility, profile=profile))
    return panel, meta


def worker_baselines(panel, meta, spec: BaselineSpec, ends: np.ndarray) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """Each baseline's quantiles at `ends` as the worker forms them: every row into the EWMAs
    in order, then a batch of the windows."""
    shadow, ewma = ShadowBaselines(meta, spec), new_ewma()
    variances = np.full((len(panel.ts), 2), np.nan)
    for t in range(len(panel.ts)):
        shadow.update(ewma, int(panel.ts[t]), panel.features[t])
        found = shadow.variances(ewma)
        if found is not None:
            variances[t] = found
    columns = list(meta.volatility.columns)
    lookback = meta.config.lookback
    inputs = np.stack([panel.features[t - lookback + 1 : t + 1, columns] for t in ends])
    scale = meta.volatility.scale(panel.ts[ends], inputs, meta.config.horizon)
    return shadow.forecast(panel.ts[ends], scale, variances[ends])


def test_the_baselines_are_evaluates(panel_and_meta) -> None:  # type: ignore[no-untyped-def]
    panel, meta = panel_and_meta
    choice = EwmaChoice(60.0, 30.0, 0.6)
    spec = BaselineSpec(BaselineSpec.default(10, 3).interval_scales, choice, True)
    ends = np.arange(300, len(panel.ts) - 20)[::7]
    served = worker_baselines(panel, meta, spec, ends)

    scale = baselines.gaussian(scale_alone(panel, ends, meta), LEVELS)
    assert np.array_equal(served[VOLATILITY_SCALE], scale)
    profile = meta.volatility.profile
    flat = baselines.ewma_sigma(panel, ends, TimeOfDayProfile.flat(), 30.0)
    tod = baselines.ewma_sigma(panel, ends, profile, 60.0)
    evaluated = baselines.gaussian(baselines.profile_blend(flat, tod, 0.6), LEVELS)
    defined = np.isfinite(evaluated).all(axis=(1, 2))
    assert defined.sum() > 300
    assert np.array_equal(np.isfinite(served[TOD_EWMA]).all(axis=(1, 2)), defined)
    assert np.allclose(served[TOD_EWMA][defined], evaluated[defined], rtol=1e-9, atol=0)


def test_interval_scales_calibrate_each_baseline(panel_and_meta) -> None:  # type: ignore[no-untyped-def]
    panel, meta = panel_and_meta
    scales = np.ones((10, 3))
    scales[:, 0], scales[:, 2] = 2.0, 0.5
    spec = BaselineSpec({VOLATILITY_SCALE: scales, TOD_EWMA: scales}, EwmaChoice(30, 30, 1), True)
    ends = np.arange(300, len(panel.ts) - 20)[-50:]
    plain = worker_baselines(
        panel,
        meta,
        replace(spec, interval_scales=BaselineSpec.default(10, 3).interval_scales),
        ends,
    )
    scaled = worker_baselines(panel, meta, spec, ends)
    for name in (VOLATILITY_SCALE, TOD_EWMA):
        assert np.allclose(scaled[name][..., 0], 2 * plain[name][..., 0])
        assert np.allclose(scaled[name][..., 2], 0.5 * plain[name][..., 2])


def test_a_repeated_row_leaves_the_ewmas_as_they_were(panel_and_meta) -> None:  # type: ignore[no-untyped-def]
    panel, meta = panel_and_meta
    shadow, ewma = ShadowBaselines(meta, BaselineSpec.default(10, 3)), new_ewma()
    for t in range(100):
        assert shadow.update(ewma, int(panel.ts[t]), panel.features[t])
    before = list(ewma)
    assert not shadow.update(ewma, int(panel.ts[99]), panel.features[50])
    assert ewma == before
    assert shadow.variances(ewma) is not None and shadow.variances(new_ewma()) is None


def test_train_fits_them_as_evaluate_calibrates_and_the_worker_reads_the_fit(
    panel_and_meta,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    panel, meta = panel_and_meta
    ends = np.arange(300, len(panel.ts) - 20)[-800:]
    fitted, n = fit_served(panel, ends, meta)
    assert n == len(ends)
    assert fitted[TOD_EWMA]["profile_weight"] > 0 and "halflife_bars" in fitted[TOD_EWMA]
    make_checkpoint(tmp_path)
    from model.serving.baselines import save

    save(tmp_path, fitted, {"n_windows": n})
    spec = BaselineSpec.load(tmp_path, 10, 3)
    assert spec.fitted and spec.ewma == EwmaChoice.from_fitted(fitted[TOD_EWMA])
    assert np.array_equal(
        spec.interval_scales[VOLATILITY_SCALE], fitted[VOLATILITY_SCALE]["interval_scale"]
    )
    assert not BaselineSpec.load(tmp_path / "elsewhere", 10, 3).fitted


def test_a_baselines_file_this_barcast_cannot_read_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / FILE).write_text(json.dumps({"format": "barcast-baselines", "baselines": {}}))
    with pytest.raises(ValueError, match="remove it"):
        BaselineSpec.load(tmp_path, 10, 3)


def test_a_batchs_columns_leave_out_the_baselines_not_defined() -> None:
    scale, tod = np.arange(24.0).reshape(2, 4, 3), -np.arange(24.0).reshape(2, 4, 3)
    tod[1, 2, 0] = np.nan  # its EWMAs have not seen enough returns yet
    first, second = columns_of({VOLATILITY_SCALE: scale, TOD_EWMA: tod})
    assert first == {
        VOLATILITY_SCALE: tuple(scale[0, :, j].tolist() for j in range(3)),
        TOD_EWMA: tuple(tod[0, :, j].tolist() for j in range(3)),
    }
    assert second == {VOLATILITY_SCALE: tuple(scale[1, :, j].tolist() for j in range(3))}


def test_the_scale_alone_and_the_fast_ratios_read_a_chunk_of_windows_at_a_time(
    panel_and_meta,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a year of windows, a copy of every window's scale inputs outgrows the panel: both read
    them a chunk at a time, to the same figures bit for bit."""
    panel, meta = panel_and_meta
    volatility, config = meta.volatility, meta.config
    ends = np.arange(config.lookback, len(panel.ts) - config.horizon)
    whole = scale_alone(panel, ends, meta), fast_ratios(panel, volatility, ends, config)
    monkeypatch.setattr("model.volatility.FIT_CHUNK", 100)
    tracemalloc.start()
    chunked = scale_alone(panel, ends, meta), fast_ratios(panel, volatility, ends, config)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    np.testing.assert_array_equal(chunked[0], whole[0])
    assert chunked[1].keys() == whole[1].keys()
    for halflife, ratios in whole[1].items():
        np.testing.assert_array_equal(chunked[1][halflife], ratios)
    copy = window_rows(panel.features[:, list(volatility.columns)], config.lookback)[ends]
    outputs = whole[0].nbytes * (1 + 2 * len(whole[1]))  # the figures, and their chunks
    assert peak < outputs + copy.nbytes / 3, (peak, copy.nbytes, outputs)
