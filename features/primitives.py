"""Building blocks shared by every feature kernel: the JIT decorator, state layout, rolling blocks.

A symbol's whole state is one flat float64 vector. Each kernel module reserves its slots with a
`Layout` at import time; the resulting offsets are plain module constants that numba freezes
into the compiled code.

A *rolling block* is a ring of `RING` records of `k` float fields plus, for every window in
`WINDOWS`, the running sums of the block's first `nf[w]` fields (fields are ordered so that
each window's fields form a prefix). `roll_sums` keeps the sums with one add/subtract per
field and window; `resync_sums` recomputes them exactly from the ring once per ring cycle, so
float drift can never grow past `RING` updates; `fill_means` turns them into the per-bar means
the groups read (`roll_means` rolls and fills in one pass). All deterministic: a history
streamed bar by bar and the same history in one batch give identical bits.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

from features.vectors import LANES, VAR_FLOOR, roll4

# Options of every kernel. No fastmath: results must be exact and reproducible. numpy's error
# model turns the zero checks on every division into plain IEEE semantics (the guards below keep
# them unreachable). Kernels never allocate (callers pass scratch space), so numba's
# reference-counting runtime is off (`_nrt=False`): otherwise every array view and call pays
# atomic refcount updates, which cost more than the features themselves. Every kernel is inlined
# into the entry point (`forceinline`): left to its own heuristics, LLVM kept some 35 helpers
# (module updates, window rolls, extreme trackers, the prefetch) as calls, and each call passed
# numba's array structs through the stack and spilled every live float register around it
# (all are caller-saved). Inlined, a bar costs about a fifth less, with the same bits.
KERNEL_OPTIONS = {"error_model": "numpy", "_nrt": False, "forceinline": True}
# Only the engine's entry point is cached (`cache=True`, see engine): numba keys a cached function
# on its own source file alone, so cached helpers would survive edits of the constants they
# inline from other modules. Helpers compile into the entry point's cached object instead.
kernel = njit(**KERNEL_OPTIONS)

RING = 64  # records per ring: a power of two above the longest window plus its longest lag
MASK = RING - 1
WINDOWS = np.array([5, 10, 14, 20, 60], dtype=np.int64)
W5, W10, W14, W20, W60 = 0, 1, 2, 3, 4  # index of each window in WINDOWS
N_WINDOWS = len(WINDOWS)
INV_COUNT = 1.0 / np.maximum(np.arange(WINDOWS.max() + 1), 1)  # 1/n by a window's bar count


class Layout:
    """Allocates named slots of one module's block of the state vector."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.size = 0
        self.slots: list[tuple[str, int]] = []

    def add(self, name: str, n: int = 1) -> int:
        offset = self.size
        self.size += n
        self.slots.append((name, n))
        return offset

    def rolling(self, name: str, k: int) -> tuple[int, int]:
        """Reserve a rolling block of `k` fields: returns (ring offset, sums offset)."""
        return self.add(f"{name}.ring", RING * k), self.add(f"{name}.sums", N_WINDOWS * k)

    def describe(self) -> str:
        return f"{self.name}:" + ",".join(f"{slot}={n}" for slot, n in self.slots)


@intrinsic
def fma(typingctx, a, b, c):  # type: ignore[no-untyped-def]
    """a*b + c rounded once (llvm.fma), as TA-Lib 0.8's fused EMA recursion computes it."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fnty = ir.FunctionType(ir.DoubleType(), [ir.DoubleType()] * 3)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.f64")
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def rare(typingctx, cond):  # type: ignore[no-untyped-def]
    """cond, hinted as almost always False (llvm.expect): the compiler lays out what it guards (a
    once-per-ring resync, a calendar recompute, a window rescan, a warm-up branch) away from
    the per-bar path, which then takes fewer instruction-cache lines. Same value, same result."""
    sig = types.boolean(types.boolean)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i1 = ir.IntType(1)
        fnty = ir.FunctionType(i1, [i1, i1])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.expect.i1")
        return builder.call(fn, [args[0], ir.Constant(i1, 0)])

    return sig, codegen


@kernel
def ema_step(prev: float, x: float, k: float) -> float:
    return fma(x - prev, k, prev)


@kernel
def ratio(num: float, den: float) -> float:
    """num/den, or 0 where den is 0 (flat prices, zero volume, empty windows)."""
    return num / den if den != 0.0 else 0.0


@kernel
def clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


@kernel
def sign(x: float) -> float:
    if x > 0.0:
        return 1.0
    if x < 0.0:
        return -1.0
    return 0.0


@kernel
def sqrt0(x: float) -> float:
    """sqrt of a variance, with float residue below VAR_FLOOR read as exactly flat."""
    return math.sqrt(x) if x > VAR_FLOOR else 0.0


@kernel
def put_i64(s: np.ndarray, off: int, v: int) -> None:
    """Store an int64 (a ns timestamp exceeds float64's 53 exact bits) as two exact halves."""
    s[off] = float(v >> 32)
    s[off + 1] = float(v & 0xFFFFFFFF)


@kernel
def get_i64(s: np.ndarray, off: int) -> int:
    return (np.int64(s[off]) << 32) | np.int64(s[off + 1])


@kernel
def slot(ring: int, k: int, t: int, lag: int) -> int:
    """Offset of the record written `lag` bars before bar `t` in a ring of k-field records."""
    return ring + ((t - lag) & MASK) * k


@kernel
def advance_sums(s: np.ndarray, ring: int, sums: int, k: int, nf: tuple, t: int) -> None:
    """Fold bar t's record (already written) into the sums; exact recount once per ring cycle.

    nf[w] = how many leading fields window w sums: fields are ordered so that each window's
    fields form a prefix, and bars pay only for sums something reads (up to whole vectors)."""
    if rare((t & MASK) == MASK):
        resync_sums(s, ring, sums, k, nf, t)
    else:
        roll_sums(s, ring, sums, k, nf, t)


@kernel
def advance_means(
    s: np.ndarray, ring: int, sums: int, k: int, nf: tuple, t: int, dst: np.ndarray, off: int
) -> None:
    """advance_sums, then the means as fill_means writes them."""
    if rare((t & MASK) == MASK):
        resync_sums(s, ring, sums, k, nf, t)
        fill_means(s, sums, k, nf, t, dst, off)
    else:
        roll_means(s, ring, sums, k, nf, t, dst, off)


@kernel
def roll_means(
    s: np.ndarray, ring: int, sums: int, k: int, nf: tuple, t: int, dst: np.ndarray, off: int
) -> None:
    """roll_sums, writing each new sum's mean (as fill_means does) while it is in a register,
    a vector of fields at a time once the window is full: every nf[w] must be whole vectors
    (see vectors.whole_vectors)."""
    new = slot(ring, k, t, 0)
    for w in range(N_WINDOWS):
        win = WINDOWS[w]
        base = sums + w * k
        means = off + w * k
        inv = INV_COUNT[min(t + 1, win)]
        if rare(t < win):
            for f in range(nf[w]):
                x = s[base + f] + s[new + f]
                s[base + f] = x
                dst[means + f] = x * inv
        else:
            old = slot(ring, k, t, win)
            for f in range(0, nf[w], LANES):
                roll4(s, base + f, new + f, old + f, dst, means + f, inv)


@kernel
def roll_sums(s: np.ndarray, ring: int, sums: int, k: int, nf: tuple, t: int) -> None:
    """Add bar t's record to every window sum and drop the record leaving the window."""
    new = slot(ring, k, t, 0)
    for w in range(N_WINDOWS):
        win = WINDOWS[w]
        base = sums + w * k
        if rare(t < win):
            for f in range(nf[w]):
                s[base + f] += s[new + f]
        else:
            old = slot(ring, k, t, win)
            for f in range(nf[w]):
                s[base + f] += s[new + f] - s[old + f]


@kernel
def resync_sums(s: np.ndarray, ring: int, sums: int, k: int, nf: tuple, t: int) -> None:
    """Recount every window sum in one pass over the lags (windows are nested, WINDOWS ascending):
    the widest window's slot accumulates, newest record first, the fields of every window still
    open, and each shorter window copies its fields out where its count ends. Same additions in
    the same order as recounting each window alone, so the same bits."""
    acc = sums + (N_WINDOWS - 1) * k
    width = 0
    for w in range(N_WINDOWS):
        width = max(width, nf[w])
    for f in range(width):
        s[acc + f] = 0.0
    w = 0
    n_last = min(WINDOWS[N_WINDOWS - 1], t + 1)
    for lag in range(n_last):
        while w < N_WINDOWS - 1 and lag == min(WINDOWS[w], t + 1):
            for f in range(nf[w]):
                s[sums + w * k + f] = s[acc + f]
            w += 1
        open_fields = 0
        for v in range(w, N_WINDOWS):
            open_fields = max(open_fields, nf[v])
        rec = slot(ring, k, t, lag)
        for f in range(open_fields):
            s[acc + f] += s[rec + f]
    while w < N_WINDOWS - 1:  # windows that end with the history (t + 1 <= their size)
        for f in range(nf[w]):
            s[sums + w * k + f] = s[acc + f]
        w += 1


@kernel
def fill_means(
    s: np.ndarray, sums: int, k: int, nf: tuple, t: int, dst: np.ndarray, off: int
) -> None:
    """dst[off + w*k + f] = mean of field f over window w: one vectorized pass per bar instead
    of a division at every use."""
    for w in range(N_WINDOWS):
        inv = INV_COUNT[min(t + 1, WINDOWS[w])]
        for f in range(nf[w]):
            dst[off + w * k + f] = s[sums + w * k + f] * inv


@kernel
def count(t: int, w: int) -> int:
    """Records in a window of w at bar t (the whole window once warm)."""
    return min(t + 1, WINDOWS[w])


@kernel
def wsum(s: np.ndarray, sums: int, k: int, w: int, f: int) -> float:
    return s[sums + w * k + f]


@kernel
def wmean(s: np.ndarray, sums: int, k: int, w: int, f: int, t: int) -> float:
    return s[sums + w * k + f] / count(t, w)


@kernel
def extreme(
    ts: np.ndarray, trk: int, rs: np.ndarray, ring: int, k: int, f: int, t: int, win: int, hi: bool
) -> None:
    """Rolling max (hi) or min of field f of the ring rs[ring:] over `win` bars, tracked in
    ts[trk] (value) and ts[trk + 1] (bar index of the value).

    O(1) except when the extreme leaves the window, which triggers one rescan of the window.
    Ties resolve to the most recent bar, so "bars since the high" counts from the freshest touch.
    """
    x = rs[slot(ring, k, t, 0) + f]
    if t == 0 or (x >= ts[trk] if hi else x <= ts[trk]):
        ts[trk] = x
        ts[trk + 1] = t
    elif rare(t - int(ts[trk + 1]) >= win):
        rescan(ts, trk, rs, ring, k, f, t, win, hi)


@kernel
def rescan(
    ts: np.ndarray, trk: int, rs: np.ndarray, ring: int, k: int, f: int, t: int, win: int, hi: bool
) -> None:
    best = rs[slot(ring, k, t, 0) + f]
    at = t
    for lag in range(1, min(win, t + 1)):
        v = rs[slot(ring, k, t, lag) + f]
        if (v > best) if hi else (v < best):
            best = v
            at = t - lag
    ts[trk] = best
    ts[trk + 1] = at


@kernel
def ema_seeded(s: np.ndarray, off: int, x: float, i: int, n: int) -> float:
    """TA-Lib's EMA of x at its i-th input (i = 0 first): s[off] value, s[off + 1] seed sum.

    Seeded with the plain mean of the first n inputs (valid from i = n - 1), then the fused
    recursion TA-Lib 0.8 uses, so values match talib.EMA bit for bit.
    """
    if rare(i < n):
        if i < n - 1:
            s[off + 1] += x
        else:
            s[off] = (s[off + 1] + x) / n
    else:
        s[off] = ema_step(s[off], x, 2.0 / (n + 1))
    return s[off]
