"""The asynchronous state of one warpgroup: registers, shared memory and in-flight wgmma.

:class:`Warpgroup` holds what one warpgroup (128 threads) owns while it runs wgmma code: a
register file of named per-thread registers, a shared-memory image, and the
``wgmma.mma_async`` operations issued but not yet complete, batched into wgmma-groups.  It
executes ``wgmma.fence``, ``wgmma.mma_async``, ``wgmma.commit_group`` and
``wgmma.wait_group`` (and ``fence.proxy.async`` for shared memory) with the ISA's
asynchronous semantics; the arithmetic of one instruction is :func:`fastmma.wgmma.mma_async`.

Section numbers are those of the PTX ISA as published at ptx.poole.ai (9.7.15.4 "Async
Proxy", 9.7.15.5.2 "wgmma.mma_async", 9.7.15.7 "Asynchronous wgmma Proxy Operations":
wgmma.fence, wgmma.commit_group, wgmma.wait_group); older editions number them differently.

**Asynchronous semantics** (9.7.15.5.2, 9.7.15.7)

* ``mma_async`` issues one operation; its D registers do not change.  It belongs to no
  wgmma-group until ``commit_group``, which batches every uncommitted ``mma_async`` into a new
  group (with none, the group is empty).  ``wait_group(n)`` completes the oldest committed
  groups until at most ``n`` are pending; completing a group writes its results into the D
  registers in issue order.  An ``mma_async`` not yet committed is not waited for by any
  ``wait_group``: it stays in flight, and its results appear only after a later
  ``commit_group`` and a ``wait_group`` that covers that group.
* Operands are captured at issue: A and B are read from shared memory through their
  descriptors, the A fragment, the descriptors and scale-d from registers, when
  ``mma_async`` is called, and the result is computed then.  The ISA forbids modifying those
  registers and that memory until completion, so on a correct program issue-time capture is
  indistinguishable from any later read; strict mode reports every modification in between.
  ``wgmma.mma_async.sp`` (9.7.15.6) issues the same way; its ``sp-meta`` register is read at
  issue too, and, since the ISA's fence and wait rules name only the accumulator and A-fragment
  registers, writing it afterwards is no hazard.
* The accumulator input C of an ``mma_async`` is the value its D registers will hold once all
  earlier ``mma_async`` complete: for a chain of same-shape ``mma_async`` accumulating into
  the same registers (ordered by the hardware without a fence, 9.7.15.7.1), each one
  accumulates onto the previous one's result, in flight or not.

**Strict mode** (the default) raises :class:`~fastmma.errors.HazardError` for the behaviours
the ISA leaves undefined; the message names the instruction, the register or address and the
rule:

1. ``mma_async`` before any ``wgmma.fence`` (9.7.15.7.1: a fence precedes the first
   ``mma_async`` of a warpgroup).
2. A thread access (:meth:`Warpgroup.read`, :meth:`Warpgroup.write`) to an accumulator or
   A-fragment register of an in-flight ``mma_async`` before a ``wait_group`` covers it
   (9.7.15.7.3); and an ``mma_async`` that reads an in-flight one's accumulators as its A
   fragment, writes an in-flight one's A fragment, or accumulates into an in-flight one's
   registers other than by same-shape chaining (same shape and type, same ``d`` registers in
   the same order).  Two ``mma_async`` reading the same A-fragment registers are allowed.
3. ``mma_async`` whose accumulator or A-fragment registers a thread read or wrote after the
   last ``wgmma.fence`` (9.7.15.7.1; the ordering across same-shape ``mma_async`` is given
   by the hardware, an access by a thread is not).  Descriptor and predicate registers need
   no fence.
4. A shared-memory write to a byte that an in-flight ``mma_async`` reads (9.7.15.5.2; the
   bytes are those its descriptors address, :func:`~fastmma.layout.descriptor.element_addresses`).
5. ``mma_async`` reading shared-memory bytes written by :meth:`Warpgroup.write_smem` with no
   ``fence.proxy.async`` since (9.7.15.4: generic-proxy writes must be fenced before the
   async proxy reads them).  The image given to the constructor counts as fenced.

Descriptors and the scale-d predicate are warpgroup-wide operands: in strict mode per-thread
values that differ are reported too (the emulator models one operation per warpgroup).

**Non-strict mode** (``strict=False``) checks none of this and does what the hardware most
plausibly does: operands are taken at issue as above; a thread reading an in-flight
register sees its value from before the ``mma_async`` (the result is not written yet); a
thread write to an in-flight accumulator is overwritten at completion and never feeds a
chained ``mma_async``; shared-memory writes after issue do not change the result;
differing per-thread descriptors or predicates use thread 0's value.

**Atomicity.**  Every method validates everything (operands, bounds, hazards) before it
changes anything: an instruction that raises leaves registers, shared memory, pending
groups and fence state exactly as they were.

**Registers** are named as in PTX (``%f1``, ``%r5``, ``%rd2``, ``p``) and hold one value per
thread: 32-bit (``uint32[128]``), 64-bit (``uint64[128]``, e.g. a matrix descriptor) or
predicates (``bool[128]``).  A register exists once declared (:meth:`Warpgroup.declare`,
zero-filled) or written; its width is fixed then.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from . import wgmma
from .errors import (
    AlignmentError,
    HazardError,
    OperandError,
    SharedMemoryBoundsError,
    UnsupportedInstructionError,
)
from .formats import as_numpy, byte_image, get_format, is_int
from .isa import WgmmaCommitGroup, WgmmaFence, WgmmaMmaAsync, WgmmaMmaAsyncSp, WgmmaWaitGroup, parse
from .layout.descriptor import MatrixDescriptor, major_from_trans, operand_footprint
from .mma import as_instruction, scale_d_flag
from .registers import REGISTER_DTYPES, THREADS, RegisterFile
from .validate import excerpt, public, require_memory

DEFAULT_SMEM_BYTES = 232448
"""227 KiB: the most shared memory one CTA can use on sm_90."""
SHARED_WINDOW_BYTES = 1 << 32
"""The most bytes a 32-bit shared address reaches: the largest image a size may ask for."""

_NAME_RE = re.compile(r"^[A-Za-z_$%][\w$%]*$")

RULE_FENCE_FIRST = "a wgmma.fence must precede a warpgroup's first wgmma.mma_async (PTX ISA 9.7.15.7.1)"
RULE_FENCE_BETWEEN = ("a wgmma.fence must come between a thread's access to a register and a wgmma.mma_async "
                      "using it as accumulator or A (PTX ISA 9.7.15.7.1)")
RULE_IN_FLIGHT = "an in-flight wgmma's registers wait for its wgmma.wait_group (PTX ISA 9.7.15.7.3)"
RULE_SMEM = "shared memory a wgmma.mma_async reads must not change until it completes (PTX ISA 9.7.15.5.2)"
RULE_PROXY = "a shared-memory write needs a fence.proxy.async before a wgmma.mma_async reads it (PTX ISA 9.7.15.4)"
RULE_UNIFORM = "descriptors and scale-d are warpgroup-wide: values that differ between threads have no defined meaning"


def register_names(prefix: str, count: int, start: int = 0) -> list[str]:
    """``[f"{prefix}{start}", ..., f"{prefix}{start + count - 1}"]``, e.g. ``("%f", 16, 1)``.

    Example: ``register_names("%f", 4) == ["%f0", "%f1", "%f2", "%f3"]``.
    """
    return [f"{prefix}{start + i}" for i in range(count)]


@dataclass
class InFlight:
    """One issued ``wgmma.mma_async`` that has not completed.

    ``result`` holds the D registers it will write (``uint32[128, ND]``, column ``j`` for
    register ``d[j]``); ``smem_bytes`` the sorted image bytes its descriptors read;
    ``group`` its wgmma-group number, ``None`` while uncommitted.
    """

    seq: int
    inst: WgmmaMmaAsync
    d: tuple[str, ...]
    a: tuple[str, ...]
    result: np.ndarray
    footprint: _Footprint
    group: int | None = None

    @property
    def smem_bytes(self) -> np.ndarray:
        """The shared-memory bytes the instruction reads (its footprint in the image)."""
        return self.footprint.bytes

    def __str__(self) -> str:
        state = "not committed" if self.group is None else f"in wgmma-group #{self.group}, not waited for"
        return f"wgmma.mma_async #{self.seq} ({_inst_name(self.inst)}; {state})"

    def chains_with(self, inst: WgmmaMmaAsync, d: tuple[str, ...]) -> bool:
        """Same-shape accumulator chaining: same shape and accumulator type, same D registers."""
        return self.inst.shape == inst.shape and self.inst.dtype == inst.dtype and self.d == d


def _qualified_name(inst: WgmmaMmaAsync) -> str:
    return f"{inst.opcode or 'wgmma.mma_async'}.{inst.shape}.{inst.dtype}.{inst.atype}.{inst.btype}"


def _inst_name(inst: WgmmaMmaAsync) -> str:
    """The instruction's qualifiers as written, without ``wgmma.mma_async`` and ``.sync.aligned``,
    which every one has: ``m64n256k16.f32.f16.f16``, ``sp.m64n8k32.f32.e4m3.e4m3``."""
    name = inst.text.split()[0] if inst.text else _qualified_name(inst)
    return name.replace("wgmma.mma_async", "", 1).replace(".sync.aligned", "", 1).lstrip(".")


class _Footprint:
    """The image bytes an ``mma_async`` reads through its descriptors, worked out when first
    asked, because only a hazard check needs them (a shared-memory write while it is in
    flight, or one not yet fenced) and building them on every issue would slow every k-loop
    step.  The descriptors' bounds are checked either way, by the read of the operands."""

    __slots__ = ("_build", "_bytes")

    def __init__(self, build):
        self._build = build
        self._bytes = None

    @property
    def bytes(self) -> np.ndarray:
        if self._bytes is None:
            self._bytes = self._build()
        return self._bytes


@dataclass
class _Issue:
    """A fully validated ``mma_async``: what it reads and where, before it is computed."""

    inst: WgmmaMmaAsync
    d: tuple[str, ...]
    a_regs: tuple[str, ...]
    a_desc: int | None
    b_desc: int
    scale_d: bool
    footprint: _Footprint
    e_regs: np.ndarray | None = None  # wgmma.mma_async.sp: each thread's sp-meta, read at issue

    @property
    def smem_bytes(self) -> np.ndarray:
        return self.footprint.bytes


class Warpgroup:
    """Registers, shared memory and in-flight ``wgmma.mma_async`` of one warpgroup.

    ``smem``: the shared-memory image (1-D ``uint8`` or bytes, copied), or its size in bytes
    (zero-filled); default :data:`DEFAULT_SMEM_BYTES` zero bytes.  ``smem_address``: the
    shared address of image byte 0 (16-byte aligned; the default 0 stands for any 1024-byte
    aligned image, as in :mod:`fastmma.layout.descriptor`); descriptor start addresses count
    from image byte 0.  ``strict``: report undefined behaviour as
    :class:`~fastmma.errors.HazardError` (module docstring).
    """

    @public
    def __init__(self, smem=None, *, smem_address: int = 0, strict: bool = True):
        self.strict = bool(strict)
        self.smem_address = _check_smem_address(smem_address)
        self._smem = _smem_image(smem)
        self._smem_unfenced = np.zeros(self._smem.size, dtype=bool)
        self._any_unfenced = False  # whether _smem_unfenced holds any True
        self._file = RegisterFile()
        self._accessed: dict[str, str] = {}  # register -> "read"/"written" by a thread since the last fence
        self._fenced = False
        self._uncommitted: list[InFlight] = []
        self._groups: list[tuple[int, list[InFlight]]] = []
        self._next_seq = 0
        self._next_group = 0

    # ------------------------------------------------------------------ registers

    @public
    def declare(self, names, bits: int = 32) -> None:
        """Create registers (``bits`` 32, 64 or 1 for a predicate), zero in every thread.

        Declaring an existing register of the same width keeps its value.
        """
        names = _names(names)
        _register_dtype(bits)
        for name in names:
            self._check_width(name, bits)
        self._file.create(names, bits)

    @public
    def write(self, names, values, *, bits: int | None = None) -> None:
        """A thread write: set register(s) ``names`` in every thread.

        One name: ``values`` is a scalar (all threads) or ``[128]``; a list of names:
        ``[128, len(names)]`` or a scalar.  Integers must fit the register (signed values are
        stored in two's complement); floats of the register's width are stored as their
        bits; predicates take bools or 0/1.  A new register's width is ``bits``, else that
        of the values' numpy dtype (4 bytes -> 32, 8 -> 64, bool -> predicate).
        """
        single = isinstance(names, str)
        names = _names(names)
        if len(set(names)) != len(names):
            twice = next(name for i, name in enumerate(names) if name in names[:i])
            raise OperandError(f"names: register {excerpt(twice)} is named twice; a write sets each register once")
        width = self._write_width(names, values, bits)
        block = _columns(values, names, single, width)
        self._check_thread_access(names, "written")
        self._file.create(names, width)
        self._file.set(self._file.locate(tuple(names)), block)
        self._accessed.update(dict.fromkeys(names, "written"))

    @public
    def read(self, names, dtype=None) -> np.ndarray:
        """A thread read: register values, ``[128]`` for one name, ``[128, n]`` for a list.

        Raw bits (``uint32`` / ``uint64`` / ``bool``), or viewed as ``dtype`` of the same
        width (e.g. ``np.float32``).  Strict mode rejects registers of an in-flight wgmma.
        """
        names_list = _names(names)
        values = self._gather(names_list, names, dtype)
        self._check_thread_access(names_list, "read")
        self._accessed.update(dict.fromkeys(names_list, "read"))
        return values

    @public
    def peek(self, names, dtype=None) -> np.ndarray:
        """The values :meth:`read` would return, without hazard checks or access tracking.

        A debugger's view: for registers of an in-flight wgmma it shows what the register
        holds now, i.e. the value from before that wgmma.
        """
        return self._gather(_names(names), names, dtype)

    def __getitem__(self, name):
        return self.read(name)

    def __setitem__(self, name, values):
        self.write(name, values)

    def __contains__(self, name) -> bool:
        return name in self._file

    @property
    def registers(self) -> dict[str, int]:
        """Every register's name and width in bits (1 for predicates)."""
        return self._file.widths()

    # ------------------------------------------------------------------ shared memory

    @property
    def smem(self) -> np.ndarray:
        """A read-only view of the shared-memory image (write through :meth:`write_smem`)."""
        view = self._smem.view()
        view.flags.writeable = False
        return view

    @public
    def write_smem(self, offset: int, data) -> None:
        """Write ``data`` (bytes, or any numpy array's little-endian bytes) at image byte ``offset``.

        A generic-proxy write: a wgmma reading these bytes needs :meth:`fence_proxy_async`
        first.  Strict mode rejects bytes an in-flight wgmma reads.
        """
        raw = _as_bytes(data)
        start = self._check_smem_range(offset, raw.size, "write_smem")
        if self.strict:
            self._check_smem_write(start, raw.size)
        self._smem[start:start + raw.size] = raw
        self._smem_unfenced[start:start + raw.size] = True
        self._any_unfenced = raw.size > 0 or self._any_unfenced

    @public
    def read_smem(self, offset: int, nbytes: int) -> np.ndarray:
        """A copy of ``nbytes`` image bytes from ``offset`` (``uint8``)."""
        start = self._check_smem_range(offset, nbytes, "read_smem")
        return self._smem[start:start + int(nbytes)].copy()

    def fence_proxy_async(self) -> None:
        """``fence.proxy.async``: earlier shared-memory writes become visible to wgmma."""
        if self._any_unfenced:
            self._smem_unfenced[:] = False
            self._any_unfenced = False

    # ------------------------------------------------------------------ wgmma

    def fence(self) -> None:
        """``wgmma.fence``: order earlier register accesses before later ``mma_async``."""
        self._fenced = True
        self._accessed.clear()

    @public
    def mma_async(self, instruction, d=None, a=None, b_desc=None, scale_d=None, e=None) -> InFlight:
        """Issue ``wgmma.mma_async`` or ``wgmma.mma_async.sp``; its D registers change at the
        ``wait_group`` covering it.

        ``instruction``: PTX text or a parsed :class:`~fastmma.isa.WgmmaMmaAsync` /
        :class:`~fastmma.isa.WgmmaMmaAsyncSp`.  Operands not given are taken from the
        instruction's text: ``d``, the accumulator register names; ``a``, a descriptor (a
        64-bit register name, or an int / :class:`~fastmma.layout.descriptor.MatrixDescriptor`
        value) or the 4 A-fragment register names; ``b_desc``, likewise a descriptor;
        ``scale_d``, a bool (or 0 / 1) or a predicate register name (``"p"`` or ``"!p"``),
        default the text's operand or true; ``e`` (``.sp`` only), the ``sp-meta`` register's
        name or its 128 values.  The sparsity selector is the text's ``sp-sel``.  The ISA
        orders only the accumulator and A-fragment registers with ``wgmma.fence`` and
        ``wait_group`` (9.7.15.7.1), so ``sp-meta`` is read at issue, as the descriptors are.
        Returns the in-flight record.
        """
        inst = as_instruction(instruction, (WgmmaMmaAsync, WgmmaMmaAsyncSp))
        if e is not None and not isinstance(inst, WgmmaMmaAsyncSp):
            raise OperandError("e (sp-meta) is an operand of wgmma.mma_async.sp only")
        issue = self._resolve(inst, d, a, b_desc, scale_d, e)
        if self.strict:
            self._check_issue(issue)
        result = self._compute(issue)
        result.flags.writeable = False
        record = InFlight(self._next_seq, inst, issue.d, issue.a_regs, result, issue.footprint)
        self._next_seq += 1
        self._uncommitted.append(record)
        return record

    def commit_group(self) -> int:
        """``wgmma.commit_group``: batch every uncommitted ``mma_async`` into a new group.

        With none, the group is empty.  Returns the group's number.
        """
        number = self._next_group
        for record in self._uncommitted:
            record.group = number
        self._groups.append((number, self._uncommitted))
        self._uncommitted = []
        self._next_group += 1
        return number

    @public
    def wait_group(self, n: int = 0) -> None:
        """``wgmma.wait_group N``: complete the oldest groups until at most ``n`` are pending.

        Completion writes each ``mma_async``'s results into its D registers, in issue order.
        Uncommitted ``mma_async`` are not waited for (they stay in flight).
        """
        if not is_int(n) or n < 0:
            raise OperandError(f"wgmma.wait_group N must be a non-negative integer, got {n!r}")
        while len(self._groups) > n:
            _, records = self._groups.pop(0)
            for record in records:
                self._complete(record)

    @public
    def execute(self, text) -> InFlight | int | None:
        """Execute one wgmma statement given as PTX text (with operands) or parsed."""
        inst = parse(text) if isinstance(text, str) else text
        if isinstance(inst, WgmmaFence):
            return self.fence()
        if isinstance(inst, WgmmaCommitGroup):
            return self.commit_group()
        if isinstance(inst, WgmmaWaitGroup):
            return self.wait_group(inst.n)
        if isinstance(inst, (WgmmaMmaAsync, WgmmaMmaAsyncSp)):
            return self.mma_async(inst)
        raise UnsupportedInstructionError(f"a Warpgroup executes wgmma instructions only, not {inst!s}")

    # ------------------------------------------------------------------ state

    @property
    def pending_groups(self) -> int:
        """Committed wgmma-groups not yet complete (empty groups included)."""
        return len(self._groups)

    @property
    def in_flight(self) -> tuple[InFlight, ...]:
        """Every issued, incomplete ``mma_async``, oldest first (committed ones, then the rest)."""
        committed = [r for _, records in self._groups for r in records]
        return tuple(committed + self._uncommitted)

    @property
    def uncommitted(self) -> tuple[InFlight, ...]:
        """The issued wgmma instructions not yet closed into a group by ``commit_group``, oldest first."""
        return tuple(self._uncommitted)

    # ------------------------------------------------------------------ register helpers

    def _check_width(self, name: str, bits: int) -> None:
        width = self._file.width(name)
        if width is not None and width != bits:
            raise OperandError(f"register {name} is {_width_text(width)}, not {_width_text(bits)}")

    def _write_width(self, names, values, bits) -> int:
        where = self._file.locate(tuple(names))
        widths = {where[0]} if where is not None else {self._file.width(n) for n in names} - {None}
        if bits is not None:
            _register_dtype(bits)
            widths.add(int(bits))
        if not widths:
            widths.add(_width_of_values(values, names[0]))
        if len(widths) > 1:
            found = ", ".join(f"{n}: {_width_text(self._file.width(n))}" for n in names if n in self._file)
            raise OperandError(f"cannot write registers of different widths together ({found}"
                               f"{', bits=' + str(bits) if bits is not None else ''})")
        return widths.pop()

    def _gather(self, names, original, dtype) -> np.ndarray:
        where = self._file.locate(tuple(names))
        if where is None:
            missing = [n for n in names if n not in self._file]
            if missing:
                raise OperandError(f"register {missing[0]} does not exist (declare or write it first)")
            raise OperandError(f"cannot read registers of different widths together: {', '.join(names)}")
        out = self._file.get(where)
        out = out[:, 0].copy() if isinstance(original, str) else out.copy()
        return out if dtype is None else _view(out, dtype)

    def _values(self, name: str) -> np.ndarray:
        """Register ``name``'s 128 values (a view: read, never kept)."""
        return self._file.get(self._file.locate((name,)))[:, 0]

    def _check_thread_access(self, names, how: str) -> None:
        if not self.strict:
            return
        owners = self._in_flight_owners()
        for name in names:
            if name in owners:
                record, role = owners[name]
                raise HazardError(f"register {name} {how} by a thread while it is the {role} of "
                                  f"{record}: {RULE_IN_FLIGHT}")

    def _in_flight_owners(self) -> dict:
        """Each register of an in-flight wgmma -> ``(record, role)``: the newest such wgmma,
        and its accumulator role before its A-fragment one."""
        owners = {}
        for record in self.in_flight:  # oldest first: newer records overwrite
            owners.update((name, (record, "A fragment")) for name in record.a)
            owners.update((name, (record, "accumulator (d)")) for name in record.d)
        return owners

    # ------------------------------------------------------------------ operand resolution

    def _resolve(self, inst, d, a, b_desc, scale_d, e=None) -> _Issue:
        ops = inst.operands or ()
        sparse = isinstance(inst, WgmmaMmaAsyncSp)
        d = self._d_registers(inst, d if d is not None else _operand(ops, 0, "d"))
        a = a if a is not None else _operand(ops, 1, "a")
        b = b_desc if b_desc is not None else _operand(ops, 2, "b-desc")
        a_regs, a_desc = self._a_operand(inst, a)
        b_value = self._descriptor(b, "b_desc")
        e_values = self._metadata(e if e is not None else _operand(ops, 3, "e")) if sparse else None
        at = 5 if sparse else 3  # scale-d follows sp-meta and sp-sel
        flag = self._scale_d(scale_d if scale_d is not None else (ops[at] if len(ops) > at else True))
        footprint = _Footprint(functools.partial(self._operand_bytes, inst, a_desc, b_value))
        return _Issue(inst, d, a_regs, a_desc, b_value, flag, footprint, e_values)

    def _metadata(self, e) -> np.ndarray:
        """``sp-meta``: a 32-bit register (its name or operand) read now, or 128 values."""
        if hasattr(e, "kind"):
            if e.kind != "reg" or e.negated:
                raise OperandError(f"operand sp-meta must be a 32-bit register, got {e.text!r}")
            e = e.name
        if isinstance(e, str):
            self._require([e], 32, "sp-meta")
            return self._values(e).copy()
        return wgmma.registers(np.reshape(e, (-1, 1)) if np.ndim(e) == 1 else e, 1, "e (sp-meta)")[:, 0].copy()

    def _d_registers(self, inst, d) -> tuple[str, ...]:
        if hasattr(d, "kind"):
            if d.kind != "vector":
                raise OperandError(f"operand d must be a vector of registers, got {d.text!r}")
            d = d.regs
        names = tuple(_names(d))
        if len(names) != inst.d_regs:
            raise OperandError(f"{_qualified_name(inst)} has {inst.d_regs} accumulator registers per "
                               f"thread, got {len(names)} names in d")
        if len(set(names)) != len(names):
            raise OperandError(f"the accumulator registers d must be distinct, got {', '.join(names)}")
        self._require(names, 32, "d")
        return names

    def _a_operand(self, inst, a):
        if hasattr(a, "kind"):
            a = list(a.regs) if a.kind == "vector" else _descriptor_operand(a, "a_desc")
        is_regs = isinstance(a, (list, tuple))
        if inst.a_source is not None and (inst.a_source == "reg") != is_regs:
            where = "registers (4 register names)" if inst.a_source == "reg" else "a descriptor"
            raise OperandError(f"the instruction text reads A from {where}; got a={a!r}")
        if not is_regs:
            return (), self._descriptor(a, "a_desc")
        names = tuple(_names(a))
        if len(names) != 4:
            raise OperandError(f"A in registers is 4 registers per thread, got {len(names)}: {names}")
        if inst.imm_trans_a:
            raise OperandError("imm-trans-a does not exist when A comes from registers")
        self._require(names, 32, "a")
        return names, None

    def _require(self, names, bits: int, what: str) -> None:
        where = self._file.locate(tuple(names))
        if where is not None and where[0] == bits:
            return
        for name in names:
            width = self._file.width(name)
            if width is None:
                raise OperandError(f"operand {what}: register {name} does not exist (declare or write it first)")
            if width != bits:
                raise OperandError(f"operand {what}: register {name} is {_width_text(width)}, "
                                   f"expected {_width_text(bits)}")

    def _descriptor(self, value, what: str) -> int:
        if hasattr(value, "kind"):
            value = _descriptor_operand(value, what)
        if isinstance(value, MatrixDescriptor):
            return value.encode()
        if is_int(value):
            if not 0 <= int(value) < 1 << 64:
                raise OperandError(f"{what} must be a 64-bit descriptor value, got {value}")
            return int(value)
        if isinstance(value, str):
            self._require([value], 64, what)
            return int(self._uniform(value, self._values(value), what))
        raise OperandError(f"{what} must be a 64-bit register name, an int or a MatrixDescriptor, got {value!r}")

    def _scale_d(self, value) -> bool:
        if hasattr(value, "kind"):
            if value.kind == "imm":
                return value.value != 0
            value = ("!" if value.negated else "") + value.name
        if not isinstance(value, str):
            return scale_d_flag(value, "a bool (or 0 / 1) or a predicate register name")
        negated, name = value.startswith("!"), value.lstrip("!")
        self._require([name], 1, "scale-d")
        return bool(self._uniform(name, self._values(name), "scale-d")) != negated

    def _uniform(self, name: str, values: np.ndarray, what: str):
        if self.strict and not (values == values[0]).all():
            t = int(np.argmax(values != values[0]))
            raise HazardError(f"operand {what}: register {name} holds {values[0]!r} in thread 0 but "
                              f"{values[t]!r} in thread {t}: {RULE_UNIFORM}")
        return values[0]

    def _operand_bytes(self, inst, a_desc, b_desc) -> np.ndarray:
        """Image bytes the descriptors address (bounds checked), sorted and unique: the
        operands' footprints (each built once per layout,
        :func:`~fastmma.layout.descriptor.operand_footprint`), merged.  Where A's and B's bytes
        do not interleave (as they lie in usual tiles) the merge is a concatenation, because
        sorting them is a large share of an issue."""
        k = inst.shape.k
        operands = [(b_desc, inst.shape.n, k, inst.btype, inst.imm_trans_b, "b_desc")]
        if a_desc is not None:  # a sparse A holds K/2 of each row
            ka = k // 2 if isinstance(inst, WgmmaMmaAsyncSp) else k
            operands.append((a_desc, inst.shape.m, ka, inst.atype, inst.imm_trans_a, "a_desc"))
        parts = [operand_footprint(desc, mn, kk, get_format(fmt).bits, major_from_trans(trans),
                                   image_address=self.smem_address, image_size=self._smem.size, name=name)
                 for desc, mn, kk, fmt, trans, name in operands]
        parts.sort(key=lambda p: p[0])
        if len(parts) == 1 or parts[0][-1] < parts[1][0]:
            return np.concatenate(parts)
        both = np.sort(np.concatenate(parts))
        return both[np.concatenate(([True], both[1:] != both[:-1]))]

    # ------------------------------------------------------------------ hazard checks

    def _check_issue(self, issue: _Issue) -> None:
        label = f"wgmma.mma_async #{self._next_seq} ({_inst_name(issue.inst)})"
        if not self._fenced:
            raise HazardError(f"{label} issued with no prior wgmma.fence: {RULE_FENCE_FIRST}")
        used = issue.d + issue.a_regs
        if not self._accessed.keys().isdisjoint(used):
            name = next(name for name in used if name in self._accessed)
            role = "accumulator (d)" if name in issue.d else "A fragment"
            raise HazardError(f"{label}: its {role} register {name} was {self._accessed[name]} by a thread "
                              f"after the last wgmma.fence: {RULE_FENCE_BETWEEN}")
        for record in self.in_flight:
            self._check_against(label, issue, record)
        unfenced = issue.smem_bytes[self._smem_unfenced[issue.smem_bytes]] if self._any_unfenced else ()
        if len(unfenced):
            raise HazardError(f"{label} reads shared memory at image byte {int(unfenced[0])} (shared address "
                              f"{self.smem_address + int(unfenced[0]):#x}), written with no fence.proxy.async "
                              f"since: {RULE_PROXY}")

    def _check_against(self, label: str, issue: _Issue, record: InFlight) -> None:
        clash = _first_common(issue.d, record.d)
        if clash and not record.chains_with(issue.inst, issue.d):
            raise HazardError(f"{label} accumulates into {clash}, an accumulator register of {record}, "
                              f"not same-shape chaining: {RULE_IN_FLIGHT}")
        for mine, theirs, what in ((issue.d, record.a, "writes"), (issue.a_regs, record.d, "reads")):
            clash = _first_common(mine, theirs)
            if clash:
                role = "A fragment" if theirs is record.a else "accumulator (d)"
                raise HazardError(f"{label} {what} register {clash}, the {role} of {record}: {RULE_IN_FLIGHT}")

    def _check_smem_write(self, start: int, size: int) -> None:
        for record in self.in_flight:
            i = int(np.searchsorted(record.smem_bytes, start))
            if i < record.smem_bytes.size and record.smem_bytes[i] < start + size:
                byte = int(record.smem_bytes[i])
                raise HazardError(f"shared-memory write to image byte {byte} (shared address "
                                  f"{self.smem_address + byte:#x}), which {record} reads: {RULE_SMEM}")

    def _check_smem_range(self, offset, nbytes, what: str) -> int:
        if not isinstance(offset, (int, np.integer)) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise OperandError(f"{what}: offset and size must be integers, got {offset!r}, {nbytes!r}")
        if offset < 0 or offset + nbytes > self._smem.size:
            raise SharedMemoryBoundsError(f"{what}: bytes [{offset}, {offset + nbytes}) lie outside the "
                                          f"shared-memory image [0, {self._smem.size})")
        return int(offset)

    # ------------------------------------------------------------------ execution

    def _accumulator_input(self, names) -> np.ndarray:
        """C: per register, the latest in-flight result for it, else the register itself.

        Where the newest in-flight wgmma on any of them has exactly these accumulators (a
        chain), C is its result; where none is in flight, the registers' columns."""
        in_flight = self.in_flight
        wanted = set(names) if in_flight else ()
        for record in reversed(in_flight):
            if record.d == names:
                return record.result
            if not wanted.isdisjoint(record.d):
                break
        else:
            return self._file.get(self._file.locate(names))
        out = self._file.get(self._file.locate(names)).copy()
        column = {name: j for j, name in enumerate(names)}
        for record in in_flight:
            for j, name in enumerate(record.d):
                if name in column:
                    out[:, column[name]] = record.result[:, j]
        return out

    def _compute(self, issue: _Issue) -> np.ndarray:
        source = {"a_desc": issue.a_desc} if issue.a_desc is not None else \
            {"a_regs": self._file.get(self._file.locate(issue.a_regs))}
        if issue.e_regs is not None:
            return wgmma.mma_async_sp(issue.inst, self._accumulator_input(issue.d), e_regs=issue.e_regs,
                                      b_desc=issue.b_desc, smem=self._smem, scale_d=issue.scale_d,
                                      image_address=self.smem_address, **source)
        return wgmma.mma_async(issue.inst, self._accumulator_input(issue.d), b_desc=issue.b_desc,
                               smem=self._smem, scale_d=issue.scale_d, image_address=self.smem_address,
                               **source)

    def _complete(self, record: InFlight) -> None:
        self._file.set(self._file.locate(record.d), record.result)


# ---------------------------------------------------------------------- helpers


def _names(names) -> list[str]:
    try:
        items = [names] if isinstance(names, str) else list(names)
    except TypeError:
        raise OperandError(f"register names must be a name or a sequence of names, got {names!r}") from None
    if not items:
        raise OperandError("no register names given")
    try:
        if _KNOWN_NAMES.issuperset(items):
            return items
    except TypeError:  # an unhashable item: the loop names it
        pass
    for name in items:
        if isinstance(name, str) and name in _KNOWN_NAMES:
            continue
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise OperandError(f"{name!r} is not a register name (PTX identifier such as %f1, %rd2, p)")
        if len(_KNOWN_NAMES) < 1 << 16:
            _KNOWN_NAMES.add(name)
    return items


_KNOWN_NAMES: set[str] = set()  # names that passed _NAME_RE: a warpgroup names the same registers again and again


def _register_dtype(bits) -> np.dtype:
    if bits not in REGISTER_DTYPES:
        raise OperandError(f"register width must be 32, 64 or 1 (predicate), got {bits!r}")
    return REGISTER_DTYPES[bits]


def _width(arr: np.ndarray) -> int:
    return 1 if arr.dtype == np.bool_ else arr.dtype.itemsize * 8


def _width_text(bits: int) -> str:
    return "a predicate" if bits == 1 else f"{bits}-bit"


def _width_of_values(values, name: str) -> int:
    if isinstance(values, (bool, np.bool_)):
        return 1
    arr = values if isinstance(values, np.ndarray) else None
    if isinstance(values, np.generic):
        arr = np.asarray(values)
    if arr is None or arr.dtype.itemsize not in (1, 4, 8) or (arr.dtype.itemsize == 1 and arr.dtype != np.bool_):
        raise OperandError(f"register {name} does not exist and its width cannot be told from {type(values).__name__} "
                           f"values: declare it or pass bits=32 / 64 / 1")
    return 1 if arr.dtype == np.bool_ else arr.dtype.itemsize * 8


def _columns(values, names: list, single: bool, bits: int) -> np.ndarray:
    """``values`` for registers ``names`` as the register file stores them: ``[128, count]``,
    or a scalar for every thread and register."""
    count = len(names)
    arr = _coerce(values, bits)
    if arr.ndim == 0:
        return arr
    want = (THREADS,) if single else (THREADS, count)
    if arr.shape != want:
        which = f"register {excerpt(names[0])}" if single else f"{count} registers {excerpt(', '.join(names), 40)}"
        raise OperandError(f"values for {which} must be a scalar or have shape {want}, got {arr.shape}")
    return arr.reshape(THREADS, count)


def _coerce(values, bits: int) -> np.ndarray:
    """``values`` as the register dtype of ``bits``, checked to fit."""
    dtype = REGISTER_DTYPES[bits]
    arr = as_numpy(values, "values")
    if bits == 1:
        if arr.dtype == np.bool_ or (arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all()):
            return arr.astype(np.bool_)
        raise OperandError(f"a predicate takes bools or 0/1, got {arr.dtype} values")
    if arr.dtype.kind == "f" and arr.dtype.itemsize * 8 == bits:
        return np.array(arr, order="C").view(dtype)
    if arr.dtype.kind in "iu":
        if arr.dtype.itemsize * 8 == bits:
            return np.array(arr, order="C").view(dtype)
        if arr.size and (int(arr.min()) < -(1 << (bits - 1)) or int(arr.max()) >= 1 << bits):
            _out_of_range(bits, int(arr.min()), int(arr.max()))
        wide = arr.astype(np.int64)
        return (wide & 0xFFFFFFFF).astype(dtype) if bits == 32 else wide.view(dtype)
    if arr.dtype == object and arr.size and all(isinstance(v, int) for v in arr.flat):  # Python ints past 64 bits
        _out_of_range(bits, min(arr.flat), max(arr.flat))
    raise OperandError(f"values: a {bits}-bit register takes integers or {bits}-bit floats, got {arr.dtype} values")


def _out_of_range(bits: int, low: int, high: int):
    lo, hi = -(1 << (bits - 1)), (1 << bits) - 1
    raise OperandError(f"values must lie in [{lo}, {hi}] to fit a {bits}-bit register (signed or unsigned), got "
                       f"{excerpt(low if low < lo else high)}")


def _view(values: np.ndarray, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.itemsize != values.dtype.itemsize:
        raise OperandError(f"cannot view {_width_text(_width(values))} registers as {dtype}")
    return values.view(dtype)


def _operand(ops, index: int, what: str):
    if len(ops) <= index:
        raise OperandError(f"operand {what} is not in the instruction text: pass {what.replace('-', '_')}=")
    return ops[index]


def _descriptor_operand(op, what: str):
    if op.kind == "reg" and not op.negated:
        return op.name
    if op.kind == "imm":
        return op.value
    raise OperandError(f"operand {what} must be a 64-bit register or an immediate, got {op.text!r}")


def _first_common(mine, theirs):
    common = set(theirs)
    return next((name for name in mine if name in common), None)


def _check_smem_address(address) -> int:
    if not is_int(address) or address < 0:
        raise OperandError(f"smem_address must be a non-negative shared address, got {address!r}")
    if address % 16:
        raise AlignmentError(f"smem_address must be 16-byte aligned, got {address}")
    return int(address)


def _smem_image(smem) -> np.ndarray:
    if smem is None:
        return np.zeros(DEFAULT_SMEM_BYTES, dtype=np.uint8)
    if is_int(smem):
        if not 0 < smem <= SHARED_WINDOW_BYTES:
            raise OperandError(f"the shared-memory size must be positive and at most 2^32 bytes (the reach of a "
                               f"32-bit shared address), got {smem}")
        return np.zeros(int(smem), dtype=np.uint8)
    if isinstance(smem, np.ndarray):  # copied: a broadcast view may claim more than memory holds
        require_memory(smem.nbytes, "smem", "a private copy of the shared-memory image")
    return byte_image(smem, "smem")


def _as_bytes(data) -> np.ndarray:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(data), dtype=np.uint8)
    arr = as_numpy(data, "data")
    if arr.dtype.kind not in "biuf" or arr.dtype.byteorder == ">":
        raise OperandError(f"write_smem takes bytes or a little-endian numeric array, got {arr.dtype}")
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


# ---------------------------------------------------------------------- recordings


def replay_case(arrays: dict, meta: dict, case: int, *, strict: bool = True) -> np.ndarray:
    """Run case ``case`` of a wgmma recording through a :class:`Warpgroup`; return its D registers.

    ``arrays``, ``meta``: from :func:`fastmma.conform.load_recording`.  The recorded PTX is
    executed with its own register names: the accumulators get ``c_regs``, the A fragment
    ``a_regs``, the scale-d predicate ``scale_d != 0``, each descriptor register its recorded
    value just before its ``mma_async``; then, as recorded, ``wgmma.fence``,
    ``wgmma.mma_async`` (x chain), ``wgmma.commit_group``, ``wgmma.wait_group 0``.  The
    result is ``uint32[128, ND]``, to compare with ``arrays["d_regs"][case]``.
    """
    insts = [parse(t) for t in meta["ptx"] if t.startswith("wgmma.mma_async")]
    if not insts or any(i.operands is None for i in insts):
        raise OperandError("the recording's ptx holds no wgmma.mma_async with operands")
    wg = Warpgroup(arrays["smem"][case], strict=strict)
    d = insts[0].operands[0].regs
    wg.write(d, arrays["c_regs"][case], bits=32)
    if insts[0].a_source == "reg":
        wg.write(insts[0].operands[1].regs, arrays["a_regs"][case], bits=32)
    for inst in insts:
        if inst.operands[3].kind == "reg":
            wg.write(inst.operands[3].name, bool(arrays["scale_d"][case]), bits=1)
    a_desc = arrays["a_desc"][case].reshape(-1)
    b_desc = arrays["b_desc"][case].reshape(-1)
    wg.fence()
    for j, inst in enumerate(insts):
        if inst.a_source == "desc" and inst.operands[1].kind == "reg":
            wg.write(inst.operands[1].name, a_desc[j], bits=64)
        if inst.operands[2].kind == "reg":
            wg.write(inst.operands[2].name, b_desc[j], bits=64)
        wg.mma_async(inst)
    wg.commit_group()
    wg.wait_group(0)
    return wg.read(d)
