"""Statements -> a checked program: every name resolved, every operand's type agreed.

What an assembler checks before anything runs, in source order, stopping at the first error:

* **Declarations and scopes** (PTX ISA 5.4 "Variables", 4.3 "Statements"): a register or
  variable is used after its declaration, inside the ``{ }`` block that declares it (or an
  enclosed one).  Declaring a name twice in one scope is a
  :class:`~fastmma.errors.PTXSyntaxError`; so is using an undeclared one.  Registers the caller
  passes in ``registers=`` without declaring them are visible everywhere.  One simplification,
  reported as :class:`~fastmma.errors.UnsupportedInstructionError`: a name has one storage, so
  an inner block may not shadow a visible name, and a name declared again in a later block
  must keep its width.
* **Labels**: each names the statement after it, once per snippet (a second one of the same
  name is a :class:`~fastmma.errors.PTXSyntaxError`); every ``bra`` target must be one of
  them, which is checked once the whole snippet is read (labels may come after the branch).
* **Operands**: each handler (:mod:`fastmma.ptx.statements`) checks its operands' kinds and
  types; a misfit is an :class:`~fastmma.errors.InvalidInstructionError` carrying ``line`` and
  ``column`` (of the operand where one is at fault).

The result is a :class:`Program`: the steps to execute, the registers and variables to create.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import FastmmaError, InvalidInstructionError, PTXSyntaxError, UnsupportedInstructionError
from .syntax import MAX_ARRAY_BYTES, Arg, Block, DeclName, Instr, Label, Parsed, RegDecl, VarDecl
from .values import U32, PtxType, TYPES

SPECIAL_REGISTERS = ("%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%laneid",
                     "%warpid", "%nwarpid")
"""Special registers a ``mov`` may read (PTX ISA 10), all ``.u32``; the CTA is the machine's threads."""

CONSTANTS = {"WARP_SZ": 32}
"""Predefined constants (PTX ISA 4.6)."""

MAX_REGISTERS = 1 << 16
"""The most registers one program may declare."""


def located(cls, message: str, line: int, column: int) -> FastmmaError:
    """An exception of class ``cls`` whose message starts with, and that carries, line and column."""
    if issubclass(cls, PTXSyntaxError):
        return cls(message, line, column)
    err = cls(f"line {line}, column {column}: {message}")
    err.line, err.column = line, column
    return err


def relocate(err: FastmmaError, line: int, column: int) -> FastmmaError:
    """``err`` with the position of the statement that raised it (unless it has one)."""
    if getattr(err, "line", None) is not None:
        return err
    return located(type(err), str(err), line, column)


@dataclass(frozen=True)
class Variable:
    """A ``.global`` / ``.shared`` variable as declared: ``size`` and ``align`` in bytes."""

    name: str
    space: str
    type: PtxType
    size: int
    align: int
    line: int
    column: int


@dataclass
class Step:
    """One instruction to execute: its statement, handler and checked operands (``data``)."""

    instr: Instr
    handler: Any
    data: Any


@dataclass
class Program:
    steps: list[Step] = field(default_factory=list)
    registers: dict[str, PtxType] = field(default_factory=dict)   # every declared register
    variables: list[Variable] = field(default_factory=list)       # in declaration order
    labels: dict[str, int] = field(default_factory=dict)          # label -> the index of its step


@dataclass
class _Entry:
    kind: str  # "reg", "var" or "external"
    type: PtxType
    line: int = 0
    column: int = 0
    variable: Variable | None = None


class Checker:
    """The assembler's view: scopes, and the helpers handlers use to check operands."""

    def __init__(self, handlers: dict, external: dict[str, PtxType], variables: dict[str, Variable],
                 threads: int):
        self.handlers = handlers
        self.threads = threads
        outer = {name: _Entry("external", t) for name, t in external.items()}
        for name, var in variables.items():
            outer[name] = _Entry("var", var.type, var.line, var.column, var)
        self.scopes: list[dict[str, _Entry]] = [outer, {}]
        self.opened: list[Block] = []
        self.storage: dict[str, _Entry] = dict(outer)
        self.program = Program()
        self.label_at: dict[str, Label] = {}
        self.targets: list[Arg] = []  # bra operands, resolved once every label is known

    # ------------------------------------------------------------------ errors

    def fail(self, message: str, at, cls=InvalidInstructionError) -> FastmmaError:
        return located(cls, message, at.line, at.column)

    # ------------------------------------------------------------------ statements

    def check(self, parsed: Parsed) -> Program:
        for stmt in parsed.statements:
            self.statement(stmt)
        if parsed.error is not None:
            raise parsed.error
        if self.opened:
            raise self.fail("'{' is never closed", self.opened[-1], PTXSyntaxError)
        for arg in self.targets:
            if arg.name not in self.program.labels:
                raise self.fail(f"the branch target {arg.name} is not a label of this snippet", arg,
                                PTXSyntaxError)
        return self.program

    def statement(self, stmt) -> None:
        if isinstance(stmt, Block):
            self.block(stmt)
        elif isinstance(stmt, RegDecl):
            for decl in stmt.names:
                for name in decl.names():
                    self.declare(name, _Entry("reg", TYPES[stmt.type_name], decl.line, decl.column), decl)
        elif isinstance(stmt, VarDecl):
            for decl in stmt.names:
                self.declare_variable(stmt, decl)
        elif isinstance(stmt, Label):
            self.label(stmt)
        else:
            self.instruction(stmt)

    def label(self, stmt: Label) -> None:
        first = self.label_at.get(stmt.name)
        if first is not None:
            raise self.fail(f"the label {stmt.name} is already declared (line {first.line}, column "
                            f"{first.column}): a label names one statement", stmt, PTXSyntaxError)
        self.label_at[stmt.name] = stmt
        self.program.labels[stmt.name] = len(self.program.steps)

    def branch_target(self, arg: Arg) -> str:
        """The label a ``bra`` operand names (checked to exist at the end of :meth:`check`)."""
        if arg.kind != "reg" or arg.negated or arg.offset or arg.index is not None:
            raise self.fail(f"a branch target is a label, got {arg.text}", arg)
        self.targets.append(arg)
        return arg.name

    def block(self, stmt: Block) -> None:
        if stmt.opening:
            self.scopes.append({})
            self.opened.append(stmt)
        elif not self.opened:
            raise self.fail("'}' closes no block", stmt, PTXSyntaxError)
        else:
            self.scopes.pop()
            self.opened.pop()

    def declare(self, name: str, entry: _Entry, at: DeclName) -> None:
        scope = self.scopes[-1]
        if name in scope:
            first = scope[name]
            raise self.fail(f"{name} is already declared in this scope (line {first.line}, column "
                            f"{first.column}): a name is declared once per scope", at, PTXSyntaxError)
        self.check_storage(name, entry, at)
        if entry.kind == "reg":
            if len(self.program.registers) >= MAX_REGISTERS and name not in self.program.registers:
                raise self.fail(f"more than {MAX_REGISTERS} registers declared", at, UnsupportedInstructionError)
            self.program.registers[name] = entry.type
        scope[name] = entry
        self.storage.setdefault(name, entry)

    def check_storage(self, name: str, entry: _Entry, at: DeclName) -> None:
        for depth, outer in enumerate(self.scopes[:-1]):
            if name in outer and not (depth == 0 and len(self.scopes) == 2 and outer[name].kind == "external"):
                raise self.fail(f"{name} shadows a declaration visible here ({_describe(outer[name])}); "
                                "fastmma.ptx gives each name one storage and does not support shadowing",
                                at, UnsupportedInstructionError)
        old = self.storage.get(name)
        if old is None:
            return
        if old.kind == "var" or entry.kind == "var":
            raise self.fail(f"{name} is declared again ({_describe(old)}); variables are declared once",
                            at, UnsupportedInstructionError)
        if old.type.bits != entry.type.bits:
            raise self.fail(f"{name} is declared again as {entry.type} but was {_describe(old)}; "
                            "fastmma.ptx gives each register name one storage of one width",
                            at, UnsupportedInstructionError)

    def declare_variable(self, stmt: VarDecl, decl: DeclName) -> None:
        t = TYPES[stmt.type_name]
        size = max(t.bits // 8, 1)
        for n in decl.dims:
            size *= n
        if size > MAX_ARRAY_BYTES:
            raise self.fail(f"{decl.name} is {size} bytes; fastmma.ptx variables hold at most "
                            f"{MAX_ARRAY_BYTES}", decl, UnsupportedInstructionError)
        var = Variable(decl.name, stmt.space, t, size, stmt.align or max(t.bits // 8, 1), decl.line, decl.column)
        self.declare(decl.name, _Entry("var", t, decl.line, decl.column, var), decl)
        self.program.variables.append(var)

    def instruction(self, instr: Instr) -> None:
        handler = self.handlers[instr.root]
        if instr.guard is not None:
            t = self.register(instr.guard, allow_negated=True)
            if t.kind != "pred":
                raise self.fail(f"the guard @{instr.guard.text} must be a .pred register, "
                                f"{instr.guard.name} is {t}", instr.guard)
        data = handler.check(self, instr)
        self.program.steps.append(Step(instr, handler, data))

    # ------------------------------------------------------------------ operand helpers

    def lookup(self, name: str) -> _Entry | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def register(self, arg: Arg, *, allow_negated: bool = False) -> PtxType:
        """The type of the register ``arg`` names (a ``"reg"`` operand or vector item)."""
        if arg.kind != "reg":
            raise self.fail(f"expected a register, got {arg.text}", arg)
        if arg.negated and not allow_negated:
            raise self.fail(f"'!' negates predicates in guards, scale-d and setp's c operand only: "
                            f"{arg.text}", arg)
        if arg.offset or arg.index is not None:
            raise self.fail(f"{arg.text}: an offset or index applies to a variable's address, as the "
                            "source of mov", arg)
        entry = self.lookup(arg.name)
        if entry is None:
            if arg.name in SPECIAL_REGISTERS or arg.name in CONSTANTS:
                raise self.fail(f"{arg.name} cannot be used here (only as the source of mov)", arg)
            raise self.fail(f"register {arg.name} is not declared (.reg) and was not given in registers=",
                            arg, PTXSyntaxError)
        if entry.kind == "var":
            raise self.fail(f"{arg.name} is a .{entry.variable.space} variable, not a register", arg)
        if arg.negated and entry.type.kind != "pred":
            raise self.fail(f"'!' applies to predicates; {arg.name} is {entry.type}", arg)
        return entry.type

    def variable(self, name: str) -> Variable | None:
        entry = self.lookup(name)
        return entry.variable if entry is not None and entry.kind == "var" else None

    def known(self, name: str) -> bool:
        return self.lookup(name) is not None

    def special(self, name: str) -> PtxType | None:
        return U32 if name in SPECIAL_REGISTERS else None


def _describe(entry: _Entry) -> str:
    if entry.kind == "external":
        return f"a register of the machine or of registers=, {entry.type}"
    what = f"a .{entry.variable.space} variable" if entry.kind == "var" else f"a {entry.type} register"
    return f"{what} declared at line {entry.line}, column {entry.column}"
