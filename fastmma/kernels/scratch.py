"""Scratch memory kept from one GEMM to the next.

A GEMM's kernels need scratch beside their output: A decoded and packed, B's panels (about a
megabyte at 256^3).  Taken from the C allocator afresh at every call, that memory comes
back, in some processes and not others, as freshly mapped pages: glibc hands the top of its
heap back to the system, or maps a large block on its own, by thresholds that it adapts as
the process allocates and frees, so whether a call's scratch is already mapped depends on
what the process did before.  Each fresh page costs a fault and the zeroing of its 4 KiB.
Measured on a 2-core AMD EPYC: a tf32 GEMM of 256^3 took 390 us in one process and 650 us,
with 209 page faults a call, in another that had first run 2100 GEMMs of K = 8; in
pytest-benchmark's process an f16 GEMM of 256^3 took 412 us with 221 faults a call, 321 us
without.

:data:`POOL` keeps the buffers that calls give back, up to :attr:`ScratchPool.keep_bytes` in
all, and lends them again: the same pages serve call after call, whatever state the
allocator is in.  A buffer lent is the caller's alone until it is given back (a lock guards
the free list, so calls from several threads each get their own), and nothing carved from it
may outlive the call: outputs are never scratch.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

#: the most memory that :data:`POOL` keeps between calls (a 2048^3 f16 GEMM's scratch is
#: about 25 MiB: A decoded, 20 MiB, and B's panels)
KEEP_BYTES = 64 << 20
#: every buffer lent starts on a cache line
ALIGN = 64


class ScratchPool:
    """Free buffers (uint8 arrays) waiting to be lent, the most recently given back last."""

    def __init__(self, keep_bytes: int = KEEP_BYTES):
        self.keep_bytes = keep_bytes
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()

    @contextmanager
    def borrow(self, nbytes: int):
        """A uint8 array of ``nbytes`` starting on a cache line, from the smallest free buffer
        that holds it (else a new one), given back to the pool when the block ends.  Its
        contents are whatever an earlier call left there."""
        buf = self._take(nbytes + ALIGN)
        try:
            yield on_cache_line(buf, nbytes)
        finally:
            self._give(buf)

    def kept_bytes(self) -> int:
        """The bytes of the buffers now waiting to be lent."""
        with self._lock:
            return sum(b.nbytes for b in self._free)

    def clear(self) -> None:
        """Drop every free buffer (their memory goes back to the allocator)."""
        with self._lock:
            self._free.clear()

    def _take(self, size: int) -> np.ndarray:
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if b.nbytes >= size]
            if fits:
                return self._free.pop(min(fits, key=lambda i: self._free[i].nbytes))
        return np.empty(size, np.uint8)

    def _give(self, buf: np.ndarray) -> None:
        if buf.nbytes > self.keep_bytes:
            return
        with self._lock:
            self._free.append(buf)
            while sum(b.nbytes for b in self._free) > self.keep_bytes:
                self._free.pop(0)  # the longest unused


def on_cache_line(buf: np.ndarray, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of the uint8 array ``buf`` (at least ``nbytes + ALIGN`` long)
    from its first cache line on."""
    start = -buf.__array_interface__["data"][0] % ALIGN  # the address; ``.ctypes.data`` costs microseconds
    return buf[start:start + nbytes]


#: the pool that the GEMM drivers borrow from
POOL = ScratchPool()
