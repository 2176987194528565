"""PTX source text -> tokens, each with its line and column (both 1-based).

Follows PTX ISA chapter 4 ("Syntax"): ``//`` and ``/* */`` comments (4.2), identifiers
(4.4: ``[a-zA-Z][a-zA-Z0-9_$]*`` or ``[_$%][a-zA-Z0-9_$]+``), and constants (4.5/4.6: integer
literals in decimal, hex ``0x``, octal ``0``, binary ``0b``, with a ``U`` suffix; floating-point
literals ``0f`` + 8 hex digits (exact f32), ``0d`` + 16 hex digits (exact f64), and decimal
ones with a point or an exponent).

A *word* is an identifier together with its dot-separated qualifiers, as PTX writes them
without spaces: ``wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16``, ``.reg``, ``%tid.x``,
``wmma.load.a.sync.aligned.row.m16n16k16.shared::cta.f16``.  Punctuation is one character
(``{ } [ ] ( ) , ; + - ! @ | < > = :``) except ``...``, which the ISA's examples use for
elided code and which is never valid PTX (the parser reports it).

Anything else is a :class:`~fastmma.errors.PTXSyntaxError` at its line and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import PTXSyntaxError

_NUMBER_RE = re.compile(
    r"0[fF][0-9a-fA-F]{8}"                    # exact single precision
    r"|0[dD][0-9a-fA-F]{16}"                  # exact double precision
    r"|(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?"   # decimal with a point
    r"|\d+[eE][+-]?\d+"                       # decimal with an exponent
    r"|0[xX][0-9a-fA-F]+[uU]?"
    r"|0[bB][01]+[uU]?"
    r"|\d+[uU]?",
    re.ASCII,
)
_WORD_RE = re.compile(r"\.?[A-Za-z_$%][\w$%]*(?:(?:\.|::)[\w$%]+)*", re.ASCII)
_IDENT_CHARS = re.compile(r"[\w$%.]", re.ASCII)
PUNCTUATION = frozenset("{}[](),;+-!@|<>=:")


@dataclass(frozen=True)
class Token:
    """``kind``: ``"word"``, ``"int"``, ``"float"``, ``"punct"`` or ``"eof"``."""

    kind: str
    text: str
    line: int
    column: int

    def __str__(self) -> str:
        return "end of input" if self.kind == "eof" else repr(self.text)


def number_kind(text: str) -> str:
    """``"float"`` for a floating-point literal, ``"int"`` for an integer one."""
    if text[:2] in ("0f", "0F", "0d", "0D") and len(text) in (10, 18):
        return "float"
    if text[:2] in ("0x", "0X", "0b", "0B"):
        return "int"
    return "float" if any(c in text for c in ".eE") else "int"


class _Scanner:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.line = 1
        self.line_start = 0

    @property
    def column(self) -> int:
        return self.pos - self.line_start + 1

    def fail(self, message: str, pos: int | None = None):
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        raise PTXSyntaxError(message, line, column)

    def advance_to(self, end: int) -> None:
        """Move to ``end``, counting the newlines passed."""
        newlines = self.text.count("\n", self.pos, end)
        if newlines:
            self.line += newlines
            self.line_start = self.text.rfind("\n", self.pos, end) + 1
        self.pos = end

    def skip_block_comment(self) -> None:
        end = self.text.find("*/", self.pos + 2)
        if end < 0:
            self.fail("unterminated /* comment")
        self.advance_to(end + 2)

    def skip_line_comment(self) -> None:
        end = self.text.find("\n", self.pos)
        self.advance_to(len(self.text) if end < 0 else end)

    def number(self) -> Token:
        m = _NUMBER_RE.match(self.text, self.pos)
        end = m.end()
        if end < len(self.text) and _IDENT_CHARS.match(self.text, end):
            bad = re.compile(r"[\w$%.]*", re.ASCII).match(self.text, self.pos).group()
            self.fail(f"malformed number {bad!r} (PTX literals: 123, 0x7f, 0b101, 017, 1.5, 1e-3, "
                      f"0f3F800000, 0d3FF0000000000000)")
        tok = Token(number_kind(m.group()), m.group(), self.line, self.column)
        self.pos = end
        return tok

    def word(self) -> Token:
        m = _WORD_RE.match(self.text, self.pos)
        tok = Token("word", m.group(), self.line, self.column)
        self.pos = m.end()
        return tok

    def punct(self, length: int) -> Token:
        tok = Token("punct", self.text[self.pos:self.pos + length], self.line, self.column)
        self.pos += length
        return tok


def tokenize(text: str) -> list[Token]:
    """Every token of ``text``, ending with an ``"eof"`` token.

    A :class:`~fastmma.errors.PTXSyntaxError` carries ``tokens_before``: the tokens up to the
    error, so that a caller can report earlier errors first.
    """
    if not isinstance(text, str):
        raise PTXSyntaxError(f"PTX source must be a str, got {type(text).__name__}")
    s = _Scanner(text)
    tokens: list[Token] = []
    try:
        _scan(s, tokens)
    except PTXSyntaxError as err:
        err.tokens_before = tokens + [Token("eof", "", err.line, err.column)]
        raise
    tokens.append(Token("eof", "", s.line, s.column))
    return tokens


def _scan(s: _Scanner, tokens: list[Token]) -> None:
    text = s.text
    while s.pos < len(text):
        c = text[s.pos]
        nxt = text[s.pos + 1] if s.pos + 1 < len(text) else ""
        if c in " \t\r\f\v\n":
            s.advance_to(s.pos + 1)
        elif c == "/" and nxt == "/":
            s.skip_line_comment()
        elif c == "/" and nxt == "*":
            s.skip_block_comment()
        elif c.isdigit() and c.isascii() or (c == "." and nxt.isdigit() and nxt.isascii()):
            tokens.append(s.number())
        elif text.startswith("...", s.pos):
            tokens.append(s.punct(3))
        elif _WORD_RE.match(text, s.pos):
            tokens.append(s.word())
        elif c in PUNCTUATION:
            tokens.append(s.punct(1))
        else:
            s.fail(f"unexpected character {c!r}")
