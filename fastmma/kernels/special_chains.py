"""D elements whose chain of groups meets an inf or NaN, decided by their special terms.

Under the fused rule (:mod:`.fused_dot`) a group whose terms or C hold an inf or NaN gives
an inf or NaN without summing its finite terms, and that result is the next group's C. So
once a chain meets a special term, every later group's sum is special too, and D is
decided by the flags of the special terms alone (:func:`.fused_dot.special_term`: NaN for
a NaN factor, ``inf * 0`` or infinities of both signs, else the one infinity), with one
exception: the finite groups before the first special one can overflow to an infinity,
which then counts as a term of that sign.  Where a bound on those groups' sums shows that
none can overflow (:func:`prefix_bound`, :func:`prefix_bounded`), an element costs a look at
its special terms, not its chain of K terms; elsewhere those groups are summed as they are.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .decode import FINITE, INF, decode_float
from .fp_env import MXCSR_NEAREST, read_mxcsr, write_mxcsr
from .fused_dot import ROUND_RZ, fused_chain_to, rounding_code, special_bits, special_term
from .operands import read_only, widened


@njit(cache=True, inline="always")
def _is_special(bits, p):
    return decode_float(bits, p[0], p[1], p[2], p[3], p[4])[0] >= INF


_BAND = 64  # columns of B that column_specials reads down K at a time


def column_specials(b, bf, cols):
    """Where each flagged column of B holds an inf or NaN: ``(ptr, ks)``, the ks of
    ``b[s, :, j]`` (in increasing k) at ``ks[ptr[s * N + j]:ptr[s * N + j + 1]]`` for
    ``cols[s, j]``, none for the others.  ``b`` (S, K, N), ``cols`` (S, N)."""
    if not cols.any():  # a row of A flagged alone: no kernel to start
        return np.zeros(cols.size + 1, np.int64), np.empty(0, np.int64)
    return _column_specials(b, bf, cols)


@njit(cache=True, parallel=True)
def _column_specials(b, bf, cols):
    """:func:`column_specials`, the threads sharing bands of :data:`_BAND` columns, each
    read row by row (two passes: the counts, then the ks)."""
    count, kk, n = b.shape
    bands = (n + _BAND - 1) // _BAND
    ptr = np.zeros(count * n + 1, np.int64)
    for sb in prange(count * bands):
        s, j0 = sb // bands, sb % bands * _BAND
        j1 = min(n, j0 + _BAND)
        if cols[s, j0:j1].any():
            for k in range(kk):
                for j in range(j0, j1):
                    if cols[s, j] and _is_special(b[s, k, j], bf):
                        ptr[s * n + j + 1] += 1
    for t in range(count * n):
        ptr[t + 1] += ptr[t]
    ks = np.empty(ptr[-1], np.int64)
    for sb in prange(count * bands):
        s, j0 = sb // bands, sb % bands * _BAND
        j1 = min(n, j0 + _BAND)
        put = ptr[s * n + j0:s * n + j1].copy()
        if cols[s, j0:j1].any():
            for k in range(kk):
                for j in range(j0, j1):
                    if cols[s, j] and _is_special(b[s, k, j], bf):
                        ks[put[j - j0]] = k
                        put[j - j0] += 1
    return ptr, ks


@njit(cache=True)
def row_specials(row, af, flagged):
    """The ks (in increasing k) where ``row`` (one row of A) holds an inf or NaN, none
    unless ``flagged``."""
    ks = np.empty(row.shape[0] if flagged else 0, np.int64)
    count = 0
    for k in range(ks.shape[0]):
        if _is_special(row[k], af):
            ks[count] = k
            count += 1
    return ks[:count]


@njit(cache=True, inline="always")
def element_specials(a, b, c, i, j, a_ks, b_ks, af, bf, cf, use_c, neg):
    """``(flags, first)`` of element ``(i, j)``: the flags of its special terms, those at
    ``a_ks`` (A's row) and ``b_ks`` (B's column) and C's, and the first k where one is (0
    for C's, ``a.shape[1]`` for none)."""
    flags = 0
    first = a.shape[1]
    if use_c:
        cc, sc, ec, mc = decode_float(c[i, j], cf[0], cf[1], cf[2], cf[3], cf[4])
        flags |= special_term(cc, sc, FINITE, 0, 0)
        if flags:
            first = 0
    for ks in (a_ks, b_ks):
        for t in range(ks.shape[0]):
            k = ks[t]
            ca, sa, ea, ma = decode_float(a[i, k], af[0], af[1], af[2], af[3], af[4])
            cb, sb, eb, mb = decode_float(b[k, j], bf[0], bf[1], bf[2], bf[3], bf[4])
            flags |= special_term(ca, sa, cb, sb, neg)
        if ks.shape[0]:
            first = min(first, ks[0])
    return flags, first


@njit(cache=True, inline="always")
def magnitude(x, p):
    """``|x|`` of a float's bits ``x`` (format ``p``), 0 for an inf or NaN."""
    cls, _, e, sig = decode_float(x, p[0], p[1], p[2], p[3], p[4])
    return sig * 2.0 ** (e - p[1]) if cls == FINITE else 0.0


@njit(cache=True)
def special_element(a, b, b_chain, c, i, j, a_ks, b_ks, af, bf, cf, df, group, frac, e_zero, omb, rnd, use_c, neg_a,
                    neg_b, t, limit):
    """D's bits of element ``(i, j)`` of one GEMM (``fused_gemm.fixup_specials``), whose row of A
    holds inf or NaN at ``a_ks`` and column of B at ``b_ks``: its special terms' flags, with
    the groups before the first of them summed where they could overflow (the whole chain
    where it meets none).  The groups are summed against ``b_chain``: ``b`` itself for a
    dense A, ``b`` with its specials zeroed for a spread one (:func:`fixup_spread_specials`).
    Called, not inlined, because inlined its chains slow numba's analysis of the parallel
    loop, and so the compile."""
    flags, first = element_specials(a, b, c, i, j, a_ks, b_ks, af, bf, cf, use_c, neg_a ^ neg_b)
    end = a.shape[1]  # where the groups summed end: none met, the whole chain
    if flags:
        end = first // group * group  # the first group with a special term
        if end and prefix_bounded(magnitude(c[i, j], cf) if use_c else 0.0, end // group, t, limit):
            end = 0
        if end == 0:
            return special_bits(flags, df)
    acc = fused_chain_to(a, b_chain, c, i, j, end, group, af, bf, cf, df, use_c, neg_a, neg_b, frac, e_zero, omb, rnd)
    if flags == 0:
        return acc
    cls, sign, _, _ = decode_float(acc, df[0], df[1], df[2], df[3], df[4])
    return special_bits(flags | special_term(cls, sign, FINITE, 0, 0), df)  # the prefix's overflow, if any


@njit(cache=True, parallel=True)
def _finite_max(bits, p):
    """The largest magnitude of the finite elements of ``bits`` (any shape), as float64."""
    flat = bits.reshape(-1)
    chunks = 64
    best = np.zeros(chunks)
    for ch in prange(chunks):
        top = 0.0
        for t in range(ch * flat.size // chunks, (ch + 1) * flat.size // chunks):
            top = max(top, magnitude(flat[t], p))
        best[ch] = top
    return best.max()


def _format_max(p) -> float:
    """The largest finite value of the format ``p`` (:func:`.decode.float_params`)."""
    exp_bits, man_bits, bias, ieee, _ = p
    top_field = (1 << exp_bits) - (2 if ieee else 1)
    top_man = (1 << man_bits) - (1 if ieee else 2)  # a non-IEEE format's all-ones code is NaN
    return float(((1 << man_bits) | top_man) * 2.0 ** (top_field - bias - man_bits))


#: a bound on the growth of a sum's magnitude by one rounding (to nearest: 2^-11 for f16)
GROWTH = 1.0 + 2.0 ** -10


def _limit(df, nearest: bool) -> float:
    """The magnitude at which a sum overflows D's format: one unit in the last place above
    its largest finite value rounding toward zero, half of one rounding to nearest."""
    exp_bits, man_bits, bias, _, _ = df
    ulp = 2.0 ** ((1 << exp_bits) - 2 - bias - man_bits)
    return _format_max(df) + (ulp / 2 if nearest else ulp)


def prefix_bound(a, b, af, bf, df, group: int, nearest: bool) -> tuple[float, float]:
    """``(t, limit)`` for :func:`prefix_bounded`: ``t`` bounds the magnitude of one group's
    truncated terms (``group`` times the largest magnitudes of A and B) plus 1 (more than a
    subnormal rounding can add), ``limit`` is where D overflows (rounding to nearest where
    ``nearest``, else toward zero).  The formats' largest values give ``t`` where they keep
    the longest chain of A and B (from a C of 0) below ``limit``, the largest finite
    elements of A and B (``a``, ``b`` C-contiguous) where they do not."""
    limit = _limit(df, nearest)
    t = group * _format_max(af) * _format_max(bf) + 1.0
    groups = a.shape[-1] // group
    # one group has no prefix; the power is capped below where Python's pow raises OverflowError (past the cap
    # the product exceeds any limit anyway)
    if groups > 1 and groups * t * GROWTH ** min(groups, 100000) >= limit:
        t = group * _finite_max(a, af) * _finite_max(b, bf) + 1.0
    return t, limit


@njit(cache=True, inline="always")
def prefix_bounded(c_abs, groups, t, limit):
    """Whether ``groups`` finite groups of terms below ``t`` each, from a C of magnitude
    ``c_abs``, stay below the overflow ``limit``: each group's sum is rounded once, which
    grows its magnitude by a factor below :data:`GROWTH`."""
    return (c_abs + groups * t) * GROWTH ** groups < limit


# ---------------------------------------------------------------- a sparse A spread to its dense columns


@njit(cache=True, inline="always")
def _keeps(cols, i, k, chunk, kept):
    """Whether row ``i`` keeps dense place ``k``: its ``kept`` columns of ``k``'s chunk of
    ``chunk`` places are ``cols[i, k // chunk * kept:][:kept]``."""
    first = k // chunk * kept
    for t in range(first, first + kept):
        if cols[i, t] == k:
            return True
    return False


@njit(cache=True, parallel=True)
def fixup_spread_specials(a, cols, chunk, kept, b, b_chain, b_index, c, d, af, bf, cf, df, group, frac, e_zero, omb,
                          rnd, use_c, neg_a, neg_b, b_specials, bound):
    """Recompute the D elements of a sparse A (``a`` (R, K/2), each row's kept elements, at
    the dense places ``cols`` (R, K/2), ``kept`` in each chunk of ``chunk``) whose row keeps a
    place where its column of B holds an inf or NaN: row ``i`` against ``b[b_index[i]]``
    (S, K, N), whose specials ``b_specials`` lists (:func:`column_specials`).  ``d`` (R, N)
    holds the GEMM of A spread to its dense columns against ``b_chain``, B with those specials
    zeroed, which is already right for the other elements: a place a row does not keep takes
    no part in its sum.  Where no chain of the row's groups can overflow, from its largest C,
    its elements' flags decide them without a call.  The threads share the rows."""
    rows, half = cols.shape
    kk, n = b.shape[1], b.shape[2]
    ptr, b_ks = b_specials
    t, limit = bound
    for i in prange(rows):
        s = b_index[i]
        spread = np.zeros((1, kk), a.dtype)
        for q in range(half):
            spread[0, cols[i, q]] = a[i, q]
        a_ks = row_specials(spread[0], af, True)
        c_row = c[i:i + 1]
        row = np.int64(0)  # spread's and c_row's one row; an int64, not the literal 0, which would compile
        # special_element once more than fixup_specials' calls do
        picked = np.empty(kk, np.int64)
        bounded = -1  # whether the whole chain is bounded from the row's largest C; found where first needed
        saved = read_mxcsr()
        write_mxcsr(np.int32(MXCSR_NEAREST))
        for j in range(n):
            col = s * n + j
            count = 0
            for q in range(ptr[col], ptr[col + 1]):
                if _keeps(cols, i, b_ks[q], chunk, kept):
                    picked[count] = b_ks[q]
                    count += 1
            if count == 0:
                continue
            if bounded < 0:
                top = 0.0
                if use_c:
                    for jj in range(n):
                        top = max(top, magnitude(c[i, jj], cf))
                bounded = 1 if prefix_bounded(top, kk // group, t, limit) else 0
            if bounded:
                flags, _ = element_specials(spread, b[s], c_row, row, j, a_ks, picked[:count], af, bf, cf, use_c,
                                            neg_a ^ neg_b)
                d[i, j] = special_bits(flags, df)
            else:
                d[i, j] = special_element(spread, b[s], b_chain[s], c_row, row, j, a_ks, picked[:count], af, bf, cf, df,
                                          group, frac, e_zero, omb, rnd, use_c, neg_a, neg_b, t, limit)
        write_mxcsr(saved)


def fix_spread_specials(rule, a, b, c, af, bf, cf, df, *, c_emin, d_emin, use_c, neg_a, neg_b, d, cols, chunk,
                        b_chain, b_index, columns):
    """:func:`fixup_spread_specials` under ``rule`` (a FusedDotRule), in place on ``d`` (R, N),
    for B's columns ``columns`` (S, N) that hold an inf or NaN; ``chunk``: ``(places,
    kept)`` of the sparsity's chunks.  The signature of the kernels that
    ``fastmma.kernels._fused`` calls (``c_emin`` and ``d_emin`` are not needed here)."""
    cols = read_only(np.ascontiguousarray(cols))
    a, b, b_chain, c = widened(a), widened(b), widened(b_chain), widened(c)
    bound = prefix_bound(a, b_chain, af, bf, df, rule.group, rounding_code(rule) != ROUND_RZ)
    fixup_spread_specials(a, cols, chunk[0], chunk[1], b, b_chain, b_index, c, d, af, bf, cf, df, rule.group,
                          rule.frac_bits, rule.e_zero, rule.out_man_bits, rounding_code(rule), use_c, int(neg_a),
                          int(neg_b), column_specials(b, bf, columns), bound)
