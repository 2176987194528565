"""Where each element lives: descriptors, shared-memory images, register fragments.

Register files are handed around as ``uint32[threads, words]``: row = thread (lane) of the
warp or warpgroup, column = its 32-bit register, in the order the instruction names them.
"""

from __future__ import annotations

import numpy as np

from ..errors import OperandError
from ..formats import as_numpy


def register_file(values, threads: int, words: int, name: str) -> np.ndarray:
    """``values`` checked to be ``uint32[threads, words]`` (int32 and float32 are taken
    as their bits)."""
    arr = as_numpy(values, name)
    if arr.dtype not in (np.uint32, np.int32, np.float32):
        raise OperandError(f"{name} must be 32-bit registers (uint32[{threads}, {words}]), got dtype {arr.dtype}")
    if arr.shape != (threads, words):
        raise OperandError(f"{name} must have shape ({threads}, {words}) for this instruction, got {arr.shape}")
    return np.ascontiguousarray(arr).view(np.uint32)
