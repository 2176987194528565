"""The statements fastmma.ptx executes, one handler each: :data:`HANDLERS`, keyed by opcode root.

A handler has ``check(checker, instr) -> data`` (static: operand kinds and types, PTX ISA 9.4
type agreement; errors carry line and column), ``run(machine, data, active)`` and ``scope``:
how a guard predicate ``@p`` applies.  ``"thread"``: each thread executes where its guard
holds.  ``"warp"`` / ``"warpgroup"``: the instruction is ``.aligned``, so the guard must be
the same in every thread of a warp / of the warpgroup (the ``.aligned`` rule of PTX ISA
9.7.14.4.3-5 and 9.7.15.5.2); strict mode reports a guard that differs as
:class:`~fastmma.errors.HazardError`.  ``"any"``: the
statement acts on shared state and runs when any thread's guard holds.

* ``mov.type d, a`` (9.7.9.3, 9.7.9.4): ``.pred``, ``.b16/.b32/.b64``, ``.u16/.u32/.u64``,
  ``.s16/.s32/.s64``, ``.f32``, ``.f64``; ``a`` a register, a literal, a special register
  (``%tid.x``, ``%laneid``, ...), ``WARP_SZ`` or a variable's name (its address in its state
  space); packing ``mov.b32 d, {lo, hi}`` and unpacking ``mov.b32 {lo, hi}, a`` for bit-size
  types (the first register is the least significant part).
* ``setp.CmpOp{.BoolOp}{.ftz}.type p[|q], a, b{, {!}c}`` (9.7.6.2): integer
  comparisons ``eq ne lt le gt ge`` (signed for ``.s``), ``lo ls hi hs`` (unsigned; ``lt`` ...
  on ``.u`` types compare unsigned), ``.b`` types ``eq ne``; floating point ``.f32 .f64``
  with ``eq ne lt le gt ge`` (false on NaN), ``equ neu ltu leu gtu geu`` (true on NaN),
  ``num nan``; ``.ftz`` flushes ``.f32`` subnormal inputs to zero; ``.and .or .xor`` combine
  with ``c``; ``q`` receives the complement of the comparison, combined alike.
* integer ``add{.sat}``, ``sub{.sat}``, ``mul{.lo,.hi,.wide}``, ``mad{.lo,.hi,.wide}``,
  ``shl``, ``shr``, ``and``, ``or``, ``xor``, ``not`` (9.7.1, 9.7.8; :data:`INTEGER_OPS`):
  a loop's counter, a thread's address, a descriptor's next start address.  Each rule is
  computed exactly on Python integers and taken modulo 2^n (floating-point and ``.cc`` forms
  are not supported).
* ``bra{.uni} label`` (9.7.12.3): the next statement is the label's.  Every thread runs in
  lockstep, so a branch must be uniform: a guard ``@p`` that holds in some threads and not
  in others is an :class:`~fastmma.errors.UnsupportedInstructionError` (a divergent branch).
  A snippet that runs more than its limit of statements (``max_steps``, a loop that does not
  end) stops with :class:`~fastmma.errors.ExecutionLimitError`.
* ``ld{.global, .shared, .shared::cta}{.v2, .v4}.type d, [a]`` and ``st{...}.type [a], b``
  (9.7.9, "Data Movement and Conversion Instructions") for ``.b8-.b64 .u8-.u64 .s8-.s64
  .f32 .f64``: each thread's own address (generic where no state space is named:
  :meth:`~fastmma.ptx.machine.Machine.locate_threads`),
  naturally aligned to the access's size (else :class:`~fastmma.errors.AlignmentError`, the
  thread named) and inside its image; registers of the type's width (no widening loads), the
  elements of a vector at consecutive addresses, little-endian.  A ``st`` to the warpgroup's
  shared memory is a generic-proxy write (a later ``wgmma`` reading it needs
  ``fence.proxy.async``); two threads storing different bytes at one address are reported in
  strict mode (memory keeps one of them, the ISA does not say which) and otherwise the highest
  thread's bytes are kept.  Cache, eviction and memory-order qualifiers are not supported.
* ``fence.proxy.async{.global, .shared::cta, .shared::cluster}`` and ``membar.proxy.async``
  (9.7.13.4): :meth:`fastmma.Warpgroup.fence_proxy_async` (``.global`` orders no shared memory,
  and does nothing here).
* ``wgmma.fence``, ``wgmma.mma_async``, ``wgmma.mma_async.sp``, ``wgmma.commit_group``,
  ``wgmma.wait_group`` (9.7.15.5.2, 9.7.15.6.3, 9.7.15.7): parsed by :func:`fastmma.isa.parse`,
  executed by the machine's :class:`~fastmma.Warpgroup` (its strict mode reports the ISA's
  undefined behaviours); ``.sp``'s ``sp-meta`` is a 32-bit register.
* ``wmma.load``, ``wmma.mma``, ``wmma.store`` (9.7.14.4.3-5): parsed by
  :func:`fastmma.isa.parse`, executed per warp by :mod:`fastmma.wmma`.
* ``mma.sync`` (9.7.14.5.14): parsed the same way, executed for every active warp in one
  call of :func:`fastmma.mma_sync.mma_stack`; ``mma.sp`` / ``mma.sp::ordered_metadata``
  (9.7.14.6.3), ``d, a, b, c, e, f`` with ``e`` a 32-bit register and ``f`` an immediate, of
  :func:`fastmma.mma_sync.mma_sp_stack`.
* ``ldmatrix``, ``stmatrix`` (9.7.14.5.15-16): each lane's address, in shared memory (or a
  generic one that falls there), through :mod:`fastmma.ldmatrix`, every active warp in one
  call; in a warpgroup a stmatrix row is a generic-proxy write (``write_smem``).
* ``movmatrix`` (9.7.14.5.17): ``d, a`` 32-bit registers, through
  :func:`fastmma.ldmatrix.movmatrix`, every active warp in one call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .. import ldmatrix, mma_sync, wmma
from ..errors import (AlignmentError, HazardError, InvalidInstructionError, MemoryBoundsError, PTXSyntaxError,
                      UnsupportedInstructionError)
from ..isa import Ldmatrix, MmaSp, MmaSync, WgmmaMmaAsync, WgmmaMmaAsyncSp, WmmaLoad, WmmaMma, WmmaStore, parse
from ..layout.wmma_memory import default_stride, leading_dimension, matrix_dims
from ..formats import get_format
from .checker import CONSTANTS, Checker, located
from .syntax import Arg, Instr
from .values import STORAGE, TYPES, U32, Literal, PtxType, agrees, literal_bits

# ---------------------------------------------------------------------- operand sources


@dataclass(frozen=True)
class Source:
    """A checked source operand: ``kind`` ``"reg"`` (``name``), ``"const"`` (``bits``),
    ``"special"`` (``name``) or ``"address"`` (``name`` of a variable, its address)."""

    kind: str
    name: str | None = None
    bits: int = 0
    offset: int = 0


SINK = "_"
"""The sink symbol: a destination whose value is dropped (mov unpacking, setp)."""


def check_source(ck: Checker, arg: Arg, t: PtxType, what: str) -> Source:
    """A source operand of instruction type ``t``: register, literal, special register, variable."""
    if arg.kind == "lit":
        try:
            return Source("const", bits=literal_bits(arg.literal, t))
        except ValueError as err:
            raise ck.fail(f"{what}: {err}", arg) from None
    if arg.kind != "reg" or arg.negated:
        raise ck.fail(f"{what} must be a register or a literal, got {arg.text}", arg)
    if arg.name in CONSTANTS and not ck.known(arg.name):
        if t.kind not in "bus":
            raise ck.fail(f"{what}: {arg.name} is an integer constant; it does not agree with .{t.name}", arg)
        return Source("const", bits=literal_bits(Literal("int", CONSTANTS[arg.name], arg.name), t))
    if ck.special(arg.name) and not ck.known(arg.name):
        if not agrees(t, U32):
            raise ck.fail(f"{what}: {arg.name} is .u32, which does not agree with .{t.name}", arg)
        return Source("special", arg.name)
    var = ck.variable(arg.name)
    if var is not None:
        if t.kind not in "bus" or t.bits not in (32, 64):
            raise ck.fail(f"{what}: the address of {arg.name} is an integer; use .u64/.u32/.b64/.b32, "
                          f"not .{t.name}", arg)
        offset = arg.offset + (arg.index or 0) * max(var.type.bits // 8, 1)
        return Source("address", arg.name, offset=offset)
    rt = ck.register(arg)
    if not agrees(t, rt):
        raise ck.fail(f"{what}: register {arg.name} is {rt}, which does not agree with .{t.name} "
                      "(PTX ISA 9.4, type checking rules)", arg)
    return Source("reg", arg.name)


def read_source(m, src: Source, t: PtxType) -> np.ndarray:
    """Per-thread raw bits (``t.storage``) of a checked source operand."""
    if src.kind == "reg":
        return m.read(src.name)
    if src.kind == "const":
        return np.full(m.threads, src.bits, dtype=t.storage)
    if src.kind == "special":
        return m.special(src.name).astype(t.storage)
    address = m.variable_address(src.name, "own") + src.offset
    if not 0 <= address < 1 << t.bits:
        raise InvalidInstructionError(f"the address {address:#x} of {src.name} does not fit in .{t.name}")
    return np.full(m.threads, address, dtype=t.storage)


def check_destination(ck: Checker, arg: Arg, t: PtxType, what: str = "destination",
                      sink: bool = False) -> str | None:
    """The register name a destination operand writes (None for the sink ``_`` where allowed)."""
    if sink and arg.kind == "reg" and arg.name == SINK and not ck.known(SINK):
        return None
    if arg.kind != "reg" or arg.negated:
        raise ck.fail(f"the {what} must be a register, got {arg.text}", arg)
    if ck.special(arg.name) and not ck.known(arg.name) or arg.name in CONSTANTS and not ck.known(arg.name):
        raise ck.fail(f"{arg.name} is read-only", arg)
    rt = ck.register(arg)
    if not agrees(t, rt):
        raise ck.fail(f"the {what} {arg.name} is {rt}, which does not agree with .{t.name} "
                      "(PTX ISA 9.4, type checking rules)", arg)
    return arg.name


def _count(ck: Checker, instr: Instr, n: int, form: str) -> None:
    if len(instr.args) != n:
        raise ck.fail(f"{instr.opcode} takes {n} operands ({form}), got {len(instr.args)}", instr)


def _type_qualifier(ck: Checker, instr: Instr, allowed) -> PtxType:
    name = instr.opcode.split(".")[-1]
    if name not in allowed:
        raise ck.fail(f"{instr.opcode}: the type qualifier must be one of "
                      f"{', '.join('.' + a for a in allowed)}", instr)
    return TYPES[name]


# ---------------------------------------------------------------------- mov

MOV_TYPES = ("pred", "b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64")
UNSUPPORTED_MOV_TYPES = ("b128",)


def check_mov(ck: Checker, instr: Instr):
    parts = instr.opcode.split(".")
    if len(parts) != 2:
        raise ck.fail(f"{instr.opcode}: mov takes one type qualifier (mov.type d, a), got "
                      f"{', '.join('.' + p for p in parts[1:]) or 'none'}", instr)
    if parts[1] in UNSUPPORTED_MOV_TYPES:
        raise ck.fail(f"{instr.opcode}: .{parts[1]} registers are not supported", instr,
                      UnsupportedInstructionError)
    t = _type_qualifier(ck, instr, MOV_TYPES)
    _count(ck, instr, 2, "d, a")
    d, a = instr.args
    if d.kind == "vector" or a.kind == "vector":
        return _check_pack(ck, instr, t, d, a)
    return SimpleNamespace(type=t, dest=check_destination(ck, d, t), src=check_source(ck, a, t, "the source"))


def _check_pack(ck: Checker, instr: Instr, t: PtxType, d: Arg, a: Arg):
    if d.kind == "vector" and a.kind == "vector":
        raise ck.fail("mov packs a vector into a register or unpacks a register into a vector, "
                      "not vector to vector", a)
    if t.kind != "b":
        raise ck.fail(f"mov with a vector operand (pack/unpack) needs a bit-size type (.b16/.b32/.b64), "
                      f"got .{t.name}", instr)
    if d.kind == "vector" and all(i.name == SINK for i in d.items):
        raise ck.fail("unpacking needs at least one register that is not the sink _", d)
    vec = d if d.kind == "vector" else a
    n = len(vec.items)
    if n not in (2, 4) or t.bits % n or t.bits // n < 8:
        raise ck.fail(f"mov.{t.name} packs 2 or 4 parts of at least 8 bits, got {n}", vec)
    part = TYPES[f"b{t.bits // n}"]
    if d.kind == "vector":
        names = tuple(check_destination(ck, item, part, "part", sink=True) for item in vec.items)
        return SimpleNamespace(type=t, part=part, unpack=names, src=check_source(ck, a, t, "the source"))
    srcs = tuple(check_source(ck, item, part, "a part") for item in vec.items)
    return SimpleNamespace(type=t, part=part, pack=srcs, dest=check_destination(ck, d, t))


def run_mov(m, data, active) -> None:
    t = data.type
    if hasattr(data, "unpack"):
        whole = read_source(m, data.src, t).astype(np.uint64)
        for i, name in enumerate(data.unpack):
            if name is None:
                continue
            part = (whole >> np.uint64(i * data.part.bits)) & np.uint64((1 << data.part.bits) - 1)
            m.write(name, part.astype(data.part.storage), active)
        return
    if hasattr(data, "pack"):
        whole = np.zeros(m.threads, np.uint64)
        for i, src in enumerate(data.pack):
            whole |= read_source(m, src, data.part).astype(np.uint64) << np.uint64(i * data.part.bits)
        m.write(data.dest, whole.astype(t.storage), active)
        return
    m.write(data.dest, read_source(m, data.src, t), active)


# ---------------------------------------------------------------------- setp

INT_COMPARISONS = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal,
}
FLOAT_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
SETP_TYPES = ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64")
BOOL_OPS = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


def _comparisons(t: PtxType):
    if t.kind == "f":
        return FLOAT_COMPARISONS
    if t.kind == "b":
        return ("eq", "ne")
    if t.kind == "s":
        return ("eq", "ne", "lt", "le", "gt", "ge")
    return tuple(INT_COMPARISONS)


def check_setp(ck: Checker, instr: Instr):
    parts = instr.opcode.split(".")[1:]
    t = _type_qualifier(ck, instr, SETP_TYPES)
    middle = parts[:-1]
    cmp = middle.pop(0) if middle else None
    boolop = middle.pop(0) if middle and middle[0] in BOOL_OPS else None
    ftz = bool(middle) and middle[0] == "ftz"
    if ftz:
        middle.pop(0)
    if cmp not in _comparisons(t) or middle:
        raise ck.fail(f"{instr.opcode}: expected setp.CmpOp{{.BoolOp}}{{.ftz}}.type with CmpOp in "
                      f"{', '.join(_comparisons(t))} for .{t.name}", instr)
    if ftz and t.name != "f32":
        raise ck.fail(".ftz applies to setp.f32 only", instr)
    _count(ck, instr, 4 if boolop else 3, "p[|q], a, b, {!}c" if boolop else "p[|q], a, b")
    dests = instr.args[0].items if instr.args[0].kind == "pair" else (instr.args[0],)
    names = tuple(check_destination(ck, d, TYPES["pred"], "destination predicate", sink=len(dests) == 2)
                  for d in dests)
    if names == (None, None):
        raise ck.fail("setp writes at least one predicate: _ may replace one destination only", instr.args[0])
    a, b = (check_source(ck, x, t, name) for x, name in zip(instr.args[1:3], ("operand a", "operand b")))
    c = None
    if boolop:
        carg = instr.args[3]
        if carg.kind == "reg" and carg.negated:
            ck.register(carg, allow_negated=True)
            c = (Source("reg", carg.name), True)
        else:
            c = (check_source(ck, carg, TYPES["pred"], "operand c"), False)
    return SimpleNamespace(type=t, cmp=cmp, boolop=boolop, ftz=ftz, dests=names, a=a, b=b, c=c)


def compare(cmp: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a CmpOp b`` elementwise with PTX semantics.

    Floating point: ``eq ne lt le gt ge`` are false when either operand is NaN, their
    unordered forms ``equ neu ltu leu gtu geu`` true; ``num``: neither is NaN; ``nan``: one is.
    """
    if a.dtype.kind != "f":
        return INT_COMPARISONS[cmp](a, b)
    unordered = np.isnan(a) | np.isnan(b)
    if cmp in ("num", "nan"):
        return ~unordered if cmp == "num" else unordered
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = INT_COMPARISONS[cmp[:2]](a, b)
    return result | unordered if len(cmp) == 3 else result & ~unordered


def _setp_values(m, src: Source, t: PtxType, ftz: bool) -> np.ndarray:
    values = read_source(m, src, t).view(t.view)
    if ftz:
        tiny = np.abs(values) < np.finfo(np.float32).tiny
        values = np.where(tiny, np.copysign(np.float32(0), values), values)
    return values


def run_setp(m, data, active) -> None:
    t = data.type
    result = compare(data.cmp, _setp_values(m, data.a, t, data.ftz), _setp_values(m, data.b, t, data.ftz))
    outs = [result, ~result]
    if data.boolop:
        src, negated = data.c
        c = read_source(m, src, TYPES["pred"]).astype(bool) != negated
        outs = [BOOL_OPS[data.boolop](o, c) for o in outs]
    for name, value in zip(data.dests, outs):
        if name is not None:
            m.write(name, value.astype(np.bool_), active)


# ---------------------------------------------------------------------- integer arithmetic and logic

INTEGER_TYPES = ("u16", "u32", "u64", "s16", "s32", "s64")
BIT_TYPES = ("b16", "b32", "b64")


@dataclass(frozen=True)
class IntegerOp:
    """One integer or logic instruction of the table: its type qualifiers, the qualifiers
    allowed before the type (``None``: none), its operands, and its rule on the operands'
    values as Python integers (signed for ``.s`` types), the result taken modulo 2^n of the
    destination's width."""

    types: tuple[str, ...]
    modes: tuple[str | None, ...]
    form: str
    rule: Callable[..., int]


def _product(mode: str, n: int, a: int, b: int) -> int:
    return a * b >> n if mode == "hi" else a * b  # lo keeps the low bits, wide all 2n


INTEGER_OPS = {
    "add": IntegerOp(INTEGER_TYPES, (None, "sat"), "d, a, b", lambda mode, n, a, b: a + b),
    "sub": IntegerOp(INTEGER_TYPES, (None, "sat"), "d, a, b", lambda mode, n, a, b: a - b),
    "mul": IntegerOp(INTEGER_TYPES, ("lo", "hi", "wide"), "d, a, b", _product),
    "mad": IntegerOp(INTEGER_TYPES, ("lo", "hi", "wide"), "d, a, b, c",
                     lambda mode, n, a, b, c: _product(mode, n, a, b) + c),
    "shl": IntegerOp(BIT_TYPES, (None,), "d, a, b", lambda mode, n, a, b: a << min(b, n)),
    "shr": IntegerOp(BIT_TYPES + INTEGER_TYPES, (None,), "d, a, b", lambda mode, n, a, b: a >> b),
    "and": IntegerOp(("pred",) + BIT_TYPES, (None,), "d, a, b", lambda mode, n, a, b: a & b),
    "or": IntegerOp(("pred",) + BIT_TYPES, (None,), "d, a, b", lambda mode, n, a, b: a | b),
    "xor": IntegerOp(("pred",) + BIT_TYPES, (None,), "d, a, b", lambda mode, n, a, b: a ^ b),
    "not": IntegerOp(("pred",) + BIT_TYPES, (None,), "d, a", lambda mode, n, a: ~a),
}
"""PTX ISA 9.7.1 (integer arithmetic: add, sub, mul, mad), 9.7.8 (logic and shift: and, or,
xor, not, shl, shr).  ``.sat`` applies to ``add``/``sub`` ``.s32`` (clamped to int32);
``.wide`` to 16- and 32-bit types, whose ``d`` (and ``mad``'s ``c``) are twice as wide; the
shift amount ``b`` of ``shl``/``shr`` is ``.u32``, and a shift past the width gives 0 (or, for
``shr.s``, the sign in every bit)."""


def _wide(t: PtxType) -> PtxType:
    return TYPES[f"{t.name[0]}{2 * t.bits}"]


def check_integer(ck: Checker, instr: Instr):
    root, *parts = instr.opcode.split(".")
    op = INTEGER_OPS[root]
    if parts and (parts[-1] in TYPES and TYPES[parts[-1]].kind == "f" or parts[-1] in ("f16x2", "bf16", "bf16x2")
                  or "cc" in parts):
        raise ck.fail(f"{instr.opcode}: fastmma.ptx runs integer {root} only "
                      f"({', '.join('.' + t for t in op.types)}, no .cc)", instr, UnsupportedInstructionError)
    t = _type_qualifier(ck, instr, op.types)
    mode = parts[0] if len(parts) == 2 else None
    if len(parts) > 2 or mode not in op.modes or (mode == "sat" and t.name != "s32") or (
            mode == "wide" and t.bits == 64):
        modes = ", ".join("." + m for m in op.modes if m)
        form = (f"{root}.type" if op.modes == (None,) else f"{root}{{{modes}}}.type" if None in op.modes
                else f"{root}.mode.type with .mode one of {modes}")
        raise ck.fail(f"{instr.opcode}: expected {form}" + (", .sat with .s32 only" if "sat" in op.modes else "")
                      + (", .wide with 16- and 32-bit types" if "wide" in op.modes else ""), instr)
    names = op.form.split(", ")
    _count(ck, instr, len(names), op.form)
    wide = _wide(t) if mode == "wide" else t
    kinds = {"d": wide, "c": wide, "b": U32 if root in ("shl", "shr") else t}
    checked = [check_destination(ck, instr.args[0], wide)]
    checked += [check_source(ck, arg, kinds.get(name, t), f"operand {name}")
                for name, arg in zip(names[1:], instr.args[1:])]
    return SimpleNamespace(op=op, mode=mode, type=t, dest=checked[0], sources=tuple(checked[1:]),
                           types=tuple(kinds.get(name, t) for name in names[1:]), width=wide.bits)


def _python_ints(bits: np.ndarray, t: PtxType) -> list[int]:
    """Register bits as Python integers, signed for ``.s`` types."""
    values = [int(x) for x in bits]
    if t.kind == "s":
        values = [v - (1 << t.bits) if v >> (t.bits - 1) else v for v in values]
    return values


def run_integer(m, data, active) -> None:
    """The table's rule for each active thread, exactly, then modulo 2^n (``.sat.s32``:
    clamped to [-2^31, 2^31 - 1] first)."""
    operands = [_python_ints(read_source(m, src, t), t) for src, t in zip(data.sources, data.types)]
    n = data.type.bits
    out = np.zeros(m.threads, STORAGE[data.width])
    for i in np.flatnonzero(active):
        value = data.op.rule(data.mode, n, *(v[i] for v in operands))
        if data.mode == "sat":
            value = min(max(value, -2**31), 2**31 - 1)
        out[i] = value % (1 << data.width)
    m.write(data.dest, out, active)


# ---------------------------------------------------------------------- bra

def check_bra(ck: Checker, instr: Instr):
    if instr.opcode not in ("bra", "bra.uni"):
        raise ck.fail(f"{instr.opcode}: expected bra or bra.uni", instr)
    _count(ck, instr, 1, "label")
    return SimpleNamespace(target=ck.branch_target(instr.args[0]))


def run_bra(m, data, active) -> str:
    """The label to go to: every thread's guard must agree (the threads run in lockstep)."""
    if not active.all():
        taken = int(active.sum())
        raise UnsupportedInstructionError(
            f"a divergent branch: {taken} of {active.size} threads take it; fastmma.ptx runs every "
            "thread in lockstep, so a branch's guard must hold in all threads or in none")
    return data.target


# ---------------------------------------------------------------------- fence.proxy.async

FENCES = {
    "fence.proxy.async": "all", "fence.proxy.async.global": "global",
    "fence.proxy.async.shared::cta": "shared", "fence.proxy.async.shared::cluster": "shared",
    "membar.proxy.async": "all",
}


def check_fence(ck: Checker, instr: Instr):
    if instr.opcode not in FENCES:
        raise ck.fail(f"{instr.opcode} is not supported; fastmma.ptx executes the proxy fences "
                      f"{', '.join(FENCES)}", instr, UnsupportedInstructionError)
    _count(ck, instr, 0, "none")
    return FENCES[instr.opcode]


def run_fence(m, space, active) -> None:
    if m.warpgroup is not None and space != "global":
        m.warpgroup.fence_proxy_async()


# ---------------------------------------------------------------------- wgmma / wmma parsing


def isa_parse(ck: Checker, text: str, instr: Instr):
    """:func:`fastmma.isa.parse` of ``text``, its errors placed at the instruction."""
    try:
        return parse(text)
    except (InvalidInstructionError, UnsupportedInstructionError, PTXSyntaxError) as err:
        cls = InvalidInstructionError if isinstance(err, PTXSyntaxError) else type(err)
        raise located(cls, str(err), instr.line, instr.column) from None


def _resolve_names(ck: Checker, instr: Instr) -> None:
    """Every register an operand names is declared (errors at the operand); literals are integers."""
    for arg in instr.args:
        if arg.kind == "vector":
            for item in arg.items:
                ck.register(item)
        elif arg.kind == "reg":
            ck.register(arg, allow_negated=True)
        elif arg.kind == "address" and arg.name is not None and ck.variable(arg.name) is None:
            ck.register(Arg("reg", arg.name, arg.line, arg.column + 1, name=arg.name))
        elif arg.kind == "lit" and arg.literal.kind != "int":
            raise ck.fail(f"{instr.root} takes integer immediates, not {arg.text}", arg)
        elif arg.kind == "pair":
            raise ck.fail(f"{arg.text} is not an operand of {instr.root}", arg)


def _vector(ck: Checker, instr: Instr, index: int, n: int, what: str, *, optional: bool = False):
    if index >= len(instr.args):
        return
    arg = instr.args[index]
    if arg.kind != "vector":
        if optional:
            return
        raise ck.fail(f"{instr.opcode}: operand {what} must be a vector of {n} registers, got {arg.text}", arg)
    if len(arg.items) != n:
        raise ck.fail(f"{instr.opcode}: operand {what} is a vector of {n} registers for this shape and "
                      f"type, got {len(arg.items)} ({arg.text})", arg)


def _widths(ck: Checker, arg: Arg, bits: int, what: str, kinds: str = "busf") -> None:
    """Every register of operand ``arg`` is ``bits`` wide and of a kind in ``kinds``."""
    if arg.kind == "lit":
        return
    items = arg.items if arg.kind == "vector" else (arg,)
    for item in items:
        t = ck.register(item, allow_negated=kinds == "pred")
        if t.bits != bits or t.kind not in kinds:
            want = "a .pred register" if bits == 1 else f"{bits}-bit" + (" integer" if kinds == "bus" else "")
            raise ck.fail(f"{what}: {item.name} is {t}; it must be {want}", item)


# ---------------------------------------------------------------------- ld, st

LOAD_STORE_TYPES = ("b8", "b16", "b32", "b64", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f32", "f64")
LOAD_STORE_SPACES = ("global", "shared", "shared::cta")
VECTOR_LANES = {"v2": 2, "v4": 4}


def check_load_store(ck: Checker, instr: Instr):
    """``ld{.ss}{.vec}.type d, [a]`` / ``st{.ss}{.vec}.type [a], b``: a register (a vector of
    2 or 4 for ``.v2`` / ``.v4``) of the type's width, and an address."""
    root, *parts = instr.opcode.split(".")
    middle = parts[:-1]
    space = middle.pop(0) if middle and middle[0] in LOAD_STORE_SPACES else None
    lanes = VECTOR_LANES[middle.pop(0)] if middle and middle[0] in VECTOR_LANES else 1
    if middle:
        raise ck.fail(f"{instr.opcode}: .{middle[0]} is not supported; fastmma.ptx runs {root}{{.global, .shared, "
                      ".shared::cta}{.v2, .v4}.type (weak accesses with the default cache policy)", instr,
                      UnsupportedInstructionError)
    t = _type_qualifier(ck, instr, LOAD_STORE_TYPES)
    _count(ck, instr, 2, "d, [a]" if root == "ld" else "[a], b")
    value, address = instr.args if root == "ld" else instr.args[::-1]
    items = value.items if value.kind == "vector" else (value,)
    if len(items) != lanes or (value.kind == "vector") != (lanes > 1):
        raise ck.fail(f"{instr.opcode} {'loads' if root == 'ld' else 'stores'} "
                      f"{'a vector of ' + str(lanes) + ' registers' if lanes > 1 else 'one register'}, "
                      f"got {value.text}", value)
    if root == "ld":
        regs = tuple(check_destination(ck, item, t) for item in items)
    else:
        for item in items:
            if item.kind != "reg":
                raise ck.fail(f"the value st stores must be a register, got {item.text}", item)
            rt = ck.register(item)  # a declared register: not a special one, not a constant
            if not agrees(t, rt):
                raise ck.fail(f"the value stored: register {item.name} is {rt}, which does not agree with "
                              f".{t.name} (PTX ISA 9.4, type checking rules)", item)
        regs = tuple(Source("reg", item.name) for item in items)
    return SimpleNamespace(load=root == "ld", space=_space(space), type=t, regs=regs,
                           address=_check_address(ck, address, space))  # regs: names to load, Sources to store


def _access(m, data, active) -> tuple[np.ndarray, np.ndarray, int]:
    """Each active thread's access: whether it is in shared memory, its byte offset in that
    space's image, and the access's size; checked to be aligned to its size and inside the
    image, the first thread at fault named."""
    address = _address_values(m, data.address, data.space)
    nbytes = len(data.regs) * data.type.bits // 8
    op = "ld" if data.load else "st"
    if (bad := active & (address % np.uint64(nbytes) != 0)).any():
        t = int(np.argmax(bad))
        raise AlignmentError(f"{op}: thread {t}'s address {int(address[t]):#x} is not a multiple of the access "
                             f"size, {nbytes} bytes (PTX ISA, {op}: the address must be naturally aligned)")
    shared, offsets = m.locate_threads(address, data.space)
    for space, where in (("shared", shared), ("global", ~shared)):
        size = m.image(space).size
        if (bad := active & where & ((offsets > np.uint64(max(size - nbytes, 0))) | (size < nbytes))).any():
            t = int(np.argmax(bad))
            start = int(offsets.view(np.int64)[t])  # below the image's start: negative
            raise MemoryBoundsError(f"{op}: thread {t}'s address {int(address[t]):#x} reads or writes {space} "
                                    f"bytes [{start}, {start + nbytes}); the image holds [0, {size})")
    return shared, offsets.astype(np.int64), nbytes


def run_load(m, data, active) -> None:
    shared, offsets, nbytes = _access(m, data, active)
    raw = np.zeros((m.threads, nbytes), np.uint8)
    for space, where in (("shared", shared & active), ("global", ~shared & active)):
        if where.any():
            raw[where] = m.image(space)[offsets[where, None] + np.arange(nbytes)]
    values = raw.view(data.type.storage.newbyteorder("<"))
    for j, name in enumerate(data.regs):
        m.write(name, values[:, j].astype(data.type.storage), active)


def run_store(m, data, active) -> None:
    """Every check first, then the bytes, thread by thread; where two threads store different
    bytes at one address, strict mode reports it (which one memory keeps is not defined), and
    otherwise the highest thread's bytes are kept."""
    shared, offsets, nbytes = _access(m, data, active)
    values = np.stack([read_source(m, src, data.type) for src in data.regs], axis=1)
    raw = np.ascontiguousarray(values.astype(data.type.storage.newbyteorder("<"))).view(np.uint8)
    threads = np.flatnonzero(active)
    parts = []  # (space, its threads, their byte offsets, their bytes), every one checked before any is written
    for space, where in (("shared", shared), ("global", ~shared)):
        mine = threads[where[threads]]
        index, stored = (offsets[mine, None] + np.arange(nbytes)).ravel(), raw[mine].ravel()
        if m.strict:
            _check_one_value_a_byte(space, mine, index, stored, nbytes)
        parts.append((space, mine, index, stored))
    for space, mine, index, stored in parts:
        if space == "shared" and m.warpgroup is not None:  # generic-proxy writes, seen by the hazard rules
            for t in mine:
                m.warpgroup.write_smem(int(offsets[t]), raw[t])
        elif mine.size:
            last = index.size - 1 - np.unique(index[::-1], return_index=True)[1]  # each byte's highest thread
            m.image(space)[index[last]] = stored[last]


def _check_one_value_a_byte(space: str, threads: np.ndarray, index: np.ndarray, stored: np.ndarray,
                            nbytes: int) -> None:
    """:class:`HazardError` where two of ``threads`` store different bytes at one offset
    (``index``, ``stored``: each thread's ``nbytes`` offsets and bytes, in thread order)."""
    order = np.argsort(index, kind="stable")
    at, byte = index[order], stored[order]
    differ = (at[1:] == at[:-1]) & (byte[1:] != byte[:-1])
    if differ.any():
        k = int(np.argmax(differ))
        a, b = sorted(int(threads[order[i] // nbytes]) for i in (k, k + 1))
        raise HazardError(f"st: threads {a} and {b} store different bytes at {space} byte {int(at[k])}; "
                          "which one memory keeps is not defined")


# ---------------------------------------------------------------------- wgmma


def check_wgmma(ck: Checker, instr: Instr):
    if ck.threads != 128:
        raise ck.fail(f"{instr.opcode} runs on a warpgroup of 128 threads; this machine runs {ck.threads} "
                      "(pass threads=128)", instr, UnsupportedInstructionError)
    _resolve_names(ck, instr)
    if instr.opcode.startswith("wgmma.mma_async"):
        inst0 = isa_parse(ck, instr.opcode, instr)
        _vector(ck, instr, 0, inst0.d_regs, "d")
        _vector(ck, instr, 1, inst0.a_regs, "a", optional=True)
    inst = isa_parse(ck, instr.text, instr)
    if isinstance(inst, (WgmmaMmaAsync, WgmmaMmaAsyncSp)):
        sparse = isinstance(inst, WgmmaMmaAsyncSp)
        if not instr.args:
            raise ck.fail(f"{instr.opcode} takes operands d, a (or a-desc), b-desc, "
                          f"{'sp-meta, sp-sel, ' if sparse else ''}scale-d and its immediates", instr)
        args = instr.args
        _widths(ck, args[0], 32, "operand d")
        if inst.a_source == "reg":
            _widths(ck, args[1], 32, "operand a")
        else:
            _widths(ck, args[1], 64, "operand a-desc")
        _widths(ck, args[2], 64, "operand b-desc")
        if sparse:
            _widths(ck, args[3], 32, "operand sp-meta")
        _widths(ck, args[5 if sparse else 3], 1, "operand scale-d", "pred")
    return inst


def run_wgmma(m, inst, active) -> None:
    m.warpgroup.execute(inst)


# ---------------------------------------------------------------------- wmma


@dataclass(frozen=True)
class Fragment:
    """A checked fragment operand: its register names, 64-bit registers or not."""

    names: tuple[str, ...]
    wide: bool


_WMMA_FORMS = {WmmaLoad: "r, [p] {, stride}", WmmaStore: "[p], r {, stride}", WmmaMma: "d, a, b, c",
               MmaSync: "d, a, b, c", MmaSp: "d, a, b, c, e, f"}


def _wmma_roles(inst) -> tuple[str, ...]:
    if isinstance(inst, WmmaLoad):
        return ("frag:" + inst.matrix, "address", "stride")
    if isinstance(inst, WmmaStore):
        return ("address", "frag:d", "stride")
    if isinstance(inst, MmaSp):
        return ("frag:d", "frag:a", "frag:b", "frag:c", "metadata", "selector")
    return ("frag:d", "frag:a", "frag:b", "frag:c")


def _fragment_shape(inst, matrix: str) -> tuple[int, bool]:
    """(registers per thread, 64-bit registers) of fragment ``matrix``."""
    if isinstance(inst, (WmmaMma, MmaSync, MmaSp)):
        return inst.fragment_regs(matrix), inst.atype == "f64"
    return inst.regs, inst.type == "f64"


def check_wmma(ck: Checker, instr: Instr):
    _resolve_names(ck, instr)
    inst0 = isa_parse(ck, instr.opcode, instr)
    roles = _wmma_roles(inst0)
    for i, role in enumerate(roles):
        if role.startswith("frag:"):
            _vector(ck, instr, i, _fragment_shape(inst0, role[5:])[0], role[5:])
    inst = isa_parse(ck, instr.text, instr)
    if not instr.args:
        raise ck.fail(f"{instr.opcode} takes operands {_WMMA_FORMS[type(inst)]}", instr)
    data = SimpleNamespace(inst=inst, frags={}, address=None, stride=None, metadata=None)
    for arg, role in zip(instr.args, roles):
        if role.startswith("frag:"):
            matrix = role[5:]
            wide = _fragment_shape(inst, matrix)[1]
            _widths(ck, arg, 64 if wide else 32, f"fragment {matrix}")
            data.frags[matrix] = Fragment(tuple(i.name for i in arg.items), wide)
        elif role == "metadata":  # the ISA's parse took the selector (an immediate it checked)
            _widths(ck, arg, 32, "the metadata e", "bus")
            data.metadata = arg.name
        elif role == "selector":
            continue
        elif role == "address":
            data.address = _check_address(ck, arg, inst.state_space)
        else:
            data.stride = _check_stride(ck, arg)
    return data


def _check_address(ck: Checker, arg: Arg, space: str | None):
    """(base, offset): base a register or variable ``Source``, or None for ``[imm]``."""
    if arg.kind != "address":
        raise ck.fail(f"expected an address [p], got {arg.text}", arg)
    if arg.name is None:
        return None, arg.offset
    var = ck.variable(arg.name)
    if var is not None:
        if space is not None and _space(space) != var.space:
            raise ck.fail(f"{arg.name} is a .{var.space} variable; this instruction addresses "
                          f".{space}", arg)
        return Source("address", arg.name), arg.offset
    t = ck.register(Arg("reg", arg.name, arg.line, arg.column + 1, name=arg.name))
    if t.kind not in "bus" or t.bits not in (32, 64):
        raise ck.fail(f"the address register {arg.name} is {t}; it must be a 32- or 64-bit integer", arg)
    return Source("reg", arg.name), arg.offset


def _check_stride(ck: Checker, arg: Arg):
    if arg.kind == "lit":
        return Source("const", bits=arg.literal.value)
    _widths(ck, arg, 32, "the stride", "bus")
    return Source("reg", arg.name)


def _space(space: str | None) -> str | None:
    return None if space is None else space.split("::")[0]


def _uniform(m, values: np.ndarray, warp: int, what: str, inst) -> int:
    """The one value a warp's lanes give for ``what`` (strict mode: they must agree)."""
    lanes = values[warp * 32:(warp + 1) * 32]
    if m.strict and not (lanes == lanes[0]).all():
        lane = int(np.argmax(lanes != lanes[0]))
        raise HazardError(f"{inst.opcode}: {what} is {int(lanes[0])} in lane 0 of warp {warp} but "
                          f"{int(lanes[lane])} in lane {lane}; all lanes must give the same value "
                          "(PTX ISA 9.7.14.4.3/9.7.14.4.4: otherwise the behaviour is undefined)")
    return int(lanes[0])


def _address_values(m, address, space: str | None) -> np.ndarray:
    """Per-thread address (uint64, wrapping) of a memory operand checked by
    :func:`_check_address` (``address``), in ``space`` (None: generic)."""
    src, offset = address
    if src is None:
        base = np.zeros(m.threads, np.uint64)
    elif src.kind == "reg":
        base = m.read(src.name).astype(np.uint64)
    else:
        base = np.full(m.threads, m.variable_address(src.name, space), np.uint64)
    return base + np.uint64(offset % (1 << 64))


def _stride_values(m, data):
    if data.stride is None:
        return None
    if data.stride.kind == "const":
        return np.full(m.threads, data.stride.bits, np.int64)
    return m.read(data.stride.name).view(np.int32).astype(np.int64)


def _read_fragment(m, frag: Fragment) -> np.ndarray:
    """uint32[threads, words] from the fragment's registers (a 64-bit one as two words, low first)."""
    cols = []
    for name in frag.names:
        bits = m.read(name)
        if frag.wide:
            cols += [(bits & np.uint64(0xFFFFFFFF)).astype(np.uint32), (bits >> np.uint64(32)).astype(np.uint32)]
        else:
            cols.append(bits.astype(np.uint32))
    return np.stack(cols, axis=1)


def _write_fragment(m, frag: Fragment, words: np.ndarray, active: np.ndarray) -> None:
    for j, name in enumerate(frag.names):
        if frag.wide:
            bits = words[:, 2 * j].astype(np.uint64) | (words[:, 2 * j + 1].astype(np.uint64) << np.uint64(32))
        else:
            bits = words[:, j]
        m.write(name, bits.astype(STORAGE[64 if frag.wide else 32]), active)


def run_wmma(m, data, warps: np.ndarray) -> None:
    inst = data.inst
    active = np.repeat(warps, 32)
    if isinstance(inst, (MmaSync, MmaSp)):
        run_mma_sync(m, data, warps, active)
        return
    if isinstance(inst, WmmaMma):
        frags = {x: _read_fragment(m, data.frags[x]) for x in "abc"}
        out = np.zeros((m.threads, wmma_words(inst, "d")), np.uint32)
        for w in np.flatnonzero(warps):
            lanes = slice(32 * w, 32 * w + 32)
            out[lanes] = wmma.mma(inst, frags["a"][lanes], frags["b"][lanes], frags["c"][lanes])
        _write_fragment(m, data.frags["d"], out, active)
        return
    addresses, strides = _address_values(m, data.address, _space(data.inst.state_space)), _stride_values(m, data)
    if isinstance(inst, WmmaLoad):
        frag = data.frags[inst.matrix]
        out = np.zeros((m.threads, len(frag.names) * (2 if frag.wide else 1)), np.uint32)
        for w in np.flatnonzero(warps):
            space, offset, stride = _memory_operand(m, data, addresses, strides, w)
            out[32 * w:32 * w + 32] = wmma.load(inst, m.image(space), offset, stride)
        _write_fragment(m, frag, out, active)
        return
    words = _read_fragment(m, data.frags["d"])
    for w in np.flatnonzero(warps):
        space, offset, stride = _memory_operand(m, data, addresses, strides, w)
        if space == "shared" and m.warpgroup is not None:
            _store_shared(m, inst, offset, words[32 * w:32 * w + 32], stride)
        else:
            wmma.store(inst, m.image(space), offset, words[32 * w:32 * w + 32], stride)


def run_mma_sync(m, data, warps: np.ndarray, active: np.ndarray) -> None:
    """``mma.sync`` (or ``mma.sp``, with its metadata register) for every warp whose lanes are
    active, in one stack."""
    frags = {x: _read_fragment(m, data.frags[x]).reshape(-1, 32, wmma_words(data.inst, x)) for x in "abc"}
    out = np.zeros((m.threads // 32, 32, wmma_words(data.inst, "d")), np.uint32)
    live = np.flatnonzero(warps)
    if isinstance(data.inst, MmaSp):
        e = m.read(data.metadata).astype(np.uint32).reshape(-1, 32, 1)
        out[live] = mma_sync.mma_sp_stack(data.inst, *(frags[x][live] for x in "abc"), e[live])
    else:
        out[live] = mma_sync.mma_stack(data.inst, *(frags[x][live] for x in "abc"))
    _write_fragment(m, data.frags["d"], out.reshape(m.threads, -1), active)


def wmma_words(inst: WmmaMma, matrix: str) -> int:
    regs, wide = _fragment_shape(inst, matrix)
    return regs * (2 if wide else 1)


def _memory_operand(m, data, addresses, strides, warp: int):
    """(state space, byte offset in its image, stride) of warp ``warp``'s memory operand."""
    address = _uniform(m, addresses, warp, "the address", data.inst)
    stride = None if strides is None else _uniform(m, strides, warp, "the stride", data.inst)
    space, offset = m.locate(address, _space(data.inst.state_space))
    return space, offset, stride


def _store_shared(m, inst: WmmaStore, offset: int, words: np.ndarray, stride) -> None:
    """A wmma.store to the warpgroup's shared memory, line by line through ``write_smem``.

    The store is first done on a copy (every check, nothing changed on failure), then its
    lines are written as generic-proxy writes, so that the warpgroup's hazard and proxy-fence
    rules see them.
    """
    scratch = m.warpgroup.smem.copy()
    wmma.store(inst, scratch, offset, words, stride)
    shape = str(inst.shape)
    rows, cols = matrix_dims("d", shape)
    lead = leading_dimension(rows, cols, inst.layout)
    ld = default_stride("d", shape, inst.layout) if stride is None else stride
    nbytes = get_format(inst.type).bits // 8
    for line in range(cols if inst.layout == "col" else rows):
        start = offset + line * ld * nbytes
        m.warpgroup.write_smem(start, scratch[start:start + lead * nbytes])


# ---------------------------------------------------------------------- ldmatrix, stmatrix


def check_matrix_move(ck: Checker, instr: Instr):
    """``ldmatrix ... r, [p]`` / ``stmatrix ... [p], r``: ``r`` a vector of ``.num`` 32-bit
    registers, ``p`` an address in shared memory (or generic)."""
    _resolve_names(ck, instr)
    inst0 = isa_parse(ck, instr.opcode, instr)
    load = isinstance(inst0, Ldmatrix)
    _vector(ck, instr, 0 if load else 1, inst0.num, "r")
    inst = isa_parse(ck, instr.text, instr)
    if not instr.args:
        raise ck.fail(f"{instr.opcode} takes operands {'r, [p]' if load else '[p], r'}", instr)
    vec, address = instr.args if load else instr.args[::-1]
    _widths(ck, vec, 32, "r")
    return SimpleNamespace(inst=inst, load=load, regs=Fragment(tuple(i.name for i in vec.items), False),
                           address=_check_address(ck, address, inst.state_space))


def run_matrix_move(m, data, warps: np.ndarray) -> None:
    inst, live = data.inst, np.flatnonzero(warps)
    space = _space(inst.state_space)
    address = _address_values(m, data.address, space)
    shared, offsets = m.locate_threads(address, space)
    used = np.zeros((m.threads // 32, 32), bool)
    used[live, :8 * inst.num] = True
    if (outside := used.ravel() & ~shared).any():
        t = int(np.argmax(outside))
        raise MemoryBoundsError(f"{inst.opcode}: thread {t}'s address {int(address[t]):#x} is not in shared memory "
                                "(PTX ISA: a generic address must fall in the shared window)")
    lanes = offsets.view(np.int64).reshape(-1, 32)[live]
    active = np.repeat(warps, 32)
    if data.load:
        out = np.zeros((m.threads // 32, 32, inst.num), np.uint32)
        out[live] = ldmatrix.ldmatrix(inst, m.image("shared"), lanes)
        _write_fragment(m, data.regs, out.reshape(m.threads, -1), active)
        return
    words = _read_fragment(m, data.regs).reshape(-1, 32, inst.num)[live]
    if m.warpgroup is None:
        ldmatrix.stmatrix(inst, m.image("shared"), lanes, words)
        return
    scratch = m.warpgroup.smem.copy()  # every check on the copy first; then the rows, in order, as generic writes
    ldmatrix.stmatrix(inst, scratch, lanes, words)
    for start in lanes[:, :8 * inst.num].ravel():
        m.warpgroup.write_smem(int(start), scratch[start:start + 16])


def check_movmatrix(ck: Checker, instr: Instr):
    """``movmatrix.sync.aligned.m8n8.trans.b16 d, a``: ``d`` and ``a`` 32-bit registers."""
    _resolve_names(ck, instr)
    inst = isa_parse(ck, instr.text, instr)
    if len(instr.args) != 2:
        raise ck.fail(f"{instr.opcode} takes operands d, a", instr)
    for arg, what in zip(instr.args, "da"):
        if arg.kind != "reg" or arg.negated:
            raise ck.fail(f"{instr.opcode}: operand {what} must be a 32-bit register, got {arg.text}", arg)
        _widths(ck, arg, 32, what)
    return SimpleNamespace(inst=inst, d=Fragment((instr.args[0].name,), False),
                           a=Fragment((instr.args[1].name,), False))


def run_movmatrix(m, data, warps: np.ndarray) -> None:
    """``movmatrix`` for every warp whose lanes are active, in one stack."""
    live = np.flatnonzero(warps)
    a = _read_fragment(m, data.a).reshape(-1, 32, 1)
    out = np.zeros((m.threads // 32, 32, 1), np.uint32)
    out[live] = ldmatrix.movmatrix(data.inst, a[live])
    _write_fragment(m, data.d, out.reshape(m.threads, 1), np.repeat(warps, 32))


# ---------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Handler:
    check: object
    run: object
    scope: str  # how a guard applies: "thread", "warp", "warpgroup" or "any"


HANDLERS = {
    "mov": Handler(check_mov, run_mov, "thread"),
    "setp": Handler(check_setp, run_setp, "thread"),
    **{root: Handler(check_integer, run_integer, "thread") for root in INTEGER_OPS},
    "bra": Handler(check_bra, run_bra, "thread"),
    "ld": Handler(check_load_store, run_load, "thread"),
    "st": Handler(check_load_store, run_store, "thread"),
    "fence": Handler(check_fence, run_fence, "any"),
    "membar": Handler(check_fence, run_fence, "any"),
    "wgmma": Handler(check_wgmma, run_wgmma, "warpgroup"),
    "wmma": Handler(check_wmma, run_wmma, "warp"),
    "mma": Handler(check_wmma, run_wmma, "warp"),
    "ldmatrix": Handler(check_matrix_move, run_matrix_move, "warp"),
    "stmatrix": Handler(check_matrix_move, run_matrix_move, "warp"),
    "movmatrix": Handler(check_movmatrix, run_movmatrix, "warp"),
}
"""Opcode root -> handler; every root in :data:`fastmma.ptx.syntax.SUPPORTED_ROOTS`."""
