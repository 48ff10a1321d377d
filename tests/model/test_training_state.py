"""`barcast train --resume`: an interrupted run, resumed, writes the very checkpoint of an
uninterrupted one; a state of another run, or none, is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from model import checkpoint, loop
from model.config import TFTConfig
from model.dataset import Panel
from model.synthetic import synthetic_panel
from model.tft import TemporalFusionTransformer
from model.train import TrainConfig, TrainingError, train_on_panel
from model.training_state import STATE_FILE

torch.set_num_threads(1)

TINY = TFTConfig(
    lookback=30, horizon=10, hidden=16, heads=2, lstm_layers=1, n_hist=16, var_dim=4, dropout=0.2
)
# Dropout, symbol dropout and window orders all draw random numbers: a resume must restore
# every generator, the LR schedule and the optimizer's moments to match.
RUN = TrainConfig(
    epochs=3,
    batch_size=16,
    lr=3e-3,
    windows_per_epoch=96,
    symbol_dropout=0.3,
    patience=10,
    val_fraction=0.2,
    test_fraction=0.0,
    progress=False,
)


@pytest.fixture(scope="module")
def panel() -> Panel:
    return synthetic_panel(n_bars=900, n_features=16, symbols=("ESH4", "NQH4"))


def interrupted(panel: Panel, out: Path, at_epoch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Train until epoch `at_epoch` starts, then stop as a Ctrl-C would."""
    run_epoch = loop.run_epoch

    def stop_at(*args: Any) -> dict[str, Any]:
        if args[6] == at_epoch:  # run_epoch(loop, data, train, val, cfg, device, epoch, ...)
            raise KeyboardInterrupt
        return run_epoch(*args)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "run_epoch", stop_at)
        with pytest.raises(KeyboardInterrupt):
            train_on_panel(panel, out, TINY, RUN, "synthetic", {})


def saved(out: Path) -> tuple[bytes, dict[str, Any], list[dict[str, Any]]]:
    """Weights, config.json and history, without what measures the process (time, memory)."""
    config = json.loads((out / checkpoint.CONFIG).read_text())
    config["metrics"].pop("peak_memory_mb")
    history = json.loads((out / "metrics.json").read_text())
    for record in history:
        del record["seconds"], record["val_seconds"], record["peak_memory_mb"]
    return (out / checkpoint.WEIGHTS).read_bytes(), config, history


def test_a_resumed_run_ends_with_the_checkpoint_of_an_uninterrupted_one(
    panel: Panel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train_on_panel(panel, tmp_path / "straight", TINY, RUN, "synthetic", {})
    assert not (tmp_path / "straight" / STATE_FILE).exists()  # a finished run leaves none

    out = tmp_path / "resumed"
    interrupted(panel, out, 3, monkeypatch)
    state = out / STATE_FILE
    assert not (out / checkpoint.WEIGHTS).exists()
    n_params = TemporalFusionTransformer(replace(TINY, n_symbols=3)).n_params()
    assert state.stat().st_size > 4 * 4 * n_params  # weights, best weights, Adam's two moments
    with pytest.raises(TrainingError, match="pass --resume to continue it"):
        train_on_panel(panel, out, TINY, RUN, "synthetic", {})
    train_on_panel(panel, out, TINY, RUN, "synthetic", {}, resume=True)
    assert not state.exists()

    straight, resumed = saved(tmp_path / "straight"), saved(out)
    assert resumed[0] == straight[0], "weights differ from the uninterrupted run's"
    assert resumed[1:] == straight[1:]
    assert [h["epoch"] for h in resumed[2]] == [1, 2, 3]


def test_a_resume_needs_the_same_run_and_an_unfinished_one(
    panel: Panel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(TrainingError, match="holds no unfinished run"):
        train_on_panel(panel, tmp_path, TINY, RUN, "synthetic", {}, resume=True)
    interrupted(panel, tmp_path, 2, monkeypatch)
    renamed = {"sources": [{"data": "MES=/data/dailydata"}]}  # the same files as another product
    for changed, what in ((replace(RUN, lr=1e-3), "train"), (RUN, "features"), (RUN, "sources")):
        fingerprint = "other" if what == "features" else "synthetic"
        report = renamed if what == "sources" else {}
        with pytest.raises(TrainingError, match=f"belongs to another run \\({what} differ"):
            train_on_panel(panel, tmp_path, TINY, changed, fingerprint, report, resume=True)
    assert (tmp_path / STATE_FILE).exists()  # a refused resume leaves the state as it was


def test_a_damaged_state_is_refused_saying_what_to_do(
    panel: Panel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupted(panel, tmp_path, 2, monkeypatch)
    state = tmp_path / STATE_FILE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # a write cut short
    with pytest.raises(TrainingError, match=r"unreadable .*delete it and train without --resume"):
        train_on_panel(panel, tmp_path, TINY, RUN, "synthetic", {}, resume=True)
