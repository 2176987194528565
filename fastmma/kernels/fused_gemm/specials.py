"""Recomputing the D elements that an inf or NaN in A, B or C touches."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..fp_env import MXCSR_NEAREST, read_mxcsr, write_mxcsr
from ..fused_dot import ROUND_RZ, rounding_code
from ..operands import widened
from ..special_chains import column_specials, prefix_bound, row_specials, special_element
from .decode import _I32
from .rounding import bits_sum

@njit(parallel=True, cache=True)
def fixup_specials(a, b, c, d, af, bf, cf, df, group, frac, e_zero, omb, rnd, use_c, neg_a, neg_b,
                   rows, cols, elems, addend, b_specials, bound):
    """Recompute every D element in a special row, column or C element, for each GEMM of a
    stack: ``a`` (S, M, K), ``b`` (S, K, N), ``c`` and ``d`` (S, M, N); ``rows`` (S, M),
    ``cols`` (S, N) and ``elems`` (S, M, N) boolean masks; ``addend`` (S, M, N), D's bits,
    where the kernels added it (:func:`plus_nearest`), else (S, 0, 0).  Each element's D is
    its special terms' (:mod:`.special_chains`: ``b_specials`` from
    :func:`~.special_chains.column_specials`), where the groups before the first of them
    cannot overflow (``bound``, :func:`~.special_chains.prefix_bound`), else the chain of
    those groups is summed first.  The threads share the rows of all S GEMMs (a stack of
    GEMVs is one call, not one each)."""
    m = a.shape[1]
    n = b.shape[2]
    f16 = rnd != ROUND_RZ
    ptr, b_ks = b_specials
    t, limit = bound
    for sr in prange(a.shape[0] * m):
        s = sr // m
        i = sr - s * m
        a_ks = row_specials(a[s, i], af, rows[s, i])
        saved = read_mxcsr()
        write_mxcsr(_I32(MXCSR_NEAREST))
        for j in range(n):
            if not (rows[s, i] or cols[s, j] or elems[s, i, j]):
                continue
            col = s * n + j
            bits = special_element(a[s], b[s], b[s], c[s], i, j, a_ks, b_ks[ptr[col]:ptr[col + 1]], af, bf, cf, df,
                                   group, frac, e_zero, omb, rnd, use_c, neg_a, neg_b, t, limit)
            d[s, i, j] = bits_sum(bits, addend[s, i, j], f16) if addend.shape[1] else bits
        write_mxcsr(saved)


def fix_specials(rule, a, b, c, d, af, bf, cf, df, use_c, neg_a, neg_b, rows, cols, elems=None, addend=None):
    """:func:`fixup_specials` under ``rule``, for one GEMM (2-D operands, ``rows`` (M,),
    ``cols`` (N,)) or a stack; ``elems`` None where C holds no inf or NaN, ``addend`` None
    where nothing was added.  Every D element it recomputes has a special term (an inf or
    NaN in its row of A, its column of B or its C)."""
    if a.ndim == 2:
        a, b, c, d, rows, cols = a[None], b[None], c[None], d[None], rows[None], cols[None]
        elems = None if elems is None else elems[None]
        addend = None if addend is None else addend[None]
    a, b, c = widened(a), widened(b), widened(c)
    bound = prefix_bound(a, b, af, bf, df, rule.group, rounding_code(rule) != ROUND_RZ)
    fixup_specials(a, b, c, d, af, bf, cf, df, rule.group, rule.frac_bits, rule.e_zero, rule.out_man_bits,
                   rounding_code(rule), use_c, int(neg_a), int(neg_b), rows, cols,
                   np.zeros(d.shape, np.bool_) if elems is None else elems, _or_none(addend, np.uint32, d.shape[:1]),
                   column_specials(b, bf, cols), bound)


def _or_none(x, dtype, count=()):
    """``x`` as the kernels take an optional array (an addend, an f16 D's bits): itself, or
    where it is None an empty one of ``dtype``, (0, 0) for one GEMM, (S, 0, 0) for a stack
    of ``count`` = (S,), whose rows the kernels read as none.  An addend is left writeable, as
    its empty stand-in is: one of each would compile each kernel twice."""
    return np.empty((*count, 0, 0), dtype) if x is None else x


def _check_addend(addend, rule, use_c, shape):
    """An ``addend`` is D's bits (uint32 for f32, uint16 for f16), D's shape, C-contiguous,
    and comes without C (no caller has both: each of ``ConvertedF16Rule``'s steps sums from
    +0)."""
    if addend is None:
        return
    storage = np.uint32 if rounding_code(rule) == ROUND_RZ else np.uint16
    if use_c or addend.shape != tuple(shape) or addend.dtype != storage or not addend.flags.c_contiguous:
        raise ValueError(f"an addend must be D's bits, {np.dtype(storage)} {tuple(shape)}, C-contiguous, without C; "
                         f"got {addend.dtype} {addend.shape}, use_c={use_c}")
