"""Where ``wmma`` matrix elements lie in memory: PTX ISA 9.7.14.4.2, "Matrix Storage for WMMA".

**Shapes.**  A ``wmma`` of shape ``.mMnNkK`` multiplies A (M x K) by B (K x N) and adds C (M x N)
into D (M x N).  The shapes and element types are those of PTX ISA 9.7.14.4.1, "Matrix
Fragments for WMMA" (see :data:`SHAPES` and :data:`ELEMENT_TYPES`).

**Layout.**  A matrix is stored row-major (``.row``) or column-major (``.col``).  The contiguous
line (a row for ``.row``, a column for ``.col``) is the *leading dimension*; consecutive lines
are ``stride`` elements apart (elements, not bytes)::

    .row: element (r, c) has element index e = r * stride + c
    .col: element (r, c) has element index e = c * stride + r

Element index ``e`` of a type of ``bits`` bits starts at bit ``e * bits`` from the base address:
byte ``e * bits / 8``, little-endian, for 8-, 16-, 32- and 64-bit types; for ``.s4``/``.u4``
byte ``e // 2``, low nibble first; for ``.b1`` bit ``e % 8`` of byte ``e // 8``, least
significant bit first.

**Default stride.**  The stride defaults to the size of the leading dimension: K for a
row-major A, M for a column-major A, N for a row-major B, K for a column-major B, N for a
row-major C/D and M for a column-major C/D (:func:`default_stride`).  A smaller stride makes
lines overlap; fastmma treats it as undefined and raises :class:`~fastmma.errors.OperandError`.

**Address alignment** (same section, "Address Alignment").  The start address of every line
(the base address and the base plus each multiple of the stride) must be aligned to the size
in bytes of the matrix's fragment, the per-thread vector of registers that ``wmma.load`` fills
or ``wmma.store`` reads (:func:`fragment_bytes`; e.g. 32 bytes for an ``.f16`` A of
``.m16n16k16``, eight ``.f16x2`` registers).  So both the address and ``stride * bits / 8`` must
be multiples of it.

Taken literally that rule contradicts the section's own default strides where a fragment is
32 bytes: a column-major ``.f16`` A of ``.m8n32k16`` has default stride 8 (16 bytes), as has a
row-major ``.f16`` B of ``.m32n8k16``.  The hardware recordings (tests/golden/wmma) also load
and store correctly on an H100 with strides that are odd multiples of 16 bytes for 32-byte
fragments (``.f16`` A/B, ``.f32``/``.s32`` C/D), and no single memory access is wider than
16 bytes.  fastmma therefore requires the address to be aligned to the fragment size, as the
ISA says, and the stride to ``min(fragment_bytes, 16)`` bytes (:func:`required_alignment`); the
literal rule for the stride too with ``isa_strict=True``.

**Stacks.**  :func:`load_matrix` and :func:`store_matrix` also take a stack of accesses (one
per warp of a simulator's, ``stack=True``): offsets and strides as integer arrays and the
memory as one image for all or an image per warp, broadcast together.  A single access is a
stack of one.  Every check runs, vectorized, on the whole stack before memory is touched, and
an error names the first access at fault by its stack index; two small compiled loops then
copy each matrix line by line (a line of whole bytes is one run of them).  Stores go in the
stack's order, so where two warps' matrices overlap (a race on a GPU) the later one's bytes
are what memory keeps.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..errors import AlignmentError, MemoryBoundsError, OperandError
from ..formats import Format, get_format
from ..isa import tables

def _dims(shape: str) -> tuple[int, int, int]:
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


#: ``.shape`` qualifier -> (M, N, K), from the ISA tables
SHAPES: dict[str, tuple[int, int, int]] = {s: _dims(s) for s in tables.WMMA_SHAPES}

#: (matrix, shape) -> element types the ISA allows for that operand (from the ISA tables)
ELEMENT_TYPES: dict[tuple[str, str], tuple[str, ...]] = {
    (m, s): tuple(dict.fromkeys(t for row in tables.wmma_rows_for_shape(s)
                                for t in (row.ab_types if m in "ab" else row.cd_types)))
    for s in SHAPES for m in "abcd"
}

LAYOUTS = ("row", "col")
MATRICES = ("a", "b", "c", "d")

#: the widest single memory access (bytes); see the module docstring
MAX_ACCESS_BYTES = 16


def _check_choice(name: str, value, allowed) -> str:
    if not isinstance(value, str) or value.lstrip(".") not in allowed:
        raise OperandError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value.lstrip(".")


def check_operand(matrix: str, shape: str, elem_type: str) -> tuple[str, str, str]:
    """Validated ``(matrix, shape, elem_type)`` without dots; :class:`OperandError` otherwise."""
    matrix = _check_choice("matrix", matrix, MATRICES)
    shape = _check_choice("shape", shape, tuple(SHAPES))
    allowed = ELEMENT_TYPES[(matrix, shape)]
    elem_type = _check_choice(f"element type of matrix {matrix} for .{shape}", elem_type, allowed)
    return matrix, shape, elem_type


def check_layout(layout: str) -> str:
    """``"row"`` or ``"col"`` (a leading dot is accepted); :class:`OperandError` otherwise."""
    return _check_choice("layout", layout, LAYOUTS)


def matrix_dims(matrix: str, shape: str) -> tuple[int, int]:
    """(rows, cols) of the logical matrix: A is M x K, B is K x N, C and D are M x N."""
    matrix = _check_choice("matrix", matrix, MATRICES)
    m, n, k = SHAPES[_check_choice("shape", shape, tuple(SHAPES))]
    return {"a": (m, k), "b": (k, n), "c": (m, n), "d": (m, n)}[matrix]


def leading_dimension(rows: int, cols: int, layout: str) -> int:
    """Length of one contiguous line: ``cols`` for ``.row``, ``rows`` for ``.col``."""
    return cols if check_layout(layout) == "row" else rows


def default_stride(matrix: str, shape: str, layout: str) -> int:
    """The ISA's default stride, in elements: the size of the leading dimension."""
    return leading_dimension(*matrix_dims(matrix, shape), layout)


def fragment_registers(matrix: str, shape: str, elem_type: str) -> int:
    """Registers in the fragment vector of ``wmma.load``/``wmma.store``/``wmma.mma``."""
    matrix, shape, elem_type = check_operand(matrix, shape, elem_type)
    return tables.wmma_fragment_regs(matrix, shape, elem_type)


def fragment_bytes(matrix: str, shape: str, elem_type: str) -> int:
    """Size in bytes of one thread's fragment (registers x 4, or x 8 for ``.f64``)."""
    regs = fragment_registers(matrix, shape, elem_type)
    return regs * (8 if elem_type.lstrip(".") == "f64" else 4)


def required_alignment(matrix: str, shape: str, elem_type: str, isa_strict: bool = False) -> tuple[int, int]:
    """``(address, stride)``: the byte alignments required of the address and of
    ``stride * bits / 8``.

    The address: the fragment size, as 9.7.14.4.2 states it.  The stride: ``min(fragment
    size, 16)``, what the H100 recordings and the ISA's own default strides show to work;
    ``isa_strict=True`` demands the fragment size of the stride too.
    """
    size = fragment_bytes(matrix, shape, elem_type)
    return size, (size if isa_strict else min(size, MAX_ACCESS_BYTES))


def _as_format(fmt) -> Format:
    return fmt if isinstance(fmt, Format) else get_format(fmt)


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OperandError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if value < minimum:
        raise OperandError(f"{name} must be an integer >= {minimum}; got {value}")
    return int(value)


def _check_mem(mem, writable: bool, stack: bool = False) -> np.ndarray:
    """``mem`` checked to be a 1-D uint8 array (where ``stack``, ``[..., bytes]``: an image
    per warp of a stack, or one for all)."""
    if not isinstance(mem, np.ndarray) or mem.dtype != np.uint8 or (mem.ndim < 1 if stack else mem.ndim != 1):
        got = f"{type(mem).__name__}" + (
            f" of dtype {mem.dtype} and shape {mem.shape}" if isinstance(mem, np.ndarray) else ""
        )
        what = "an array of dtype uint8 [..., bytes]" if stack else "a 1-D numpy array of dtype uint8"
        raise OperandError(f"mem must be {what}; got {got}")
    if writable and not mem.flags.writeable:
        raise OperandError("mem must be writable to store a matrix; got a read-only array")
    return mem


def _int_array(name: str, value) -> np.ndarray:
    """``value`` (an integer, or an array of them: one per warp of a stack) as int64."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" or (arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max):
        raise OperandError(f"{name} must be an integer (or an integer array, one per warp); got {value!r}")
    return arr.astype(np.int64, copy=False)


#: past any memory a numpy array holds: offsets and strides are clipped here before the
#: bounds are computed, so that int64 arithmetic cannot wrap
_FAR = 1 << 48


def _first(bad: np.ndarray) -> tuple | None:
    """The first (C order) index where ``bad`` holds, or None."""
    if not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))


def _at(index: tuple) -> str:
    """Where in a stack a message's value is: nothing for a single access."""
    return f" at stack index {index}" if index else ""


def check_access(mem_size: int, offset, rows: int, cols: int, layout: str, ld, fmt,
                 align: int | tuple[int, int] | None = None) -> tuple:
    """Validate a matrix access, or a stack of them; returns ``(offset, ld)`` as int64 arrays
    broadcast together (0-d for a single access).

    ``offset`` and ``ld`` are integers or integer arrays (one per warp of a stack), ``mem_size``
    the bytes of the memory each access reads.  Raises :class:`OperandError` for a bad
    layout, size or a stride below the leading dimension, :class:`AlignmentError` for an
    address or stride not a multiple of ``align`` bytes (``None``: one element, at least one
    byte) and :class:`MemoryBoundsError` for a span outside ``[0, mem_size)``; in a stack
    the message names the first access at fault.
    """
    fmt = _as_format(fmt)
    layout = check_layout(layout)
    rows, cols = _check_int("rows", rows, 1), _check_int("cols", cols, 1)
    lines, lead = _lines(rows, cols, layout)
    ld = _int_array("ld (stride, in elements)", ld)
    offset = _int_array("offset", offset)
    if offset.shape != ld.shape:
        try:
            offset, ld = np.broadcast_arrays(offset, ld)
        except ValueError:
            raise OperandError(f"offset {offset.shape} and ld (stride) {ld.shape} must broadcast together") from None
    if align is None:
        align = max(1, fmt.bits // 8)
    addr_align, align = (align, align) if not isinstance(align, tuple) else align
    addr_align, align = _check_int("align", addr_align, 1), _check_int("align", align, 1)
    step = 8 * align // math.gcd(8 * align, fmt.bits)  # the stride's elements must be a multiple of this
    span = -(-((lines - 1) * np.minimum(ld, _FAR) + lead) * fmt.bits // 8)  # clipped: int64 cannot wrap
    short, misplaced, misaligned = ld < lead, offset % addr_align != 0, ld % step != 0
    outside = (offset < 0) | (np.minimum(offset, _FAR) + span > mem_size)
    if not (short | misplaced | misaligned | outside).any():  # one test on the usual path: a few microseconds
        return offset, ld
    if (i := _first(short)) is not None:
        raise OperandError(
            f"ld (stride){_at(i)} of a {layout}-major {rows}x{cols} matrix must be >= its leading "
            f"dimension {lead} elements (smaller is undefined: lines would overlap); got {ld[i]}"
        )
    if (i := _first(misplaced)) is not None:
        raise AlignmentError(
            f"offset (address){_at(i)} of a .{fmt.name} matrix must be a multiple of {addr_align} bytes "
            f"(the fragment size); got {offset[i]} (remainder {offset[i] % addr_align})"
        )
    if (i := _first(misaligned)) is not None:
        raise AlignmentError(
            f"ld (stride){_at(i)} of a .{fmt.name} matrix must span a multiple of {align} bytes "
            f"(a multiple of {step} elements); got {ld[i]} elements = {int(ld[i]) * fmt.bits / 8:g} bytes"
        )
    i = _first(outside)
    start, stride = int(offset[i]), int(ld[i])
    end = start + -(-((lines - 1) * stride + lead) * fmt.bits // 8)
    raise MemoryBoundsError(
        f"the matrix{_at(i)} spans bytes [{start}, {end}) (offset {start}, ld {stride}, "
        f"{rows}x{cols} .{fmt.name}, {layout}); mem holds bytes [0, {mem_size})"
    )


@njit(cache=True)
def _gather(mem, starts, ld, bits, out):
    """``out[s, i]`` <- line ``i`` of the matrix that starts at byte ``starts[s]``, its lines
    ``ld[s]`` elements apart: the line's bytes, or below 8 bits one element's value a byte
    (element ``j`` of the line is element ``i * ld[s] + j`` of the matrix)."""
    mask = (1 << bits) - 1
    for s in range(out.shape[0]):
        for i in range(out.shape[1]):
            line = out[s, i]
            if bits >= 8:  # whole bytes: the line is one run of them
                src = mem[starts[s] + i * ld[s] * (bits // 8):]
                for q in range(line.size):
                    line[q] = src[q]
            else:
                for j in range(line.size):
                    bit = (i * ld[s] + j) * bits
                    line[j] = (mem[starts[s] + bit // 8] >> (bit % 8)) & mask


@njit(cache=True)
def _scatter(mem, starts, ld, bits, vals):
    """:func:`_gather` reversed: line ``i`` of matrix ``s`` <- ``vals[s, i]``, the matrices
    written one after another in the order of ``s`` (a later one's bytes win where two share
    them); below 8 bits only the element's own bits change."""
    mask = (1 << bits) - 1
    for s in range(vals.shape[0]):
        for i in range(vals.shape[1]):
            line = vals[s, i]
            if bits >= 8:
                dst = mem[starts[s] + i * ld[s] * (bits // 8):]
                for q in range(line.size):
                    dst[q] = line[q]
            else:
                for j in range(line.size):
                    bit = (i * ld[s] + j) * bits
                    b = starts[s] + bit // 8
                    sh = bit % 8
                    mem[b] = np.uint8((mem[b] & ~(mask << sh)) | (np.int64(line[j]) << sh))


def _accesses(mem: np.ndarray, offset, rows: int, cols: int, layout: str, ld, fmt, align, batch=()):
    """Checked accesses of a stack (``batch``: the shape of any other stacked operand):
    ``(flat, starts, ld, shape)``, the images as one 1-D array, each access's first byte in
    it and its stride (1-D, one per access), and the stack's shape."""
    offset, ld = check_access(mem.shape[-1], offset, rows, cols, layout, ld, fmt, align)
    images = mem.shape[:-1]
    if images or batch:  # a stack: each access with its image's first byte
        try:
            shape = np.broadcast_shapes(offset.shape, images, batch)
        except ValueError:
            raise OperandError(f"the stacks of offsets {offset.shape}, stride {ld.shape}, images {images} "
                               f"(mem's leading dimensions) and fragments {batch} must broadcast together") from None
        base = np.arange(math.prod(images), dtype=np.int64).reshape(images) * mem.shape[-1]
        offset, ld = np.broadcast_to(base, shape) + np.broadcast_to(offset, shape), np.array(np.broadcast_to(ld, shape))
    return mem.reshape(-1), offset.ravel(), ld.ravel(), offset.shape  # ld copied: never a view of a broadcast


def _lines(rows: int, cols: int, layout: str) -> tuple[int, int]:
    """``(lines, leading dimension)``: a matrix seen line by line (``layout`` checked)."""
    return (cols, rows) if layout == "col" else (rows, cols)


def load_matrix(mem: np.ndarray, offset, rows: int, cols: int, layout: str, ld, fmt,
                *, align: int | None = None, stack: bool = False) -> np.ndarray:
    """The element bits [rows, cols] (``fmt.storage`` dtype) of the matrix at ``mem[offset:]``.

    ``ld`` is the stride in elements; ``align`` the byte alignment demanded of ``offset`` and
    of the stride (see :func:`required_alignment`; ``None``: element alignment only).  Where
    ``stack``, ``offset`` and ``ld`` may be arrays, one access per warp, and ``mem`` an image
    per warp ``[..., bytes]``; they broadcast together into the stack, and the bits are
    ``[..., rows, cols]`` over it.
    """
    fmt = _as_format(fmt)
    mem = _check_mem(mem, writable=False, stack=stack)
    layout = check_layout(layout)
    flat, starts, ld, shape = _accesses(mem, offset, rows, cols, layout, ld, fmt, align)
    lines, lead = _lines(rows, cols, layout)
    raw = np.empty((starts.size, lines, lead * max(1, fmt.bits // 8)), np.uint8)
    _gather(flat, starts, ld, fmt.bits, raw)
    vals = raw.view(fmt.storage.newbyteorder("<")) if fmt.bits >= 8 else raw
    vals = vals.astype(fmt.storage, copy=False).reshape(shape + (lines, lead))
    return np.swapaxes(vals, -1, -2) if layout == "col" else vals


def store_matrix(mem: np.ndarray, offset, bits: np.ndarray, layout: str, ld, fmt,
                 *, align: int | None = None, stack: bool = False) -> None:
    """Write ``bits`` [rows, cols] (``fmt.storage`` dtype) as the matrix at ``mem[offset:]``.

    Only the matrix's own bytes, nibbles or bits change; padding between lines keeps its
    value.  Checks as :func:`load_matrix`, all before ``mem`` is written.  Where ``stack``,
    as :func:`load_matrix`'s stacks, with ``bits`` ``[..., rows, cols]``: the matrices are
    written in the stack's C order, a later one's bytes winning where two overlap.
    """
    fmt = _as_format(fmt)
    mem = _check_mem(mem, writable=True, stack=stack)
    bits = _check_bits(bits, fmt, stack)
    layout = check_layout(layout)
    rows, cols = bits.shape[-2:]
    flat, starts, ld, shape = _accesses(mem, offset, rows, cols, layout, ld, fmt, align, bits.shape[:-2])
    vals = np.broadcast_to(bits, shape + (rows, cols))
    vals = np.swapaxes(vals, -1, -2) if layout == "col" else vals
    vals = np.ascontiguousarray(vals.reshape((starts.size,) + vals.shape[-2:]), fmt.storage.newbyteorder("<"))
    _scatter(flat, starts, ld, fmt.bits, vals.view(np.uint8))
    if not np.may_share_memory(flat, mem):  # mem's images were not one block: written to a copy
        mem[...] = flat.reshape(mem.shape)


def _check_bits(bits, fmt: Format, stack: bool = False) -> np.ndarray:
    if not isinstance(bits, np.ndarray) or bits.dtype != fmt.storage or (bits.ndim < 2 if stack else bits.ndim != 2):
        got = (f"dtype {bits.dtype}, shape {bits.shape}" if isinstance(bits, np.ndarray)
               else type(bits).__name__)
        raise OperandError(
            f"bits must be {'an array [..., rows, cols]' if stack else 'a 2-D array [rows, cols]'} of .{fmt.name} bit patterns "
            f"(dtype {fmt.storage}); got {got}"
        )
    if fmt.bits < 8 and bits.size and bits.max() >= (1 << fmt.bits):
        raise OperandError(
            f"bits of .{fmt.name} must lie in [0, {(1 << fmt.bits) - 1}]; got max {bits.max()}"
        )
    return bits


def load_wmma_matrix(mem: np.ndarray, offset, matrix: str, shape: str, elem_type: str,
                     layout: str, ld=None, *, isa_strict: bool = False, stack: bool = False) -> np.ndarray:
    """``wmma.load.{matrix}``'s view of memory: the logical matrix's element bits (a stack
    of them where ``stack``: :func:`load_matrix`).

    ``ld=None`` takes the default stride.  Alignment per :func:`required_alignment`.
    """
    matrix, shape, elem_type = check_operand(matrix, shape, elem_type)
    rows, cols = matrix_dims(matrix, shape)
    ld = default_stride(matrix, shape, layout) if ld is None else ld
    align = required_alignment(matrix, shape, elem_type, isa_strict)
    return load_matrix(mem, offset, rows, cols, layout, ld, elem_type, align=align, stack=stack)


def store_wmma_matrix(mem: np.ndarray, offset, bits: np.ndarray, shape: str, elem_type: str,
                      layout: str, ld=None, *, matrix: str = "d",
                      isa_strict: bool = False, stack: bool = False) -> None:
    """``wmma.store.d``: write the logical D (element bits [M, N], or a stack of them
    [..., M, N] where ``stack``: :func:`store_matrix`) to memory."""
    matrix, shape, elem_type = check_operand(matrix, shape, elem_type)
    rows, cols = matrix_dims(matrix, shape)
    fmt = get_format(elem_type)
    bits = _check_bits(bits, fmt, stack)
    if bits.shape[-2:] != (rows, cols):
        raise OperandError(
            f"bits of matrix {matrix} for .{shape} must have shape {'(..., ' if stack else '('}{rows}, {cols}); "
            f"got {bits.shape}"
        )
    ld = default_stride(matrix, shape, layout) if ld is None else ld
    align = required_alignment(matrix, shape, elem_type, isa_strict)
    store_matrix(mem, offset, bits, layout, ld, fmt, align=align, stack=stack)
