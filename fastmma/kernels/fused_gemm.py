"""The fused-dot rule (``fused_dot``) for whole GEMMs, at near-BLAS speed.

Same numbers as :func:`fastmma.kernels.fused_dot.fused_dot_mma`, bit for bit, computed
another way.  For each output element and each group of ``G`` k-terms:

* pass 1: ``e_max = max(e_zero, e_c, max_k(e_a + e_b))`` over the format exponents
  (subnormals at the smallest normal exponent, zeros at -2^20 so they never win), and the
  scale ``S = 2^(frac_bits - e_max)``;
* pass 2: ``T = sum_k trunc(a_k * b_k * S)``.  Each term is below ``2^(frac_bits+2)``, so
  when the products and scalings are exact the truncating float-to-int conversion is the
  rule's truncation, and the integer sum is exact;
* the C (accumulator) term ``trunc(c * S)`` is added in int64, ``(T + t_c) * 2^(e_max -
  frac_bits)`` is exact in float64 and is rounded to the accumulator by masking bits
  (toward zero) or by adding and subtracting a power-of-two constant (nearest even), or both
  in turn (toward zero to f32, then to nearest even f16); the fused rounding gives +0 for a
  zero, the conversion to f16 keeps a non-zero f32's sign; overflow gives inf.  The float32
  path rounds toward zero to f32 in 16 int32 lanes instead.  On x86 the kernel sets the
  CPU's rounding mode to toward zero (:mod:`.fp_env`), and the int32-to-float32
  conversion and ``ldexp`` do the truncation (:func:`_finish_row_rz_fenv`; where every
  non-zero result is a normal float32, the conversion and an exact multiply,
  :func:`_finish_row_rz_normal`); elsewhere the integer sum's low bits are cleared below
  its leading ``out_man_bits + 1`` (count leading zeros) and ``ldexp`` puts it in place
  (:func:`_finish_row_rz32`).

Pass 2 by fused multiply-adds (fp8 operands, x86 with AVX-512: :func:`_rows_fma`).  A
group's fp8 terms are below ``2^15`` grid units, so 32 of them (64 in a sparse A spread to its
dense columns) fit the window of a float32 "magic" accumulator ``1.5 * 2^23 * g`` whose last
bit is the grid ``g``: a fused multiply-add rounding toward zero then rounds each exact
product down onto the grid, one vector operation per 16 products where the conversion pass
takes four (product, scale, truncating conversion, integer add).  Rounding down is
truncation for all but the negative terms that are not whole on the grid; those are counted
in uint8 lanes from the exponents of the last set bits of the operands' significands
(:class:`LowCodes`) and added back.  Both loops keep their running values in registers
(:mod:`.register_blocks`).  f16, bf16 and tf32 terms (25 fraction bits, up to 2^27 grid
units) do not fit a float32 window.

Two lane widths.  The float32 path keeps exponents in int8 (64 lanes) where each operand's
data span at most about 42 binades (any f16 or fp8 data; :func:`exponent_lanes`), else in
int16 (32 lanes), products and scales in float32 (16 lanes) and sums each group in int32
(``G * 2^(frac_bits+2) <= 2^31``); A is decoded pre-multiplied by a power of two ``2^sh``
so that every product and scale is a normal float32 (``sh`` is chosen from an exponent
range, :func:`prescale`).  For f16 and fp8 inputs one ``sh`` and the int8 lanes fit every
value of the formats (:func:`whole_format_lanes`), so their data are not scanned at all:
decoding A reports its rows with infinities or NaNs, the kernel whether B has any, and only
then are B's columns scanned.  bf16/tf32 data are scanned for their range
(:func:`scan_operands`) and take the float32 path unless they span more binades than
float32 holds.  A GEMM of few rows (:data:`NARROW_ROWS`) scans A and a sample of B's rows
only: B's exponents get a window that fits the float32 path and int8 lanes beside A's
range (:func:`b_window`), its decoding flags an element outside it as it flags an inf or
NaN, and only where B holds one is the GEMM run again with B scanned (for such a GEMM,
scanning B cost as much as decoding it).  The float64 path (8 lanes) handles every range.
Each path decodes its operands in its own lanes: the float32 path A from bits moved to the
top of an int32 (:func:`_decode_f32`, 16 lanes, no run-time shift wider than 32 bits) and
B, unscaled, as the IEEE half or float32 that each of its formats is a narrower field of
(:func:`_decode_b_run`: a half conversion or a bit move per value, a GEMV's main cost), the
float64 path in int64 (:func:`_decode_value`).  Decoding sets the thread's MXCSR to its
defaults, as the rows do: a caller's flush-to-zero would otherwise turn bf16/tf32
subnormals to zeros in the float32 lanes.

Infinities and NaNs in A, B or C are not handled by the fast paths: the rows, columns and
elements they touch are recomputed with the reference kernel afterwards.  An accumulator
that overflows to infinity from finite inputs stays infinite (finite products cannot cancel
it).

Blocking: for each N-block of ``NB`` columns and K-block of ``KB``, a decoded B panel is
shared by the threads, which take blocks of ``MB`` rows of A (64, or fewer where M would
leave a thread without a block: :func:`_block_sizes`).  A is decoded once, already
packed block by block and group by group (:func:`decode_packed`'s layout: a group's A values
for all rows of a block are contiguous; each group's runs of a block of rows are gathered and
decoded as one array, :func:`_decode_packed_block`), by the task that computes the block
(:func:`_gemm_body`); packing it per N-block instead read all of A from memory
once per N-block, up to a quarter of the kernel's time for fp8 at 2048^3.  For each group the
``G x NB`` slice of the panel stays in cache while the rows stream past it.  ``G`` is a compile-time constant
(one thin wrapper per group size), so LLVM unrolls the k-terms and vectorises over columns.
The K-blocks are long (2048 by default): each one costs a round trip of the accumulator
tile, which measured dearer than a panel that no longer fits the L2 cache.  Every scratch
array starts on a cache line (:func:`_aligned_empty`, :func:`carve`): a 16-lane vector that
straddles two lines costs two loads, and measured up to a fifth of the kernel's time.  A
decoded and B's panels are carved from one buffer of the scratch pool (:mod:`.scratch`),
which keeps it mapped for the next call: from the C allocator afresh, it cost a third of a
256^3 GEMM's time in some processes (page faults).

Indexing.  An index that numba cannot prove non-negative (``b[kb + k, jb + j]``) gets a
wrap-around test per element, which turns a loop over a row into gathers or stops it
vectorising; the loops index a row view (``b[kb + k, jb:jb + nb]``) by the loop variable
instead.  That halved the A decode and the tile copies at 256^3.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
from numba import get_num_threads, njit, prange

from .bitcast import f32_bits, f32_from_bits, f64_bits, f64_from_bits
from .fused_dot import ROUND_RNE, ROUND_RZ, ROUND_RZ_F16, rounding_code
from .fp_env import HAS_MXCSR, MXCSR_NEAREST, MXCSR_TOWARD_ZERO, read_mxcsr, write_mxcsr
from .operands import read_only
from .register_blocks import COLUMNS, ROWS, count_columns, fits_registers, fma_block
from .scratch import ALIGN, POOL, carve, layout, on_cache_line
from .special_chains import column_specials, prefix_bound, row_specials, special_element
from .variants import variant
from .vector_ops import (F16_CONVERSIONS, add_i32, as_element_of, clz_u32, copy_run, f32_from_f16_bits, ldexp_f32,
                         lshr_i32, shl_i32, sub_i32)

NEG_EXP = -16000  # exponent given to zeros: never the maximum, and twice it fits an int16
ZERO_EXP8 = -64  # the same in int8 lanes: twice it is -128, which still fits
_F16_OVERFLOW = 65536.0

KB_DEFAULT, NB_DEFAULT, MB_DEFAULT = 2048, 256, 64
#: A GEMM of at most NARROW_ROWS rows (a GEMV, a few tokens' activations) runs in chunks of
#: B's columns (:func:`_stack_body`), each thread decoding B's panels for its own chunk, in
#: blocks of NARROW_BLOCKS.  With the row blocks' panels (2048 by 256), such a GEMM decoded
#: B row by row in runs of 256 columns, which cross a page of memory every 512 bytes, and
#: ran its one block of rows on one thread: M = 1, N = K = 4096, f16 took 17-20 ms, and 8 ms
#: in chunks (numpy's float32 GEMV: 2-3 ms).  At M = 64 the two took the same time.
NARROW_ROWS = 32
NARROW_BLOCKS = (64, 1024, MB_DEFAULT)
#: the narrowest chunk of columns a narrow GEMM is cut into
NARROW_CHUNK = 256
#: The stack kernels take the pass by fused multiply-adds (``fma=None``) for GEMMs of at
#: least this many rows: it runs blocks of 4 rows and sets up each column's magic numbers
#: and B's low codes, and with fewer rows the pass by conversions was faster (e4m3, N = K
#: = 4096, two threads: M = 1 8 ms against 15 ms, M = 4 10 against 17, M = 16 about the
#: same, M = 32 35 against 41).
FMA_MIN_ROWS = 16
#: The most non-zero terms a group's int32 sum may hold where its sum plus the accumulator's
#: term can pass 2^31: 16 terms below 2^27 (f16 and bf16 keep 25 fraction bits) plus C's
#: below 2^26, in the rows where :func:`_may_wrap` finds a sum that close to it (any group
#: whose bound passes 2^31 takes that test: :func:`_finish_group`).  The other rules' sums
#: cannot pass it (tf32: 8 or 4 such terms; fp8: 32, or 64 in a spread group, below 2^15).
#: A sparse A spread to its dense columns (:func:`fastmma.kernels.execute_spread`) has f16
#: groups of 32 with 16 non-zero terms.
WRAPPING_GROUP = 16
#: Pass 1's columns are padded to a multiple of this (:func:`_padded`): LLVM unrolls its
#: loop over 64-lane int8 vectors four times.  The other loops' columns, to whole vectors:
#: of FLOAT_LANES (the pass by conversions) or a whole register block, COLUMNS (the pass by
#: fused multiply-adds; the panels and the tile are padded so).
EXPONENT_COLUMNS = 256
FLOAT_LANES = 16


# ---------------------------------------------------------------- decoding


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
    where the element is not one: reading the fields in place as a float32's, and scaling
    that by ``2^(127 - bias)``, had made every fp8 subnormal (and every f16 one) a float32
    subnormal, and the scaling of such a value costs an x86 core a microcode assist of
    about a hundred cycles: fp8 data of a normal distribution took 1.5 ns an element to
    decode, against 0.5 ns for f16."""
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


_NO_LOW = 1 << 20  # lowest exponent of a row or column with no non-zero finite element


@njit(cache=True, inline="always")
def _scan_element(x, p, like):
    """``(hi, lo, special)`` of one element for the scans, in the lanes of its own width
    (uint16 for f16): its exponent field in place (not shifted down), raised to the
    smallest normal exponent's field for a subnormal, for both; or 0 and all ones for a zero
    or a special, so that neither wins a maximum or a minimum.  Every mask and every result
    of ``&`` is converted to the element type of ``like`` (the bits array), and nothing is
    shifted by the run-time field position: numba computes integers in int64, and a
    variable shift would keep the loop in 8 int64 lanes instead of 32 uint16 ones."""
    ebits, mbits, ieee, low = p[0], p[1], p[3], p[4]
    man = ((np.int64(1) << mbits) - 1) << low
    exp = ((np.int64(1) << ebits) - 1) << (low + mbits)
    key = as_element_of(exp | (0 if ieee else man), like)
    special = as_element_of(x & key, like) == key
    dead = special | (as_element_of(x & as_element_of(exp | man, like), like) == as_element_of(0, like))
    e = max(as_element_of(x & as_element_of(exp, like), like), as_element_of(np.int64(1) << (low + mbits), like))
    zero, ones = as_element_of(0, like), as_element_of(-1, like)
    return (zero if dead else e), (ones if dead else e), (as_element_of(1, like) if special else zero)


@njit(cache=True, inline="always")
def _scanned(lo, hi, p, like):
    """``(lowest, highest)`` exponent from the in-place fields of :func:`_scan_element`."""
    shift, bias = p[4] + p[1], p[2]
    lowest = (np.int64(lo) >> shift) - bias if lo != as_element_of(-1, like) else np.int64(_NO_LOW)
    highest = (np.int64(hi) >> shift) - bias if hi != as_element_of(0, like) else np.int64(NEG_EXP)
    return lowest, highest


#: Operands of at most this many bytes are scanned by one thread: a 512 x 512 bf16 operand's
#: scan took as long on one thread as on two, where starting the threads cost more than the
#: scan of a single instruction's operands (bf16 m64n256k16: 12 against 3 us).  (On one
#: thread, the loops vectorise only with each row in a function of its own.)
SERIAL_SCAN_BYTES = 1 << 19


@njit(cache=True)
def _scan_row(row, p):
    """``(lo, hi, special)`` of one row in the fields of :func:`_scan_element`."""
    lo, hi, sp = as_element_of(-1, row), as_element_of(0, row), as_element_of(0, row)
    for c in range(row.shape[0]):
        h, l, s = _scan_element(row[c], p, row)
        sp = max(sp, s)
        lo = min(lo, l)
        hi = max(hi, h)
    return lo, hi, sp


@njit(cache=True)
def _fold_row(row, p, lo, hi, sp):
    """Each column's running ``lo``, ``hi`` and ``special`` (:func:`_scan_element`'s fields)
    taking in one more row."""
    for c in range(row.shape[0]):
        h, l, s = _scan_element(row[c], p, row)
        sp[c] = max(sp[c], s)
        lo[c] = min(lo[c], l)
        hi[c] = max(hi[c], h)


@njit(cache=True, inline="always")
def _put_scan(lo_hi, special, i, fields, p, like):
    """Row or column ``i`` of a scan's results from its ``(lo, hi, special)`` fields."""
    lo, hi, sp = fields
    lo_hi[i, 0], lo_hi[i, 1] = _scanned(lo, hi, p, like)
    special[i] = sp != as_element_of(0, like)


@njit(cache=True)
def scan_rows(bits, p):
    """Per row: ``(lowest exponent, highest exponent)`` of its non-zero finite elements
    and whether it holds an inf or NaN."""
    return scan_rows_by(bits, p, bits.nbytes <= SERIAL_SCAN_BYTES)


@njit(cache=True)
def scan_rows_by(bits, p, serial):
    """:func:`scan_rows` on one thread (``serial``) or with the rows shared by the threads."""
    lo_hi = np.empty((bits.shape[0], 2), np.int64)
    special = np.empty(bits.shape[0], np.bool_)
    if serial:
        for r in range(bits.shape[0]):
            _put_scan(lo_hi, special, r, _scan_row(bits[r], p), p, bits)
    else:
        _scan_rows_parallel(bits, p, lo_hi, special)
    return lo_hi, special


@njit(parallel=True, cache=True)
def _scan_rows_parallel(bits, p, lo_hi, special):
    for r in prange(bits.shape[0]):
        _put_scan(lo_hi, special, r, _scan_row(bits[r], p), p, bits)


_SCAN_CHUNKS = 8  # row chunks of scan_columns, scanned in parallel and then merged


@njit(cache=True)
def _column_fields(chunks, cols, like):
    """Running fields of :func:`_fold_row` for ``chunks`` chunks of rows, as nothing scanned
    yet (allocated outside the parallel kernel, where numba would start the threads to fill
    each)."""
    return (np.full((chunks, cols), as_element_of(-1, like)), np.zeros((chunks, cols), like.dtype),
            np.zeros((chunks, cols), like.dtype))


@njit(cache=True)
def scan_columns(bits, p):
    """:func:`scan_rows` for the columns of ``bits`` (no transposed copy)."""
    return scan_columns_by(bits, p, bits.nbytes <= SERIAL_SCAN_BYTES)


@njit(cache=True)
def scan_columns_by(bits, p, serial):
    """:func:`scan_columns` on one thread (``serial``) or in chunks of rows shared by the
    threads.  Each chunk of rows is read row by row, whole rows at a time, into its own
    per-column minima, maxima and flags, which are merged at the end.  (Reading a narrow
    block of columns down all the rows instead, one long stride per row, measured up to 8x
    slower for 4-byte elements.)"""
    rows, cols = bits.shape
    nch = min(rows, 1 if serial else _SCAN_CHUNKS)
    lo, hi, sp = _column_fields(max(nch, 1), cols, bits)
    if serial:
        for r in range(rows):
            _fold_row(bits[r], p, lo[0], hi[0], sp[0])
    else:
        _fold_chunks(bits, p, lo, hi, sp)
    lo_0, hi_0, sp_0 = lo[0], hi[0], sp[0]
    for ch in range(1, nch):  # merged serially: a parallel merge cost more to start than it saved
        lo_c, hi_c, sp_c = lo[ch], hi[ch], sp[ch]
        for c in range(cols):
            lo_0[c] = min(lo_0[c], lo_c[c])
            hi_0[c] = max(hi_0[c], hi_c[c])
            sp_0[c] = max(sp_0[c], sp_c[c])
    lo_hi = np.empty((cols, 2), np.int64)
    special = np.empty(cols, np.bool_)
    for c in range(cols):
        _put_scan(lo_hi, special, c, (lo_0[c], hi_0[c], sp_0[c]), p, bits)
    return lo_hi, special


@njit(parallel=True, cache=True)
def _fold_chunks(bits, p, lo, hi, sp):
    """:func:`scan_columns`' chunks of rows, one per row of ``lo``, shared by the threads."""
    rows, nch = bits.shape[0], lo.shape[0]
    for ch in prange(nch):
        for r in range(ch * rows // nch, (ch + 1) * rows // nch):
            _fold_row(bits[r], p, lo[ch], hi[ch], sp[ch])


@njit(cache=True, inline="always")
def _overall(lo_hi):
    """``(lowest, highest)`` exponent over the rows of a scan; (1, 0) for none."""
    if len(lo_hi) == 0:
        return np.int64(1), np.int64(0)
    return lo_hi[:, 0].min(), lo_hi[:, 1].max()


@njit(cache=True)
def scan_operands(a, ap, b, bp):
    """:func:`scan_rows` of A and :func:`scan_columns` of B, as the driver takes them, in one
    call: ``(a_lo, a_hi, b_lo, b_hi, rows, cols, special)``, the exponent range of each
    operand's non-zero finite elements (lowest above highest if it has none), the rows of A
    and columns of B that hold an inf or NaN, and whether any does."""
    a_lo_hi, rows = scan_rows(a, ap)
    b_lo_hi, cols = scan_columns(b, bp)
    a_lo, a_hi = _overall(a_lo_hi)
    b_lo, b_hi = _overall(b_lo_hi)
    return a_lo, a_hi, b_lo, b_hi, rows, cols, rows.any() or cols.any()


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
def _gather_group(runs, bits, r0, rows, c0, G):
    """``runs[rr * G:(rr + 1) * G] = bits[r0 + rr, c0:c0 + G]`` for each of ``rows`` rows:
    one group of a block of A's rows, its runs one after another as the packed layout holds
    them, by :func:`.vector_ops.copy_run` for the kernels' group sizes."""
    if G == 16:
        for rr in range(rows):
            copy_run(runs, rr * 16, bits[r0 + rr], c0, 16)
    elif G == 32:
        for rr in range(rows):
            copy_run(runs, rr * 32, bits[r0 + rr], c0, 32)
    elif G == 8:
        for rr in range(rows):
            copy_run(runs, rr * 8, bits[r0 + rr], c0, 8)
    elif G == 4:
        for rr in range(rows):
            copy_run(runs, rr * 4, bits[r0 + rr], c0, 4)
    elif G == 64:
        for rr in range(rows):
            copy_run(runs, rr * 64, bits[r0 + rr], c0, 64)
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

    A's groups are runs of 4 to 32 elements; decoded run by run (:func:`_decode_packed_row`),
    each run's loop paid its set-up and remainder: f16, 256 x 256, one thread, 0.59 ns an
    element that way, 0.15 ns gathered and decoded by blocks."""
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
    which rows hold an inf or NaN, and whether any does, in one call (the views of a stack
    and the reduction had cost a small GEMM some microseconds in Python)."""
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


@functools.lru_cache(maxsize=1024)  # a GEMM of scanned data asks once per call: a few microseconds each time
def prescale(a_lo, a_hi, b_lo, b_hi, a_man, b_man, frac_bits, e_floor) -> int | None:
    """The power ``sh`` that makes the float32 path exact, or None if none exists.

    With products scaled by ``2^sh``: the smallest product must keep all its bits
    (``lo + sh - man_a - man_b >= -149``), the largest must not overflow (``hi + 2 + sh <=
    127``), and the largest scale ``2^(frac_bits - e_floor - sh)`` must be finite.  A scale
    that underflows is taken as 0, which is exact because ``sh <= 125 - hi`` then makes
    every true term below 1.  Also, no product may reach ``2^(127 - frac_bits)``: then no
    finite accumulator can overflow (at 2^127 it truncates every term away, and below it
    the terms cannot carry it past 2^128), so the float32 lanes never meet an infinity.
    A itself is stored times ``2^sh`` in float32 (:func:`decode_packed`), so each of its
    values must stay finite (``a_hi + sh <= 127``) and keep its last bit (``a_lo + sh -
    man_a >= -149``): the products' bounds alone allow an A far above 1 times a B far below.
    """
    sh_min, sh_max = frac_bits - e_floor - 127, math.inf
    if a_lo <= a_hi:  # A's own values
        sh_min, sh_max = max(sh_min, -149 - a_lo + a_man), 127 - a_hi
    if a_lo > a_hi or b_lo > b_hi:  # an all-zero operand: every product is zero
        sh_min = max(0, sh_min)
    else:
        lo, hi = a_lo + b_lo, a_hi + b_hi
        if hi + 2 > 127 - frac_bits:
            return None
        sh_min = max(sh_min, -149 - lo + a_man + b_man)
        sh_max = min(sh_max, 125 - hi)
    return sh_min if sh_min <= sh_max else None


class ExponentLanes(NamedTuple):
    """How the float32 path stores the operands' exponents for pass 1: as ``dtype`` (int8,
    64 lanes to a vector, or int16, 32), A's less ``off_a`` and B's less ``off_b``, zeros
    and specials at ``zero``.  A sum of two stored exponents below ``thr`` involves a zero;
    one at or above it is a true exponent sum less ``off_a + off_b``."""

    dtype: type
    zero: int
    off_a: int
    off_b: int
    thr: int


INT16_LANES = ExponentLanes(np.int16, NEG_EXP, 0, 0, NEG_EXP // 2)
INT32_LANES = ExponentLanes(np.int32, NEG_EXP, 0, 0, NEG_EXP // 2)  # the float64 path's


def _centred(lo, hi) -> tuple[int, int, int]:
    """(offset, lowest, highest): an operand's exponent range less its middle."""
    if lo > hi:  # no non-zero element: no true exponent to place
        return 0, 0, 0
    off = (lo + hi) // 2
    return off, lo - off, hi - off


@functools.lru_cache(maxsize=1024)
def exponent_lanes(a_lo, a_hi, b_lo, b_hi, dtype=None) -> ExponentLanes | None:
    """int8 lanes where the data allow them (or ``dtype`` asks for them; None if they do
    not fit), else int16 lanes.

    In int8, each operand's exponents are stored less the middle of their range and zeros
    at ``ZERO_EXP8``: the sum of two zeros (-128) must not wrap, a sum with a zero must stay
    below the smallest sum of two true exponents, and the largest sum must not pass 127.
    Each operand may then span about 42 binades: any f16 or fp8 data, and bf16 or tf32
    data of a usual range.
    """
    if dtype in (None, np.int8):
        off_a, la, ha = _centred(a_lo, a_hi)
        off_b, lb, hb = _centred(b_lo, b_hi)
        z = ZERO_EXP8
        if max(z + hb, ha + z, 2 * z) < la + lb and ha + hb <= 127 and z + min(la, lb) >= -128:
            return ExponentLanes(np.int8, z, off_a, off_b, la + lb)
        if dtype is not None:
            return None
    return INT16_LANES


# ---------------------------------------------------------------- one group of one row


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
    is (finite products cannot cancel it; its int32 term would be garbage).  In float64
    lanes (:func:`_round_rne_f16`) the same rounding took half of an f16-accumulator GEMM's
    time."""
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


@njit(cache=True, inline="always")
def _normal_bound(P, thr, po, floor):
    """``(possible, bound)``: the group's non-zero results are all normal float32 (then
    ``e_max`` is the larger of the largest product exponent and the accumulator's own
    exponent: :func:`_scale_normal`) if no column's largest product exponent ``P[j]`` is
    unknown (``P < thr``: only zero products) or below ``floor - po``, that is, if no
    ``P[j]`` is below ``bound`` (in ``P``'s type) and ``possible``.  Pass 1 tests each
    vector of ``P`` as it computes it, with a compare and an OR of masks: the smallest
    ``P[j]`` reduced across the lanes afterwards took a chain of dependent shuffles that cost
    5% of a tf32 GEMM."""
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
    in place (the difference fits: it is ``up``'s field).  Every sum is :func:`sub_i32`:
    numba widens an int32 sum to int64, and the loop then rebuilt a constant every step;
    with both, the loop took 8 vector operations instead of 11, and GEMMs ran 5% faster."""
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
    exact because the result is normal (and +0 for a zero sum).  In the rounding loop of
    :func:`_finish_row_rz_fenv` the two ``ldexp``, each a ``vscalefps`` of two cycles on a
    Zen 4 core, and their exponents' conversions took most of the time."""
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

    The test and the two rounding loops it chooses between cost 5-7% of an f16 GEMM
    (256 x 512 x 256, two threads: 608 us, 564 us with neither).  Rounding every row by the
    wrap-safe loop instead cost as much; so did this test as compares ORed into masks."""
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
    lanes they meet: in int16 the conversions between the two cost 3% (f16) to 9% (tf32) of
    a GEMM.

    Rounding toward zero to f32 on x86, a group whose non-zero results are all normal
    (nearly every group of usual data: :func:`_normal_bound`) takes shorter scale and
    rounding loops (:func:`_scale_normal`, :func:`_finish_row_rz_normal`): on a Zen 4 core
    they made GEMMs 8% (f16) to 15% (tf32, e4m3) faster.  The accumulator's exponent is read
    from its value in the scale loop, not kept in an array beside it."""
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
    # the wrap-safe rounding cost a tenth of a 256^3 f16 GEMM: taken only for the rows that need it,
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
    function of its own: the first f16 GEMM's compile went from 46-47 s to 32-40 s, with
    the same instructions in ``_rows_g16_32``."""
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
    :func:`_rows_fma` over whole blocks of rows.  Where a block had 192 columns, pass 1's
    loop fell short of LLVM's unrolled body of 256 int8 lanes and ran in its 16-lane
    remainder (f16 GEMMs with N = 192 took 1.5x as long per product as with N = 256);
    e4m3's count ran its last columns in a scalar loop (N = 192: 4.5x).  Cutting pass 1's
    loop into constant runs of 64 columns instead made the whole of an e4m3 GEMM a third
    slower; padding the conversion pass to 64 columns instead of 16 made f16 with N = 96 a
    tenth slower.  The padding holds copies of the last real column (or row), so its lanes
    compute what a real one does and never change a group's tests."""
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
        def rows(t, mb, g0, nb, av, ae, al, ep, bp, lp, w, f, sh, ez, o, r, em, th, po, lc):
            _rows_fma(t, mb, g0, nb, av, ae, al, ep, bp, lp, w, f, sh, ez, o, r, em, th, po, lc, G, U)
    elif wide:
        def rows(t, mb, g0, nb, av, ae, al, ep, bp, lp, w, f, sh, ez, o, r, em, th, po, lc):
            _rows64(t, mb, g0, nb, av, ae, ep, bp, w, f, sh, ez, o, r, em, G, U)
    else:
        def rows(t, mb, g0, nb, av, ae, al, ep, bp, lp, w, f, sh, ez, o, r, em, th, po, lc):
            _rows32(t, mb, g0, nb, av, ae, ep, bp, w, f, sh, ez, o, r, em, th, po, G, U)
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


#: B's panels are decoded in chunks of this many rows, each on one thread, which sets its
#: MXCSR once for the chunk (per row, the two writes cost about a tenth of a GEMV's decoding)
PANEL_CHUNK = 16


@njit(cache=True, _nrt=False)
def _panel_rows(b, k_lo, k_hi, kb, jb, nb, bpan, epan, lpan, nbp, nbe, p, q, fq, neg, zero, off, lc, fma):
    """Rows ``k_lo .. k_hi`` of B's columns ``jb .. jb + nb`` into rows ``k - kb`` of its
    panel: decoded into ``bpan`` and ``epan`` (and where ``fma``, their low codes into
    ``lpan``), each padded to its width (:func:`_pad_run`), by :func:`_decode_b_run` (``fq``)
    or, for a ``_GENERAL`` format or float64 lanes, :func:`_decode_run` (``q``).  Returns
    whether the rows hold an inf or NaN, or an element outside ``fq``'s window (only
    :func:`_decode_b_run` checks one: :func:`_path` sets none elsewhere).  Called, not
    inlined, so that it is compiled once for every group size rather than into each
    kernel's parallel loop: in alternating runs, the parallel kernel's own compile (less its
    rows function's) went from 19-20 s to 12-14 s for e4m3 and from 13-20 s to 12-15 s for
    f16."""
    saved = read_mxcsr()
    write_mxcsr(_I32(MXCSR_NEAREST))
    special = False
    for k in range(k_lo, k_hi):
        src = b[k, jb:jb + nb]
        vrow, erow = bpan[k - kb], epan[k - kb]
        if vrow.itemsize == 4 and fq.kind != _GENERAL:
            special |= _decode_b_run(src, vrow, erow, nb, fq, zero)
        else:
            special |= _decode_run(src, vrow, erow, nb, p, q, neg, zero, off)
        _pad_run(vrow, nb, nbp)
        _pad_run(erow, nb, nbe)
        if fma:
            lrow = lpan[k - kb]
            _low_run_values(vrow, lrow, nb, lc[1], lc[3])
            _pad_run(lrow, nb, nbp)
    write_mxcsr(saved)
    return special


@njit(cache=True, inline="always")
def _gemm_body(a_val, a_exp, a_low, a_bits, ap, a_dec, b, bp, neg_b, lanes, lc, bpan, epan, lpan, out, addend,
               d16, c_in, rows, G, wide, fma, frac, sh, e_zero, omb, rnd, c_emin, d_emin, blocks):
    """D = C + A @ B into ``out``'s columns ``[j_lo, j_hi)`` (``blocks`` is ``(KB, NB, MB,
    j_lo, j_hi)``), which hold C where ``c_in`` (else the accumulator starts at +0 and
    ``out`` is only written); the last block of K writes D as :func:`_write_tile` says, with
    ``addend`` (D's bits, or empty) and ``d16`` (an f16 D's bits, or empty).  Returns which
    rows of A hold an inf or NaN (where it decodes A, below) and whether B's rows hold one in those
    columns.  Where ``fma``, pass 2 is :func:`_rows_fma`'s, with B's low codes (``lc``)
    decoded beside its panel.  ``lanes`` ends with the bounds of B's exponents
    (:func:`b_decoder`'s window; none where the first exceeds the second); an element
    outside them counts as an inf or NaN.  ``bpan``, ``epan`` and ``lpan``: the panels'
    memory (:func:`panel_specs`).

    ``a_bits``: A's bits, or None where A comes decoded (the stack kernels: numba then
    compiles no decoding into them), ``ap`` its format's parameters; ``a_dec``: ``(neg,
    off, lo, low_zero, decode)`` (a tuple of scalars: numba's parallel loops mishandle one
    that nests another).
    Where ``decode``, A is still to be decoded from ``a_bits`` into ``a_val``, ``a_exp`` and
    ``a_low``: each task of the first block of columns decodes the block of rows it
    computes, before it computes (:func:`_decode_a_block`), where a parallel loop of its own
    had started the threads once more, a few microseconds of a small GEMM."""
    # (one tuple: CPython passes a call of more than 30 arguments as *args, which numba cannot inline)
    KB, NB, MB, j_lo, j_hi = blocks
    neg_a, off_a, a_lo, a_low_zero, decode_a = a_dec
    a_special = _flags(_row_count(a_bits))
    b_special = _flags(b.shape[0])  # per chunk of B's rows (at its first), each set by one thread
    m = out.shape[0]
    kk = b.shape[0]
    zero, off_b, thr, po, b_lo, b_hi = lanes
    bq = f32_decoder(bp, b.itemsize * 8, 0, neg_b)
    bfq = b_decoder(bp, b.itemsize * 8, neg_b, off_b, b_lo, b_hi)
    NBP = _padded(NB, COLUMNS)  # the panel's and the tile's columns, padded (_padded)
    NBE = _padded(NB, EXPONENT_COLUMNS)
    nl = NBP if fma else 0
    nmb = (m + MB - 1) // MB
    for jb in range(j_lo, j_hi, NB):
        nb = min(NB, j_hi - jb)
        nbp, nbe = _padded(nb, COLUMNS), _padded(nb, EXPONENT_COLUMNS)
        for kb in range(0, kk, KB):
            kbs = min(KB, kk - kb)
            for c in prange((kbs + PANEL_CHUNK - 1) // PANEL_CHUNK):
                k0 = kb + c * PANEL_CHUNK
                if _panel_rows(b, k0, min(k0 + PANEL_CHUNK, kb + kbs), kb, jb, nb, bpan, epan, lpan, nbp, nbe, bp,
                               bq, bfq, neg_b, zero, off_b, lc, fma):
                    b_special[k0] = True
            for ib in prange(nmb):
                i0 = ib * MB
                mb = min(MB, m - i0)
                if a_bits is not None:
                    if decode_a and jb == j_lo:
                        _decode_a_block(a_bits, np.int64(ib), kb // KB, ap, neg_a, sh, zero, off_a, a_val, a_exp,
                                        a_low, a_lo, a_low_zero, a_special, fma)
                nr = ROWS if fma else 1
                work = (_aligned_empty(nr * NBP, np.int32).reshape((nr, NBP)),  # E
                        _aligned_empty(nr * NBP, a_val.dtype).reshape((nr, NBP)),  # S
                        _aligned_empty(nr * NBP, np.int64 if wide else np.int32).reshape((nr, NBP)),  # T
                        _aligned_empty(NBE, a_exp.dtype),  # P
                        _aligned_empty(nr * nl, np.float32).reshape((nr, nl)),  # F
                        _aligned_empty(nr * nl, np.uint8).reshape((nr, nl)),  # C
                        np.zeros(ROWS, np.bool_))  # normal
                tile = _aligned_empty(MB * NBP, np.float32).reshape((MB, NBP))
                saved = read_mxcsr()
                write_mxcsr(_I32(MXCSR_TOWARD_ZERO if rnd == ROUND_RZ and not wide else MXCSR_NEAREST))
                c_e = c_emin if kb == 0 else d_emin
                for r in range(mb):
                    orow = out[i0 + r, jb:jb + nb]
                    for j in range(nb):
                        c = orow[j] if c_in or kb > 0 else np.float32(0)
                        tile[r, j] = c
                    _pad_run(tile[r], nb, nbp)
                for r in range(mb, _padded(mb, ROWS) if fma else mb):  # MB is a multiple of ROWS
                    tile[r, :nbp] = tile[mb - 1, :nbp]
                apan = a_val[kb // KB, ib]  # this block of A, packed by decode_packed
                aepan = a_exp[kb // KB, ib]
                alpan = a_low[kb // KB, ib]
                for g0 in range(0, kbs, G):
                    g = g0 // G
                    rows(tile, mb, g0, nb, apan[g], aepan[g], alpan[g], epan, bpan, lpan, work, frac, sh, e_zero, omb,
                         rnd, c_e if g0 == 0 else d_emin, thr, po, lc)
                last = kb + kbs >= kk
                if last:
                    write_mxcsr(_I32(MXCSR_NEAREST))
                _write_tile(tile, mb, nb, out, addend, d16, i0, jb, last)
                write_mxcsr(saved)
    return a_special, b_special.any()


@njit(cache=True, inline="always")
def _write_tile(tile, mb, nb, out, addend, d16, i0, jb, last):
    """Write a tile's sums (its ``mb`` rows, ``nb`` columns) at row ``i0`` and column ``jb``:
    into the accumulator ``out``, but after the last block of K (``last``), where ``d16`` has
    rows (an f16 D, whose sums are f16 values), as their f16 bits into ``d16``; there, where
    ``addend`` (D's bits) has rows, plus its element by one IEEE addition rounded to nearest
    (the caller sets MXCSR to nearest): :func:`plus_nearest` for an f32 D, the float32 sum
    rounded to f16 for an f16 D (24 >= 2 * 11 + 2: the double rounding is innocuous)."""
    adding = last and addend.shape[0] > 0
    if last and d16.shape[0]:
        for r in range(mb):
            drow = d16[i0 + r, jb:jb + nb]
            if adding:
                arow = addend[i0 + r, jb:jb + nb]
                for j in range(nb):
                    drow[j] = f16_bits_of_f32(tile[r, j] + value_of_bits(arow[j], True))
            else:
                for j in range(nb):
                    drow[j] = f16_bits_of_f32(tile[r, j])
        return
    for r in range(mb):
        orow = out[i0 + r, jb:jb + nb]
        if adding:
            arow = addend[i0 + r, jb:jb + nb]
            for j in range(nb):
                orow[j] = plus_nearest(tile[r, j], value_of_bits(arow[j], False))
        else:
            for j in range(nb):
                orow[j] = tile[r, j]


@njit(cache=True)
def _flags(n):
    """``n`` flags, all False.  Called, not inlined, by the parallel kernels: there numba
    makes ``np.zeros`` a parallel loop of its own, one more start of the threads."""
    return np.zeros(n, np.bool_)


@njit(cache=True)
def _row_count(a):
    """``a``'s rows, 0 for None.  Called, not inlined: inlined into the stack kernels' parallel
    loop, a literal 0 here came out as the literal False of an argument (they compare equal)."""
    return 0 if a is None else a.shape[0]


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


#: the row function of a kernel: each compiled variant binds this name in its own globals (:func:`.variants.variant`)
_rows = None


def _gemm_template(G, wide, fma):
    """A blocked kernel's template (:func:`_gemm_body`), calling the row function ``_rows``."""
    def kernel(a, e, al, b, bp, nb_, el, lc, bpan, epan, lpan, out, plus, d16, ci, frac, sh, ez, omb, rnd, ce, de,
               KB, NB, MB, abits, ap, ad):
        return _gemm_body(a, e, al, abits, ap, ad, b, bp, nb_, el, lc, bpan, epan, lpan, out, plus, d16, ci,
                          _rows, G, wide, fma, frac, sh, ez, omb, rnd, ce, de, (KB, NB, MB, 0, b.shape[1]))
    return kernel


def _kernels(template, prefix, fma):
    """The compiled variants of ``template`` for every row function with pass 2 by fused
    multiply-adds (``fma``: keyed by group size) or without (keyed by group size and lanes)."""
    return {(G if fma else (G, wide)): variant(template(G, wide, fma), _variant_name(prefix, G, wide, fma),
                                               {"_rows": ROW_FUNCTIONS[G, wide, fma]}, parallel=True, cache=True)
            for G, wide, f in _VARIANTS if f == fma}


#: the blocked kernels by (group size, float64 lanes)
KERNELS = _kernels(_gemm_template, "_g", False)
#: the kernels whose pass 2 is by fused multiply-adds (:func:`_rows_fma`), by group size
FMA_KERNELS = _kernels(_gemm_template, "_g", True)


@njit(cache=True, inline="always")
def _new_panels(a_val, a_exp, KB, NB, fma):
    """New arrays for :func:`_gemm_body`'s panels (:func:`panel_specs`), each on a cache
    line: the stack kernels' tasks each decode their own."""
    NBP, NBE = _padded(NB, COLUMNS), _padded(NB, EXPONENT_COLUMNS)
    nl = NBP if fma else 0
    return (_aligned_empty(KB * NBP, a_val.dtype).reshape((KB, NBP)),
            _aligned_empty(KB * NBE, a_exp.dtype).reshape((KB, NBE)),
            _aligned_empty(KB * nl, np.uint8).reshape((KB, nl)))


@njit(cache=True, inline="always")
def _stack_body(a_val, a_exp, a_low, b, bp, neg_b, lanes, lc, out, addend, d16, c_in, rows, G, wide, fma, frac, sh,
                e_zero, omb, rnd, c_emin, d_emin, KB, NB, MB, NC):
    """:func:`_gemm_body` for each GEMM of a stack (``b[s]``, ``out[s]`` and A packed for
    each, ``a_val[s]``...), in ``NC`` chunks of columns each: the threads share the tasks (a
    chunk of a GEMM), each task's own loops on one thread (numba runs a ``prange`` inside a
    ``prange`` as a plain loop).  A stack of small GEMMs (one instruction's tile each)
    starts the threads once, not once per GEMM; a GEMM of few rows, in chunks of columns,
    keeps every thread busy, each decoding its own columns of B.  Returns which GEMMs' B
    hold an inf or NaN."""
    count, n = b.shape[0], b.shape[2]
    width = _padded(-(-n // NC), FLOAT_LANES)
    found = _flags(count * NC)  # per task: tasks of one GEMM run on different threads
    decoded = (0, 0, 0, 0, False)  # A comes decoded (decode_packed_stack): no bits, nothing to decode
    for t in prange(count * NC):
        s, j_lo = t // NC, (t % NC) * width
        if j_lo < n:
            bpan, epan, lpan = _new_panels(a_val, a_exp, KB, NB, fma)
            found[t] = _gemm_body(a_val[s], a_exp[s], a_low[s], None, bp, decoded, b[s], bp, neg_b,
                                  lanes, lc, bpan, epan, lpan, out[s], addend[s], d16[s], c_in, rows, G, wide, fma,
                                  frac, sh, e_zero, omb, rnd, c_emin, d_emin,
                                  (KB, NB, MB, j_lo, min(n, j_lo + width)))[1]
    special = _flags(count)
    for t in range(count * NC):
        special[t // NC] |= found[t]
    return special


def _stack_template(G, wide, fma):
    """A stack kernel's template (:func:`_stack_body`), calling the row function ``_rows``."""
    def kernel(a, e, al, b, bp, nb_, el, lc, out, plus, d16, ci, frac, sh, ez, omb, rnd, ce, de, KB, NB, MB, NC):
        return _stack_body(a, e, al, b, bp, nb_, el, lc, out, plus, d16, ci, _rows, G, wide, fma,
                           frac, sh, ez, omb, rnd, ce, de, KB, NB, MB, NC)
    return kernel


#: the kernels of stacks of GEMMs (:func:`_stack_body`), as :data:`KERNELS` and :data:`FMA_KERNELS`
STACK_KERNELS = _kernels(_stack_template, "_s", False)
STACK_FMA_KERNELS = _kernels(_stack_template, "_s", True)


# ---------------------------------------------------------------- specials


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
    a, b, c = (read_only(np.ascontiguousarray(x)) for x in (a, b, c))
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


# ---------------------------------------------------------------- driver


@functools.lru_cache(maxsize=256)
def _block_sizes(blocks, m, kk, group, threads=1) -> tuple[int, int, int]:
    """``(KB, NB, MB)`` for a GEMM of M = ``m`` and K = ``kk`` (a multiple of ``group``):
    the K-blocks are the fewest of at most ``blocks[0]`` terms, of equal length in whole
    groups (but the last, which may be shorter), and a block of rows is no taller than M
    rounded up to a whole number of :data:`.register_blocks.ROWS` (as :func:`_rows_fma`
    takes them), which ``blocks[2]`` is rounded up to as well.  The blocks of rows are
    what the kernels share among ``threads``: a block is no taller than M over ``threads``
    (rounded up likewise), so that a GEMM of few rows (M = 64 on two cores, for one
    instruction's tile) still keeps every thread busy."""
    kb_max, nb, mb = blocks
    kb_max = max(group, min(kb_max, kk) // group * group)
    nkb = max(1, -(-kk // kb_max))
    kb = max(group, -(-kk // (nkb * group)) * group)
    return kb, nb, -(-max(1, min(mb, -(-m // max(1, threads)))) // ROWS) * ROWS


def _pad_rows(packed, m):
    """In arrays laid out by :func:`decode_packed`, the rows of the last block past A's last
    row, to a whole number of :data:`.register_blocks.ROWS`, copies of it (:func:`_padded`):
    :func:`_rows_fma` takes its rows in blocks of ``ROWS``."""
    for x in packed:  # (K blocks, M blocks, groups, MB, G), or a stack of them
        last = (m - 1) % x.shape[-2]  # A's last row in its block
        end = min(x.shape[-2], -(-(last + 1) // ROWS) * ROWS)
        if end > last + 1:  # else none to copy, and numpy's empty copies cost 1 us each
            x[..., -1, :, last + 1:end, :] = x[..., -1, :, last:last + 1, :]


def _packed_empty(m, kk, KB, MB, G, *dtypes, low_rows=True, count=None):
    """Uninitialised arrays for :func:`decode_packed`, one per dtype, carved from one new
    buffer (:func:`carve`).  Without ``low_rows`` the last one has no rows (no low codes to
    hold).  With a ``count``, each is a stack of ``count`` such arrays
    (:func:`decode_packed_stack`)."""
    specs = _packed_specs(m, kk, KB, MB, G, tuple(np.dtype(t) for t in dtypes), low_rows, count)
    total, _ = layout(specs)
    return carve(on_cache_line(np.empty(total + ALIGN, np.uint8), total), specs)


@functools.lru_cache(maxsize=256)
def _packed_specs(m, kk, KB, MB, G, dtypes, low_rows, stack=None) -> tuple:
    """``(dtype, shape)`` of each array of A decoded (:func:`_packed_empty`)."""
    shape = (-(-kk // KB), -(-m // MB), KB // G, MB, G)
    shapes = [shape] * (len(dtypes) - 1) + [shape if low_rows else shape[:3] + (0, G)]
    if stack is not None:
        shapes = [(stack,) + s for s in shapes]
    return tuple(zip(dtypes, shapes))


@functools.lru_cache(maxsize=256)
def panel_specs(KB, NB, val_dtype, exp_dtype, fma) -> tuple:
    """``(dtype, shape)`` of :func:`_gemm_body`'s panels of B: values, exponents and (for the
    pass by fused multiply-adds) low codes, ``KB`` rows of ``NB`` columns padded as the
    kernels read them (:func:`_padded`; :func:`_new_panels` makes the same)."""
    nbp, nbe = _padded(NB, COLUMNS), _padded(NB, EXPONENT_COLUMNS)
    return ((np.dtype(val_dtype), (KB, nbp)), (np.dtype(exp_dtype), (KB, nbe)),
            (np.dtype(np.uint8), (KB, nbp if fma else 0)))


def _whole_range(p) -> tuple[int, int]:
    """``(lowest, highest)`` exponent of a format's non-zero finite values (``p``:
    ``decode.float_params``; subnormals at the smallest normal exponent)."""
    ebits, _, bias, ieee, _ = (int(x) for x in p)
    return 1 - bias, (1 << ebits) - 1 - ieee - bias


@functools.lru_cache(maxsize=None)
def whole_format_lanes(af, bf, frac_bits, e_floor) -> tuple[int, ExponentLanes] | None:
    """``(sh, lanes)`` of the float32 path with int8 exponent lanes for any data of A's and
    B's formats, or None: then each GEMM scans its data for them.  f16 and fp8 operands
    have one (their whole exponent ranges fit both), and skip the scans."""
    a_range, b_range = _whole_range(af), _whole_range(bf)
    sh = prescale(*a_range, *b_range, int(af[1]), int(bf[1]), frac_bits, e_floor)
    lanes = exponent_lanes(*a_range, *b_range, np.int8)
    return None if sh is None or lanes is None else (sh, lanes)


@functools.lru_cache(maxsize=1024)
def bounded_lanes(a_lo, a_hi, af, bf, frac_bits, e_floor) -> tuple[int, int, int] | None:
    """``(sh, b_lo, b_hi)``: for A's exponent range ``[a_lo, a_hi]``, the float32 path's
    power at its smallest (:func:`prescale`) and the widest range of B's exponents that
    :func:`prescale` accepts with it, or None where A alone rules the path out: any B
    whose non-zero finite elements lie in that range takes the float32 path with ``sh``,
    unscanned (:func:`b_window`).  A's own bounds on ``sh`` (its smallest value, the
    smallest scale) fix it; B's smallest element must then keep its last bit (``b_lo``),
    and the largest product stay below ``2^(127 - frac_bits)`` and within float32 at
    ``2^sh`` (``b_hi``).  For tf32 or bf16 data within a few binades of 1 that is B's
    whole range but its top 30 or so binades.  Where A has no non-zero finite element every
    product is zero, and B needs no bounds (``b_lo > b_hi``)."""
    a_man, b_man = int(af[1]), int(bf[1])
    if a_lo > a_hi:
        sh = prescale(a_lo, a_hi, 1, 0, a_man, b_man, frac_bits, e_floor)
        return None if sh is None else (sh, 1, 0)
    sh = max(frac_bits - e_floor - 127, -149 - a_lo + a_man)
    b_lo = -149 - a_lo + a_man + b_man - sh
    b_hi = min(125 - frac_bits - a_hi, 125 - a_hi - sh)
    if b_lo > b_hi or prescale(a_lo, a_hi, b_lo, b_hi, a_man, b_man, frac_bits, e_floor) != sh:
        return None
    return sh, b_lo, b_hi


#: rows of B that a GEMM leaving B unscanned reads to place its window (:func:`b_window`)
B_SAMPLE_ROWS = 64


@functools.lru_cache(maxsize=1024)
def b_window(a_lo, a_hi, s_lo, s_hi, af, bf, frac_bits, e_floor) -> tuple[int, ExponentLanes, int, int] | None:
    """``(sh, lanes, b_lo, b_hi)`` for a B left unscanned, from A's exponent range and the
    range ``[s_lo, s_hi]`` of a sample of B's rows: int8 lanes where the widest window of
    B's exponents that they allow beside A's holds the sample (three quarters of the slack
    below it, where values outside a sample are the likelier, and within the bounds of
    :func:`bounded_lanes`), else int16 lanes with those bounds.  None where A alone rules
    the float32 path out, or the sample already lies outside the bounds.  In int16 lanes
    pass 1 costs twice as much: at M = 8, N = K = 4096, bf16 took longer than with B
    scanned."""
    bounded = bounded_lanes(a_lo, a_hi, af, bf, frac_bits, e_floor)
    if bounded is None:
        return None
    sh, lo, hi = bounded
    if lo > hi or s_lo > s_hi:  # A all zeros (no bounds), or a sample of zeros: no window to place
        return sh, INT16_LANES, lo, hi
    if s_lo < lo or s_hi > hi:
        return None
    width = _int8_width(a_lo, a_hi)
    if s_hi - s_lo <= width:
        w_hi = min(hi, s_hi + (width - (s_hi - s_lo)) // 4)
        w_lo = max(lo, w_hi - width)
        lanes = exponent_lanes(a_lo, a_hi, w_lo, w_hi, np.int8)
        sh8 = prescale(a_lo, a_hi, w_lo, w_hi, int(af[1]), int(bf[1]), frac_bits, e_floor)
        if lanes is not None and sh8 is not None:
            return sh8, lanes, w_lo, w_hi
    return sh, INT16_LANES, lo, hi


@functools.lru_cache(maxsize=1024)
def _int8_width(a_lo, a_hi) -> int:
    """The widest span ``hi - lo`` of B's exponents that int8 lanes allow beside A's
    (:func:`exponent_lanes` centres each range, so only the span counts); -1 for none."""
    return max((w for w in range(256) if exponent_lanes(a_lo, a_hi, 0, w, np.int8) is not None), default=-1)


class LowCodes(NamedTuple):
    """How :func:`_rows_fma` finds, with one uint8 add and compare per term, the terms that
    rounding down moves away from zero: those that are negative and not whole on the grid.

    A term ``a * b`` is whole on the grid ``2^(e_max - frac)`` unless the exponents of the
    last set bits of the two significands (``la``, ``lb``) sum below ``e_max - frac``.  A's
    code is ``la - lo_a``, B's ``lb - lo_b``, each plus 128 by sign (A's where negative, B's
    where positive), so that the sum of two codes, modulo 256, is ``w = la + lb - wmin`` (in
    ``[0, span)``) where the signs differ and ``w + 128`` where they agree; it is below the
    threshold ``clamp(e_max - frac - wmin, 0, span)`` exactly for the terms to count.  A zero
    (or special) element's code is ``zero_a`` or ``zero_b``, chosen so that no sum with it
    falls below ``span``.  ``m_cap`` is the exponent field of the largest magic number, on a
    grid past every product (:func:`_magic`)."""

    lo_a: int
    lo_b: int
    zero_a: int
    zero_b: int
    wmin: int
    span: int
    m_cap: int


def _zero_code(others, span) -> int | None:
    """A code that, added to each of ``others`` modulo 256, never falls below ``span``."""
    for z in range(256):
        if all((z + o) % 256 >= span for o in others):
            return z
    return None


@functools.lru_cache(maxsize=None)
def low_codes(af, bf, frac_bits, e_floor, group, sh) -> LowCodes | None:
    """The :class:`LowCodes` of A's and B's formats (whole ranges), or None where the pass
    by fused multiply-adds cannot be exact for them: a group's terms must fit the magic
    number's window (``group * 2^(frac + 2) <= 2^22``), the codes' sums must not wrap into
    each other (``span <= 128``), zero codes must exist, and every magic number (``e_max``
    from ``e_floor`` up to the cap, times ``2^sh``) must be a normal float32."""
    if group << (frac_bits + 2) > 1 << 22:
        return None
    (a_lo, a_hi), (b_lo, b_hi) = _whole_range(af), _whole_range(bf)
    lo_a, lo_b = a_lo - int(af[1]), b_lo - int(bf[1])  # the last bit of the smallest subnormal
    span_a, span_b = a_hi - lo_a + 1, b_hi - lo_b + 1
    span = span_a + span_b - 1
    if span > 128:
        return None
    codes_a = [x + 128 * s for x in range(span_a) for s in (0, 1)]
    codes_b = [x + 128 * s for x in range(span_b) for s in (0, 1)]
    zero_a, zero_b = _zero_code(codes_b, span), _zero_code(codes_a, span)
    if zero_a is None or zero_b is None or (zero_a + zero_b) % 256 < span:
        return None
    e_cap = a_hi + b_hi + 2 + frac_bits  # 2^(e_cap - frac) passes every product
    m_cap = 150 + e_cap + sh - frac_bits
    m_low = 150 + e_floor + sh - frac_bits
    if not (1 <= m_low and m_cap <= 254):
        return None
    return LowCodes(lo_a, lo_b, zero_a, zero_b, lo_a + lo_b, span, m_cap)


_NO_LOW_CODES = (0, 0, 0, 0, 0, 0, 0)


def fused_gemm(rule, a, b, c, af, bf, cf, df, *, c_emin, d_emin, use_c, neg_a, neg_b,
               blocks=None, wide=None, exp_lanes=None, fma=None, narrow=None, terms=None, addend=None):
    """D bits = C + A @ B under ``rule`` (a FusedDotRule), for any M, N and K a multiple of
    ``rule.group``; where ``addend`` is given (D's bits, M x N, C-contiguous; ``use_c``
    False), D = A @ B + ``addend``, the sum's D-type value and ``addend`` added by one IEEE
    addition rounded to nearest (:func:`plus_nearest`), which the kernels do as they write D.

    ``a``, ``b``, ``c``: raw bits; ``af``..``df``: format parameter tuples
    (``decode.float_params``); ``c_emin``/``d_emin``: smallest normal exponents of C's and
    D's formats.  ``wide=None`` picks the float32 path when :func:`prescale` allows it,
    and ``exp_lanes=None`` its int8 exponent lanes when :func:`exponent_lanes` allows them
    (for the formats' whole ranges, :func:`whole_format_lanes`, else for the data's);
    True/False and np.int8/np.int16 force a path, chosen for the data's ranges (tests).
    ``fma=None`` takes pass 2 by fused multiply-adds (:func:`_rows_fma`) wherever it is
    exact and fast: the float32 path, a group size with such a kernel, :func:`low_codes`
    for the formats, x86 with AVX-512 (:func:`.register_blocks.fits_registers`).
    ``fma=False`` never takes it, ``fma=True`` must (ValueError where it cannot; tests).
    ``narrow=None`` runs a GEMM of at most :data:`NARROW_ROWS` rows in chunks of columns
    (:func:`fused_gemm_stack`, a stack of one); ``narrow=True`` always, ``narrow=False``
    never (tests).  ``blocks``: ``(KB, NB, MB)``, the largest blocks of K, N and M (by
    default those of KB_DEFAULT and the like, or :data:`NARROW_BLOCKS`).  ``terms``: the most
    non-zero products a group can hold, where fewer than its size (a spread sparse A).
    """
    a, b, c = read_only(a), read_only(b), read_only(c)  # not the addend: see _or_none
    m, kk = a.shape
    n = b.shape[1]
    if narrow or (narrow is None and m <= NARROW_ROWS):
        return fused_gemm_stack(rule, a[None], b[None], c[None], af, bf, cf, df, c_emin=c_emin, d_emin=d_emin,
                                use_c=use_c, neg_a=neg_a, neg_b=neg_b, blocks=blocks or NARROW_BLOCKS, wide=wide,
                                exp_lanes=exp_lanes, fma=fma, chunks=column_chunks(n, get_num_threads()),
                                bound_b=True, terms=terms, addend=None if addend is None else addend[None])[0]
    threads = get_num_threads()
    blocks = _block_sizes(blocks or (KB_DEFAULT, NB_DEFAULT, MB_DEFAULT), m, kk, rule.group, threads)
    path = _path(rule, a, b, af, bf, wide, exp_lanes, fma, m, terms=terms)
    specs = _gemm_specs(path.wide, path.lanes.dtype, path.lc is not None, m, kk, *blocks, rule.group)
    out, elems = _accumulator(c, use_c, (m, n))
    _check_addend(addend, rule, use_c, (m, n))
    f16 = rounding_code(rule) != ROUND_RZ
    d = np.empty((m, n), np.uint16) if f16 else out.view(np.uint32)
    in_kernel = decodes_by_blocks(af, a.itemsize * 8, path.sh)  # else decoded here first
    with POOL.arrays(specs) as arrays:
        packed, panels = arrays[:3], arrays[3:]
        if not in_kernel:
            a_rows, a_special = decode_packed(a, af, int(neg_a), path.sh, path.lanes.zero, path.lanes.off_a,
                                              *packed, *_low_args(path.lc), threads=threads)
            if path.lc is not None:
                _pad_rows(packed, m)
        a_dec = (int(neg_a), path.lanes.off_a, *_low_args(path.lc), in_kernel)
        kernel = KERNELS[(rule.group, path.wide)] if path.lc is None else FMA_KERNELS[rule.group]
        decoded_rows, b_special = _run(kernel, path, rule, packed, b, bf, neg_b, out,
                                       _or_none(addend, np.uint32), _or_none(d if f16 else None, np.uint16), use_c,
                                       c_emin, d_emin, blocks, panels, (a, af, a_dec))
        if in_kernel:
            a_rows, a_special = decoded_rows, decoded_rows.any()
        del arrays, packed, panels
    if path.scan is None:  # the rows of A with specials came from decoding it; B's columns need a scan
        special = a_special or b_special
        rows = a_rows
        cols = scan_columns(b, bf)[1] if b_special else np.zeros(n, np.bool_)
    else:
        rows, cols, special = path.scan
    if special or elems is not None:
        fix_specials(rule, a, b, c, d, af, bf, cf, df, use_c, neg_a, neg_b, rows, cols, elems, addend)
    return d


def fused_gemm_stack(rule, a, b, c, af, bf, cf, df, *, c_emin, d_emin, use_c, neg_a, neg_b,
                     blocks=(KB_DEFAULT, NB_DEFAULT, MB_DEFAULT), wide=None, exp_lanes=None, fma=None, chunks=1,
                     bound_b=False, into=None, terms=None, addend=None):
    """:func:`fused_gemm` of every GEMM of a stack, ``a[s]`` (M, K) by ``b[s]`` (K, N) plus
    ``c[s]`` (M, N) into D bits ``[s]``, bit for bit as :func:`fused_gemm` gives each: the
    path (prescale, lanes) is chosen once for the whole stack, and every path gives the same
    bits.  The threads share the GEMMs, one GEMM to a thread at a time
    (:func:`_stack_body`), so that each small GEMM costs no start of its own: for stacks of
    instruction-sized tiles, not for a few large GEMMs.  Each GEMM's columns are cut into
    ``chunks`` chunks, which the threads share too (a GEMM of few rows: :func:`fused_gemm`).
    ``bound_b`` leaves B unscanned where its format needs a scan, within a window that its
    decoding checks (:func:`b_window`); where B leaves it, the stack runs again with B
    scanned.  ``into``: where given, D's bits go there (an array of D's storage, S x M x N,
    C-contiguous): the kernels accumulate in it where D is float32 and write an f16 D's bits
    there at the end, so a caller that gathers the stack's parts in one array copies none of
    them.
    ``addend``: as :func:`fused_gemm`'s, S x M x N."""
    a, b, c = read_only(a), read_only(b), read_only(c)  # not the addend: see _or_none
    count, m, kk = a.shape
    n = b.shape[2]
    path = _path(rule, a.reshape(count * m, kk), b.reshape(count * kk, n), af, bf, wide, exp_lanes, fma, m,
                 bound_b, terms)
    KB, NB, MB = _block_sizes(blocks, m, kk, rule.group, 1)
    specs = _packed_a(path, m, kk, KB, MB, rule.group, count)
    in_place = into is not None and rounding_code(rule) == ROUND_RZ
    out, elems = _accumulator(c, use_c, (count, m, n), into.view(np.float32) if in_place else None)
    _check_addend(addend, rule, use_c, out.shape)
    f16 = rounding_code(rule) != ROUND_RZ
    if f16:  # the kernels write D's bits at the end
        d = np.empty((count, m, n), np.uint16) if into is None else into
    else:
        d = out.view(np.uint32)
    with POOL.arrays(specs) as packed:
        a_rows = decode_packed_stack(np.ascontiguousarray(a), af, int(neg_a), path.sh, path.lanes.zero,
                                     path.lanes.off_a, *packed, *_low_args(path.lc), get_num_threads())
        if path.lc is not None:
            _pad_rows(packed, m)
        kernel = STACK_KERNELS[(rule.group, path.wide)] if path.lc is None else STACK_FMA_KERNELS[rule.group]
        b_special = _run(kernel, path, rule, packed, b, bf, neg_b, out, _or_none(addend, np.uint32, (count,)),
                         _or_none(d if f16 else None, np.uint16, (count,)), use_c, c_emin, d_emin, (KB, NB, MB, chunks))
        del packed
    b_scans = {s: scan_columns(b[s], bf) for s in np.flatnonzero(b_special)}
    if path.b_range is not None and any(_outside(lo_hi, path.b_range) for lo_hi, _ in b_scans.values()):
        return fused_gemm_stack(rule, a, b, c, af, bf, cf, df, c_emin=c_emin, d_emin=d_emin, use_c=use_c,
                                neg_a=neg_a, neg_b=neg_b, blocks=blocks, wide=wide, exp_lanes=exp_lanes, fma=fma,
                                chunks=chunks, into=into, terms=terms, addend=addend)
    special = a_rows.any(axis=1) | b_special
    if elems is not None:
        special |= elems.any(axis=(1, 2))
    if special.any():  # the GEMMs with an inf or NaN in A, B or C, as fused_gemm's, in one call
        cols = np.zeros((count, n), np.bool_)
        for s, (_, b_cols) in b_scans.items():
            cols[s] = b_cols
        fix_specials(rule, a, b, c, d, af, bf, cf, df, use_c, neg_a, neg_b, a_rows, cols, elems, addend)
    return d


def _outside(lo_hi, bounds) -> bool:
    """Whether a scan's rows or columns (:func:`scan_columns`) hold a non-zero finite
    element whose exponent lies outside ``bounds``."""
    lo, hi = bounds
    return bool(((lo_hi[:, 0] < lo) | (lo_hi[:, 1] > hi)).any())


def column_chunks(n, threads) -> int:
    """How many chunks of columns a narrow GEMM of N = ``n`` is cut into: two for each
    thread, where each keeps at least :data:`NARROW_CHUNK` columns (a chunk decodes B's rows
    in runs of its width)."""
    return max(1, min(2 * threads, n // NARROW_CHUNK))


class _Path(NamedTuple):
    """What :func:`_path` chose: the float32 lanes' power ``sh`` (0 in float64 lanes, where
    ``wide``), the exponent lanes, the low codes of the pass by fused multiply-adds (None
    for the pass by conversions), ``scan``: A's rows and B's columns with an inf or NaN and
    whether any has one, where the data were scanned (None where the formats' whole ranges
    fit, :func:`whole_format_lanes`, or B was not scanned), and ``b_range``: the bounds that
    B's decoding checks, where it checks any (:func:`b_window`; else None)."""

    sh: int
    lanes: ExponentLanes
    wide: bool
    lc: LowCodes | None
    scan: tuple | None
    b_range: tuple[int, int] | None = None


def _path(rule, a, b, af, bf, wide, exp_lanes, fma, gemm_rows, bound_b=False, terms=None) -> _Path:
    """The kernels' lanes for A (M, K) and B (K, N) under ``rule`` (:func:`fused_gemm` says
    how ``wide``, ``exp_lanes`` and ``fma`` force them), for GEMMs of ``gemm_rows`` rows (A may
    stack several): ``fma=None`` takes the pass by fused multiply-adds only from
    :data:`FMA_MIN_ROWS` rows.  Where the formats need a scan of the data, ``bound_b``
    scans A and a sample of B's rows only (:func:`b_window`) if it can."""
    if fma is None and gemm_rows < FMA_MIN_ROWS:
        fma = False
    kk = a.shape[1]
    if kk % rule.group:
        raise ValueError(f"K = {kk} is not a multiple of the rule's group of {rule.group} terms")
    # a group's terms are below 2^(frac_bits + 2), C's below 2^(frac_bits + 1); ``terms`` of them non-zero
    terms = rule.group if terms is None else terms
    largest_sum = (terms << (rule.frac_bits + 2)) + (1 << (rule.frac_bits + 1))
    assert largest_sum <= 1 << 31 or terms <= WRAPPING_GROUP, "this rule's int32 sums can wrap"
    if wide is None and exp_lanes is None:
        fixed = _format_path(rule, af, bf, fma)
        if fixed is not None:
            return fixed
    scan = unscanned = None
    if bound_b and wide is None and exp_lanes is None and _checks_window(bf, b.itemsize * 8):
        a_lo, a_hi = _overall(scan_rows(a, af)[0])
        s_lo, s_hi = _overall(scan_rows(np.ascontiguousarray(b[::max(1, len(b) // B_SAMPLE_ROWS)]), bf)[0])
        unscanned = b_window(int(a_lo), int(a_hi), int(s_lo), int(s_hi), af, bf, rule.frac_bits, rule.e_zero)
    if unscanned is not None:
        (sh, lanes, *bounds), wide = unscanned, False
    else:
        a_lo, a_hi, b_lo, b_hi, rows, cols, special = scan_operands(a, af, b, bf)
        scan = (rows, cols, special)
        a_range, b_range = (int(a_lo), int(a_hi)), (int(b_lo), int(b_hi))
        sh = prescale(*a_range, *b_range, af[1], bf[1], rule.frac_bits, rule.e_zero)
        if wide is None:
            wide = sh is None
        elif not wide and sh is None:
            raise ValueError("the data's exponent range does not fit the float32 path")
        sh = 0 if wide else sh
        lanes = INT32_LANES if wide else exponent_lanes(*a_range, *b_range, exp_lanes)
        if lanes is None:
            raise ValueError("the data's exponent range does not fit int8 exponent lanes")
    lc = _pass2_codes(rule, af, bf, fma, bool(wide), sh)
    checked = unscanned is not None and bounds[0] <= bounds[1]
    return _Path(sh, lanes, bool(wide), lc, scan, tuple(bounds) if checked else None)


@functools.lru_cache(maxsize=256)
def _format_path(rule, af, bf, fma) -> _Path | None:
    """:func:`_path` where the formats' whole ranges fit the float32 path and int8 lanes
    (:func:`whole_format_lanes`: f16 and fp8), or None: the same for any data of those
    formats, so worked out once (it had taken a few microseconds of every call)."""
    whole = whole_format_lanes(af, bf, rule.frac_bits, rule.e_zero)
    if whole is None:
        return None
    sh, lanes = whole
    return _Path(sh, lanes, False, _pass2_codes(rule, af, bf, fma, False, sh), None)


def _pass2_codes(rule, af, bf, fma, wide, sh) -> LowCodes | None:
    """The :class:`LowCodes` of pass 2 by fused multiply-adds where :func:`_path` takes it
    (``fma`` as :func:`fused_gemm` has it), else None: the float32 path, a group size with
    such a kernel, :func:`low_codes` for the formats, x86 with AVX-512."""
    lc = None
    if fma is not False and not wide and HAS_MXCSR and rule.group in FMA_KERNELS:
        lc = low_codes(af, bf, rule.frac_bits, rule.e_zero, rule.group, sh)
    if fma is None and not fits_registers():
        lc = None
    if fma and lc is None:
        raise ValueError("pass 2 by fused multiply-adds is not exact for these formats, this rule or this path")
    return lc


def _checks_window(bf, width) -> bool:
    """Whether B's panel decoding checks a window for B's format (:func:`b_decoder`'s kinds
    other than ``_GENERAL``; :func:`_decode_run` has none)."""
    return _decoder_kind(bf, width) != _GENERAL


@functools.lru_cache(maxsize=256)
def _gemm_specs(wide, exp_dtype, fma, m, kk, KB, NB, MB, G) -> tuple:
    """``(dtype, shape)`` of each array of :func:`fused_gemm`'s scratch: A decoded
    (:func:`_packed_specs`) and B's panels (:func:`panel_specs`), in the lanes of a path
    (:func:`_path`: ``wide``, its exponent lanes' dtype, whether it is the pass by fused
    multiply-adds)."""
    val = np.dtype(np.float64 if wide else np.float32)
    a_specs = _packed_specs(m, kk, KB, MB, G, (val, np.dtype(exp_dtype), np.dtype(np.uint32)), fma)
    return a_specs + panel_specs(KB, NB, val, np.dtype(exp_dtype), fma)


def _packed_a(path, m, kk, KB, MB, G, count=None) -> tuple:
    """``(dtype, shape)`` of each array of A decoded (:func:`_packed_empty`) in ``path``'s
    lanes."""
    dtypes = (np.dtype(np.float64 if path.wide else np.float32), np.dtype(path.lanes.dtype), np.dtype(np.uint32))
    return _packed_specs(m, kk, KB, MB, G, dtypes, path.lc is not None, count)


def _low_args(lc):
    """``(lo, zero)`` of A's low codes for :func:`decode_packed` (none to make: zeros)."""
    return (0, 0) if lc is None else (lc.lo_a, lc.zero_a)


def _accumulator(c, use_c, shape, into=None):
    """``(out, elems)``: the float32 array the kernels accumulate in (C's values, or empty
    where no C is read), ``into`` where given, else a new one, and C's elements that are inf
    or NaN (None where there are none), which start at 0 here and are recomputed by
    :func:`fixup_specials`."""
    out = np.empty(shape, np.float32) if into is None else into
    if not use_c:
        return out, None
    values = c.view(np.float16) if c.dtype == np.uint16 else c.view(np.float32)
    if values.dtype == np.float32 and values.flags.c_contiguous and out.flags.c_contiguous:
        if not _copy_finite(values.reshape(-1), out.reshape(-1)):  # a third of numpy's time
            return out, None
    else:
        np.copyto(out, values)
    finite = np.isfinite(values)
    if finite.all():
        return out, None
    out[~finite] = 0
    return out, ~finite


@njit(cache=True)
def _copy_finite(src, dst):
    """``dst = src`` (float32, 1-D) with every inf and NaN as 0; returns how many there were."""
    bad = 0
    for i in range(src.size):
        x = src[i]
        finite = np.isfinite(x)
        dst[i] = x if finite else np.float32(0)
        bad += not finite
    return bad


def _run(kernel, path, rule, packed, b, bf, neg_b, out, addend, d16, use_c, c_emin, d_emin, blocks, panels=(),
         a_dec=()):
    """``kernel`` (of :data:`KERNELS` and the like) on A's arrays (decoded, or for
    :data:`KERNELS` to be decoded as ``a_dec``, ``(bits, format, decoding)``, says:
    :func:`_gemm_body`), B's bits, the accumulator ``out``, ``addend`` and ``d16`` (empty
    rows for none: :func:`_write_tile`) (and for :data:`KERNELS`, the
    memory of B's ``panels``); what it returns (:data:`KERNELS`: A's rows with an inf or
    NaN, where it decoded A, and whether B holds one; the stack kernels: which GEMMs' B hold
    one)."""
    lanes = path.lanes
    kernel_lanes = (lanes.zero, lanes.off_b, lanes.thr, lanes.off_a + lanes.off_b, *(path.b_range or (1, 0)))
    return kernel(*packed, b, bf, int(neg_b), kernel_lanes, _NO_LOW_CODES if path.lc is None else tuple(path.lc),
                  *panels, out, addend, d16, bool(use_c), rule.frac_bits, path.sh, rule.e_zero, rule.out_man_bits,
                  rounding_code(rule), c_emin, d_emin, *blocks, *a_dec)


def _d_bits(out, rule):
    """D's bits from the accumulator: float32's own, or f16's (the f16 mode, whose sums the
    kernels rounded to f16 values, so the conversion is exact; numpy's ``astype`` converts
    on one core, 1.5 ms for 1M elements).  The blocked kernels write an f16 D's bits
    themselves (:func:`_write_tile`); :mod:`.small_gemm` converts by this."""
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
