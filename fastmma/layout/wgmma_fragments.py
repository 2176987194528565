"""Per-thread register fragments of ``wgmma.mma_async``: the A operand and the C/D accumulator.

PTX ISA 9.7.15.5.1.1 "Register Fragments" (figures for .m64nNk16, .m64nNk8, .m64nNk32 and
.m64nNk256).  A warpgroup is 128 threads; for thread ``t`` let::

    w = t // 32        (warp: rows 16w .. 16w+15)
    g = (t % 32) // 4  (groupID)
    q = t % 4          (thread in group)

**Accumulator D (and C)**, 64 x N.  ``.f32``/``.s32``: N/2 registers per thread, register
``r`` holds::

    row = 16w + g + 8 * ((r // 2) % 2)
    col = 8 * (r // 4) + 2q + r % 2

i.e. the CuTe layout ``((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512))`` from
(thread, value) to the column-major index ``row + 64*col``.  ``.f16``: N/4 ``.f16x2``
registers; half ``h`` (0 = bits 0-15) of register ``r`` is the element that 32-bit value
``2r + h`` would hold::

    row = 16w + g + 8 * (r % 2)
    col = 8 * (r // 2) + 2q + h

**Multiplicand A in registers**, 64 x K: four 32-bit registers per thread, each packing
``E = 32 / bits`` elements, element ``e`` in bits ``[e*bits, (e+1)*bits)``::

    row = 16w + g + 8 * (r % 2)
    col = E*q + e + 4E * (r // 2)

with ``E = 2`` for f16/bf16 (K=16), 1 for tf32 (K=8), 4 for e4m3/e5m2/s8/u8 (K=32) and 32
for b1 (K=256, element ``e`` at bit ``e``, least significant first: the same order as
b1 bytes in shared memory, which the .and.popc recordings confirm).  For f16 this is
CuTe's ``((4,8,4),(2,2,2)) : ((128,1,16),(64,8,512))``.

Element arrays are raw bits (``Format.storage`` dtypes; b1 as uint8 0/1) and may carry
leading batch dimensions: ``[..., 64, N]`` <-> ``[..., 128, ND]``.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import OperandError
from ..formats import Format, as_numpy, get_format, to_bits
from . import flat_matrices, slots_to_words, words_to_slots

THREADS = 128
M = 64
A_REGS = 4

_ATYPES = ("f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8", "b1")
_DTYPES = ("f32", "s32", "f16")


def _fmt(x, allowed, what) -> Format:
    fmt = x if isinstance(x, Format) else get_format(x)
    if fmt.name not in allowed:
        raise OperandError(f"{what} must be one of {', '.join(allowed)}, got {fmt.name}")
    return fmt


def _thread_coords():
    t = np.arange(THREADS, dtype=np.int64)
    return t // 32, (t % 32) // 4, t % 4


def a_k(atype) -> int:
    """K of the wgmma shape whose A has type ``atype`` (256 bits of K per row)."""
    return 256 // _fmt(atype, _ATYPES, "atype").bits


def d_regs(n: int, dtype) -> int:
    """Accumulator registers per thread: N/2 for .f32/.s32, N/4 for .f16."""
    fmt = _fmt(dtype, _DTYPES, "accumulator type")
    _check_n(n)
    return n // 2 if fmt.bits == 32 else n // 4


def _check_n(n: int) -> None:
    if not isinstance(n, (int, np.integer)) or n < 8 or n > 256 or n % 8:
        raise OperandError(f"N must be a multiple of 8 in [8, 256], got {n!r}")


def d_fragment_map(n: int, dtype):
    """``(row, col)`` of every accumulator element: int64 arrays ``[128, ND, E]``.

    ``E`` is 1 for .f32/.s32 and 2 for .f16 (index = half of the .f16x2 register, low first).
    """
    nd = d_regs(n, dtype)
    e_per = 2 if _fmt(dtype, _DTYPES, "accumulator type").bits == 16 else 1
    w, g, q = (x[:, None, None] for x in _thread_coords())
    r = np.arange(nd, dtype=np.int64)[None, :, None]
    v = e_per * r + np.arange(e_per, dtype=np.int64)[None, None, :]  # 32-bit value index
    row = 16 * w + g + 8 * ((v // 2) % 2)
    col = 8 * (v // 4) + 2 * q + v % 2
    return np.broadcast_arrays(row, col)


def a_fragment_map(atype):
    """``(row, col, shift)`` of every A element: int64 arrays ``[128, 4, E]``, E = 32/bits."""
    fmt = _fmt(atype, _ATYPES, "atype")
    e_per = 32 // fmt.bits
    w, g, q = (x[:, None, None] for x in _thread_coords())
    r = np.arange(A_REGS, dtype=np.int64)[None, :, None]
    e = np.arange(e_per, dtype=np.int64)[None, None, :]
    row = 16 * w + g + 8 * (r % 2)
    col = e_per * q + e + 4 * e_per * (r // 2)
    return np.broadcast_arrays(row, col, e * fmt.bits)


def _regs_in(regs, nregs: int, what: str) -> np.ndarray:
    regs = as_numpy(regs, what)
    if regs.dtype.kind not in "iu" or regs.dtype.itemsize != 4:
        raise OperandError(f"{what} must hold 32-bit registers (uint32), got dtype {regs.dtype}")
    if regs.shape[-2:] != (THREADS, nregs):
        raise OperandError(f"{what} must have shape [..., {THREADS}, {nregs}], got {regs.shape}")
    return regs.view(np.uint32)


def _elems_in(values, fmt: Format, k: int, what: str) -> np.ndarray:
    bits = to_bits(values, fmt, what)
    if bits.shape[-2:] != (M, k):
        raise OperandError(f"{what} must have shape [..., {M}, {k}], got {bits.shape}")
    return bits


@functools.lru_cache(maxsize=None)
def _slots(kind: str, key) -> tuple[np.ndarray, np.ndarray]:
    """``(index, inverse)`` of a fragment map, built once and read-only: ``index[t, s]`` is
    the row-major position in the matrix of the element in slot ``s`` of thread ``t`` (slot
    ``s`` = register ``s // E``, element ``s % E``, the lowest bits first), ``inverse`` the
    slot (``t * slots + s``) of each matrix element.  A register is then its E slots'
    ``bits``-wide words side by side, little-endian: one gather packs or unpacks a whole
    register file, where the maps' shifts and ors took most of a wgmma call."""
    if kind == "d":
        n, fmt = key
        row, col = d_fragment_map(n, fmt)
        cols = n
    else:
        row, col, _ = a_fragment_map(key)
        cols = a_k(key)
    index = (row * cols + col).reshape(THREADS, -1)
    inverse = np.empty(index.size, np.intp)
    inverse[index.ravel()] = np.arange(index.size)
    index.flags.writeable = False
    inverse.flags.writeable = False
    return index, inverse


def _pack(bits: np.ndarray, index: np.ndarray, nbits: int) -> np.ndarray:
    """Registers ``uint32[..., 128, R]`` from element bits ``[..., M, cols]``."""
    flat = flat_matrices(bits)
    return slots_to_words(np.take(flat, index, axis=-1), nbits)  # np.take: faster than flat[..., index]


def _unpack(regs: np.ndarray, inverse: np.ndarray, nbits: int, cols: int, dtype) -> np.ndarray:
    """Element bits ``[..., M, cols]`` (``dtype``) held in registers ``[..., 128, R]``."""
    flat = np.take(flat_matrices(words_to_slots(regs, nbits)), inverse, axis=-1)
    return flat.reshape(regs.shape[:-2] + (M, cols)).astype(dtype, copy=False)


def pack_d(values, dtype) -> np.ndarray:
    """Accumulator registers ``uint32[..., 128, ND]`` holding the 64 x N matrix ``values``.

    ``values`` are raw bits (``uint32`` for .f32/.s32, ``uint16`` for .f16) or the type's
    values (float32 / int32 / float16).
    """
    fmt = _fmt(dtype, _DTYPES, "accumulator type")
    values = as_numpy(values, "values")
    n = values.shape[-1] if values.ndim >= 2 else 0
    d_regs(n, fmt)  # checks n
    bits = _elems_in(values, fmt, n, "accumulator matrix")
    return _pack(bits, _slots("d", (n, fmt.name))[0], fmt.bits)


def unpack_d(regs, dtype, n: int) -> np.ndarray:
    """The 64 x N accumulator bits (``fmt.storage``) held in registers ``[..., 128, ND]``."""
    fmt = _fmt(dtype, _DTYPES, "accumulator type")
    regs = _regs_in(regs, d_regs(n, fmt), "accumulator registers")
    return _unpack(regs, _slots("d", (n, fmt.name))[1], fmt.bits, n, fmt.storage)


def pack_a(values, atype) -> np.ndarray:
    """A-operand registers ``uint32[..., 128, 4]`` holding the 64 x K matrix ``values``."""
    fmt = _fmt(atype, _ATYPES, "atype")
    bits = _elems_in(values, fmt, a_k(fmt), "A matrix")
    return _pack(bits, _slots("a", fmt.name)[0], fmt.bits)


def unpack_a(regs, atype) -> np.ndarray:
    """The 64 x K A-operand bits (``fmt.storage``; b1 as 0/1) held in ``regs[..., 128, 4]``.

    tf32 elements keep all 32 register bits; the instruction ignores the low 13.
    """
    fmt = _fmt(atype, _ATYPES, "atype")
    regs = _regs_in(regs, A_REGS, "A registers")
    return _unpack(regs, _slots("a", fmt.name)[1], fmt.bits, a_k(fmt), fmt.storage)
