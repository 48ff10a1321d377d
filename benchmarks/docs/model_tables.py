"""The generated sections of docs/model-report.md (and the README's model report), from
benchmarks/results/model_report.json, model_experiments.json and online_calibration.json."""

from __future__ import annotations

from typing import Any

from benchmarks.docs.benchmark_tables import tree_at
from benchmarks.docs.cells import count
from benchmarks.model_report.run import NAMES

GOAL = 0.03  # the model report's goal: a mean pinball this much better than the best baseline


def pct(x: float, digits: int = 1, sign: str = "") -> str:
    """A share as the docs write it: 80.0 %."""
    return f"{100 * x:{sign}.{digits}f} %"


def span(low: float, high: float) -> str:
    return f"{100 * low:.0f}-{100 * high:.0f} %"


def scope(report: dict[str, Any]) -> str:
    """What was trained and what was scored."""
    e, recipe = report["evaluation"], report["recipe"]
    flags = "".join(f" --{name.replace('_', '-')} {value}" for name, value in recipe.items())
    files = ", ".join(f"`{path.rsplit('/', 1)[-1]}`" for path in e["data"]["files"])
    apart = e["left_out"]["labels over gap fills (scored apart)"]
    short = {k.split(":")[0]: n for k, n in e["left_out"].items() if k.endswith("history")}
    history = (
        f"; {max(short.values()):,} more left out for every forecaster, too early for the "
        f"history of {', '.join(f'`{name}`' for name in short)}"
        if short
        else ""
    )
    return (
        f"Recipe: `barcast train{flags}` on {files}, every other setting the default: the "
        f"product's model ({report['train']['n_params']:,} parameters), torch on "
        f"{count(report['provenance']['torch_threads'], 'CPU thread')}. Scored: the test "
        f"split, {e['n_windows']:,} served windows ending {e['first_window_ts'][:16]} to "
        f"{e['last_window_ts'][:16]} UTC whose labels cross no gap fill ({apart:,} more, over "
        f"gap fills, scored apart{history}); {e['units']}, averaged over horizons 1..10."
    )


def verdict(report: dict[str, Any]) -> str:
    """Whether the TFT beats the best baseline, by the milestone's and the goal's rules."""
    e = report["evaluation"]
    c, m = e["comparison"], e["model"]
    gain, interval = c["relative_gain"], c["gain_bootstrap"]
    milestone = gain > 0 and interval["excludes_zero"] is True
    decided = {
        True: "excludes zero",
        False: "includes zero",
        None: "decides nothing: the windows span too few days for it",
    }
    best = NAMES.get(c["best_baseline"], c["best_baseline"])
    below = m["coverage_below"]
    return "\n".join(
        [
            "- Milestone (a better mean pinball than the best baseline, with a bootstrap "
            f"interval excluding zero): {'reached' if milestone else '**not reached**'}.",
            f"- Goal ({pct(GOAL, 0)} better): {'reached' if gain >= GOAL else '**not reached**'}.",
            f"- The TFT ({c['tft_mean_pinball']:.4f}) is {pct(abs(gain), 2)} "
            f"{'ahead of' if gain > 0 else 'behind'} the best baseline, {best} "
            f"({c['best_baseline_mean_pinball']:.4f}); the difference's 95 % interval "
            f"{decided[interval['excludes_zero']]}.",
            f"- The TFT's 80 % interval covers {m['coverage_interval']:.3f} (below q10 "
            f"{below['0.1']:.3f}, below q90 {below['0.9']:.3f}).",
            f"- Model id `{e['model_id']}`, trained and evaluated at "
            f"{tree_at(report['provenance'])} on {report['provenance']['cpu_model']}; best epoch "
            f"{report['train']['best_epoch']} of {report['train']['epochs_run']}.",
        ]
    )


def sentence(text: str) -> str:
    return text if text.endswith((".", ")")) else text + "."


def figure(value: Any) -> str:
    """A recorded value as text: dicts as `name value` pairs, lists in brackets."""
    if isinstance(value, dict):
        return ", ".join(
            f"{k} ({figure(v)})" if isinstance(v, dict) else f"{k} {figure(v)}"
            for k, v in value.items()
        )
    if isinstance(value, list):
        return "[" + ", ".join(figure(v) for v in value) + "]"
    return str(value)


def experiments(record: dict[str, Any]) -> str:
    """Every run and probe of model_experiments.json, in its order."""
    lines = [record["about"], "", "**Runs**", ""]
    for i, r in enumerate(record["runs"], 1):
        lo, hi = r["gain_bp_ci95"]
        at = f" (at `{r['commit'][:7]}`)" if "commit" in r else ""
        lines.append(
            f"{i}. {r['name']}{at}: TFT {r['tft_mean_pinball']:.4f} against "
            f"{r['best_baseline_mean_pinball']:.4f}, {pct(r['relative_gain'], 2, '+')} (interval "
            f"[{lo:+.4f}, {hi:+.4f}] bp). {sentence(r['note'])}"
        )
    lines += ["", "**Probes**", ""]
    for p in record["probes"]:
        shown = "; ".join(
            f"{k.replace('_', ' ')}: {figure(v)}" for k, v in p.items() if k not in ("name", "note")
        )
        note = f" {sentence(p['note'])}" if "note" in p else ""
        lines.append(f"- {p['name'].removeprefix('probe: ')}. {shown}.{note}")
    if "design" in record:
        lines += ["", *design(record["design"])]
    return "\n".join(lines)


def design(record: dict[str, Any]) -> list[str]:
    """The design folds' runs (a table) and probes (a list): ES 2008-2014 only."""
    lines = [record["about"], "", "**Design runs**", ""]
    lines += [
        "| fold | run | TFT | its scale alone | best baseline | TFT vs best | 95 % interval "
        "(bp) | TFT 80 % coverage |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in record["runs"]:
        lo, hi = r["gain_bp_ci95"]
        lines.append(
            f"| {r['fold']} | {r['name']} | {r['tft_mean_pinball']:.5f} | "
            f"{r['scale_mean_pinball']:.5f} | {r['best_baseline']} "
            f"{r['best_baseline_mean_pinball']:.5f} | {pct(r['relative_gain'], 2, '+')} | "
            f"[{lo:+.5f}, {hi:+.5f}] | {r['tft_80pct_interval_coverage']:.3f} |"
        )
    notes = [*record["runs"], *record.get("lost", [])]
    lines += ["", *(f"- {r['fold']} {r['name']}: {sentence(r['note'])}" for r in notes)]
    lines += ["", "**Design probes**", ""]
    lines += [f"- {sentence(p['name'])} {figure(p['result'])}." for p in record["probes"]]
    return lines


def pair(online: dict[str, Any], static: dict[str, Any], digits: int) -> tuple[str, str]:
    cost = online["mean_pinball_bp"] / static["mean_pinball_bp"] - 1
    return (
        f"{pct(online['coverage'])}, {online['mean_pinball_bp']:.{digits}f} bp "
        f"({pct(cost, 1, '+')})",
        f"{pct(static['coverage'])}, {static['mean_pinball_bp']:.{digits}f} bp",
    )


def online_calibration(r: dict[str, Any], report: dict[str, Any]) -> str:
    """Tables (a) to (c): the worker's scoring and calibration replayed over the month."""
    f, c, start = r["figures"], r["calibration"], r["start"]
    current = report["evaluation"]["model_id"]
    which = (
        "the current model report's" if r["model_id"] == current else "an earlier model report's"
    )
    rows = [
        (
            f"(a) interval around q50 x {r['miscalibration']:g}",
            *pair(f["mechanism_online"]["after_start"], f["mechanism_static"]["after_start"], 3),
        ),
        (
            f"(b) unmodified, its test week ({f['unmodified_online']['test_week']['n']:,} "
            "forecasts)",
            *pair(f["unmodified_online"]["test_week"], f["unmodified_static"]["test_week"], 4),
        ),
        (
            f"(c) log returns x {r['regime_factor']:g} after mid-month, second half",
            *pair(f["regime_online"]["after_middle"], f["regime_static"]["after_middle"], 3),
        ),
    ]
    a, a_static = f["mechanism_online"], f["mechanism_static"]
    rolling, rolling_static = a["rolling_from_start"], a_static["rolling_from_start"]
    holds = r["acceptance"]
    return "\n".join(
        [
            f"`benchmarks/online_calibration/` at {tree_at(r['provenance'])}: checkpoint "
            f"`{r['model_id']}` ({which}; the current one is `{current}`) over `{r['data']}`, "
            f"scoring and calibration as the worker runs them (step {c['step']:g} decaying as "
            f"1/sqrt(1 + n/{c['settle']:g}) to {c['floor']:g}, rolling window "
            f"{r['rolling_window']}), coverage and pinball from scored forecast {start} on.",
            "",
            "| run | with online calibration (pinball against static) | static (checkpoint's) |",
            "| --- | --- | --- |",
            *(f"| {name} | {online} | {static} |" for name, online, static in rows),
            "",
            f"In (a), from forecast {start} on, the rolling ({r['rolling_window']}) coverage "
            f"stays within {span(rolling['min'], rolling['max'])} with online calibration "
            f"({span(rolling_static['min'], rolling_static['max'])} without) and the "
            f"cumulative coverage settles within 80 +- 3 % from forecast "
            f"{a['cumulative_from_start']['within_80pm3_from']:,} on: 'within 80 +- 3 % from "
            f"forecast {start} on' "
            f"{'holds' if holds['a_online_after_start_within_80pm3'] else 'does not hold'} for "
            "the pooled coverage and "
            f"{'holds' if holds['a_online_rolling_within_80pm3'] else 'does not hold'} for every "
            "point of the rolling one.",
        ]
    )


def calibration_reference(r: dict[str, Any]) -> str:
    """Table (d): an exactly calibrated forecaster through the same scoring and calibration."""
    ref, start = r["ideal_reference"], r["start"]
    labels = {"static": "no calibration", "product": "the product's tracking"}
    lines = [
        f"| (d) exact forecaster, rolling ({ref['window']}) coverage from forecast {start} on "
        "| min - max (medians) | inside 80 +- 3 % throughout | pinball vs the true quantiles |",
        "| --- | --- | --- | --- |",
    ]
    for name, c in ref["calibrations"].items():
        low, high = 100 * c["rolling_min_median"], 100 * c["rolling_max_median"]
        share, cost = 100 * c["rolling_within_80pm3_share"], 100 * c["pinball_cost"]
        lines.append(
            f"| {labels.get(name, name)} | {low:.1f}-{high:.1f} % | {share:.0f} % of seeds "
            f"| +{cost:.1f} % |"
        )
    none, product = ref["calibrations"]["static"], ref["calibrations"]["product"]
    return "\n".join(
        [
            f"A Gaussian random walk and its true quantiles, {ref['forecasts']:,} forecasts, "
            f"{count(ref['seeds'], 'seed')}:",
            "",
            *lines,
            "",
            f"Sampling alone moves the rolling coverage of this perfect forecaster over "
            f"{span(none['rolling_min_median'], none['rolling_max_median'])}; the product's "
            f"tracking costs it {pct(product['pinball_cost'])} of pinball. Its cumulative "
            f"coverage stays inside 80 +- 3 % from forecast {start} on in "
            f"{pct(none['cumulative_within_80pm3_from_start_share'], 0)} of the seeds.",
        ]
    )


def corrections_on_the_month(report: dict[str, Any]) -> str:
    """What the corrections did to the model report's month of real bars."""
    data = report["evaluation"]["data"]
    c = data["corrections"]
    files = ", ".join(f"`{path.rsplit('/', 1)[-1]}`" for path in data["files"])
    return (
        f"On {files} (the model report's run): {c['clean']:,} bars clean, {c['corrected']} "
        f"corrected, {c['duplicate']} duplicates, {c['rejected']} rejected; "
        f"{count(c['gaps'], 'gap')} ({c['gap_bars']:,} missing minutes), "
        f"{c['synthetic']:,} minutes of them filled with synthetic bars (the rest are session "
        f"breaks); {count(c['confirmed'], 'spike candidate')} confirmed by the market."
    )
