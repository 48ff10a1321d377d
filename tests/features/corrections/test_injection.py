"""Corruption injection on real data (every rule, hundreds of faults, fixed seed), the
accounting invariant, and exact continuation across state serialization.

Measured on the 6EH4 month: 749 faults of 17 kinds (44 or 45 each), recall 100 %; on the
ES/NQ DBN files: 16 faults of 15 kinds, recall 100 %. All 153 corrected scale and swap faults
of 6E are exact (its prices sit on the tick grid); the 23 scale_down faults whose slip dropped
more than a tick of digits are rejected instead of being guessed.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import databento as db
import orjson
import pandas as pd
import pytest

from features.bars import UNDEF_PRICE
from features.corrections import (
    SYNTHETIC,
    CorrectionConfig,
    CorrectionStats,
    History,
    Outcome,
    Reason,
    Rule,
    Status,
    SymbolState,
    bars_from_frame,
    correct,
    correct_history,
    flush,
)

SEED = 20240131
FIELDS = ("open", "high", "low", "close")
TICKS = {"6E": 50_000, "ES": 250_000_000, "NQ": 250_000_000}  # 0.00005 and 0.25
TS_1999 = 946_684_740 * 10**9
MAX_PRICE = 2**63 - 2

C, R, D = Status.CORRECTED, Status.REJECTED, Status.DUPLICATE
# Kind of fault -> the outcomes that count as detecting it: (status, rule or reason).
EXPECTED: dict[str, set[tuple[Status, Rule | Reason | None]]] = {
    "undefined_some": {(C, Rule.UNDEFINED_PRICE), (R, Reason.UNDEFINED_PRICE)},
    "undefined_all": {(R, Reason.UNDEFINED_PRICE)},
    "nonpositive": {(R, Reason.NONPOSITIVE_PRICE)},
    "scale_up": {(C, Rule.SCALE_ERROR)},
    "scale_down": {(C, Rule.SCALE_ERROR), (R, Reason.SCALE_ERROR)},
    "scale_field": {(C, Rule.SCALE_ERROR)},
    "swap": {(C, Rule.ENVELOPE)},
    "envelope_high": {(C, Rule.ENVELOPE)},
    "envelope_low": {(C, Rule.ENVELOPE)},
    "spike_close": {(R, Reason.SPIKE)},
    "spike_wick": {(R, Reason.SPIKE)},
    "duplicate": {(D, None)},
    "conflict": {(R, Reason.CONFLICTING_DUPLICATE)},
    "late": {(R, Reason.LATE)},
    "malformed_bytes": {(R, Reason.MALFORMED)},
    "malformed_dict": {(R, Reason.MALFORMED)},
    "gap": set(),  # detected through History.gaps, not an outcome
}
RECOVERABLE = {"scale_up", "scale_down", "scale_field", "swap"}  # within one tick of the original


@dataclass
class Fault:
    kind: str
    original: dict[str, Any]  # the uncorrupted bar; for a gap, the bar before the dropped run
    value: Any = None  # the corrupted input (None for a gap)
    dropped: int = 0


def corrupt(
    bars: list[dict[str, Any]], tick: int, kinds: list[str], rng: random.Random, spacing: int
) -> tuple[list[Any], list[Fault]]:
    """The bars with one fault every `spacing` bars (kinds in turn), far enough apart that a
    fault's verdict never depends on another fault."""
    stream: list[Any] = []
    faults: list[Fault] = []
    due = spacing
    i = 0
    while i < len(bars):
        bar = bars[i]
        kind = kinds[len(faults) % len(kinds)]
        if i < due or i + 6 >= len(bars) or (kind == "swap" and bar["high"] == bar["low"]):
            stream.append(dict(bar))
            i += 1
            continue
        due = i + spacing
        if kind == "gap":
            dropped = rng.randint(1, 5)
            faults.append(Fault(kind, bars[i - 1], dropped=dropped))
            i += dropped
            continue
        value, extra = _fault(kind, bar, bars, i, tick, rng)
        faults.append(Fault(kind, bar, value))
        stream += [dict(bar), value] if extra else [value]
        i += 1
    return stream, faults


def _fault(
    kind: str,
    bar: dict[str, Any],
    bars: list[dict[str, Any]],
    i: int,
    tick: int,
    rng: random.Random,
) -> tuple[Any, bool]:
    """The corrupted input for one fault, and whether it comes in addition to the clean bar."""
    bad = dict(bar)
    o, h, low, c = (bar[f] for f in FIELDS)
    if kind == "undefined_some":
        for field in rng.sample(FIELDS, rng.randint(1, 3)):
            bad[field] = rng.choice([UNDEF_PRICE, None])
    elif kind == "undefined_all":
        bad.update({f: rng.choice([UNDEF_PRICE, None]) for f in FIELDS})
    elif kind == "nonpositive":
        field = rng.choice(FIELDS)
        bad[field] = rng.choice([0, -bar[field]])
    elif kind == "scale_up":
        k = rng.randint(1, len(str(MAX_PRICE // h)) - 1)
        bad.update({f: bar[f] * 10**k for f in FIELDS})
    elif kind == "scale_down":
        k = rng.randint(1, 9)
        bad.update({f: bar[f] // 10**k for f in FIELDS})
    elif kind == "scale_field":
        field, k = rng.choice(FIELDS), rng.randint(1, 4)
        bad[field] = bar[field] * 10**k if rng.random() < 0.5 else bar[field] // 10**k
    elif kind == "swap":
        bad["high"], bad["low"] = low, h
    elif kind == "envelope_high":
        bad["high"] = min(o, c) - rng.randint(1, 3) * tick
    elif kind == "envelope_low":
        bad["low"] = max(o, c) + rng.randint(1, 3) * tick
    elif kind == "spike_close":
        close = _off_grid(c, rng.choice([-1, 1]) * rng.uniform(0.01, 0.10), tick)
        bad.update(close=close, high=max(h, close), low=min(low, close))
    elif kind == "spike_wick":
        move = rng.uniform(0.01, 0.10)
        if rng.random() < 0.5:
            bad["high"] = _off_grid(h, move, tick)
        else:
            bad["low"] = _off_grid(low, -move, tick)
    elif kind == "duplicate":
        return bad, True
    elif kind == "conflict":
        return {**bad, "volume": bar["volume"] + 1}, True
    elif kind == "late":
        return dict(bars[i - 400]), True  # older than the 64 remembered keys
    elif kind == "malformed_bytes":
        return orjson.dumps(bar)[: rng.randint(0, 60)], False
    elif kind == "malformed_dict":
        variants = [
            {k: v for k, v in bar.items() if k != "close"},
            {**bar, "open": o * 1e-9},
            {**bar, "ts_event": TS_1999},
            {**bar, "volume": -1},
        ]
        return rng.choice(variants), False
    return bad, False


def _off_grid(price: int, move: float, tick: int) -> int:
    return round(price * (1 + move) / tick) * tick


def by_input(history: History) -> dict[int, Outcome]:
    return {id(o.value): o for o in history.outcomes}


def detected(fault: Fault, outcome: Outcome) -> bool:
    if outcome.status is Status.CORRECTED:
        rules = {change.rule for change in outcome.changes}
        return len(rules) == 1 and (outcome.status, rules.pop()) in EXPECTED[fault.kind]
    return (outcome.status, outcome.reason) in EXPECTED[fault.kind]


def recall(history: History, faults: list[Fault]) -> tuple[dict[str, tuple[int, int]], list[Any]]:
    """Per kind (detected, injected), and the misses."""
    outcomes = by_input(history)
    gaps = {gap.after_ts: gap for gap in history.gaps}
    counts: dict[str, list[int]] = {}
    misses = []
    for fault in faults:
        if fault.kind == "gap":
            gap = gaps.get(fault.original["ts_event"])
            ok = gap is not None and gap.missing >= fault.dropped
        else:
            ok = detected(fault, outcomes[id(fault.value)])
        tally = counts.setdefault(fault.kind, [0, 0])
        tally[0] += ok
        tally[1] += 1
        if not ok:
            misses.append((fault.kind, fault.original, outcomes.get(id(fault.value))))
    return {k: (v[0], v[1]) for k, v in counts.items()}, misses


def assert_repairs_within_one_tick(
    history: History, faults: list[Fault], tick: int
) -> tuple[int, int]:
    """Every corrected bar of a recoverable fault is within one tick of the original; envelope
    repairs of a broken high or low keep open and close. Returns (recoverable, exact)."""
    outcomes = by_input(history)
    recoverable = exact = 0
    for fault in faults:
        outcome = outcomes.get(id(fault.value))
        if outcome is None or outcome.status is not Status.CORRECTED:
            continue
        assert outcome.bar is not None
        fixed = [outcome.bar[f] for f in FIELDS]
        original = [fault.original[f] for f in FIELDS]
        if fault.kind in RECOVERABLE:
            assert max(abs(a - b) for a, b in zip(fixed, original, strict=True)) <= tick, fault
            recoverable += 1
            exact += fixed == original
        if fault.kind in ("envelope_high", "envelope_low", "undefined_some"):
            defined = [f for f in ("open", "close") if fault.value[f] not in (None, UNDEF_PRICE)]
            assert all(outcome.bar[f] == fault.original[f] for f in defined), fault
        o, h, low, c = fixed
        assert low <= min(o, c) and h >= max(o, c)
    return recoverable, exact


@pytest.fixture(scope="module")
def sixe(sixe_bars: pd.DataFrame) -> tuple[list[Any], list[Fault]]:
    bars = bars_from_frame(sixe_bars, symbol="6EH4", instrument_id=1, publisher_id=1)
    return corrupt(bars, TICKS["6E"], list(EXPECTED), random.Random(SEED), spacing=40)


def test_sixe_injected_faults_are_found_and_repaired_within_a_tick(
    sixe: tuple[list[Any], list[Fault]],
) -> None:
    stream, faults = sixe
    history = correct_history(stream)
    per_kind, misses = recall(history, faults)
    found, total = sum(v[0] for v in per_kind.values()), sum(v[1] for v in per_kind.values())
    assert (total, len(per_kind)) == (749, 17), per_kind  # fixed seed
    assert min(v[1] for v in per_kind.values()) >= 40, per_kind
    assert found / total >= 0.99, (found, total, per_kind, misses[:5])
    assert misses == []  # measured: 100 %
    assert assert_repairs_within_one_tick(history, faults, TICKS["6E"]) == (153, 153)
    injected = {id(f.value) for f in faults}
    spill = [o for o in history.outcomes if id(o.value) not in injected and o.status != "clean"]
    assert spill == []  # the bars around each fault are untouched


@pytest.mark.filterwarnings("ignore:The inplace keyword")
def test_dbn_injected_faults_are_found_and_repaired_within_a_tick(dbn_files: list[Path]) -> None:
    rng = random.Random(SEED)
    kinds = [k for k in EXPECTED if k not in ("late", "gap")]  # files too short for those
    stream, faults = [], []
    for path in sorted(p for p in dbn_files if "ohlcv-1m" in p.name):
        frame = db.DBNStore.from_file(path).to_df(
            price_type="fixed", pretty_ts=False, map_symbols=True
        )
        for symbol, rows in frame.groupby("symbol"):
            tick = TICKS[str(symbol)[:2]]
            bars = bars_from_frame(rows)
            part, injected = corrupt(bars, tick, kinds[len(faults) :] + kinds, rng, spacing=3)
            stream += part
            faults += [(f, tick) for f in injected]
    history = correct_history(stream)
    per_kind, misses = recall(history, [f for f, _ in faults])
    assert sum(v[1] for v in per_kind.values()) >= 15 and misses == [], (per_kind, misses)
    for fault, tick in faults:
        assert_repairs_within_one_tick(history, [fault], tick)


def test_every_input_has_exactly_one_outcome(sixe: tuple[list[Any], list[Fault]]) -> None:
    stream, _ = sixe
    history = correct_history(stream)
    stats = history.stats
    assert stats.clean + stats.corrected + stats.duplicate + stats.rejected == len(stream)
    assert Counter(id(o.value) for o in history.outcomes) == Counter(id(v) for v in stream)
    counted = Counter(o.status for o in history.outcomes)
    assert counted == {
        Status.CLEAN: stats.clean,
        Status.CORRECTED: stats.corrected,
        Status.DUPLICATE: stats.duplicate,
        Status.REJECTED: stats.rejected,
    }
    # bars.clean holds every accepted bar once plus the synthetic fills; bars.dlq the rest.
    real = [b for b in history.clean if b["status"] != SYNTHETIC]
    assert len(real) == stats.clean + stats.corrected
    assert sum(b["status"] == SYNTHETIC for b in history.clean) == stats.synthetic
    assert [b["ts_event"] for b in history.clean] == sorted({b["ts_event"] for b in history.clean})


def test_bytes_and_dicts_give_the_same_outcomes(sixe: tuple[list[Any], list[Fault]]) -> None:
    stream, _ = sixe
    as_bytes = [v if isinstance(v, bytes) else orjson.dumps(v) for v in stream]
    from_dicts = correct_history(stream)
    from_bytes = correct_history(as_bytes)
    assert [(o.status, o.reason, o.changes, o.bar) for o in from_bytes.outcomes] == [
        (o.status, o.reason, o.changes, o.bar) for o in from_dicts.outcomes
    ]
    assert from_bytes.clean == from_dicts.clean


def test_restoring_the_state_before_every_message_changes_nothing(
    sixe: tuple[list[Any], list[Fault]],
) -> None:
    stream = [v if isinstance(v, bytes) else orjson.dumps(v) for v in sixe[0][:3_000]]
    config = CorrectionConfig()

    def run(restart: bool) -> tuple[list[Outcome], list[dict[str, Any]], SymbolState, int]:
        state, stats = SymbolState(), CorrectionStats()
        outcomes, clean, held_restarts = [], [], 0
        for offset, value in enumerate(stream):
            if restart:
                held_restarts += state.held is not None
                restored = SymbolState.from_bytes(state.to_bytes())
                assert restored == state
                state = restored
            step = correct(value, state, config, stats, ref=["bars.raw", 0, offset])
            outcomes += step.outcomes
            clean += step.clean
        step = flush(state, config, stats)
        return outcomes + step.outcomes, clean + step.clean, state, held_restarts

    outcomes, clean, state, _ = run(restart=False)
    restarted, restarted_clean, restarted_state, held_restarts = run(restart=True)
    assert held_restarts >= 5  # restarts while a spike candidate was held
    assert restarted == outcomes and restarted_clean == clean and restarted_state == state
    assert len(outcomes) == len(stream)
