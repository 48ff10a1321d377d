"""`barcast train`'s options: their defaults are the recipe's."""

from __future__ import annotations

import pytest

from model.config import TFTConfig, TrainConfig
from streams.tools.cli import build_parser
from streams.tools.model_cli import _pick


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
