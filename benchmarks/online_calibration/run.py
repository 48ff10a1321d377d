"""Online calibration, offline: the product checkpoint's forecasts of the 6EH4 month replayed
through the scoring stage and the online calibrator, without a broker.

    nice -n 10 .venv/bin/python -m benchmarks.online_calibration [--checkpoint DIR]
        [--window 240] [--seeds 10] [--forecast-only]

- (a) mechanism: the checkpoint's q10/q90 miscalibrated on purpose (the interval around q50
  scaled by 0.5, as `interval_scale` x 0.5 in its config would make the engine serve): 80 %
  coverage with and without online calibration over the scored forecasts from the 300th on,
  and the ranges of the cumulative and of the rolling (dashboard) coverage from there;
- (b) the unmodified checkpoint on its test week (the windows `barcast evaluate` scores): coverage
  and mean pinball with online calibration (run from the month's start) against the checkpoint's
  static calibration;
- (c) regime replay: every log return after mid-month scaled by 3, rolling coverage with and
  without online calibration over time (benchmarks/results/online_calibration.png, with (a)).
- (d) reference (`benchmarks/online_calibration/reference.py`): the same bands for a forecaster
  calibrated by construction (a Gaussian random walk forecast with its true quantiles), over as
  many forecasts, through the same scoring stage and rolling figures: how far sampling alone
  moves a rolling or a cumulative coverage; and with the product's tracking and with fixed
  steps, what holding the rolling coverage nearer 80 % costs in pinball.

Figures and acceptance checks go to benchmarks/results/online_calibration.json.
Forecasting the month at the product's size takes a while on a small CPU, so the forecast
values (exactly what the worker would publish on `forecasts`) are cached in
var/online_calibration, keyed by the checkpoint's model id and the bars' hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from benchmarks.online_calibration.reference import reference
from benchmarks.online_calibration.replay import START, band, coverage_series, replay, summary
from benchmarks.provenance import loadavg, run_metadata
from features.bars import PRICE_SCALE, read_bar_csv
from features.corrections import bars_from_frame
from model.dataset import Split
from model.serving.conformal import CalibrationConfig
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.messages import forecast_value
from model.serving.offline import clean_history, forecast_history
from model.serving.scoring import LOWER, UPPER, ScoreValue
from model.serving.scoring_state import DEFAULT_WINDOW
from streams.ingest.convert import SIXE_CSV
from streams.settings import REPO_ROOT, Settings

SYMBOL = "6EH4"
CHECKPOINT = REPO_ROOT / "var" / "model_report" / "model_report"
CACHE = REPO_ROOT / "var" / "online_calibration"
RESULTS = REPO_ROOT / "benchmarks" / "results"
PRICES = ("open", "high", "low", "close")
REGIME_FACTOR = 3.0
MISCALIBRATION = 0.5


def month_frame(settings: Settings) -> pd.DataFrame:
    return read_bar_csv(settings.data_dir / SIXE_CSV)


def regime_frame(frame: pd.DataFrame, factor: float = REGIME_FACTOR) -> pd.DataFrame:
    """The month with every log return after its middle bar scaled by `factor`: each price of a
    bar is its log move from the previous close, scaled, on top of the rebuilt previous close, so
    open/high/low/close keep their order (scaling by a positive factor is monotone)."""
    close = frame["close"].to_numpy(dtype=np.float64)
    log_prev = np.log(np.concatenate([frame["open"].to_numpy()[:1], close[:-1]]))
    scale = np.where(np.arange(len(frame)) >= len(frame) // 2, factor, 1.0)
    moves = {f: (np.log(frame[f].to_numpy(dtype=np.float64)) - log_prev) * scale for f in PRICES}
    level = log_prev[0] + np.cumsum(moves["close"])
    previous = np.concatenate([log_prev[:1], level[:-1]])
    out = frame.copy()
    for f in PRICES:
        out[f] = np.exp(previous + moves[f])
    return out


def raw_bars(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return bars_from_frame(frame, symbol=SYMBOL, instrument_id=1, source="replay:" + SIXE_CSV)


def forecast_values(raw: list[dict[str, Any]], checkpoint: Path) -> list[dict[str, Any]]:
    """The `forecasts` values the worker would publish for these raw bars, cached."""
    engine = ForecastEngine(checkpoint, "cpu")
    digest = hashlib.sha256(orjson.dumps(raw)).hexdigest()[:16]
    path = CACHE / f"{engine.model_id[:16]}-{digest}.jsonl"
    if path.exists():
        return [orjson.loads(line) for line in path.read_bytes().splitlines()]
    closes = {bar["ts_event"]: bar["close"] for bar in clean_history(raw)[SYMBOL].bars}
    values = []
    for (symbol, ts), quantiles in sorted(forecast_history(raw, engine).items()):
        request = WindowRequest(
            symbol, symbol.encode(), 0, 0, np.empty(0), ts, closes[ts] * PRICE_SCALE, 0
        )
        values.append(forecast_value(engine, request, quantiles, 0, 0))
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(orjson.dumps(v) for v in values))
    return values


def miscalibrated(value: dict[str, Any], factor: float = MISCALIBRATION) -> dict[str, Any]:
    """The value the checkpoint would serve with its interval scale x `factor`: the engine's
    q' = q50 + s (q - q50) is linear in s, so this is that forecast without forecasting again."""
    out = dict(value)
    median = np.asarray(value["q50"])
    for name in (LOWER, UPPER):
        q = median + factor * (np.asarray(value[name]) - median)
        out[name], out["price_" + name] = q.tolist(), (value["close"] * np.exp(q)).tolist()
    return out


def week_records(
    records: list[ScoreValue], clean: list[dict[str, Any]], checkpoint: Path
) -> list[ScoreValue]:
    """The records of the windows `barcast evaluate --split test` scores: last bar and label
    in the checkpoint's test split, the first input row `embargo` bars past its start."""
    config = json.loads((checkpoint / "config.json").read_text())
    split = Split.from_dict(config["data"]["split"])
    lookback = config["model"]["lookback"]
    ts = np.array([b["ts_event"] for b in clean])
    start = int(np.searchsorted(ts, split.calib_end))
    first_end = ts[min(start + split.embargo + lookback - 1, len(ts) - 1)]
    return [r for r in records if r["ts_event"] >= first_end]


def plot(series: dict[str, dict[str, np.ndarray]], middle: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharey=True)
    titles = {
        "mechanism": "(a) interval x 0.5 on purpose",
        "regime": "(c) returns x 3 after mid-month",
    }
    for ax, (case, title) in zip(axes, titles.items(), strict=True):
        for online in (True, False):
            s = series[f"{case}_{'online' if online else 'static'}"]
            when = pd.to_datetime(s["ts"], utc=True)
            ax.plot(
                when, s["rolling"], lw=0.8, label=f"{'online' if online else 'static'} calibration"
            )
        if case == "regime":
            ax.axvline(pd.to_datetime(middle, utc=True), color="k", ls=":", label="returns x 3")
        ax.axhspan(0.77, 0.83, color="g", alpha=0.1)
        ax.axhline(0.8, color="g", lw=0.6)
        ax.set_title(title)
        ax.set_ylabel("rolling 80 % coverage")
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cases(
    month: dict[str, Any], regime: dict[str, Any], checkpoint: Path, window: int
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Every figure of (a)-(c) and the coverage series behind the plot."""
    inputs = {
        "mechanism": (month["clean"], [miscalibrated(v) for v in month["forecasts"]]),
        "unmodified": (month["clean"], month["forecasts"]),
        "regime": (regime["clean"], regime["forecasts"]),
    }
    figures: dict[str, Any] = {}
    series: dict[str, dict[str, np.ndarray]] = {}
    for case, (clean, forecasts) in inputs.items():
        for online in (True, False):
            name = f"{case}_{'online' if online else 'static'}"
            records = replay(clean, forecasts, CalibrationConfig(enabled=online))
            series[name] = coverage_series(records, window)
            figures[name] = summary(records) | {
                "after_start": summary(records[START:]),
                "rolling_from_start": band(series[name], START, "rolling"),
                "cumulative_from_start": band(series[name], START, "cumulative"),
            }
            if case == "unmodified":
                figures[name]["test_week"] = summary(week_records(records, clean, checkpoint))
            if case == "regime":
                late = [r for r in records if r["ts_event"] >= regime["middle"]]
                figures[name]["after_middle"] = summary(late)
    return figures, series


def verdicts(figures: dict[str, Any]) -> dict[str, bool]:
    """The issue's acceptance checks on these figures."""
    on, off = figures["mechanism_online"], figures["mechanism_static"]
    week_on = figures["unmodified_online"]["test_week"]
    week_off = figures["unmodified_static"]["test_week"]
    return {
        "a_online_after_start_within_80pm3": abs(on["after_start"]["coverage"] - 0.8) <= 0.03,
        "a_static_after_start_below_70": off["after_start"]["coverage"] < 0.7,
        "a_online_cumulative_within_80pm3": all(
            abs(on["cumulative_from_start"][k] - 0.8) <= 0.03 for k in ("min", "max")
        ),
        "a_online_rolling_within_80pm3": all(
            abs(on["rolling_from_start"][k] - 0.8) <= 0.03 for k in ("min", "max")
        ),
        "a_static_rolling_below_70": off["rolling_from_start"]["max"] < 0.7,
        "b_test_week_within_80pm2": abs(week_on["coverage"] - 0.8) <= 0.02,
        "b_pinball_at_most_1pct_worse": week_on["mean_pinball_bp"]
        <= 1.01 * week_off["mean_pinball_bp"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=CHECKPOINT)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="rolling window")
    parser.add_argument("--seeds", type=int, default=10, help="random walks of reference (d)")
    parser.add_argument("--forecast-only", action="store_true", help="fill the cache and stop")
    args = parser.parse_args(argv)
    provenance = run_metadata()
    frame = month_frame(Settings.from_env())
    frames = {"month": frame, "regime": regime_frame(frame)}
    runs: dict[str, dict[str, Any]] = {}
    for name, bars in frames.items():
        raw = raw_bars(bars)
        clean = clean_history(raw)[SYMBOL].bars
        runs[name] = {"clean": clean, "forecasts": forecast_values(raw, args.checkpoint)}
    runs["regime"]["middle"] = int(frame["ts_event"].iloc[len(frame) // 2])
    if args.forecast_only:
        return 0
    figures, series = cases(runs["month"], runs["regime"], args.checkpoint, args.window)
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(series, runs["regime"]["middle"], RESULTS / "online_calibration.png")
    report = {
        "checkpoint": str(args.checkpoint),
        "model_id": runs["month"]["forecasts"][0]["model_id"],
        "data": SIXE_CSV,
        "calibration": asdict(CalibrationConfig()),
        "rolling_window": args.window,
        "start": START,
        "miscalibration": MISCALIBRATION,
        "regime_factor": REGIME_FACTOR,
        "figures": figures,
        "ideal_reference": reference(figures["mechanism_online"]["n"], args.window, args.seeds),
        "acceptance": verdicts(figures),
        "provenance": provenance | {"loadavg_end": loadavg()},
    }
    (RESULTS / "online_calibration.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({"acceptance": report["acceptance"], "figures": figures}, indent=1))
    return 0
