"""The row passes: pass 1 (exponents and scales) and pass 2 (the sums) of a group of k-terms,
and the row functions built from them."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..bitcast import f32_bits, f32_from_bits, f64_from_bits
from ..fp_env import HAS_MXCSR, MXCSR_TOWARD_ZERO, read_mxcsr, write_mxcsr
from ..fused_dot import ROUND_RNE, ROUND_RZ, ROUND_RZ_F16
from ..register_blocks import COLUMNS, ROWS, count_columns, fma_block
from ..variants import variant
from ..vector_ops import add_i32, as_element_of, shl_i32, sub_i32
from .decode import _I32
from .rounding import _c_exponent, _finish_row, _finish_row_rne16, _finish_row_rz32, _finish_row_rz_fenv, _sum_and_sign

#: Pass 1's columns are padded to a multiple of this (:func:`_padded`): LLVM unrolls its
#: loop over 64-lane int8 vectors four times.  The other loops' columns, to whole vectors:
#: of FLOAT_LANES (the pass by conversions) or a whole register block, COLUMNS (the pass by
#: fused multiply-adds; the panels and the tile are padded so).
EXPONENT_COLUMNS = 256
FLOAT_LANES = 16


@njit(cache=True, inline="always")
def _normal_bound(P, thr, po, floor):
    """``(possible, bound)``: the group's non-zero results are all normal float32 (then
    ``e_max`` is the larger of the largest product exponent and the accumulator's own
    exponent: :func:`_scale_normal`) if no column's largest product exponent ``P[j]`` is
    unknown (``P < thr``: only zero products) or below ``floor - po``, that is, if no
    ``P[j]`` is below ``bound`` (in ``P``'s type) and ``possible``.  Pass 1 tests each
    vector of ``P`` as it computes it, with a compare and an OR of masks, because reducing
    the smallest ``P[j]`` across the lanes afterwards is a chain of dependent shuffles."""
    bound = max(np.int64(thr), np.int64(floor) - np.int64(po))
    top = np.int64(127) if P.itemsize == 1 else np.int64(32767)
    return bound <= top, as_element_of(min(max(bound, -top - 1), top), P)


@njit(cache=True, inline="always")
def _scale_normal(acc, P, U, S32, nb, frac, sh, po):
    """The scale loop where the test of :func:`_normal_bound` holds, in the biased exponents of
    float32: ``e_max + 127`` is the larger of the largest product exponent and the
    accumulator's exponent field (a zero or a subnormal accumulator, or one below C's
    format's smallest normal exponent, never wins, as ``floor`` ensures).  ``U`` holds the
    bits of the float32 ``2^up``, ``up = frac - e_max``, for :func:`_finish_row_rz_normal`
    (``up`` is in [frac - 127, 126], so it is a normal number), and ``S32 = 2^(frac - e_max
    - sh)``, as :func:`_group_row32` has it, from the same bits less ``sh`` in the exponent
    field: +0 where that field would be 0 or below (the scale underflows).

    The exponents stay in place, in bits 23 to 30 (the accumulator's by one mask): ``2^up``'s
    field is ``254 + frac`` less ``e_max``'s, by one wrapping int32 subtraction of the fields
    in place (the difference fits: it is ``up``'s field).  Every sum is :func:`sub_i32`,
    because numba widens an int32 sum to int64 and the loop would then rebuild a constant
    every step."""
    pb = _I32(-(po + 127))  # P less this is the biased float32 exponent
    ub = _I32(np.uint32((254 + frac) << 23))  # wraps past 2^31 as int32; the differences do not
    shift = _I32(sh << 23)
    for j in range(nb):
        u = sub_i32(ub, _e_max_field(acc[j], P[j], pb))
        U[j] = u
        S32[j] = f32_from_bits(max(sub_i32(u, shift), _I32(0)))  # its exponent field less sh, or +0


@njit(cache=True, inline="always")
def _e_max_field(c, p, pb):
    """``e_max + 127`` in a float32's exponent field (bits 23 to 30) for the accumulator
    ``c`` and the largest stored exponent sum ``p`` (:func:`_scale_normal`)."""
    return max(shl_i32(sub_i32(_I32(p), pb), _I32(23)), _I32(f32_bits(c) & _I32(0x7F800000)))


@njit(cache=True, inline="always")
def _scale_normal_magic(acc, P, U, F, C, nb, frac, sh, po, lc):
    """:func:`_scale_normal` and :func:`_magic_start` in one loop, from ``e_max``'s field:
    ``U`` for the rounding, the magic numbers into ``F`` and the thresholds into ``C`` (no
    ``S32``: the pass by fused multiply-adds has no use for it)."""
    pb = _I32(-(po + 127))
    ub = _I32(np.uint32((254 + frac) << 23))
    for j in range(nb):
        eb = _e_max_field(acc[j], P[j], pb)
        U[j] = sub_i32(ub, eb)
        F[j], C[j] = _magic(eb, frac, sh, lc)


@njit(cache=True, inline="always")
def _magic(eb, frac, sh, lc):
    """``(M, threshold)`` for a group whose ``e_max + 127`` is ``eb``'s field (bits 23 to
    30; the others clear): the magic number ``M = 1.5 * 2^23 * g`` on the grid ``g =
    2^(e_max - frac + sh)`` (where the grid passes every product, at the coarser grid of
    ``lc``'s cap, on which every term still truncates to 0), and the threshold of
    :func:`_count_nonintegers`, ``e_max - frac - wmin`` clamped to ``[0, span]``.  M's
    bits are ``eb``'s field moved by ``23 + sh - frac`` and its top fraction bit, all in
    one add to the field in place."""
    up = 23 + sh - frac
    bits = add_i32(min(eb, _I32((lc[6] - up) << 23)), _I32(np.int64(up << 23) + (1 << 22)))
    t = min(max(sub_i32(_I32(eb >> _I32(23)), _I32(127 + frac + lc[4])), _I32(0)), _I32(lc[5]))
    return f32_from_bits(bits), np.uint8(t)


@njit(cache=True, inline="always")
def _finish_row_rz_normal(acc, U, T, nb, omb, wraps):
    """:func:`_finish_row_rz_fenv` where every non-zero result is a normal float32
    (:func:`_normal_bound`), with ``U`` from :func:`_scale_normal`: the accumulator's
    term is ``trunc(c * 2^up)`` by one multiply (exact, or below 1 where it underflows:
    MXCSR rounds toward zero), and ``2^-up`` is put on the rounded sum by one multiply too,
    exact because the result is normal (and +0 for a zero sum).  The two multiplies replace
    the two ``ldexp`` of :func:`_finish_row_rz_fenv` and their exponents' conversions, the
    bulk of that loop's work."""
    mask = _I32(np.uint32(np.uint32(0xFFFFFFFF) << np.uint32(23 - omb)))
    inverse = _I32(254 << 23)  # the bits of 2^-up are these less u's
    for j in range(nb):
        u = U[j]
        x, neg, mag = _sum_and_sign(T[j], _I32(acc[j] * f32_from_bits(u)), wraps)
        if wraps:
            rb = _I32(_I32(f32_bits(np.float32(mag)) & mask) | _I32(neg & _I32(-2**31)))
        elif omb < 23:
            rb = _I32(f32_bits(np.float32(x)) & mask)
        else:  # nothing to clear (an f32 result): a branch that always goes one way skips the mask
            rb = f32_bits(np.float32(x))
        acc[j] = f32_from_bits(rb) * f32_from_bits(sub_i32(inverse, u))


@njit(cache=True, inline="always")
def _may_wrap(T, nb, frac):
    """Whether some ``x = T[j] + t_c`` (:func:`_group_sum32`; ``|t_c| < 2^(frac + 1)``) may
    pass int32: only where a group's sum comes within ``2^(frac + 1)`` of 2^31, which takes
    nearly all of a group's 16 products near their largest and of one sign.

    The test is a maximum over the row, which with the choice of rounding loop it makes
    costs no more than either alternative: every row by the wrap-safe loop, or this test as
    compares ORed into masks."""
    limit = _I32((np.int64(1) << 31) - (np.int64(1) << (frac + 1)))
    big = _I32(0)
    for j in range(nb):
        t = T[j]
        big = max(big, max(t, _I32(-t)))  # |t|: a group's sum is above -2^31
    return big > limit


@njit(cache=True, inline="always")
def _pass2(G, U, g0, nb, av, i, ko, bpan, S32, T32):
    """Pass 2 of :func:`_group_row32`: ``T32 = sum_k trunc(a_k * b_k * S32)``, the truncated
    terms' exact int32 sums, the k-terms in chunks of ``U``: the first chunk's loop starts
    each sum at 0, the others' add to it."""
    for j in range(nb):
        s = S32[j]
        t = np.int32(0)
        for k in range(U):
            t = np.int32(t + np.int32((av[i, ko + g0 + k] * bpan[g0 + k, j]) * s))
        T32[j] = t
    for h in range(g0 + U, g0 + G, U):
        for j in range(nb):
            s = S32[j]
            t = T32[j]
            for k in range(U):
                t = np.int32(t + np.int32((av[i, ko + h + k] * bpan[h + k, j]) * s))
            T32[j] = t


@njit(cache=True, inline="always")
def _group_row32(acc, G, U, g0, nb, ea, av, i, ko, epan, bpan, E, S32, T32, P, frac, sh, e_floor, rnd, emin,
                 thr, po):
    """Float32 lanes: passes 1 and 2 of one fused group for one row, with ``acc[:nb]`` (the
    accumulator) as C, its exponents read from its values (``emin``: the smallest normal
    exponent of the format it holds, C's for the first group, else D's).  Leaves the sums
    in ``T32`` and ``E`` as :func:`_finish_group` takes them, and returns its ``normal``.

    Pass 1 runs in the exponent lanes of ``P``'s type (64 int8 or 32 int16 to a vector,
    :class:`ExponentLanes`; ``thr`` and ``po = off_a + off_b`` are theirs), pass 2 in
    16-lane float32/int32; the k-terms run in chunks of ``U`` (<= 16) so that LLVM unrolls
    each chunk.  The scales and the exponents (``E``) are int32, as wide as the float32
    lanes they meet, so that no conversion between lane widths sits in the loops.

    Rounding toward zero to f32 on x86, a group whose non-zero results are all normal
    (nearly every group of usual data: :func:`_normal_bound`) takes shorter scale and
    rounding loops (:func:`_scale_normal`, :func:`_finish_row_rz_normal`), which need neither
    ``ldexp`` nor conversions of exponents.  The accumulator's exponent is read from its
    value in the scale loop, not kept in an array beside it."""
    normal = _pass1_scale(acc, G, U, g0, nb, ea, i, ko, epan, E, S32, P, frac, sh, e_floor, rnd, emin, thr, po,
                          S32, T32, _NO_LOW_CODES, False)
    _pass2(G, U, g0, nb, av, i, ko, bpan, S32, T32)
    return normal


@njit(cache=True, inline="always")
def _pass1_scale(acc, G, U, g0, nb, ea, i, ko, epan, E, S32, P, frac, sh, e_floor, rnd, emin, thr, po, F, C, lc,
                 magic):
    """Pass 1 of :func:`_group_row32` and the scales: ``S32`` and ``E`` (the bits of
    ``2^up`` where the result is True, the group's ``e_max`` where False: whether the
    shorter, all-normal path applies).  Where ``magic`` (a literal), the all-normal path
    writes :func:`_rows_fma`'s magic numbers and thresholds into ``F`` and ``C`` instead of
    ``S32`` (:func:`_scale_normal_magic`)."""
    possible, bound = _normal_bound(P, thr, po, max(frac - 126, emin, e_floor))
    below = False
    for h in range(g0, g0 + G, U):  # pass 1: the largest sum of stored exponents
        below = False  # the last chunk's maxima are the group's
        for j in range(_padded(nb, EXPONENT_COLUMNS)):
            p = as_element_of(thr - 1, P) if h == g0 else P[j]
            for k in range(U):
                p = max(p, as_element_of(ea[i, ko + h + k] + epan[h + k, j], P))
            P[j] = p
            below |= p < bound
    normal = rnd == ROUND_RZ and HAS_MXCSR and possible and not below
    if normal and magic:
        _scale_normal_magic(acc, P, E, F, C, nb, frac, sh, po, lc)
    elif normal:  # E holds the bits of 2^up on this path (U of _scale_normal), e_max on the other
        _scale_normal(acc, P, E, S32, nb, frac, sh, po)
    else:
        ef, th, off = _I32(e_floor), _I32(thr), _I32(po)
        top = _I32(127 + frac - sh)
        for j in range(nb):  # e_max, and the float32 scale 2^(frac - e_max - sh), 0 when it underflows
            p = _I32(P[j])
            e = _I32(max(ef, _c_exponent(acc[j], emin)))
            e = _I32(max(e, _I32(p + off))) if p >= th else e
            E[j] = e
            x = sub_i32(top, _I32(e))
            S32[j] = f32_from_bits(_I32(x << _I32(23))) if x > _I32(0) else np.float32(0)
    return normal


@njit(cache=True, inline="always")
def _finish_group(acc, normal, G, nb, E, T32, frac, omb, rnd):
    """The group's sums ``T32`` and the accumulator ``acc`` rounded into ``acc``, as
    :func:`_pass1_scale` left ``E`` (``normal``)."""
    if rnd == ROUND_RZ_F16:  # float64 lanes: T plus C's term cannot wrap there
        _finish_row(acc, E, T32, nb, frac, omb, rnd)
        return
    # the wrap-safe rounding is the slower one, so it is taken only for the rows that need it,
    # of the rules whose terms' bound (G below 2^(frac + 2), C's below 2^(frac + 1)) passes 2^31
    bound = (np.int64(G) << np.int64(frac + 2)) + (np.int64(1) << np.int64(frac + 1))
    wraps = bound > (np.int64(1) << np.int64(31)) and _may_wrap(T32, nb, frac)
    if rnd == ROUND_RNE:
        if wraps:
            _finish_row_rne16(acc, E, T32, nb, frac, True)
        else:
            _finish_row_rne16(acc, E, T32, nb, frac, False)
    elif normal:
        if wraps:
            _finish_row_rz_normal(acc, E, T32, nb, omb, True)
        else:
            _finish_row_rz_normal(acc, E, T32, nb, omb, False)
    elif HAS_MXCSR:  # the caller has set the CPU to round toward zero
        if wraps:
            _finish_row_rz_fenv(acc, E, T32, nb, frac, omb, True)
        else:
            _finish_row_rz_fenv(acc, E, T32, nb, frac, omb, False)
    elif wraps:
        _finish_row_rz32(acc, E, T32, nb, frac, omb, True)
    else:
        _finish_row_rz32(acc, E, T32, nb, frac, omb, False)


@njit(cache=True, inline="always")
def _group_row64(acc, G, U, g0, nb, ea, av, i, ko, epan, bpan, E, S, T, frac, sh, e_floor, omb, rnd, emin):
    """Float64 lanes (any exponent range): one fused group for one row."""
    for h in range(g0, g0 + G, U):  # pass 1: e_max
        for j in range(nb):
            e = max(np.int64(e_floor), np.int64(_c_exponent(acc[j], emin))) if h == g0 else np.int64(E[j])
            for k in range(U):
                e = max(e, np.int64(ea[i, ko + h + k]) + np.int64(epan[h + k, j]))
            E[j] = e
    for j in range(nb):  # the scale 2^(frac - e_max)
        S[j] = f64_from_bits((1023 + frac - np.int64(E[j])) << 52)
    for h in range(g0, g0 + G, U):  # pass 2
        for j in range(nb):
            s = S[j]
            t = np.int64(0) if h == g0 else T[j]
            for k in range(U):
                t += np.int64(av[i, ko + h + k] * (bpan[h + k, j] * s))
            T[j] = t
    _finish_row(acc, E, T, nb, frac, omb, rnd)


# ---------------------------------------------------------------- the blocked GEMM


@njit(cache=True, inline="always")
def _rows32(tile, mb, g0, nb, a_val, a_exp, epan, bpan, work, frac, sh, e_zero, omb, rnd, emin, thr, po, G, U):
    """One group for ``mb`` rows of a tile, pass 2 by truncating conversions in float32
    lanes, over the ``nb`` columns :func:`_padded` to whole vectors.

    numba inlines a function by copying its IR into the caller, and the caller's again
    into its own caller, so the rounding loops (:func:`_finish_group`) are inlined here
    rather than one level down in :func:`_group_row32`, and each lane width has a rows
    function of its own: both shorten the first GEMM's compile."""
    E, S, T, P = work[0][0], work[1][0], work[2][0], work[3]
    nbp = _padded(nb, FLOAT_LANES)
    for r in range(mb):
        normal = _group_row32(tile[r], G, U, g0, nbp, a_exp, a_val, r, -g0, epan, bpan, E, S, T, P, frac, sh,
                              e_zero, rnd, emin, thr, po)
        _finish_group(tile[r], normal, G, nbp, E, T, frac, omb, rnd)


@njit(cache=True, inline="always")
def _rows64(tile, mb, g0, nb, a_val, a_exp, epan, bpan, work, frac, sh, e_zero, omb, rnd, emin, G, U):
    """:func:`_rows32` in float64 lanes."""
    E, S, T = work[0][0], work[1][0], work[2][0]
    nbp = _padded(nb, FLOAT_LANES)
    for r in range(mb):
        _group_row64(tile[r], G, U, g0, nbp, a_exp, a_val, r, -g0, epan, bpan, E, S, T, frac,
                     sh, e_zero, omb, rnd, emin)


@njit(cache=True, inline="always")
def _padded(n, step):
    """``n`` rounded up to a multiple of ``step``.  The kernel's vector loops run over whole
    vectors of columns (pass 1 over whole unrolled bodies, :data:`EXPONENT_COLUMNS`), and
    :func:`_rows_fma` over whole blocks of rows, so that no loop falls into LLVM's narrow or
    scalar remainder; each loop is padded only to its own step, because padding further
    computes columns that nobody reads.  The padding holds copies of the last real column
    (or row), so its lanes compute what a real one does and never change a group's tests."""
    return (n + step - 1) // step * step


@njit(cache=True, inline="always")
def _pad_run(run, n, n_pad):
    """``run[n:n_pad]`` <- copies of ``run[n - 1]`` (:func:`_padded`)."""
    for j in range(n, n_pad):
        run[j] = run[n - 1]


# ---------------------------------------------------------------- pass 2 by fused multiply-adds


@njit(cache=True, inline="always")
def _magic_start(E, F, C, nb, frac, sh, lc):
    """:func:`_magic` for each column of the general path, whose ``E`` holds ``e_max``."""
    for j in range(nb):
        F[j], C[j] = _magic(shl_i32(add_i32(E[j], _I32(127)), _I32(23)), frac, sh, lc)


@njit(cache=True, inline="always")
def _count_nonintegers(la, lg, C, r0, nb, G):
    """``C[q, j]`` <- the number of the group's terms of row ``r0 + q`` and column ``j`` that
    are negative and not whole on the grid: ``C`` holds the thresholds of
    :func:`_magic`, below which ``la[r0 + q, k] + lg[k, j]`` (the low codes,
    :class:`LowCodes`; A's as uint32, the code in each byte) falls exactly for such terms.
    By :func:`.register_blocks.count_columns` (``nb`` is a multiple of its half block)."""
    count_columns(la, lg, C, r0, nb, G)


@njit(cache=True, inline="always")
def _floor_sums(F, C, T32, nb):
    """``T32`` <- the group's sums of truncated terms: ``(F - M) / g``, the sum of the terms
    rounded down, plus the count of negative terms that rounding down moved away from zero.
    ``F`` stays in M's binade, whose last bit is ``g``, so ``(F - M) / g`` is F's fraction
    field less M's (``2^22``)."""
    for j in range(nb):
        T32[j] = add_i32(sub_i32(_I32(f32_bits(F[j]) & _I32(0x7FFFFF)), _I32(1 << 22)), _I32(C[j]))


@njit(cache=True, inline="always")
def _rows_fma(tile, mb, g0, nb, a_val, a_exp, a_low, epan, bpan, lpan, work, frac, sh, e_zero, omb, rnd, emin, thr,
              po, lc, G, U):
    """One group for ``mb`` rows of a tile, pass 2 by fused multiply-adds: the same sums as
    :func:`_pass2`, in one vector operation per 16 products instead of four.

    Each column's terms are added, by fused multiply-adds rounding toward zero (the
    caller's MXCSR), onto the magic number ``M = 1.5 * 2^23 * g`` (:func:`_magic`),
    whose last bit is the grid ``g``: the sum stays in ``[2^23 g, 2^24 g)`` (a group's terms
    are below ``2^(frac + 2)`` grid units, and ``G * 2^(frac + 2) <= 2^22``), so each
    addition rounds one exact product down onto the grid.  Rounding down is the rule's
    truncation for a positive term; a negative term that is not whole lands one unit
    further from zero, and :func:`_count_nonintegers` counts those.  The chains run in
    blocks of :data:`.register_blocks.ROWS` rows and :data:`.register_blocks.COLUMNS` columns whose sums
    stay in registers (:func:`.register_blocks.fma_block`).  x86 only (the driver checks): the
    sums round toward zero by MXCSR, which the caller has set so where the results round
    toward zero to f32, and which is set here around the sums for the other roundings."""
    E4, S4, T4, P, F4, C4, normal4 = work
    bg = bpan[g0:g0 + G]
    lg = lpan[g0:g0 + G]
    nbp = _padded(nb, COLUMNS)
    for r0 in range(0, mb, ROWS):  # rows past mb, to a multiple of ROWS, are padding (_padded)
        for q in range(ROWS):
            normal4[q] = _pass1_scale(tile[r0 + q], G, U, g0, nbp, a_exp, r0 + q, -g0, epan, E4[q], S4[q], P, frac,
                                      sh, e_zero, rnd, emin, thr, po, F4[q], C4[q], lc, True)
            if not normal4[q]:
                _magic_start(E4[q], F4[q], C4[q], nbp, frac, sh, lc)
        saved = read_mxcsr()
        if rnd != ROUND_RZ:  # the caller rounds to nearest for the f16 results: not in these sums
            write_mxcsr(_I32(MXCSR_TOWARD_ZERO))
        for j0 in range(0, nbp, COLUMNS):
            fma_block(a_val, bg, F4, r0, j0, G)
        write_mxcsr(saved)
        _count_nonintegers(a_low, lg, C4, r0, nbp, G)
        for q in range(ROWS):
            _floor_sums(F4[q], C4[q], T4[q], nbp)
            _finish_group(tile[r0 + q], normal4[q], G, nbp, E4[q], T4[q], frac, omb, rnd)


#: The group sizes of the blocked kernels, and those that also have a pass 2 by fused multiply-adds.
GROUPS = (4, 8, 16, 32, 64)
FMA_GROUPS = (32, 64)


def _rows_template(G, wide, fma):
    """A row function's template: G and the chunk U (<= 16) must be literals in the code
    of a compiled function for LLVM to unroll the k-terms (numba's parallel outlining would
    turn arguments into run-time values)."""
    U = min(G, 16)
    if fma:
        def rows(tile, mb, g0, nb, a_val, a_exp, a_low, epan, bpan, lpan, work, frac, sh, e_zero, omb, rnd, emin,
                 thr, po, lc):
            _rows_fma(tile, mb, g0, nb, a_val, a_exp, a_low, epan, bpan, lpan, work, frac, sh, e_zero, omb, rnd, emin,
                      thr, po, lc, G, U)
    elif wide:
        def rows(tile, mb, g0, nb, a_val, a_exp, a_low, epan, bpan, lpan, work, frac, sh, e_zero, omb, rnd, emin,
                 thr, po, lc):
            _rows64(tile, mb, g0, nb, a_val, a_exp, epan, bpan, work, frac, sh, e_zero, omb, rnd, emin, G, U)
    else:
        def rows(tile, mb, g0, nb, a_val, a_exp, a_low, epan, bpan, lpan, work, frac, sh, e_zero, omb, rnd, emin,
                 thr, po, lc):
            _rows32(tile, mb, g0, nb, a_val, a_exp, epan, bpan, work, frac, sh, e_zero, omb, rnd, emin, thr, po, G, U)
    return rows


def _variant_name(prefix, G, wide, fma):
    return f"{prefix}{G}_{'fma' if fma else 64 if wide else 32}"


#: The row functions, by (group size, float64 lanes, pass 2 by fused multiply-adds); each
#: is compiled without numba's reference counting (_nrt=False), because it only reads and
#: writes arrays that its caller owns, and where numba's pruning of reference counts fails,
#: an atomic increment and decrement per array per row are a large share of the kernel's time.
_VARIANTS = tuple((G, wide, False) for G in GROUPS for wide in (False, True)) + tuple(
    (G, False, True) for G in FMA_GROUPS)
ROW_FUNCTIONS = {key: variant(_rows_template(*key), _variant_name("_rows_g", *key), cache=True, _nrt=False)
                 for key in _VARIANTS}


@njit(cache=True, inline="always")
def _aligned_empty(n, dtype):
    """A new 1-D array of ``n`` elements starting on a 64-byte boundary (a cache line): the
    vector loops then never load or store across two lines."""
    buf = np.empty(n + 64, dtype)
    off = ((64 - (buf.ctypes.data & 63)) & 63) // buf.itemsize
    return buf[off:off + n]


_NO_LOW_CODES = (0, 0, 0, 0, 0, 0, 0)
