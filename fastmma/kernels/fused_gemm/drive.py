"""Blocking and the entry points: the parallel kernels, from a table of variants, and
:func:`fused_gemm` and :func:`fused_gemm_stack`."""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from ..fp_env import MXCSR_NEAREST, MXCSR_TOWARD_ZERO, read_mxcsr, write_mxcsr
from ..fused_dot import ROUND_RZ, rounding_code
from ..operands import read_only
from ..register_blocks import COLUMNS, ROWS
from ..scratch import POOL
from ..variants import variant
from .decode import (_GENERAL, _I32, _decode_a_block, _decode_b_run, _decode_run, _flags, _low_run_values, b_decoder,
                     decode_packed, decode_packed_stack, decodes_by_blocks, f32_decoder)
from .passes import (EXPONENT_COLUMNS, FLOAT_LANES, ROW_FUNCTIONS, _NO_LOW_CODES, _VARIANTS, _aligned_empty, _pad_run,
                     _padded, _variant_name)
from .plan import (KB_DEFAULT, MB_DEFAULT, NARROW_BLOCKS, NARROW_ROWS, NB_DEFAULT, _block_sizes, _gemm_specs, _low_args,
                   _outside, _packed_a, _pad_rows, _path, column_chunks)
from .rounding import f16_bits_of_f32, plus_nearest, value_of_bits
from .scan import scan_columns
from .specials import _check_addend, _or_none, fix_specials

#: B's panels are decoded in chunks of this many rows, each on one thread, which sets its
#: MXCSR once for the chunk, so that a GEMV's decoding does not pay the two writes per row
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
    kernel's parallel loop."""
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
def _gemm_body(a_val, a_exp, a_low, a_bits, af, a_dec, b, bf, neg_b, lanes, lc, bpan, epan, lpan, out, addend,
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
    compiles no decoding into them), ``af`` its format's parameters; ``a_dec``: ``(neg,
    off, lo, low_zero, decode)`` (a tuple of scalars: numba's parallel loops mishandle one
    that nests another).
    Where ``decode``, A is still to be decoded from ``a_bits`` into ``a_val``, ``a_exp`` and
    ``a_low``: each task of the first block of columns decodes the block of rows it
    computes, before it computes (:func:`_decode_a_block`), because a parallel loop of its
    own would start the threads once more, which a small GEMM feels."""
    # (one tuple: CPython passes a call of more than 30 arguments as *args, which numba cannot inline)
    KB, NB, MB, j_lo, j_hi = blocks
    neg_a, off_a, a_lo, a_low_zero, decode_a = a_dec
    a_special = _flags(_row_count(a_bits))
    b_special = _flags(b.shape[0])  # per chunk of B's rows (at its first), each set by one thread
    m = out.shape[0]
    kk = b.shape[0]
    zero, off_b, thr, po, b_lo, b_hi = lanes
    bq = f32_decoder(bf, b.itemsize * 8, 0, neg_b)
    bfq = b_decoder(bf, b.itemsize * 8, neg_b, off_b, b_lo, b_hi)
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
                if _panel_rows(b, k0, min(k0 + PANEL_CHUNK, kb + kbs), kb, jb, nb, bpan, epan, lpan, nbp, nbe, bf,
                               bq, bfq, neg_b, zero, off_b, lc, fma):
                    b_special[k0] = True
            for ib in prange(nmb):
                i0 = ib * MB
                mb = min(MB, m - i0)
                if a_bits is not None:
                    if decode_a and jb == j_lo:
                        _decode_a_block(a_bits, np.int64(ib), kb // KB, af, neg_a, sh, zero, off_a, a_val, a_exp,
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
def _row_count(a):
    """``a``'s rows, 0 for None.  Called, not inlined: inlined into the stack kernels' parallel
    loop, a literal 0 here came out as the literal False of an argument (they compare equal)."""
    return 0 if a is None else a.shape[0]


#: the row function of a kernel: each compiled variant binds this name in its own globals (:func:`.variants.variant`)
_rows = None


def _gemm_template(G, wide, fma):
    """A blocked kernel's template (:func:`_gemm_body`), calling the row function ``_rows``."""
    def kernel(a_val, a_exp, a_low, b, bf, neg_b, lanes, lc, bpan, epan, lpan, out, addend, d16, c_in, frac, sh, e_zero,
               omb, rnd, c_emin, d_emin, KB, NB, MB, a_bits, af, a_dec):
        return _gemm_body(a_val, a_exp, a_low, a_bits, af, a_dec, b, bf, neg_b, lanes, lc, bpan, epan, lpan, out,
                          addend, d16, c_in, _rows, G, wide, fma, frac, sh, e_zero, omb, rnd, c_emin, d_emin,
                          (KB, NB, MB, 0, b.shape[1]))
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
def _stack_body(a_val, a_exp, a_low, b, bf, neg_b, lanes, lc, out, addend, d16, c_in, rows, G, wide, fma, frac, sh,
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
            found[t] = _gemm_body(a_val[s], a_exp[s], a_low[s], None, bf, decoded, b[s], bf, neg_b,
                                  lanes, lc, bpan, epan, lpan, out[s], addend[s], d16[s], c_in, rows, G, wide, fma,
                                  frac, sh, e_zero, omb, rnd, c_emin, d_emin,
                                  (KB, NB, MB, j_lo, min(n, j_lo + width)))[1]
    special = _flags(count)
    for t in range(count * NC):
        special[t // NC] |= found[t]
    return special


def _stack_template(G, wide, fma):
    """A stack kernel's template (:func:`_stack_body`), calling the row function ``_rows``."""
    def kernel(a_val, a_exp, a_low, b, bf, neg_b, lanes, lc, out, addend, d16, c_in, frac, sh, e_zero, omb, rnd,
               c_emin, d_emin, KB, NB, MB, NC):
        return _stack_body(a_val, a_exp, a_low, b, bf, neg_b, lanes, lc, out, addend, d16, c_in, _rows, G, wide, fma,
                           frac, sh, e_zero, omb, rnd, c_emin, d_emin, KB, NB, MB, NC)
    return kernel


#: the kernels of stacks of GEMMs (:func:`_stack_body`), as :data:`KERNELS` and :data:`FMA_KERNELS`
STACK_KERNELS = _kernels(_stack_template, "_s", False)
STACK_FMA_KERNELS = _kernels(_stack_template, "_s", True)


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
        if not _copy_finite(values.reshape(-1), out.reshape(-1)):  # one pass, not numpy's three
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
