"""Scanning operands for their exponent ranges and for infinities and NaNs."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..vector_ops import as_element_of
from .decode import NEG_EXP

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


#: Operands of at most this many bytes (a 512 x 512 bf16 one) are scanned by one thread,
#: because below it starting the threads costs as much as the scan or more.  (On one
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
    per-column minima, maxima and flags, which are merged at the end, so that memory is
    read along rows rather than down a narrow block of columns, one long stride per row."""
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
