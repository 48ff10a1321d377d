"""`barcast evaluate` scores what the worker serves: the same windows, the same forecasts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.corrections import bars_from_frame
from model.as_served import online_calibrated
from model.bar_files import load_bars
from model.calibration import fit_interval_scale
from model.dataset import Part, Split, build_panel, window_ends
from model.evaluate import evaluate, importance, run_engine
from model.evaluation_windows import PARTS, trained_on_these
from model.explain import explain_windows
from model.serving.conformal import CalibrationConfig, calibrate_offline
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import (
    clean_history,
    forecast_history,
    forecast_values,
    window_requests,
)
from streams.tools.cli import build_parser
from tests.checkpoints import make_checkpoint

BARS = 900


@pytest.fixture(scope="module")
def slice_csv(sixe_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first BARS bars of the real 6EH4 month, as a file of its own."""
    path = tmp_path_factory.mktemp("data") / "6EH4.slice.csv"
    pd.read_csv(sixe_csv, nrows=BARS).to_csv(path, index=False)
    return path


def test_evaluated_windows_are_the_windows_the_worker_forecasts(
    slice_csv: Path, sixe_bars: pd.DataFrame
) -> None:
    bars, _ = load_bars([slice_csv])
    panel = build_panel(bars, 10)
    everything = int(panel.ts.max()) + 1
    split = Split(everything, everything, everything, embargo=70)
    evaluated = set(panel.ts[window_ends(panel, split, Part.TRAIN, 60, 10)].tolist())
    values = bars_from_frame(sixe_bars.iloc[:BARS], symbol="6EH4", instrument_id=1)
    (symbol, clean), *_ = clean_history(values).items()
    label_ends = {int(b["ts_event"]) for b in clean.bars[: len(clean.bars) - 10]}
    served = {r.ts_event for r in window_requests(symbol, clean, 60)}
    complete = {t for t in served if t in label_ends}  # the last 10 have no full label yet
    assert len(evaluated) > 700 and evaluated <= complete
    missing = sorted(complete - evaluated)  # only labels across a session break
    row = {int(t): i for i, t in enumerate(panel.ts)}
    assert all(np.isnan(panel.targets[row[t]]).any() for t in missing)


def test_evaluation_forecasts_equal_the_offline_worker_pipeline_bit_for_bit(
    slice_csv: Path, sixe_bars: pd.DataFrame, tmp_path: Path
) -> None:
    make_checkpoint(tmp_path / "model", symbols=("6EH4",))
    bars, _ = load_bars([slice_csv])
    panel = build_panel(bars, 10)
    everything = int(panel.ts.max()) + 1
    ends = window_ends(panel, Split(everything, everything, everything, 70), Part.TRAIN, 60, 10)
    picked = ends[::7]  # not the worker's batches: the engine must not care
    evaluated = run_engine(ForecastEngine(tmp_path / "model"), panel, picked, 32, "test")
    values = bars_from_frame(sixe_bars.iloc[:BARS], symbol="6EH4", instrument_id=1)
    served = forecast_history(values, ForecastEngine(tmp_path / "model"))
    for t, quantiles in zip(panel.ts[picked], evaluated, strict=True):
        assert np.array_equal(served[("6EH4", int(t))], quantiles)


@pytest.fixture(scope="module")
def longer_csv(sixe_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 3000 bars: its first 20 % hold windows with the slowest forecaster's history."""
    path = tmp_path_factory.mktemp("data") / "6EH4.longer.csv"
    pd.read_csv(sixe_csv, nrows=3000).to_csv(path, index=False)
    return path


def test_split_all_calibrates_every_forecaster_on_the_same_windows(
    longer_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint trained elsewhere: every forecaster, the TFT too, gets its interval scale
    from the same calibration windows, those of the first 20 % where all are defined; the
    windows where some forecaster has too little history are counted, and every forecaster is
    scored as served too."""
    seen: list[np.ndarray] = []

    def spy(q: np.ndarray, y: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
        seen.append(y.copy())
        return fit_interval_scale(q, y, quantiles)

    monkeypatch.setattr("model.calibrated_baselines.fit_interval_scale", spy)
    make_checkpoint(tmp_path / "model", symbols=("6EH4",))
    report = evaluate(tmp_path / "model", [longer_csv], part="all", device="cpu")
    calibration = report["calibration"]
    assert report["n_windows"] > 1500 and report["left_out"]
    assert 20 < calibration["n_windows"] < calibration["n_windows_in_period"]
    assert "recalibrated" in calibration["tft"] and "in_sample" not in calibration
    assert len(seen) > 100 and all(np.array_equal(y, seen[0]) for y in seen)
    assert len(seen[0]) == calibration["n_windows"]
    names = {"tft", *report["baselines"]}
    assert {"har_tod_gaussian", "har_tod_ewma_gaussian", "volatility_scale_gaussian"} <= names
    assert report["model"]["interval_scale"] != [[1.0] * 3] * 10  # fitted here, not kept
    assert set(report["as_served"]["baselines"]) == names - {"tft"}
    comparison = report["comparison"]
    assert 0 <= comparison["diebold_mariano"]["p_value"] <= 1
    assert set(comparison["confidence_set"]["p_values"]) == names
    losses = np.load(tmp_path / "model" / "evaluation" / "losses.npz")
    assert set(losses) == {"ts", "symbol"} | {
        f"{p}/{n}" for p in ("offline", "served") for n in names
    }
    assert np.isclose(losses["offline/tft"].mean(), report["model"]["mean_pinball"])
    assert np.isclose(losses["served/tft"].mean(), report["as_served"]["model"]["mean_pinball"])


def test_served_quantiles_are_the_offline_workers_online_calibration(
    slice_csv: Path, sixe_bars: pd.DataFrame, tmp_path: Path
) -> None:
    """Each forecaster's as-served quantiles are those the worker's reference pipeline
    publishes (raw bars -> corrections -> engine -> scorer and online calibration) when that
    forecaster's quantiles are what the engine serves."""
    make_checkpoint(tmp_path / "model", symbols=("6EH4",))
    engine = ForecastEngine(tmp_path / "model")
    bars, _ = load_bars([slice_csv])
    panel = build_panel(bars, 10)
    everything = int(panel.ts.max()) + 1
    ends = window_ends(panel, Split(everything, everything, everything, 70), Part.TRAIN, 60, 10)
    q = run_engine(engine, panel, ends, 256, "test")
    served = online_calibrated(panel, ends, {"tft": q})["tft"]
    values = bars_from_frame(sixe_bars.iloc[:BARS], symbol="6EH4", instrument_id=1)
    clean = clean_history(values)
    published = calibrate_offline(
        forecast_values(forecast_history(values, engine), clean, engine),
        clean["6EH4"].bars,
        CalibrationConfig(),
    )
    by_ts = {v["ts_event"]: v for v in published}
    assert len(by_ts) > len(ends)  # the worker also forecasts windows scored by nobody
    moved = 0
    for t, quantiles in zip(panel.ts[ends], served, strict=True):
        value = by_ts[int(t)]
        expected = np.column_stack([value["q10"], value["q50"], value["q90"]])
        assert np.allclose(quantiles, expected, rtol=0, atol=1e-15)
        moved += not np.array_equal(value["q10"], value["raw_q10"])
    assert moved > len(ends) // 2  # the calibration acted


def test_split_all_on_a_file_that_trained_the_checkpoint_says_it_is_in_sample() -> None:
    files = {"jan.csv": "aa", "feb.csv": "bb"}
    (warning,) = trained_on_these(files, {"/data/copy-of-jan.csv": "aa"}).values()
    assert warning.startswith("jan.csv trained this checkpoint") and "feb.csv" not in warning
    assert trained_on_these(files, {"/data/mar.csv": "cc"}) == {}


def test_the_command_line_offers_exactly_the_splits_evaluate_takes() -> None:
    parser = build_parser()
    command = ["evaluate", "--checkpoint", "model", "--data", "bars.csv", "--split"]
    assert [parser.parse_args([*command, part]).split for part in PARTS] == list(PARTS)
    with pytest.raises(SystemExit):
        parser.parse_args([*command, "calib"])  # the baselines calibrate on it: nothing to score


def test_the_historical_importances_are_the_mean_selection_weights_at_the_window_ends(
    slice_csv: Path, tmp_path: Path
) -> None:
    """Summed as the rows are encoded, not kept per row (years of rows would not fit a GPU):
    the mean of each window end's own weights, a repeated end counted each time."""
    bars, _ = load_bars([slice_csv])
    panel = build_panel(bars, 10)
    everything = int(panel.ts.max()) + 1
    ends = window_ends(panel, Split(everything, everything, everything, 70), Part.TRAIN, 60, 10)
    ends = np.concatenate([ends[::7], ends[:3]])
    make_checkpoint(tmp_path / "ckpt", symbols=("6EH4",))
    forecaster = ForecastEngine(tmp_path / "ckpt").served.forecaster
    explained = explain_windows(forecaster, panel, ends, 32)
    symbols = [panel.symbols[i] for i in panel.row_symbol[ends]]
    _, weights = forecaster.encode(symbols, panel.features[ends, None, :])
    np.testing.assert_allclose(explained["hist"], weights[:, 0].mean(0).numpy(), rtol=1e-5)


def test_a_stream_checkpoints_importances_are_the_window_ones_and_its_attention_is_not_faked(
    slice_csv: Path, tmp_path: Path
) -> None:
    """The variable selection does not depend on the encoder: a stream checkpoint's importances
    are those of the window checkpoint of the same weights. Its attention depends on the state
    carried in, which a window alone lacks: none is reported, and the report says why and what
    to do, naming the checkpoint."""
    bars, _ = load_bars([slice_csv])
    panel = build_panel(bars, 10)
    everything = int(panel.ts.max()) + 1
    ends = window_ends(panel, Split(everything, everything, everything, 70), Part.TRAIN, 60, 10)
    reports = {}
    for encoder in ("window", "stream"):
        path = tmp_path / encoder
        make_checkpoint(path, symbols=("6EH4",), encoder=encoder)
        forecaster = ForecastEngine(path).served.forecaster
        reports[encoder] = importance(forecaster, panel, ends[::5], 32, path)
    window, stream = reports["window"], reports["stream"]
    assert window["attention_entropy"] > 0 and "attention_skipped" not in window
    assert stream["attention_entropy"] is None
    assert str(tmp_path / "stream") in stream["attention_skipped"]
    assert "window-encoder checkpoint" in stream["attention_skipped"]
    for kind in ("historical", "static", "future"):
        expected = {
            name: pytest.approx(w, abs=1e-6) for name, w in window["importance"][kind].items()
        }
        assert stream["importance"][kind] == expected
