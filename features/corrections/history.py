"""Batch use of the corrections rules: a whole history (training data, tests) through the same
code as the streaming agent, and `bars.raw` dicts from a DataFrame."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from features.bars import PRICE_FIELDS, ControlKind, is_control, to_fixed, valid_control
from features.corrections.config import CorrectionConfig
from features.corrections.outcome import CorrectionStats, Gap, Outcome, Step
from features.corrections.parse import RTYPE_OHLCV_1M, decode, oversized, validate
from features.corrections.state import SymbolState
from features.corrections.step import correct, expect_roll, flush, process, take_control


@dataclass(slots=True)
class History:
    """`outcomes`: one per input bar, in decision order; `clean`: the `bars.clean` values
    (accepted and synthetic), ts-ordered per symbol; `states`: each symbol's final state."""

    outcomes: list[Outcome] = field(default_factory=list)
    clean: list[dict[str, Any]] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    stats: CorrectionStats = field(default_factory=CorrectionStats)
    states: dict[str, SymbolState] = field(default_factory=dict)

    def add(self, step: Step) -> None:
        self.outcomes += step.outcomes
        self.clean += step.clean
        self.gaps += step.gaps


def correct_history(values: Iterable[Any], config: CorrectionConfig | None = None) -> History:
    """Correct a history of `bars.raw` messages (bytes or dicts, any symbols mixed, in arrival
    order). Control records are taken as the agent takes them (`_control`: outages, announced
    rolls, held spike candidates decided); at the end every held candidate is decided, so each
    input bar has exactly one outcome."""
    history = History()
    for step in correct_steps(values, config, history.stats, history.states):
        history.add(step)
    return history


def correct_steps(
    values: Iterable[Any],
    config: CorrectionConfig | None,
    stats: CorrectionStats,
    states: dict[str, SymbolState],
) -> Iterator[Step]:
    """`correct_history` as a stream: each input's `Step` as it is decided, then the final
    flushes, keeping nothing but the symbols' `states` and the `stats` counters. A caller that
    keeps only the clean bars (training on years of bars) holds no outcome per bar; `values`
    may be a generator that reads its bars chunk by chunk."""
    config = config or CorrectionConfig()
    for value in values:
        if oversized(value, 0, config) is not None:
            yield correct(value, SymbolState(), config, stats)  # rejects it as oversized
            continue
        data = decode(value)
        # An EXPIRED record is the corrections stage's own, never its input: malformed, below,
        # as is a control record that lacks a field its kind needs (the stage's, too)
        taken = is_control(data) and valid_control(data) and data["control"] != ControlKind.EXPIRED
        if taken:
            yield from _control(data, config, stats, states)
            continue
        bar = data if isinstance(data, str) else validate(data, value, config)
        if isinstance(bar, str):
            yield correct(value, SymbolState(), config, stats)  # rejects it as malformed
            continue
        step = Step()
        process(bar, states.setdefault(bar.symbol, SymbolState()), config, stats, step, None)
        yield step
    for state in states.values():
        yield flush(state, config, stats)


def _control(
    control: dict[str, Any],
    config: CorrectionConfig,
    stats: CorrectionStats,
    states: dict[str, SymbolState],
) -> Iterator[Step]:
    """A control record, as the corrections agent takes it (streams.runtime.stages.corrections):
    a ROLL into its symbol's state; an OUTAGE marks every state (no gap fill across it); each
    but a ROLL decides the held spike candidates that timed out."""
    if control.get("control") == ControlKind.ROLL:
        state = states.get(control.get("symbol", ""))
        if state is not None and state.last is not None:
            expect_roll(state, control["raw_symbols"][1], control["ratio"])
        return
    for state in states.values():
        yield take_control(state, control, config, stats)[0]


def bars_from_frame(
    frame: Any,
    *,
    symbol: str | None = None,
    instrument_id: int = 0,
    publisher_id: int = 0,
    rtype: int = RTYPE_OHLCV_1M,
    source: str = "frame",
) -> list[dict[str, Any]]:
    """`bars.raw` dicts from a pandas DataFrame.

    ts_event: a column or the index, int64 UTC nanoseconds of the bar open (DBN
    `to_df(pretty_ts=False)`). open/high/low/close: fixed-point int64 (`price_type="fixed"`) or
    float prices, rounded to 1e-9 (NaN becomes UNDEF_PRICE). Columns symbol, instrument_id,
    publisher_id and rtype, where present, win over the keyword defaults.
    """
    n = len(frame)
    if "ts_event" in frame.columns:
        ts = frame["ts_event"]
    elif frame.index.name == "ts_event":
        ts = frame.index
    else:
        raise ValueError("frame has no ts_event column or index; add one (int64 UTC ns)")
    ts_values = np.asarray(ts)
    if ts_values.dtype.kind not in "iu":
        raise ValueError(
            f"ts_event has dtype {ts_values.dtype}; it must be int64 UTC nanoseconds "
            "(DBNStore.to_df(pretty_ts=False), or Series.astype('int64') on ns datetimes)"
        )
    if symbol is None and "symbol" not in frame.columns:
        raise ValueError("frame has no 'symbol' column: pass symbol='ESH4' (the raw symbol)")

    def column(name: str, default: Any) -> list[Any]:
        return frame[name].tolist() if name in frame.columns else [default] * n

    columns: dict[str, list[Any]] = {
        "instrument_id": column("instrument_id", instrument_id),
        "symbol": column("symbol", symbol),
        "ts_event": ts_values.astype(np.int64).tolist(),
        "rtype": column("rtype", rtype),
        "publisher_id": column("publisher_id", publisher_id),
    }
    for name in PRICE_FIELDS:
        columns[name] = _fixed(np.asarray(frame[name]))
    columns["volume"] = _volumes(np.asarray(frame["volume"]))
    columns["source"] = [source] * n
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _volumes(volume: np.ndarray) -> list[int | float]:
    """Integer volumes; a float column's missing (NaN) ones are 0, and an infinite or negative
    one stays as it is, so that the corrections reject its bar as malformed, naming the field
    (cast, -1.0 would become 2**64 - 1, and an infinity 0)."""
    if volume.dtype.kind != "f":
        return volume.astype(np.uint64).tolist()
    bad = np.isinf(volume) | (volume < 0)
    counts = np.round(np.where(bad, 0.0, np.nan_to_num(volume))).astype(np.uint64).tolist()
    for i in np.flatnonzero(bad).tolist():
        counts[i] = float(volume[i])
    return counts


def _fixed(prices: np.ndarray) -> list[int]:
    """Fixed-point columns pass through; float prices are converted."""
    return (prices.astype(np.int64) if prices.dtype.kind in "iu" else to_fixed(prices)).tolist()
