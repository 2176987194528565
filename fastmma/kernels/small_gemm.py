"""The fused-dot rule for one instruction's tile: one thread, float64 lanes, no blocking.

Same numbers as :func:`fastmma.kernels.fused_dot.fused_dot_mma`, bit for bit, computed the
way :mod:`.fused_gemm`'s float64 path computes them (:func:`.fused_gemm._group_row64`): for
each group of k terms, ``e_max`` as an integer maximum, each term ``trunc(a * b * 2^(frac -
e_max))`` by one float64 product and a truncating conversion (every product of the formats
is exact in float64, and so is every scaling of it that does not drop below 1), the
integer sum plus C's term rounded to the accumulator.  Infinities and NaNs in A, B or C are
left to the reference rule afterwards (:func:`.fused_gemm.fixup_specials`), as the blocked
kernels leave them.

A single wgmma or wmma is a few thousand multiply-adds.  The blocked kernels spend more on
starting their threads, decoding into panels and allocating scratch than on such a tile,
and the per-element reference decodes every operand again for every output (m16n16k16 f16:
about 130 ns an output).  This kernel decodes each operand once and runs on the calling
thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bitcast import f32_from_bits
from .fused_dot import rounding_code
from .fp_env import MXCSR_NEAREST, read_mxcsr, write_mxcsr
from .fused_gemm import _d_bits, _decode_value, _group_row64, fixup_specials
from .vector_ops import f32_from_f16_bits


@njit(cache=True, inline="always")
def _decoded(x, p, neg):
    """``(values, exponents, special)`` of a matrix of element bits (:func:`_decode_value`):
    float64 values, int64 exponents, and per element whether it is an inf or NaN."""
    rows, cols = x.shape
    v = np.empty((rows, cols))
    e = np.empty((rows, cols), np.int64)
    s = np.empty((rows, cols), np.bool_)
    for r in range(rows):
        for k in range(cols):
            v[r, k], e[r, k], s[r, k] = _decode_value(x[r, k], p, neg)
    return v, e, s


@njit(cache=True, inline="always")
def _accumulator_values(c, use_c):
    """C's bits (float32 or f16) as float32 values, zeros where not ``use_c``; an inf or NaN
    becomes 0 and is marked in the second array (its outputs are recomputed).  What
    :func:`.fused_gemm._accumulator` gives in numpy, here in the kernel: that one's copy,
    ``isfinite`` and ``all`` cost a wmma call 1-1.5 us of its 14."""
    m, n = c.shape
    acc = np.zeros((m, n), np.float32)
    elems = np.zeros((m, n), np.bool_)
    if use_c:
        for i in range(m):
            for j in range(n):
                x = f32_from_f16_bits(np.int32(c[i, j])) if c.itemsize == 2 else f32_from_bits(np.int32(c[i, j]))
                finite = abs(x) < np.float32(np.inf)
                acc[i, j] = x if finite else np.float32(0)
                elems[i, j] = not finite
    return acc, elems


@njit(cache=True, inline="always")
def _small_body(a, b, c, af, bf, rows_fn, frac, e_zero, omb, rnd, c_emin, d_emin, use_c, neg_a, neg_b):
    """``(acc, rows, cols, elems, any)``: D's values (float32) for A (M, K) and B (K, N), element
    bits of the formats ``af`` and ``bf``, and C's bits, group after group of ``rows_fn``'s
    size in increasing k (K a multiple of it); A's rows, B's columns and C's elements that
    hold an inf or NaN, whose outputs are left for :func:`.fused_gemm.fixup_specials`, and
    whether there is any.  It runs on the calling thread with MXCSR at its defaults (round
    to nearest, which the f16 rounding's constants need, and no flush of subnormals, which
    bf16, tf32 and f32 values can be), and gives the thread its own back."""
    m, kk = a.shape
    n = b.shape[1]
    saved = read_mxcsr()
    write_mxcsr(np.int32(MXCSR_NEAREST))  # whatever the calling thread rounds or flushes by
    av, ae, a_special = _decoded(a, af, neg_a)
    bv, be, b_special = _decoded(b, bf, neg_b)
    acc, elems = _accumulator_values(c, use_c)
    rows = np.zeros(m, np.bool_)
    for i in range(m):
        rows[i] = a_special[i].any()
    cols = np.zeros(n, np.bool_)
    for k in range(kk):
        for j in range(n):
            cols[j] |= b_special[k, j]
    work = np.empty((3, n), np.int64)  # E, S (as float64) and T
    rows_fn(acc, av, ae, bv, be, work, frac, e_zero, omb, rnd, c_emin, d_emin)
    write_mxcsr(saved)
    return acc, rows, cols, elems, rows.any() or cols.any() or elems.any()


@njit(cache=True, inline="always")
def _rows_body(acc, av, ae, bv, be, work, G, frac, e_zero, omb, rnd, c_emin, d_emin):
    """Every row of ``acc`` through the groups of ``G`` terms (:func:`_group_row64`)."""
    m, n = acc.shape
    kk = bv.shape[0]
    E, S, T = work[0], work[1].view(np.float64), work[2]
    for i in range(m):
        for g0 in range(0, kk, G):
            _group_row64(acc[i], G, min(G, 16), g0, n, ae, av, i, 0, be, bv, E, S, T, frac, 0, e_zero, omb, rnd,
                         c_emin if g0 == 0 else d_emin)


# one kernel per group size: G must be a literal in the source of a compiled function
@njit(cache=True, _nrt=False)
def _rows_g4(acc, av, ae, bv, be, work, frac, ez, omb, rnd, ce, de):
    _rows_body(acc, av, ae, bv, be, work, 4, frac, ez, omb, rnd, ce, de)


@njit(cache=True)
def _small_g4(a, b, c, af, bf, frac, ez, omb, rnd, ce, de, uc, na, nb):
    return _small_body(a, b, c, af, bf, _rows_g4, frac, ez, omb, rnd, ce, de, uc, na, nb)


@njit(cache=True, _nrt=False)
def _rows_g8(acc, av, ae, bv, be, work, frac, ez, omb, rnd, ce, de):
    _rows_body(acc, av, ae, bv, be, work, 8, frac, ez, omb, rnd, ce, de)


@njit(cache=True)
def _small_g8(a, b, c, af, bf, frac, ez, omb, rnd, ce, de, uc, na, nb):
    return _small_body(a, b, c, af, bf, _rows_g8, frac, ez, omb, rnd, ce, de, uc, na, nb)


@njit(cache=True, _nrt=False)
def _rows_g16(acc, av, ae, bv, be, work, frac, ez, omb, rnd, ce, de):
    _rows_body(acc, av, ae, bv, be, work, 16, frac, ez, omb, rnd, ce, de)


@njit(cache=True)
def _small_g16(a, b, c, af, bf, frac, ez, omb, rnd, ce, de, uc, na, nb):
    return _small_body(a, b, c, af, bf, _rows_g16, frac, ez, omb, rnd, ce, de, uc, na, nb)


@njit(cache=True, _nrt=False)
def _rows_g32(acc, av, ae, bv, be, work, frac, ez, omb, rnd, ce, de):
    _rows_body(acc, av, ae, bv, be, work, 32, frac, ez, omb, rnd, ce, de)


@njit(cache=True)
def _small_g32(a, b, c, af, bf, frac, ez, omb, rnd, ce, de, uc, na, nb):
    return _small_body(a, b, c, af, bf, _rows_g32, frac, ez, omb, rnd, ce, de, uc, na, nb)


SMALL_KERNELS = {4: _small_g4, 8: _small_g8, 16: _small_g16, 32: _small_g32}


def small_gemm(rule, a, b, c, af, bf, cf, df, *, c_emin, d_emin, use_c, neg_a, neg_b):
    """D bits = C + A @ B under ``rule`` (a FusedDotRule), as :func:`.fused_gemm.fused_gemm`
    takes its arguments (C already as the sum reads it: ``kernels.c_as_accumulator``)."""
    if a.shape[1] % rule.group:
        raise ValueError(f"K = {a.shape[1]} is not a multiple of the rule's group of {rule.group} terms")
    rnd = rounding_code(rule)
    kernel = SMALL_KERNELS[rule.group]
    acc, rows, cols, elems, special = kernel(a, b, c, af, bf, rule.frac_bits, rule.e_zero, rule.out_man_bits, rnd,
                                             c_emin, d_emin, bool(use_c), int(neg_a), int(neg_b))
    d = _d_bits(acc, rule)
    if special:
        fixup_specials(a, b, c, d, af, bf, cf, df, rule.group, rule.frac_bits, rule.e_zero, rule.out_man_bits, rnd,
                       use_c, int(neg_a), int(neg_b), rows, cols, elems)
    return d
