"""Scratch memory kept from one GEMM to the next.

A GEMM's kernels need scratch beside their output: A decoded and packed, B's panels (about a
megabyte at 256^3).  Taken from the C allocator afresh at every call, that memory comes
back, in some processes and not others, as freshly mapped pages: glibc hands the top of its
heap back to the system, or maps a large block on its own, by thresholds that it adapts as
the process allocates and frees, so whether a call's scratch is already mapped depends on
what the process did before.  Each fresh page costs a fault and the zeroing of its 4 KiB
(measurements: docs/performance.md, "Scratch memory").

:data:`POOL` keeps the buffers that calls give back, up to :attr:`ScratchPool.keep_bytes` in
all, and lends them again: the same pages serve call after call, whatever state the
allocator is in.  A buffer lent is the caller's alone until it is given back (a lock guards
the free list, so calls from several threads each get their own), and nothing carved from it
may outlive the call: outputs are never scratch.
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache

import numpy as np

#: the most memory that :data:`POOL` keeps between calls (a 2048^3 f16 GEMM's scratch is
#: about 25 MiB: A decoded, 20 MiB, and B's panels)
KEEP_BYTES = 64 << 20
#: every buffer lent starts on a cache line
ALIGN = 64
#: the sets of arrays a buffer keeps carved (:meth:`ScratchPool.arrays`), the most recent
CARVINGS = 8


class ScratchPool:
    """Free buffers (:class:`_Buffer`) waiting to be lent, the most recently given back last."""

    def __init__(self, keep_bytes: int = KEEP_BYTES):
        self.keep_bytes = keep_bytes
        self._free: list[_Buffer] = []
        self._kept = 0
        self._lock = threading.Lock()

    def borrow(self, nbytes: int) -> _Loan:
        """A context manager: a uint8 array of ``nbytes`` starting on a cache line, from the
        smallest free buffer that holds it (else a new one), given back to the pool when the
        block ends.  Its contents are whatever an earlier call left there."""
        return _Loan(self, nbytes, None)

    def arrays(self, specs: tuple) -> _Loan:
        """A context manager: the arrays of ``specs`` (``(dtype, shape)`` each, :func:`layout`)
        carved from one buffer lent as :meth:`borrow` lends it.  A buffer keeps the arrays it
        was carved into for the next call of the same ``specs``, so that a small GEMM does not
        pay for building them again."""
        return _Loan(self, layout(specs)[0], specs)

    def kept_bytes(self) -> int:
        """The bytes of the buffers now waiting to be lent."""
        with self._lock:
            return self._kept

    def clear(self) -> None:
        """Drop every free buffer (their memory goes back to the allocator)."""
        with self._lock:
            self._free.clear()
            self._kept = 0

    def _take(self, size: int) -> _Buffer:
        with self._lock:
            best = None
            for i, b in enumerate(self._free):
                if b.nbytes >= size and (best is None or b.nbytes < self._free[best].nbytes):
                    best = i
            if best is not None:
                buf = self._free.pop(best)
                self._kept -= buf.nbytes
                return buf
        return _Buffer(size)

    def _give(self, buf: _Buffer) -> None:
        if buf.nbytes > self.keep_bytes:
            return
        with self._lock:
            self._free.append(buf)
            self._kept += buf.nbytes
            while self._kept > self.keep_bytes:
                self._kept -= self._free.pop(0).nbytes  # the longest unused


class _Buffer:
    """One buffer's memory (``raw``, uint8) and the arrays it was last carved into, by specs."""

    __slots__ = ("raw", "nbytes", "_carved")

    def __init__(self, nbytes: int):
        self.raw = np.empty(nbytes, np.uint8)
        self.nbytes = nbytes
        self._carved: dict[tuple, list] = {}

    def carved(self, specs: tuple) -> list:
        arrays = self._carved.get(specs)
        if arrays is None:
            if len(self._carved) >= CARVINGS:
                self._carved.clear()
            total = layout(specs)[0]
            arrays = self._carved[specs] = carve(on_cache_line(self.raw, total), specs)
        return arrays


class _Loan:
    """What :meth:`ScratchPool.borrow` and :meth:`ScratchPool.arrays` return (a class rather
    than a generator: the ``with`` costs less)."""

    __slots__ = ("_pool", "_nbytes", "_specs", "_buf")

    def __init__(self, pool, nbytes, specs):
        self._pool, self._nbytes, self._specs = pool, nbytes, specs

    def __enter__(self):
        self._buf = buf = self._pool._take(self._nbytes + ALIGN)
        return on_cache_line(buf.raw, self._nbytes) if self._specs is None else buf.carved(self._specs)

    def __exit__(self, *exc):
        self._pool._give(self._buf)
        self._buf = None
        return False


def on_cache_line(buf: np.ndarray, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of the uint8 array ``buf`` (at least ``nbytes + ALIGN`` long)
    from its first cache line on."""
    start = -buf.__array_interface__["data"][0] % ALIGN  # the address; ``.ctypes.data`` costs microseconds
    return buf[start:start + nbytes]


@lru_cache(maxsize=256)
def layout(specs) -> tuple[int, tuple]:
    """The bytes that the arrays of ``specs`` (``(dtype, shape)`` each) take in one buffer,
    each starting on a cache line, and their offsets."""
    offsets, total = [], 0
    for dtype, shape in specs:
        offsets.append(total)
        total += -(-dtype.itemsize * math.prod(shape) // ALIGN) * ALIGN
    return total, tuple(offsets)


def carve(buf, specs) -> list:
    """The arrays of ``specs`` over ``buf`` (uint8, starting on a cache line, at least
    :func:`layout`'s bytes), each on a cache line of its own."""
    _, offsets = layout(specs)
    return [np.ndarray(shape, dtype, buf, offset) for (dtype, shape), offset in zip(specs, offsets)]


#: the pool that the GEMM drivers borrow from
POOL = ScratchPool()
