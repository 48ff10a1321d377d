"""The generated sections of docs/benchmarks.md, from benchmarks/results/*.json: the table of
every benchmark against its anchor (goals are the scripts' own), the runs behind the results
files, the pipeline run's checks, the backtest check and the GPU run."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.corrections import run as corrections
from benchmarks.docs.cells import Row, count, mark
from benchmarks.docs.pipeline_tables import pipeline_rows, pipeline_trust_rows
from benchmarks.features import run as features
from benchmarks.gpu import check as gpu_check
from benchmarks.model import run as model
from benchmarks.replay import run as replay
from features.registry import FINGERPRINT
from model.config import TFTConfig
from streams.settings import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"
# What makes the model benchmark's model the product's: its sizes and inputs
MODEL_SIZES = ("hidden", "heads", "var_dim", "lstm_layers", "lookback", "horizon", "n_hist")


def replay_rows(r: dict[str, Any]) -> list[Row]:
    paired = r["ratio_paired_median"]
    return [
        (
            f"`replay`: {r['records']:,} OHLCV records, DBN → `bars.raw`",
            f"bare librdkafka producer, same messages; {len(r['ratio_per_pair'])} pairs of "
            "runs, each on a fresh broker, the order alternating",
            f"{r['barcast_rps'] / 1e3:.0f}k rec/s vs {r['librdkafka_rps'] / 1e3:.0f}k (medians): "
            f"**{r['ratio']:.2f}x** (median of the pairs {paired:.2f}x; decode + serialize "
            f"alone: {r['barcast_encode_only_rps'] / 1e3:.0f}k rec/s; the embedded broker is "
            "the ceiling)",
            f">= {replay.GOAL}x {mark(min(r['ratio'], paired) >= replay.GOAL)}",
        )
    ]


def corrections_rows(r: dict[str, Any]) -> list[Row]:
    pairs, paired = len(r["runs_bps"]["corrections"]), r["agent_over_passthrough_paired_median"]
    goal = corrections.GOAL
    return [
        (
            "`corrections`: corrections agent vs a pass-through agent",
            "pass-through agent, same topics",
            f"{r['agent_bps']:,} vs {r['passthrough_bps']:,} bars/s: "
            f"**{r['agent_over_passthrough']:.2f}x** (median of {pairs} alternating pairs "
            f"{r['agent_over_passthrough_paired_median']:.2f}x; worker+broker CPU per bar "
            f"{r['agent_over_passthrough_by_cpu']:.2f}x; pure function alone: "
            f"{r['pure_bps']:,} bars/s on one core; the worker's CPU per bar for the "
            f"consumer, producer and agent with no work: ~"
            f"{r['passthrough_cpu_us_per_bar']['worker']:.0f} µs, the pass-through's)",
            f">= {goal}x {mark(min(r['agent_over_passthrough'], paired) >= goal)}",
        )
    ]


def features_rows(r: dict[str, Any]) -> list[Row]:
    rows, goals, met = r["rows"], features.GOALS, r["goals_met"]
    if r["fingerprint"] != FINGERPRINT:
        return [stale_row(f"`features`: {r['features']} features", "an older feature set")]
    talib = "TA-Lib streaming ADX+RSI+EMA+MACD, four calls per bar per symbol"

    def cost(name: str) -> str:
        x = rows[name]
        return (
            f"{x['barcast_ns_per_bar']:,.0f} ns/bar for {r['features']} features vs "
            f"{x['anchor_ns_per_bar']:,.0f} ns for TA-Lib's four (TA-Lib / barcast "
            f"**{x['anchor_over_barcast']:.2f}x**)"
        )

    series = f"{r['symbols']} different series (the 6EH4 month rotated, rescaled, reflected)"
    talipp = rows["talipp"]
    return [
        (
            f"`features`: {r['features']} features, {series}, one `update_many` per minute "
            f"({r['symbols']} bars per call)",
            f"{talib}: not like for like (barcast batches a minute, TA-Lib has no batched call)",
            cost("per_minute"),
            f"<= TA-Lib {mark(met['talib4_over_barcast'])}",
        ),
        (
            "`features`: the same bars, one symbol and one bar per `update_many` call",
            f"{talib}: like for like in calls (one call vs four for the same bar)",
            cost("one_bar_per_call"),
            "none set",
        ),
        (
            f"`features`: {r['wide_symbols']:,} different series x {r['wide_minutes']:,} "
            "minutes, one `update_many` per minute",
            f"{talib} (not like for like, as above)",
            cost("wide"),
            "none set",
        ),
        (
            f"`features`: {r['symbols']} series, first {r['talipp_minutes']:,} minutes, "
            "one call per minute",
            "talipp ADX+RSI+EMA+MACD (pure Python), four calls per bar",
            f"{talipp['anchor_ns_per_bar'] / 1e3:.1f} µs/bar vs barcast's "
            f"{talipp['barcast_ns_per_bar']:,.0f} ns (talipp / barcast "
            f"**{talipp['anchor_over_barcast']:.1f}x**)",
            f">= {goals['talipp4_over_barcast']:.0f}x {mark(met['talipp4_over_barcast'])}",
        ),
        (
            "`features`: batch mode (`compute_batch`) and JIT start-up",
            "none",
            f"batch {r['batch_bars_per_s'] / 1e6:.2f}M bars/s; JIT warm start "
            f"{r['jit_warm_s']:.2f} s (cold {r['jit_cold_s']:.0f} s)",
            f"warm <= {goals['jit_warm_s']:.0f} s {mark(met['jit_warm_s'])}",
        ),
    ]


def stale_row(what: str, why: str) -> Row:
    """A results file that no longer measures the product: shown as such, not as a figure."""
    return (what, "—", f"**stale**: measured {why}; rerun its benchmark", "—")


def model_rows(r: dict[str, Any]) -> list[Row]:
    c, b1, b256 = r["config"], r["batches"]["1"], r["batches"]["256"]
    product = TFTConfig()
    differs = [k for k in MODEL_SIZES if c[k] != getattr(product, k)]
    if differs:
        sizes = ", ".join(f"{k} {c[k]}" for k in differs)
        return [stale_row("`model`: TFT forward", f"at {sizes}, not the product's default model")]
    memory, goals = r["train_step_peak_mb"], model.GOALS
    what = (
        f"`model`: TFT forward, hidden {c['hidden']}, {c['heads']} heads, "
        f"{count(r['threads'], 'CPU thread')}, random weights"
    )
    out = []
    for name, anchor in r["anchors"].items():
        met = r["goals_met"][name]
        cached = f"; the worker's cached new-bar path at batch 1: {b1['barcast_cached_ms']:.2f} ms"
        limit = goals["cached_batch_1_ms"]
        cached_goal = f"; cached batch 1 <= {limit} ms {mark(b1['barcast_cached_ms'] <= limit)}"
        out.append(
            (
                what,
                f"pytorch-forecasting's TFT, `hidden_continuous_size` "
                f"{anchor['hidden_continuous_size']}: {anchor['params']:,} parameters vs "
                f"barcast's {r['params']['barcast']:,} ({anchor['design']})",
                f"batch 1: {b1['barcast_ms']:.1f} ms vs {b1[f'{name}_ms']:.0f} ms "
                f"(**{b1[f'speedup_vs_{name}']:.1f}x**); batch 256: "
                f"{b256['barcast_ms'] / 1e3:.2f} s vs {b256[f'{name}_ms'] / 1e3:.1f} s "
                f"(**{b256[f'speedup_vs_{name}']:.1f}x**); training step at batch "
                f"{memory['batch_size']}: {memory['barcast']:,.0f} MB vs {memory[name]:,.0f} MB"
                + (cached if name == "ptf" else ""),
                f">= {goals['speedup_batch_1']:.0f}x {mark(met['speedup_batch_1'])} / "
                f">= {goals['speedup_batch_256']:.0f}x {mark(met['speedup_batch_256'])}, "
                f"less memory {mark(met['less_training_memory'])}"
                + (cached_goal if name == "ptf" else ""),
            )
        )
    return out


SOURCES: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "replay": replay_rows,
    "corrections": corrections_rows,
    "features": features_rows,
    "model": model_rows,
    "pipeline": pipeline_rows,
    "pipeline_trust": pipeline_trust_rows,
}


def load(name: str, results: Path = RESULTS) -> dict[str, Any]:
    return json.loads((results / f"{name}.json").read_text())


def markdown_table(results: Path = RESULTS) -> str:
    lines = ["| benchmark | anchor (same run) | result | goal |", "| --- | --- | --- | --- |"]
    for name, rows in SOURCES.items():
        lines += ["| " + " | ".join(row) + " |" for row in rows(load(name, results))]
    return "\n".join(lines)


def tree(provenance: dict[str, Any]) -> str:
    """Whether the run's checkout was clean, and else which files differed that could matter
    (results files and Markdown cannot change a run)."""
    changed = provenance.get("dirty_paths") or []
    code = [p for p in changed if not p.startswith("benchmarks/results/") and p[-3:] != ".md"]
    if not code:
        return "clean" if not changed else "clean but for results files and docs"
    shown = ", ".join(f"`{path}`" for path in code[:3])
    return f"{shown} changed" + (f" and {len(code) - 3} more" if len(code) > 3 else "")


def tree_at(provenance: dict[str, Any]) -> str:
    return f"`{provenance['commit'][:7]}` ({tree(provenance)})"


def runs_table(results: Path = RESULTS) -> str:
    """One row per results file: the commit and machine of the run that wrote it."""
    lines = [
        "| results file | commit | files changed | CPU | torch threads |",
        "| --- | --- | --- | --- | --- |",
    ]
    for path in sorted(results.glob("*.json")):
        p = json.loads(path.read_text()).get("provenance")
        if p is None:
            lines.append(f"| `{path.name}` | not recorded | | | |")
            continue
        cpu = p.get("gpu") or p["cpu_model"]
        lines.append(
            f"| `{path.name}` | `{p['commit'][:7]}` | {tree(p)} | {cpu} | {p['torch_threads']} |"
        )
    return "\n".join(lines)


def pipeline_checks(results: Path = RESULTS) -> str:
    """What pipeline.json holds beside its timings: restarts, repeats, Kafka hops."""
    r = load("pipeline", results)
    hops = r["latency"]["kafka_hops"]["bar_to_worker"]
    repeats = r["duplicate_forecasts"]
    repeated = f"{repeats:,} forecasts were" if repeats else "no forecast was"
    return (
        f"In the pipeline run (`pipeline.json`) the 1,000-symbol burst took "
        f"{r['burst_over_inference']:.2f}x the engine "
        f"alone on the same windows; across its {len(r['restarts'])} worker starts and "
        f"restarts {repeated} published twice; the hop "
        f"from a bar's send to the worker took {hops['p50_ms']:.1f} ms at the median "
        f"(p99 {hops['p99_ms']:.1f} ms) with the consumer's fetch wait at "
        f"{hops['fetch_max_wait_ms']} ms (`BARCAST_FETCH_MAX_WAIT_MS`)."
    )


def backtest_check(results: Path = RESULTS) -> str:
    """backtest_check.json: each figure is a pair, the report's and its recomputation's."""
    r = load("backtest_check", results)
    current = load("model_report", results)["evaluation"]["model_id"]
    which = (
        "the current model report's" if r["model_id"] == current else "an earlier model report's"
    )
    same = "byte-identical" if r["identical_json"] else "**different**"
    pairs = ("replayed", "forecasts", "scored", "coverage", "mean_pinball_bp")
    agree = r["by_horizon_equal"] and all(math.isclose(*r[k], rel_tol=1e-9) for k in pairs)
    return (
        f"Two runs of `barcast backtest` over {count(len(r['files']), 'file')} (the 6EH4 month "
        f"and every shared DBN file) at {tree_at(r['provenance'])}, with checkpoint "
        f"`{r['model_id']}` ({which}; the current one is `{current}`), gave {same} "
        f"`backtest.json`: {r['replayed'][0]:,} bars replayed, {r['forecasts'][0]:,} forecasts, "
        f"{r['scored'][0]:,} scored, coverage {100 * r['coverage'][0]:.1f} % and mean pinball "
        f"{r['mean_pinball_bp'][0]:.4f} bp; every figure, by horizon too, "
        + ("equalled" if agree else "**differed from**")
        + " its recomputation from the run's topics."
    )


def gpu_run(results: Path = RESULTS) -> str:
    path = results / "gpu.json"
    if not path.exists():
        return "No `benchmarks/results/gpu.json` yet: `benchmarks/gpu/gpu.sh` has not run on a GPU."
    report = json.loads(path.read_text())
    return f"```\n{gpu_check.summary(report)}\n```"


def spoken(seconds: float, bound: bool = False) -> str:
    """A duration in the unit that reads best: s, min or h; a `bound` ("at most") rounded up,
    never below what was measured."""
    whole = math.ceil if bound else round
    if seconds < 120:
        return f"{whole(seconds)} s"
    if seconds < 7200:
        return f"{whole(seconds / 60)} min"
    return f"{whole(seconds / 360) / 10:.1f} h"


def train_cost(results: Path = RESULTS) -> str:
    """What training costs, from train_cost.json: the span it read, its peak memory, and the
    recipe's time per epoch and in all, projected from the steps it measured."""
    r = load("train_cost", results)
    t, f, p = r["training"], r["features"], r["provenance"]
    start, end = (dt.date.fromisoformat(d[:10]) for d in r["range"])
    span = f"{r['symbol']} from {start} to {end}"
    text = (
        f"Training cost ({span}, {f['rows']:,} bars; `benchmarks/results/train_cost.json`, "
        f"`python -m benchmarks.train_cost`): {f['features']} {f['dtype']} features in "
        f"{f['bytes']['total'] / 2**20:,.0f} MiB, peak resident memory "
        f"{r['peak_rss_mb']:,} MB; an epoch of the default recipe "
        f"({t['steps_per_recipe_epoch']:,} steps of {t['recipe']['batch_size']} windows and a "
        f"validation pass) {spoken(t['recipe_epoch_s'])}, its {t['recipe']['epochs']} "
        f"epochs at most {spoken(t['recipe_total_s_projected'], bound=True)}, with "
        f"setting up and calibrating {spoken(t['setup_and_calibration_s'], bound=True)} more "
        "(projected from "
        f"{t['epochs_measured'] * t['steps_per_measured_epoch']} measured steps; "
        f"{p['torch_threads']} torch threads, {p['cpu_model']}, load average "
        f"{p['loadavg_end'][0]:.1f} at its end: on a shared machine, others' work counts too)."
    )
    days = (end - start).days
    if days < 360:
        text += (
            f" It measured {days} days, not a year: a year of one product has about "
            f"{365 / days:.1f}x the bars, and its epochs and panel grow with them."
        )
    return text
