"""``ldmatrix`` and ``stmatrix`` (PTX ISA 9.7.14.5.15-16) on a warp's registers and a shared-memory
image, and ``movmatrix`` (9.7.14.5.17) on a warp's registers: the moves that feed ``mma.sync``
its fragments.

``smem`` is a ``uint8`` image of shared memory (one for every warp, or one per warp
``[..., bytes]``); ``addresses`` holds each lane's address operand as a byte offset into it,
``int[..., 32]`` (lanes from ``8 * num`` on give none, and theirs are not read).  Registers are
``uint32[..., 32, num]``.  Which lane's address names which row, and which register holds
which elements: :mod:`fastmma.layout.matrix_rows`.

Example::

    regs = fastmma.ldmatrix.ldmatrix("ldmatrix.sync.aligned.m8n8.x4.shared.b16", smem, addresses)
    fastmma.ldmatrix.stmatrix("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", smem, addresses, regs)
    d = fastmma.ldmatrix.movmatrix("movmatrix.sync.aligned.m8n8.trans.b16", regs[..., :1])

Every row must lie inside the image and start on a 16-byte boundary (the ISA's rows are 16
bytes, read whole); an error names the first warp and lane at fault, before any byte is read
or written.  Stores go in stack order, then lane order: where two rows overlap (a race on a
GPU, whose outcome the ISA leaves open) the later one's bytes are what memory keeps.
"""

from __future__ import annotations

import numpy as np

from .errors import AlignmentError, MemoryBoundsError, OperandError
from .formats import as_numpy
from .isa import Ldmatrix, Movmatrix, Stmatrix
from .layout import register_file
from .layout.matrix_rows import ROW_BYTES, ROWS, registers_to_rows, rows_to_registers, transpose_registers
from .mma import as_instruction, broadcast_stacks
from .validate import output_array, public, writeback

WARP_SIZE = 32


@public
def ldmatrix(instruction, smem, addresses) -> np.ndarray:
    """``ldmatrix``: the registers ``uint32[..., 32, num]`` every lane receives.

    Raises :class:`~fastmma.errors.InvalidInstructionError` for text that is no ``ldmatrix``,
    :class:`~fastmma.errors.OperandError` for an image or addresses of the wrong type or shape,
    and :class:`~fastmma.errors.AlignmentError` or :class:`~fastmma.errors.MemoryBoundsError`
    for a row's address (the message names the lane).
    Example: ``ldmatrix("ldmatrix.sync.aligned.m8n8.x1.shared.b16", smem, np.arange(32) * 16)``.
    """
    inst = as_instruction(instruction, (Ldmatrix,))
    image, starts, batch = _rows(inst, smem, addresses)
    index = starts[..., None] + np.arange(ROW_BYTES)
    data = np.take_along_axis(image, index.reshape(batch + (-1,)), axis=-1)
    rows = data.view("<u2").reshape(batch + (inst.num, ROWS, ROWS))
    return rows_to_registers(rows, inst.trans)


@public
def stmatrix(instruction, smem, addresses, regs) -> None:
    """``stmatrix``: the lanes' registers ``uint32[..., 32, num]`` written to ``smem`` (in place).

    Raises what :func:`ldmatrix` raises, and :class:`~fastmma.errors.OperandError` for registers
    of the wrong dtype or shape; nothing is written then.
    """
    inst = as_instruction(instruction, (Stmatrix,))
    output_array(smem, "smem", np.uint8, what="stmatrix writes it")
    words = register_file(regs, WARP_SIZE, inst.num, "regs", stack=True)
    image, starts, batch = _rows(inst, smem, addresses, extra={"regs": words.shape[:-2]})
    per_warp = smem.ndim > 1
    if per_warp and smem.shape[:-1] != batch:
        raise OperandError(f"smem of shape {smem.shape} holds an image per warp, but the warps are {batch}: "
                           f"stmatrix needs one image for all or one for each")
    data = np.ascontiguousarray(registers_to_rows(np.broadcast_to(words, batch + words.shape[-2:]), inst.trans))
    bases = (np.arange(int(np.prod(batch)), dtype=np.int64).reshape(batch) * smem.shape[-1] if per_warp
             else np.zeros(batch, np.int64))
    index = (bases[..., None, None] + starts[..., None] + np.arange(ROW_BYTES)).reshape(-1)
    values = data.view(np.uint8).reshape(-1)
    last = index.size - 1 - np.unique(index[::-1], return_index=True)[1]  # each byte's last writer
    with writeback(smem) as flat:
        flat[index[last]] = values[last]


@public
def movmatrix(instruction, regs) -> np.ndarray:
    """``movmatrix``: each lane's destination register ``uint32[..., 32, 1]``, from the source
    registers ``regs`` (``uint32[..., 32, 1]``, one register file per warp of a stack) holding
    an 8x8 matrix of 16-bit elements; every warp's matrix is transposed on its own.

    Raises :class:`~fastmma.errors.InvalidInstructionError` for text that is no ``movmatrix``, and
    :class:`~fastmma.errors.OperandError` for registers of the wrong dtype or shape.
    """
    as_instruction(instruction, (Movmatrix,))
    return transpose_registers(register_file(regs, WARP_SIZE, 1, "regs", stack=True))


def _rows(inst, smem, addresses, extra=None):
    """(the image broadcast to the warps ``[..., bytes]``, each used lane's row address
    ``int64[..., 8 * num]``, the warps' stack shape), every address checked."""
    image = as_numpy(smem, "smem")
    if image.dtype != np.uint8 or image.ndim < 1:
        raise OperandError(f"smem must be a uint8 image of shared memory ([bytes] or [..., bytes]), got dtype "
                           f"{image.dtype}, shape {image.shape}")
    addr = as_numpy(addresses, "addresses")
    if addr.dtype.kind not in "iu" or addr.ndim < 1 or addr.shape[-1] != WARP_SIZE:
        raise OperandError(f"addresses must be integers, one per lane ([..., 32]), got dtype {addr.dtype}, "
                           f"shape {addr.shape}")
    shapes = {"addresses": addr.shape[:-1], "smem": image.shape[:-1], **(extra or {})}
    batch = broadcast_stacks(shapes, "the stack dimensions of addresses, smem and regs")
    used = np.broadcast_to(addr[..., :ROWS * inst.num], batch + (ROWS * inst.num,))
    nbytes = image.shape[-1]
    far = np.iinfo(np.int64).max  # an unsigned address past it is out of bounds too, not a wrapped int64
    starts = np.where(used > far, -1, used).astype(np.int64) if used.dtype == np.uint64 else used.astype(np.int64)
    outside = (starts < 0) | (starts > nbytes - ROW_BYTES)
    if outside.any():
        where = np.unravel_index(int(np.argmax(outside)), outside.shape)
        raise MemoryBoundsError(f"{inst.opcode}: lane {where[-1]}{_warp(where)} gives address {int(used[where])}: "
                                f"its 16-byte row must lie inside the {nbytes}-byte image")
    misaligned = starts % ROW_BYTES != 0
    if misaligned.any():
        where = np.unravel_index(int(np.argmax(misaligned)), misaligned.shape)
        raise AlignmentError(f"{inst.opcode}: lane {where[-1]}{_warp(where)} gives address {int(starts[where])}: "
                             f"each row address must be a multiple of 16 bytes")
    return np.broadcast_to(image, batch + (nbytes,)), starts, batch


def _warp(where) -> str:
    return f" of warp {tuple(int(i) for i in where[:-1])}" if len(where) > 1 else ""
