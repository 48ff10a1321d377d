"""Software prefetch of the state lines a symbol's next bar will touch.

A minute of 64 symbols cycles ~2.5 MB of state, more than L2, and other work between calls
(a caller's Python heap) evicts it from L3 as well: each bar then waits on memory for its ring
records and window sums. The kernel asks for the next bar's lines while it computes the current
bar, so their latency overlaps useful work instead of stalling it. Only lines likely to have
left the caches are asked for: the bar counts, the window sums, and the records leaving windows
of 10 bars and more (ten minutes of 64 symbols' state traffic overflow L2), those of the CUSUM
and ATR rings included: asking for every line of the small blocks too costs more than it saves,
and with the state cached the prefetch costs nothing. Prefetches are hints: they change no
value, only when memory arrives."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from features.primitives import N_WINDOWS, W10, WINDOWS, kernel, slot

LINE = 8  # float64 per 64-byte cache line


@intrinsic
def prefetch(typingctx, ary, i):  # type: ignore[no-untyped-def]
    """Hint that a[i] is about to be read and written (llvm.prefetch, write, L1, data)."""
    sig = types.void(ary, i)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        aryty = signature.args[0]
        a = context.make_array(aryty)(context, builder, args[0])
        p = cgutils.get_item_pointer(context, builder, aryty, a, [args[1]], wraparound=False)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [p.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        flags = [ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        builder.call(fn, [p, *flags])
        return context.get_dummy_value()

    return sig, codegen


@kernel
def span(s: np.ndarray, off: int, n: int) -> None:
    """Every line of s[off : off + n] (n >= 1), whatever the array's alignment."""
    for j in range(off, off + n, LINE):
        prefetch(s, j)
    prefetch(s, off + n - 1)


@kernel
def rolling(s: np.ndarray, ring: int, sums: int, k: int, nf: tuple, t: int) -> None:
    """What advancing a rolling block (see primitives) to bar t reads from far back: the records
    leaving the windows of 10 bars and more, and the window sums. The new record's slot and the
    5-bar window's record were touched a few bars ago and are still cached."""
    for w in range(N_WINDOWS):
        if nf[w] > 0:
            if w >= W10:
                span(s, slot(ring, k, t, WINDOWS[w]), nf[w])
            span(s, sums + w * k, nf[w])
