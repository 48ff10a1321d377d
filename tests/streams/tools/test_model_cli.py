"""`barcast train`'s options: their defaults are the recipe's; `--out` checked before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.config import TFTConfig, TrainConfig
from streams.exit_codes import ExitCode
from streams.tools.cli import build_parser, main
from streams.tools.model_cli import _pick
from tests.checkpoints import make_checkpoint


def test_barcast_train_without_options_trains_the_default_recipe() -> None:
    """The recipe the walk-forward protocol froze (TFTConfig(), TrainConfig()) is the one a user
    runs: no option of `barcast train` has a default of its own."""
    args = build_parser().parse_args(["train", "--data", "bars.csv", "--out", "out"])
    assert _pick(TrainConfig, args) == TrainConfig()
    assert _pick(TFTConfig, args) == TFTConfig()


def test_barcast_train_chooses_the_encoder_and_refuses_an_unknown_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    args = parser.parse_args(["train", "--data", "b.csv", "--out", "o", "--encoder", "stream"])
    assert _pick(TFTConfig, args) == TFTConfig(encoder="stream")
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--data", "b.csv", "--out", "o", "--encoder", "lstm"])
    assert "invalid choice: 'lstm'" in capsys.readouterr().err


def test_an_out_that_takes_no_files_or_holds_a_checkpoint_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--out` a file, or (training) a trained checkpoint, or fractions that split nothing:
    refused before the data is read (the data here does not exist), so no run's work is lost
    at its end, nor a model."""
    a_file = tmp_path / "outfile"
    a_file.write_text("x")
    missing = str(tmp_path / "no-bars.csv")
    assert main(["train", "--data", missing, "--out", str(a_file)]) == ExitCode.USAGE
    assert f"--out {a_file}: cannot write there" in capsys.readouterr().err
    checkpoint = tmp_path / "model"
    make_checkpoint(checkpoint)
    assert main(["train", "--data", missing, "--out", str(checkpoint)]) == ExitCode.USAGE
    assert "holds a trained checkpoint (config.json)" in capsys.readouterr().err
    fresh = ["--out", str(tmp_path / "new"), "--val-fraction", "0.9"]
    assert main(["train", "--data", missing, *fresh]) == ExitCode.USAGE
    assert "--val-fraction 0.9 / --calib-fraction 0.1" in capsys.readouterr().err
    args = ["evaluate", "--checkpoint", str(checkpoint), "--data", missing, "--out", str(a_file)]
    assert main(args) == ExitCode.USAGE
    assert f"--out {a_file}: cannot write there" in capsys.readouterr().err
