"""Double-precision fused multiply-add, bit for bit as the H100 tensor core computes it.

The rule
--------
``wmma.mma.sync.aligned.{alayout}.{blayout}.m8n8k4.{rnd}.f64.f64.f64.f64`` (PTX ISA, "Warp
Level Matrix Multiply-Accumulate Instructions", section wmma.mma; "Floating point: .f64
... rounding modifiers" .rn, .rz, .rm, .rp) computes every element of D as a chain of four
fused multiply-adds over k = 0, 1, 2, 3 in increasing order, starting from C::

    d = C[i, j]
    d = fma(A[i, 0], B[0, j], d)
    d = fma(A[i, 1], B[1, j], d)
    d = fma(A[i, 2], B[2, j], d)
    d = fma(A[i, 3], B[3, j], d)
    D[i, j] = d

Each fma is IEEE 754 fusedMultiplyAdd: the exact a*b + c is rounded once, in the direction
the instruction names (.rn to nearest even, .rz toward zero, .rm toward -inf, .rp toward
+inf).  Subnormal inputs and results are honoured (no flush to zero).  Overflow follows the
direction: .rn gives inf, .rz the largest finite number, .rm gives -inf for negative and
+max finite for positive results, .rp +inf for positive and -max finite for negative ones.
An exact zero sum of operands of opposite sign (x + (-x), including +0 + -0) is +0, except
under .rm, where it is -0; zeros of equal sign keep that sign.

What the hardware recordings (tests/golden/wmma/wmma.m8n8k4.*.f64.*, 256 cases, 16384
outputs, all reproduced by this module) showed about special values:

* A NaN operand propagates with its sign and payload, quieted (fraction bit 51 set).  When
  more than one operand of an fma is NaN, the B element's NaN wins, then the accumulator's
  (C, or the running d), then the A element's, whether quiet or signalling: a quiet NaN in
  the accumulator beats a signalling NaN in A.  (x86 FMA instructions choose by their own
  operand order, so a host FMA can return a different NaN.)
* An invalid operation (inf * 0, or inf - inf between the product and the accumulator)
  with no NaN operand gives the default NaN ``0xFFF8000000000000`` (sign bit set).  inf * 0
  with a NaN accumulator gives that NaN, quieted.
* Infinities otherwise follow IEEE: inf * finite nonzero is a signed inf, inf + finite is
  that inf.
* Zeros: a zero product plus a zero of the other sign gives +0 under .rn, .rz and .rp and
  -0 under .rm (recorded in all four directions).  No recorded fma cancels a nonzero
  product exactly; that case follows the same IEEE rule here.

Two kernels give these bits.  :func:`mma_f64_kernel` works on raw ``uint64`` bit patterns
with integer arithmetic only (:func:`fma_bits` is its scalar fma): the reference, on any
CPU.  :func:`fma_gemm` runs the chains on the CPU's own fused multiply-adds with x86's
rounding direction set to the instruction's, which is the same IEEE operation wherever the
operands are finite, and hands the elements that meet an inf or NaN to the first; it is
hundreds of times faster on a large product, and :func:`mma_f64` takes it there on x86.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import get_num_threads, njit, prange, types
from numba.extending import intrinsic

from ..errors import OperandError
from ..formats import is_int
from .fp_env import HAS_MXCSR, MXCSR_DOWN, MXCSR_NEAREST, MXCSR_TOWARD_ZERO, MXCSR_UP, read_mxcsr, write_mxcsr
from .operands import read_only
from .register_blocks import COLUMNS64, ROWS, fits_registers, fma_block64
from .vector_ops import fma_f64

# Rounding codes, one per PTX rounding modifier.
RN = 0  # .rn: to nearest, ties to even
RZ = 1  # .rz: toward zero
RM = 2  # .rm: toward -inf
RP = 3  # .rp: toward +inf
ROUNDING_CODES = {"rn": RN, "rz": RZ, "rm": RM, "rp": RP}

SIGN_BIT = np.uint64(0x8000000000000000)
ABS_MASK = np.uint64(0x7FFFFFFFFFFFFFFF)
FRACTION_MASK = np.uint64(0x000FFFFFFFFFFFFF)
HIDDEN_BIT = np.uint64(0x0010000000000000)
QUIET_BIT = np.uint64(0x0008000000000000)
INF_BITS = np.uint64(0x7FF0000000000000)
MAX_FINITE_BITS = np.uint64(0x7FEFFFFFFFFFFFFF)
DEFAULT_NAN = np.uint64(0xFFF8000000000000)  # the GPU's NaN for inf*0 and inf-inf

_ZERO = np.uint64(0)
_ONE = np.uint64(1)
_LOW32 = np.uint64(0xFFFFFFFF)
_PRODUCT_SHIFT = 20  # puts the 105/106-bit product at bits 124/125 of 128
_ADDEND_SHIFT = 73  # puts C's 53-bit significand at bit 125 of 128
_EXP_OFFSET = 1075  # value = significand * 2**(biased exponent - 1075)


@intrinsic
def _clz64(typingctx, x):
    """Leading zero bits of a uint64 (64 for zero), as LLVM's ctlz."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctlz(args[0], ir.Constant(ir.IntType(1), 0))

    return sig, codegen


# ---- classification -------------------------------------------------------------------


@njit(cache=True)
def _is_nan(x):
    return (x & ABS_MASK) > INF_BITS


@njit(cache=True)
def _is_inf(x):
    return (x & ABS_MASK) == INF_BITS


@njit(cache=True, inline="always")
def _special(x):
    """Whether the float64 bits ``x`` are an inf or a NaN."""
    return (x & INF_BITS) == INF_BITS


@njit(cache=True)
def _is_zero(x):
    return (x & ABS_MASK) == _ZERO


@njit(cache=True)
def _unpack(x):
    """Significand with bit 52 set, and biased exponent, of a finite nonzero double."""
    biased = np.int64((x >> np.uint64(52)) & np.uint64(0x7FF))
    fraction = x & FRACTION_MASK
    if biased != 0:
        return fraction | HIDDEN_BIT, biased
    shift = _clz64(fraction) - 11
    return fraction << np.uint64(shift), np.int64(1) - shift


# ---- 128-bit unsigned integers as (hi, lo) ------------------------------------------


@njit(cache=True)
def _mul_53x53(x, y):
    """Exact 128-bit product of two significands below 2**53."""
    x1, x0 = x >> np.uint64(32), x & _LOW32
    y1, y0 = y >> np.uint64(32), y & _LOW32
    mid = x1 * y0 + x0 * y1  # < 2**54
    lo = x0 * y0
    mid_lo = (mid & _LOW32) << np.uint64(32)
    new_lo = lo + mid_lo
    carry = _ONE if new_lo < lo else _ZERO
    return x1 * y1 + (mid >> np.uint64(32)) + carry, new_lo


@njit(cache=True)
def _shift_left(hi, lo, n):
    """(hi, lo) << n for 0 <= n < 64, the result known to fit in 128 bits."""
    if n == 0:
        return hi, lo
    return (hi << np.uint64(n)) | (lo >> np.uint64(64 - n)), lo << np.uint64(n)


@njit(cache=True)
def _shift_right_jam(hi, lo, n):
    """(hi, lo) >> n, with bit 0 set if any 1 bit was shifted out (sticky), for n >= 0."""
    if n == 0:
        return hi, lo
    if n < 64:
        lost = lo << np.uint64(64 - n)
        lo = (lo >> np.uint64(n)) | (hi << np.uint64(64 - n))
        hi = hi >> np.uint64(n)
    elif n == 64:
        lost, lo, hi = lo, hi, _ZERO
    elif n < 128:
        lost = lo | (hi << np.uint64(128 - n))
        lo, hi = hi >> np.uint64(n - 64), _ZERO
    else:
        lost, lo, hi = lo | hi, _ZERO, _ZERO
    if lost != _ZERO:
        lo |= _ONE
    return hi, lo


@njit(cache=True)
def _add(xh, xl, yh, yl):
    lo = xl + yl
    carry = _ONE if lo < xl else _ZERO
    return xh + yh + carry, lo


@njit(cache=True)
def _sub(xh, xl, yh, yl):
    """x - y for x >= y."""
    borrow = _ONE if xl < yl else _ZERO
    return xh - yh - borrow, xl - yl


@njit(cache=True)
def _less(xh, xl, yh, yl):
    return xh < yh or (xh == yh and xl < yl)


@njit(cache=True)
def _bit_length(hi, lo):
    if hi != _ZERO:
        return 128 - _clz64(hi)
    return 64 - _clz64(lo)


# ---- rounding -------------------------------------------------------------------------


@njit(cache=True)
def _exact_zero(rounding):
    """Exact zero sum of two operands of opposite sign: +0, or -0 under .rm."""
    return SIGN_BIT if rounding == RM else _ZERO


@njit(cache=True)
def _overflow(sign, rounding):
    """Result of an overflow in direction ``rounding``: inf or the largest finite value."""
    negative = sign != _ZERO
    to_inf = rounding == RN or (rounding == RM and negative) or (rounding == RP and not negative)
    return (INF_BITS if to_inf else MAX_FINITE_BITS) | sign


@njit(cache=True)
def _round_up(sign, lsb, round_bit, sticky, rounding):
    """Whether the truncated significand must be incremented by one ulp."""
    if rounding == RN:
        return round_bit and (sticky or lsb)
    inexact = round_bit or sticky
    if rounding == RM:
        return inexact and sign != _ZERO
    if rounding == RP:
        return inexact and sign == _ZERO
    return False


@njit(cache=True)
def _round_pack(sign, hi, lo, scale, rounding):
    """Round sign * (hi, lo) * 2**scale (nonzero) to a double in direction ``rounding``."""
    top = _bit_length(hi, lo) - 1
    exponent = top + scale  # value lies in [2**exponent, 2**(exponent + 1))
    if exponent > 1023:
        return _overflow(sign, rounding)
    if exponent < -1022:
        exponent = -1022  # subnormal: the ulp is 2**-1074
    lsb = exponent - 52 - scale  # bit index of the ulp in (hi, lo)
    # t holds the significand, then a round bit, then a sticky bit.
    if lsb >= 2:
        hi, lo = _shift_right_jam(hi, lo, lsb - 2)
        t = lo
    else:
        t = lo << np.uint64(2 - lsb)  # the value has at most 54 bits here
    mantissa = t >> np.uint64(2)
    round_bit = (t & np.uint64(2)) != _ZERO
    sticky = (t & _ONE) != _ZERO
    if _round_up(sign, (mantissa & _ONE) != _ZERO, round_bit, sticky, rounding):
        mantissa += _ONE  # a carry out of the significand bumps the exponent field
    bits = (np.uint64(exponent + 1022) << np.uint64(52)) + mantissa
    if bits >= INF_BITS:
        return _overflow(sign, rounding)
    return bits | sign


# ---- the fused multiply-add ----------------------------------------------------------


@njit(cache=True)
def _fma_special(a, b, c):
    """The result when an operand is NaN or inf (check with ``_has_special`` first)."""
    if _is_nan(b):
        return b | QUIET_BIT
    if _is_nan(c):
        return c | QUIET_BIT
    if _is_nan(a):
        return a | QUIET_BIT
    product_sign = (a ^ b) & SIGN_BIT
    if _is_inf(a) or _is_inf(b):
        if _is_zero(a) or _is_zero(b):
            return DEFAULT_NAN
        if _is_inf(c) and (c & SIGN_BIT) != product_sign:
            return DEFAULT_NAN
        return INF_BITS | product_sign
    return c  # c is inf, the product finite


@njit(cache=True)
def _has_special(a, b, c):
    return _special(a) or _special(b) or _special(c)


@njit(cache=True)
def _fma_zero_product(product_sign, c, rounding):
    if not _is_zero(c):
        return c
    if product_sign == (c & SIGN_BIT):
        return c
    return _exact_zero(rounding)


@njit(cache=True)
def _fma_finite(a, b, c, rounding):
    """fma of finite operands whose product is nonzero."""
    product_sign = (a ^ b) & SIGN_BIT
    ma, ea = _unpack(a)
    mb, eb = _unpack(b)
    ph, pl = _mul_53x53(ma, mb)
    ph, pl = _shift_left(ph, pl, _PRODUCT_SHIFT)
    p_scale = ea + eb - 2 * _EXP_OFFSET - _PRODUCT_SHIFT
    if _is_zero(c):
        return _round_pack(product_sign, ph, pl, p_scale, rounding)
    mc, ec = _unpack(c)
    ch, cl = mc << np.uint64(_ADDEND_SHIFT - 64), _ZERO
    c_scale = ec - _EXP_OFFSET - _ADDEND_SHIFT
    c_sign = c & SIGN_BIT
    if p_scale >= c_scale:
        ch, cl = _shift_right_jam(ch, cl, p_scale - c_scale)
        scale = p_scale
    else:
        ph, pl = _shift_right_jam(ph, pl, c_scale - p_scale)
        scale = c_scale
    if product_sign == c_sign:
        sh, sl = _add(ph, pl, ch, cl)
        return _round_pack(product_sign, sh, sl, scale, rounding)
    if _less(ph, pl, ch, cl):
        sh, sl = _sub(ch, cl, ph, pl)
        return _round_pack(c_sign, sh, sl, scale, rounding)
    sh, sl = _sub(ph, pl, ch, cl)
    if sh == _ZERO and sl == _ZERO:
        return _exact_zero(rounding)
    return _round_pack(product_sign, sh, sl, scale, rounding)


@njit(cache=True)
def _fma(a, b, c, rounding):
    """fma on uint64 bit patterns; ``rounding`` must be a valid code."""
    if _has_special(a, b, c):
        return _fma_special(a, b, c)
    if _is_zero(a) or _is_zero(b):
        return _fma_zero_product((a ^ b) & SIGN_BIT, c, rounding)
    return _fma_finite(a, b, c, rounding)


@njit("uint64(uint64, uint64, uint64, int64)", cache=True)
def fma_bits(a, b, c, rounding):
    """Bits of fma(a, b, c) = a*b + c rounded once, as the H100's f64 tensor-core FMA.

    ``a``, ``b``, ``c`` are float64 bit patterns (uint64, or ints in [0, 2**64)); ``a`` is the A
    element and ``b`` the B element of the mma, which matters for NaN precedence (B, then
    C, then A).  ``rounding`` is RN, RZ, RM or RP.  Returns a uint64.
    """
    if rounding < 0 or rounding > 3:
        raise ValueError("rounding must be 0 (rn), 1 (rz), 2 (rm) or 3 (rp)")
    return _fma(a, b, c, rounding)


# ---- the whole-array kernel -----------------------------------------------------------


@njit(cache=True, inline="always")
def _chain_row(a, b, c, d, i, rounding):
    """Row ``i`` of D: each element C's, then one fma for each k in increasing order."""
    n = b.shape[1]
    for j in range(n):
        d[i, j] = c[i, j]
    for k in range(a.shape[1]):
        a_ik = a[i, k]
        for j in range(n):
            d[i, j] = _fma(a_ik, b[k, j], d[i, j], rounding)


@njit(cache=True, parallel=True)
def mma_f64_kernel(a, b, c, rounding):
    """D = A*B + C on bit patterns, each element a chain of fmas over k = 0, 1, ..., K-1.

    ``a`` is uint64[M, K], ``b`` uint64[K, N], ``c`` uint64[M, N]; shapes and ``rounding``
    are not checked (``mma_f64`` does).  Rows of D are computed in parallel.
    """
    d = np.empty((a.shape[0], b.shape[1]), dtype=np.uint64)
    for i in prange(a.shape[0]):
        _chain_row(a, b, c, d, i, rounding)
    return d


@njit(cache=True, parallel=True)
def mma_f64_stack_kernel(a, b, c, rounding):
    """:func:`mma_f64_kernel` for each GEMM of a stack, ``a`` uint64[S, M, K], ``b`` [S, K,
    N], ``c`` [S, M, N]: the rows of all of them shared among the threads."""
    count, m = a.shape[0], a.shape[1]
    d = np.empty((count, m, b.shape[2]), dtype=np.uint64)
    for si in prange(count * m):
        s = si // m
        _chain_row(a[s], b[s], c[s], d[s], si % m, rounding)
    return d


#: MXCSR for each rounding code (RN, RZ, RM, RP): every exception masked, no flush to zero
_MXCSR_BY_ROUNDING = (MXCSR_NEAREST, MXCSR_TOWARD_ZERO, MXCSR_DOWN, MXCSR_UP)
#: Blocks of fma_gemm: a KB x NB panel of B (1 MiB) stays in a core's L2 cache while the rows pass
_KB, _NB = 256, 512


@njit(cache=True, parallel=True)
def fma_gemm(a, b, c, rounding, blocks, split=False):
    """:func:`mma_f64_kernel`'s D by the CPU's own fused multiply-adds (x86: :data:`.fp_env.HAS_MXCSR`).

    For finite operands the H100's chain is IEEE 754's fusedMultiplyAdd in the instruction's
    direction, step after step (the module's rule), and so is the CPU's ``vfmadd`` with MXCSR
    set to that direction and no flush to zero: overflow, subnormals and the sign of an exact
    zero follow the same standard.  A chain of finite operands never meets a NaN (its
    products are finite, so an accumulator that overflowed to inf stays inf).  Where an
    element's chain has an inf or NaN operand (its row of A, its column of B or its C), the
    GPU's choice of NaN is not the CPU's, and the element is recomputed by :func:`_fma`.
    B is taken in panels that stay in cache; where ``blocks`` (AVX-512:
    :func:`.register_blocks.fits_registers`) the chains of ``ROWS`` rows by ``COLUMNS64``
    columns stay in registers through a panel (:func:`.register_blocks.fma_block64`), each
    block of the panel's columns copied to be contiguous first, and otherwise run in 8 float64
    lanes across a row.  The blocks at D's right and bottom edges are padded with copies of
    the last column of B and the last row of A (:func:`_edge_block`), so that the edges too
    run in register blocks rather than in plain row loops, several times slower.  The
    threads share blocks of ``ROWS`` rows, or where ``split`` (with ``blocks``: fewer blocks
    of rows than threads, :func:`mma_f64`) each block of rows by each register block of
    columns, so that a matrix-vector product does not run on one thread."""
    m, kk = a.shape
    n = b.shape[1]
    d = np.empty((m, n), np.uint64)
    af, bf, cf, df = a.view(np.float64), b.view(np.float64), c.view(np.float64), d.view(np.float64)
    mxcsr = np.int32(_MXCSR_BY_ROUNDING[rounding])
    packed = np.empty((_NB // COLUMNS64, _KB, COLUMNS64), np.float64)  # a panel's blocks of columns, each contiguous
    for jb in range(0, n, _NB):
        nb = min(_NB, n - jb)
        njl = (nb + COLUMNS64 - 1) // COLUMNS64  # register blocks of columns
        per = 1 if split and blocks else njl  # of them to a task
        ntc = (njl + per - 1) // per
        for kb in range(0, kk, _KB):
            kbs = min(_KB, kk - kb)
            bpan = bf[kb:kb + kbs, jb:jb + nb]
            if blocks:
                for k in prange(kbs):
                    _pack_row(packed, bpan, k)
            for t in prange(((m + ROWS - 1) // ROWS) * ntc):
                saved = read_mxcsr()
                write_mxcsr(mxcsr)
                i0 = (t // ntc) * ROWS
                nr = min(ROWS, m - i0)
                jl0 = (t % ntc) * per
                j0 = jb + jl0 * COLUMNS64
                nc = min(jb + nb, j0 + per * COLUMNS64) - j0
                if kb == 0:  # the chains start from C
                    for q in range(nr):
                        drow, crow = df[i0 + q, j0:j0 + nc], cf[i0 + q, j0:j0 + nc]
                        for j in range(nc):
                            drow[j] = crow[j]
                if blocks:
                    _row_block_chains(af, df, packed, i0, nr, jb, nb, kb, kbs, jl0, min(njl, jl0 + per))
                else:
                    _row_chains(af, df, bpan, i0, nr, jb, kb)
                write_mxcsr(saved)
    col_special = np.zeros(n, np.bool_)
    for jc in prange((n + _NB - 1) // _NB):  # B's columns in chunks, each scanned by one thread
        cs = col_special[jc * _NB:min(n, jc * _NB + _NB)]
        for k in range(kk):
            brow = b[k, jc * _NB:jc * _NB + len(cs)]
            for j in range(len(cs)):
                cs[j] |= _special(brow[j])
    for i in prange(m):
        _recompute_specials(a, b, c, d, i, col_special, rounding)
    return d


@njit(cache=True, inline="always")
def _pack_row(packed, bpan, k):
    """Row ``k`` of the panel into ``packed``, block by block of ``COLUMNS64`` columns, the
    last block filled up with copies of the panel's last column."""
    nb = bpan.shape[1]
    src = bpan[k]
    for jl in range((nb + COLUMNS64 - 1) // COLUMNS64):
        dst = packed[jl, k]
        j0 = jl * COLUMNS64
        for j in range(COLUMNS64):
            dst[j] = src[min(j0 + j, nb - 1)]


@njit(cache=True, inline="always")
def _row_block_chains(af, df, packed, i0, nr, jb, nb, kb, kbs, jl_lo, jl_hi):
    """The chains of rows ``i0 .. i0 + nr`` through the register blocks ``jl_lo .. jl_hi``
    of the panel packed in ``packed`` (rows ``kb .. kb + kbs`` of B, columns ``jb .. jb +
    nb``), in the caller's rounding direction: register blocks in place in D, and at D's
    edges on padded copies (:func:`_edge_block`)."""
    edge_a = np.empty((ROWS, kbs), np.float64)
    edge_d = np.empty((ROWS, COLUMNS64), np.float64)
    if nr < ROWS:  # A's last rows, filled up with copies of its last row
        for q in range(ROWS):
            src = af[i0 + min(q, nr - 1), kb:kb + kbs]
            for k in range(kbs):
                edge_a[q, k] = src[k]
    for jl in range(jl_lo, jl_hi):
        j0 = jb + jl * COLUMNS64
        nc = min(COLUMNS64, jb + nb - j0)
        if nr == ROWS and nc == COLUMNS64:
            fma_block64(af[i0:i0 + ROWS, kb:kb + kbs], packed[jl], df[i0:i0 + ROWS, j0:j0 + COLUMNS64], 0, 0, kbs)
        else:
            ablock = edge_a if nr < ROWS else af[i0:i0 + ROWS, kb:kb + kbs]
            _edge_block(ablock, packed[jl], df[i0:i0 + nr, j0:j0 + nc], edge_d, kbs)


@njit(cache=True, inline="always")
def _edge_block(ablock, bblock, dblock, edge_d, kbs):
    """A register block whose rows or columns of D run past D's edge: ``dblock`` (its part
    inside D) is copied into ``edge_d`` and filled up with copies of its last row and
    column, run through ``fma_block64`` with ``ablock`` and ``bblock`` (both padded alike),
    and copied back.  A padded lane repeats a real one's chain, so it raises nothing new."""
    nr, nc = dblock.shape
    for q in range(ROWS):
        src = dblock[min(q, nr - 1)]
        for j in range(COLUMNS64):
            edge_d[q, j] = src[min(j, nc - 1)]
    fma_block64(ablock, bblock, edge_d, 0, 0, kbs)
    for q in range(nr):
        dst = dblock[q]
        for j in range(nc):
            dst[j] = edge_d[q, j]


@njit(cache=True, inline="always")
def _row_chains(af, df, bpan, i0, nr, jb, kb):
    """The chains of rows ``i0 .. i0 + nr`` through the panel ``bpan`` (rows ``kb ..`` of B,
    columns ``jb ..``) by plain row loops, 8 float64 lanes across a row (no AVX-512)."""
    kbs, nb = bpan.shape
    for q in range(nr):
        drow = df[i0 + q, jb:jb + nb]
        for k in range(kbs):
            x = af[i0 + q, kb + k]
            brow = bpan[k]
            for j in range(nb):
                drow[j] = fma_f64(x, brow[j], drow[j])


@njit(cache=True, inline="always")
def _recompute_specials(a, b, c, d, i, col_special, rounding):
    """Row ``i`` of D by :func:`_fma` where an element's chain has an inf or NaN operand."""
    row_special = False
    for k in range(a.shape[1]):
        row_special |= _special(a[i, k])
    for j in range(b.shape[1]):
        if row_special or col_special[j] or _special(c[i, j]):
            acc = c[i, j]
            for k in range(a.shape[1]):
                acc = _fma(a[i, k], b[k, j], acc, rounding)
            d[i, j] = acc


#: The work (M * N * K fmas) from which mma_f64 takes fma_gemm by default: below it, the
#: integer kernel's single parallel loop starts faster than fma_gemm's several
HOST_FMA_MIN_WORK = 1 << 14


def mma_f64(a, b, c, rounding, *, host_fma=None):
    """D = A*B + C for float64 bit patterns, as ``wmma.mma ... .{rnd}.f64`` computes it.

    ``a``: uint64[M, K], ``b``: uint64[K, N], ``c``: uint64[M, N] (raw IEEE bits);
    ``rounding``: RN, RZ, RM or RP (or the names "rn", "rz", "rm", "rp").  Each D[i, j] is
    fma(A[i, K-1], B[K-1, j], ... fma(A[i, 0], B[0, j], C[i, j])), every fma rounded once.
    ``host_fma``: True, by the CPU's FMAs where the operands are finite (:func:`fma_gemm`,
    x86 only); False, every fma in integer arithmetic (:func:`mma_f64_kernel`); None, the
    first on x86 from :data:`HOST_FMA_MIN_WORK` fmas up.  The same bits.
    Returns uint64[M, N].  Raises OperandError for wrong dtypes, shapes or rounding.
    """
    rounding = _rounding_code(rounding)
    a, b, c = (_bits_matrix(x, name) for x, name in ((a, "a"), (b, "b"), (c, "c")))
    if a.shape[1] != b.shape[0] or c.shape != (a.shape[0], b.shape[1]):
        raise OperandError(
            f"mma_f64 needs a[M, K], b[K, N], c[M, N]; got a{list(a.shape)}, "
            f"b{list(b.shape)}, c{list(c.shape)}"
        )
    if host_fma is None:
        host_fma = HAS_MXCSR and a.shape[0] * b.shape[1] * a.shape[1] >= HOST_FMA_MIN_WORK
    elif host_fma and not HAS_MXCSR:
        raise ValueError("host_fma needs x86's MXCSR to set the rounding direction")
    if host_fma:
        blocks = fits_registers()
        return fma_gemm(a, b, c, rounding, blocks, blocks and -(-a.shape[0] // ROWS) < get_num_threads())
    return mma_f64_kernel(a, b, c, rounding)


def mma_f64_stack(a, b, c, rounding):
    """:func:`mma_f64` for each GEMM of a stack (uint64 ``a[S, M, K]``, ``b[S, K, N]``,
    ``c[S, M, N]``) in one call, by the integer kernel: for stacks of small GEMMs (the f64
    wmma's 8x8x4), whose rows the threads share.  Returns uint64[S, M, N]."""
    rounding = _rounding_code(rounding)
    a, b, c = (_bits_matrix(x, name, ndim=3) for x, name in ((a, "a"), (b, "b"), (c, "c")))
    if (a.shape[0] != b.shape[0] or c.shape[0] != a.shape[0] or a.shape[2] != b.shape[1]
            or c.shape[1:] != (a.shape[1], b.shape[2])):
        raise OperandError(f"mma_f64_stack needs a[S, M, K], b[S, K, N], c[S, M, N]; got a{list(a.shape)}, "
                           f"b{list(b.shape)}, c{list(c.shape)}")
    return mma_f64_stack_kernel(a, b, c, rounding)


def _rounding_code(rounding) -> int:
    if isinstance(rounding, str) and rounding.lstrip(".") in ROUNDING_CODES:
        return ROUNDING_CODES[rounding.lstrip(".")]
    if is_int(rounding) and 0 <= rounding <= 3:
        return int(rounding)
    raise OperandError(f"rounding must be 0..3 or one of 'rn', 'rz', 'rm', 'rp'; got {rounding!r}")


def _bits_matrix(x, name, ndim=2):
    """``x`` as a C-contiguous, read-only uint64 array of ``ndim`` dimensions (a matrix, or a
    stack of them), or an :class:`OperandError` naming ``name``."""
    x = np.asarray(x)
    if x.dtype != np.uint64 or x.ndim != ndim:
        raise OperandError(
            f"{name} must be a {ndim}-D uint64 array of float64 bit patterns; "
            f"got dtype {x.dtype}, shape {list(x.shape)}"
        )
    return read_only(np.ascontiguousarray(x))
