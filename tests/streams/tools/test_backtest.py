"""`barcast backtest` through the session's broker and real workers: two runs give the same
bytes, and the report's figures follow from what the worker published, recomputed here from
the topics with the training label rule written out (not through the scoring module)."""

from __future__ import annotations

import gzip
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import orjson
import pandas as pd
import pytest

from features.bars import PRICE_SCALE, is_control
from features.corrections import bars_from_frame, correct_history
from model.serving.skill import skill_interval
from streams.ingest.convert import SIXE_INSTRUMENT_ID, bars_to_records, ohlcv_metadata, write_dbn
from streams.schema import expired
from streams.settings import Settings
from streams.tools.backtest.collect import Collected, TopicReader, owed_forecasts, owed_scores
from streams.tools.backtest.harness import BacktestResult, run_backtest
from streams.tools.cli import main
from tests.checkpoints import make_checkpoint
from tests.topic_logs import read_all

MINUTE = 60 * 10**9
LEVELS = {"q10": 0.1, "q50": 0.5, "q90": 0.9}
# 2 January 2024, 17:00 to 01:00 UTC: the CME FX daily break (22:00-23:00) and a few gap fills.
SLICE = ("2024-01-02T17:00", "2024-01-03T01:00")


def sixe_slice(sixe_bars: pd.DataFrame, path: Path) -> Path:
    lo, hi = (pd.Timestamp(t, tz="UTC").value for t in SLICE)
    part = sixe_bars[(sixe_bars.ts_event >= lo) & (sixe_bars.ts_event < hi)]
    records = bars_to_records(part, SIXE_INSTRUMENT_ID)
    return write_dbn(path, ohlcv_metadata({"6EH4": SIXE_INSTRUMENT_ID}, lo, hi), records)


def values(settings: Settings, topic: str) -> list[dict[str, Any]]:
    out = [orjson.loads(m.value) for m in read_all(settings.broker, topic)]  # the run ended
    return [v for v in out if not is_control(v)]


def labels(bars: dict[int, dict[str, Any]], forecast: dict[str, Any]) -> np.ndarray | None:
    """log(close[t+k] / close[t]) for every horizon, or None when a minute of it has no bar
    (a session break) or a gap fill (the training label rule)."""
    ahead = [bars.get(forecast["ts_event"] + h * MINUTE) for h in forecast["horizons"]]
    if any(b is None or b["status"] == "synthetic" for b in ahead):
        return None
    closes = np.array([b["close"] * PRICE_SCALE for b in ahead if b is not None])
    return np.log(closes) - np.log(forecast["close"])


def recompute(result: BacktestResult) -> dict[str, Any]:
    settings = result.settings
    clean = values(settings, settings.topic_clean)
    forecasts = {
        (f["symbol"], f["ts_event"]): f for f in values(settings, settings.topic_forecasts)
    }
    by_symbol: dict[str, dict[int, dict[str, Any]]] = {}
    for bar in clean:
        by_symbol.setdefault(bar["symbol"], {})[bar["ts_event"]] = bar
    losses, inside, symbols = [], [], []
    for key in sorted(forecasts):
        f = forecasts[key]
        y = labels(by_symbol[f["symbol"]], f)
        if y is None:
            continue
        errors = {name: y - np.array(f[name]) for name in LEVELS}
        pinball = [np.maximum(q * errors[n], (q - 1) * errors[n]) for n, q in LEVELS.items()]
        losses.append(np.mean(pinball, axis=0) * 1e4)
        inside.append((y >= np.array(f["q10"])) & (y <= np.array(f["q90"])))
        symbols.append(f["symbol"])
    return {
        "raw": len(values(settings, settings.topic_raw)),
        "clean": len(clean),
        "forecasts": len(forecasts),
        "scored": len(losses),
        "pinball": np.array(losses),
        "inside": np.array(inside, dtype=float),
        "symbols": symbols,
    }


def test_a_bar_is_accounted_for_by_its_clean_bar_or_its_dead_letter() -> None:
    collected = Collected(raw={(0, 0): ("6EH4", 1), (0, 1): ("6EH4", 2), (1, 0): ("6EH4", 1)})
    assert collected.unaccounted() == [(0, 0), (0, 1), (1, 0)]
    collected.clean[("6EH4", 1)] = {}  # a repeated bar: its first copy's clean bar covers it
    collected.dead_letters.add((1, 7))  # another record's dead letter
    assert collected.unaccounted() == [(0, 1)]
    collected.dead_letters.add((0, 1))
    assert collected.unaccounted() == []


def test_a_missing_file_or_checkpoint_is_named_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_checkpoint(tmp_path / "model")
    missing = ["backtest", str(tmp_path / "nope.dbn.zst"), "--checkpoint", str(tmp_path / "model")]
    assert main(missing) == 2
    assert "nope.dbn.zst: no such file; pass DBN OHLCV files" in capsys.readouterr().err
    (tmp_path / "bars.dbn.zst").write_bytes(b"DBN")
    empty = ["backtest", str(tmp_path / "bars.dbn.zst"), "--checkpoint", str(tmp_path)]
    assert main(empty) == 2
    assert "config.json is missing" in capsys.readouterr().err


def test_a_directory_named_work_in_out_that_no_backtest_made_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_checkpoint(tmp_path / "model")
    notes = tmp_path / "out" / "work" / "notes.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("mine")
    (tmp_path / "bars.csv").write_text("")
    args = ["backtest", str(tmp_path / "bars.csv"), "--checkpoint", str(tmp_path / "model")]
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    assert "is not a backtest's scratch" in capsys.readouterr().err
    assert notes.read_text() == "mine"


def test_a_damaged_input_is_named_before_any_broker_or_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dbn_files: list[Path]
) -> None:
    """An empty CSV, one of a header alone, a truncated gzip, a file that is no DBN, a truncated
    DBN: each named with its exit code (2, 2, 7, 5, 7), before the replay (no broker:
    BARCAST_BROKER is not reached)."""
    make_checkpoint(tmp_path / "model")
    gz = gzip.compress(b"timestamp_utc,open,high,low,close,volume\n" * 1000)
    dbn = next(p for p in dbn_files if "esu4-nqu4" in p.name).read_bytes()
    cases = {
        "empty.csv": (b"", 2, "not a bar CSV"),
        "header.csv": (b"timestamp_utc,open,high,low,close,volume\n", 2, "holds no bar"),
        "cut.csv.gz": (gz[: len(gz) // 2], 7, "unreadable"),
        "x.parquet": (b"PAR1" * 10, 5, "not a DBN file"),
        "cut.dbn.zst": (dbn[: len(dbn) // 2], 7, "nothing was replayed"),
    }
    for name, (data, code, said) in cases.items():
        (tmp_path / name).write_bytes(data)
        args = ["backtest", str(tmp_path / name), "--checkpoint", str(tmp_path / "model")]
        assert main([*args, "--out", str(tmp_path / "out")]) == code, name
        assert said in capsys.readouterr().err, name


def test_a_configured_broker_that_does_not_answer_is_said_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    dbn_files: list[Path],
) -> None:
    make_checkpoint(tmp_path / "model")
    monkeypatch.setenv("BARCAST_BROKER", "127.0.0.1:1")
    monkeypatch.setenv("BARCAST_CONNECT_TIMEOUT_S", "0.5")
    data = next(p for p in dbn_files if "esu4-nqu4" in p.name)
    args = ["backtest", str(data), "--checkpoint", str(tmp_path / "model")]
    assert main([*args, "--out", str(tmp_path / "out")]) == 3
    assert "127.0.0.1:1" in capsys.readouterr().err


@pytest.mark.integration
def test_two_runs_give_the_same_report_and_its_figures_follow_from_the_topics(
    broker_settings: Settings, tmp_path: Path, sixe_bars: pd.DataFrame, dbn_files: list[Path]
) -> None:
    model_id = make_checkpoint(tmp_path / "model")
    files = [sixe_slice(sixe_bars, tmp_path / "6eh4.dbn.zst")]
    files += [f for f in dbn_files if "esu4-nqu4" in f.name]
    first = run_backtest(broker_settings, files, tmp_path / "model", tmp_path / "first")
    second = run_backtest(broker_settings, files, tmp_path / "model", tmp_path / "second")
    assert first.settings.topic_forecasts != second.settings.topic_forecasts
    assert first.json_path.read_bytes() == second.json_path.read_bytes()
    report = orjson.loads(first.json_path.read_bytes())
    assert b"latency" not in first.json_path.read_bytes() and report["model_id"] == model_id

    offline = recompute(first)
    counts = report["counts"]
    assert counts["replayed"] == offline["raw"] == 416 + 60
    assert counts["clean"] + counts["gap_fills"] == offline["clean"]
    assert counts["forecasts"] == offline["forecasts"] > 200
    assert counts["forecasts_scored"] == offline["scored"] > 150
    assert set(counts["forecasts_unscored"]) >= {"session_break", "gap_fill"}
    pinball, inside = offline["pinball"], offline["inside"]
    assert report["mean_pinball_bp"] == pytest.approx(pinball.mean(), rel=1e-12)
    assert report["coverage"] == pytest.approx(inside.mean(), rel=1e-12)
    for h, row in enumerate(report["by_horizon"]):
        assert row["pinball_bp"] == pytest.approx(pinball[:, h].mean(), rel=1e-12)
        assert row["coverage"] == pytest.approx(inside[:, h].mean(), rel=1e-12)
    assert [r["symbol"] for r in report["by_symbol"]] == sorted(set(offline["symbols"]))
    over_time = report["coverage_over_time"]
    assert over_time["bucket"] == "hour"
    assert sum(p["labels"] for p in over_time["points"]) == inside.size

    assert_skill_follows_from_the_scores(first, report["skill"])

    page = first.html_path.read_text()
    assert page.count("<svg") >= 3 + len(report["largest_moves"]) and 'polygon class="fan' in page
    assert "<table class='skill'>" in page


def assert_skill_follows_from_the_scores(result: BacktestResult, skill: dict[str, Any]) -> None:
    """The report's skill over each baseline is that of the worker's score records (the
    baselines' forecasts are not published: their pinball is on each record), in time order."""
    settings = result.settings
    records = sorted(
        values(settings, settings.topic_scores), key=lambda r: (r["ts_event"], r["symbol"])
    )
    published = values(settings, settings.topic_forecasts)
    assert sum(skill["sources"].values()) == len(records) and len(records) > 150
    assert {f["source"] for f in published} >= set(skill["sources"]) - {"model"}
    assert set(skill["baselines"]) == {"volatility_scale", "tod_ewma"}
    for name, figures in skill["baselines"].items():
        both = [r for r in records if r["unscored"] is None and r["baselines"][name] is not None]
        model = np.array([np.mean(list(r["pinball"].values())) for r in both])
        baseline = np.array([np.mean(list(r["baselines"][name].values())) for r in both])
        expected = skill_interval(model, baseline)
        assert expected is not None and figures["overall"]["forecasts"] == len(both)
        overall = figures["overall"]
        assert overall["skill"] == pytest.approx(1 - model.sum() / baseline.sum(), rel=1e-9)
        assert (overall["lower"], overall["upper"]) == pytest.approx(expected[1:3], rel=1e-9)


def test_what_a_worker_owes_starts_anew_after_an_expiry(sixe_bars: pd.DataFrame) -> None:
    """A symbol's forecasts and scores owed are those of each of its lives on its own: after an
    expiry the worker computes its features, windows and scores afresh (a backtest waiting for
    those of one whole history would wait for forecasts the worker never makes)."""
    bars = correct_history(bars_from_frame(sixe_bars.iloc[:400], symbol="A", source="t")).clean
    clean = {("A", bar["ts_event"]): bar for bar in bars}
    whole = Collected(clean=clean)
    whole.forecasts = {key: fake_forecast(*key) for key in owed_forecasts(whole, 60)}
    last = bars[199]["ts_event"]
    cut = Collected(clean=clean, forecasts=whole.forecasts, expiries={"A": {last}})
    assert [len(life) for _, life in cut.lives()] == [200, len(bars) - 200]
    lives = [
        Collected(
            clean={k: v for k, v in clean.items() if before(k[1])},
            forecasts={k: v for k, v in whole.forecasts.items() if before(k[1])},
        )
        for before in (lambda ts: ts <= last, lambda ts: ts > last)
    ]
    owed = [owed_forecasts(life, 60) for life in lives]
    assert owed_forecasts(cut, 60) == owed[0] | owed[1] != owed_forecasts(whole, 60)
    scored = owed_scores(cut)
    assert scored == owed_scores(lives[0]) | owed_scores(lives[1])
    late = ("A", bars[195]["ts_event"])  # its label runs past the life's last bar
    assert late in owed_scores(whole) and late not in scored
    read = Collected()  # the expiry as the reader takes it off `bars.clean`
    value = orjson.dumps(expired(bars[300]["ts_event"], "A", last))
    TopicReader._add(SimpleNamespace(settings=Settings()), read, Message("bars.clean", value))  # type: ignore[arg-type]
    assert read.expiries == cut.expiries


class Message(NamedTuple):
    """What the reader reads of a consumed message."""

    name: str
    data: bytes

    def topic(self) -> str:
        return self.name

    def value(self) -> bytes:
        return self.data


def fake_forecast(symbol: str, ts_event: int) -> dict[str, Any]:
    band = {name: [0.0] * 10 for name in LEVELS}
    return {"symbol": symbol, "ts_event": ts_event, "close": 1.1, "horizons": list(range(1, 11)),
            "model_id": "m", **band}  # fmt: skip
