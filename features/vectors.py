"""Four float64 operations per packed instruction, built in registers.

roots4 and ratios4 apply sqrt0 and ratio (see primitives) to 4-tuples as one packed instruction:
square roots and divisions are the kernel's slowest instructions, and a packed one costs about a
scalar one. roll4 rolls one vector of window sums (see primitives.roll_means). Same IEEE results
as the scalar forms, bit for bit; LLVM does not pack these by itself (its SLP pass leaves sqrt and
guarded divisions scalar, and cannot prove window sums apart from the records they read). Vectors
are built in registers: a round trip through memory would make the vector load wait for the
scalar stores before it.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

# Variances of one-minute log returns below this are float residue, not movement: one tick on
# any listed future is a log return above 1e-6, i.e. a variance above 1e-14 in a 60-bar window.
VAR_FLOOR = 1e-20


LANES = 4  # operands per packed instruction (a 256-bit vector of float64)
_VEC = ir.VectorType(ir.DoubleType(), LANES)
_QUAD = types.UniTuple(types.float64, LANES)


def whole_vectors(*nf: int) -> tuple[int, ...]:
    """A rolling block's fields per window (see roll_means), each rounded up to whole vectors:
    the extra fields' sums are kept like the others and simply never read."""
    return tuple(-(-n // LANES) * LANES for n in nf)


def _vector(builder, quad):  # type: ignore[no-untyped-def]
    v = ir.Constant(_VEC, ir.Undefined)
    for i in range(LANES):
        v = builder.insert_element(v, builder.extract_value(quad, i), ir.IntType(32)(i))
    return v


def _quad(context, builder, keep, value):  # type: ignore[no-untyped-def]
    """The lanes of value where keep holds, else 0, as a 4-tuple."""
    lanes = builder.select(keep, value, ir.Constant(_VEC, [0.0] * LANES))
    quad = context.get_constant_undef(_QUAD)
    for i in range(LANES):
        quad = builder.insert_value(quad, builder.extract_element(lanes, ir.IntType(32)(i)), i)
    return quad


@intrinsic
def roots4(typingctx, x):  # type: ignore[no-untyped-def]
    """(sqrt0(x0), ..., sqrt0(x3))."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        v = _vector(builder, args[0])
        fnty = ir.FunctionType(_VEC, [_VEC])
        sqrt = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.sqrt.v{LANES}f64")
        keep = builder.fcmp_ordered(">", v, ir.Constant(_VEC, [VAR_FLOOR] * LANES))
        return _quad(context, builder, keep, builder.call(sqrt, [v]))

    return _QUAD(_QUAD), codegen


@intrinsic
def ratios4(typingctx, num, den):  # type: ignore[no-untyped-def]
    """(ratio(num0, den0), ..., ratio(num3, den3))."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        n, d = _vector(builder, args[0]), _vector(builder, args[1])
        keep = builder.fcmp_unordered("!=", d, ir.Constant(_VEC, [0.0] * LANES))
        return _quad(context, builder, keep, builder.fdiv(n, d))

    return _QUAD(_QUAD, _QUAD), codegen


@intrinsic
def roll4(typingctx, s, base, new, old, dst, means, inv):  # type: ignore[no-untyped-def]
    """One vector of a window: s[base + i] += s[new + i] - s[old + i], then dst[means + i] =
    s[base + i] * inv, for i < LANES. The same IEEE operations, lane by lane, as the scalar loop
    (which LLVM leaves scalar: it cannot prove the sums apart from the records they read)."""
    sig = types.void(s, base, new, old, dst, means, inv)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        sty, dty = signature.args[0], signature.args[4]
        sa = context.make_array(sty)(context, builder, args[0])
        da = context.make_array(dty)(context, builder, args[4])

        def at(aty, a, i):  # type: ignore[no-untyped-def]
            p = cgutils.get_item_pointer(context, builder, aty, a, [i], wraparound=False)
            return builder.bitcast(p, _VEC.as_pointer())

        total = at(sty, sa, args[1])
        moved = builder.fsub(
            builder.load(at(sty, sa, args[2]), align=8), builder.load(at(sty, sa, args[3]), align=8)
        )
        x = builder.fadd(builder.load(total, align=8), moved)
        builder.store(x, total, align=8)
        vinv = ir.Constant(_VEC, ir.Undefined)
        for i in range(LANES):
            vinv = builder.insert_element(vinv, args[6], ir.IntType(32)(i))
        builder.store(builder.fmul(x, vinv), at(dty, da, args[5]), align=8)
        return context.get_dummy_value()

    return sig, codegen
