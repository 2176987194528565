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

import numpy as np
from numba import njit

from ..errors import OperandError
from ..formats import Format, as_numpy, get_format, to_bits

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


def _stack(x: np.ndarray, rows: int) -> np.ndarray:
    """``x[..., rows, W]`` as one C-contiguous stack ``[B, rows, W]``."""
    return np.ascontiguousarray(x).reshape((-1, rows, x.shape[-1]))


@njit(cache=True)
def _to_threads(words, regs):
    """``regs[b, 32w + 4g + q, 2c + h] = words[b, 16w + 8h + g, 4c + q]``: the rule of the
    module docstring, on words that each hold two neighbouring accumulator elements (``2q``
    and ``2q + 1`` of a row's block of 8) or the E elements of one A register."""
    for b in range(words.shape[0]):
        for w in range(4):
            for g in range(8):
                for q in range(4):
                    t = 32 * w + 4 * g + q
                    for c in range(words.shape[2] // 4):
                        regs[b, t, 2 * c] = words[b, 16 * w + g, 4 * c + q]
                        regs[b, t, 2 * c + 1] = words[b, 16 * w + 8 + g, 4 * c + q]


@njit(cache=True)
def _to_rows(regs, words):
    """The inverse of :func:`_to_threads`."""
    for b in range(regs.shape[0]):
        for w in range(4):
            for g in range(8):
                for q in range(4):
                    t = 32 * w + 4 * g + q
                    for c in range(regs.shape[2] // 2):
                        words[b, 16 * w + g, 4 * c + q] = regs[b, t, 2 * c]
                        words[b, 16 * w + 8 + g, 4 * c + q] = regs[b, t, 2 * c + 1]


def _pack(words: np.ndarray) -> np.ndarray:
    """Registers ``uint32[..., 128, R]`` from a stack of 64-row matrices of words ``[..., 64,
    W]`` (uint32 or uint64: one register or two, little-endian)."""
    lead = words.shape[:-2]
    src = _stack(words, M)
    regs = np.empty((src.shape[0], THREADS, src.shape[2] // 2), src.dtype)
    _to_threads(src, regs)
    regs = regs.view(np.uint32)
    return regs.reshape(lead + regs.shape[1:])


def _unpack(regs: np.ndarray, word) -> np.ndarray:
    """The stack of 64-row matrices of ``word``-typed words held in ``regs[..., 128, R]``."""
    lead = regs.shape[:-2]
    src = _stack(regs, THREADS).view(word)
    words = np.empty((src.shape[0], M, src.shape[2] * 2), src.dtype)
    _to_rows(src, words)
    return words.reshape(lead + words.shape[1:])


def _pair(fmt: Format) -> np.dtype:
    """The word of two accumulator elements (uint64 for .f32/.s32, uint32 for .f16)."""
    return np.dtype(np.uint64 if fmt.bits == 32 else np.uint32)


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
    return _pack(bits.view(_pair(fmt)))


def unpack_d(regs, dtype, n: int) -> np.ndarray:
    """The 64 x N accumulator bits (``fmt.storage``) held in registers ``[..., 128, ND]``."""
    fmt = _fmt(dtype, _DTYPES, "accumulator type")
    regs = _regs_in(regs, d_regs(n, fmt), "accumulator registers")
    return _unpack(regs, _pair(fmt)).view(fmt.storage)


def pack_a(values, atype) -> np.ndarray:
    """A-operand registers ``uint32[..., 128, 4]`` holding the 64 x K matrix ``values``."""
    fmt = _fmt(atype, _ATYPES, "atype")
    bits = _elems_in(values, fmt, a_k(fmt), "A matrix")
    if fmt.bits == 1:
        bits = np.packbits(bits, axis=-1, bitorder="little")  # element e at bit e of its register
    return _pack(bits.view(np.uint32))


def unpack_a(regs, atype) -> np.ndarray:
    """The 64 x K A-operand bits (``fmt.storage``; b1 as 0/1) held in ``regs[..., 128, 4]``.

    tf32 elements keep all 32 register bits; the instruction ignores the low 13.
    """
    fmt = _fmt(atype, _ATYPES, "atype")
    regs = _regs_in(regs, A_REGS, "A registers")
    words = _unpack(regs, np.uint32)
    if fmt.bits == 1:
        return np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little")
    return words.view(fmt.storage)
