"""The tensor core's floating-point dot product: aligned, truncated, fused.

Rule (PTX ISA leaves the order and rounding of the sum unspecified; the H100 recordings
decide, and they match the Hopper model published with MMA-Sim, arXiv 2511.10909):

For each output element, the k terms ``a_i * b_i`` of one group and the addend ``c`` are
summed in one fused step:

1. every product is exact; its exponent is ``e_a + e_b`` with each significand normalised
   to [1, 2) (subnormals keep the smallest normal exponent); a zero term (zero product, or
   zero/absent ``c``) counts with the fixed exponent ``e_zero``;
2. ``e_max`` is the largest exponent of the group; each term is truncated (toward zero) to
   a multiple of ``2**(e_max - frac_bits)``;
3. the truncated terms are added exactly, and the sum is rounded once to the accumulator
   format: toward zero to f32 (``out_man_bits`` = 23, or 13 for fp8 inputs), or to nearest
   even to f16 (the f16 mode, C and D both f16); in the f32 mode with an f16 D, toward zero
   to f32 and then to nearest even f16.  Overflow gives an infinity, a NaN is canonical; the
   fused rounding gives +0 for a zero, the f32-to-f16 conversion keeps a non-zero f32's sign
   (all recorded on the H100).

A NaN input, ``inf * 0`` or ``inf - inf`` gives NaN; otherwise an infinite term gives that
infinity.  Longer sums run group after group in increasing k, each group's rounded result
becoming the next group's ``c`` (a k-loop of instructions, or an instruction that the
hardware splits, like wmma tf32 m16n16k8 in two groups of 4).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .decode import FINITE, INF, NAN, ZERO, decode_float

# rounding of a group's sum: toward zero to f32; nearest even to f16; toward zero to f32 and
# then nearest even to f16.  ROUND_RNE_SIGNED is the last step of the third: an IEEE
# conversion, which keeps the sign of a non-zero value rounded to zero.
ROUND_RZ, ROUND_RNE, ROUND_RZ_F16, ROUND_RNE_SIGNED = 0, 1, 2, 3



def rounding_code(rule) -> int:
    """The kernels' code for a FusedDotRule's rounding of each group's sum."""
    if rule.rounding == "rne":
        return ROUND_RNE
    return ROUND_RZ_F16 if rule.output == "f16" else ROUND_RZ


# canonical NaNs of the accumulator formats
_NAN_F32 = 0x7FFFFFFF
_NAN_F16 = 0x7FFF

# what the special terms of a group (inf or NaN factors, and C) make of its sum, as flags
POS_INF_TERM, NEG_INF_TERM, NAN_TERM = 1, 2, 4


@njit(cache=True, inline="always")
def special_term(ca, sa, cb, sb, neg):
    """The flags of the term ``a * b`` (classes ``ca``, ``cb``, signs ``sa``, ``sb``, negated
    where ``neg``): ``NAN_TERM`` for a NaN factor or ``inf * 0``, ``POS_INF_TERM`` or
    ``NEG_INF_TERM`` for an infinite product, 0 for a finite one.  C counts as ``C * 1``."""
    if ca == NAN or cb == NAN:
        return NAN_TERM
    if ca == INF or cb == INF:
        if ca == ZERO or cb == ZERO:
            return NAN_TERM
        return NEG_INF_TERM if (sa ^ sb ^ neg) == 1 else POS_INF_TERM
    return 0


@njit(cache=True, inline="always")
def special_bits(flags, df):
    """D's bits (format ``df``) of a group whose special terms gave ``flags`` (non-zero): the
    canonical NaN for a NaN term or infinities of both signs, else that infinity."""
    if flags & NAN_TERM or flags & (POS_INF_TERM | NEG_INF_TERM) == POS_INF_TERM | NEG_INF_TERM:
        return np.uint64(_NAN_F16 if df[0] == 5 else _NAN_F32)
    sign = np.uint64(1 if flags & NEG_INF_TERM else 0) << np.uint64(df[0] + df[1])
    return sign | np.uint64(((1 << df[0]) - 1) << df[1])


@njit(cache=True, inline="always")
def _bit_length(x):
    n = 0
    while x > 0:
        x >>= 1
        n += 1
    return n


@njit(cache=True, inline="always")
def _shift(x, sh):
    """``x * 2**sh`` truncated toward zero, for ``x >= 0``."""
    if sh >= 0:
        return x << sh
    if sh <= -63:
        return np.int64(0)
    return x >> (-sh)


@njit(cache=True)
def round_to_format(neg, mag, scale_exp, d_exp_bits, d_man_bits, d_bias, out_man_bits, rounding):
    """Bits of ``(-1)**neg * mag * 2**scale_exp`` in the accumulator format.

    ``mag`` is a non-negative exact integer.  The result keeps ``out_man_bits`` fraction
    bits (``<= d_man_bits``), rounded as ``rounding`` says.
    """
    if rounding != ROUND_RZ_F16:
        return _round_bits(neg, mag, scale_exp, d_exp_bits, d_man_bits, d_bias, out_man_bits, rounding)
    # toward zero to f32, then that f32 to nearest even f16
    b32 = _round_bits(neg, mag, scale_exp, 8, 23, 127, out_man_bits, ROUND_RZ)
    cls, s32, e32, m32 = decode_float(b32, 8, 23, 127, 1, 0)
    if cls == INF:
        return (np.uint64(neg) << np.uint64(d_exp_bits + d_man_bits)) | np.uint64(((1 << d_exp_bits) - 1) << d_man_bits)
    return _round_bits(s32, m32, e32 - 23, d_exp_bits, d_man_bits, d_bias, d_man_bits, ROUND_RNE_SIGNED)


@njit(cache=True)
def _round_bits(neg, mag, scale_exp, d_exp_bits, d_man_bits, d_bias, out_man_bits, rounding):
    """One rounding (toward zero or to nearest even) of ``(-1)**neg * mag * 2**scale_exp``."""
    if mag == 0:
        return np.uint64(0)
    nb = _bit_length(mag)
    lead = scale_exp + nb - 1  # exponent of the leading bit
    emin = 1 - d_bias
    # granularity exponent of the kept bits: normal or subnormal range
    q = lead - out_man_bits if lead >= emin else emin - out_man_bits
    sh = q - scale_exp  # drop sh low bits of mag
    if sh <= 0:
        m = mag << (-sh)
    elif sh >= 63:
        m = np.int64(0)
        if rounding != ROUND_RZ and sh == 63 and mag > (np.int64(1) << 62):
            m = np.int64(1)
    else:
        m = mag >> sh
        if rounding != ROUND_RZ:
            rem = mag - (m << sh)
            half = np.int64(1) << (sh - 1)
            if rem > half or (rem == half and (m & 1) == 1):
                m += 1
    sign = np.uint64(neg) << np.uint64(d_exp_bits + d_man_bits)
    if m == 0:  # a non-zero sum rounded to zero: +0, or signed (f16 output of the f32 mode)
        return sign if rounding == ROUND_RNE_SIGNED else np.uint64(0)
    # m counts units of 2**q with up to out_man_bits+1 bits (one more after a carry)
    field = np.int64(m) << (d_man_bits - out_man_bits)
    if lead < emin and field < (np.int64(1) << d_man_bits):
        return sign | np.uint64(field)  # subnormal
    e = q + out_man_bits
    if field >= (np.int64(1) << (d_man_bits + 1)):  # rounding carried into a new binade
        field >>= 1
        e += 1
    if e > d_bias:  # overflow
        return sign | np.uint64(((1 << d_exp_bits) - 1) << d_man_bits)
    biased = e + d_bias
    return sign | (np.uint64(biased) << np.uint64(d_man_bits)) | np.uint64(field & ((np.int64(1) << d_man_bits) - 1))


@njit(cache=True)
def fused_group(a, b, i, j, k0, group, af, bf, c_bits, cf, use_c, neg_a, neg_b,
                frac_bits, e_zero, df, out_man_bits, rounding):
    """One fused step: ``c + sum(a[i, k] * b[k, j] for k in [k0, k0+group))`` -> D bits."""
    flags = 0
    e_max = e_zero
    # pass 1: special terms and the largest exponent
    for k in range(k0, k0 + group):
        ca, sa, ea, ma = decode_float(a[i, k], af[0], af[1], af[2], af[3], af[4])
        cb, sb, eb, mb = decode_float(b[k, j], bf[0], bf[1], bf[2], bf[3], bf[4])
        if ca == FINITE and cb == FINITE:
            if ea + eb > e_max:
                e_max = ea + eb
        else:
            flags |= special_term(ca, sa, cb, sb, neg_a ^ neg_b)
    cc, sc, ec, mc = ZERO, np.int64(0), np.int64(0), np.int64(0)
    if use_c:
        cc, sc, ec, mc = decode_float(c_bits, cf[0], cf[1], cf[2], cf[3], cf[4])
        if cc == FINITE:
            if ec > e_max:
                e_max = ec
        else:
            flags |= special_term(cc, sc, FINITE, 0, 0)
    if flags:
        return special_bits(flags, df)
    # pass 2: truncated terms, summed exactly
    total = np.int64(0)
    pa_pb = af[1] + bf[1]
    for k in range(k0, k0 + group):
        ca, sa, ea, ma = decode_float(a[i, k], af[0], af[1], af[2], af[3], af[4])
        cb, sb, eb, mb = decode_float(b[k, j], bf[0], bf[1], bf[2], bf[3], bf[4])
        if ca == FINITE and cb == FINITE:
            t = _shift(ma * mb, ea + eb - e_max + frac_bits - pa_pb)
            total += -t if (sa ^ sb ^ neg_a ^ neg_b) == 1 else t
    if cc == FINITE:
        t = _shift(mc, ec - e_max + frac_bits - cf[1])
        total += -t if sc == 1 else t
    neg = 1 if total < 0 else 0
    return round_to_format(neg, -total if neg else total, e_max - frac_bits,
                           df[0], df[1], df[2], out_man_bits, rounding)


@njit(cache=True, inline="always")
def fused_chain(a, b, c, i, j, group, af, bf, cf, df, use_c, neg_a, neg_b, frac_bits, e_zero,
                out_man_bits, rounding):
    """D[i, j] bits: C[i, j] (read as ``cf``), then one :func:`fused_group` per ``group``
    k-terms, each reading the accumulator (as ``df``) the one before left."""
    return fused_chain_to(a, b, c, i, j, a.shape[1], group, af, bf, cf, df, use_c, neg_a, neg_b, frac_bits,
                          e_zero, out_man_bits, rounding)


@njit(cache=True, inline="always")
def fused_chain_to(a, b, c, i, j, k_end, group, af, bf, cf, df, use_c, neg_a, neg_b, frac_bits, e_zero,
                   out_man_bits, rounding):
    """:func:`fused_chain` over the groups before ``k_end`` (a multiple of ``group``) alone:
    the accumulator as it enters the group at ``k_end`` (C's bits where ``k_end`` is 0)."""
    acc = np.uint64(c[i, j])
    acc_f = cf
    acc_used = use_c
    for k0 in range(0, k_end, group):
        acc = fused_group(a, b, i, j, k0, group, af, bf, acc, acc_f, acc_used, neg_a, neg_b,
                          frac_bits, e_zero, df, out_man_bits, rounding)
        acc_f = df
        acc_used = True
    return acc


@njit(parallel=True, cache=True)
def fused_dot_mma(a, b, c, out, af, bf, cf, df, group, frac_bits, e_zero, out_man_bits,
                  rounding, use_c, neg_a, neg_b):
    """``out = C + A @ B`` by fused groups of ``group`` terms in increasing k, for each GEMM
    of a stack.

    ``a`` (S, M, K), ``b`` (S, K, N), ``c`` (S, M, N) hold raw bits of the formats described
    by the parameter tuples ``af``, ``bf``, ``cf``, ``df`` (see ``decode.float_params``);
    ``out`` (S, M, N) receives D bits.  K must be a multiple of ``group``.  The threads share
    all S * M * N elements, so a stack of GEMVs of few columns (which the blocked kernels pad
    to whole vectors of columns) keeps both cores busy; one GEMM is a stack of one.
    """
    m = a.shape[1]
    n = b.shape[2]
    for idx in prange(a.shape[0] * m * n):
        s = idx // (m * n)
        i = (idx // n) % m
        j = idx % n
        out[s, i, j] = fused_chain(a[s], b[s], c[s], i, j, group, af, bf, cf, df, use_c, neg_a, neg_b,
                                   frac_bits, e_zero, out_man_bits, rounding)
