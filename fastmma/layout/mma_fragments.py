"""Which matrix element each ``mma.sync`` fragment register holds (PTX ISA 9.7.14.5.1-9.7.14.5.13,
"Matrix Fragments for mma.m16n8k*" and "for mma.m8n8k*").

Unlike wmma's, the ``mma`` fragments are fixed by the ISA, with a figure and a formula for
every shape and type.  They all follow one pattern, in the ISA's notation::

    groupID g = lane >> 2          threadID_in_group t = lane % 4
    v = elements per register: 2 (.f16, .bf16), 4 (.e4m3, .e5m2, .s8, .u8), 8 (.s4, .u4),
        32 (.b1), 1 (.tf32, and .f64 whose registers are 64 bits)

    A (M x K), register i, element j (low bits first):
        row = g + 8 * (i % 2)                    col = v * t + j + 4v * (i // 2)
    B (K x N), register i, element j:
        row = v * t + j + 4v * i                 col = g
    C, D (M x N), element slot s (an .f16x2 register holds slots 2i and 2i + 1):
        row = g + 8 * (s // 2)                   col = 2t + s % 2

For the ``m8n8k*`` shapes (A and B one register, C and D two slots) the same formulas give the
ISA's ``row = g``.  Each element sits in exactly one slot of one lane.  The H100 recordings
in ``tests/golden/probes/q10_mma_sync`` were made by placing logical matrices through these
maps; the register files they hold are the test of the maps, since the numbers come out right
only if the hardware reads the elements from where the maps put them.

``mma.sync.m8n8k4`` with ``.f16`` inputs (9.7.14.5.1) runs four independent 8x8x4 products,
one per quad pair ``p``: lanes ``4p .. 4p + 3`` (the low group) and ``4p + 16 .. 4p + 19`` (the
high group).  :func:`quad_pair_layout` stacks the four products' matrices into one logical
matrix each: A ``32 x 4`` and C, D ``32 x 8`` with product ``p`` in rows ``8p .. 8p + 7``, B
``4 x 32`` with product ``p`` in columns ``8p .. 8p + 7``.  Within a product, with ``t = lane
% 4`` and ``h = 4`` in the high group (0 in the low)::

    A .row: row = t + h, col = i             A .col: row = i + h, col = t      (element i of 4)
    B .row: row = t, col = i + h             B .col: row = i, col = t + h
    C, D .f16: row = t + h, col = i                                            (element i of 8)
    C, D .f32: row = (lane & 1) + (i & 2) + h, col = (i & 4) + (lane & 2) + (i & 1)
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import OperandError
from ..formats import get_format
from ..isa import tables
from .wmma_fragments import FragmentLayout

WARP_SIZE = 32
MATRICES = ("a", "b", "c", "d")


def shape_dims(shape: str) -> tuple[int, int, int]:
    """(M, N, K) of an ``.mMnNkK`` shape string."""
    m, n, k = shape[1:].replace("n", " ").replace("k", " ").split()
    return int(m), int(n), int(k)


def operand_types(matrix: str, shape: str) -> tuple[str, ...]:
    """The element types the ISA's ``mma`` forms allow for ``matrix`` at ``.shape``."""
    rows = [row for row in tables.MMA_TYPE_ROWS if shape in row.shapes]
    found = (t for row in rows for t in {"a": row.atypes, "b": row.btypes}.get(matrix, row.cd_types))
    return tuple(dict.fromkeys(found))


def _per_register(bits: int) -> int:
    return 1 if bits == 64 else 32 // bits


def _coords(matrix: str, v: int, i: np.ndarray, j: np.ndarray, g: np.ndarray, t: np.ndarray):
    """(row, col) of register i, element j (A, B) or slot i (C, D): the module docstring."""
    if matrix == "a":
        return g + 8 * (i % 2), v * t + j + 4 * v * (i // 2)
    if matrix == "b":
        return v * t + j + 4 * v * i, g
    return g + 8 * (i // 2), 2 * t + i % 2


@lru_cache(maxsize=None)
def _build(matrix: str, shape: str, elem_type: str, sparse: bool = False) -> FragmentLayout:
    m, n, k = shape_dims(shape)
    rows, cols = {"a": (m, k // 2 if sparse else k), "b": (k, n)}.get(matrix, (m, n))
    bits = get_format(elem_type).bits
    regs = (tables.mma_sp_fragment_regs if sparse else tables.mma_fragment_regs)(matrix, shape, elem_type)
    v = _per_register(bits)
    lane = np.arange(WARP_SIZE, dtype=np.int64)[:, None]
    g, t = lane >> 2, lane % 4
    s = np.arange(regs * v, dtype=np.int64)[None, :]
    if matrix in "ab":
        r, c = _coords(matrix, v, s // v, s % v, g, t)
    else:
        r, c = _coords(matrix, v, s, 0, g, t)
    index = (r * cols + c).astype(np.int32)
    flat = index.ravel()
    if np.unique(flat).size != flat.size or flat.size != rows * cols or flat.min() < 0 or flat.max() >= rows * cols:
        raise AssertionError(f"mma fragment map of {matrix}/{shape}/{elem_type} is not one slot per element")
    first = np.argsort(flat, kind="stable").astype(np.int64)
    index.setflags(write=False)
    first.setflags(write=False)
    words = regs * (2 if bits == 64 else 1)
    return FragmentLayout(matrix, shape, elem_type, rows, cols, bits, words, index, first)


QUAD_PAIRS = 4  #: products of one mma.sync.m8n8k4 .f16


def _quad_pair_coords(matrix: str, elem_type: str, layout: str | None, lane: np.ndarray, i: np.ndarray):
    """(row, col) within its quad pair's product of slot ``i`` of ``lane``: the module docstring."""
    t, h = lane % 4, 4 * (lane >= 16)
    if matrix == "a":
        return (t + h, i) if layout == "row" else (i + h, t)
    if matrix == "b":
        return (t, i + h) if layout == "row" else (i, t + h)
    if elem_type == "f16":
        return t + h, i
    return (lane & 1) + (i & 2) + h, (i & 4) + (lane & 2) + (i & 1)


@lru_cache(maxsize=None)
def quad_pair_layout(matrix: str, elem_type: str, layout: str | None = None) -> FragmentLayout:
    """The :class:`~fastmma.layout.wmma_fragments.FragmentLayout` of ``mma.sync.m8n8k4`` with
    ``.f16`` inputs for operand ``matrix`` ("a".."d"): A and B ``.f16`` in ``layout`` ("row"
    or "col"), C and D ``.f16`` or ``.f32``, over the four quad pairs' matrices stacked as the
    module docstring says (A ``32 x 4``, B ``4 x 32``, C and D ``32 x 8``).  Cached."""
    if matrix not in MATRICES:
        raise OperandError(f"matrix must be one of {', '.join(MATRICES)}, got {matrix!r}")
    allowed = ("f16",) if matrix in "ab" else ("f16", "f32")
    if elem_type not in allowed:
        raise OperandError(f"element type of matrix {matrix} for mma .m8n8k4 with .f16 inputs must be "
                           f"{' or '.join('.' + t for t in allowed)}, got {elem_type!r}")
    if matrix in "ab" and layout not in ("row", "col"):
        raise OperandError(f"matrix {matrix} of mma .m8n8k4 .f16 is .row or .col, got {layout!r}")
    rows, cols = {"a": (32, 4), "b": (4, 32)}.get(matrix, (32, 8))
    slots = 4 if matrix in "ab" else 8
    lane = np.arange(WARP_SIZE, dtype=np.int64)[:, None]
    i = np.arange(slots, dtype=np.int64)[None, :]
    r, c = _quad_pair_coords(matrix, elem_type, layout, lane, i)
    p = (lane % 16) // 4
    r, c = (r, c + 8 * p) if matrix == "b" else (r + 8 * p, c)
    index = (r * cols + c).astype(np.int32)
    flat = index.ravel()
    if np.unique(flat).size != flat.size or flat.size != rows * cols:
        raise AssertionError(f"quad-pair map of {matrix}/{elem_type}/{layout} is not one slot per element")
    first = np.argsort(flat, kind="stable").astype(np.int64)
    index.setflags(write=False)
    first.setflags(write=False)
    bits = get_format(elem_type).bits
    return FragmentLayout(matrix, "m8n8k4", elem_type, rows, cols, bits, slots * bits // 32, index, first)


def fragment_layout(matrix: str, shape: str, elem_type: str) -> FragmentLayout:
    """The :class:`~fastmma.layout.wmma_fragments.FragmentLayout` of ``mma.sync``'s operand
    ``matrix`` ("a".."d") for ``.shape`` and ``.elem_type`` (leading dots accepted), checked
    against the ISA's table of ``mma`` forms.  Cached."""
    key = (matrix, shape, elem_type)
    try:
        return _CHECKED[key]
    except (KeyError, TypeError):  # not asked for yet, or not even hashable: check it
        pass
    matrix, shape, elem_type = (x.lstrip(".") if isinstance(x, str) else x for x in key)
    if matrix not in MATRICES:
        raise OperandError(f"matrix must be one of {', '.join(MATRICES)}, got {matrix!r}")
    allowed = operand_types(matrix, shape) if shape in tables.MMA_SHAPES else ()
    if not allowed:
        raise OperandError(f"shape must be an mma shape ({', '.join('.' + s for s in tables.MMA_SHAPES)}), "
                           f"got {shape!r}")
    if elem_type not in allowed:
        raise OperandError(f"element type of matrix {matrix} for mma .{shape} must be one of "
                           f"{', '.join('.' + t for t in allowed)}, got {elem_type!r}")
    if shape == "m8n8k4" and elem_type != "f64":
        raise OperandError("mma .m8n8k4 with .f16 inputs holds four quad-pair products, and its A and B maps depend "
                           "on .row/.col: use quad_pair_layout(matrix, elem_type, layout)")
    _CHECKED[key] = found = _build(matrix, shape, elem_type)
    return found


_CHECKED: dict[tuple, FragmentLayout] = {}  # arguments that passed the checks (strings only)


def sparse_fragment_layout(matrix: str, shape: str, elem_type: str) -> FragmentLayout:
    """The :class:`~fastmma.layout.wmma_fragments.FragmentLayout` of ``mma.sp``'s operand
    ``matrix`` (PTX ISA 9.7.14.6.2): A is the compressed ``M x K/2`` matrix (each row's kept
    elements in order), B is ``K x N``, C and D ``M x N``, all by the formulas of the module
    docstring (the compressed A as the dense ``m16n8k(K/2)`` A, B extended to the full K);
    the recordings of tests/golden/probes/q15_mma_sp hold them.  Checked against the ISA's
    table of ``mma.sp`` forms; cached."""
    key = ("sp", matrix, shape, elem_type)
    try:
        return _CHECKED[key]
    except (KeyError, TypeError):
        pass
    matrix, shape, elem_type = (x.lstrip(".") if isinstance(x, str) else x for x in (matrix, shape, elem_type))
    if matrix not in MATRICES:
        raise OperandError(f"matrix must be one of {', '.join(MATRICES)}, got {matrix!r}")
    rows = [r for r in tables.MMA_SP_TYPE_ROWS if shape in r.shapes]
    if not rows:
        raise OperandError(f"shape must be an mma.sp shape ({', '.join('.' + s for s in tables.MMA_SP_SHAPES)}), "
                           f"got {shape!r}")
    allowed = tuple(dict.fromkeys(t for r in rows for t in (
        {"a": r.atypes, "b": r.btypes}.get(matrix) or tuple(x for p in r.cd_pairs for x in p))))
    if elem_type not in allowed:
        raise OperandError(f"element type of matrix {matrix} for mma.sp .{shape} must be one of "
                           f"{', '.join('.' + t for t in allowed)}, got {elem_type!r}")
    _CHECKED[key] = found = _build(matrix, shape, elem_type, True)
    return found
