"""``mma.sync.m8n8k4`` with f16 inputs as ptxas expands it for sm_90a
(:class:`~fastmma.isa.numerics.FfmaExpansionRule`): no tensor core, but the f16 elements
converted to f32 and combined by single-precision ``FFMA`` / ``FMUL`` / ``FADD``, each
rounded to nearest even with subnormals kept, then, for an f16 D, ``F2FP`` to f16.

Every step is one IEEE operation on two values that are exact f32 values (a product of two
f16 values has 22 significant bits and an exponent inside f32's normal range, so ``FMUL`` is
exact and an ``FFMA`` is one addition of two f32 values).  Their sum is formed in float64 and
rounded to f32 by the CPU's conversion: a sum of two binary32 values rounded first to binary64
and then to binary32 is the correctly rounded one (53 >= 2 * 24 + 2: double rounding is
innocuous).  The kernel sets MXCSR to round to nearest without flush-to-zero or
denormals-are-zero, whatever the caller had.  A NaN result is the GPU's canonical NaN
(0x7FFFFFFF, or 0x7FFF for f16).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .bitcast import f32_bits
from .converted_sum import F32_NAN
from .fp_env import MXCSR_NEAREST, read_mxcsr, write_mxcsr
from .fused_gemm import f16_bits_of_f32
from .vector_ops import f32_from_f16_bits

ORDERS = {"chain": 0, "pairs": 1}


@njit(cache=True, inline="always")
def add_rn32(x, y):
    """The float64 holding ``x + y`` rounded once to nearest-even f32, for float64 ``x`` and
    ``y`` that are exact f32 values (the module docstring: why the two roundings are one)."""
    return np.float64(np.float32(x + y))


@njit(cache=True, inline="always")
def _step(acc, a, b, i, j, k0, n_pairs):  # a, b: one GEMM's (M, K) and (K, N) values
    """One instruction's sum onto ``acc`` (float64, an f32 value): ``chain`` (``n_pairs``
    0): ``s = fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, +0))))``, then ``acc + s``;
    ``pairs``: ``p01 = fma(a1, b1, a0 * b0)``, ``p23 = fma(a3, b3, a2 * b2)``, then ``(acc +
    p01) + p23``."""
    if n_pairs:
        p01 = add_rn32(a[i, k0 + 1] * b[k0 + 1, j], a[i, k0] * b[k0, j])
        p23 = add_rn32(a[i, k0 + 3] * b[k0 + 3, j], a[i, k0 + 2] * b[k0 + 2, j])
        return add_rn32(add_rn32(acc, p01), p23)
    s = 0.0
    for k in range(k0, k0 + 4):
        s = add_rn32(a[i, k] * b[k, j], s)
    return add_rn32(acc, s)


@njit(cache=True, parallel=True)
def expansion_gemm(a, b, c32, c16, out32, out16, pairs, d_is_f16, use_c):
    """D = C + A . B for a stack of GEMMs, instruction after instruction of 4 k terms in
    increasing k.  ``a`` (S, M, K) and ``b`` (S, K, N) are float64 values of f16 elements; C
    is ``c32`` (float32) or ``c16`` (float64 values of f16, where ``c32`` is empty); D goes to
    ``out32`` (uint32 bits) or ``out16`` (uint16 bits, where ``d_is_f16``, the accumulator
    rounded to f16 after every instruction).  Without ``use_c`` the first instruction's C is
    +0.  The threads share the stack's rows."""
    count, m, kk = a.shape
    n = b.shape[2]
    for row in prange(count * m):
        s, i = row // m, row % m
        saved = read_mxcsr()
        write_mxcsr(np.int32(MXCSR_NEAREST))
        for j in range(n):
            if not use_c:
                acc = 0.0
            elif c32.shape[0] > 0:
                acc = np.float64(c32[s, i, j])
            else:
                acc = c16[s, i, j]
            for k0 in range(0, kk, 4):
                acc = _step(acc, a[s], b[s], i, j, k0, pairs)
                if d_is_f16:
                    acc = _round_f16_value(acc)
            if d_is_f16:
                out16[s, i, j] = _f16_out(acc)
            else:
                out32[s, i, j] = F32_NAN if np.isnan(acc) else np.uint32(f32_bits(np.float32(acc)))
        write_mxcsr(saved)


@njit(cache=True, inline="always")
def _f16_out(x):
    """f16 bits of ``x`` (a float64 holding an f32 value) rounded to nearest even
    (``F2FP.F16.F32``; a NaN canonical)."""
    return f16_bits_of_f32(np.float32(x))


@njit(cache=True, inline="always")
def _round_f16_value(x):
    """``x`` (an f32 value) rounded to nearest-even f16, as a float64 (a NaN as a NaN)."""
    return np.float64(f32_from_f16_bits(_f16_out(x)))


def ffma_expansion(rule, a, b, c, atype: str, btype: str, ctype: str, dtype: str, *, use_c: bool = True,
                   neg_a: bool = False, neg_b: bool = False) -> np.ndarray:
    """D bits (M, N) under ``rule`` for f16 bits ``a`` (M, K), ``b`` (K, N) and C bits ``c`` (M,
    N) in ``ctype`` (or stacks of them: (S, M, K) and so on); K a multiple of 4."""
    single = a.ndim == 2
    a, b, c = (x[None] if single else x for x in (a, b, c))
    av = np.ascontiguousarray(a).view(np.float16).astype(np.float64)
    bv = np.ascontiguousarray(b).view(np.float16).astype(np.float64)
    if neg_a:
        av = -av
    if neg_b:
        bv = -bv
    shape = (a.shape[0], a.shape[1], b.shape[2])
    none32, none16 = np.empty((0, 0, 0), np.float32), np.empty((0, 0, 0), np.float64)
    if ctype == "f32":
        c32, c16 = np.ascontiguousarray(c).view(np.float32), none16
    else:
        c32, c16 = none32, np.ascontiguousarray(c).view(np.float16).astype(np.float64)
    f16 = dtype == "f16"
    out32 = np.empty((0, 0, 0) if f16 else shape, np.uint32)
    out16 = np.empty(shape if f16 else (0, 0, 0), np.uint16)
    expansion_gemm(av, bv, c32, c16, out32, out16, ORDERS[rule.order], f16, use_c)
    out = out16 if f16 else out32
    return out[0] if single else out
