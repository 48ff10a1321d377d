"""The walk-forward protocol, its guard on held-out data, and its pooled figures."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from benchmarks.walk_forward import run as walk_forward
from benchmarks.walk_forward.figures import compared, markdown_table, periods_of, pooled
from benchmarks.walk_forward.protocol import Protocol, ProtocolError
from benchmarks.walk_forward.run import PROTOCOL
from model.config import TFTConfig, TrainConfig

QUARTERS = ("2015Q1", "2016Q2", "2017Q3", "2018Q4", "2019Q1", "2020Q2", "2021Q3")


HELD_OUT = PROTOCOL.parent / "held_out.json"
ENCODERS = PROTOCOL.parent / "encoders.json"
HELD_OUT_QUARTERS = ("2022Q1", "2022Q2", "2022Q3", "2022Q4", "2023Q1")


@pytest.mark.parametrize("path", [PROTOCOL, HELD_OUT, ENCODERS])
def test_the_default_recipe_is_the_frozen_one(path: Path) -> None:
    """`barcast train`'s defaults are what each protocol froze but the encoder, which the
    encoders' protocol chose since (and each protocol runs the one it froze): another default
    changed after the freeze fails here, and needs a new freeze (its commit) and a new run of
    every fold."""
    frozen = json.loads(path.read_text())["frozen"]
    assert len(frozen["commit"]) == 40
    model = replace(TFTConfig(), encoder=frozen["model"]["encoder"])
    assert json.loads(json.dumps(asdict(model))) == frozen["model"]
    assert json.loads(json.dumps(asdict(TrainConfig()))) == frozen["training"]
    assert Protocol.load(path).recipe["encoder"] == frozen["model"]["encoder"]


def test_the_default_encoder_is_the_one_the_encoders_protocol_compared_and_chose() -> None:
    """Its rule: the stream encoder becomes the default if not worse there and faster end to
    end (docs/model-report.md, the encoders)."""
    protocol = Protocol.load(ENCODERS)
    recipes = {f.group: protocol.recipe | f.recipe for f in protocol.folds}
    assert recipes == {"window-6m": {"encoder": "window"}, "stream-6m": {"encoder": "stream"}}
    assert TFTConfig().encoder == "stream"


def check_rolling(
    folds: list[Any], quarters: tuple[str, ...], months: int, end: str = "9999-12-31"
) -> None:
    """Each fold tests its quarter (up to `end`), calibrates on the month before, validates on
    the month before that and trains on the `months` before validation, never reading the
    quarter."""
    for quarter, fold in zip(quarters, folds, strict=True):
        test = pd.Period(quarter, "Q")
        d = fold.definition
        quarter_end = min(str((test + 1).start_time.date()), end)
        assert d["test"] == [str(test.start_time.date()), quarter_end]
        calib = pd.Timestamp(d["test"][0]) - pd.DateOffset(months=1)
        val = calib - pd.DateOffset(months=1)
        assert d["calib"][0] == str(calib.date()) and d["val"][0] == str(val.date())
        assert d["train"][0] == str((val - pd.DateOffset(months=months)).date())
        assert fold.split == "test" and fold.dates["test_start"] == d["test"][0]
        assert fold.train[0].end == d["test"][0]  # training never reads the test quarter


def test_the_registered_protocol_is_the_one_the_issue_describes() -> None:
    protocol = Protocol.load(PROTOCOL)
    groups = {g: [f for f in protocol.folds if f.group == g] for g in ("es-24m", "es-6m", "lopo")}
    assert [len(v) for v in groups.values()] == [7, 7, 3] and len(protocol.folds) == 17
    for months in (24, 6):
        check_rolling(groups[f"es-{months}m"], QUARTERS, months)
    for fold in groups["lopo"]:
        tested = {s.source for s in fold.evaluate}
        assert fold.split == "all" and len(tested) == 1
        assert {s.source for s in fold.train} == {"ES", "6E", "BTC"} - tested
    es = [s for f in protocol.folds for s in (*f.train, *f.evaluate) if s.source == "ES"]
    assert max(pd.Timestamp(s.end) for s in es) == pd.Timestamp("2022-01-01")


def test_the_encoders_protocol_runs_both_encoders_on_the_walk_forwards_6_month_folds() -> None:
    walk = [f.definition for f in Protocol.load(PROTOCOL).folds if f.group == "es-6m"]
    protocol = Protocol.load(ENCODERS)
    assert protocol.compare == ["stream-6m", "window-6m"]
    for group, recipe in (("window-6m", {}), ("stream-6m", {"encoder": "stream"})):
        folds = [f for f in protocol.folds if f.group == group]
        assert [f.recipe for f in folds] == [recipe] * len(walk)
        assert [periods_of({"definition": f.definition}) for f in folds] == [
            periods_of({"definition": d}) for d in walk
        ]


def test_the_held_out_protocol_tests_only_the_years_no_design_step_read() -> None:
    """The final evaluation: every test quarter from 2022 on, to the end of the FirstRate files,
    after the walk-forward's frozen commit; the walk-forward itself never reads 2022."""
    protocol = Protocol.load(HELD_OUT)
    groups = {g: [f for f in protocol.folds if f.group == g] for g in ("es-24m", "es-6m")}
    assert [len(v) for v in groups.values()] == [5, 5] and len(protocol.folds) == 10
    for months in (24, 6):
        check_rolling(groups[f"es-{months}m"], HELD_OUT_QUARTERS, months, "2023-03-25")
    assert min(f.definition["test"][0] for f in protocol.folds) == "2022-01-01"
    assert max(f.definition["test"][1] for f in protocol.folds) == "2023-03-25"
    assert protocol.frozen["commit"] != json.loads(PROTOCOL.read_text())["frozen"]["commit"]


def protocol_file(tmp_path: Path, folds: list[dict[str, Any]]) -> Path:
    values = json.loads(PROTOCOL.read_text()) | {"folds": folds}
    path = tmp_path / "protocol.json"
    path.write_text(json.dumps(values))
    return path


def dated(test: list[str], **changes: Any) -> dict[str, Any]:
    return {
        "name": "f",
        "group": "g",
        "sources": ["ES"],
        "train": ["2021-01-01", "2021-07-01"],
        "val": ["2021-07-01", "2021-08-01"],
        "calib": ["2021-08-01", test[0]],
        "test": test,
    } | changes


def test_a_fold_reaching_the_held_out_es_bars_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    Protocol.load(protocol_file(tmp_path, [dated(["2021-09-01", "2022-01-01"])]))
    with pytest.raises(
        ProtocolError, match=r"held-out bars .* end the fold's ranges by 2022-01-01"
    ):
        Protocol.load(protocol_file(tmp_path, [dated(["2021-09-01", "2022-01-02"])]))
    open_range = {"name": "o", "group": "g", "train_sources": [{"source": "ES"}]}
    with pytest.raises(ProtocolError, match="ES needs an explicit"):
        Protocol.load(protocol_file(tmp_path, [open_range | {"test_sources": [{"source": "6E"}]}]))
    with pytest.raises(ProtocolError, match="val ends 2021-08-01 but calib starts 2021-08-02"):
        gap = dated(["2021-09-01", "2021-12-01"], calib=["2021-08-02", "2021-09-01"])
        Protocol.load(protocol_file(tmp_path, [gap]))
    with pytest.raises(ProtocolError, match="both trains and tests"):
        same = {"train_sources": [{"source": "6E"}], "test_sources": [{"source": "6E"}]}
        Protocol.load(protocol_file(tmp_path, [{"name": "s", "group": "g"} | same]))


def fold_record(name: str, group: str, gain: float, coverage: float) -> dict[str, Any]:
    tft = {"coverage_interval": coverage, "below_q10": 0.1, "below_q90": 0.9, "mean_pinball": 1}
    comparison = {
        "relative_gain": gain,
        "tft_mean_pinball": 1.0,
        "best_baseline": "har_tod_gaussian",
        "best_baseline_mean_pinball": 1.0,
        "dm_hln_p_value": 0.5,
        "difference_bp": 0.0,
        "bootstrap_ci95": [0.0, 0.0],
    }
    figures = {"forecasters": {"tft": tft}, "comparison": comparison}
    return {"name": name, "group": group, "n_windows": 3 * 1380, "offline": figures}


def test_pooled_figures_count_wins_and_check_the_issues_acceptance() -> None:
    """Three folds in which the TFT's loss is the baseline's less 2 % (two of them) or plus
    0.5 %: it wins two of three, its pooled interval excludes zero, its pooled gain passes 1 %;
    one fold's interval coverage is out of the band."""
    rng = np.random.default_rng(0)
    folds, losses = {}, {}
    for name, factor, coverage in (("a", 0.98, 0.80), ("b", 0.98, 0.81), ("c", 1.005, 0.75)):
        base = np.repeat(rng.exponential(1.0, 60), 3 * 1380 // 60) + rng.exponential(1.0, 3 * 1380)
        losses[name] = {
            "offline": {
                "tft": base * factor,
                "har_tod_gaussian": base,
                "ewma_gaussian": base * 1.1,
            },
            "served": {},
        }
        folds[name] = fold_record(name, "es", 1 - factor, coverage)
    result = pooled(folds, losses)["es"]
    offline = result["offline"]
    assert offline["tft_wins"] == 2 and offline["n_folds"] == 3 and "served" not in result
    assert offline["comparison"]["best_baseline"] == "har_tod_gaussian"
    assert offline["n_windows"] == 3 * 3 * 1380
    assert offline["comparison"]["bootstrap_ci95"][0] > 0
    assert offline["comparison"]["relative_gain"] > 0.01
    assert offline["comparison"]["confidence_set"]["included"] == ["tft"]
    acceptance = result["acceptance"]
    assert acceptance["milestone"] and acceptance["goal"]
    assert not acceptance["calibrated_in_every_fold"]
    assert acceptance["outside_band"] == ["c: coverage_interval 0.750"]
    table = markdown_table({"folds": folds, "pooled": {"es": result}})
    rows = table.splitlines()
    assert len(rows) == 2 + 3 + 1 and rows[-1].startswith("| **es, pooled** (2 of 3 folds won)")
    missing = pooled(folds, {k: v for k, v in losses.items() if k != "b"})["es"]
    assert missing == {"folds": ["a", "b", "c"], "missing_losses": ["b"]}


def test_a_protocol_runs_end_to_end_and_resumes(data_dir: Path, tmp_path: Path) -> None:
    """Two tiny folds on the shared 6E and BTC months through the product's train and evaluate:
    one dated (6E: a week of training, then validation, calibration and test days), one
    leave-one-product-out (trained on 6E, tested on BTC); the results hold both folds' figures
    and their pooled group, and a second run at the same commit and recipe trains nothing."""
    sources = {
        "6E": {"file": "6EH4.XCME_1min_bars_20240101_20240131.csv.gz"},
        "BTC": {"file": "BTC-PERP.BINANCE_1min_bars_20211231_20220201.csv.gz"},
    }
    folds = [
        {
            "name": "dated",
            "group": "g",
            "sources": ["6E"],
            "train": ["2024-01-02", "2024-01-09"],
            "val": ["2024-01-09", "2024-01-10"],
            "calib": ["2024-01-10", "2024-01-11"],
            "test": ["2024-01-11", "2024-01-12"],
        },
        {
            "name": "other-product",
            "group": "g",
            "train_sources": [{"source": "6E", "range": ["2024-01-02", "2024-01-09"]}],
            "test_sources": [{"source": "BTC", "range": ["2022-01-01", "2022-01-03"]}],
        },
    ]
    path = tmp_path / "protocol.json"
    path.write_text(json.dumps({"name": "tiny", "sources": sources, "folds": folds}))
    tiny = ["hidden=16", "heads=2", "lstm_layers=1", "var_dim=4", "epochs=1"]
    tiny += ["windows_per_epoch=128", "progress=false"]
    command = ["--protocol", str(path), "--results", str(tmp_path / "r.json")]
    command += ["--work", str(tmp_path / "work"), "--set", *tiny]
    assert walk_forward.main(command) == 0
    results = json.loads((tmp_path / "r.json").read_text())
    dated_fold, other = results["folds"]["dated"], results["folds"]["other-product"]
    assert dated_fold["split"] == "test" and other["split"] == "all"
    assert dated_fold["first_window_ts"].startswith("2024-01-11")
    assert dated_fold["calibration"]["first_window_ts"].startswith("2024-01-10")
    assert other["first_window_ts"].startswith("2022-01-01")
    for fold in (dated_fold, other):
        forecasters = set(fold["offline"]["forecasters"])
        assert {"tft", "har_tod_gaussian", "har_tod_ewma_gaussian"} <= forecasters
        assert set(fold["served"]["forecasters"]) == forecasters
        assert 0 <= fold["offline"]["comparison"]["dm_hln_p_value"] <= 1
    pooled_g = results["pooled"]["g"]
    assert pooled_g["offline"]["n_windows"] == dated_fold["n_windows"] + other["n_windows"]
    assert results["recipe"]["overrides"]["hidden"] == 16
    assert results["provenance"]["commit"] == dated_fold["identity"]["commit"]
    assert (
        walk_forward.run(
            Protocol.load(path),
            ["dated", "other-product"],
            results["recipe"]["overrides"],
            tmp_path / "r.json",
            tmp_path / "work",
        )
        == []
    )


def test_a_folds_own_recipe_overrides_the_protocols_for_that_fold(tmp_path: Path) -> None:
    """Two settings compared on the same periods: the fold's `recipe` reaches its training
    configuration and its digest (its results are not another fold's), the protocol's recipe
    the rest."""
    window = dated(["2021-09-01", "2021-10-01"], name="w", recipe={"encoder": "window"})
    protocol = Protocol.load(protocol_file(tmp_path, [dated(["2021-09-01", "2021-10-01"]), window]))
    default, windowed = protocol.folds
    assert default.recipe == {} and windowed.recipe == {"encoder": "window"}
    assert default.digest != windowed.digest
    base = {"hidden": 16}
    model, _ = walk_forward.recipe_configs(base | windowed.recipe, windowed)
    assert model.encoder == "window" and model.hidden == 16
    assert walk_forward.recipe_configs(base | default.recipe, default)[0].encoder == "stream"


def test_two_groups_compare_window_by_window_over_folds_of_the_same_periods(
    tmp_path: Path,
) -> None:
    """A stream group 1 % behind the window group on the same windows: paired by their
    periods, its difference's interval lies below zero; a fold not run yet waits; a protocol
    comparing a group it does not have is refused."""
    rng = np.random.default_rng(1)
    folds, losses = {}, {}
    for period in ("2021-09-01", "2021-10-01"):
        base = np.repeat(rng.exponential(1.0, 60), 2 * 1380 // 60) + rng.exponential(1.0, 2 * 1380)
        for group, factor in (("window", 1.0), ("stream", 1.01)):
            name = f"{group}-{period}"
            folds[name] = {"group": group, "definition": dated([period, "2021-12-01"], name=name)}
            losses[name] = {"offline": {"tft": base * factor}}
    folds["window-late"] = {"group": "window", "definition": dated(["2021-11-01", "2021-12-01"])}
    result = compared(folds, losses, ["stream", "window"])
    assert [a.split("-")[0] for a, _ in result["pairs"]] == ["stream", "stream"]
    assert result["waiting"] == [] and result["n_windows"] == 2 * 2 * 1380
    assert result["relative_gain"] == pytest.approx(1 - 1.01, abs=1e-9)
    assert result["bootstrap_ci95"][1] < 0
    assert compared(folds, losses, ["window", "stream"])["waiting"] == ["window-late"]
    path = protocol_file(tmp_path, [dated(["2021-09-01", "2021-10-01"])])
    path.write_text(json.dumps(json.loads(path.read_text()) | {"compare": ["g", "stream"]}))
    with pytest.raises(ProtocolError, match="must name two of the folds' groups"):
        Protocol.load(path)
