"""Integer tensor-core arithmetic: s8/u8/s4/u4 dot products and b1 population counts.

Rule (PTX ISA wgmma.mma_async / wmma.mma, integer variants; confirmed by the H100
recordings): the products and their sum with C are exact; the s32 result wraps modulo
2^32, or with ``.satfinite`` is clamped to [INT32_MIN, INT32_MAX] once per instruction
(a k-loop of instructions clamps after each one).  For ``.b1`` each term is
``popc(a AND b)`` (or ``XOR``) of one bit pair, and the sum wraps.

Operands arrive one element per byte: integers as their two's-complement bits
(``a_bits`` wide) and b1 as 0/1.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


@njit(cache=True, inline="always")
def _value(bits, width, signed):
    v = np.int64(bits) & ((np.int64(1) << width) - 1)
    if signed and v >= (np.int64(1) << (width - 1)):
        v -= np.int64(1) << width
    return v


@njit(cache=True, inline="always")
def _to_s32(acc, satfinite):
    if satfinite:
        if acc > INT32_MAX:
            return np.int64(INT32_MAX)
        if acc < INT32_MIN:
            return np.int64(INT32_MIN)
        return acc
    acc &= np.int64(0xFFFFFFFF)
    return acc - (np.int64(1) << 32) if acc > INT32_MAX else acc


@njit(cache=True, inline="always")
def _element(idx, n, c, use_c):
    """Row and column of element ``idx`` of an ``n``-column D, and its sum's start: C's
    element, or 0."""
    i = idx // n
    j = idx - i * n
    return i, j, np.int64(c[i, j]) if use_c else np.int64(0)


@njit(parallel=True, cache=True)
def int_dot_mma(a, b, c, out, a_width, a_signed, b_width, b_signed, group, satfinite, use_c):
    """``out = C + A @ B`` (int32) by instructions of ``group`` k each, in increasing k."""
    m, kk = a.shape
    n = b.shape[1]
    for idx in prange(m * n):
        i, j, acc = _element(idx, n, c, use_c)
        for k0 in range(0, kk, group):
            for k in range(k0, k0 + group):
                acc += _value(a[i, k], a_width, a_signed) * _value(b[k, j], b_width, b_signed)
            acc = _to_s32(acc, satfinite)
        out[i, j] = acc


@njit(parallel=True, cache=True)
def popc_mma(a, b, c, out, xor, use_c):
    """``out = C + sum_k popc(a[i,k] op b[k,j])`` over 0/1 elements, wrapped to int32."""
    m, kk = a.shape
    n = b.shape[1]
    for idx in prange(m * n):
        i, j, acc = _element(idx, n, c, use_c)
        for k in range(kk):
            x = (a[i, k] ^ b[k, j]) if xor else (a[i, k] & b[k, j])
            acc += np.int64(x & 1)
        out[i, j] = _to_s32(acc, False)
