"""Which bytes ``ldmatrix`` and ``stmatrix`` move where (PTX ISA 9.7.14.5.15-16, "Warp-level
matrix load / store instruction"), for the ``.m8n8`` ``.b16`` forms of sm_90a, and which
element ``movmatrix`` (9.7.14.5.17, "Warp-level matrix transpose instruction") moves where.

A warp moves ``num`` (1, 2 or 4) matrices of 8 x 8 16-bit elements.  Each row is 16
contiguous bytes of shared memory at an address one lane gives::

    lane 8i + r gives the address of row r of matrix i (lanes from 8 * num on give none)

and each lane holds one 32-bit register of each matrix, two elements, the lower column in
the lower half (the fragment of ``mma``'s A and B)::

    register i of lane l = elements (l // 4, 2 (l % 4)) and (l // 4, 2 (l % 4) + 1) of matrix i
    with .trans:           elements (2 (l % 4), l // 4) and (2 (l % 4) + 1, l // 4)

(row, column) count in the matrix as it lies in memory, a row per address.  ``movmatrix``
takes one such matrix in its registers (the layout without .trans) and gives every lane its
register of the transposed matrix in the same layout::

    d of lane l = elements (2 (l % 4), l // 4) and (2 (l % 4) + 1, l // 4) of the matrix in a
"""

from __future__ import annotations

import numpy as np

ROW_BYTES = 16
ROWS = 8


def rows_to_registers(rows: np.ndarray, trans: bool) -> np.ndarray:
    """The registers ``uint32[..., 32, num]`` of the matrices ``rows``, ``uint16[..., num, 8, 8]``
    (matrix, row, column) as they lie in memory."""
    if trans:
        rows = np.swapaxes(rows, -1, -2)
    words = np.ascontiguousarray(rows, dtype="<u2").view("<u4")  # (..., num, 8 rows, 4 words): word 4 * row + w
    return np.swapaxes(words.reshape(words.shape[:-2] + (32,)), -1, -2).astype(np.uint32)


def registers_to_rows(regs: np.ndarray, trans: bool) -> np.ndarray:
    """The inverse of :func:`rows_to_registers`: ``uint16[..., num, 8, 8]`` from the registers."""
    words = np.ascontiguousarray(np.swapaxes(regs, -1, -2), dtype="<u4")  # (..., num, 32 lanes)
    rows = words.view("<u2").reshape(words.shape[:-1] + (ROWS, ROWS))
    return (np.swapaxes(rows, -1, -2) if trans else rows).astype(np.uint16)


def transpose_registers(regs: np.ndarray) -> np.ndarray:
    """``movmatrix``: the registers ``uint32[..., 32, 1]`` of the transpose of the 8x8 matrix
    that ``regs`` (``uint32[..., 32, 1]``) hold, in the layout without .trans."""
    return rows_to_registers(registers_to_rows(regs, trans=False), trans=True)
