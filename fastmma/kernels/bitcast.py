"""Scalar bit casts between floats and integers of the same width, for numba kernels.

numba has no scalar ``view``; these intrinsics emit one LLVM ``bitcast`` each, so a kernel
can build a power of two from its exponent bits, or mask a float's low bits, inside a
vectorised loop.
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic


def _bitcast(src, dst):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(dst))

    return dst(src), codegen


def _bitcast_intrinsic(name, src, dst, doc):
    """An intrinsic ``name(x)``: the ``dst`` whose bits are those of ``x``, a ``src``."""
    def typer(typingctx, x):
        if x == src:
            return _bitcast(src, dst)

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


f64_from_bits = _bitcast_intrinsic("f64_from_bits", types.int64, types.float64, "The float64 whose bits are the int64 x.")
f64_bits = _bitcast_intrinsic("f64_bits", types.float64, types.int64, "The bits of the float64 x as an int64.")
f32_from_bits = _bitcast_intrinsic("f32_from_bits", types.int32, types.float32, "The float32 whose bits are the int32 x.")
f32_bits = _bitcast_intrinsic("f32_bits", types.float32, types.int32, "The bits of the float32 x as an int32.")
