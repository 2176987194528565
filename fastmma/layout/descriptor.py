"""wgmma matrix descriptors and the shared-memory layouts they describe.

PTX ISA 9.7.15.5.1.2 "Shared Memory Matrix Layout" and 9.7.15.5.1.2.2 "Matrix Descriptor
Format".  A matrix descriptor is a 64-bit value:

======  ====  =====================================================================
bits    size  field (``matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4``)
======  ====  =====================================================================
0-13    14    encode(start_address)
16-29   14    encode(leading_byte_offset)   (LBO)
32-45   14    encode(stride_byte_offset)    (SBO)
49-51   3     base_offset  (swizzled modes only)
62-63   2     swizzle: 0 none, 1 128B, 2 64B, 3 32B
======  ====  =====================================================================

Other bits are reserved; :meth:`MatrixDescriptor.decode` ignores them.

**Layout rule** (checked against every H100 recording in ``tests/golden/wgmma``: the
integer ones bit-exactly, the floating-point ones, which include all the MN-major cases,
to rounding error).  An operand is ``mn`` rows (M for A, N for B) by ``k`` columns of
``b``-bit elements; ``T = 128 // b`` elements fill one 16-byte chunk; ``W`` is the swizzle
width in bytes (32, 64, 128) and ``C = W // 16`` its number of chunks.  The offset of
element ``(i, j)`` from the start address, in bits (the ISA's canonical CuTe layouts,
written out):

* K-major, no swizzle (``((8,m),(T,2k)):((1T,SBO),(1,LBO))``)::

      (i%8)*128 + (i//8)*SBO*8 + (j//T)*LBO*8 + (j%T)*b

* K-major, swizzle W (``((8,m),(T,2k)):((C*T,SBO),(1,T))``)::

      (i%8)*W*8 + (i//8)*SBO*8 + (j*b // (W*8))*LBO*8 + (j*b) % (W*8)

  LBO matters only where a row's K is wider than the swizzle row: ``wgmma.mma_async.sp``'s B
  has 64 bytes of K, and with a 32B swizzle its second 32 bytes lie LBO further (recorded,
  tests/golden/probes/q16_wgmma_sp/b_address, LBO both at and beyond the footprint); every
  dense wgmma operand has 32 bytes of K, and there LBO is not used.

* MN-major, no swizzle (``((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))``): SBO steps between
  16-byte groups along M/N, LBO between groups of 8 along K::

      (i%T)*b + (i//T)*SBO*8 + (j%8)*128 + (j//8)*LBO*8

* MN-major, swizzle W (``((T,C,m),(8,k)):((1,T,LBO),(C*T,SBO))``): here the roles swap,
  LBO steps between W-byte groups along M/N and SBO between groups of 8 along K::

      (i%T)*b + ((i//T)%C)*128 + (i//(C*T))*LBO*8 + (j%8)*W*8 + (j//8)*SBO*8

The byte address is ``start_address + bit_offset // 8`` (bit ``bit_offset % 8`` for b1,
least significant bit first).  For the swizzled modes the hardware then XORs the
16-byte-chunk bits of that *absolute* shared address with its 128-byte-row bits, less the
base offset::

      phase = ((address >> 7) - base_offset) & (C - 1)
      address ^= phase << 4

so 128B XORs address bits 4-6, 64B bits 4-5 and 32B bit 4.  A pattern that starts at
address ``P`` (a multiple of 128, not of ``8*128``) with ``base_offset = (P >> 7) & 7``, as
the ISA prescribes, therefore reads exactly the canonical layout shifted by ``P``.  The base
offset plays no part in the no-swizzle mode.

**Images.**  Addresses here are relative to a shared-memory *image*: ``smem[0]`` is the byte
at shared address ``image_address`` and the descriptor's start address counts from image
byte 0 (the convention of the golden recordings).  The swizzle acts on absolute address
bits 4-9, so the map depends on ``image_address % 1024``.  The default ``image_address=0``
stands for any 1024-byte-aligned image, which is how the recordings were made and what the
ISA's swizzle patterns assume; for an image at another (16-byte aligned) address pass that
address, and the XOR is taken on ``image_address + relative address`` exactly as the
hardware would.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import AlignmentError, InvalidInstructionError, OperandError, SharedMemoryBoundsError
from ..formats import Format, as_numpy, get_format
from ..validate import excerpt, integer

SWIZZLE_MODES: dict[int, str] = {0: "none", 1: "128B", 2: "64B", 3: "32B"}
"""Descriptor bits 62-63 -> swizzle name."""

SWIZZLE_CODES: dict[str, int] = {name: code for code, name in SWIZZLE_MODES.items()}

SWIZZLE_BYTES: dict[str, int] = {"none": 16, "32B": 32, "64B": 64, "128B": 128}
"""Width in bytes of one swizzle-atom row (the 16-byte core-matrix row for ``none``)."""

MAJORS = ("K", "MN")

_FIELD_LIMIT = 1 << 18  # matrix-descriptor-encode keeps address bits 4-17


@dataclass(frozen=True)
class MatrixDescriptor:
    """One wgmma matrix descriptor, fields in bytes as the ISA names them.

    ``start_address``, ``leading_byte_offset`` and ``stride_byte_offset`` are byte values
    (multiples of 16 below 2**18); ``base_offset`` is 0-7; ``swizzle`` is ``"none"``,
    ``"128B"``, ``"64B"`` or ``"32B"``.
    """

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    base_offset: int = 0
    swizzle: str = "none"

    def __post_init__(self):
        for name in ("start_address", "leading_byte_offset", "stride_byte_offset"):
            _check_byte_field(name, getattr(self, name))
        integer(self.base_offset, "base_offset (3 bits)", 0, 7)
        if not isinstance(self.swizzle, str) or self.swizzle not in SWIZZLE_CODES:
            raise OperandError(
                f"swizzle must be one of {', '.join(map(repr, SWIZZLE_CODES))}, got {excerpt(self.swizzle)}"
            )

    @classmethod
    def decode(cls, value) -> "MatrixDescriptor":
        """The descriptor held in the 64-bit ``value`` (reserved bits are ignored)."""
        v = integer(value, "a matrix descriptor (a 64-bit value)", 0, (1 << 64) - 1)
        return cls(
            start_address=(v & 0x3FFF) << 4,
            leading_byte_offset=((v >> 16) & 0x3FFF) << 4,
            stride_byte_offset=((v >> 32) & 0x3FFF) << 4,
            base_offset=(v >> 49) & 0x7,
            swizzle=SWIZZLE_MODES[(v >> 62) & 0x3],
        )

    def encode(self) -> int:
        """The 64-bit descriptor value (a Python int), reserved bits zero."""
        return (
            _encode_field(self.start_address)
            | _encode_field(self.leading_byte_offset) << 16
            | _encode_field(self.stride_byte_offset) << 32
            | int(self.base_offset) << 49
            | SWIZZLE_CODES[self.swizzle] << 62
        )

    def __str__(self) -> str:
        return (
            f"start_address={self.start_address:#x}, leading_byte_offset={self.leading_byte_offset}, "
            f"stride_byte_offset={self.stride_byte_offset}, base_offset={self.base_offset}, "
            f"swizzle={self.swizzle}"
        )


def _check_byte_field(name: str, value) -> None:
    integer(value, f"{name} (bytes)", 0, _FIELD_LIMIT - 16)
    if int(value) % 16:
        raise AlignmentError(f"{name} must be a multiple of 16 bytes, got {value}")


def _encode_field(x: int) -> int:
    return (int(x) & 0x3FFFF) >> 4


def as_descriptor(desc) -> MatrixDescriptor:
    """``desc`` as a :class:`MatrixDescriptor` (accepts one, or its 64-bit value)."""
    if isinstance(desc, MatrixDescriptor):
        return desc
    if isinstance(desc, (int, np.integer)) and not isinstance(desc, (bool, np.bool_)):
        return _decoded(integer(desc, "a matrix descriptor (a 64-bit value)", 0, (1 << 64) - 1))
    raise OperandError(f"a matrix descriptor must be a MatrixDescriptor or a 64-bit integer, got {type(desc).__name__}")


@functools.lru_cache(maxsize=4096)
def _decoded(value: int) -> MatrixDescriptor:
    """:meth:`MatrixDescriptor.decode`, once per value, because every wgmma that passes its
    descriptors as 64-bit values asks several times and a decode is slow next to a call."""
    return MatrixDescriptor.decode(value)


def major_from_trans(imm_trans: int) -> str:
    """The major-ness selected by ``imm-trans-a``/``imm-trans-b``: 0 -> ``"K"``, 1 -> ``"MN"``."""
    if imm_trans not in (0, 1):
        raise InvalidInstructionError(f"imm-trans must be 0 or 1, got {imm_trans!r}")
    return "MN" if imm_trans else "K"


def swizzle_address(address, swizzle: str, base_offset: int = 0):
    """Apply the ``swizzle`` XOR to absolute shared-memory byte ``address`` (array or int).

    ``address ^ ((((address >> 7) - base_offset) & (W//16 - 1)) << 4)``; identity for
    ``"none"``.
    """
    if swizzle not in SWIZZLE_CODES:
        raise OperandError(f"unknown swizzle {swizzle!r}")
    mask = SWIZZLE_BYTES[swizzle] // 16 - 1
    if mask == 0:
        return address
    phase = ((address >> 7) - base_offset) & mask
    return address ^ (phase << 4)


def _check_shape(mn: int, k: int, bits: int, major: str, swizzle: str) -> None:
    if major not in MAJORS:
        raise OperandError(f"major must be 'K' or 'MN', got {major!r}")
    if bits not in (1, 8, 16, 32):
        raise OperandError(f"element width must be 1, 8, 16 or 32 bits, got {bits}")
    if mn <= 0 or k <= 0 or mn % 8 or (k * bits) % 128:
        raise OperandError(
            f"operand shape {mn}x{k} of {bits}-bit elements: mn must be a positive multiple of 8 "
            f"and k a whole number of 16-byte chunks"
        )
    if major == "MN" and (k % 8 or (mn * bits) % 128):
        raise OperandError(f"an MN-major operand needs k a multiple of 8 and mn whole 16-byte chunks, got {mn}x{k}")


def _bit_offsets(d: MatrixDescriptor, mn: int, k: int, bits: int, major: str) -> np.ndarray:
    """Offsets in bits from the start address, before swizzling (module docstring)."""
    i = np.arange(mn, dtype=np.int64)[:, None]
    j = np.arange(k, dtype=np.int64)[None, :]
    t = 128 // bits
    lbo, sbo = 8 * d.leading_byte_offset, 8 * d.stride_byte_offset
    if major == "K":
        if d.swizzle == "none":
            return (i % 8) * 128 + (i // 8) * sbo + (j // t) * lbo + (j % t) * bits
        row = 8 * SWIZZLE_BYTES[d.swizzle]
        return (i % 8) * row + (i // 8) * sbo + (j * bits // row) * lbo + (j * bits) % row
    if d.swizzle == "none":
        return (i % t) * bits + (i // t) * sbo + (j % 8) * 128 + (j // 8) * lbo
    c = SWIZZLE_BYTES[d.swizzle] // 16
    row = 8 * SWIZZLE_BYTES[d.swizzle]
    return (i % t) * bits + ((i // t) % c) * 128 + (i // (c * t)) * lbo + (j % 8) * row + (j // 8) * sbo


def element_addresses(desc, mn: int, k: int, elem_bits: int, major: str = "K", *, image_address: int = 0):
    """Where each element of an ``mn`` x ``k`` operand lives: ``(byte, bit)``, int64 ``[mn, k]``.

    ``byte`` is the image-relative address of the element's lowest byte (multi-byte elements
    are little-endian and never cross a 16-byte chunk); ``bit`` is the bit of that byte
    holding a b1 element (least significant first), 0 for wider types.  ``desc`` is a
    :class:`MatrixDescriptor` or its 64-bit value; ``major`` is ``"K"`` or ``"MN"``;
    ``image_address`` is the shared address of image byte 0 (module docstring).  No bounds
    check: see :func:`check_bounds`.
    """
    layout, start = _operand_layout(as_descriptor(desc), mn, k, elem_bits, major, image_address)
    return layout.offset + start, layout.bit.copy()


@dataclass(frozen=True, eq=False)  # hashed by identity: one object per cached layout
class _Layout:
    """An operand's :func:`element_addresses` less its start address, read-only, with what
    a read needs of them: the lowest and highest offset (for the bounds check) and each
    element's offset in words of its width.  Every element is aligned to its width: the
    start address and the image address are multiples of 16, the offsets within a 16-byte
    chunk multiples of the width, and the swizzle moves whole chunks.

    ``chunks``: where each row's elements fill whole 16-byte chunks in order (a K-major
    operand of 8 bits or more: the rows of its core matrices), the chunk of each group of
    ``16 / width`` elements, counted from the lowest one (``[mn, k * width / 16]``), so that
    a read moves 16 bytes at a time; else None."""

    offset: np.ndarray
    bit: np.ndarray
    lowest: int
    highest: int
    word: np.ndarray
    chunks: np.ndarray | None


def _operand_layout(d: MatrixDescriptor, mn: int, k: int, bits: int, major: str, image_address: int):
    """``(layout, start)``: element ``(i, j)``'s image byte is ``layout.offset[i, j] + start``.

    The swizzle XORs address bits 4-6 with bits 7-9, so moving an operand by a multiple of
    1024 bytes moves every element by as much: the layout depends on the start address only
    through ``(image_address + start_address) % 1024``.  Built once per such phase, shape
    and descriptor fields (:func:`_layout`), it serves every step of a k-loop, whose
    descriptors differ in their start addresses, so that only the first step pays for
    building it."""
    if image_address < 0:
        raise OperandError(f"image_address must be a non-negative shared address, got {image_address}")
    if image_address % 16:
        raise AlignmentError(f"image_address must be 16-byte aligned, got {image_address}")
    phase = (int(image_address) + d.start_address) % 1024
    return _layout(d.leading_byte_offset, d.stride_byte_offset, d.base_offset, d.swizzle, phase, mn, k, bits,
                   major), d.start_address


@functools.lru_cache(maxsize=256)
def _layout(lbo, sbo, base_offset, swizzle, phase, mn, k, bits, major) -> _Layout:
    """The :class:`_Layout` of an operand whose start lies at ``phase`` past a 1024-byte
    boundary (the rule of the module docstring, less the start address)."""
    d = MatrixDescriptor(0, lbo, sbo, base_offset, swizzle)
    _check_shape(mn, k, bits, major, swizzle)
    off = _bit_offsets(d, mn, k, bits, major)
    offset = swizzle_address(phase + off // 8, swizzle, base_offset) - phase
    bit = off % 8
    word = offset // max(bits // 8, 1)
    chunks = _chunks(offset, bits)
    for x in (offset, bit, word) + ((chunks,) if chunks is not None else ()):
        x.flags.writeable = False
    return _Layout(offset, bit, int(offset.min()), int(offset.max()), word, chunks)


def _chunks(offset: np.ndarray, bits: int) -> np.ndarray | None:
    """:attr:`_Layout.chunks` of element offsets ``[mn, k]``, or None."""
    per = 128 // bits  # elements in a chunk
    if bits < 8 or offset.size == 0 or offset.shape[1] % per:
        return None
    groups = offset.reshape(offset.shape[0], -1, per)
    first = groups[..., :1]
    if np.any(first % 16) or np.any(groups != first + (bits // 8) * np.arange(per)):
        return None
    return first[..., 0] // 16 - int(offset.min()) // 16


def check_bounds(byte: np.ndarray, elem_bits: int, image_size: int, desc, name: str = "operand") -> None:
    """Raise :class:`SharedMemoryBoundsError` if any element at ``byte`` leaves the image."""
    nbytes = max(elem_bits // 8, 1)
    bad = (byte < 0) | (byte + nbytes > image_size)
    if not bad.any():
        return
    i, j = (int(x[0]) for x in np.nonzero(bad))
    addr = int(byte[i, j])
    raise SharedMemoryBoundsError(
        f"{name} reads outside the shared-memory image: element (row {i}, k {j}) at image byte "
        f"{addr} ({nbytes} byte{'s' if nbytes > 1 else ''}), but the image holds {image_size} bytes "
        f"[0, {image_size}); descriptor: {as_descriptor(desc)}"
    )


def _check_layout_bounds(layout: _Layout, start: int, elem_bits: int, image_size: int, desc, name: str) -> None:
    """:func:`check_bounds` of an operand at ``start``, by its lowest and highest byte first
    (the element-by-element check runs only to name the element that leaves the image)."""
    if _outside(layout, start, elem_bits, image_size):
        check_bounds(layout.offset + start, elem_bits, image_size, desc, name)


def _outside(layout: _Layout, start, elem_bits: int, image_size: int):
    """Whether an operand of ``layout`` at ``start`` (an int, or an array of them: one
    answer each) reads a byte outside an image of ``image_size`` bytes."""
    return (layout.lowest + start < 0) | (layout.highest + start + max(elem_bits // 8, 1) > image_size)


def operand_footprint(desc, mn: int, k: int, elem_bits: int, major: str = "K", *, image_address: int = 0,
                      image_size: int | None = None, name: str = "operand") -> np.ndarray:
    """Every image byte an ``mn`` x ``k`` operand occupies, sorted and unique (a new array;
    the pattern is built once per layout).  Where ``image_size`` is given, the addresses are
    checked against it first (:func:`check_bounds`)."""
    layout, start = _operand_layout(as_descriptor(desc), mn, k, elem_bits, major, image_address)
    if image_size is not None:
        _check_layout_bounds(layout, start, elem_bits, image_size, desc, name)
    return _footprint(layout, max(elem_bits // 8, 1)) + start


@functools.lru_cache(maxsize=256)
def _footprint(layout: _Layout, width: int) -> np.ndarray:
    span = np.zeros(layout.highest + width - layout.lowest, np.bool_)
    for q in range(width):
        span[layout.offset.ravel() - layout.lowest + q] = True
    out = np.flatnonzero(span) + layout.lowest
    out.flags.writeable = False
    return out


def gather_operand(smem, desc, mn: int, k: int, fmt, major: str = "K", *, image_address: int = 0,
                   name: str = "operand") -> np.ndarray:
    """Read an ``mn`` x ``k`` wgmma operand from the shared-memory image ``smem``.

    ``smem`` is a 1-D ``uint8`` image (byte 0 at ``image_address``, 1024-byte aligned by
    default); ``fmt`` a :class:`~fastmma.formats.Format` or its name.  Returns the element
    bits, dtype ``fmt.storage`` (b1 as ``uint8`` 0/1), row ``i`` = M (for A) or N (for B)
    index, column ``j`` = K index.  MN-major exists only for 16-bit types (f16/bf16), as
    for the instruction's imm-trans.  Every address is checked against the image before
    anything is read; ``name`` (e.g. ``"a_desc"``) labels the error.
    """
    fmt = _operand_format(fmt, major)
    smem = as_numpy(smem, "smem")
    if smem.dtype != np.uint8 or smem.ndim != 1:
        raise OperandError(f"smem must be a 1-D uint8 image, got dtype {smem.dtype} and shape {smem.shape}")
    layout, start = _operand_layout(as_descriptor(desc), mn, k, fmt.bits, major, image_address)
    _check_layout_bounds(layout, start, fmt.bits, smem.size, desc, name)
    return _read(layout, fmt, _whole_chunks(np.ascontiguousarray(smem)[None]), start, 0)


def _operand_format(fmt, major: str) -> Format:
    """``fmt`` as a :class:`Format`, checked to allow ``major``: MN-major exists only for the
    16-bit types, as the instruction's imm-trans does."""
    fmt = get_format(fmt) if not isinstance(fmt, Format) else fmt
    if major == "MN" and fmt.bits != 16:
        raise InvalidInstructionError(
            f"MN-major (imm-trans = 1) operands exist only for f16/bf16, not {fmt.name}"
        )
    return fmt


def _read(layout: _Layout, fmt: Format, images: np.ndarray, start, image_of):
    """The bits of operands of ``layout``, each at byte ``start`` of image
    ``images[image_of]`` (``images``: C-contiguous ``uint8[U, bytes]``, ``bytes`` a multiple
    of 16, :func:`_whole_chunks`; bounds already checked): ``[mn, k]`` for one operand
    (``start`` and ``image_of`` ints), ``[S, mn, k]`` for arrays of ``S`` of them.  One
    indexing reads them all: 16 bytes at a time where the layout has
    :attr:`_Layout.chunks`, else each element's word (little-endian) or, for b1, its bit."""
    stacked = isinstance(start, np.ndarray)
    if stacked:
        start, image_of = start[:, None, None], image_of[:, None, None]
    if fmt.bits == 1:
        byte = layout.offset + (start + image_of * images.shape[1])
        return (images.reshape(-1)[byte] >> layout.bit.astype(np.uint8)) & np.uint8(1)
    if layout.chunks is not None:
        chunks = images.view(np.uint64).reshape(-1, 2)
        base = (start + layout.lowest) // 16 + image_of * (images.shape[1] // 16)  # the start: 16-byte aligned
        if not stacked:  # the chunks from the operand's first on: the layout's index as it is
            return np.take(chunks[base:], layout.chunks, axis=0).view(fmt.storage).reshape(layout.offset.shape)
        got = np.take(chunks, (layout.chunks + base).reshape(-1), axis=0).view(fmt.storage)
        return got.reshape((len(base),) + layout.offset.shape)
    width = fmt.bits // 8
    words = images.view(f"<u{width}").reshape(-1)
    return words[layout.word + (start // width + image_of * (images.shape[1] // width))].astype(fmt.storage,
                                                                                              copy=False)


#: The descriptor bits that decide an operand's layout besides its start address: LBO, SBO,
#: the base offset and the swizzle (module docstring's table).
_LAYOUT_BITS = (0x3FFF << 16) | (0x3FFF << 32) | (0x7 << 49) | (0x3 << 62)


def descriptor_values(desc, name: str = "descriptor") -> np.ndarray:
    """``desc`` as a uint64 array of 64-bit descriptor values (0-d for one descriptor): a
    :class:`MatrixDescriptor`, a 64-bit integer, or an array (or list) of either."""
    if isinstance(desc, (MatrixDescriptor, int, np.integer)) and not isinstance(desc, (bool, np.bool_)):
        desc = [desc]
        shape = ()
    else:
        arr = np.asarray(desc)
        shape = arr.shape
        if arr.dtype.kind in "ui":
            if arr.dtype.kind == "i" and (arr < 0).any():
                raise OperandError(f"{name} must hold 64-bit descriptor values, got a negative one: {arr.min()}")
            return arr.astype(np.uint64)
        if arr.dtype != object:
            raise OperandError(f"{name} must be a matrix descriptor, a 64-bit integer or an array of them, "
                               f"got dtype {arr.dtype}")
        desc = arr.ravel().tolist()
    values = []
    for x in desc:
        if isinstance(x, MatrixDescriptor):
            x = x.encode()
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or not 0 <= int(x) < 1 << 64:
            raise OperandError(f"{name} must hold matrix descriptors or 64-bit integers, got {x!r:.60}")
        values.append(int(x))
    return np.array(values, np.uint64).reshape(shape)


def gather_operand_stack(images: np.ndarray, image_of: np.ndarray, desc: np.ndarray, mn: int, k: int, fmt,
                         major: str = "K", *, image_address: np.ndarray, name: str = "operand") -> np.ndarray:
    """:func:`gather_operand` for a stack of ``S`` operands: operand ``s`` read through
    descriptor ``desc[s]`` (uint64 ``[S]``) from image ``images[image_of[s]]`` (``images``:
    C-contiguous ``uint8[U, bytes]``), whose byte 0 lies at shared address
    ``image_address[s]`` (int64 ``[S]``, checked by the caller to be 16-byte aligned).
    Returns the bits ``[S, mn, k]``.

    Operands whose descriptors differ only in their start addresses, at the same phase of
    1024 bytes (:func:`_operand_layout`), share one layout and are read by one indexing of
    the images.  Every address is checked before anything is read; the error names the
    operand's place in the stack."""
    fmt = _operand_format(fmt, major)
    start = ((desc & np.uint64(0x3FFF)) << np.uint64(4)).astype(np.int64)
    phase = (image_address + start) % 1024
    key = (desc & np.uint64(_LAYOUT_BITS)) | (phase >> 4).astype(np.uint64)  # the phase in the start bits
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    layouts = []
    for g, s in enumerate(first):
        layout, _ = _operand_layout(as_descriptor(int(desc[s])), mn, k, fmt.bits, major, int(image_address[s]))
        members = np.flatnonzero(group == g)
        _check_stack_bounds(layout, start, members, fmt.bits, images.shape[1], desc, name)
        layouts.append((layout, members))
    images = _whole_chunks(images)
    if len(layouts) == 1:  # the usual stack: read straight into the result
        return _read(layouts[0][0], fmt, images, start, image_of)
    out = np.empty((desc.size, mn, k), fmt.storage)
    for layout, members in layouts:
        out[members] = _read(layout, fmt, images, start[members], image_of[members])
    return out


def _whole_chunks(images: np.ndarray) -> np.ndarray:
    """``images`` (C-contiguous ``uint8[U, bytes]``) with each image's length a multiple of
    16 bytes (zeros appended where it is not, past the bounds already checked), so that it
    can be viewed as chunks or words."""
    size = images.shape[1]
    if size % 16 == 0:
        return images
    padded = np.zeros((images.shape[0], size + (-size) % 16), np.uint8)
    padded[:, :size] = images
    return padded


def _check_stack_bounds(layout: _Layout, start: np.ndarray, members: np.ndarray, elem_bits: int, image_size: int,
                        desc: np.ndarray, name: str) -> None:
    """:func:`_check_layout_bounds` of the operands ``members`` of a stack, all of ``layout``."""
    bad = _outside(layout, start[members], elem_bits, image_size)
    if bad.any():
        s = int(members[np.argmax(bad)])
        check_bounds(layout.offset + start[s], elem_bits, image_size, int(desc[s]), f"{name} of warpgroup {s}")
