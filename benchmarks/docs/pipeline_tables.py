"""The pipeline benchmark's rows of docs/benchmarks.md's table (from pipeline.json and
pipeline_trust.json): the 1,000-symbol burst against the engine alone, what scoring costs, the
trust features' costs, and the random-weight model's row."""

from __future__ import annotations

import re
from typing import Any

from benchmarks.docs.cells import Row, mark
from benchmarks.pipeline.report import GOALS, goals_met, paired_median


def ms(value: float | None) -> str:
    return "not run" if value is None else f"{value:,.0f} ms"


def signed_ms(value: float | None) -> str:
    return "not run" if value is None else f"{value:+,.0f} ms"


def times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def paired(r: dict[str, Any], name: str) -> str:
    """The median of a cost's per-pair ratios, to the digit that can decide its goal."""
    value, pairs = paired_median(r, name), r.get(f"{name}_per_pair") or []
    return "no pair" if value is None else f"the median of its {len(pairs)} pairs {value:.3f}x"


def pipeline_headline_row(r: dict[str, Any]) -> Row:
    m, t, live, goals, met = r["model"], r["throughput"], r["latency"], GOALS, goals_met(r)
    bursts = [b["ms"] for b in r["bursts"]["batched"] if not b.get("warm_up")]
    engine, memory, second = r["inference_anchor"], r["worker_memory"], r["secondary"]
    speedups = f"{second['engine_batching_speedup']:.1f}x unpadded, "
    speedups += f"{second['engine_batching_speedup_padded']:.1f}x padded"
    # The checkpoint's path relative to the checkout it ran in, whichever checkout reads it
    source = re.sub(r"(?<!\S)/\S*/(?=var/)", "", m["checkpoint"])
    return (
        f"`pipeline`: embedded broker, one worker, whole pipeline; the product model "
        f"(hidden {m['hidden']}, {m['heads']} heads, {m['weights']} weights: "
        f"{source})",
        "the engine alone on the same windows; max_batch=1 (each window alone, unpadded, "
        "incremental encoding on)",
        f"{r['burst_symbols']:,}-symbol burst **{r['burst_1000_ms']:,.0f} ms** (median of "
        f"{len(bursts)}: {'/'.join(f'{x:,.0f}' for x in sorted(bursts))}; the engine alone "
        f"{engine['inference_1000_ms']:,.0f} ms); max_batch=1 "
        f"{r['burst_1000_nobatch_ms'] / 1e3:.2f} s: batching **{r['batching_speedup']:.1f}x** "
        f"(the engine alone, one window at a time: {speedups}); without incremental encoding "
        f"{r['burst_1000_full_ms'] / 1e3:.2f} s; {r['e2e_bars_per_s']:,.0f} bars/s end to end "
        f"over {t['bars']:,} bars of {t['symbols']:,} symbols; live latency p50/p99 "
        f"**{live['latency_p50_ms']:.0f}/{live['latency_p99_ms']:.0f} ms** at "
        f"{live['symbols']} symbols (the worker's own receipt to publish "
        f"{live['worker_latency_p50_ms']:.0f}/{live['worker_latency_p99_ms']:.0f} ms); "
        f"peak RSS {memory['peak_rss_mb']:,.0f} MB with {memory['symbols']:,} symbols "
        f"(ready {memory['ready_rss_mb']:,.0f} MB)",
        f"burst <= {goals['burst_1000_ms']:,.0f} ms {mark(met['burst_1000_ms'])}; "
        f"p50 <= {goals['latency_p50_ms']:.0f} ms {mark(met['latency_p50_ms'])}; "
        f"p99 <= {goals['latency_p99_ms']:.0f} ms {mark(met['latency_p99_ms'])}; "
        f"batching >= {goals['batching_speedup']:.0f}x {mark(met['batching_speedup'])}",
    )


def pipeline_cost_row(r: dict[str, Any]) -> Row:
    """Scoring, calibration and explanations, each against the defaults restarted alike."""
    goals, met = GOALS, goals_met(r)
    return (
        "`pipeline`: the same burst, each variant in a restarted worker: scoring and "
        "online calibration off (`BARCAST_ONLINE_SCORING=false`), calibration off alone, "
        "explanations on (`BARCAST_EXPLAIN=true`); each after one unmeasured burst, "
        "the defaults and scoring off alternated over `--pairs` restarts each "
        f"({sum(name.startswith('defaults_') for name in r.get('restarts', {}))})",
        "the defaults (scoring and calibration on, no explanations) in a worker restarted "
        f"the same way, same run; it and scoring off {order(r)}, medians compared",
        f"defaults restarted {ms(r.get('burst_1000_restarted_ms'))}; "
        f"scoring and calibration off {ms(r.get('burst_1000_noscoring_ms'))}: with them "
        f"**{times(r.get('scoring_cost'))}** ({paired(r, 'scoring_cost')}; per pair of restarts "
        f"{'/'.join(map(str, r.get('scoring_cost_per_pair', []))) or '—'}; the worker's and "
        f"the broker's CPU {times(r.get('scoring_cpu_cost'))}); calibration off alone "
        f"{ms(r.get('burst_1000_nocalibration_ms'))}; explanations on "
        f"{ms(r.get('burst_1000_explain_ms'))}: **{times(r.get('explain_cost'))}**",
        f"scoring <= {goals.get('scoring_cost', 1.1)}x "
        + (mark(met["scoring_cost"]) if met.get("scoring_cost") is not None else "not run"),
    )


def pipeline_trust_rows(r: dict[str, Any]) -> list[Row]:
    """The shadow baselines and a canary, each against the defaults restarted alike: a
    pipeline run of its own (pipeline_trust.json), with the load it ran under, since its
    headline figures are not the quiet run's (pipeline.json)."""
    goals, met, load = GOALS, goals_met(r), r["provenance"]
    checks = []
    for name, what in (("shadow_cost", "shadow baselines"), ("canary_over_model_share", "canary")):
        unit = "x" if name == "shadow_cost" else "x the model's share"
        verdict = "not run" if met.get(name) is None else mark(met[name])
        checks.append(f"{what} <= {goals.get(name, '?')}{unit} {verdict}")
    share, model = r.get("model_share_ms"), r["model"]
    return [
        (
            "`pipeline`: the same burst with the shadow baselines off "
            "(`BARCAST_SHADOW_BASELINES=false`, `BARCAST_SERVE=model`), and with a canary of the "
            "product's size forecasting beside the model (its forecasts made in the quiet after "
            f"the burst), each in a restarted worker with the defaults over `--pairs` "
            f"restarts, {order(r)}; the product model of the run (hidden "
            f"{model['hidden']}, {model['heads']} heads, {model['weights']} weights)",
            "the defaults (shadow baselines on, `BARCAST_SERVE=auto`, no canary) restarted the "
            "same way, same run; the model's share of the burst: the engine alone on its windows "
            f"(load average {load['loadavg'][0]} to {load['loadavg_end'][0]} on the 2 cores)",
            f"shadow baselines off {ms(r.get('burst_1000_noshadow_ms'))}: with them "
            f"**{times(r.get('shadow_cost'))}** ({paired(r, 'shadow_cost')}; per pair of restarts "
            f"{'/'.join(map(str, r.get('shadow_cost_per_pair', []))) or '—'}; the worker's and "
            f"the broker's CPU {times(r.get('shadow_cpu_cost'))}); a canary beside "
            f"{ms(r.get('burst_1000_canary_ms'))}: **{signed_ms(r.get('canary_cost_ms'))}**, "
            f"{times(r.get('canary_over_model_share'))} the model's share ({ms(share)})"
            + quiet_cpu(r),
            "; ".join(checks),
        )
    ]


def order(r: dict[str, Any]) -> str:
    """How the paired restarts were ordered: a run from before the order alternated says so."""
    if r.get("order") == "alternating":
        return "alternated, the order reversed every other pair"
    return "alternated, the defaults first in every pair (drift falls on the variants)"


def quiet_cpu(r: dict[str, Any]) -> str:
    """The CPU over each burst and the quiet after it, where the run measured it."""
    shadow, canary = r.get("shadow_minute_cpu_cost"), r.get("canary_minute_cpu_cost")
    if shadow is None or canary is None:
        return ""
    return (
        f"; the worker's and the broker's CPU over the burst and the quiet after it: "
        f"shadow baselines {times(shadow)}, a canary {times(canary)}"
    )


def pipeline_random_row(r: dict[str, Any]) -> Row:
    random = r["secondary"]["random_model"]
    random_ms = r["secondary"]["burst_1000_random_ms"]
    return (
        f"`pipeline`, secondary: random weights, hidden {random['hidden']}, "
        f"{random['heads']} heads, hot-reloaded into the same worker",
        "—",
        f"{r['burst_symbols']:,}-symbol burst {random_ms:,.0f} ms"
        if random_ms is not None
        else "not measured in this run",
        "—",
    )


def pipeline_rows(r: dict[str, Any]) -> list[Row]:
    return [pipeline_headline_row(r), pipeline_cost_row(r), pipeline_random_row(r)]


def trust_headline(r: dict[str, Any]) -> str:
    """The README's line on what live trust costs (pipeline_trust.json)."""
    goals, met = GOALS, goals_met(r)
    verdict = {n: "not run" if met.get(n) is None else mark(met[n]) for n in goals}
    return (
        f"Their cost in a 1,000-symbol burst (`benchmarks/results/pipeline_trust.json`, at "
        f"{r['provenance']['commit'][:7]}): the shadow baselines **{times(r.get('shadow_cost'))}"
        f"** the burst without them, {paired(r, 'shadow_cost')} (goal <= {goals['shadow_cost']}x "
        f"{verdict['shadow_cost']}); a canary **{signed_ms(r.get('canary_cost_ms'))}**, "
        f"{times(r.get('canary_over_model_share'))} the model's share of the burst, its "
        f"forecasts made in the quiet after it (goal <= {goals['canary_over_model_share']}x "
        f"{verdict['canary_over_model_share']}){quiet_cpu(r)} "
        "([how it is measured](docs/benchmarks.md))."
    )
