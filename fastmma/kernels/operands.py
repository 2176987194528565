"""The one array type in which the kernels take their operands.

numba compiles a function afresh for each type of its arguments, and a NumPy array's type
says whether the array is writeable, so an operand that came in read-only (a recording's
bytes, ``np.frombuffer``, a broadcast, a caller's frozen array) beside one that came in
writeable would compile every kernel it reaches twice.  So each entry of the kernels takes A,
B and C through :func:`read_only`, which costs a view and never a copy.
"""

from __future__ import annotations

import numpy as np


def read_only(x):
    """``x`` (an array, or None) as a read-only array: itself where it already is, else a
    read-only view of it.  Only for operands a kernel reads: writing to it raises."""
    if x is not None and x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x


def widened(x):
    """``x``'s bits as a read-only C-contiguous uint32 array (a copy unless it already is one).
    The kernels that only recompute a few elements (the per-element oracle, the fix-up of
    infinities and NaN) take every format's bits this way, so that numba compiles each of
    them once rather than once per storage width; the values they read are the same."""
    return read_only(np.ascontiguousarray(x, dtype=np.uint32))
