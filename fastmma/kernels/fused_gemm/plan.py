"""Choosing a GEMM's path: prescale, exponent lanes, windows, low codes, block sizes and scratch layouts."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from ..fp_env import HAS_MXCSR
from ..register_blocks import COLUMNS, ROWS, fits_registers
from ..scratch import ALIGN, carve, layout, on_cache_line
from .decode import NEG_EXP, ZERO_EXP8, _GENERAL, _decoder_kind
from .passes import EXPONENT_COLUMNS, FMA_GROUPS, _padded
from .scan import _overall, scan_operands, scan_rows

KB_DEFAULT, NB_DEFAULT, MB_DEFAULT = 2048, 256, 64
#: A GEMM of at most NARROW_ROWS rows (a GEMV, a few tokens' activations) runs in chunks of
#: B's columns (:func:`_stack_body`), each thread decoding B's panels for its own chunk, in
#: blocks of NARROW_BLOCKS: with the row blocks' panels it would decode B in runs that cross
#: a page every 512 bytes and run its one block of rows on one thread (timings:
#: docs/performance.md, "GEMMs of few rows").
NARROW_ROWS = 32
NARROW_BLOCKS = (64, 1024, MB_DEFAULT)
#: the narrowest chunk of columns a narrow GEMM is cut into
NARROW_CHUNK = 256
#: The stack kernels take the pass by fused multiply-adds (``fma=None``) for GEMMs of at
#: least this many rows: it runs blocks of 4 rows and sets up each column's magic numbers
#: and B's low codes, which fewer rows do not repay (timings: docs/performance.md, "GEMMs of
#: few rows").
FMA_MIN_ROWS = 16
#: The most non-zero terms a group's int32 sum may hold where its sum plus the accumulator's
#: term can pass 2^31: 16 terms below 2^27 (f16 and bf16 keep 25 fraction bits) plus C's
#: below 2^26, in the rows where :func:`_may_wrap` finds a sum that close to it (any group
#: whose bound passes 2^31 takes that test: :func:`_finish_group`).  The other rules' sums
#: cannot pass it (tf32: 8 or 4 such terms; fp8: 32, or 64 in a spread group, below 2^15).
#: A sparse A spread to its dense columns (:func:`fastmma.kernels.execute_spread`) has f16
#: groups of 32 with 16 non-zero terms.
WRAPPING_GROUP = 16


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
        if end > last + 1:  # else none to copy, and numpy's empty copies are not free
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
    the float32 path out, or the sample already lies outside the bounds.  int16 lanes hold
    half as many exponents a vector as int8 ones, so pass 1 in them can cost more than
    scanning B would save."""
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
    formats, so worked out once rather than in every call."""
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
    if fma is not False and not wide and HAS_MXCSR and rule.group in FMA_GROUPS:
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
