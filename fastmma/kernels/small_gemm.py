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
and the per-element reference decodes every operand again for every output.  This kernel
decodes each operand once and runs on the calling thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bitcast import f32_from_bits, f64_from_bits
from .fused_dot import rounding_code
from .fp_env import MXCSR_NEAREST, read_mxcsr, write_mxcsr
from .fused_gemm import _c_exponent, _d_bits, _decode_value, _finish_row, _group_row64, fix_specials
from .operands import read_only
from .variants import variant
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
    :func:`.fused_gemm._accumulator` gives in numpy, here in the kernel, so that a single
    instruction's call does not pay for that one's copy, ``isfinite`` and ``all``."""
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
    work = np.empty((3, _block_rows(m, n) * n), np.int64)  # E, S (as float64) and T of a block of rows
    rows_fn(acc, av, ae, bv, be, work, frac, e_zero, omb, rnd, c_emin, d_emin)
    write_mxcsr(saved)
    return acc, rows, cols, elems, rows.any() or cols.any() or elems.any()


#: Tiles of at most BLOCK_MAX_N columns run their rows in blocks of about BLOCK_OUTPUTS
#: outputs (:func:`_group_block64`).  A row of such a tile is one or two vectors, and one
#: row at a time its chains of dependent steps left the core idle between them; on a wider
#: tile a row alone fills it, and keeping each vector's sum in a register through the k
#: terms (:func:`.fused_gemm._group_row64`) wins.
BLOCK_MAX_N = 16
BLOCK_OUTPUTS = 256


@njit(cache=True, inline="always")
def _block_rows(m, n):
    """The rows of a block of an M x N tile: one where N passes :data:`BLOCK_MAX_N` (and
    where M or N is 0, which leaves nothing to compute but a step for the loops)."""
    return max(1, min(m, BLOCK_OUTPUTS // max(n, 1))) if n <= BLOCK_MAX_N else 1


@njit(cache=True, inline="always")
def _group_block64(acc, r0, R, G, g0, av, ae, bv, be, E, S, T, frac, e_floor, omb, rnd, emin):
    """One fused group of ``G`` terms from ``g0`` for rows ``r0 .. r0 + R`` of ``acc``, as
    :func:`.fused_gemm._group_row64` computes each row (``E``, ``S``, ``T``: ``R`` rows of
    scratch), with the rows' steps interleaved: each loop over the k terms runs through every
    row of the block, so that the rows' independent work fills the core."""
    n = acc.shape[1]
    for q in range(R):  # pass 1: e_max, from C's exponent and the products'
        for j in range(n):
            E[q, j] = max(np.int64(e_floor), np.int64(_c_exponent(acc[r0 + q, j], emin)))
    for k in range(g0, g0 + G):
        for q in range(R):
            ek = np.int64(ae[r0 + q, k])
            for j in range(n):
                E[q, j] = max(E[q, j], ek + np.int64(be[k, j]))
    for q in range(R):  # the scale 2^(frac - e_max); pass 2 starts each sum at 0
        for j in range(n):
            S[q, j] = f64_from_bits((1023 + frac - E[q, j]) << 52)
            T[q, j] = 0
    for k in range(g0, g0 + G):
        for q in range(R):
            a = av[r0 + q, k]
            for j in range(n):
                T[q, j] += np.int64(a * (bv[k, j] * S[q, j]))
    _finish_row(acc[r0:r0 + R].reshape(R * n), E[:R].reshape(R * n), T[:R].reshape(R * n), R * n, frac, omb, rnd)


@njit(cache=True, inline="always")
def _rows_body(acc, av, ae, bv, be, work, G, frac, e_zero, omb, rnd, c_emin, d_emin):
    """Every row of ``acc`` through the groups of ``G`` terms: one row at a time
    (:func:`.fused_gemm._group_row64`), or, for tiles of at most :data:`BLOCK_MAX_N`
    columns, in blocks of :func:`_block_rows` rows (:func:`_group_block64`; ``work``: three
    arrays of a block's outputs)."""
    m, n = acc.shape
    kk = bv.shape[0]
    if n > BLOCK_MAX_N:
        E, S, T = work[0], work[1].view(np.float64), work[2]
        for i in range(m):
            for g0 in range(0, kk, G):
                _group_row64(acc[i], G, min(G, 16), g0, n, ae, av, i, 0, be, bv, E, S, T, frac, 0, e_zero, omb, rnd,
                             c_emin if g0 == 0 else d_emin)
        return
    R = _block_rows(m, n)
    E, S, T = work[0].reshape((R, n)), work[1].view(np.float64).reshape((R, n)), work[2].reshape((R, n))
    for r0 in range(0, m, R):
        rb = min(R, m - r0)
        for g0 in range(0, kk, G):
            _group_block64(acc, r0, rb, G, g0, av, ae, bv, be, E, S, T, frac, e_zero, omb, rnd,
                           c_emin if g0 == 0 else d_emin)


def _rows_template(G):
    """A row function's template: G must be a literal in the code of a compiled function."""
    def rows(acc, av, ae, bv, be, work, frac, ez, omb, rnd, ce, de):
        _rows_body(acc, av, ae, bv, be, work, G, frac, ez, omb, rnd, ce, de)
    return rows


#: the row function of a kernel: each compiled variant binds this name in its own globals (:func:`.variants.variant`)
_rows = None


def _small_template(G):
    """A kernel's template (:func:`_small_body`), calling the row function ``_rows`` (of group size G)."""
    def kernel(a, b, c, af, bf, frac, ez, omb, rnd, ce, de, uc, na, nb):
        return _small_body(a, b, c, af, bf, _rows, frac, ez, omb, rnd, ce, de, uc, na, nb)
    return kernel


#: the kernels by group size
SMALL_KERNELS = {G: variant(_small_template(G), f"_small_g{G}",
                            {"_rows": variant(_rows_template(G), f"_rows_g{G}", cache=True, _nrt=False)}, cache=True)
                 for G in (4, 8, 16, 32)}


def small_gemm(rule, a, b, c, af, bf, cf, df, *, c_emin, d_emin, use_c, neg_a, neg_b):
    """D bits = C + A @ B under ``rule`` (a FusedDotRule), as :func:`.fused_gemm.fused_gemm`
    takes its arguments (C already as the sum reads it: ``kernels.c_as_accumulator``)."""
    if a.shape[1] % rule.group:
        raise ValueError(f"K = {a.shape[1]} is not a multiple of the rule's group of {rule.group} terms")
    a, b, c = read_only(a), read_only(b), read_only(c)
    rnd = rounding_code(rule)
    kernel = SMALL_KERNELS[rule.group]
    acc, rows, cols, elems, special = kernel(a, b, c, af, bf, rule.frac_bits, rule.e_zero, rule.out_man_bits, rnd,
                                             c_emin, d_emin, bool(use_c), int(neg_a), int(neg_b))
    d = _d_bits(acc, rule)
    if special:
        fix_specials(rule, a, b, c, d, af, bf, cf, df, use_c, neg_a, neg_b, rows, cols, elems)
    return d
