"""Eleven LLVM operations that numba does not expose, for loops that must vectorise.

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
``f32_from_f16_bits`` widens an IEEE half-precision number, given by its bits, to float32
(LLVM's ``fpext`` from ``half``): ``vcvtph2ps``, 16 lanes in one instruction, where the CPU
converts halves itself (:data:`F16_CONVERSIONS`); in integer steps elsewhere.
``copy_run`` copies a run of a length known when the code is compiled as one vector load and
store: a loop of 16 elements with its length known only at run time costs more in its set-up
than in its copying, and with the length written in, LLVM unrolled it into 16 scalar moves.
"""

from __future__ import annotations

import functools
import platform

import numpy as np
from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .bitcast import f32_bits, f32_from_bits


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


@intrinsic
def copy_run(typingctx, dst, di, src, si, n):
    """``dst[di:di + n] = src[si:si + n]`` for one-dimensional C-contiguous arrays of one
    dtype and a literal ``n``: one unaligned load and store of an ``n``-element LLVM vector.
    Nothing is checked: the caller keeps both runs inside their arrays."""
    if (isinstance(n, types.IntegerLiteral) and isinstance(dst, types.Array) and isinstance(src, types.Array)
            and dst.ndim == src.ndim == 1 and dst.layout == src.layout == "C" and dst.dtype == src.dtype
            and isinstance(di, types.Integer) and isinstance(si, types.Integer)):
        count = n.literal_value

        def codegen(context, builder, signature, args):
            dst_type, _, src_type, _, _ = signature.args
            run = ir.VectorType(context.get_data_type(dst_type.dtype), count).as_pointer()
            d = context.make_array(dst_type)(context, builder, args[0])
            s = context.make_array(src_type)(context, builder, args[2])
            value = builder.load(builder.bitcast(builder.gep(s.data, [args[3]]), run), align=1)
            builder.store(value, builder.bitcast(builder.gep(d.data, [args[1]]), run), align=1)
            return context.get_dummy_value()

        return types.void(dst, di, src, si, n), codegen


@functools.lru_cache(maxsize=None)
def _host_features() -> str:
    from numba.core.codegen import get_host_cpu_features

    return get_host_cpu_features()


def codegen_features() -> str:
    """The LLVM features (comma-separated) that numba's code generator targets: the user's
    ``NUMBA_CPU_FEATURES`` (or what :mod:`fastmma.codegen` set), else the host CPU's.  Read
    once per process, because numba's reading of the host's features is slow next to a
    single instruction's call."""
    return config.CPU_FEATURES if config.CPU_FEATURES is not None else _host_features()


def _f16_conversions() -> bool:
    """Whether numba's code generator targets a CPU that converts halves to floats itself:
    x86 with F16C, or any 64-bit Arm.  Elsewhere LLVM would call a library routine, which the
    JIT may not link."""
    if platform.machine().lower() in ("aarch64", "arm64"):
        return True
    return "+f16c" in codegen_features().split(",")


#: True where :func:`f32_from_f16_bits` is one instruction (:func:`_f16_conversions`).
F16_CONVERSIONS = _f16_conversions()


@intrinsic
def _f32_from_f16_bits_fpext(typingctx, x):
    """:func:`f32_from_f16_bits` by LLVM's ``fpext`` from ``half``."""
    if isinstance(x, types.Integer):
        def codegen(context, builder, signature, args):
            bits = args[0]
            if bits.type.width > 16:
                bits = builder.trunc(bits, ir.IntType(16))
            elif bits.type.width < 16:
                bits = builder.zext(bits, ir.IntType(16))
            return builder.fpext(builder.bitcast(bits, ir.HalfType()), ir.FloatType())

        return types.float32(x), codegen


@njit(cache=True, inline="always")
def f32_from_f16_bits_by_integers(x):
    """:func:`f32_from_f16_bits` in integer steps, for CPUs that do not convert halves: a
    normal half's fields moved into a float32's (the exponent rebiased by 127 - 15), a
    subnormal one's significand converted and scaled by 2^-24 (both exact), an inf or NaN
    kept (a NaN's payload moved up with it)."""
    h = np.int32(x) & np.int32(0xFFFF)
    sign = np.int32(np.int32(h & np.int32(0x8000)) << np.int32(16))
    mag = np.int32(h & np.int32(0x7FFF))
    if mag >= np.int32(0x7C00):
        return f32_from_bits(np.int32(sign | np.int32(0x7F800000) | np.int32((mag & np.int32(0x3FF)) << np.int32(13))))
    if mag >= np.int32(0x400):
        return f32_from_bits(np.int32(sign | np.int32((mag << np.int32(13)) + np.int32(112 << 23))))
    tiny = np.float32(mag) * np.float32(2.0**-24)
    return f32_from_bits(np.int32(sign | f32_bits(tiny)))


#: The float32 value of the IEEE half whose bits are the low 16 bits of an integer: exact
#: for every half, subnormals included (they are normal float32s); a NaN for a NaN.  One
#: ``vcvtph2ps`` for 16 lanes where :data:`F16_CONVERSIONS` (LLVM's ``fpext`` from
#: ``half``, which elsewhere calls a library routine that numba's JIT does not link),
#: else :func:`f32_from_f16_bits_by_integers`.
f32_from_f16_bits = _f32_from_f16_bits_fpext if F16_CONVERSIONS else f32_from_f16_bits_by_integers
