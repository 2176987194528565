"""Tokens -> statements: declarations, instructions with their operands, and ``{ }`` blocks.

The grammar (PTX ISA 4.3 "Statements", 5.4 "Variables", 6.2 "Operand types"), as far as
fastmma.ptx executes it::

    statement   := '{' | '}' | label ':' | reg-decl | var-decl | [guard] instruction
    reg-decl    := '.reg' type name ['<' count '>'] {',' name ['<' count '>']} ';'
    var-decl    := ('.global' | '.shared') ['.align' n] type name {'[' n ']'} {',' ...} ';'
    guard       := '@' ['!'] predicate
    instruction := opcode [operand {',' operand}] ';'
    operand     := register | ['!'] predicate | ['-'] literal | '{' register {',' register} '}'
                 | '[' (name [('+' | '-') integer] | integer) ']' | predicate '|' predicate

``name<count>`` declares ``name0`` ... ``name{count-1}`` (5.4.1 "Parameterized variable
names").  A label (4.3: an identifier and ``:``) names the statement after it, the target of
``bra``.  Other directives (``.entry``, ``.func``, ``.version``, ``.local``, ...) and
instructions other than ``mov``, ``setp``, the integer ``add``, ``sub``, ``mul``, ``mad``, ``shl``,
``shr``, ``and``, ``or``, ``xor``, ``not``, ``bra``, ``ld``, ``st``, ``fence``/``membar``,
``wgmma.*`` and ``wmma.*`` raise :class:`~fastmma.errors.UnsupportedInstructionError`; text
that is not PTX raises
:class:`~fastmma.errors.PTXSyntaxError`.  Both carry the line and column.

Parsing stops at the first error; :func:`parse_program` returns the statements before it
and the error, so that the checker can report an earlier statement's error first: errors come
in source order, as an assembler reports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import PTXSyntaxError, UnsupportedInstructionError
from .lexer import Token, tokenize
from .values import KNOWN_UNSUPPORTED_TYPES, Literal, parse_literal, ptx_type

SUPPORTED_ROOTS = ("mov", "setp", "add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "bra", "ld",
                   "st", "fence", "membar", "wgmma", "wmma", "mma", "ldmatrix", "stmatrix",
                   "movmatrix")
"""Opcodes (their part before the first dot) that fastmma.ptx executes, in some forms."""

MAX_RANGE = 1 << 16
"""The largest ``<count>`` of a parameterized register declaration."""

MAX_ARRAY_BYTES = 1 << 30
"""The largest ``.global`` / ``.shared`` variable."""

VARIABLE_SPACES = {".global": "global", ".shared": "shared", ".shared::cta": "shared"}

_KNOWN_DIRECTIVES = frozenset((
    ".address_size", ".alias", ".align", ".branchtargets", ".callprototype", ".calltargets",
    ".common", ".const", ".entry", ".explicitcluster", ".extern", ".file", ".func", ".loc",
    ".local", ".maxclusterrank", ".maxnctapersm", ".maxnreg", ".maxntid", ".minnctapersm",
    ".noreturn", ".param", ".pragma", ".reqnctapercluster", ".reqntid", ".section", ".sreg",
    ".target", ".tex", ".version", ".visible", ".weak", ".abi_preserve", ".abi_preserve_control",
    ".shared::cluster",
))


@dataclass(frozen=True)
class Arg:
    """One operand as written, with its position.

    ``kind``: ``"reg"`` (a register, predicate, special register or variable name; maybe
    ``negated`` with ``!``), ``"lit"`` (a numeric ``literal``), ``"vector"`` (``items``, each
    a ``"reg"``), ``"address"`` (``name`` or None, and ``offset``) or ``"pair"`` (``p|q``:
    ``items``).  A ``"reg"`` operand may carry ``offset`` (``A+20``) or ``index`` (``A[5]``):
    a variable's address, for ``mov``.  ``text`` is the operand re-spelled canonically.
    """

    kind: str
    text: str
    line: int
    column: int
    name: str | None = None
    literal: Literal | None = None
    negated: bool = False
    items: tuple["Arg", ...] = ()
    offset: int = 0
    index: int | None = None


@dataclass(frozen=True)
class DeclName:
    """One declared name: ``count`` for ``name<count>``, ``dims`` for ``name[n][m]``."""

    name: str
    line: int
    column: int
    count: int | None = None
    dims: tuple[int, ...] = ()

    def names(self) -> list[str]:
        """The register names this declaration makes: ``name`` alone, or ``name0`` .. ``name<count-1>``
        for a ``name<count>`` range."""
        if self.count is None:
            return [self.name]
        return [f"{self.name}{i}" for i in range(self.count)]


@dataclass(frozen=True)
class RegDecl:
    """A ``.reg`` declaration: its type, its names, and where it stands in the source."""
    type_name: str
    names: tuple[DeclName, ...]
    line: int
    column: int


@dataclass(frozen=True)
class VarDecl:
    """A ``.shared`` / ``.global`` variable declaration: its space, alignment, type, names and
    place in the source."""
    space: str
    align: int | None
    type_name: str
    names: tuple[DeclName, ...]
    line: int
    column: int


@dataclass(frozen=True)
class Block:
    """A ``{`` (``opening``) or ``}`` of a block, and where it stands in the source."""
    opening: bool
    line: int
    column: int


@dataclass(frozen=True)
class Label:
    """``name:``, the position of the statement that follows (PTX ISA 4.3)."""

    name: str
    line: int
    column: int


@dataclass(frozen=True)
class Instr:
    """An instruction: ``opcode`` with its qualifiers, the ``guard`` predicate and ``args``."""

    opcode: str
    args: tuple[Arg, ...]
    line: int
    column: int
    guard: Arg | None = None

    @property
    def root(self) -> str:
        """The opcode's first word (``wgmma`` of ``wgmma.mma_async``)."""
        return self.opcode.split(".")[0]

    @property
    def text(self) -> str:
        """The statement re-spelled on one line (without the guard)."""
        return self.opcode + (" " + ", ".join(a.text for a in self.args) if self.args else "") + ";"


@dataclass
class Parsed:
    """The statements before the first error, and that error (or None)."""

    statements: list = field(default_factory=list)
    error: Exception | None = None


def _syntax(message: str, tok: Token) -> PTXSyntaxError:
    return PTXSyntaxError(message, tok.line, tok.column)


def _unsupported(message: str, tok: Token) -> UnsupportedInstructionError:
    err = UnsupportedInstructionError(f"line {tok.line}, column {tok.column}: {message}")
    err.line, err.column = tok.line, tok.column
    return err


class _Parser:
    def __init__(self, tokens: list[Token]):
        self.tokens = tokens
        self.i = 0

    # ------------------------------------------------------------------ token helpers

    def peek(self, k: int = 0) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def take(self) -> Token:
        tok = self.peek()
        self.i = min(self.i + 1, len(self.tokens) - 1)
        return tok

    def at(self, text: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind == "punct" and tok.text == text

    def expect(self, text: str, where: str) -> Token:
        if not self.at(text):
            raise _syntax(f"expected {text!r} {where}, found {self.peek()}", self.peek())
        return self.take()

    def expect_int(self, where: str, minimum: int = 0) -> int:
        tok = self.take()
        if tok.kind != "int":
            raise _syntax(f"expected an integer {where}, found {tok}", tok)
        value = _literal(tok).value
        if value < minimum:
            raise _syntax(f"expected an integer >= {minimum} {where}, found {tok.text}", tok)
        return value

    def expect_name(self, where: str) -> Token:
        tok = self.take()
        if tok.kind != "word" or tok.text.startswith("."):
            raise _syntax(f"expected a name {where}, found {tok}", tok)
        return tok

    # ------------------------------------------------------------------ statements

    def statement(self):
        tok = self.peek()
        if tok.kind == "punct" and tok.text in "{}":
            self.take()
            return Block(tok.text == "{", tok.line, tok.column)
        if tok.kind == "punct" and tok.text == "@":
            return self.instruction(self.guard())
        if tok.kind == "word" and tok.text.startswith("."):
            return self.directive()
        if tok.kind == "word":
            if self.at(":", 1):
                if "." in tok.text or "::" in tok.text:
                    raise _syntax(f"a label is an identifier, got {tok.text}", tok)
                self.take()
                self.take()
                return Label(tok.text, tok.line, tok.column)
            return self.instruction(None)
        raise _syntax(f"expected a statement (instruction, declaration, '{{' or '}}'), found {tok}", tok)

    def guard(self) -> Arg:
        self.take()
        negated = self.at("!")
        if negated:
            self.take()
        tok = self.expect_name("after '@' (a guard predicate)")
        if self.peek().kind != "word" or self.peek().text.startswith("."):
            raise _syntax(f"expected an instruction after the guard @{'!' if negated else ''}{tok.text}, "
                          f"found {self.peek()}", self.peek())
        return Arg("reg", ("!" if negated else "") + tok.text, tok.line, tok.column, name=tok.text,
                   negated=negated)

    def directive(self):
        tok = self.peek()
        if tok.text == ".reg":
            return self.reg_decl()
        if tok.text in VARIABLE_SPACES:
            return self.var_decl()
        if tok.text in _KNOWN_DIRECTIVES:
            raise _unsupported(f"the directive {tok.text} is not supported: fastmma.ptx runs "
                               "snippets (.reg, .global and .shared declarations, labels and "
                               "instructions)", tok)
        raise _syntax(f"unknown directive {tok.text}", tok)

    def decl_type(self, what: str) -> Token:
        tok = self.take()
        name = tok.text[1:] if tok.kind == "word" and tok.text.startswith(".") else None
        if name in ("v2", "v4", "v8"):
            raise _unsupported(f"vector {what} ({tok.text}) are not supported", tok)
        if name in KNOWN_UNSUPPORTED_TYPES:
            raise _unsupported(f"{what} of type {tok.text} are not supported", tok)
        if name is None or ptx_type(name) is None:
            raise _syntax(f"expected the type of the {what} (.b32, .f32, .pred, ...), found {tok}", tok)
        return tok

    def reg_decl(self) -> RegDecl:
        start = self.take()
        type_tok = self.decl_type("registers")
        names = [self.reg_name()]
        while self.at(","):
            self.take()
            names.append(self.reg_name())
        self.end_of_declaration("registers")
        return RegDecl(type_tok.text[1:], tuple(names), start.line, start.column)

    def reg_name(self) -> DeclName:
        tok = self.expect_name("in the .reg declaration")
        count = None
        if self.at("<"):
            self.take()
            count = self.expect_int("register count in <...>", 1)
            if count > MAX_RANGE:
                raise _unsupported(f"{tok.text}<{count}> declares more than {MAX_RANGE} registers", tok)
            self.expect(">", "closing the register count")
        if self.at("["):
            raise _unsupported(f"register arrays ({tok.text}[...]) are not supported", self.peek())
        return DeclName(tok.text, tok.line, tok.column, count=count)

    def end_of_declaration(self, what: str) -> None:
        if self.at("="):
            raise _unsupported(f"initializers of {what} are not supported", self.peek())
        if not self.at(";"):
            raise _syntax(f"expected ',' or ';' in the declaration of {what}, found {self.peek()}",
                          self.peek())
        self.take()

    def var_decl(self) -> VarDecl:
        start = self.take()
        align = None
        if self.peek().text == ".align":
            self.take()
            align_tok = self.peek()
            align = self.expect_int("after .align", 1)
            if align & (align - 1):
                raise _syntax(f".align takes a power of two, got {align}", align_tok)
        type_tok = self.decl_type("variables")
        if type_tok.text == ".pred":
            raise _syntax("variables in memory cannot be of type .pred", type_tok)
        names = [self.var_name()]
        while self.at(","):
            self.take()
            names.append(self.var_name())
        self.end_of_declaration("variables")
        return VarDecl(VARIABLE_SPACES[start.text], align, type_tok.text[1:], tuple(names),
                       start.line, start.column)

    def var_name(self) -> DeclName:
        tok = self.expect_name("in the variable declaration")
        dims = []
        while self.at("["):
            self.take()
            if self.at("]"):
                raise _unsupported("arrays of unspecified size (extern arrays) are not supported", self.peek())
            dims.append(self.expect_int("array size", 1))
            self.expect("]", "closing the array size")
        return DeclName(tok.text, tok.line, tok.column, dims=tuple(dims))

    # ------------------------------------------------------------------ instructions

    def instruction(self, guard: Arg | None) -> Instr:
        op = self.take()
        if op.text.split(".")[0] not in SUPPORTED_ROOTS:
            raise _unsupported(
                f"{op.text.split('.')[0]} ({op.text}) is not supported; fastmma.ptx executes mov, "
                "setp, integer add/sub/mul/mad/shl/shr/and/or/xor/not, bra, ld, st, fence.proxy.async, "
                "wgmma.fence/mma_async/commit_group/wait_group, "
                "wmma.load/mma/store, mma.sync, mma.sp, ldmatrix, stmatrix and movmatrix", op)
        args = []
        if not self.at(";"):
            args.append(self.operand())
            while self.at(","):
                self.take()
                args.append(self.operand())
        if not self.at(";"):
            raise _syntax(f"expected ',' or ';' after an operand of {op.text}, found {self.peek()}", self.peek())
        self.take()
        return Instr(op.text, tuple(args), op.line, op.column, guard)

    def operand(self) -> Arg:
        tok = self.peek()
        if self.at("{"):
            return self.vector()
        if self.at("["):
            return self.address()
        if self.at("!"):
            self.take()
            name = self.expect_name("after '!'")
            return Arg("reg", "!" + name.text, tok.line, tok.column, name=name.text, negated=True)
        if self.at("-") or tok.kind in ("int", "float"):
            return self.number()
        if tok.kind == "word" and not tok.text.startswith("."):
            self.take()
            if self.at("|"):
                self.take()
                other = self.expect_name("after '|'")
                items = (Arg("reg", tok.text, tok.line, tok.column, name=tok.text),
                         Arg("reg", other.text, other.line, other.column, name=other.text))
                return Arg("pair", f"{tok.text}|{other.text}", tok.line, tok.column, items=items)
            return self.variable_offset(tok)
        raise _syntax(f"expected an operand, found {tok}", tok)

    def variable_offset(self, tok: Token) -> Arg:
        """``name``, or ``name+imm`` / ``name-imm`` / ``name[imm]`` (a variable's address plus)."""
        if (self.at("+") or self.at("-")) and self.peek(1).kind == "int":
            sign = -1 if self.take().text == "-" else 1
            offset = sign * _literal(self.take()).value
            return Arg("reg", f"{tok.text}{offset:+d}", tok.line, tok.column, name=tok.text, offset=offset)
        if self.at("["):
            self.take()
            index = self.expect_int("as the element index")
            self.expect("]", "closing the element index")
            return Arg("reg", f"{tok.text}[{index}]", tok.line, tok.column, name=tok.text, index=index)
        return Arg("reg", tok.text, tok.line, tok.column, name=tok.text)

    def number(self) -> Arg:
        first = self.peek()
        negative = self.at("-")
        if negative:
            self.take()
        tok = self.take()
        if tok.kind not in ("int", "float"):
            raise _syntax(f"expected a number after '-', found {tok}", tok)
        lit = _literal(tok, negative)
        return Arg("lit", lit.text, first.line, first.column, literal=lit)

    def vector(self) -> Arg:
        start = self.take()
        items = [self.vector_item()]
        while self.at(","):
            self.take()
            items.append(self.vector_item())
        self.expect("}", "closing the vector operand")
        text = "{" + ", ".join(i.text for i in items) + "}"
        return Arg("vector", text, start.line, start.column, items=tuple(items))

    def vector_item(self) -> Arg:
        tok = self.expect_name("(a register) in the vector operand")
        return Arg("reg", tok.text, tok.line, tok.column, name=tok.text)

    def address(self) -> Arg:
        start = self.take()
        name, offset = None, 0
        if self.peek().kind == "word" and not self.peek().text.startswith("."):
            name = self.take().text
            if self.at("+") or self.at("-"):
                sign = -1 if self.take().text == "-" else 1
                offset = sign * self.address_offset()
        else:
            offset = self.address_offset()
        self.expect("]", "closing the address")
        text = "[" + (name or "") + (f"{offset:+d}" if name and offset else "" if name else str(offset)) + "]"
        return Arg("address", text, start.line, start.column, name=name, offset=offset)

    def address_offset(self) -> int:
        negative = self.at("-")
        if negative:
            self.take()
        tok = self.take()
        if tok.kind != "int":
            raise _syntax(f"expected an integer offset in the address, found {tok}", tok)
        return _literal(tok, negative).value


def _literal(tok: Token, negative: bool = False) -> Literal:
    try:
        return parse_literal(tok.text, negative)
    except ValueError as err:
        raise _syntax(str(err), tok) from None


def parse_program(source: str) -> Parsed:
    """The statements of ``source`` up to its first syntax or unsupported-statement error."""
    if not isinstance(source, str):
        raise PTXSyntaxError(f"PTX source must be a str, got {type(source).__name__}")
    parsed = Parsed()
    lex_error = None
    try:
        tokens = tokenize(source)
    except PTXSyntaxError as err:
        tokens, lex_error = err.tokens_before, err
    parser = _Parser(tokens)
    while parser.peek().kind != "eof":
        try:
            parsed.statements.append(parser.statement())
        except (PTXSyntaxError, UnsupportedInstructionError) as err:
            earlier = lex_error is None or (err.line, err.column) < (lex_error.line, lex_error.column)
            parsed.error = err if earlier else lex_error
            return parsed
    parsed.error = lex_error
    return parsed
