"""Named per-thread registers of one warpgroup, stored as blocks of columns.

A register holds one value in each of the 128 threads: 32 bits, 64 bits (e.g. a matrix
descriptor) or a predicate.  The file keeps one bank per width, ``[128, capacity]`` (a
register is a column, a thread a row), so that the accumulator fragment of a wgmma, up to
128 registers, is read or written as one block of columns rather than register by register.
:class:`RegisterFile` only stores; what a name may be, which width a register takes and
when an access is a hazard is decided by :class:`fastmma.warpgroup.Warpgroup`.
"""

from __future__ import annotations

import numpy as np

THREADS = 128

REGISTER_DTYPES = {1: np.dtype(np.bool_), 32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}
"""Register width in bits (1 = predicate) -> the dtype of its 128 per-thread values."""

_CACHED_GROUPS = 4096  # distinct name tuples whose columns are remembered (a program names few)


class RegisterFile:
    """Registers by name: each one a width (a key of :data:`REGISTER_DTYPES`) and a column
    of its width's bank.  A register is created once and never moves, so the columns of a
    tuple of names, once found, stay valid."""

    def __init__(self):
        self._where: dict[str, tuple[int, int]] = {}  # name -> (bits, column)
        self._banks = {bits: np.zeros((THREADS, 0), dtype) for bits, dtype in REGISTER_DTYPES.items()}
        self._used = dict.fromkeys(REGISTER_DTYPES, 0)
        self._groups: dict[tuple, tuple[int, slice | np.ndarray]] = {}

    def __contains__(self, name) -> bool:
        return name in self._where

    def widths(self) -> dict[str, int]:
        """Every register's name and width in bits, in order of creation."""
        return {name: bits for name, (bits, _) in self._where.items()}

    def width(self, name: str) -> int | None:
        """The width of register ``name``, None if it does not exist."""
        where = self._where.get(name)
        return None if where is None else where[0]

    def locate(self, names: tuple) -> tuple[int, slice | np.ndarray] | None:
        """``(bits, columns)`` of registers ``names`` in their bank, or None if one of them
        does not exist or their widths differ.  ``columns`` is a slice where the registers
        lie side by side in order (as registers created together do), else an index array."""
        found = self._groups.get(names)
        if found is not None:
            return found
        where = [self._where.get(name) for name in names]
        if None in where or len({bits for bits, _ in where}) != 1:
            return None
        cols = np.fromiter((col for _, col in where), dtype=np.intp, count=len(where))
        if np.array_equal(cols, np.arange(cols[0], cols[0] + cols.size)):
            cols = slice(int(cols[0]), int(cols[0]) + cols.size)
        if len(self._groups) >= _CACHED_GROUPS:
            self._groups.clear()
        self._groups[names] = found = (where[0][0], cols)
        return found

    def create(self, names, bits: int) -> None:
        """Create the registers of ``names`` that do not exist yet, ``bits`` wide, zero in
        every thread (the caller has checked that the others are ``bits`` wide)."""
        new = list(dict.fromkeys(name for name in names if name not in self._where))
        if not new:
            return
        used = self._used[bits]
        bank = self._banks[bits]
        if used + len(new) > bank.shape[1]:
            grown = np.zeros((THREADS, max(2 * bank.shape[1], used + len(new), 16)), bank.dtype)
            grown[:, :used] = bank[:, :used]
            self._banks[bits] = grown
        for col, name in enumerate(new, start=used):
            self._where[name] = (bits, col)
        self._used[bits] = used + len(new)

    def get(self, where: tuple[int, slice | np.ndarray]) -> np.ndarray:
        """The values of the registers at ``where`` (from :meth:`locate`), ``[128, n]``: a
        view into the bank for a slice, to be used before the next :meth:`create`."""
        bits, cols = where
        return self._banks[bits][:, cols]

    def set(self, where: tuple[int, slice | np.ndarray], values: np.ndarray) -> None:
        """Store ``values`` (``[128, n]``, or anything that broadcasts to it) at ``where``."""
        bits, cols = where
        self._banks[bits][:, cols] = values
