"""Feature-engine cost, one run, same bars: `--symbols` different series made from the 6EH4
month (each rotated, its returns scaled and for odd symbols reflected: see
benchmarks/features/series.py), fed minute by minute as a worker sees them.

Rows, each a design difference stated in the table and the results file:

(a) barcast `update_many` once per minute for all symbols (64 bars per call), all 227 features,
    against TA-Lib 0.8.2's streaming handles (`talib.stream`) ADX(14), RSI(14), EMA(12),
    MACD(12,26,9): four Python calls per bar per symbol, four indicators;
(b) like for like in calls: barcast `update_many` with one symbol and one bar per call against
    the same TA-Lib calls (timed in the same slices as (a));
(c) `--wide-symbols` (1,000) series on `--wide-minutes` minutes: barcast one call per minute for
    all of them, TA-Lib per bar per symbol;
(d) talipp: the same four indicators, pure Python, on the first `--talipp-minutes` minutes (its
    cost per bar is flat and the whole month would take minutes), against barcast (a) on those
    minutes;
(e) batch mode: `compute_batch` over every symbol's month, bars/s;
(f) JIT start-up in a fresh interpreter (import + first call): with an empty numba cache (cold)
    and with the cache that run left (warm).

The competitors of a row alternate in `--rounds` slices of the bars, the order rotating, so
background load on this shared machine lands on all alike; a cost is this thread's CPU time
per bar, the median over the slices.

    .venv/bin/python -m benchmarks.features [--symbols 64] [--rounds 16] [--talipp-minutes 1500]
        [--wide-symbols 1000] [--wide-minutes 1500]

Writes benchmarks/results/features.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.features.runs import (
    HISTORY,
    alternate,
    barcast_bars,
    barcast_minutes,
    batch_bars_per_s,
    jit_start_seconds,
    talib_feeder,
    talipp_feeder,
)
from benchmarks.features.series import month_series
from benchmarks.provenance import loadavg, run_metadata
from features import engine
from streams.settings import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results" / "features.json"
TALIB = "TA-Lib stream ADX+RSI+EMA+MACD, 4 calls per bar"
GOALS = {"talib4_over_barcast": 1.0, "talipp4_over_barcast": 20.0, "jit_warm_s": 5.0}


def row(barcast: str, anchor: str, design: str, costs: tuple[float, float]) -> dict[str, Any]:
    return {
        "barcast": barcast,
        "anchor": anchor,
        "design": design,
        "barcast_ns_per_bar": round(costs[0], 1),
        "anchor_ns_per_bar": round(costs[1], 1),
        "anchor_over_barcast": round(costs[1] / costs[0], 2),
    }


def slices(first: int, last: int, rounds: int) -> np.ndarray:
    return np.linspace(first, last, rounds + 1).astype(int)


def warmed(bars: dict[str, np.ndarray]) -> np.ndarray:
    """States fed the first HISTORY minutes, untimed (which also loads the compiled kernel)."""
    states = engine.new_states(bars["close"].shape[1])
    barcast_minutes(states, bars)(range(HISTORY))
    return states


def month_rows(args: argparse.Namespace, bars: dict[str, np.ndarray]) -> dict[str, Any]:
    """Rows (a), (b) and (d) on the whole month of `--symbols` series."""
    n, minutes = args.symbols, bars["close"].shape[0]
    per_minute, one_bar = barcast_minutes(warmed(bars), bars), barcast_bars(warmed(bars), bars)
    talib = talib_feeder(bars)
    talipp = talipp_feeder(bars, HISTORY + args.talipp_minutes)
    # Millions of inputs now live on the Python heap; frozen, the collector (which the talipp
    # indicators' own allocations trigger) no longer walks them on every pass.
    gc.collect()
    gc.freeze()
    minute_ns, bar_ns, talib_ns = alternate(
        [per_minute, one_bar, talib], slices(HISTORY, minutes, args.rounds), n
    )
    prefix = barcast_minutes(warmed(bars), bars)
    talipp(range(HISTORY))
    prefix_ns, talipp_ns = alternate(
        [prefix, talipp], slices(HISTORY, HISTORY + args.talipp_minutes, args.rounds), n
    )
    return {
        "per_minute": row(
            f"update_many once per minute, {n} bars per call, {engine.N_FEATURES} features",
            TALIB,
            f"not like for like: barcast batches the {n} symbols' bars of a minute into one "
            f"call (its product path) and computes {engine.N_FEATURES} features; TA-Lib has no "
            "batched "
            "streaming call and computes 4 indicators",
            (minute_ns, talib_ns),
        ),
        "one_bar_per_call": row(
            f"update_many with one symbol and one bar per call, {engine.N_FEATURES} features",
            TALIB,
            "like for like in calls: one call for barcast's bar against TA-Lib's four for the "
            f"same bar; barcast still computes {engine.N_FEATURES} features to TA-Lib's 4",
            (bar_ns, talib_ns),
        ),
        "talipp": row(
            f"update_many once per minute, {n} bars per call, on the first "
            f"{args.talipp_minutes} minutes",
            "talipp ADX+RSI+EMA+MACD (pure Python), 4 calls per bar",
            "as per_minute, against a pure-Python library",
            (prefix_ns, talipp_ns),
        ),
    }


def wide_row(args: argparse.Namespace) -> dict[str, Any]:
    """Row (c): `--wide-symbols` series on their first `--wide-minutes` timed minutes."""
    n = args.wide_symbols
    bars = month_series(n, HISTORY + args.wide_minutes)
    per_minute, talib = barcast_minutes(warmed(bars), bars), talib_feeder(bars)
    gc.collect()
    gc.freeze()
    costs = alternate(
        [per_minute, talib], slices(HISTORY, HISTORY + args.wide_minutes, args.rounds), n
    )
    state_mb = engine.new_states(1).nbytes * n / 1e6
    return row(
        f"update_many once per minute, {n:,} bars per call, on {args.wide_minutes:,} minutes",
        TALIB,
        f"as per_minute, at {n:,} symbols (barcast's states: {state_mb:.0f} MB)",
        (costs[0], costs[1]),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--symbols", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=16, help="alternating slices of the bars")
    parser.add_argument("--talipp-minutes", type=int, default=1500)
    parser.add_argument("--wide-symbols", type=int, default=1000)
    parser.add_argument("--wide-minutes", type=int, default=1500)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    provenance = run_metadata()  # now: others may commit while this runs
    bars = month_series(args.symbols)
    rows = month_rows(args, bars)
    rows["wide"] = wide_row(args)
    with tempfile.TemporaryDirectory() as cache:
        cold, warm = jit_start_seconds(cache), jit_start_seconds(cache)
    ratios = {
        "talib4_over_barcast": rows["per_minute"]["anchor_over_barcast"],
        "talipp4_over_barcast": rows["talipp"]["anchor_over_barcast"],
    }
    result = {
        "rows": rows,
        "batch_bars_per_s": round(batch_bars_per_s(bars)),
        "jit_cold_s": round(cold, 2),
        "jit_warm_s": round(warm, 2),
        "goals": GOALS,
        "goals_met": {name: ratios[name] >= GOALS[name] for name in ratios}
        | {"jit_warm_s": warm <= GOALS["jit_warm_s"]},
        "features": engine.N_FEATURES,
        "fingerprint": engine.FINGERPRINT,
        "series": "the 6EH4 month, each symbol rotated, scaled and odd ones reflected "
        "(benchmarks/features/series.py)",
        "symbols": args.symbols,
        "minutes": bars["close"].shape[0],
        "timed_bars": (bars["close"].shape[0] - HISTORY) * args.symbols,
        "rounds": args.rounds,
        "talipp_minutes": args.talipp_minutes,
        "wide_symbols": args.wide_symbols,
        "wide_minutes": args.wide_minutes,
        "provenance": provenance | {"loadavg_end": loadavg()},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    print(f"wrote {args.output}")
    return 0


def print_table(result: dict[str, Any]) -> None:
    print(
        f"{result['symbols']} different series x {result['minutes']} minutes of 6EH4 "
        f"(median of {result['rounds']} slices), ns per bar"
    )
    print(f"  {'row':<17}{'barcast':>9}{'anchor':>9}{'ratio':>8}  (anchor / barcast)")
    for name, r in result["rows"].items():
        print(
            f"  {name:<17}{r['barcast_ns_per_bar']:>9,.0f}{r['anchor_ns_per_bar']:>9,.0f}"
            f"{r['anchor_over_barcast']:>7.2f}x  barcast: {r['barcast']}; anchor: {r['anchor']}"
        )
        print(f"  {'':<17}design: {r['design']}")
    print(f"  batch: {result['batch_bars_per_s']:,} bars/s")
    cold, warm = result["jit_cold_s"], result["jit_warm_s"]
    print(f"  JIT start, cold / warm cache: {cold:.1f} s / {warm:.1f} s")
    print(f"  goals {result['goals']}: met {result['goals_met']}")
    print(f"  load average at start / end: {result['provenance']['loadavg']} / "
          f"{result['provenance']['loadavg_end']}")  # fmt: skip
