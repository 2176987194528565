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

Every check runs before memory is touched.  Vectorized numpy throughout: the element indices
are computed as one array and gathered or scattered with fancy indexing.
"""

from __future__ import annotations

import numpy as np

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


def _check_mem(mem, writable: bool) -> np.ndarray:
    if not isinstance(mem, np.ndarray) or mem.dtype != np.uint8 or mem.ndim != 1:
        got = f"{type(mem).__name__}" + (
            f" of dtype {mem.dtype} and shape {mem.shape}" if isinstance(mem, np.ndarray) else ""
        )
        raise OperandError(f"mem must be a 1-D numpy array of dtype uint8; got {got}")
    if writable and not mem.flags.writeable:
        raise OperandError("mem must be writable to store a matrix; got a read-only array")
    return mem


def check_access(mem_size: int, offset, rows: int, cols: int, layout: str, ld, fmt,
                 align: int | tuple[int, int] | None = None) -> tuple[int, int]:
    """Validate one matrix access; returns ``(offset, ld)`` as ints.

    Raises :class:`OperandError` for a bad layout, size or a stride below the leading
    dimension, :class:`AlignmentError` for an address or stride not a multiple of ``align``
    bytes (``None``: one element, at least one byte) and :class:`MemoryBoundsError` for a
    span outside ``[0, mem_size)``.
    """
    fmt = _as_format(fmt)
    layout = check_layout(layout)
    rows, cols = _check_int("rows", rows, 1), _check_int("cols", cols, 1)
    lead = leading_dimension(rows, cols, layout)
    ld = _check_int("ld (stride, in elements)", ld, 1)
    if ld < lead:
        raise OperandError(
            f"ld (stride) of a {layout}-major {rows}x{cols} matrix must be >= its leading "
            f"dimension {lead} elements (smaller is undefined: lines would overlap); got {ld}"
        )
    if not isinstance(offset, (int, np.integer)) or isinstance(offset, (bool, np.bool_)):
        raise OperandError(f"offset must be an integer byte offset; got {offset!r}")
    offset = int(offset)
    if align is None:
        align = max(1, fmt.bits // 8)
    addr_align, align = (align, align) if not isinstance(align, tuple) else align
    addr_align, align = _check_int("align", addr_align, 1), _check_int("align", align, 1)
    if offset % addr_align:
        raise AlignmentError(
            f"offset (address) of a .{fmt.name} matrix must be a multiple of {addr_align} bytes "
            f"(the fragment size); got {offset} (remainder {offset % addr_align})"
        )
    if (ld * fmt.bits) % (8 * align):
        raise AlignmentError(
            f"ld (stride) of a .{fmt.name} matrix must span a multiple of {align} bytes "
            f"(a multiple of {8 * align // np.gcd(8 * align, fmt.bits)} elements); got {ld} "
            f"elements = {ld * fmt.bits / 8:g} bytes"
        )
    lines = cols if layout == "col" else rows
    end = offset + -(-((lines - 1) * ld + lead) * fmt.bits // 8)
    if offset < 0 or end > mem_size:
        raise MemoryBoundsError(
            f"the matrix spans bytes [{offset}, {end}) (offset {offset}, ld {ld}, "
            f"{rows}x{cols} .{fmt.name}, {layout}); mem holds bytes [0, {mem_size})"
        )
    return offset, ld


def element_index(rows: int, cols: int, layout: str, ld: int) -> np.ndarray:
    """int64 [rows, cols]: the element index of (r, c), ``r*ld + c`` (row) or ``c*ld + r`` (col)."""
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    return r * ld + c if check_layout(layout) == "row" else c * ld + r


def _byte_indices(offset: int, e: np.ndarray, nbytes: int) -> np.ndarray:
    return offset + e[..., None] * nbytes + np.arange(nbytes, dtype=np.int64)


def load_matrix(mem: np.ndarray, offset: int, rows: int, cols: int, layout: str, ld: int, fmt,
                *, align: int | None = None) -> np.ndarray:
    """The element bits [rows, cols] (``fmt.storage`` dtype) of the matrix at ``mem[offset:]``.

    ``ld`` is the stride in elements; ``align`` the byte alignment demanded of ``offset`` and
    of the stride (see :func:`required_alignment`; ``None``: element alignment only).
    """
    fmt = _as_format(fmt)
    mem = _check_mem(mem, writable=False)
    offset, ld = check_access(mem.size, offset, rows, cols, layout, ld, fmt, align)
    e = element_index(rows, cols, layout, ld)
    if fmt.bits >= 8:
        nbytes = fmt.bits // 8
        raw = np.ascontiguousarray(mem[_byte_indices(offset, e, nbytes)])
        return raw.view(fmt.storage.newbyteorder("<"))[..., 0].astype(fmt.storage)
    bit = e * fmt.bits
    byte = mem[offset + bit // 8]
    return ((byte >> (bit % 8).astype(np.uint8)) & ((1 << fmt.bits) - 1)).astype(fmt.storage)


def store_matrix(mem: np.ndarray, offset: int, bits: np.ndarray, layout: str, ld: int, fmt,
                 *, align: int | None = None) -> None:
    """Write ``bits`` [rows, cols] (``fmt.storage`` dtype) as the matrix at ``mem[offset:]``.

    Only the matrix's own bytes, nibbles or bits change; padding between lines keeps its
    value.  Checks as :func:`load_matrix`, all before ``mem`` is written.
    """
    fmt = _as_format(fmt)
    mem = _check_mem(mem, writable=True)
    bits = _check_bits(bits, fmt)
    rows, cols = bits.shape
    offset, ld = check_access(mem.size, offset, rows, cols, layout, ld, fmt, align)
    e = element_index(rows, cols, layout, ld)
    if fmt.bits >= 8:
        nbytes = fmt.bits // 8
        raw = bits.astype(fmt.storage.newbyteorder("<")).view(np.uint8).reshape(rows, cols, nbytes)
        mem[_byte_indices(offset, e, nbytes)] = raw
        return
    bit = (e * fmt.bits).ravel()
    idx = offset + bit // 8
    shift = (bit % 8).astype(np.uint8)
    mask = np.uint8((1 << fmt.bits) - 1)
    np.bitwise_and.at(mem, idx, ~(mask << shift))
    np.bitwise_or.at(mem, idx, bits.ravel() << shift)


def _check_bits(bits, fmt: Format) -> np.ndarray:
    if not isinstance(bits, np.ndarray) or bits.ndim != 2 or bits.dtype != fmt.storage:
        got = (f"dtype {bits.dtype}, shape {bits.shape}" if isinstance(bits, np.ndarray)
               else type(bits).__name__)
        raise OperandError(
            f"bits must be a 2-D array [rows, cols] of .{fmt.name} bit patterns "
            f"(dtype {fmt.storage}); got {got}"
        )
    if fmt.bits < 8 and bits.size and bits.max() >= (1 << fmt.bits):
        raise OperandError(
            f"bits of .{fmt.name} must lie in [0, {(1 << fmt.bits) - 1}]; got max {bits.max()}"
        )
    return bits


def load_wmma_matrix(mem: np.ndarray, offset: int, matrix: str, shape: str, elem_type: str,
                     layout: str, ld: int | None = None, *, isa_strict: bool = False) -> np.ndarray:
    """``wmma.load.{matrix}``'s view of memory: the logical matrix's element bits.

    ``ld=None`` takes the default stride.  Alignment per :func:`required_alignment`.
    """
    matrix, shape, elem_type = check_operand(matrix, shape, elem_type)
    rows, cols = matrix_dims(matrix, shape)
    ld = default_stride(matrix, shape, layout) if ld is None else ld
    align = required_alignment(matrix, shape, elem_type, isa_strict)
    return load_matrix(mem, offset, rows, cols, layout, ld, elem_type, align=align)


def store_wmma_matrix(mem: np.ndarray, offset: int, bits: np.ndarray, shape: str, elem_type: str,
                      layout: str, ld: int | None = None, *, matrix: str = "d",
                      isa_strict: bool = False) -> None:
    """``wmma.store.d``: write the logical D (element bits [M, N]) to memory."""
    matrix, shape, elem_type = check_operand(matrix, shape, elem_type)
    rows, cols = matrix_dims(matrix, shape)
    fmt = get_format(elem_type)
    bits = _check_bits(bits, fmt)
    if bits.shape != (rows, cols):
        raise OperandError(
            f"bits of matrix {matrix} for .{shape} must have shape ({rows}, {cols}); "
            f"got {bits.shape}"
        )
    ld = default_stride(matrix, shape, layout) if ld is None else ld
    align = required_alignment(matrix, shape, elem_type, isa_strict)
    store_matrix(mem, offset, bits, layout, ld, fmt, align=align)
