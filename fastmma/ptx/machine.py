"""The machine a snippet runs on: threads, their registers, shared and global memory.

**Threads.**  A snippet runs on a warpgroup of 128 threads when it holds a ``wgmma``
statement, else on the threads the caller's per-thread register values imply, else on one warp
of 32 lanes; ``threads=`` chooses (a multiple of 32, at most 1024; ``wgmma`` needs 128).
Thread ``t`` is lane ``t % 32`` of warp ``t // 32``; each warp executes a ``wmma`` statement
on its own 32 lanes, as the warps of a CTA do, in warp order.  With 128 threads the machine's
registers and shared memory are those of a :class:`fastmma.Warpgroup`, so every register
access and shared-memory write goes through its hazard checks (``strict``).

**Registers** hold raw bits, one value per thread (:mod:`fastmma.ptx.values`).  They are
created zero, then take the caller's values; those are thread writes at the start of the run,
so with 128 threads the warpgroup's fence rules see them (give the registers of a later
``wgmma.mma_async`` before its ``wgmma.fence``, as a program writes them).

**Memory** (PTX ISA 5.1 "State Spaces", 6.4.1 "Generic Addressing"): ``global_mem`` is the
``.global`` space from address ``global_address`` (default 0); ``smem`` the ``.shared`` space
of the CTA from shared address ``smem_address`` (default 0).  Generic addresses: the shared
window is ``[generic_shared_base, generic_shared_base + 2**32)`` (generic address
``generic_shared_base + s`` is shared address ``s``); every other generic address is a global
address (global addresses are generic ones).  ``.global`` / ``.shared`` variables are laid
out in declaration order from the start of their image, each at its alignment; their content
is the image's (the caller's images are memory as the snippet starts, as if the host had
initialized the variables).  The caller's arrays are copied, never modified.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import ExecutionLimitError, FastmmaError, HazardError, MemoryBoundsError, OperandError
from ..formats import byte_image, is_int
from ..warpgroup import DEFAULT_SMEM_BYTES, Warpgroup
from .checker import SPECIAL_REGISTERS, Checker, Program, Variable, located, relocate
from .statements import HANDLERS
from .syntax import Instr, RegDecl, parse_program
from .values import PtxType, caller_values, coerce, infer_type, typed
from ..validate import excerpt, public, require_memory

GENERIC_SHARED_BASE = 1 << 48
"""Generic address of shared address 0 (the shared window), by default."""

SHARED_WINDOW_BYTES = 1 << 32

DEFAULT_GLOBAL_BYTES = 1 << 20
"""Size of the zero global image made when the caller gives none (grown to fit variables)."""

MAX_AUTO_GLOBAL_BYTES = 1 << 28
"""The largest global image made to fit ``.global`` variables; beyond it, pass ``global_mem``."""

MAX_THREADS = 1024

MAX_STEPS = 1 << 20
"""The statements a run executes, by default, before it stops as a loop that does not end."""


class _ArrayRegisters:
    """Registers of any number of threads, in a dict of arrays."""

    def __init__(self, threads: int):
        self.threads = threads
        self.values: dict[str, np.ndarray] = {}

    def declare(self, name: str, t: PtxType) -> None:
        old = self.values.get(name)
        if old is None or old.dtype != t.storage:
            self.values[name] = np.zeros(self.threads, t.storage)

    def read(self, name: str) -> np.ndarray:
        return self.values[name].copy()

    peek = read

    def write(self, name: str, bits: np.ndarray) -> None:
        self.values[name] = bits.copy()


class _WarpgroupRegisters:
    """The registers of a :class:`Warpgroup` (1-, 32- and 64-bit; 8- and 16-bit ones kept here)."""

    def __init__(self, warpgroup: Warpgroup):
        self.wg = warpgroup
        self.narrow = _ArrayRegisters(128)

    def declare(self, name: str, t: PtxType) -> None:
        if t.bits in (8, 16):
            self.narrow.declare(name, t)
        else:
            self.wg.declare(name, bits=t.bits)

    def read(self, name: str) -> np.ndarray:
        return self.narrow.read(name) if name in self.narrow.values else self.wg.read(name)

    def peek(self, name: str) -> np.ndarray:
        return self.narrow.peek(name) if name in self.narrow.values else self.wg.peek(name)

    def write(self, name: str, bits: np.ndarray) -> None:
        if name in self.narrow.values:
            self.narrow.write(name, bits)
        else:
            self.wg.write(name, bits, bits=1 if bits.dtype == np.bool_ else bits.dtype.itemsize * 8)


class Machine:
    """Registers, memory and (with 128 threads) the warpgroup a PTX snippet runs on.

    Made by :func:`fastmma.ptx.run`; :meth:`run` executes more PTX on the same state.  Read
    results with ``machine["name"]`` (values typed as declared: ``float32`` for ``.f32``,
    ``int32`` for ``.s32``, raw ``uint32`` for ``.b32`` and ``.f16x2``, ``bool`` for ``.pred``),
    :meth:`read` (raw bits or any dtype of the width), :attr:`smem` and :attr:`global_mem`.
    Reads go through the warpgroup's hazard checks: in strict mode, reading an accumulator of a
    ``wgmma.mma_async`` not yet waited for raises :class:`~fastmma.errors.HazardError`
    (:meth:`peek` does not check).
    """

    def __init__(self, *, threads: int = 32, smem=None, global_mem=None, strict: bool = True,
                 smem_address: int = 0, global_address: int = 0,
                 generic_shared_base: int = GENERIC_SHARED_BASE):
        self.threads = _check_threads(threads)
        self.strict = bool(strict)
        self.smem_address = _address_arg(smem_address, "smem_address")
        self.global_address = _address_arg(global_address, "global_address")
        self.generic_shared_base = _address_arg(generic_shared_base, "generic_shared_base")
        if self.threads == 128:
            self.warpgroup = Warpgroup(smem, smem_address=self.smem_address, strict=self.strict)
            self._regs = _WarpgroupRegisters(self.warpgroup)
            self._smem = None
        else:
            self.warpgroup = None
            self._regs = _ArrayRegisters(self.threads)
            self._smem = _image(smem, "smem", DEFAULT_SMEM_BYTES)
        self._global = None if global_mem is None else _image(global_mem, "global_mem", None)
        self._types: dict[str, PtxType] = {}
        self.symbols: dict[str, Variable] = {}
        self._offsets: dict[str, int] = {}
        self._next = {"global": 0, "shared": 0}

    # ------------------------------------------------------------------ running PTX

    @public
    def run(self, source: str, registers: Mapping | None = None, *, max_steps: int = MAX_STEPS) -> "Machine":
        """Execute ``source`` on this machine (after setting ``registers``); returns the machine.

        Nothing executes unless the whole snippet assembles (errors in source order, with line
        and column).  An error while executing carries ``line``, ``column`` and ``machine``
        (this machine, as the failing statement left it).  More than ``max_steps`` statements
        executed (a loop that does not end) is an :class:`~fastmma.errors.ExecutionLimitError`.
        """
        return self._run_parsed(parse_program(source), registers, max_steps)

    def _run_parsed(self, parsed, registers, max_steps: int = MAX_STEPS) -> "Machine":
        if not is_int(max_steps) or max_steps < 1:
            raise OperandError(f"max_steps must be a positive integer, got {max_steps!r}")
        if registers is not None and not isinstance(registers, Mapping):
            raise OperandError(f"registers must be a dict of name -> values, got {type(registers).__name__}")
        registers = dict(registers or {})
        declared = _top_level_types(parsed.statements)
        external = dict(self._types)
        for name, values in registers.items():
            _check_name(name)
            known = declared.get(name) or self._types.get(name)
            if known is not None and caller_values(values) is not values:  # given as (type, values)
                _check_agrees(name, known, infer_type(values, name))
            if name not in declared:
                external[name] = known or infer_type(values, name)
        program = Checker(HANDLERS, external, self.symbols, self.threads).check(parsed)
        self._setup(program, registers, external)
        pc = executed = 0
        while pc < len(program.steps):
            step = program.steps[pc]
            executed += 1
            if executed > max_steps:
                err = located(ExecutionLimitError, f"the snippet ran {max_steps} statements (max_steps) and had not "
                              "ended: a loop that does not end?", step.instr.line, step.instr.column)
                err.machine, err.statement = self, step.instr.text
                raise err
            target = self._execute(step)
            pc = pc + 1 if target is None else program.labels[target]
        return self

    def _setup(self, program: Program, registers: dict, external: dict) -> None:
        """Variables laid out, registers declared, the caller's values written (checked first)."""
        types = {**{n: t for n, t in external.items() if n in registers}, **program.registers}
        values = {name: coerce(v, types[name], self.threads, name) for name, v in registers.items()}
        self._allocate(program.variables)
        for name, t in types.items():
            self._regs.declare(name, t)
            self._types[name] = t
        for name, bits in values.items():
            self._regs.write(name, bits)

    def _execute(self, step) -> str | None:
        """Run one step; returns the label to go to next where it branches."""
        instr: Instr = step.instr
        try:
            active = self._active(instr, step.handler.scope)
            if active is not None:
                return step.handler.run(self, step.data, active)
            return None
        except FastmmaError as err:
            located_err = relocate(err, instr.line, instr.column)
            located_err.machine = self
            located_err.statement = instr.text
            if located_err is err:
                raise
            raise located_err from err

    def _active(self, instr: Instr, scope: str):
        """Which threads (or warps, for ``scope`` "warp") execute; None when none do."""
        if instr.guard is None:
            return np.ones(self.threads // 32 if scope == "warp" else self.threads, bool)
        guard = self.read(instr.guard.name).astype(bool) != instr.guard.negated
        if scope in ("thread", "any"):
            return guard if guard.any() else None
        groups = guard.reshape(-1, 32 if scope == "warp" else self.threads)
        if self.strict and not (groups == groups[:, :1]).all():
            g = int(np.argmax((groups != groups[:, :1]).any(axis=1)))
            raise HazardError(f"the guard @{instr.guard.text} differs between the threads of "
                              f"{'warp ' + str(g) if scope == 'warp' else 'the warpgroup'}; "
                              f"{instr.root} is .aligned, so every thread must take the same guard value "
                              "(PTX ISA 9.7.14.4, 9.7.15.5.2)")
        active = groups[:, 0]
        if not active.any():
            return None
        return active if scope == "warp" else np.ones(self.threads, bool)

    # ------------------------------------------------------------------ registers

    @property
    def registers(self) -> dict[str, str]:
        """Every register's name and PTX type (``"f32"``, ``"pred"``, ...)."""
        return {name: t.name for name, t in self._types.items()}

    def type_of(self, name: str) -> PtxType:
        """The declared type of register ``name``; :class:`~fastmma.errors.OperandError` for a
        register this machine does not have."""
        if name not in self._types:
            raise OperandError(f"no register {name!r} in this machine")
        return self._types[name]

    def read(self, name: str, dtype=None) -> np.ndarray:
        """A thread read of register ``name``: raw bits per thread, or viewed as ``dtype``."""
        self.type_of(name)
        bits = self._regs.read(name)
        return bits if dtype is None else _view(bits, dtype)

    def peek(self, name: str, dtype=None) -> np.ndarray:
        """Register ``name`` as it is now, with no hazard check (a debugger's view)."""
        self.type_of(name)
        bits = self._regs.peek(name)
        return bits if dtype is None else _view(bits, dtype)

    def __getitem__(self, name: str) -> np.ndarray:
        return typed(self.read(name), self.type_of(name))

    def __contains__(self, name: str) -> bool:
        return name in self._types

    def write(self, name: str, bits: np.ndarray, active: np.ndarray | None = None) -> None:
        """A thread write of raw ``bits`` to the threads where ``active`` holds (all if None)."""
        if active is not None and not active.all():
            bits = np.where(active, bits, self._regs.peek(name))
        self._regs.write(name, bits.astype(self._types[name].storage))

    def special(self, name: str) -> np.ndarray:
        """The per-thread values of special register ``name`` (``%tid.x``, ``%laneid``, ``%warpid``
        ...) for this machine's threads, as ``uint32[threads]``."""
        t = np.arange(self.threads, dtype=np.uint32)
        values = {"%tid.x": t, "%tid.y": 0, "%tid.z": 0, "%ntid.x": self.threads, "%ntid.y": 1,
                  "%ntid.z": 1, "%laneid": t % 32, "%warpid": t // 32, "%nwarpid": self.threads // 32}
        assert name in SPECIAL_REGISTERS
        return np.broadcast_to(np.asarray(values[name], np.uint32), (self.threads,)).copy()

    # ------------------------------------------------------------------ memory

    @property
    def smem(self) -> np.ndarray:
        """The shared-memory image (read-only view)."""
        image = self.warpgroup.smem if self.warpgroup is not None else self._smem.view()
        image.flags.writeable = False
        return image

    @property
    def global_mem(self) -> np.ndarray:
        """The global-memory image (read-only view)."""
        view = self._global_image().view()
        view.flags.writeable = False
        return view

    def image(self, space: str) -> np.ndarray:
        """The image of ``"global"`` or ``"shared"`` memory (shared with 128 threads: read-only)."""
        if space == "global":
            return self._global_image()
        return self._smem if self.warpgroup is None else self.warpgroup.smem

    def _global_image(self, needed: int = 0) -> np.ndarray:
        if self._global is None:
            self._global = np.zeros(max(DEFAULT_GLOBAL_BYTES, needed), np.uint8)
        return self._global

    def locate(self, address: int, space: str | None) -> tuple[str, int]:
        """(``"global"`` / ``"shared"``, byte offset in that image) of an address in ``space``
        (None: generic); an address below the image's start has a negative offset."""
        shared, offset = self.locate_threads(np.array([address % (1 << 64)], np.uint64), space)
        return ("shared" if shared[0] else "global"), int(offset.view(np.int64)[0])

    def locate_threads(self, address: np.ndarray, space: str | None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`locate` for each thread's address (uint64): whether it is in shared memory,
        and its byte offset in that space's image (uint64, wrapping: an address below the
        image's start is far past its end).  A generic address is shared in the window
        ``[generic_shared_base, generic_shared_base + 2**32)`` and global elsewhere."""
        if space is None:
            shared = address - np.uint64(self.generic_shared_base) < np.uint64(SHARED_WINDOW_BYTES)
            base = np.where(shared, np.uint64((self.generic_shared_base + self.smem_address) % (1 << 64)),
                            np.uint64(self.global_address))
        else:
            shared = np.full(address.shape, space == "shared")
            base = np.uint64(self.smem_address if space == "shared" else self.global_address)
        return shared, address - base

    def variable_address(self, name: str, space: str | None) -> int:
        """The address of variable ``name``: in its own state space (``space`` "own" or its
        space), or generic (``space`` None)."""
        var = self.symbols[name]
        own = (self.global_address if var.space == "global" else self.smem_address) + self._offsets[name]
        if space is None and var.space == "shared":
            return self.generic_shared_base + own
        return own

    def symbol_offset(self, name: str) -> int:
        """The byte offset of variable ``name`` in its image (``global_mem`` or ``smem``)."""
        if name not in self.symbols:
            raise OperandError(f"no variable {name!r} in this machine")
        return self._offsets[name]

    def _allocate(self, variables: list[Variable]) -> None:
        """Lay variables out in declaration order, each at its alignment (all placed, or none)."""
        globals_ = [v for v in variables if v.space == "global"]
        if globals_ and self._global is None:
            needed = sum(v.size + v.align for v in globals_)
            if needed > MAX_AUTO_GLOBAL_BYTES:
                raise located(MemoryBoundsError, f".global variables need {needed} bytes; pass a global_mem "
                              f"image that holds them", globals_[0].line, globals_[0].column)
            self._global_image(needed)
        cursor, offsets = dict(self._next), {}
        for var in variables:
            base = self.global_address if var.space == "global" else self.smem_address
            size = self.image(var.space).size
            start = -(-(base + cursor[var.space]) // var.align) * var.align - base
            if start + var.size > size:
                raise located(MemoryBoundsError, f"{var.name} ({var.size} bytes, .align {var.align}) "
                              f"does not fit the {var.space} image: bytes [{start}, {start + var.size}) of "
                              f"[0, {size})", var.line, var.column)
            offsets[var.name] = start
            cursor[var.space] = start + var.size
        self._next = cursor
        self._offsets.update(offsets)
        self.symbols.update({var.name: var for var in variables})


# ---------------------------------------------------------------------- helpers


def _check_threads(threads) -> int:
    if not is_int(threads) or threads <= 0 or threads % 32 or threads > MAX_THREADS:
        raise OperandError(f"threads must be a multiple of 32 in [32, {MAX_THREADS}], got {threads!r}")
    return int(threads)


def _check_agrees(name: str, known: PtxType, given: PtxType) -> None:
    """A value given as ``(type, values)`` for a register of known type: the two must be one."""
    if given != known:
        raise OperandError(f"register {name} is .{known.name}, but its value is given as .{given.name}: "
                           f"give ('{known.name}', values) or the values alone")


def _check_name(name) -> None:
    from .lexer import _WORD_RE

    if not isinstance(name, str) or not _WORD_RE.fullmatch(name) or name.startswith(".") \
            or "." in name or name in SPECIAL_REGISTERS:
        raise OperandError(f"{name!r} is not a register name (a PTX identifier such as %r1, x0, p)")


def _address_arg(value, name: str) -> int:
    if not is_int(value) or not 0 <= value < 1 << 64:
        raise OperandError(f"{name} must be a non-negative 64-bit address, got {value!r}")
    return int(value)


def _image(data, name: str, default: int | None) -> np.ndarray:
    if isinstance(data, np.ndarray):  # copied: a broadcast view may claim more than memory holds
        require_memory(data.nbytes, name, "a private copy of the memory image")
    return np.zeros(default, np.uint8) if data is None else byte_image(data, name)


def _view(bits: np.ndarray, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.itemsize != bits.dtype.itemsize:
        raise OperandError(f"cannot view {bits.dtype.itemsize * 8}-bit registers as {dtype}")
    return bits.view(dtype)


def _top_level_types(statements) -> dict[str, PtxType]:
    """Registers declared outside any ``{ }`` block: their first declared type."""
    from .syntax import Block
    from .values import TYPES

    depth, out = 0, {}
    for stmt in statements:
        if isinstance(stmt, Block):
            depth += 1 if stmt.opening else -1
        elif isinstance(stmt, RegDecl) and depth == 0:
            for decl in stmt.names:
                for name in decl.names():
                    out.setdefault(name, TYPES[stmt.type_name])
    return out


def _uses_wgmma(statements) -> bool:
    return any(isinstance(s, Instr) and s.root == "wgmma" for s in statements)


def _threads_for(statements, registers: dict | None) -> int:
    if _uses_wgmma(statements):
        return 128
    for name, values in (registers.items() if isinstance(registers, Mapping) else ()):
        if isinstance(values, tuple) and len(values) == 2 and isinstance(values[0], str):
            values = values[1]
        try:
            shape = np.shape(values)
        except (ValueError, TypeError):  # a ragged list: coerce names it once the register is known
            continue
        if len(shape) == 1 and shape[0] > 1:
            if shape[0] % 32 or shape[0] > MAX_THREADS:
                raise OperandError(f"registers: {excerpt(name)} has {shape[0]} values, which tells no thread count "
                                   f"(one value per thread: a multiple of 32 up to {MAX_THREADS}); pass threads=")
            return shape[0]
    return 32


@public
def run(source: str, registers: dict | None = None, smem=None, global_mem=None, *, strict: bool = True,
        threads: int | None = None, smem_address: int = 0, global_address: int = 0,
        generic_shared_base: int = GENERIC_SHARED_BASE, max_steps: int = MAX_STEPS) -> Machine:
    """Execute the PTX snippet ``source``; return the :class:`Machine` it leaves.

    ``registers``: name -> values (a scalar for every thread, or one value per thread);
    integers are bit patterns, floats values, bools predicates; a register the source does
    not declare needs a numpy value (its dtype gives the type) or ``(type, values)``.
    ``smem`` / ``global_mem``: ``uint8`` images (copied).  ``strict``: report the ISA's
    undefined behaviours (:class:`fastmma.Warpgroup`; wmma operands that differ between lanes;
    guards that differ on ``.aligned`` instructions) as :class:`~fastmma.errors.HazardError`.
    ``threads``: see :mod:`fastmma.ptx.machine`.  ``max_steps``: the most statements the run
    executes (branches make loops) before it stops with
    :class:`~fastmma.errors.ExecutionLimitError`.
    """
    parsed = parse_program(source)
    if threads is None:
        threads = _threads_for(parsed.statements, registers)
    machine = Machine(threads=threads, smem=smem, global_mem=global_mem, strict=strict,
                      smem_address=smem_address, global_address=global_address,
                      generic_shared_base=generic_shared_base)
    return machine._run_parsed(parsed, registers, max_steps)
