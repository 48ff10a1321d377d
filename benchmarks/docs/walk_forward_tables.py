"""The walk-forward sections of the README and docs/model-report.md: for each registered protocol
(the walk-forward, and the held-out evaluation), the frozen recipe (from the protocol) and the
folds' figures (from its results file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.docs.benchmark_tables import RESULTS, tree_at
from benchmarks.walk_forward.figures import markdown_table
from benchmarks.walk_forward.run import PROTOCOL
from model.config import AUTO_EPOCH_WINDOWS

HELD_OUT = PROTOCOL.parent / "held_out.json"
ENCODERS = PROTOCOL.parent / "encoders.json"
RESULTS_FILE = {
    PROTOCOL: "walk_forward.json",
    HELD_OUT: "held_out.json",
    ENCODERS: "walk_forward_encoders.json",
}


ENCODER_CHOSEN = (
    "the encoders' protocol made the stream encoder the default since (`--encoder window` "
    "trains the one frozen here)."
)


def frozen_recipe(protocol: Path = PROTOCOL) -> str:
    """What the protocol froze, and where."""
    frozen = json.loads(protocol.read_text())["frozen"]
    m, t = frozen["model"], frozen["training"]
    low, high = AUTO_EPOCH_WINDOWS
    per_epoch = (
        f"{t['windows_per_epoch']:,} windows an epoch"
        if t["windows_per_epoch"]
        else f"an epoch a tenth of the training windows within {low:,}-{high:,}"
    )
    return (
        f"The recipe: `barcast train`'s defaults as frozen at `{frozen['commit'][:7]}` before "
        f"any fold ran ({frozen['design']}): `TFTConfig()`, hidden {m['hidden']}, {m['heads']} "
        f"heads, variable width {m['var_dim']}, {m['lstm_layers']} LSTM layers, dropout "
        f"{m['dropout']:g}, {m['lookback']} bars back, {m['horizon']} ahead, release calendar "
        f"{'on' if m['releases'] else 'off'}, the {m['encoder']} encoder; `TrainConfig()`, up "
        f"to {t['epochs']} epochs (patience {t['patience']}), batches of {t['batch_size']} in "
        f"runs of {t['chunk']} windows, lr {t['lr']:g}, {per_epoch}. A test fails if the "
        f"defaults leave it, but for the encoder: {ENCODER_CHOSEN}"
    )


def results_table(protocol: Path = PROTOCOL) -> str:
    """docs/model-report.md: every fold run, pooled per group, and the issue's checks."""
    return walk_forward_section(protocol, folds=True)


def headline_table(protocol: Path = PROTOCOL) -> str:
    """The README: the pooled rows and the issue's checks."""
    return walk_forward_section(protocol, folds=False)


def walk_forward_section(protocol: Path, folds: bool) -> str:
    path = RESULTS / RESULTS_FILE[protocol]
    if not path.exists():
        return "No fold has run yet."
    results = json.loads(path.read_text())
    registered = json.loads(protocol.read_text())["folds"]
    run = results["folds"].values()
    complete = len(run) == len(registered)
    won = sum(f["offline"]["comparison"]["relative_gain"] > 0 for f in run)
    lines = [
        f"{'All' if complete else f'{len(run)} of'} {len(registered)} registered folds run "
        f"(at {tree_at(results['provenance'])}, {results['provenance']['cpu_model']}); mean "
        "pinball in basis points of cumulative log return over horizons 1..10, offline.",
        "",
        markdown_table(results, folds),
        "",
        f"- The TFT ahead of the best baseline in {won} of the {len(run)} folds.",
    ]
    for group, entry in results["pooled"].items():
        of = sum(f["group"] == group for f in registered)
        run = "" if len(entry["folds"]) == of else f", on its {len(entry['folds'])} run so far"
        lines.append(f"- {group} ({of} folds{run}): {checks(entry.get('acceptance', {}))}")
    if "compared" in results:
        lines.append(f"- {pair_line(results['compared'], results['folds'])}")
    return "\n".join(lines)


def pair_line(c: dict[str, Any], folds: dict[str, Any]) -> str:
    """The two groups' TFTs on the same windows (`figures.compared`), pooled and pair by pair."""
    first, second = c["groups"]
    if not c["pairs"]:
        return f"{first} against {second}: no pair of folds run yet."
    lo, hi = c["bootstrap_ci95"]
    waiting = f"; waiting: {', '.join(c['waiting'])}" if c["waiting"] else ""

    def tft(name: str) -> float:
        return folds[name]["offline"]["comparison"]["tft_mean_pinball"]

    won = [a for a, b in c["pairs"] if tft(a) < tft(b)]
    return (
        f"{first} against {second}, the TFTs on the same {c['n_windows']:,} windows of "
        f"{len(c['pairs'])} pairs of folds: {c['relative_gain']:+.2%} mean pinball "
        f"({c['mean_pinball'][0]:.4f} against {c['mean_pinball'][1]:.4f} bp), difference "
        f"{c['difference_bp']:+.4f} bp, 95 % interval [{lo:+.4f}, {hi:+.4f}]; {first} the "
        f"better in {len(won)} of the {len(c['pairs'])} pairs{waiting}."
    )


def checks(acceptance: dict[str, Any]) -> str:
    if not acceptance:
        return "too few folds to pool."
    said = {True: "reached", False: "**not reached**"}
    band = (
        "within 80 +/- 2 % and each tail within 2 points in every fold"
        if acceptance["calibrated_in_every_fold"]
        else "outside the band in " + "; ".join(acceptance["outside_band"])
    )
    return (
        f"milestone {said[acceptance['milestone']]}, goal (1 %) {said[acceptance['goal']]}; "
        f"the TFT's intervals {band}."
    )
