"""Decoding the operands' bits into the kernels' lanes: values, exponents and low codes, A packed block by block."""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import get_num_threads, njit, prange

from ..bitcast import f32_bits, f32_from_bits, f64_from_bits
from ..fp_env import MXCSR_NEAREST, read_mxcsr, write_mxcsr
from ..register_blocks import ROWS
from ..vector_ops import (F16_CONVERSIONS, add_i32, as_element_of, clz_u32, copy_run, f32_from_f16_bits, ldexp_f32,
                          lshr_i32, shl_i32, sub_i32)

NEG_EXP = -16000  # exponent given to zeros: never the maximum, and twice it fits an int16
ZERO_EXP8 = -64  # the same in int8 lanes: twice it is -128, which still fits


@njit(cache=True, inline="always")
def _fields(x, p):
    """``(exponent field, mantissa field, special)`` of one element; ``p`` is
    ``decode.float_params``: exp_bits, man_bits, bias, ieee, low."""
    ebits, mbits, ieee, low = p[0], p[1], p[3], p[4]
    v = np.int64(x) >> low
    emask = (np.int64(1) << ebits) - 1
    mmask = (np.int64(1) << mbits) - 1
    man = v & mmask
    ex = (v >> mbits) & emask
    return ex, man, (ex == emask) & ((man == mmask) | (ieee != 0))


@njit(cache=True, inline="always")
def _field_exponent(ex, man, special, bias):
    """The exponent of an element from its fields: subnormals at the smallest normal
    exponent, zeros and specials at ``NEG_EXP``."""
    dead = special | ((ex == 0) & (man == 0))
    return np.int64(NEG_EXP) if dead else max(ex, 1) - bias


@njit(cache=True, inline="always")
def _decode_value(x, p, neg):
    """``(value as float64, exponent, special)`` of one element, without branches (so that
    loops over whole rows vectorise); zeros and specials get the value 0 and exponent
    ``NEG_EXP``."""
    ex, man, special = _fields(x, p)
    e = _field_exponent(ex, man, special, p[2])
    mbits = p[1]
    sig = man + (np.int64(ex != 0) << mbits)
    val = np.float64(sig) * f64_from_bits((max(ex, 1) - p[2] - mbits + 1023) << 52)
    val = -val if ((np.int64(x) >> (p[4] + mbits + p[0])) & 1) ^ neg else val
    return (0.0 if e == NEG_EXP else val), e, special


_I32 = np.int32


@njit(cache=True, inline="always")
def f32_decoder(p, width, k, neg):
    """The constants of :func:`_decode_f32` for elements of format ``p`` held in ``width``-bit
    integers, their values scaled by ``2^k`` and negated if ``neg``: every field's mask
    placed for an element moved to the top of 32 bits, and the shifts from there."""
    ebits, mbits, bias, ieee, low = p[0], p[1], p[2], p[3], p[4]
    up = 32 - width
    exp = ((np.int64(1) << ebits) - 1) << (low + mbits + up)
    man = ((np.int64(1) << mbits) - 1) << (low + up)
    return (_I32(up), _I32(exp | man), _I32(exp), _I32(exp | (0 if ieee else man)), _I32(man), _I32(low + up),
            _I32(1 << mbits), _I32(31 - ebits), _I32(bias), _I32(k - mbits), _I32(np.int64(neg) << 31))


@njit(cache=True, inline="always")
def _decode_f32(x, q):
    """``(value as float32, exponent, dead, special)`` of one element, as
    :func:`_decode_value` gives them, in 16 int32/float32 lanes, for formats whose values a
    float32 holds.  The element is moved to the top of 32 bits (``q = f32_decoder(...)``),
    where its exponent field ends at bit 30, like a float32's; its value is its significand
    (the fraction field, with the leading one unless it is a subnormal), an exact float32
    integer, times ``2^(e - man_bits + k)`` by ``ldexp``.  Zeros and specials (``dead``)
    get the value +0 and the exponent ``NEG_EXP``; ``special``: inf or NaN.

    The significand is converted as an integer so that no step meets a float32 subnormal
    where the element is not one: reading the fields in place as a float32's and scaling
    by ``2^(127 - bias)`` would make every fp8 (and f16) subnormal a float32 subnormal, and
    scaling such a value costs an x86 core a microcode assist."""
    up, mag_mask, exp_mask, key, man_mask, man_shift, implicit, exp_shift, bias, k, neg = q
    x32 = shl_i32(_I32(x), up)
    special = _I32(x32 & key) == key
    dead = special | (_I32(x32 & mag_mask) == _I32(0))
    field = lshr_i32(_I32(x32 & exp_mask), exp_shift)
    e = sub_i32(max(field, _I32(1)), bias)
    sig = _I32(lshr_i32(_I32(x32 & man_mask), man_shift) | (implicit if field != _I32(0) else _I32(0)))
    sign = _I32(_I32(x32 & _I32(-2**31)) ^ neg)
    val = ldexp_f32(f32_from_bits(_I32(f32_bits(np.float32(sig)) | sign)), add_i32(e, k))
    return (np.float32(0) if dead else val), (_I32(NEG_EXP) if dead else e), dead, special


@njit(cache=True, inline="always")
def _low_code(v, dead, scale, lo, flip, zero):
    """The low code (:class:`LowCodes`) of an element that :func:`_decode_f32` gave as ``v``
    (its value times ``2^scale``) and ``dead``: the exponent of the last set bit of its
    significand less ``lo``, plus 128 where its sign differs from ``flip`` (1 for B, 0 for
    A); ``zero`` for a zero or a special.  ``v``'s 24-bit significand ``sig`` (no leading
    bit where ``v`` is a float32 subnormal) has its last set bit at ``31 - clz(sig &
    -sig)``, above ``v``'s exponent less 23."""
    bits = f32_bits(v)
    field = _I32(lshr_i32(bits, _I32(23)) & _I32(255))
    sig = _I32(_I32(bits & _I32(0x7FFFFF)) | (_I32(1 << 23) if field != _I32(0) else _I32(0)))
    last = sub_i32(max(field, _I32(1)), clz_u32(np.uint32(sig & sub_i32(_I32(0), sig))))  # less 127 - 8 + scale
    negative = lshr_i32(bits, _I32(31))
    code = add_i32(sub_i32(last, _I32(119 + scale + lo)), shl_i32(_I32(negative ^ _I32(flip)), _I32(7)))
    return np.uint8(zero if dead else _I32(code & _I32(255)))


@njit(cache=True, inline="always")
def _low_run(src, lrow, n, q, scale, lo, flip, zero):
    """:func:`_low_code` of ``src[:n]`` (decoded by ``q``, scaled by ``2^scale``) into
    ``lrow[:n]``: uint8, or uint32 with the code in each of its bytes."""
    for k in range(n):
        v, e, dead, special = _decode_f32(src[k], q)
        code = _low_code(v, dead, scale, lo, flip, zero)
        if lrow.itemsize == 4:  # A's, in every byte
            lrow[k] = np.uint32(np.uint32(code) * np.uint32(0x01010101))
        else:
            lrow[k] = code


@njit(cache=True, inline="always")
def _low_run_values(vrow, lrow, n, lo, zero):
    """:func:`_low_run` for B (unscaled, ``flip`` 1) from its decoded values ``vrow[:n]``
    rather than its bits: a value is +0 exactly where the element is a zero or special.
    Float32 values only (the pass by fused multiply-adds runs in float32 lanes; a float64
    ``vrow`` only types)."""
    for k in range(n):
        v = np.float32(vrow[k])
        lrow[k] = _low_code(v, v == np.float32(0), 0, lo, 1, zero)


@njit(cache=True, inline="always")
def _decode_run(src, vrow, erow, n, p, q, neg, zero, off):
    """Elements ``src[:n]`` into their values ``vrow[:n]`` and their exponents ``erow[:n]``
    (less ``off``; ``zero`` for zeros and specials): :func:`_decode_f32` (``q``) into a
    float32 ``vrow``, :func:`_decode_value` (``p``, ``neg``) into a float64 one.  Returns
    whether any of them is an inf or NaN.  A's decoding and B's where :func:`b_decoder`
    finds no faster way (B's also in float64 lanes)."""
    any_special = _I32(0)
    if vrow.itemsize == 4:
        for k in range(n):
            v, e, dead, special = _decode_f32(src[k], q)
            vrow[k] = v
            erow[k] = as_element_of(zero, erow) if dead else as_element_of(sub_i32(e, _I32(off)), erow)
            any_special = max(any_special, _I32(special))
    else:
        for k in range(n):
            v, e, special = _decode_value(src[k], p, neg)
            vrow[k] = v
            erow[k] = e - off if e != NEG_EXP else zero
            any_special = max(any_special, _I32(special))
    return any_special != 0


# How B's panel decoding turns its elements into float32 values (:func:`b_decoder`).
_AS_F16, _VIA_F16, _VIA_F32, _GENERAL = 0, 1, 2, 3


class BDecoder(NamedTuple):
    """The constants of :func:`_decode_b_run`, as :func:`b_decoder` works them out; the
    magnitude bits ``m`` of an element are its bits less the sign, in place."""

    kind: int  # _AS_F16, _VIA_F16, _VIA_F32 or _GENERAL
    mag: np.int32  # the mask of the magnitude bits
    key: np.int32  # magnitudes at or above it are infinities or NaNs
    fshift: np.int32  # where the exponent field starts
    bias_off: np.int32  # bias + off: the field less it is the exponent as stored
    up: np.int32  # how far the magnitude moves up into the half's or float32's fields
    keep: np.int32  # the bits of a float32 that a _VIA_F32 element fills
    flip: np.int32  # the sign bit of the half or float32 where B is negated, else 0
    sbit: np.int32  # the element's sign bit
    sign_up: np.int32  # how far it moves up to a half's sign bit (_VIA_F16)
    scale: np.float32  # 2^(15 - bias) for _VIA_F16, else 1
    hi_mag: np.int32  # a magnitude at or above it is flagged
    lo_mag: np.int32  # a non-zero magnitude below it is flagged
    window: bool  # whether lo_mag and hi_mag check a window


@njit(cache=True, inline="always")
def b_decoder(p, width, neg, off, lo, hi):
    """The constants of :func:`_decode_b_run` for B's elements of format ``p`` held in
    ``width``-bit integers, negated if ``neg``, their exponents less ``off``, with the
    window ``[lo, hi]`` of :func:`b_window` (none where ``lo > hi``).

    Every float format that B can hold is an IEEE half or float32 with a narrower field
    (:func:`_decode_b_run`'s kinds): f16 as it is (``_AS_F16``); e4m3 and e5m2 with their
    fields moved into a half's, whose value times ``2^(15 - bias)`` is theirs
    (``_VIA_F16``, where the CPU converts halves, :data:`.vector_ops.F16_CONVERSIONS`);
    bf16 and tf32 as the top bits of a float32 (``_VIA_F32``).  A field as wide as the
    IEEE type's must keep its all-ones exponent for infinities and NaNs.  Any other format
    is ``_GENERAL``: :func:`_decode_run`.  The window becomes two thresholds on the element's
    magnitude bits: at or above ``hi_mag`` (or an inf or NaN, at or above ``key``) an
    element is flagged, and so is a non-zero one below ``lo_mag``."""
    ebits, mbits, bias, ieee, low = p[0], p[1], p[2], p[3], p[4]
    fshift = mbits + low
    mag = ((1 << (ebits + mbits)) - 1) << low
    key = (((1 << ebits) - 1) << fshift) if ieee else mag
    if F16_CONVERSIONS and width == 16 and ebits == 5 and mbits == 10 and bias == 15 and low == 0:
        kind, up, keep, flip = _AS_F16, 0, -1, neg << 15
    elif F16_CONVERSIONS and width <= 16 and (ebits < 5 or ebits == 5 and ieee) and fshift <= 10:
        kind, up, keep, flip = _VIA_F16, 10 - fshift, -1, neg << 15
    elif width <= 32 and ebits == 8 and ieee and bias == 127:
        kind, up, keep, flip = _VIA_F32, 32 - width, -(1 << (low + 32 - width)), neg << 31
    else:
        kind, up, keep, flip = _GENERAL, 0, -1, 0
    hi_mag, lo_mag = key, 0
    if lo <= hi:
        top = hi + bias + 1  # the least field above the window: max(field, 1) - bias > hi
        hi_mag = min(key, 1 if top <= 1 else top << fshift)
        bottom = lo + bias  # below it, a non-zero element's max(field, 1) - bias < lo
        lo_mag = 0 if bottom <= 1 else min(bottom << fshift, 2**31 - 1)
    scale = np.float32(2.0 ** (15 - bias)) if kind == _VIA_F16 else np.float32(1)
    sign_up = 16 - width if kind == _VIA_F16 else 0
    return BDecoder(kind, _I32(mag), _I32(key), _I32(fshift), _I32(bias + off), _I32(up), _I32(keep), _I32(flip),
                    _I32(1 << (width - 1)), _I32(sign_up), scale, _I32(hi_mag), _I32(lo_mag), lo <= hi)


@njit(cache=True, inline="always")
def _b_value(x, m, fq, kind):
    """The float32 value of the element ``x`` (as int32) whose magnitude bits are ``m``, by
    ``kind`` (:func:`b_decoder`); meaningless for a zero or special element."""
    if kind == _AS_F16:
        return f32_from_f16_bits(_I32(x ^ fq.flip))
    if kind == _VIA_F16:
        t = _I32(shl_i32(m, fq.up) | shl_i32(_I32(x & fq.sbit), fq.sign_up))
        return f32_from_f16_bits(_I32(t ^ fq.flip)) * fq.scale
    return f32_from_bits(_I32(_I32(shl_i32(x, fq.up) & fq.keep) ^ fq.flip))


@njit(cache=True, inline="always")
def _b_element(x, fq, kind):
    """``(m, dead, v, e)`` of one element ``x`` by :func:`b_decoder`'s constants ``fq``:
    its magnitude bits, whether it is a zero or special, its value (:func:`_b_value`,
    meaningless where dead) and its exponent ``max(field, 1) - bias - off``.  The one
    decoding of :func:`_decode_b_loop` (B) and :func:`_decode_a_loop` (A)."""
    x = _I32(x)
    m = _I32(x & fq.mag)
    dead = (m == _I32(0)) | (m >= fq.key)
    return m, dead, _b_value(x, m, fq, kind), sub_i32(max(lshr_i32(m, fq.fshift), _I32(1)), fq.bias_off)


@njit(cache=True, inline="always")
def _decode_b_loop(src, vrow, erow, n, fq, zero, kind, window):
    """:func:`_decode_b_run`'s loop for one ``kind`` and ``window``, each a constant where
    it is called, so that the loop holds only its own kind's steps: with the kind tested
    inside, LLVM computed all three and spilled registers."""
    z = as_element_of(zero, erow)
    largest = _I32(0)
    smallest = _I32(2**31 - 1)  # of the non-zero magnitudes, where a window is checked
    for k in range(n):
        m, dead, v, e = _b_element(src[k], fq, kind)
        vrow[k] = np.float32(0) if dead else v
        erow[k] = z if dead else as_element_of(e, erow)
        largest = max(largest, m)
        if window:
            smallest = min(smallest, _I32(2**31 - 1) if m == _I32(0) else m)
    return (largest >= fq.hi_mag) | (smallest < fq.lo_mag)


@njit(cache=True, inline="always")
def _decode_b_run(src, vrow, erow, n, fq, zero):
    """:func:`_decode_run` for B's elements into float32 values, by :func:`b_decoder`'s
    constants ``fq`` (a kind other than ``_GENERAL``): the same values, exponents and flag,
    from the element's own bits.  A zero or special element is ``dead`` (value +0,
    exponent ``zero``); the exponent is ``max(field, 1) - bias - off``.  Whether any element
    is an inf or NaN, or outside the window, is read once for the run from the largest
    magnitude and the smallest non-zero one.

    ``_decode_run`` builds each value from its significand with an int-to-float conversion
    and ``ldexp``, with shifts by run-time amounts, in about thirty vector operations per 16
    elements; here a value is a half conversion or a bit move, and the flag two running
    extremes instead of a test per element."""
    kind, window = fq.kind, fq.window
    if kind == _AS_F16:
        if window:
            return _decode_b_loop(src, vrow, erow, n, fq, zero, _AS_F16, True)
        return _decode_b_loop(src, vrow, erow, n, fq, zero, _AS_F16, False)
    if kind == _VIA_F16:
        if window:
            return _decode_b_loop(src, vrow, erow, n, fq, zero, _VIA_F16, True)
        return _decode_b_loop(src, vrow, erow, n, fq, zero, _VIA_F16, False)
    if window:
        return _decode_b_loop(src, vrow, erow, n, fq, zero, _VIA_F32, True)
    return _decode_b_loop(src, vrow, erow, n, fq, zero, _VIA_F32, False)


@njit(cache=True, inline="always")
def _decode_a_loop(src, vrow, erow, lrow, n, fq, zero, scale, kind, lows, sh, lo, low_zero):
    """:func:`_decode_b_loop` for A, by a block of its groups' runs one after another: the
    values times ``scale`` (``2^sh``, exact by :func:`prescale`), the low codes (uint32, the
    code in each byte, :func:`_low_code`) into ``lrow`` where ``lows``.  Returns whether any
    element is an inf or NaN."""
    z = as_element_of(zero, erow)
    largest = _I32(0)
    for k in range(n):
        m, dead, v, e = _b_element(src[k], fq, kind)
        v = np.float32(0) if dead else v * scale
        vrow[k] = v
        erow[k] = z if dead else as_element_of(e, erow)
        if lows:
            lrow[k] = np.uint32(np.uint32(_low_code(v, dead, sh, lo, 0, low_zero)) * np.uint32(0x01010101))
        largest = max(largest, m)
    return largest >= fq.key


@njit(cache=True, inline="always")
def _decode_a_run(src, vrow, erow, lrow, n, fq, zero, scale, lows, sh, lo, low_zero):
    """:func:`_decode_a_loop` with its kind and ``lows`` as constants (see
    :func:`_decode_b_loop`)."""
    if fq.kind == _AS_F16:
        if lows:
            return _decode_a_loop(src, vrow, erow, lrow, n, fq, zero, scale, _AS_F16, True, sh, lo, low_zero)
        return _decode_a_loop(src, vrow, erow, lrow, n, fq, zero, scale, _AS_F16, False, sh, lo, low_zero)
    if fq.kind == _VIA_F16:
        if lows:
            return _decode_a_loop(src, vrow, erow, lrow, n, fq, zero, scale, _VIA_F16, True, sh, lo, low_zero)
        return _decode_a_loop(src, vrow, erow, lrow, n, fq, zero, scale, _VIA_F16, False, sh, lo, low_zero)
    if lows:
        return _decode_a_loop(src, vrow, erow, lrow, n, fq, zero, scale, _VIA_F32, True, sh, lo, low_zero)
    return _decode_a_loop(src, vrow, erow, lrow, n, fq, zero, scale, _VIA_F32, False, sh, lo, low_zero)


@njit(cache=True, inline="always")
def _gather_runs(runs, bits, r0, rows, c0, G):
    """:func:`_gather_group` for a literal ``G``: one :func:`.vector_ops.copy_run` a row."""
    for rr in range(rows):
        copy_run(runs, rr * G, bits[r0 + rr], c0, G)


@njit(cache=True, inline="always")
def _gather_group(runs, bits, r0, rows, c0, G):
    """``runs[rr * G:(rr + 1) * G] = bits[r0 + rr, c0:c0 + G]`` for each of ``rows`` rows:
    one group of a block of A's rows, its runs one after another as the packed layout holds
    them, by :func:`.vector_ops.copy_run` for the kernels' group sizes (``G`` a literal in
    each call of :func:`_gather_runs`)."""
    if G == 16:
        _gather_runs(runs, bits, r0, rows, c0, 16)
    elif G == 32:
        _gather_runs(runs, bits, r0, rows, c0, 32)
    elif G == 8:
        _gather_runs(runs, bits, r0, rows, c0, 8)
    elif G == 4:
        _gather_runs(runs, bits, r0, rows, c0, 4)
    elif G == 64:
        _gather_runs(runs, bits, r0, rows, c0, 64)
    else:
        for rr in range(rows):
            for k in range(G):
                runs[rr * G + k] = bits[r0 + rr, c0 + k]


@njit(cache=True, _nrt=False)
def _decode_packed_block(bits, r0, kbi, ib, fq, zero, sh, vals, exps, lows, lo, low_zero, runs, special):
    """The rows ``r0`` up to ``r0 + MB`` (or A's last) of K-block ``kbi`` of A into
    :func:`decode_packed`'s layout, group by group: the group's runs gathered into ``runs``
    (:func:`_gather_group`), then decoded as one array by :func:`_decode_a_run` into the
    layout's block, which holds them in the same order.  Marks ``special[r]`` for each row
    with an inf or NaN (read from the gathered bits, where the block has one).

    A's groups are runs of 4 to 32 elements, so they are gathered and decoded by blocks:
    decoded run by run (:func:`_decode_packed_row`), each short run's loop pays its set-up
    and remainder."""
    nkb, _, ng, MB, G = vals.shape
    cols = bits.shape[1]
    rows = min(MB, bits.shape[0] - r0)
    scale = np.float32(2.0 ** sh)
    has_lows = lows.shape[3] != 0
    for g in range(min(ng, (cols - kbi * ng * G) // G)):  # K is a multiple of G
        _gather_group(runs, bits, r0, rows, kbi * ng * G + g * G, G)
        if _decode_a_run(runs, vals[kbi, ib, g].reshape(MB * G), exps[kbi, ib, g].reshape(MB * G),
                         lows[kbi, ib, g].reshape(lows.shape[3] * G), rows * G, fq, zero, scale, has_lows, sh,
                         lo, low_zero):
            for i in range(rows * G):
                if _I32(_I32(runs[i]) & fq.mag) >= fq.key:
                    special[r0 + i // G] = True


@njit(cache=True, _nrt=False)
def _decode_packed_row(bits, r, p, q, neg, zero, off, vals, exps, lows, lo, low_zero, sh):
    """Row ``r`` of A into :func:`decode_packed`'s layout, run by run; whether it holds an
    inf or NaN.  For what :func:`_decode_packed_block` does not decode (the formats of
    :func:`b_decoder`'s ``_GENERAL`` kind, and powers ``2^sh`` outside float32).  Compiled
    without reference counting, like the ``_rows_g*`` kernels: each group's runs are views,
    and with numba's counting every view cost an atomic increment and decrement."""
    cols = bits.shape[1]
    nkb, _, ng, MB, G = vals.shape
    KB = ng * G
    ib = r // MB
    rr = r - ib * MB
    sp = False
    for kbi in range(nkb):  # K-blocks and groups counted, not divided out of each column
        for g in range(min(ng, (cols - kbi * KB) // G)):  # K is a multiple of G
            sp |= _decode_run(bits[r, kbi * KB + g * G:], vals[kbi, ib, g, rr], exps[kbi, ib, g, rr], G, p, q,
                              neg, zero, off)
            if lows.shape[3]:
                _low_run(bits[r, kbi * KB + g * G:], lows[kbi, ib, g, rr], G, q, sh, lo, 0, low_zero)
    return sp


def decode_packed(bits, p, neg, sh, zero, off, vals, exps, lows, lo, low_zero, *, threads=None):
    """Values (times ``2^sh``: float32 ``vals`` only) and exponents (less ``off``; ``zero``
    for zeros and specials, :class:`ExponentLanes`) of the whole of A, laid out as the kernel
    reads them: ``vals[kbi, ib, g, r, k]`` is element ``(ib * MB + r, kbi *
    KB + g * G + k)`` (``vals.shape == (K blocks, M blocks, KB // G, MB, G)``), so that each
    block of rows and k-terms is one contiguous array, group by group, and A is read from
    memory once per GEMM instead of once per N-block.  Rows and k-terms past A's edges are
    left unwritten (the pass by fused multiply-adds then fills a few rows, :func:`_pad_rows`);
    the kernel reads no others.  Where ``lows`` has rows (the pass by fused
    multiply-adds), it gets A's low codes (:func:`_low_code`, ``lo`` and ``low_zero``) in the
    same layout, as uint32 with the code in each byte (:func:`.register_blocks.count_block`).
    Returns ``(special, any)``: which rows hold an inf or NaN, and whether any does."""
    special, any_special = decode_packed_2d(bits, p, neg, sh, zero, off, vals, exps, lows, lo, low_zero,
                                            threads or get_num_threads())
    return special, any_special


@njit(cache=True)
def decode_packed_2d(bits, p, neg, sh, zero, off, vals, exps, lows, lo, low_zero, threads):
    """:func:`decode_packed_stack` of one matrix (C-contiguous arrays, as a stack of one):
    which rows hold an inf or NaN, and whether any does, in one call, so that a small GEMM
    does not pay for the views of a stack and the reduction in Python."""
    special = decode_packed_stack(bits.reshape((1,) + bits.shape), p, neg, sh, zero, off,
                                  vals.reshape((1,) + vals.shape), exps.reshape((1,) + exps.shape),
                                  lows.reshape((1,) + lows.shape), lo, low_zero, threads)[0]
    return special, special.any()


@njit(parallel=True, cache=True)
def decode_packed_stack(bits, p, neg, sh, zero, off, vals, exps, lows, lo, low_zero, threads):
    """:func:`decode_packed` of each matrix ``bits[s]`` (C-contiguous) of a stack into
    ``vals[s]``, ``exps[s]`` and ``lows[s]``; which rows hold an inf or NaN, ``[s, r]``.  The
    threads share the blocks of rows of every K-block of every matrix
    (:func:`_decode_packed_block`, each of ``threads`` shares of them in turn; numba's
    ``get_num_threads`` in compiled code would stop its caching); or the rows
    (:func:`_decode_packed_row`) for the formats that only :func:`_decode_run` decodes, and
    where ``2^sh``, which :func:`_decode_a_loop` multiplies by, is no float32 (no power that
    :func:`prescale` gives, 2^-93 to 2^123 for the rules' formats, but any is taken here)."""
    count, rows = bits.shape[0], bits.shape[1]
    nkb, nib, _, MB, G = vals.shape[1:]
    fq = b_decoder(p, bits.itemsize * 8, neg, off, 1, 0)
    special = _flags(count * rows).reshape((count, rows))
    if fq.kind != _GENERAL and -149 <= sh <= 127:  # 2^sh itself a float32
        tasks = count * nkb * nib
        shares = max(1, min(threads, tasks))
        runs = np.empty((shares, MB * G), bits.dtype)
        for c in prange(shares):  # share c takes the tasks c, c + shares, ...
            saved = read_mxcsr()
            write_mxcsr(_I32(MXCSR_NEAREST))  # no flush-to-zero of subnormal values from the caller's
            for t in range(c, tasks, shares):
                s, kbi, ib = t // (nkb * nib), t // nib % nkb, t % nib
                _decode_packed_block(bits[s], ib * MB, kbi, ib, fq, zero, sh, vals[s], exps[s], lows[s], lo,
                                     low_zero, runs[c], special[s])
            write_mxcsr(saved)
        return special
    q = f32_decoder(p, bits.itemsize * 8, sh, neg)
    for i in prange(count * rows):
        s, r = i // rows, i % rows
        saved = read_mxcsr()
        write_mxcsr(_I32(MXCSR_NEAREST))
        special[s, r] = _decode_packed_row(bits[s], r, p, q, neg, zero, off, vals[s], exps[s], lows[s], lo,
                                           low_zero, sh)
        write_mxcsr(saved)
    return special


@njit(cache=True)
def _flags(n):
    """``n`` flags, all False.  Called, not inlined, by the parallel kernels: there numba
    makes ``np.zeros`` a parallel loop of its own, one more start of the threads."""
    return np.zeros(n, np.bool_)


@njit(cache=True)
def _decode_a_block(bits, ib, kbi, p, neg, sh, zero, off, vals, exps, lows, lo, low_zero, special, fma):
    """Block ``ib`` of A's rows, K-block ``kbi``, into :func:`decode_packed`'s layout
    (:func:`_decode_packed_block`), under the MXCSR defaults, as :func:`decode_packed_stack`
    decodes it; where ``fma``, the last block's rows past A's last row copies of it
    (:func:`_pad_rows`).  For formats with a block decoding and a float32 ``2^sh``
    (:func:`decodes_by_blocks`)."""
    MB, G = vals.shape[3], vals.shape[4]
    saved = read_mxcsr()
    write_mxcsr(_I32(MXCSR_NEAREST))
    fq = b_decoder(p, bits.itemsize * 8, neg, off, 1, 0)
    runs = np.empty(MB * G, bits.dtype)
    _decode_packed_block(bits, ib * MB, kbi, ib, fq, zero, sh, vals, exps, lows, lo, low_zero, runs, special)
    write_mxcsr(saved)
    if fma and ib == vals.shape[1] - 1:
        last = (bits.shape[0] - 1) % MB  # A's last row in its block
        for r in range(last + 1, min(MB, -(-(last + 1) // ROWS) * ROWS)):
            for g in range(vals.shape[2]):  # element by element: a slice assignment compiles its shape checks' messages
                for k in range(G):
                    vals[kbi, ib, g, r, k] = vals[kbi, ib, g, last, k]
                    exps[kbi, ib, g, r, k] = exps[kbi, ib, g, last, k]
                    if lows.shape[3]:
                        lows[kbi, ib, g, r, k] = lows[kbi, ib, g, last, k]


def decodes_by_blocks(p, width, sh) -> bool:
    """Whether A of format ``p`` in ``width``-bit integers, its values times ``2^sh``, is
    decoded block by block (:func:`_decode_packed_block`), as :func:`decode_packed_stack`
    and :func:`_decode_a_block` decode it: a format that :func:`b_decoder` reads as an IEEE
    half or float32, and ``2^sh`` a float32."""
    return _decoder_kind(p, width) != _GENERAL and -149 <= sh <= 127


@functools.lru_cache(maxsize=64)
def _decoder_kind(p, width) -> int:
    """:func:`b_decoder`'s kind for elements of format ``p`` in ``width``-bit integers."""
    return int(b_decoder(p, width, 0, 0, 1, 0).kind)
