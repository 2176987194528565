"""Where an instruction's elements live, as index arrays built once and applied by one indexing.

A prepared instruction (:func:`fastmma.wgmma.prepare`, :func:`fastmma.mma_sync.prepare`,
:func:`fastmma.wmma.prepare`) reads its operands and writes D through these maps on every
call.  They are the maps of :mod:`.wgmma_fragments`, :mod:`.mma_fragments`,
:mod:`.wmma_fragments` and :mod:`.descriptor`, turned from rules into flat indices:

* :class:`RegisterGather`: a matrix of element bits from a register file ``uint32[threads,
  words]`` (the slots of its words as :func:`~fastmma.layout.slots_to_words` packs them);
* :class:`RegisterScatter`: a register file from a matrix of element bits (D);
* :class:`DescriptorReader`: a wgmma operand read from a shared-memory image through a
  64-bit matrix descriptor, its map built once per descriptor layout and phase of 1024 bytes
  (as :func:`~fastmma.layout.descriptor.gather_operand` builds it), the start address added
  at each call.
"""

from __future__ import annotations

import numpy as np

from ..errors import AlignmentError, OperandError
from ..formats import Format, as_numpy, get_format, is_int
from . import register_file
from .descriptor import _LAYOUT_BITS, MatrixDescriptor, _operand_layout, as_descriptor, gather_operand
from .wgmma_fragments import A_REGS, M, a_fragment_map, d_fragment_map

U32 = np.dtype(np.uint32)
U8 = np.dtype(np.uint8)
_START_BITS = 0x3FFF  # descriptor bits 0-13: encode(start_address)


def units(index: np.ndarray, bits: int, row_bytes: int) -> tuple[np.ndarray, np.dtype]:
    """``(unit_index, unit)``: ``index`` (each output element's flat source element, of
    ``bits`` >= 8) as an index of wider units, 8 or 4 bytes of consecutive elements, where
    every aligned run of such elements of the output comes from one aligned run of the
    source and the source's rows (``row_bytes``) hold whole units; else ``index`` itself and
    the elements' storage dtype.  One indexing then moves a unit at a time (a wgmma's
    accumulator registers hold neighbouring pairs: half the elements to index)."""
    flat = index.reshape(-1)
    for unit_bytes in (8, 4):
        per = unit_bytes * 8 // bits
        if per < 2 or index.shape[-1] % per or row_bytes % unit_bytes:
            continue
        runs = flat.reshape(-1, per)
        if not (runs[:, 0] % per).any() and (runs == runs[:, :1] + np.arange(per)).all():
            return (runs[:, 0] // per).reshape(index.shape[:-1] + (-1,)), np.dtype(f"<u{unit_bytes}")
    return index, np.dtype(f"<u{bits // 8}")


class RegisterGather:
    """The element bits ``[*shape]`` of ``fmt`` that a register file ``uint32[threads,
    words]`` holds, element ``e`` in slot ``slot[e]`` (counted over the file's words in C
    order, ``32 / bits`` slots a word, slot 0 in the lowest bits; an f64 slot is two words).
    Whole-byte elements are one indexing of the file viewed as units of them (:func:`units`);
    sub-byte ones are shifted out of their word."""

    __slots__ = ("index", "shift", "mask", "view", "storage")

    def __init__(self, slot: np.ndarray, fmt: Format, words: int):
        slot = np.asarray(slot, np.intp)
        self.storage = np.dtype(fmt.storage)
        if fmt.bits >= 8:
            (self.index, view), self.shift = units(slot, fmt.bits, 4 * words), None
            self.view = U32 if view == U32 else view
        else:
            per = 32 // fmt.bits
            self.index, self.view = slot // per, None
            self.shift = ((slot % per) * fmt.bits).astype(np.uint32)
            self.mask = np.uint32((1 << fmt.bits) - 1)

    def __call__(self, regs: np.ndarray) -> np.ndarray:
        """``regs``: C-contiguous ``uint32``, checked by the caller."""
        if self.shift is not None:
            return ((regs.take(self.index) >> self.shift) & self.mask).astype(np.uint8)
        if self.view is U32:  # each view costs as much as a small indexing: none where none is needed
            got = regs.take(self.index)
        else:
            got = regs.view(self.view).take(self.index)
        return got if self.view is self.storage else got.view(self.storage)


class RegisterScatter:
    """A register file ``uint32[threads, words]`` holding the element bits of a matrix of
    ``fmt`` (whole bytes; ``cols`` a row): slot ``s`` of the file (C order) takes the matrix's
    flat element ``source[s]``; slots that hold no element (``source`` -1) are 0."""

    __slots__ = ("index", "empty", "view")

    def __init__(self, source: np.ndarray, fmt: Format, cols: int):
        source = np.asarray(source, np.intp)
        self.empty = source < 0 if (source < 0).any() else None
        if self.empty is None:
            self.index, self.view = units(source, fmt.bits, cols * fmt.bits // 8)
        else:
            self.index, self.view = np.maximum(source, 0), fmt.storage

    def __call__(self, bits: np.ndarray) -> np.ndarray:
        slots = bits.view(self.view).take(self.index)
        if self.empty is not None:
            slots[self.empty] = 0
        return slots.view(U32)


def wgmma_d_maps(n: int, dtype: str) -> tuple[RegisterGather, RegisterScatter]:
    """C's gather (64 x N bits from ``uint32[128, ND]``) and D's scatter, the maps of
    :func:`~fastmma.layout.wgmma_fragments.d_fragment_map`."""
    fmt = get_format(dtype)
    row, col = d_fragment_map(n, dtype)  # [128, ND, E]: E slots of a register, low first
    slot = np.arange(row.size).reshape(row.shape)
    where = np.empty((M, n), np.intp)
    where[row, col] = slot
    return RegisterGather(where, fmt, row.shape[1]), RegisterScatter((row * n + col).reshape(row.shape[0], -1), fmt, n)


def wgmma_a_gather(atype: str) -> RegisterGather:
    """A's gather (64 x K bits; b1 as 0/1) from ``uint32[128, 4]``, the map of
    :func:`~fastmma.layout.wgmma_fragments.a_fragment_map`."""
    fmt = get_format(atype)
    row, col, _ = a_fragment_map(atype)  # [128, 4, E]
    slot = np.arange(row.size).reshape(row.shape)
    where = np.empty((M, 256 // fmt.bits), np.intp)
    where[row, col] = slot
    return RegisterGather(where, fmt, A_REGS)


def fragment_gather(layout, arrange=None) -> RegisterGather:
    """A warp fragment's matrix ``[rows, cols]`` from ``uint32[32, words]``, each element from
    its first copy (a :class:`~fastmma.layout.wmma_fragments.FragmentLayout`'s ``first``), or
    the array ``arrange`` makes of the matrix (a reshape or transpose of it: the quad pairs'
    stack of products)."""
    index = np.asarray(layout.first).reshape(layout.rows, layout.cols)
    return RegisterGather(index if arrange is None else arrange(index), get_format(layout.elem_type), layout.words)


def fragment_scatter(layout) -> RegisterScatter:
    """D's fragment ``uint32[32, words]`` from its matrix (a whole-byte format's bits)."""
    return RegisterScatter(layout.index, get_format(layout.elem_type), layout.cols)


def checked_registers(values, shape: tuple, name: str) -> np.ndarray:
    """``values`` where it already is a C-contiguous ``uint32`` array of ``shape`` (the usual
    call, checked in a few attribute reads), else :func:`~fastmma.layout.register_file`'s
    check of it, which converts what the unprepared API accepts and raises for the rest."""
    if type(values) is np.ndarray and values.dtype is U32 and values.shape == shape and values.flags.c_contiguous:
        return values
    return register_file(values, shape[0], shape[1], name)


def checked_image(smem) -> np.ndarray:
    """The shared-memory image as a C-contiguous 1-D uint8 array, or an :class:`OperandError`."""
    if type(smem) is not np.ndarray or smem.dtype is not U8 or smem.ndim != 1 or not smem.flags.c_contiguous:
        if smem is None:
            raise OperandError("smem (the shared-memory image, uint8[S]) is required")
        smem = as_numpy(smem, "smem")
        if smem.dtype != np.uint8 or smem.ndim != 1:
            raise OperandError(f"smem must be a 1-D uint8 image, got dtype {smem.dtype} and shape {smem.shape}")
        smem = np.ascontiguousarray(smem)
    return smem


def check_image_address(image_address) -> int:
    """A shared address of image byte 0: a non-negative, 16-byte aligned integer."""
    if type(image_address) is int and image_address >= 0 and not image_address & 15:
        return image_address
    if not is_int(image_address):
        raise OperandError(f"image_address must be an integer shared address, got {image_address!r}")
    if image_address < 0:
        raise OperandError(f"image_address must be a non-negative shared address, got {image_address}")
    if image_address % 16:
        raise AlignmentError(f"image_address must be 16-byte aligned, got {image_address}")
    return int(image_address)


def descriptor_value(desc, name: str) -> int:
    """A descriptor operand as its 64-bit value: an int in [0, 2^64), or a
    :class:`~fastmma.layout.descriptor.MatrixDescriptor` (encoded)."""
    if type(desc) is int and 0 <= desc < 1 << 64:
        return desc
    if isinstance(desc, (int, np.integer)):
        if not 0 <= int(desc) < 1 << 64:
            raise OperandError(f"{name} must be a 64-bit descriptor value, got {desc}")
        return int(desc)
    if isinstance(desc, MatrixDescriptor):
        return desc.encode()
    raise OperandError(f"{name} must be a matrix descriptor (a MatrixDescriptor or its 64-bit value), got "
                       f"{type(desc).__name__}")


class DescriptorReader:
    """An ``mn`` x ``k`` wgmma operand of ``fmt`` (``major``: "K" or "MN") read from a
    shared-memory image through a descriptor value, as ``[mn, k]`` bits, or ``[k, mn]``
    where ``transposed`` (B as the kernels take it).  The element map is built once per
    layout (the descriptor's LBO, SBO, base offset and swizzle, and the start's phase of 1024
    bytes: :func:`~fastmma.layout.descriptor._operand_layout`); a call adds the start address,
    checks the operand's lowest and highest bytes against the image and reads it by one
    indexing of the bytes it spans.  An operand outside the image is left to
    :func:`~fastmma.layout.descriptor.gather_operand`, whose error names the element."""

    def __init__(self, mn: int, k: int, fmt: Format, major: str, transposed: bool, name: str):
        self.mn, self.k, self.fmt, self.major, self.transposed, self.name = mn, k, fmt, major, transposed, name
        self.width = max(fmt.bits // 8, 1)
        self._maps: dict[int, tuple] = {}

    def __call__(self, smem: np.ndarray, desc: int, image_address: int) -> np.ndarray:
        start = (desc & _START_BITS) << 4
        key = (desc & _LAYOUT_BITS) | ((image_address + start) & 1023) >> 4
        found = self._maps.get(key)
        if found is None:
            found = self._map(desc, image_address, key)
        lowest, span, index, bit, view = found
        s0 = start + lowest
        if s0 < 0 or s0 + span > smem.size:
            gather_operand(smem, desc, self.mn, self.k, self.fmt, self.major, image_address=image_address,
                           name=self.name)  # raises, naming the element outside the image
            raise AssertionError(f"{self.name}: bounds of the prepared map and of gather_operand disagree")
        seg = smem[s0:s0 + span]
        if bit is not None:
            return (seg.take(index) >> bit) & np.uint8(1)
        return seg.view(view).take(index).view(self.fmt.storage)

    def _map(self, desc: int, image_address: int, key: int) -> tuple:
        """``(lowest, span, index, bit, view)`` of a layout: the lowest byte from the start,
        the bytes spanned, each element's unit (:func:`units`; b1: byte) from the lowest, b1's
        bit and the unit's dtype."""
        layout, _ = _operand_layout(as_descriptor(desc), self.mn, self.k, self.fmt.bits, self.major, image_address)
        span = layout.highest + self.width - layout.lowest
        index = (layout.offset - layout.lowest) // self.width
        bit, view = None, self.fmt.storage
        if self.fmt.bits == 1:
            bit = layout.bit.astype(np.uint8)
        if self.transposed:
            index, bit = index.T.copy(), None if bit is None else bit.T.copy()
        elif bit is None:
            index, view = units(index, self.fmt.bits, span)
        if len(self._maps) >= 64:  # a program uses few layouts; a stray stream of them must not grow this
            self._maps.clear()
        self._maps[key] = found = (layout.lowest, span, index.astype(np.intp), bit, view)
        return found
