"""The rows of B that each row of a structured-sparse A meets (PTX ISA 9.7.14.6, 9.7.15.6).

A sparse row keeps half of its K elements, each row its own; the kept element at dense column
``k`` meets row ``k`` of B.  A GEMM of a sparse A is then one GEMV a row, each against the B
rows its kept elements pick, and this kernel gathers those rows for a block of A's rows and a
range of B's columns, in parallel over the rows.  The caller has checked every index.
"""

from __future__ import annotations

from numba import njit, prange


@njit(cache=True, parallel=True)
def gather_kept_rows(b, b_index, columns, j0, out):
    """``out[r, p, :] = b[b_index[r], columns[r, p], j0 : j0 + out.shape[2]]``: for each row
    ``r`` of a block of A's rows, the rows of its B (``b_index[r]`` of the stack ``b``,
    ``(S, K, N)``) at the dense columns of its kept elements (``columns``, ``(R, K/2)``),
    restricted to ``out.shape[2]`` columns from ``j0``."""
    rows, kept, width = out.shape
    for r in prange(rows):
        s = b_index[r]
        for p in range(kept):  # a slice copy, which vectorises where numba's element loop does not
            out[r, p, :] = b[s, columns[r, p], j0:j0 + width]
