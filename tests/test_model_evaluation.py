"""`barcast evaluate` scores what the worker serves: the same windows, the same forecasts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.corrections import bars_from_frame
from model.bar_files import load_bars
from model.dataset import Part, Split, build_panel, window_ends
from model.evaluate import PARTS, evaluate, run_engine, trained_on_these
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import clean_history, forecast_history, window_requests
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
    label_ends = {int(b["ts_event"]) for b in clean[: len(clean) - 10]}
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


def test_split_all_scores_a_short_file_and_says_what_it_left_out(
    slice_csv: Path, tmp_path: Path
) -> None:
    """A checkpoint trained elsewhere, on a file too short for the day-long rolling baseline
    at first: the windows where all forecasters are defined are scored, the rest counted."""
    make_checkpoint(tmp_path / "model", symbols=("6EH4",))
    report = evaluate(tmp_path / "model", [slice_csv], part="all", device="cpu")
    left_out = report["left_out"]
    assert report["n_windows"] > 200
    assert left_out["rolling_quantiles: too little history"] > 0
    assert report["calibration"]["n_windows"] > 20
    assert "in_sample" not in report["calibration"]
    assert np.isfinite(report["comparison"]["relative_gain"])


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
