"""Which matrix element each ``wmma`` fragment register holds, on sm_90 (H100).

PTX ISA 9.7.14.4.1, "Matrix Fragments for WMMA", fixes only how many registers a fragment has
and how many elements each register packs; which element sits where is "unspecified and target
architecture dependent".  The maps below are read off the H100 recordings in tests/golden/wmma
(``a_frag`` against the A decoded from ``a_mem``, and so on; D from ``d_frag`` and ``d_mem``).

**Notation** (as in the ISA's ``mma`` fragment sections and CUTLASS/CuTe)::

    groupID g = lane >> 2          threadID_in_group t = lane % 4       (lane = 4*g + t)
    v  = elements per register: 2 (.f16, .bf16), 4 (.s8, .u8), 8 (.s4, .u4), 32 (.b1),
         1 (.tf32, .f32, .s32, and .f64 whose registers are 64 bits)
    A/B: register i, element j (low bits first) is slot s = v*i + j;  KB = K / (4v)
    C/D: slot s counts elements in register order (an .f16x2 register holds slots 2i, 2i+1)

**The maps** (row, col of the logical A: M x K, B: K x N, C/D: M x N)::

    m16n16k16, m16n16k8
      A[i,j]  row = g + 8*(i%2)                      col = v*t + j + 4v*(i//2)
      B[i,j]  row = v*t + j + 4v*(i%KB)              col = g + 8*(i//KB)
      C/D[s]  row = g + 8*((s//2)%2)                 col = 2t + s%2 + 8*(s//4)
    m32n8k16
      A[i,j]  row = g + 8*(i%2) + 16*(i//(2KB))      col = v*t + j + 4v*((i//2)%KB)
      B[i,j]  row = v*t + j + 4v*i                   col = g
      C/D[s]  row = g + 8*(s//2)                     col = 2t + s%2
    m8n32k16  (the transpose of m32n8k16, with A and B exchanged)
      A[i,j]  row = g                                col = v*t + j + 4v*i
      B[i,j]  row = v*t + j + 4v*((i//2)%KB)         col = g + 8*(i%2) + 16*(i//(2KB))
      C/D[s]  row = 2t + s%2                         col = g + 8*(s//2)
    m8n8k4 (.f64), m8n8k32 (.s4/.u4), m8n8k128 (.b1): one register, K = 4v
      A[0,j]  row = g                                col = v*t + j
      B[0,j]  row = v*t + j                          col = g
      C/D[s]  row = g                                col = 2t + s

These are the ``mma.sync`` fragment layouts of the ISA (``m16n8k16``, ``m16n8k8`` for .tf32,
``m8n8k4`` for .f64, ``m8n8k32``, ``m8n8k128``): m16n16 is two ``mma`` tiles side by side along
N, m32n8 two stacked along M, and m8n32 runs as the transposed m32n8 problem.

**Memory layout does not matter.**  For every (matrix, shape, type) recorded with both
``.row`` and ``.col`` loads or stores, the register contents are identical; ``layout`` is
accepted and checked but does not change the map.  (The ISA allows only ``.row`` A and ``.col``
B for m8n8k32/m8n8k128; ``.f16`` C was recorded with ``.col`` loads only, and its map equals
that of ``.f16`` D, recorded both ways.)

**Duplicates.**  An ``.f16`` A or B fragment always has eight registers, more than its unique
content needs, and the rest repeat it: register ``i`` holds a copy of register ``i % U`` with
U = 4 for m16n16k16 A and B, U = 2 for m32n8k16 B and m8n32k16 A (each element twice or four
times, in the same lane).  ``.bf16``, integer and every other fragment hold each element once.
:func:`pack_fragment` writes every copy, as ``wmma.load`` does.  :func:`unpack_fragment`
reads the first copy (lowest register of the lane) of each element, as the H100's ``wmma.mma``
does: the probe ``tests/golden/probes/q3_fragment_copies`` loads a fragment, alters the copies
in registers ``r >= U`` before the mma, and the result never changes (``wmma.load`` alone,
writing equal copies, could not tell).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from ..errors import OperandError
from ..formats import as_numpy, get_format
from . import flat_matrices, slots_to_words, words_to_slots
from .wmma_memory import SHAPES, check_layout, check_operand, fragment_registers, matrix_dims

WARP_SIZE = 32


@dataclass(frozen=True, eq=False)
class FragmentLayout:
    """Where the elements of one wmma fragment live.

    ``words``: 32-bit words per lane (an ``.f64`` register is two, low word first).
    ``index[lane, slot]``: the logical element ``row*cols + col`` in that slot, or -1 for a
    slot that holds none.  Slot ``s`` is bits ``[s*elem_bits, (s+1)*elem_bits)`` of the lane's
    words, word 0 lowest.  ``first[e]``: the flat ``lane*slots + slot`` that
    :func:`unpack_fragment` reads for element ``e`` (its first copy).
    """

    matrix: str
    shape: str
    elem_type: str
    rows: int
    cols: int
    elem_bits: int
    words: int
    index: np.ndarray = field(repr=False)
    first: np.ndarray = field(repr=False)

    @property
    def slots(self) -> int:
        """Element slots per lane."""
        return self.index.shape[1]

    @property
    def copies(self) -> int:
        """How many slots of the warp hold each element."""
        return WARP_SIZE * self.slots // (self.rows * self.cols)

    @cached_property
    def gather(self) -> tuple[np.ndarray, np.ndarray | None]:
        """``(source, empty)``: the element each slot packs (0 where none), and a mask of
        the slots that hold none (None if every slot holds one)."""
        source = np.maximum(self.index, 0)
        source.setflags(write=False)
        empty = self.index < 0
        return source, (empty if empty.any() else None)


def _per_register(elem_type: str) -> int:
    bits = get_format(elem_type).bits
    return 1 if bits == 64 else 32 // bits


def _ab_coords(matrix: str, shape: str, v: int, i: np.ndarray, j: np.ndarray,
               g: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of register i, element j of an A or B fragment (module docstring)."""
    m, n, k = SHAPES[shape]
    kb = max(1, k // (4 * v))
    kcol = v * t + j
    if shape in ("m16n16k16", "m16n16k8"):
        if matrix == "a":
            return g + 8 * (i % 2), kcol + 4 * v * (i // 2)
        return kcol + 4 * v * (i % kb), g + 8 * (i // kb)
    if shape == "m32n8k16":
        if matrix == "a":
            return g + 8 * (i % 2) + 16 * (i // (2 * kb)), kcol + 4 * v * ((i // 2) % kb)
        return kcol + 4 * v * i, g
    if shape == "m8n32k16":
        if matrix == "a":
            return g, kcol + 4 * v * i
        return kcol + 4 * v * ((i // 2) % kb), g + 8 * (i % 2) + 16 * (i // (2 * kb))
    return (g, kcol) if matrix == "a" else (kcol, g)  # m8n8k4, m8n8k32, m8n8k128


def _cd_coords(shape: str, s: np.ndarray, g: np.ndarray, t: np.ndarray):
    """(row, col) of accumulator slot s (module docstring)."""
    if shape in ("m16n16k16", "m16n16k8"):
        return g + 8 * ((s // 2) % 2), 2 * t + s % 2 + 8 * (s // 4)
    if shape == "m32n8k16":
        return g + 8 * (s // 2), 2 * t + s % 2
    if shape == "m8n32k16":
        return 2 * t + s % 2, g + 8 * (s // 2)
    return g, 2 * t + s  # m8n8k*


def _unique_registers(matrix: str, shape: str, v: int, regs: int) -> int:
    """Registers before the fragment starts repeating itself (the .f16 A/B duplicates)."""
    rows, cols = matrix_dims(matrix, shape)
    return min(regs, rows * cols // (WARP_SIZE * v))


@lru_cache(maxsize=None)
def _build(matrix: str, shape: str, elem_type: str) -> FragmentLayout:
    rows, cols = matrix_dims(matrix, shape)
    bits = get_format(elem_type).bits
    regs = fragment_registers(matrix, shape, elem_type)
    lane = np.arange(WARP_SIZE, dtype=np.int64)[:, None]
    g, t = lane >> 2, lane % 4
    if matrix in "ab":
        v = _per_register(elem_type)
        s = np.arange(regs * v, dtype=np.int64)[None, :]
        i = (s // v) % _unique_registers(matrix, shape, v, regs)
        r, c = _ab_coords(matrix, shape, v, i, s % v, g, t)
    else:
        s = np.arange(regs * _per_register(elem_type), dtype=np.int64)[None, :]
        r, c = _cd_coords(shape, s, g, t)
    index = (r * cols + c).astype(np.int32)
    _, first = np.unique(index.ravel(), return_index=True)
    if first.size != rows * cols or index.min() < 0 or index.max() >= rows * cols:
        raise AssertionError(f"fragment map of {matrix}/{shape}/{elem_type} misses elements")
    index.setflags(write=False)
    first.setflags(write=False)
    words = regs * (2 if bits == 64 else 1)
    return FragmentLayout(matrix, shape, elem_type, rows, cols, bits, words, index, first)


def fragment_layout(matrix: str, shape: str, elem_type: str,
                    layout: str = "row") -> FragmentLayout:
    """The :class:`FragmentLayout` of ``matrix`` ("a".."d") for ``.shape`` and ``.elem_type``.

    ``layout`` ("row"/"col", the memory layout of the load or store) is validated; it does not
    change the fragment on sm_90 (see the module docstring).  Cached.
    """
    key = (matrix, shape, elem_type, layout)
    try:
        return _CHECKED[key]
    except (KeyError, TypeError):  # not asked for yet, or not even hashable: check it
        pass
    matrix, shape, elem_type = check_operand(matrix, shape, elem_type)
    check_layout(layout)
    _CHECKED[key] = found = _build(matrix, shape, elem_type)
    return found


_CHECKED: dict[tuple, FragmentLayout] = {}  # arguments that passed the checks (strings only)


def pack_fragment(bits: np.ndarray, layout: FragmentLayout) -> np.ndarray:
    """The registers ``wmma.load`` fills: uint32 [..., 32, words] from bits [..., rows, cols].

    ``bits`` has the element type's storage dtype; leading batch axes are kept.  Every copy
    of a duplicated element is written; slots with no element (index -1) are zero.
    """
    fmt = get_format(layout.elem_type)
    bits = as_numpy(bits, "bits")
    if bits.dtype != fmt.storage or bits.shape[-2:] != (layout.rows, layout.cols):
        raise OperandError(
            f"bits must be [..., {layout.rows}, {layout.cols}] .{fmt.name} bit patterns of "
            f"dtype {fmt.storage} (matrix {layout.matrix}, .{layout.shape}); "
            f"got dtype {bits.dtype}, shape {bits.shape}"
        )
    if fmt.bits < 8 and bits.size and bits.max() >= (1 << fmt.bits):
        raise OperandError(f"bits of .{fmt.name} must lie in [0, {(1 << fmt.bits) - 1}]; "
                           f"got max {bits.max()}")
    source, empty = layout.gather
    vals = np.take(flat_matrices(bits), source, axis=-1)
    if empty is not None:
        vals[..., empty] = 0
    return slots_to_words(vals, fmt.bits)


def unpack_fragment(words: np.ndarray, layout: FragmentLayout) -> np.ndarray:
    """The matrix a fragment holds: element bits [..., rows, cols] from uint32 [..., 32, words].

    Each element is read from its first copy (:attr:`FragmentLayout.first`; see the module
    docstring on duplicates).
    """
    words = as_numpy(words, "words")
    if words.dtype != np.uint32 or words.shape[-2:] != (WARP_SIZE, layout.words):
        raise OperandError(
            f"words must be uint32 [..., {WARP_SIZE}, {layout.words}] (matrix {layout.matrix}, "
            f".{layout.shape}, .{layout.elem_type}); got dtype {words.dtype}, shape {words.shape}"
        )
    fmt = get_format(layout.elem_type)
    slots = flat_matrices(words_to_slots(words, fmt.bits))
    elems = np.take(slots, layout.first, axis=-1).astype(fmt.storage, copy=False)
    return elems.reshape(*words.shape[:-2], layout.rows, layout.cols)
