"""The one exception hierarchy of fastmma.

Every public entry point raises a subclass of :class:`FastmmaError`.  Messages name the
argument or qualifier at fault, what was expected and what was given.
"""

from __future__ import annotations


class FastmmaError(Exception):
    """Base class of every error fastmma raises on purpose."""


class PTXError(FastmmaError, ValueError):
    """PTX text that fastmma cannot accept."""


class PTXSyntaxError(PTXError):
    """Text that is not well-formed PTX; carries the line and column when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.line = line
        self.column = column
        where = ""
        if line is not None:
            where = f"line {line}" + (f", column {column}" if column is not None else "") + ": "
        super().__init__(where + message)


class InvalidInstructionError(PTXError):
    """A well-formed instruction whose qualifiers or operands the PTX ISA does not allow."""


class UnsupportedInstructionError(PTXError):
    """A valid PTX statement that fastmma does not execute."""


class ExecutionLimitError(FastmmaError, RuntimeError):
    """A PTX snippet that ran more instructions than its limit allows (a loop that does not end)."""


class OperandError(FastmmaError, ValueError):
    """An operand array of the wrong dtype, shape, size or value range."""


class AlignmentError(FastmmaError, ValueError):
    """A pointer or stride that breaks the ISA's alignment rules."""


class MemoryBoundsError(FastmmaError, IndexError):
    """An access outside the memory image it addresses."""


class SharedMemoryBoundsError(MemoryBoundsError):
    """A matrix-descriptor access outside the shared-memory image."""


class HazardError(FastmmaError):
    """An access pattern whose behaviour the PTX ISA leaves undefined (wgmma async rules)."""


class ConformanceError(FastmmaError):
    """A recording file that is not in the golden-vector format fastmma reads."""


class HalfWidthVectorsWarning(UserWarning):
    """fastmma was imported after numba had built its code generator, which makes 256-bit
    vectors on this CPU although it has 512-bit ones: the kernels run up to 1.5x slower
    (:mod:`fastmma.codegen`)."""
