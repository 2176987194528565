"""The floating-point environment of x86's SSE/AVX unit (the MXCSR register), for kernels
that want the hardware to round toward zero.

Every SSE/AVX float operation rounds as MXCSR's rounding-control field says (bits 13-14;
round to nearest even by default).  A kernel that sets "toward zero" gets an int32 to
float32 conversion (``vcvtdq2ps``) that truncates to 24 significant bits, and a ``ldexp``
(``vscalefps``) that truncates onto the subnormal grid: in one instruction each, the
rounding toward zero that would otherwise take a leading-zero count and a mask.  Operations
whose results are exact do not depend on the mode.

MXCSR belongs to a thread: a kernel sets it inside its parallel body and restores it there.
Both functions are no-ops returning 0 where the CPU is not x86 (:data:`HAS_MXCSR`).
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: True where the CPU has an MXCSR register (x86-64).
HAS_MXCSR = platform.machine().lower() in ("x86_64", "amd64", "x86", "i386", "i686")

#: MXCSR's power-on value: every exception masked (bits 7-12), round to nearest even
#: (bits 13-14 = 00), no flush-to-zero, no denormals-are-zero.  Kernels set it, or
#: :data:`MXCSR_TOWARD_ZERO`, whatever the calling thread had (a library built with
#: fast-math may have set flush-to-zero).
MXCSR_NEAREST = 0x1F80
#: The same, rounding toward zero (bits 13-14 = 11).
MXCSR_TOWARD_ZERO = MXCSR_NEAREST | 0x6000
#: The same, rounding toward -inf (bits 13-14 = 01).
MXCSR_DOWN = MXCSR_NEAREST | 0x2000
#: The same, rounding toward +inf (bits 13-14 = 10).
MXCSR_UP = MXCSR_NEAREST | 0x4000


def _mxcsr_call(builder, name, ptr):
    fnty = ir.FunctionType(ir.VoidType(), [ptr.type])
    builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), [ptr])


@intrinsic
def read_mxcsr(typingctx):
    """The calling thread's MXCSR (``stmxcsr``), as an int32; 0 without one."""
    def codegen(context, builder, signature, args):
        if not HAS_MXCSR:
            return ir.Constant(ir.IntType(32), 0)
        slot = cgutils.alloca_once(builder, ir.IntType(32))
        _mxcsr_call(builder, "llvm.x86.sse.stmxcsr", slot)
        return builder.load(slot)

    return types.int32(), codegen


@intrinsic
def write_mxcsr(typingctx, value):
    """Set the calling thread's MXCSR to the int32 ``value`` (``ldmxcsr``); nothing without one."""
    if value == types.int32:
        def codegen(context, builder, signature, args):
            if HAS_MXCSR:
                slot = cgutils.alloca_once(builder, ir.IntType(32))
                builder.store(args[0], slot)
                _mxcsr_call(builder, "llvm.x86.sse.ldmxcsr", slot)
            return context.get_dummy_value()

        return types.none(types.int32), codegen
