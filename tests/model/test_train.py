"""Training learns, fails loudly when it does not, fits batch 32 / hidden 256 on the CPU, builds
and trains a multi-product panel within a memory bound set by its float32 features, and
`barcast train` + `barcast evaluate` run end to end on a slice of the real 6EH4 month and on a
FirstRate folder by dates."""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from features.engine import FINGERPRINT, N_FEATURES
from model import checkpoint
from model.calibration import FAST_HALFLIVES
from model.config import ENCODERS, TFTConfig
from model.covariates import SymbolVocab
from model.dataset import TRAINING_DTYPE, Part, Split, WindowData, build_panel, window_ends
from model.guards import check_epoch
from model.loop import pinball_loss
from model.normalization import Normalizer
from model.synthetic import random_walk_bars, synthetic_panel
from model.tft import TemporalFusionTransformer
from model.train import (
    TrainConfig,
    TrainingError,
    fit_volatility,
    predict_windows,
    split_windows,
    train,
    train_on_panel,
)
from streams.exit_codes import ExitCode
from streams.tools import model_cli as cli
from tests.firstrate_days import write_sessions

torch.set_num_threads(1)

# The synthetic signal is a drift, which only a learned median can forecast. The window encoder's
# (tests/model/test_stream.py trains the stream encoder on it too).
TINY = TFTConfig(
    lookback=30,
    horizon=10,
    hidden=16,
    heads=2,
    lstm_layers=1,
    n_hist=16,
    var_dim=4,
    dropout=0.0,
    zero_median=False,
    encoder="window",
)
# Batches of four runs of eight windows: on 2,000 bars, the default runs of 32 make a batch one
# stretch of the series.
QUIET = TrainConfig(
    epochs=5,
    batch_size=32,
    chunk=8,
    patience=4,
    lr=3e-3,
    val_fraction=0.2,
    test_fraction=0.0,
    progress=False,
)


def test_training_on_a_learnable_signal_cuts_the_loss_by_a_large_factor(tmp_path: Path) -> None:
    # Eight epochs: after five, whether the factor is reached still depends on the initial
    # weights' draw.
    panel = synthetic_panel(n_bars=1500, n_features=16)
    config = replace(QUIET, epochs=8)
    metrics = train_on_panel(panel, tmp_path, TINY, config, "synthetic", {"files": {}})
    history = json.loads((tmp_path / "metrics.json").read_text())
    assert len(history) == 8
    assert history[-1]["train_loss"] < history[0]["train_loss"] / 5
    assert history[-1]["val_loss"] < history[0]["val_loss"] / 2
    assert metrics["val_pinball"] == min(h["val_loss"] for h in history) > 0
    for name in ("metrics.csv", "training_curve.png", checkpoint.WEIGHTS, checkpoint.CONFIG):
        assert (tmp_path / name).stat().st_size > 0


def test_an_untrained_model_forecasts_its_volatility_scale_as_gaussian_quantiles() -> None:
    """The head starts from the standard normal's quantiles: before any training the TFT is
    the Gaussian forecast of its own volatility scale, not a random one."""
    panel = synthetic_panel(n_bars=900, n_features=16)
    split = Split(panel.ts.max() + 1, panel.ts.max() + 1, panel.ts.max() + 1, 40)
    ends = window_ends(panel, split, Part.TRAIN, TINY.lookback, TINY.horizon)
    normalizer = Normalizer(np.zeros(16), np.ones(16))
    volatility = fit_volatility(panel, split, ends, TINY.lookback)
    data = WindowData(
        panel, normalizer, SymbolVocab(("ES",)), TINY.lookback, TINY.horizon, 1e-4, volatility
    )
    torch.manual_seed(0)
    model = TemporalFusionTransformer(replace(TINY, n_symbols=2))
    q, _ = predict_windows(model, data, ends, 128, torch.device("cpu"))
    unit = data.unit[torch.from_numpy(ends)]
    z = torch.tensor([-1.2816, 0.0, 1.2816])
    assert torch.allclose(q, unit.unsqueeze(-1) * z, rtol=1e-4, atol=1e-7)


def test_a_model_that_does_not_learn_is_an_error(tmp_path: Path) -> None:
    panel = synthetic_panel(n_bars=600, n_features=16)
    frozen = TrainConfig(
        epochs=3, lr=0.0, val_fraction=0.2, calib_fraction=0.2, test_fraction=0.0, progress=False
    )
    with pytest.raises(TrainingError, match="no weight changed"):
        train_on_panel(panel, tmp_path, TINY, frozen, "synthetic", {"files": {}})
    assert not (tmp_path / checkpoint.WEIGHTS).exists()


@pytest.mark.parametrize(
    ("val_loss", "message"), [(0.0, "exactly 0"), (float("nan"), "nan"), (float("inf"), "inf")]
)
def test_impossible_validation_losses_are_errors(val_loss: float, message: str) -> None:
    with pytest.raises(TrainingError, match=message):
        check_epoch({"epoch": 2, "train_loss": 0.3, "val_loss": val_loss}, [])


def test_training_refuses_a_validation_loss_of_exactly_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard is wired into the epoch loop, not only defined: the seed report's run scored
    a validation loss of exactly 0 and wrote a checkpoint."""
    monkeypatch.setattr("model.loop.evaluate_loss", lambda *args: 0.0)
    panel = synthetic_panel(n_bars=900, n_features=16)
    with pytest.raises(TrainingError, match="exactly 0"):
        train_on_panel(panel, tmp_path, TINY, replace(QUIET, epochs=1), "synthetic", {})
    assert not (tmp_path / checkpoint.WEIGHTS).exists()


def test_training_stops_at_the_first_step_whose_loss_is_not_finite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-step guard is wired in: a NaN loss (an exploding learning rate, NaN inputs)
    stops the run at that step, before any weight moves on it, and writes no checkpoint."""
    losses = iter([None, float("nan")])  # the first step's loss as computed, then NaN

    def pinball(pred: torch.Tensor, y: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
        loss = pinball_loss(pred, y, levels)
        value = next(losses, None)
        return loss if value is None else loss * value

    monkeypatch.setattr("model.loop.pinball_loss", pinball)
    panel = synthetic_panel(n_bars=900, n_features=16)
    with pytest.raises(TrainingError, match=r"epoch 1 step 2: training loss is nan"):
        train_on_panel(panel, tmp_path, TINY, replace(QUIET, epochs=1), "synthetic", {})
    assert not (tmp_path / checkpoint.WEIGHTS).exists()


def test_the_test_split_is_never_read_and_calibration_moves_only_the_interval_scale(
    tmp_path: Path,
) -> None:
    """Training reads its own rows, validation (epoch, scale) and calibration (interval scale)
    and nothing after: new test-period data leaves the checkpoint byte-identical, and new
    calibration-period data changes its interval scale and nothing else."""
    cfg = replace(QUIET, epochs=2, test_fraction=0.25)
    panel = synthetic_panel(n_bars=2000, n_features=16)
    split, _ = split_windows(panel, TINY, cfg)
    saved = {}
    for name, since in (("as is", None), ("test", split.calib_end), ("calib", split.val_end)):
        changed = replace(panel, features=panel.features.copy(), targets=panel.targets.copy())
        if since is not None:
            rows = changed.ts >= since
            changed.features[rows] *= 3.0
            changed.targets[rows] *= 3.0
        train_on_panel(changed, tmp_path / name, TINY, cfg, "synthetic", {})
        config = json.loads((tmp_path / name / checkpoint.CONFIG).read_text())
        weights = (tmp_path / name / checkpoint.WEIGHTS).read_bytes()
        config["metrics"].pop("peak_memory_mb")  # the process's, not the run's alone
        assert config["metrics"].pop("interval_scale") == config["interval_scale"]
        saved[name] = (config.pop("interval_scale"), config, weights)
    assert saved["test"] == saved["as is"]
    assert saved["calib"][1:] == saved["as is"][1:]
    assert saved["calib"][0] != saved["as is"][0]


def test_a_constant_training_loss_is_an_error() -> None:
    """The old report's loss sat at 0.094957 for 10 epochs and was reported as success."""
    previous = [{"epoch": 1, "train_loss": 0.094957, "val_loss": 0.2}]
    with pytest.raises(TrainingError, match="not learning"):
        check_epoch({"epoch": 2, "train_loss": 0.094957, "val_loss": 0.2}, previous)
    check_epoch({"epoch": 2, "train_loss": 0.0949, "val_loss": 0.2}, previous)


def sixe_slice(sixe_csv: Path, path: Path, bars: int) -> Path:
    """The first `bars` bars of the real 6EH4 month as a CSV of the same layout."""
    with gzip.open(sixe_csv, "rt") as f:
        lines = [next(f) for _ in range(bars + 1)]
    path.write_text("".join(lines))
    return path


def test_batch_32_hidden_256_trains_an_epoch_on_cpu_with_all_227_features(
    sixe_csv: Path, tmp_path: Path
) -> None:
    """The configuration that ran out of memory in the old report, on real bars through the
    corrections and the feature engine; reports its peak memory."""
    data = sixe_slice(sixe_csv, tmp_path / "6EH4.slice.csv", 800)
    config = TFTConfig(hidden=256, heads=8, lstm_layers=2, var_dim=8)
    run = TrainConfig(
        epochs=1,
        batch_size=32,
        windows_per_epoch=96,
        val_fraction=0.25,
        calib_fraction=0.25,
        test_fraction=0.0,
        progress=False,
    )
    metrics = train([data], tmp_path / "ckpt", config, run)
    print(
        f"batch 32 / hidden 256: {metrics['n_params']} parameters, "
        f"peak memory {metrics['peak_memory_mb']:.0f} MB"
    )
    assert metrics["epochs_run"] == 1 and metrics["peak_memory_mb"] > 0
    model, meta, _ = checkpoint.load(tmp_path / "ckpt", FINGERPRINT)
    assert meta.config.n_hist == N_FEATURES == 227
    assert model.hist_selection.real_grn.w_glu.shape[0] == 227
    assert model.hist_selection.combine.in_features == 227 * 8


# SMALL (below) as `barcast train` options
SMALL_ARGS = ["--hidden", "16", "--heads", "2", "--lstm-layers", "1", "--var-dim", "4"]


def barcast_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="barcast")
    cli.register(parser.add_subparsers(required=True))
    return parser


def test_train_and_evaluate_commands_on_real_bars(sixe_csv: Path, tmp_path: Path) -> None:
    data = sixe_slice(sixe_csv, tmp_path / "6EH4.slice.csv", 2500)
    parser = barcast_parser()
    out = tmp_path / "ckpt"
    short = ["--epochs", "2", "--windows-per-epoch", "256", "--test-fraction", "0.3"]
    args = parser.parse_args(["train", "--data", str(data), "--out", str(out), *SMALL_ARGS, *short])
    assert args.func(args) == 0
    args = parser.parse_args(["evaluate", "--checkpoint", str(out), "--data", str(data)])
    assert args.func(args) == 0
    report = json.loads((out / "evaluation" / "evaluation.json").read_text())
    assert report["n_windows"] > 300 and report["part"] == "test"
    assert set(report["baselines"]) == {
        "persistence",
        "rolling_quantiles",
        "ewma_gaussian",
        "ewma_empirical",
        "tod_ewma_gaussian",
        "tod_ewma_empirical",
        "tod_ewma_gaussian_likelihood",  # its blend chosen on the validation windows
        "volatility_scale_gaussian",  # the TFT's own scale without the network
        "har_tod_gaussian",  # the intraday HAR with time of day
        "har_tod_ewma_gaussian",  # with time-of-day EWMAs as components too
    }
    assert "halflife_bars" in report["baselines"]["tod_ewma_gaussian_likelihood"]
    assert report["comparison"]["best_baseline"] in report["baselines"]
    assert report["calibration"]["n_windows"] > 0
    # two days of training have seen neither every day of the month nor another month
    config = json.loads((out / checkpoint.CONFIG).read_text())
    ignored = config["data"]["ignored_features"]
    # the fast EWMA's blend was fitted on the calibration windows and is what serving applies
    assert config["fast"] == config["metrics"]["fast"]
    assert config["fast"]["halflife"] in FAST_HALFLIVES and 0 <= config["fast"]["share"] <= 1
    assert {"dom_frac", "moy_sin", "moy_cos", "us_dst"} <= set(ignored)
    assert "tod_sin" not in ignored and "ewma_vol_slow" not in ignored
    for result in (report["model"], *report["baselines"].values()):
        assert result["mean_pinball"] > 0 and 0 < result["coverage_interval"] <= 1
        assert len(result["pinball_per_horizon"]) == 10
    # the default, stream, checkpoint's attention is not faked from windows alone
    assert report["attention_entropy"] is None and "stream encoder" in report["attention_skipped"]
    assert report["importance"]["n_historical_inputs"] == 227
    for name in ("calibration.png", "fan_chart.png"):
        assert (out / "evaluation" / name).stat().st_size > 1000
    args = parser.parse_args(["evaluate", "--checkpoint", str(tmp_path), "--data", str(data)])
    assert args.func(args) == 2  # not a checkpoint: one clear line, no traceback


@pytest.mark.parametrize(
    ("option", "value"),
    [("--epochs", "0"), ("--patience", "0"), ("--batch-size", "0"), ("--embargo", "-1")],
)
def test_train_refuses_an_unusable_recipe_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    """Before reading any data: not an AssertionError or ZeroDivisionError traceback later."""
    parser = barcast_parser()
    missing = str(tmp_path / "no-such-file.csv")
    args = parser.parse_args(["train", "--data", missing, "--out", str(tmp_path), option, value])
    assert args.func(args) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("barcast train: TrainConfig.") and option[2:].replace("-", "_") in err


def test_train_and_evaluate_commands_read_a_firstrate_folder_by_dates(tmp_path: Path) -> None:
    """`--data ES=FOLDER` with a range and split dates: the splits start where the dates say,
    only the range's day files are read, and wrong options end in one line naming the fix."""
    folder = tmp_path / "dailydata"
    write_sessions(folder, "2012-03-05", days=6)  # Monday to Monday
    parser = barcast_parser()
    out = tmp_path / "ckpt"
    data = ["--data", f"ES={folder}", "--start", "2012-03-05T06:00", "--end", "2012-03-10"]
    dates = ["--val-start", "2012-03-08", "--calib-start", "2012-03-08T12:00"]
    short = ["--epochs", "1", "--windows-per-epoch", "128", "--test-start", "2012-03-09"]
    args = parser.parse_args(["train", *data, "--out", str(out), *SMALL_ARGS, *dates, *short])
    assert args.func(args) == 0
    meta = json.loads((out / checkpoint.CONFIG).read_text())
    iso = {
        k: str(np.datetime64(v, "ns"))[:16]
        for k, v in meta["data"]["split"].items()
        if k != "embargo"
    }
    assert iso == {
        "train_end": "2012-03-08T00:00",
        "val_end": "2012-03-08T12:00",
        "calib_end": "2012-03-09T00:00",
    }
    read = sorted(Path(p).name for p in meta["data"]["files"])
    assert read == [f"2012-03-0{d}.json" for d in range(5, 10)]  # not the 12th
    args = parser.parse_args(["evaluate", "--checkpoint", str(out), *data])
    assert args.func(args) == 0
    report = json.loads((out / "evaluation" / "evaluation.json").read_text())
    assert report["first_window_ts"] >= "2012-03-09" and report["last_window_ts"] < "2012-03-10"
    for wrong in (
        [*dates, "--val-fraction", "0.2"],  # fractions and dates
        ["--calib-start", "2012-03-08"],  # a split date alone
        ["--resume"],  # the run in --out finished
    ):
        args = parser.parse_args(["train", *data, "--out", str(out), *SMALL_ARGS, *wrong])
        assert args.func(args) == 2


SMALL = TFTConfig(hidden=16, heads=2, lstm_layers=1, var_dim=4)
ONE_EPOCH = TrainConfig(epochs=1, windows_per_epoch=256, progress=False)
# Peak traced memory of building and training, over the panel's features alone (rows x
# features x 4 bytes). On top of them: each row's labels (80 bytes), volatility unit (40) and
# time, close and flags (18); one chunk of the feature engine; and the volatility scale's fit,
# which holds its seven inputs over the lookback of every validation window in float64 (a
# tenth of the rows here) with its candidates' temporaries. The panel's features in float64,
# or a normalized copy of them, would each break it.
BOUND = 1.8


def peak_over_features(tmp: Path, encoder: str) -> float:
    """Peak traced memory over the features' bytes, of building and training three products'
    panel with `encoder`; run in a fresh process so nothing an earlier test cached or freed
    counts."""
    bars = [random_walk_bars(s, 12_000, seed) for seed, s in enumerate(("ESH4", "NQH4", "6EH4"))]
    # Compile the feature engine and import what training imports (plots, safetensors) before
    # measuring: the compiler's and modules' Python objects are traced too.
    build_panel(bars[:1], SMALL.horizon, TRAINING_DTYPE)
    warm_up = replace(ONE_EPOCH, windows_per_epoch=32, val_fraction=0.2, test_fraction=0.0)
    tiny = TFTConfig(lookback=30, hidden=16, heads=2, lstm_layers=1, var_dim=4, n_hist=16)
    train_on_panel(synthetic_panel(n_bars=900), tmp / "warm", tiny, warm_up, "synthetic", {})

    tracemalloc.start()
    try:
        panel = build_panel(bars, SMALL.horizon, TRAINING_DTYPE)
        model = replace(SMALL, encoder=encoder)
        train_on_panel(panel, tmp / "ckpt", model, ONE_EPOCH, FINGERPRINT, {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rows, features = panel.features.shape
    assert (rows, features) == (36_000, N_FEATURES) and panel.features.dtype == np.float32
    return peak / (rows * features * 4)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_a_multi_product_panel_builds_and_trains_within_its_memory_bound(
    tmp_path: Path, encoder: str
) -> None:
    """The stream encoder's sequences share their rows as the window encoder's windows do: a
    dense copy of each sequence's rows would break the bound many times over."""
    measure = (
        "import sys, torch; from pathlib import Path; torch.set_num_threads(1); "
        "from tests.model.test_train import peak_over_features; "
        "print(peak_over_features(Path(sys.argv[1]), sys.argv[2]))"
    )
    root = Path(__file__).resolve().parents[2]
    child = subprocess.run(
        [sys.executable, "-c", measure, str(tmp_path), encoder],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    ratio = float(child.stdout.split()[-1])
    print(f"peak {ratio:.2f} x the features' bytes")
    assert 1.0 < ratio < BOUND
