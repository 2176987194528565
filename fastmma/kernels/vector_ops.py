"""Nine LLVM operations that numba does not expose, for loops that must vectorise.

``ldexp_f32`` and ``clz_u32`` are generic LLVM intrinsics, so the loop vectoriser widens
them like any add: on AVX-512, ``ldexp_f32`` becomes ``vscalefps`` and ``clz_u32`` becomes
``vplzcntd``, one instruction for 16 lanes.  A call into libm or a bit loop would stop the
vectoriser.  ``sub_i32`` and ``add_i32`` are plain 32-bit arithmetic: numba computes
``int32 - int32`` in int64, and where an operand comes from a loop-invariant ``int32(x)``
LLVM keeps the int64 lanes (two vectors of 8 and the conversions between them, for one of
16).
``shl_i32`` and ``lshr_i32`` shift an int32 by an int32 in 32 bits: numba shifts in int64,
and a shift by a run-time amount (a format's field position) then keeps int64 lanes.
``fma_f32`` and ``fma_f64`` are fused multiply-adds (``vfmadd``), rounded once: numba never
fuses ``a * b + c`` itself, and a multiply and an add are two vector operations where one
does.
``as_element_of`` converts an integer to an array's element type, so that one loop body
computes in int8 lanes (64 per vector) or int16 lanes as the array it is given.
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


def _fma_codegen(float_type, suffix):
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(float_type, [float_type] * 3)
        return builder.call(cgutils.get_or_insert_function(builder.module, fnty, f"llvm.fma.{suffix}"), args)

    return codegen


@intrinsic
def fma_f32(typingctx, a, b, c):
    """``a * b + c`` for float32 operands, rounded once as the CPU's rounding mode says
    (``llvm.fma``)."""
    if a == types.float32 and b == types.float32 and c == types.float32:
        return types.float32(types.float32, types.float32, types.float32), _fma_codegen(ir.FloatType(), "f32")


@intrinsic
def fma_f64(typingctx, a, b, c):
    """:func:`fma_f32` for float64 operands."""
    if a == types.float64 and b == types.float64 and c == types.float64:
        return types.float64(types.float64, types.float64, types.float64), _fma_codegen(ir.DoubleType(), "f64")


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


def _int32_op(a, b, op):
    """The typing and code of ``op`` (an llvmlite IRBuilder method) on two int32 operands,
    in 32 bits."""
    if a == types.int32 and b == types.int32:
        def codegen(context, builder, signature, args):
            return getattr(builder, op)(args[0], args[1])

        return types.int32(types.int32, types.int32), codegen


@intrinsic
def add_i32(typingctx, a, b):
    """``a + b`` for int32 ``a`` and ``b``, computed (and wrapping) in 32 bits."""
    return _int32_op(a, b, "add")


@intrinsic
def sub_i32(typingctx, a, b):
    """``a - b`` for int32 ``a`` and ``b``, computed (and wrapping) in 32 bits."""
    return _int32_op(a, b, "sub")


@intrinsic
def as_element_of(typingctx, x, like):
    """The integer ``x`` converted (wrapping) to the element type of the integer array
    ``like``."""
    if isinstance(x, types.Integer) and isinstance(like, types.Array) and isinstance(like.dtype, types.Integer):
        def codegen(context, builder, signature, args):
            return context.cast(builder, args[0], signature.args[0], signature.return_type)

        return like.dtype(x, like), codegen


@intrinsic
def shl_i32(typingctx, x, n):
    """``x << n`` for int32 ``x`` and ``n`` (0 <= n < 32), in 32 bits."""
    return _int32_op(x, n, "shl")


@intrinsic
def lshr_i32(typingctx, x, n):
    """``x >> n`` for int32 ``x`` and ``n`` (0 <= n < 32), shifting in zeros (the bits of ``x``
    taken as unsigned), in 32 bits."""
    return _int32_op(x, n, "lshr")
