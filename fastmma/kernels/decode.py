"""Decoding of floating-point bit patterns into sign, exponent and integer significand.

A finite value is ``(-1)**sign * sig * 2**(exp - man_bits)``: ``sig`` holds the implicit
leading one for normal numbers, and subnormals keep the smallest normal exponent
``1 - bias`` with ``sig < 2**man_bits``.  This is the normalisation the tensor-core model
works in (significand in [1, 2) for normals, below 1 for subnormals).

Formats are passed to kernels as a small tuple of integers (see :func:`float_params`), so
one compiled kernel serves every input type.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..formats import Format

ZERO, FINITE, INF, NAN = 0, 1, 2, 3


def float_params(fmt: Format) -> tuple[int, int, int, int, int]:
    """``(exp_bits, man_bits, bias, ieee_specials, ignored_low_bits)`` of a float format."""
    return (fmt.exp_bits, fmt.man_bits, fmt.bias, int(fmt.ieee_specials), fmt.ignored_low_bits)


@njit(cache=True, inline="always")
def decode_float(bits, exp_bits, man_bits, bias, ieee, low):
    """``(cls, sign, exp, sig)`` of one float bit pattern; ``cls`` is ZERO/FINITE/INF/NAN."""
    x = np.uint64(bits) >> np.uint64(low)
    man = np.int64(x & np.uint64((1 << man_bits) - 1))
    ex = np.int64((x >> np.uint64(man_bits)) & np.uint64((1 << exp_bits) - 1))
    sign = np.int64((x >> np.uint64(man_bits + exp_bits)) & np.uint64(1))
    all_ones = (1 << exp_bits) - 1
    if ieee:
        if ex == all_ones:
            return (NAN if man != 0 else INF), sign, np.int64(0), np.int64(0)
    elif ex == all_ones and man == (1 << man_bits) - 1:
        return NAN, sign, np.int64(0), np.int64(0)
    if ex == 0:
        if man == 0:
            return ZERO, sign, np.int64(0), np.int64(0)
        return FINITE, sign, np.int64(1 - bias), man
    return FINITE, sign, ex - bias, man | (np.int64(1) << man_bits)
