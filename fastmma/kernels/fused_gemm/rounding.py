"""Rounding a row's exact sums to the accumulator, and the element-wise conversions of D's bits."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..bitcast import f32_bits, f32_from_bits, f64_bits, f64_from_bits
from ..fp_env import MXCSR_NEAREST, read_mxcsr, write_mxcsr
from ..fused_dot import ROUND_RNE, ROUND_RZ, ROUND_RZ_F16, rounding_code
from ..vector_ops import add_i32, clz_u32, f32_from_f16_bits, ldexp_f32, lshr_i32, shl_i32, sub_i32
from .decode import NEG_EXP, _I32

_F16_OVERFLOW = 65536.0


@njit(cache=True, inline="always")
def _c_exponent(c, c_emin):
    """Exponent of the accumulator value ``c`` (float32) as the rule sees it, in int32
    arithmetic (16 lanes where a loop vectorises)."""
    cb = f32_bits(c)
    biased = max(_I32(_I32(cb >> _I32(23)) & _I32(0xFF)), _I32(c_emin + 127))
    return sub_i32(biased, _I32(127)) if _I32(cb & _I32(0x7FFFFFFF)) != 0 else _I32(NEG_EXP)


@njit(cache=True, inline="always")
def _round_rne_f16(x, signed):
    """``x`` (float64) rounded to nearest even f16 (subnormals at 2^-14, overflow to inf); a
    non-zero ``x`` rounded to zero keeps its sign only if ``signed``."""
    e = ((f64_bits(x) >> 52) & 0x7FF) - 1023
    q = min(max(e, -14), 15) - 10
    magic = f64_from_bits(((q + 1075) << 52) | (np.int64(1) << 51))
    y = (x + magic) - magic
    if abs(y) >= _F16_OVERFLOW:
        y = np.inf if y > 0 else -np.inf
    elif y == 0.0:
        y = -0.0 if (signed and x < 0.0) else 0.0
    return np.float32(y)


@njit(cache=True, inline="always")
def _round_rz_f32(x, omb):
    """``x`` (float64) rounded toward zero to ``omb`` fraction bits of f32 (subnormals at
    2^-126; overflow past 2^128 gives inf; a zero is +0, as the hardware gives it)."""
    xb = f64_bits(x)
    drop = min((52 - omb) + max(0, 897 - ((xb >> 52) & 0x7FF)), 63)  # 897: exponent -126
    return np.float32(f64_from_bits(xb & (np.int64(-1) << drop))) + np.float32(0)


@njit(cache=True, inline="always")
def _exact_sum(c, t, e, frac):
    """The group's exact sum, ``(t + trunc(c * 2^(frac - e))) * 2^(e - frac)``, in float64
    (exact: at most 33 significant bits).  An infinite accumulator ``c`` stays infinite."""
    unit = f64_from_bits((1023 + e - frac) << 52)
    tc = np.trunc(np.float64(c) * f64_from_bits((1023 + frac - e) << 52))
    return np.float64(t) * unit + tc * unit


@njit(cache=True, inline="always")
def _finish_row(acc, E, T, nb, frac, omb, rnd):
    """acc = the group's exact sum rounded to the accumulator.  One loop per rounding mode,
    so that each vectorises."""
    if rnd == ROUND_RNE:
        for j in range(nb):
            r = _round_rne_f16(_exact_sum(acc[j], T[j], np.int64(E[j]), frac), False)
            acc[j] = r
    elif rnd == ROUND_RZ_F16:
        for j in range(nb):
            r = _round_rne_f16(np.float64(_round_rz_f32(_exact_sum(acc[j], T[j], np.int64(E[j]), frac), omb)), True)
            acc[j] = r
    else:
        for j in range(nb):
            r = _round_rz_f32(_exact_sum(acc[j], T[j], np.int64(E[j]), frac), omb)
            acc[j] = r


@njit(cache=True, inline="always")
def _finish_row_rz32(acc, E, T, nb, frac, omb, wraps):
    """:func:`_finish_row` for the rounding toward zero to f32, in 16 int32/float32 lanes,
    for finite results (:func:`fused_gemm` takes this path only where no sum can overflow).
    The portable form, for CPUs without :data:`.fp_env.HAS_MXCSR`.

    x (:func:`_group_sum32`) is an exact integer below 2^32 in magnitude.  Its low bits are
    cleared down to ``omb + 1`` significant bits and to the f32 grid ``2^(-126 - omb)``,
    and ``ldexp`` scales it by ``2^(E - frac)`` exactly.  Every step is int32 or float32
    (:func:`sub_i32` where numba would widen), so that one vector holds 16 lanes.
    """
    fr = _I32(frac)
    keep = _I32(31 - omb)  # leading zeros of an integer with omb + 1 significant bits
    below_grid = _I32(omb + 126)  # the f32 grid's exponent is (frac - e) - below_grid
    for j in range(nb):
        up = sub_i32(fr, _I32(E[j]))  # x's unit is 2^-up
        x, neg, mag = _group_sum32(acc[j], T[j], up, wraps)
        drop = min(max(_I32(0), _I32(keep - clz_u32(mag)), sub_i32(up, below_grid)), _I32(31))
        mag = np.uint32(mag & np.uint32(np.uint32(0xFFFFFFFF) << np.uint32(drop)))
        r = ldexp_f32(np.float32(mag), sub_i32(_I32(0), up))
        r = (-r if neg != 0 else r) + np.float32(0)  # an exact zero is +0
        acc[j] = r


@njit(cache=True, inline="always")
def _finish_row_rz_fenv(acc, E, T, nb, frac, omb, wraps):
    """:func:`_finish_row_rz32` by the CPU's rounding toward zero (the caller has set
    MXCSR, :mod:`.fp_env`): converting x to float32 truncates it to 24 significant bits, and
    ``ldexp`` by ``2^(E - frac)`` truncates that onto the f32 grid 2^-149.  Truncations onto
    nested grids compose, so clearing the ``23 - omb`` low bits of the result's encoding
    then leaves ``omb + 1`` significant bits on the grid ``2^(-126 - omb)``, the same number
    as the count and mask give, in fewer instructions.  An x that truncates to zero gives +0.
    """
    fr = _I32(frac)
    mask = _I32(np.uint32(np.uint32(0xFFFFFFFF) << np.uint32(23 - omb)))
    for j in range(nb):
        up = sub_i32(fr, _I32(E[j]))
        x, neg, mag = _group_sum32(acc[j], T[j], up, wraps)
        if wraps:
            r = np.float32(mag)
            r = -r if neg != 0 else r
        else:
            r = np.float32(x)
        r = ldexp_f32(r, sub_i32(_I32(0), up))
        r = f32_from_bits(_I32(f32_bits(r) & mask)) + np.float32(0)
        acc[j] = r


@njit(cache=True, inline="always")
def _finish_row_rne16(acc, E, T, nb, frac, wraps):
    """:func:`_finish_row`'s rounding to nearest even f16 (the f16 mode), in 16 int32/float32
    lanes, for the float32 path (CPU rounding to nearest).

    x (:func:`_group_sum32`, unit ``2^-up``) is an exact integer below 2^32 in magnitude.
    An f16 result in ``[2^k, 2^(k+1))`` has its last bit at ``2^(max(k, -14) - 10)``, which is
    ``s = max(lead, up - 14) - 10`` bits above x's unit (``lead``: x's leading bit): x's
    magnitude is rounded to a multiple of ``2^s`` by adding half of it, less one unless the
    kept part is odd (ties to even), and shifting.  The kept integer has at most 11
    significant bits (12 after a carry, a power of two), so its float32 and ``ldexp`` by
    ``2^(s - up)`` are exact; 2^16 and above is past f16's largest value and gives inf, and
    a zero gives +0.  An accumulator that overflowed to inf in an earlier group stays as it
    is (finite products cannot cancel it; its int32 term would be garbage).  It runs in
    int32 lanes because in float64 lanes (:func:`_round_rne_f16`) this rounding is a large
    share of an f16-accumulator GEMM's time."""
    fr = _I32(frac)
    for j in range(nb):
        up = sub_i32(fr, _I32(E[j]))
        x, neg, mag = _group_sum32(acc[j], T[j], up, wraps)
        lead = sub_i32(_I32(31), clz_u32(mag))
        s = max(sub_i32(max(lead, sub_i32(up, _I32(14))), _I32(10)), _I32(0))
        m32 = _I32(mag)  # the magnitude's bits: the adds and logical shifts below are uint32's
        odd = _I32(lshr_i32(m32, s) & _I32(1))
        bias = add_i32(sub_i32(lshr_i32(shl_i32(_I32(1), s), _I32(1)), _I32(1)), odd) if s > _I32(0) else _I32(0)
        q = lshr_i32(add_i32(m32, bias), s)
        r = ldexp_f32(np.float32(q), sub_i32(s, up))
        r = np.float32(np.inf) if r >= np.float32(_F16_OVERFLOW) else r
        r = (-r if neg != 0 else r) + np.float32(0)  # a zero is +0
        acc[j] = acc[j] if abs(acc[j]) == np.float32(np.inf) else r


@njit(cache=True, inline="always")
def _group_sum32(c, t, up, wraps):
    """x = t + trunc(c * 2^up) in int32 (t: a group's sum, c: the accumulator, 2^-up: the
    unit of x), with its sign (0 or -1) and magnitude (uint32): :func:`_sum_and_sign`."""
    return _sum_and_sign(t, _I32(ldexp_f32(c, up)), wraps)


@njit(cache=True, inline="always")
def _sum_and_sign(t, tc, wraps):
    """x = t + tc in int32, with its sign (0 or -1) and magnitude (uint32).  Where
    ``wraps``, x may have wrapped past 2^31, and the sign comes from the addends, which then
    agree; otherwise it is x's own."""
    x = _I32(t + tc)
    if wraps:
        neg = _I32(_I32((t & tc) | ((t ^ tc) & x)) >> _I32(31))
    else:
        neg = _I32(x >> _I32(31))
    return x, neg, np.uint32(_I32(x ^ neg) - neg)


def _d_bits(out, rule):
    """D's bits from the accumulator: float32's own, or f16's (the f16 mode, whose sums the
    kernels rounded to f16 values, so the conversion is exact; by :func:`_f16_bits_of` on
    all threads, where numpy's ``astype`` converts on one core).  The blocked kernels write
    an f16 D's bits themselves (:func:`_write_tile`); :mod:`.small_gemm` converts by this."""
    if rounding_code(rule) == ROUND_RZ:
        return out.view(np.uint32)
    bits = np.empty(out.shape, np.uint16)
    _f16_bits_of(np.ascontiguousarray(out).reshape(-1), bits.reshape(-1))
    return bits


@njit(cache=True, inline="always")
def f16_bits_of_f32(s):
    """f16 bits of the float32 ``s`` rounded to nearest even (overflow to infinity, a NaN the
    GPU's canonical 0x7FFF), in steps that vectorize: a normal half's significand rounded from
    23 bits to 10 on the bits (the exponent rebiased by 127 - 15, a carry moving into it), a
    subnormal half's value scaled by 2^24 (exactly) and rounded to an integer by the caller's
    round-to-nearest MXCSR."""
    b = f32_bits(s)
    a = b & np.int32(0x7FFFFFFF)
    r = a - np.int32(0x38000000)
    normal = (r + np.int32(0xFFF) + ((r >> 13) & np.int32(1))) >> 13
    tiny = np.int32(np.rint(abs(s) * np.float32(2.0 ** 24)))
    h = normal if a >= np.int32(0x38800000) else tiny
    h = np.int32(0x7C00) if a >= np.int32(0x477FF000) else h
    h = h | ((b >> 16) & np.int32(0x8000))
    return np.uint16(0x7FFF) if a > np.int32(0x7F800000) else np.uint16(h)


@njit(cache=True, inline="always")
def plus_nearest(s, x):
    """``s + x`` for float32 ``s`` and ``x``, one IEEE addition rounded to nearest even (the
    caller sets MXCSR), a NaN as the canonical 0x7FFFFFFF: the GPU's ``FADD``, which adds C
    to an fp8 instruction's sum (:class:`~fastmma.isa.numerics.ConvertedF16Rule`) in f32."""
    v = s + x
    return v if v == v else f32_from_bits(_I32(0x7FFFFFFF))


@njit(cache=True, inline="always")
def value_of_bits(x, f16):
    """The float32 value of D's bits ``x``: an f16's where ``f16``, else an f32's (for
    either storage type)."""
    return f32_from_f16_bits(np.uint16(x)) if f16 else f32_from_bits(_I32(x))


@njit(cache=True, inline="always")
def bits_sum(p, c, f16):
    """D's bits ``p`` plus D's bits ``c`` (f16's where ``f16``, else f32's), as D's bits: one
    IEEE addition rounded to nearest even (the caller sets MXCSR), a NaN canonical.  An f16
    sum is added in float32 and rounded to f16 once more; the two roundings are one
    (24 >= 2 * 11 + 2: double rounding is innocuous).  The GPU's ``FADD`` / ``HADD2``, as
    :func:`_write_tile` adds to a float32 sum."""
    if f16:
        return np.uint32(f16_bits_of_f32(value_of_bits(p, True) + value_of_bits(c, True)))
    return np.uint32(f32_bits(plus_nearest(value_of_bits(p, False), value_of_bits(c, False))))


ELEMENT_CHUNK = 1 << 14  # elements a thread takes at a time in the element-wise kernels


@njit(cache=True, parallel=True)
def _f16_bits_of(x, out):
    """``out`` = the f16 bits of float32 ``x`` (1-D), rounded to nearest even."""
    for ch in prange((x.size + ELEMENT_CHUNK - 1) // ELEMENT_CHUNK):
        saved = read_mxcsr()
        write_mxcsr(np.int32(MXCSR_NEAREST))
        for i in range(ch * ELEMENT_CHUNK, min(x.size, (ch + 1) * ELEMENT_CHUNK)):
            out[i] = f16_bits_of_f32(x[i])
        write_mxcsr(saved)
