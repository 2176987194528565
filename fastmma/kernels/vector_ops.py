"""Two LLVM intrinsics that numba does not expose, for loops that must vectorise.

Both are generic LLVM intrinsics, so the loop vectoriser widens them like any add: on
AVX-512, ``ldexp_f32`` becomes ``vscalefps`` and ``clz_u32`` becomes ``vplzcntd``, one
instruction for 16 lanes.  A call into libm or a bit loop would stop the vectoriser.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def ldexp_f32(typingctx, x, e):
    """``x * 2**e`` for a float32 ``x`` and an int32 ``e``: exact whenever the result is
    representable, infinite on overflow (``llvm.ldexp``)."""
    if x == types.float32 and e == types.int32:
        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.FloatType(), [ir.FloatType(), ir.IntType(32)])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.ldexp.f32.i32")
            return builder.call(fn, args)

        return types.float32(types.float32, types.int32), codegen


@intrinsic
def clz_u32(typingctx, x):
    """The number of leading zero bits of the uint32 ``x`` (32 for 0), as an int32
    (``llvm.ctlz``)."""
    if x == types.uint32:
        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(1)])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.ctlz.i32")
            return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])

        return types.int32(types.uint32), codegen
