"""Public API of the feature engine: 227 features per bar, one flat float64 state per symbol.

Streaming and batch run the same compiled kernel (`_run`), so a history computed in one batch,
in arbitrary chunks, or bar by bar across processes (state round-tripped through bytes) gives
bit-identical rows. Feature i of a row is NaN until the symbol has seen `WARMUPS[i]` earlier
bars; `warm` is True once every feature is past its warm-up.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numba import njit, types
from numba.np.numpy_support import from_dtype

from features import (
    adaptive,
    adx,
    basic,
    core,
    cusum,
    flow,
    long_memory,
    micro,
    norm,
    prefetch,
    price_osc,
    price_trend,
    regime,
    stats,
    timefeat,
    volume,
)
from features.primitives import KERNEL_OPTIONS, get_i64, kernel, rare
from features.registry import FEATURE_NAMES, FINGERPRINT, N_FEATURES, WARMUPS

# The state row: each module's block, in this order, at these offsets (B_*).
_BLOCKS = (core, flow, basic, price_trend, price_osc, timefeat, volume, stats, micro, norm, cusum,
           adx, regime, adaptive, long_memory)  # fmt: skip
_BASES = np.cumsum([0] + [m.SIZE for m in _BLOCKS])
(B_CORE, B_FLOW, B_BASIC, B_TREND, B_OSC, B_TIME, B_VOL, B_STATS, B_MICRO, B_NORM, B_CUSUM,
 B_ADX, B_REGIME, B_ADAPT, B_MEMORY, STATE_SIZE) = (int(b) for b in _BASES)  # fmt: skip
_WARMUP = np.array(WARMUPS, dtype=np.int64)
MAX_WARMUP = int(_WARMUP.max())
N_CTX = flow.N_CTX  # per-bar scratch: shared scalars and window means
_LAYOUT_TEXT = "|".join(m.LAYOUT.describe() for m in _BLOCKS)
STATE_LAYOUT = hashlib.sha256(_LAYOUT_TEXT.encode()).hexdigest()[:16]  # slot names and sizes

# Error codes of the kernel: code = 4 * bar + kind (kind below), -1 = success; below -1 the
# call itself is malformed (inputs of unequal lengths, states of another width).
_BAD_ROW, _BAD_PRICE, _BAD_VOLUME, _BAD_TIME = 0, 1, 2, 3
_OK, _BAD_LENGTHS, _BAD_WIDTH = -1, -3, -4
_NO_BAR = np.iinfo(np.int64).min


@kernel
def _step(
    s: np.ndarray,
    ts: int,
    o: float,
    h: float,
    lo: float,
    c: float,
    v: float,
    syn: bool,
    ctx: np.ndarray,
    out: np.ndarray,
) -> None:
    cs = s[B_CORE:B_FLOW]
    fs = s[B_FLOW:B_BASIC]
    real = not syn
    core.begin(cs, ts, o, h, lo, c, v, syn, ctx)
    if real:
        flow.update(fs, ctx)
    basic.update(cs, s[B_BASIC:B_TREND], ctx, out)
    ema5, ema12 = price_trend.update(cs, s[B_TREND:B_OSC], ctx, out)
    price_osc.update(cs, s[B_OSC:B_TIME], ctx, out, ema5, ema12)
    timefeat.update(s[B_TIME:B_VOL], ctx, out)
    if real:  # the volume block's means, late on purpose (see flow.roll)
        flow.roll(fs, ctx)
    volume.update(fs, s[B_VOL:B_STATS], ctx, out, real)
    stats.update(cs, s[B_STATS:B_MICRO], ctx, out)
    micro.update(cs, fs, s[B_MICRO:B_NORM], ctx, out, real)
    norm.update(cs, fs, s[B_NORM:B_CUSUM], ctx, out, real)
    cusum.update(s[B_CUSUM:B_ADX], ctx, out)
    adx.update(s[B_ADX:B_REGIME], ctx, out)
    regime.update(s[B_REGIME:B_ADAPT], ctx, out)
    adaptive.update(cs, s[B_ADAPT:B_MEMORY], ctx, out)
    long_memory.update(s[B_MEMORY:STATE_SIZE], ctx, out)
    core.finish(cs, ctx)


@kernel
def _prefetch(s: np.ndarray) -> None:
    """Ask for the lines the next bar of this state will touch (see features.prefetch)."""
    cs, fs = s[B_CORE:B_FLOW], s[B_FLOW:B_BASIC]
    t = int(cs[core.N])
    prefetch.span(cs, 0, core.RING_P)
    prefetch.rolling(cs, core.RING_P, core.SUMS_P, core.KP, core.NF, t)
    prefetch.span(fs, 0, flow.RING_V)
    prefetch.rolling(fs, flow.RING_V, flow.SUMS_V, flow.KV, flow.NF, int(fs[flow.NV]))
    ns, us = s[B_NORM:B_CUSUM], s[B_CUSUM:B_ADX]
    prefetch.rolling(ns, norm.RING_A, norm.SUMS_A, 2, norm.PAIR, t - core.ATR_PERIOD)
    prefetch.rolling(us, cusum.RING_E, cusum.SUMS_E, 2, cusum.PAIR, t)


@kernel
def _validate(
    states: np.ndarray,
    rows: np.ndarray,
    ts: np.ndarray,
    o: np.ndarray,
    h: np.ndarray,
    lo: np.ndarray,
    c: np.ndarray,
    v: np.ndarray,
    last: np.ndarray,
) -> int:
    """First bad bar as 4 * bar + kind, or -1. Runs before any state changes: all or nothing.
    `last` (int64, one per state) is scratch for each row's latest ts_event."""
    for r in range(states.shape[0]):
        if states[r, B_CORE + core.N] > 0.0:
            last[r] = get_i64(states[r], B_CORE + core.TS)
        else:
            last[r] = _NO_BAR
    for i in range(len(rows)):
        r = rows[i]
        if r < 0 or r >= states.shape[0]:
            return 4 * i + _BAD_ROW
        # Written out so that a NaN anywhere fails (min/max would skip it)
        ok = 0.0 < lo[i] <= o[i] <= h[i] < np.inf and lo[i] <= c[i] <= h[i]
        if not ok:
            return 4 * i + _BAD_PRICE
        if not (0.0 <= v[i] < np.inf):
            return 4 * i + _BAD_VOLUME
        if last[r] != _NO_BAR and ts[i] <= last[r]:
            return 4 * i + _BAD_TIME
        last[r] = ts[i]
    return -1


def _array(dtype: type, ndim: int = 1, readonly: bool = False) -> types.Array:
    return types.Array(from_dtype(np.dtype(dtype)), ndim, "C", readonly=readonly)


# Inputs are read-only in the signature, so read-only arrays (pandas' to_numpy) and writable ones
# share the one compiled kernel; an input of another dtype or layout is converted, never
# compiled for.
_INPUT_NAMES = ("rows", "ts_event", "open", "high", "low", "close", "volume", "synthetic")
_INPUT_DTYPES = (np.int64, np.int64, *[np.float64] * 5, np.bool_)
_SIGNATURE = types.int64(
    _array(np.float64, 2),  # states
    *(_array(t, readonly=True) for t in _INPUT_DTYPES),
    _array(np.float64, 2),  # out
    _array(np.bool_),  # warm
    _array(np.float64),  # ctx: per-bar scratch
    _array(np.int64),  # last ts_event per state: validation scratch
)


def _build_kernel(source_key: str) -> Callable[..., int]:
    # nogil: in the forecast worker the model's thread runs beside the event loop, and a batch's
    # kernel call would otherwise hold it off the GIL for all of its bars.
    @njit(_SIGNATURE, cache=True, nogil=True, **KERNEL_OPTIONS)
    def run(
        states: np.ndarray,
        rows: np.ndarray,
        ts: np.ndarray,
        o: np.ndarray,
        h: np.ndarray,
        lo: np.ndarray,
        c: np.ndarray,
        v: np.ndarray,
        syn: np.ndarray,
        out: np.ndarray,
        warm: np.ndarray,
        ctx: np.ndarray,
        last: np.ndarray,
    ) -> int:
        # `source_key` (a hash of every module in this package) is captured only so that
        # numba's cache key changes with any callee's source: numba itself tracks only the
        # file defining the cached function, and would otherwise run stale inlined callees.
        if len(source_key) == 0:
            return -2
        # Checked here rather than in update_many, where the same len() calls would run in
        # Python on every call.
        m = len(rows)
        if rare(
            not (len(ts) == len(o) == len(h) == len(lo) == len(c) == m)
            or not (len(v) == len(syn) == len(out) == len(warm) == m)
        ):
            return _BAD_LENGTHS
        if rare(states.shape[1] != STATE_SIZE or len(last) != states.shape[0]):
            return _BAD_WIDTH
        bad = _validate(states, rows, ts, o, h, lo, c, v, last)
        if bad >= 0:
            return bad
        ctx[:] = np.nan  # poisoned: a read of a mean that no window sums shows up as NaN
        for i in range(len(rows)):
            s = states[rows[i]]
            t = int(s[B_CORE + core.N])
            if i + 1 < len(rows):
                _prefetch(states[rows[i + 1]])
            _step(s, ts[i], o[i], h[i], lo[i], c[i], v[i], syn[i], ctx, out[i])
            warm[i] = t >= MAX_WARMUP
            if rare(t < MAX_WARMUP):
                for j in range(N_FEATURES):
                    if t < _WARMUP[j]:
                        out[i, j] = np.nan
        return _OK

    return run


def _source_key() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.name == "cli.py":  # presentation only: editing it must not force a recompile
            continue
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


_run = _build_kernel(_source_key())
_STATES_HELP = (
    f"states must be a writable C-contiguous float64 array of shape (n, {STATE_SIZE}); "
    "create it with features.engine.new_states(n)"
)


def new_states(n: int) -> np.ndarray:
    """States for n symbols, one row each, before their first bar."""
    return np.zeros((n, STATE_SIZE), dtype=np.float64)


def update_many(
    states: np.ndarray,
    rows: np.ndarray,
    ts_event: np.ndarray,
    open: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    close: np.ndarray,
    volume: np.ndarray,
    synthetic: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Advance states[rows[i]] by bar i, in order; returns (values (m, N_FEATURES), warm (m,)).

    All inputs are validated before any state moves: a bad bar raises ValueError and leaves
    every state untouched. C-contiguous inputs of the kernel's dtypes (int64 rows and ts_event,
    float64 prices and volume, bool synthetic) are used in place; others are converted.
    """
    # Live, this runs once a minute for a few dozen bars: written plainly (no generators, no
    # argument tuples) it stays a few percent of the kernel instead of about a tenth.
    m = len(rows)
    out, warm = np.empty((m, N_FEATURES)), np.empty(m, dtype=np.bool_)
    try:  # len(states) of a non-array raises TypeError too: the check below tells it apart
        ctx, last = np.empty(N_CTX), np.empty(len(states), dtype=np.int64)
        code = _run(
            states, rows, ts_event, open, high, low, close, volume, synthetic, out, warm, ctx, last
        )
    except TypeError:  # another dtype or layout: convert (copies) and run the same kernel
        if not (
            isinstance(states, np.ndarray)
            and states.ndim == 2
            and states.dtype == np.float64
            and states.flags.c_contiguous
            and states.flags.writeable
        ):
            raise ValueError(_STATES_HELP) from None
        given = (rows, ts_event, open, high, low, close, volume, synthetic)
        pairs = zip(given, _INPUT_DTYPES, strict=True)
        inputs = tuple(np.ascontiguousarray(x, dtype=t) for x, t in pairs)
        if any(x.ndim != 1 for x in inputs):
            raise ValueError("rows, ts_event, prices, volume and synthetic must be 1-D") from None
        code = _run(states, *inputs, out, warm, ctx, last)
    if code != _OK:
        inputs = (rows, ts_event, open, high, low, close, volume, synthetic)
        raise ValueError(_describe_error(code, states, *inputs))
    return out, warm


def _describe_error(code: int, states: np.ndarray, *inputs: np.ndarray) -> str:
    if code == _BAD_LENGTHS:
        sizes = ", ".join(f"{n}={len(x)}" for n, x in zip(_INPUT_NAMES, inputs, strict=True))
        return f"every input needs one entry per bar; got {sizes}"
    if code == _BAD_WIDTH:
        return _STATES_HELP
    i, kind = divmod(code, 4)
    row, ts, o, h, lo, c, v = (np.asarray(x)[i] for x in inputs[:7])
    where = f"bar {i} (row {row}, ts_event {ts})"
    if kind == _BAD_ROW:
        return f"{where}: row is outside states (n = {states.shape[0]}); grow the states array"
    if kind == _BAD_PRICE:
        return (
            f"{where}: prices must be finite, > 0 and satisfy low <= open, close <= high; got "
            f"open={o} high={h} low={lo} close={c}. Send bars through the corrections agent"
        )
    if kind == _BAD_VOLUME:
        return f"{where}: volume must be finite and >= 0, got {v}"
    return (
        f"{where}: ts_event is not after the previous bar of this row; bars of one symbol "
        "must arrive in strictly increasing time (deduplicate or reorder upstream)"
    )


def compute_batch(
    ts_event: np.ndarray,
    open: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    close: np.ndarray,
    volume: np.ndarray,
    synthetic: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Features over one symbol's whole history: the streaming kernel run over every bar."""
    n = len(ts_event)
    syn = np.zeros(n, dtype=np.bool_) if synthetic is None else synthetic
    return update_many(
        new_states(1), np.zeros(n, dtype=np.int64), ts_event, open, high, low, close, volume, syn
    )


_MAGIC = b"BCFS"
_FORMAT = 1
_HEADER = struct.Struct("<4sHHI16s16s")


def state_to_bytes(row: np.ndarray) -> bytes:
    """One symbol's state as bytes: a header (format, size, fingerprint, layout) + raw float64."""
    a = np.asarray(row)
    if a.shape != (STATE_SIZE,) or a.dtype != np.float64:
        raise ValueError(
            f"a state row is float64 of shape ({STATE_SIZE},), got {a.dtype} {a.shape}"
        )
    header = _HEADER.pack(
        _MAGIC, _FORMAT, 0, STATE_SIZE, FINGERPRINT.encode(), STATE_LAYOUT.encode()
    )
    return header + a.astype("<f8", copy=False).tobytes()


def state_from_bytes(data: bytes) -> np.ndarray:
    """Inverse of state_to_bytes; rejects states of another format, feature set or layout."""
    expected = _HEADER.size + 8 * STATE_SIZE
    if len(data) < _HEADER.size or data[:4] != _MAGIC:
        raise ValueError(
            "not a barcast feature state (bad magic); was it written by "
            "features.engine.state_to_bytes?"
        )
    _, fmt, _, size, fp, layout = _HEADER.unpack_from(data)
    fp_s, layout_s = fp.decode(errors="replace"), layout.decode(errors="replace")
    if fmt != _FORMAT or fp_s != FINGERPRINT or layout_s != STATE_LAYOUT or size != STATE_SIZE:
        raise ValueError(
            f"feature state was written by format {fmt}, feature set {fp_s}, layout {layout_s} "
            f"({size} slots); this engine is format {_FORMAT}, feature set {FINGERPRINT}, "
            f"layout {STATE_LAYOUT} ({STATE_SIZE} slots). Drop the stored state and rebuild it "
            "by replaying the symbol's history"
        )
    if len(data) != expected:
        raise ValueError(f"feature state is {len(data)} bytes, expected {expected} (truncated?)")
    return np.frombuffer(data, dtype="<f8", offset=_HEADER.size).astype(np.float64)


__all__ = [
    "FEATURE_NAMES",
    "FINGERPRINT",
    "MAX_WARMUP",
    "N_FEATURES",
    "STATE_SIZE",
    "WARMUPS",
    "compute_batch",
    "new_states",
    "state_from_bytes",
    "state_to_bytes",
    "update_many",
]
