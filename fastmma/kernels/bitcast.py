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


@intrinsic
def f64_from_bits(typingctx, x):
    """The float64 whose bits are the int64 ``x``."""
    if x == types.int64:
        return _bitcast(types.int64, types.float64)


@intrinsic
def f64_bits(typingctx, x):
    """The bits of the float64 ``x`` as an int64."""
    if x == types.float64:
        return _bitcast(types.float64, types.int64)


@intrinsic
def f32_from_bits(typingctx, x):
    """The float32 whose bits are the int32 ``x``."""
    if x == types.int32:
        return _bitcast(types.int32, types.float32)


@intrinsic
def f32_bits(typingctx, x):
    """The bits of the float32 ``x`` as an int32."""
    if x == types.float32:
        return _bitcast(types.float32, types.int32)

