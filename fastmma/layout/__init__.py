"""Where each element lives: descriptors, shared-memory images, register fragments.

Register files are handed around as ``uint32[threads, words]``: row = thread (lane) of the
warp or warpgroup, column = its 32-bit register, in the order the instruction names them.
"""

from __future__ import annotations

import numpy as np

from ..errors import OperandError
from ..formats import as_numpy
from ..validate import decoded


def register_file(values, threads: int, words: int, name: str, *, stack: bool = False) -> np.ndarray:
    """``values`` checked to be ``uint32[threads, words]`` (int32 and float32 are taken
    as their bits); where ``stack``, ``uint32[..., threads, words]``, a register file for
    each warp or warpgroup of a stack."""
    arr = as_numpy(values, name)
    if arr.dtype not in (np.uint32, np.int32, np.float32):
        raise OperandError(f"{name} must be 32-bit registers (uint32[{threads}, {words}]), got dtype {arr.dtype}")
    if stack and (arr.ndim < 2 or arr.shape[-2:] != (threads, words)):
        raise OperandError(f"{name} must have shape (..., {threads}, {words}) for this instruction, got {arr.shape}")
    if not stack and arr.shape != (threads, words):
        raise OperandError(f"{name} must have shape ({threads}, {words}) for this instruction, got {arr.shape}")
    decoded(arr, name, 4)
    return np.ascontiguousarray(arr).view(np.uint32)


def flat_matrices(x: np.ndarray) -> np.ndarray:
    """A stack of matrices ``[..., rows, cols]`` as a stack of rows ``[..., rows * cols]``.
    The size is named rather than left to numpy as -1, which it cannot infer for a stack of
    no matrices."""
    return x.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],))


def slots_to_words(slots: np.ndarray, bits: int) -> np.ndarray:
    """Registers ``uint32[..., W]`` from each thread's element slots ``[..., W * 32 / bits]``
    (one ``bits``-wide element each): slot 0 in the lowest bits of word 0, as the fragments
    of wmma and wgmma pack them.  Whole bytes are the slots' little-endian bytes viewed as
    words, single bits are packed little-endian, 4-bit elements shifted into place."""
    if bits >= 8:
        words = slots.astype(f"<u{bits // 8}", copy=False)
    elif bits == 1:
        words = np.packbits(slots.astype(np.uint8), axis=-1, bitorder="little")
    else:
        per = 32 // bits
        v = slots.astype(np.uint32).reshape(*slots.shape[:-1], slots.shape[-1] // per, per)
        return np.bitwise_or.reduce(v << (np.arange(per, dtype=np.uint32) * bits), axis=-1)
    return np.ascontiguousarray(words).view("<u4").astype(np.uint32, copy=False)


def words_to_slots(words: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of :func:`slots_to_words`: each thread's ``bits``-wide slots, unsigned."""
    words = np.ascontiguousarray(words.astype("<u4", copy=False))
    if bits >= 8:
        return words.view(f"<u{bits // 8}")
    if bits == 1:
        return np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little")
    per = 32 // bits
    shifted = words[..., None] >> (np.arange(per, dtype=np.uint32) * bits)
    return (shifted & np.uint32((1 << bits) - 1)).reshape(*words.shape[:-1], words.shape[-1] * per)
