"""The walk-forward's figures: each fold's from its evaluation, each group's pooled over its
folds' per-window losses, the issue's acceptance checks, and the docs' table.

Pooled figures concatenate the folds' windows (each fold's in time order, folds one after
another) and compare them as `barcast evaluate` compares one evaluation (`model.comparison`):
the TFT against the baseline with the lowest pooled mean pinball, its block-bootstrap interval
and Diebold-Mariano test, and the model confidence set, over the forecasters every fold has.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from model.comparison import compare
from model.significance import block_bootstrap

PATHS = ("offline", "served")
COVERAGE_BAND = {
    "coverage_interval": (0.78, 0.82),
    "below_q10": (0.08, 0.12),
    "below_q90": (0.88, 0.92),
}
GOAL = 0.01  # pooled relative gain over the best baseline
PERIOD_KEYS = ("sources", "train", "val", "calib", "test", "train_sources", "test_sources")


def fold_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the results file keeps of one evaluation, offline and as served."""
    out: dict[str, Any] = {
        "n_windows": report["n_windows"],
        "first_window_ts": report["first_window_ts"],
        "last_window_ts": report["last_window_ts"],
        "calibration": report["calibration"],
    }
    for path, figures in (("offline", report), ("served", report["as_served"])):
        if "skipped" in figures:
            out[path] = {"skipped": figures["skipped"]}
            continue
        rows = {"tft": figures["model"]} | figures["baselines"]
        out[path] = {
            "forecasters": {name: forecaster_figures(r) for name, r in rows.items()},
            "comparison": comparison_figures(figures["comparison"]),
        }
    return out


def forecaster_figures(r: dict[str, Any]) -> dict[str, float]:
    below = r["coverage_below"]
    return {
        "mean_pinball": r["mean_pinball"],
        "coverage_interval": r["coverage_interval"],
        "below_q10": below["0.1"],
        "below_q90": below["0.9"],
    }


def comparison_figures(c: dict[str, Any]) -> dict[str, Any]:
    dm, boot, mcs = c["diebold_mariano"], c["gain_bootstrap"], c["confidence_set"]
    return {
        "best_baseline": c["best_baseline"],
        "tft_mean_pinball": c["tft_mean_pinball"],
        "best_baseline_mean_pinball": c["best_baseline_mean_pinball"],
        "relative_gain": c["relative_gain"],
        "difference_bp": boot["mean"],
        "bootstrap_ci95": boot["ci95"],
        "bootstrap_block": boot["block"],
        "dm_hln_statistic": dm["statistic"],
        "dm_hln_p_value": dm["p_value"],
        "dm_hac_lags": dm["hac_lags"],
        "confidence_set": {k: mcs[k] for k in ("statistic", "alpha", "included", "p_values")},
    }


def pooled(
    folds: dict[str, dict[str, Any]], losses: dict[str, dict[str, dict[str, np.ndarray]]]
) -> dict[str, Any]:
    """Per group of folds (`folds`: name -> fold record; `losses`: name -> path -> forecaster
    -> per-window losses): the pooled comparison, offline and as served, and how many folds
    the TFT won; a group with a fold whose losses are missing says which."""
    groups: dict[str, list[str]] = {}
    for name, record in folds.items():
        groups.setdefault(record["group"], []).append(name)
    out = {}
    for group, names in sorted(groups.items()):
        missing = [n for n in names if n not in losses]
        if missing:
            out[group] = {"folds": names, "missing_losses": missing}
            continue
        entry: dict[str, Any] = {"folds": names}
        for path in PATHS:
            if any(not losses[n].get(path) for n in names):
                continue
            common = set.intersection(*(set(losses[n][path]) for n in names))
            joined = {
                k: np.concatenate([losses[n][path][k] for n in names]) for k in sorted(common)
            }
            wins = [folds[n][path]["comparison"]["relative_gain"] > 0 for n in names]
            entry[path] = {
                "n_windows": len(joined["tft"]),
                "mean_pinball": {k: float(v.mean()) for k, v in joined.items()},
                "comparison": comparison_figures(compare(joined)),
                "tft_wins": int(sum(wins)),
                "n_folds": len(names),
            }
        entry["acceptance"] = acceptance(entry, [folds[n] for n in names])
        out[group] = entry
    return out


def compared(
    folds: dict[str, dict[str, Any]],
    losses: dict[str, dict[str, dict[str, np.ndarray]]],
    groups: list[str],
) -> dict[str, Any]:
    """The TFT of the first of two groups against the second's on the same windows, offline:
    each fold of the first paired with the second's fold of the same periods (folds differing
    in their `recipe` only), the per-window differences (bp; > 0: the first better) pooled
    over the pairs with a block-bootstrap interval; pairs not both run are listed apart."""
    first, second = ([n for n, f in folds.items() if f["group"] == g] for g in groups)
    periods = {n: periods_of(folds[n]) for n in second}
    pairs, waiting = [], []
    for name in first:
        other = next((n for n in second if periods[n] == periods_of(folds[name])), None)
        if other is None or name not in losses or other not in losses:
            waiting.append(name)
            continue
        pairs.append((name, other))
    if not pairs:
        return {"groups": groups, "pairs": [], "waiting": waiting}
    a = np.concatenate([losses[n]["offline"]["tft"] for n, _ in pairs])
    b = np.concatenate([losses[m]["offline"]["tft"] for _, m in pairs])
    if a.shape != b.shape:
        raise ValueError(f"{groups}: paired folds scored different windows; rerun them together")
    boot = block_bootstrap(b - a)
    return {
        "groups": groups,
        "pairs": pairs,
        "waiting": waiting,
        "n_windows": len(a),
        "mean_pinball": [float(a.mean()), float(b.mean())],
        "relative_gain": float(1 - a.mean() / b.mean()),
        "difference_bp": boot["mean"],
        "bootstrap_ci95": boot["ci95"],
    }


def periods_of(fold: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fold["definition"].items() if k in PERIOD_KEYS}


def acceptance(entry: dict[str, Any], folds: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's checks on offline figures: the milestone (the TFT better in most folds, the
    pooled interval excluding zero), the goal (at least 1 % better pooled), calibration (the
    TFT's 80 % interval and each tail within 2 points of nominal in every fold)."""
    if "offline" not in entry:
        return {}
    p = entry["offline"]
    c = p["comparison"]
    lo, _ = c["bootstrap_ci95"]
    milestone = p["tft_wins"] > p["n_folds"] / 2 and lo > 0
    off_band = [
        f"{fold['name']}: {key} {fold['offline']['forecasters']['tft'][key]:.3f}"
        for fold in folds
        for key, (low, high) in COVERAGE_BAND.items()
        if not low <= fold["offline"]["forecasters"]["tft"][key] <= high
    ]
    return {
        "milestone": milestone,
        "goal": milestone and c["relative_gain"] >= GOAL,
        "calibrated_in_every_fold": not off_band,
        "outside_band": off_band,
    }


def markdown_table(results: dict[str, Any], folds: bool = True) -> str:
    """The walk-forward table: a pooled row per group, after its folds' rows with `folds` (the
    docs; the README shows the pooled rows only)."""
    lines = [
        "| fold | test windows | TFT | best baseline | gain | DM-HLN p | difference, 95 % "
        "interval (bp) | 80 % interval | below q10 / q90 | as served: gain |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for group, entry in results.get("pooled", {}).items():
        lines += [fold_row(name, results["folds"][name]) for name in entry["folds"] if folds]
        if "offline" in entry:
            lines.append(pooled_row(group, entry))
    return "\n".join(lines)


def fold_row(name: str, fold: dict[str, Any]) -> str:
    c, tft = fold["offline"]["comparison"], fold["offline"]["forecasters"]["tft"]
    served = fold.get("served", {}).get("comparison")
    lo, hi = c["bootstrap_ci95"]
    return (
        f"| {name} | {fold['n_windows']:,} | {c['tft_mean_pinball']:.4f} | "
        f"{c['best_baseline']} {c['best_baseline_mean_pinball']:.4f} | "
        f"{c['relative_gain']:+.2%} | {c['dm_hln_p_value']:.3f} | "
        f"{c['difference_bp']:+.4f} [{lo:+.4f}, {hi:+.4f}] | {tft['coverage_interval']:.3f} | "
        f"{tft['below_q10']:.3f} / {tft['below_q90']:.3f} | "
        f"{'—' if served is None else format(served['relative_gain'], '+.2%')} |"
    )


def pooled_row(group: str, entry: dict[str, Any]) -> str:
    p = entry["offline"]
    c = p["comparison"]
    lo, hi = c["bootstrap_ci95"]
    served = entry.get("served", {}).get("comparison")
    return (
        f"| **{group}, pooled** ({p['tft_wins']} of {p['n_folds']} folds won) | "
        f"{p['n_windows']:,} | {c['tft_mean_pinball']:.4f} | {c['best_baseline']} "
        f"{c['best_baseline_mean_pinball']:.4f} | {c['relative_gain']:+.2%} | "
        f"{c['dm_hln_p_value']:.3f} | {c['difference_bp']:+.4f} [{lo:+.4f}, {hi:+.4f}] | | | "
        f"{'—' if served is None else format(served['relative_gain'], '+.2%')} |"
    )
