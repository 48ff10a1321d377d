"""The corrections step: one raw bar plus its symbol's state in, outcomes and clean bars out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from features.bars import PRICE_FIELDS, ControlKind
from features.corrections.config import CorrectionConfig
from features.corrections.outcome import (
    SYNTHETIC,
    Change,
    CorrectionStats,
    Gap,
    Outcome,
    Reason,
    Roll,
    Status,
    Step,
)
from features.corrections.parse import MINUTE_NS, RTYPE_OHLCV_1M, Bar, decode, oversized, validate
from features.corrections.rules import CLOSE, Rejection, repair
from features.corrections.spikes import confirmed, describe, suspicious
from features.corrections.state import Held, SymbolState

CLEAN, CORRECTED = Status.CLEAN.value, Status.CORRECTED.value


def correct(
    value: Any,
    state: SymbolState,
    config: CorrectionConfig,
    stats: CorrectionStats,
    *,
    ref: Any = None,
    now_ns: int | None = None,
    key: bytes | None = None,
    expired_ts: int | None = None,
) -> Step:
    """Run every rule on one `bars.raw` message (orjson bytes or a decoded dict).

    `state` is the state of the message's symbol (the Kafka key) and is updated in place.
    Never raises on bad input: malformed messages are rejected. The returned step holds this
    input's outcome, unless it is held as a spike candidate (then a later `correct` or `flush`
    on the same state releases it), plus the outcome of a previously held bar this one resolved.
    `ref` (JSON-serializable, e.g. [topic, partition, offset]) comes back on the outcome;
    `now_ns` (wall clock) enables the far-future timestamp check; `key` (the message's Kafka
    key) counts toward `config.max_bar_bytes` and must be the bar's symbol: the topics are keyed
    by symbol, which keeps each symbol's bars on one partition, in order. `expired_ts`: the last
    bar of the symbol's states the worker dropped (it expired); until the symbol has a bar again
    (then the state tells), a bar at or before it is late.
    """
    step = Step()
    too_large = oversized(value, len(key or b""), config)
    if too_large is not None:
        _reject(step, stats, value, ref, Reason.OVERSIZED, too_large)
        return step
    data = decode(value)
    bar = data if isinstance(data, str) else validate(data, value, config, now_ns)
    if not isinstance(bar, str) and key is not None and key != bar.symbol.encode():
        bar = f"keyed {key!r}, but its symbol is {bar.symbol!r}: key bars.raw records by symbol"
    if isinstance(bar, str):
        _reject(step, stats, value, ref, Reason.MALFORMED, bar)
    elif expired_ts is not None and bar.ts <= expired_ts and state.last_ts < 0:
        message = f"ts_event {bar.ts} is at or before {expired_ts}, the symbol's last bar before "
        _reject(step, stats, value, ref, Reason.LATE, message + "it expired: sent again since")
    else:
        process(bar, state, config, stats, step, ref)
    return step


def flush(
    state: SymbolState,
    config: CorrectionConfig,
    stats: CorrectionStats,
    *,
    until_ts: int | None = None,
) -> Step:
    """Decide a held spike candidate that no later bar resolved: when the stream has reached
    `until_ts` (an END_OF_INTERVAL record's ts_event) at least `hold_timeout_s` past it, or
    unconditionally with `until_ts=None` (end of a history). Unconfirmed, it is rejected."""
    step = Step()
    held = state.held
    if held is not None and (until_ts is None or until_ts - held.ts >= config.hold_timeout_ns):
        _resolve(state, config, stats, step, later=())
    return step


def take_control(
    state: SymbolState, control: Mapping[str, Any], config: CorrectionConfig, stats: CorrectionStats
) -> tuple[Step, bool]:
    """An END_OF_INTERVAL or OUTAGE record into one symbol's state: an OUTAGE marks it (no gap
    fill across it), then a held candidate the record's `ts_event` timed out is decided (none:
    unconditionally, as at the end of a history). Its step, and whether the state changed."""
    changed = control["control"] == ControlKind.OUTAGE
    if changed:
        outage(state, control["end"])
    until = control.get("ts_event")
    step = flush(state, config, stats, until_ts=until if type(until) is int else None)
    return step, changed or bool(step.outcomes)


def outage(state: SymbolState, end: int) -> None:
    """Live ingest lost the minutes before `end` (an OUTAGE record): a gap across them is a
    session break, not a quiet market, so it is not filled."""
    state.outage_until = max(state.outage_until, end)


def expect_roll(state: SymbolState, new: str, ratio: float) -> None:
    """A ROLL record: the symbol's next contract is raw symbol `new`, priced `ratio` times the
    current one; its first bar rolls the state at this ratio (a roll no record announced, at the
    ratio of that bar's open to the last close)."""
    if state.last is not None:
        state.roll = (new, ratio)


def process(
    bar: Bar,
    state: SymbolState,
    config: CorrectionConfig,
    stats: CorrectionStats,
    step: Step,
    ref: Any,
) -> None:
    """The rules on a validated bar, in order: symbol/interval consistency, duplicate, late,
    price repairs, resolution of a held candidate, spike."""
    value, data = bar.value, bar.data
    if bar.symbol != state.symbol:
        if state.symbol:
            message = f"symbol {bar.symbol!r} given with the state of {state.symbol!r}"
            _reject(step, stats, value, ref, Reason.MALFORMED, message + "; pass its own state")
            return
        state.symbol = bar.symbol
    last = state.last
    if last is not None and bar.rtype != last["rtype"]:
        message = f"rtype {bar.rtype} after rtype {last['rtype']}: one bar interval per symbol"
        _reject(step, stats, value, ref, Reason.MALFORMED, message)
        return
    if last is not None and bar.ts <= (last["ts_event"] if state.held is None else state.held.ts):
        _seen(bar, state, stats, step, ref)
        return
    allow_negative = config.allows_negative(bar.symbol)
    ref_close = 0 if last is None else last["close"]
    repaired = repair(bar.prices, ref_close, state.tick, allow_negative, config.scale_tolerance)
    if isinstance(repaired, Rejection):
        _reject(step, stats, value, ref, repaired.reason, repaired.message)
        return
    prices, changes = repaired
    ratio = _roll_ratio(bar, state, prices)
    if state.held is not None:  # seen in the held bar's contract
        later = prices if ratio is None else [round(p / ratio) for p in prices]
        _resolve(state, config, stats, step, later=later)
    if ratio is not None:
        _roll(state, stats, step, bar, ratio)
    last = state.last
    if changes:
        data["open"], data["high"], data["low"], data["close"] = prices
        data["status"] = CORRECTED
    else:
        data["status"] = CLEAN
    data["corrections"] = [change.as_list() for change in changes]
    if last is not None and last["close"] > 0 and not allow_negative:
        moves = suspicious(prices, last["close"], state.returns, state.tick, config)
        if moves:
            evidence = state.unconfirmed or ()
            if not confirmed(moves, prices[CLOSE], evidence, last["close"], config.spike_confirm):
                held = Held(value, ref, data, tuple(changes), moves, bar.ts, bar.rtype, bar.digest)
                state.held = held
                stats.held += 1
                return
            stats.confirmed += 1
    _accept(state, config, stats, step, data, tuple(changes), value, ref, bar.digest)


def _roll_ratio(bar: Bar, state: SymbolState, prices: list[int]) -> float | None:
    """The ratio this bar (its `prices` repaired: a raw open may be undefined or slipped a
    scale) rolls the symbol's state at, if its contract is not the last bar's."""
    new, last = bar.data.get("raw_symbol"), state.last
    if new is None or last is None or last.get("raw_symbol", new) == new:
        return None
    announced, state.roll = state.roll, None
    if announced is not None and announced[0] == new:
        return announced[1]
    price = prices[0] or prices[3]  # the open, nearest the last close in time
    # Two prices above 0 make a ratio: a product that may trade at or below 0 rolls at 1 then
    return price / last["close"] if price > 0 and last["close"] > 0 else 1.0


def _roll(state: SymbolState, stats: CorrectionStats, step: Step, bar: Bar, ratio: float) -> None:
    """Carry the state over to `bar`'s contract: its price levels times `ratio` (the returns,
    the tick and the keys are the symbol's own)."""
    last, new = state.last, bar.data["raw_symbol"]
    assert last is not None  # _roll_ratio saw one
    rescaled = {name: round(last[name] * ratio) for name in PRICE_FIELDS}
    state.last = {**last, **rescaled, "raw_symbol": new}
    state.unconfirmed = None  # the old contract's prices
    step.roll = Roll(bar.symbol, bar.ts, last.get("raw_symbol", ""), new, ratio, len(step.clean))
    stats.rolls += 1


def _seen(bar: Bar, state: SymbolState, stats: CorrectionStats, step: Step, ref: Any) -> None:
    """A bar at or before the symbol's last accepted or held one: duplicate or late."""
    prior = state.prior(bar.ts, bar.rtype)
    key = f"(symbol, ts_event, rtype) = ({bar.symbol}, {bar.ts}, {bar.rtype})"
    if prior == bar.digest:
        outcome = Outcome(Status.DUPLICATE, bar.value, message=f"{key} seen before", ref=ref)
        _emit(step, stats, outcome)
    elif prior is not None:
        message = f"{key} seen before with other prices or volume; the first is kept"
        _reject(step, stats, bar.value, ref, Reason.CONFLICTING_DUPLICATE, message)
    else:
        last_ts = state.last_ts
        message = f"ts_event {bar.ts} is {(last_ts - bar.ts) / 1e9:g} s before {last_ts}"
        _reject(step, stats, bar.value, ref, Reason.LATE, message + ", the symbol's last bar")


def _resolve(
    state: SymbolState,
    config: CorrectionConfig,
    stats: CorrectionStats,
    step: Step,
    later: list[int] | tuple[()],
) -> None:
    held = state.held
    assert held is not None and state.last is not None  # a candidate needs a reference
    state.held = None
    ref_close = state.last["close"]
    prices = held.prices
    if later and confirmed(held.moves, prices[CLOSE], later, ref_close, config.spike_confirm):
        stats.confirmed += 1
        _accept(
            state, config, stats, step, held.bar, held.changes, held.value, held.ref, held.digest
        )
        return
    if not later:  # no later bar came: its prices are evidence for the next candidate
        state.unconfirmed = prices
    why = "the next bar did not confirm it" if later else "no later bar came before the timeout"
    message = f"{describe(held.moves, prices, ref_close)}; {why}"
    _reject(step, stats, held.value, held.ref, Reason.SPIKE, message)


def _accept(
    state: SymbolState,
    config: CorrectionConfig,
    stats: CorrectionStats,
    step: Step,
    data: dict[str, Any],
    changes: tuple[Change, ...],
    value: Any,
    ref: Any,
    digest: int,
) -> None:
    ts, close = data["ts_event"], data["close"]
    last, state.unconfirmed = state.last, None
    if last is not None:
        if ts - last["ts_event"] > MINUTE_NS and data["rtype"] == RTYPE_OHLCV_1M:
            _gap(state, config, stats, step, last, (ts - last["ts_event"]) // MINUTE_NS - 1)
        previous = last["close"]
        if close > 0 and previous > 0:
            returns = state.returns
            returns.append(math.log(close / previous))
            if len(returns) > config.spike_window:
                returns.popleft()
    state.tick = math.gcd(state.tick, data["open"], data["high"], data["low"], close)
    keys = state.keys
    keys.append((ts, data["rtype"], digest))
    if len(keys) > config.recent_keys:
        keys.popleft()
    state.last = data
    step.clean.append(data)
    outcome = Outcome(Status.CORRECTED if changes else Status.CLEAN, value, data, changes, ref=ref)
    step.outcomes.append(outcome)
    stats.record(outcome)


def _gap(
    state: SymbolState,
    config: CorrectionConfig,
    stats: CorrectionStats,
    step: Step,
    last: dict[str, Any],
    missing: int,
) -> None:
    """Report missing minutes; fill short gaps with flagged flat bars at the previous close,
    unless an outage lies in them."""
    lost = state.outage_until > last["ts_event"] + MINUTE_NS
    filled = config.fill_gaps and missing <= config.max_fill and not lost
    gap = Gap(state.symbol, last["ts_event"], missing, filled)
    step.gaps.append(gap)
    stats.record_gap(gap)
    if filled:
        close = last["close"]
        flat = {"open": close, "high": close, "low": close, "close": close, "volume": 0}
        marks = {"status": SYNTHETIC, "corrections": []}
        for k in range(1, missing + 1):
            ts = last["ts_event"] + k * MINUTE_NS
            step.clean.append({**last, "ts_event": ts, **flat, **marks})


def _reject(
    step: Step, stats: CorrectionStats, value: Any, ref: Any, reason: Reason, message: str
) -> None:
    _emit(step, stats, Outcome(Status.REJECTED, value, reason=reason, message=message, ref=ref))


def _emit(step: Step, stats: CorrectionStats, outcome: Outcome) -> None:
    step.outcomes.append(outcome)
    stats.record(outcome)
