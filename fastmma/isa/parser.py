"""Instruction text -> instruction object, validated against the ISA's tables.

Accepts one wgmma, wmma, mma, ldmatrix, stmatrix or movmatrix statement such as
``wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {...}, desc_a, desc_b, p, 1, 1, 0, 0;``
or ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {...}, {...}, {...}, {...};``,
with or without ``.sync.aligned``, with or without
operands, with or without the final ``;``.  Qualifiers may come in any order, as ptxas
accepts them (nvcc itself writes ``.s32.s8.s8.satfinite`` where the ISA's syntax line puts
``.satfinite`` first, and the ISA's own examples write ``.m16n16k16.row``); what matters
is the set of qualifiers and the order of the type qualifiers.  Every error names the
offending qualifier or operand and lists what is allowed.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from ..errors import InvalidInstructionError, PTXSyntaxError, UnsupportedInstructionError
from . import tables
from .near_miss import did_you_mean
from .instruction import (
    Instruction,
    Ldmatrix,
    MmaSp,
    MmaSync,
    Movmatrix,
    Operand,
    Shape,
    Stmatrix,
    WgmmaCommitGroup,
    WgmmaFence,
    WgmmaMmaAsync,
    WgmmaMmaAsyncSp,
    WgmmaWaitGroup,
    WmmaLoad,
    WmmaMma,
    WmmaStore,
)
from ..validate import excerpt, public

_SHAPE_RE = re.compile(r"^m(\d+)n(\d+)k(\d+)$")
_MATRIX_SHAPE_RE = re.compile(r"^m(\d+)n(\d+)$")  # ldmatrix / stmatrix / movmatrix
_IDENT_RE = re.compile(r"^[A-Za-z_$%][\w$%]*$")
_INT_RE = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9]\d*)[uU]?$")

OPCODES = (
    "wgmma.mma_async", "wgmma.mma_async.sp", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group",
    "wmma.load.a", "wmma.load.b", "wmma.load.c", "wmma.store.d", "wmma.mma", "mma", "mma.sp", "ldmatrix",
    "stmatrix", "movmatrix",
)


def _fail(msg: str) -> InvalidInstructionError:
    return InvalidInstructionError(msg)


def _choices(values, dot=True) -> str:
    return ", ".join(("." if dot else "") + str(v) for v in values)


def _n_list(values) -> str:
    """Sorted integers as runs of one step: ``8..32 by 8, 48..224 by 16``."""
    vals, runs = sorted(values), []
    while vals:
        step = vals[1] - vals[0] if len(vals) > 1 else 0
        end = next((i for i in range(1, len(vals)) if vals[i] - vals[i - 1] != step), len(vals))
        if end < 3:  # two values are no run
            runs.append(str(vals[0]))
            vals = vals[1:]
        else:
            runs.append(f"{vals[0]}..{vals[end - 1]} by {step}")
            vals = vals[end:]
    return ", ".join(runs)


# ---------------------------------------------------------------- lexing


def _split_statement(text: str) -> tuple[str, str]:
    """``(dotted name, operand text)`` of one statement."""
    stmt = text.strip()
    if stmt.endswith(";"):
        stmt = stmt[:-1].rstrip()
    if ";" in stmt:
        raise PTXSyntaxError(f"expected one instruction, found ';' inside {text.strip()!r}")
    if not stmt:
        raise PTXSyntaxError("empty instruction text")
    parts = stmt.split(None, 1)
    return parts[0], (parts[1].strip() if len(parts) > 1 else "")


def _split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth < 0:
                raise PTXSyntaxError(f"unbalanced {ch!r} in operands {text!r}")
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise PTXSyntaxError(f"unclosed brace or bracket in operands {text!r}")
    out.append("".join(cur).strip())
    if any(not o for o in out):
        raise PTXSyntaxError(f"empty operand in {text!r}")
    return out


_INT_BASES = {"0x": 16, "0X": 16, "0b": 2, "0B": 2}


def parse_int(text: str) -> int:
    """A PTX integer literal (decimal, hex ``0x``, octal ``0``, binary ``0b``; ``U`` suffix)."""
    t = text.strip()
    if not _INT_RE.match(t):
        raise PTXSyntaxError(f"{text!r} is not an integer literal")
    sign = -1 if t.startswith("-") else 1
    return sign * unsigned_literal(t.lstrip("+-"), t)


def unsigned_literal(body: str, text: str | None = None) -> int:
    """The value of a PTX integer literal without its sign (PTX ISA, "Integer constants"): hex
    ``0x``, binary ``0b``, octal (a leading 0) or decimal digits, an optional ``U`` suffix,
    and at most 64 bits.  ``text``, the literal as written, is what a message quotes.  The
    callers have matched the literal's form (``_INT_RE``, the PTX lexer's number pattern);
    what is left to refuse here is an 8 or 9 in octal and a value past 64 bits."""
    text = body if text is None else text
    t = body.rstrip("uU")
    if t[:2] in _INT_BASES:
        base, digits = _INT_BASES[t[:2]], t[2:]
    elif len(t) > 1 and t.startswith("0"):
        base, digits = 8, t[1:]
        if any(c in "89" for c in digits):
            raise PTXSyntaxError(f"{text!r} is not an octal literal (a leading 0 means octal)")
    else:
        base, digits = 10, t
    if len(digits.lstrip("0")) > 64:  # longer than 64 bits in any base; Python refuses int() of thousands
        raise PTXSyntaxError(f"integer literal {text!r} does not fit in 64 bits")
    value = int(digits, base)
    if value >= 1 << 64:
        raise PTXSyntaxError(f"integer literal {text!r} does not fit in 64 bits")
    return value


def parse_operand(text: str) -> Operand:
    """One operand's text as an :class:`~fastmma.isa.Operand`: a register, a vector of them,
    an address ``[reg+offset]``, an immediate or a predicate.  Raises
    :class:`~fastmma.errors.PTXSyntaxError` for text that is none of these."""
    t = text.strip()
    if t.startswith("{"):
        if not t.endswith("}"):
            raise PTXSyntaxError(f"vector operand {t!r} lacks its closing brace")
        inner = t[1:-1].strip()
        regs = tuple(r.strip() for r in inner.split(",")) if inner else ()
        for r in regs:
            if not _IDENT_RE.match(r):
                raise PTXSyntaxError(f"{r!r} in vector operand {t!r} is not a register name")
        return Operand("vector", t, regs=regs)
    if t.startswith("["):
        if not t.endswith("]"):
            raise PTXSyntaxError(f"address operand {t!r} lacks its closing bracket")
        inner = t[1:-1].replace(" ", "")
        m = re.match(r"^([A-Za-z_$%][\w$%]*)?(?:([+-])(.+))?$", inner)
        if not inner or not m or (m.group(1) is None and m.group(2) is not None):
            if _INT_RE.match(inner):
                return Operand("address", t, value=parse_int(inner))
            raise PTXSyntaxError(f"address operand {t!r} is not [reg], [reg+offset] or [offset]")
        offset = 0
        if m.group(2):
            offset = parse_int(m.group(3)) * (-1 if m.group(2) == "-" else 1)
        return Operand("address", t, name=m.group(1), value=offset)
    if _INT_RE.match(t):
        return Operand("imm", t, value=parse_int(t))
    neg = t.startswith("!")
    name = t[1:].strip() if neg else t
    if not _IDENT_RE.match(name):
        raise PTXSyntaxError(f"{text!r} is not a register, immediate, vector or address operand")
    return Operand("reg", t, name=name, negated=neg)


# ---------------------------------------------------------------- qualifiers


def _classify(tok: str) -> str:
    if tok in ("sync", "aligned"):
        return tok
    if _SHAPE_RE.match(tok):
        return "shape"
    if _MATRIX_SHAPE_RE.match(tok):
        return "mshape"
    if tok in tables.MATRIX_MOVE.nums:
        return "num"
    if tok == "trans":
        return "trans"
    for kind, values in (("layout", tables.LAYOUTS),
                         ("type", tables.TYPES + tables.MATRIX_MOVE.types + tables.MATRIX_MOVE_OTHER_TYPES),
                         ("rounding", tables.ROUNDINGS), ("op", tables.BIT_OPS),
                         ("ss", tables.STATE_SPACES)):
        if tok in values:
            return kind
    if tok in ("satfinite", "popc"):
        return tok
    if tok in tables.MMA_SP_VARIANTS:
        return "spvariant"
    return "unknown"


_ALLOWED = {
    "wgmma.mma_async": ("sync", "aligned", "shape", "type", "satfinite", "op", "popc"),
    "wgmma.mma_async.sp": ("sync", "aligned", "shape", "type", "satfinite"),
    "wmma.mma": ("sync", "aligned", "layout", "shape", "type", "satfinite", "rounding", "op", "popc"),
    "wmma.load": ("sync", "aligned", "layout", "shape", "ss", "type"),
    "wmma.store": ("sync", "aligned", "layout", "shape", "ss", "type"),
    "wgmma.fence": ("sync", "aligned"),
    "wgmma.commit_group": ("sync", "aligned"),
    "wgmma.wait_group": ("sync", "aligned"),
    "mma": ("sync", "aligned", "layout", "shape", "type", "satfinite", "rounding", "op", "popc"),
    "mma.sp": ("spvariant", "sync", "aligned", "layout", "shape", "type", "satfinite"),
    "ldmatrix": ("sync", "aligned", "mshape", "num", "trans", "ss", "type"),
    "stmatrix": ("sync", "aligned", "mshape", "num", "trans", "ss", "type"),
    "movmatrix": ("sync", "aligned", "mshape", "trans", "type"),
}


class _Quals:
    """The qualifiers of one statement, grouped by kind, in order."""

    def __init__(self, opcode: str, tokens: list[str]):
        self.opcode = opcode
        self.by_kind: dict[str, list[str]] = {}
        allowed = _ALLOWED[_base(opcode)]
        for tok in tokens:
            kind = _classify(tok)
            if kind not in allowed:
                hint = did_you_mean(tok, allowed) if kind == "unknown" else None
                raise _fail(
                    f"qualifier .{tok} is not allowed on {opcode}{f' (did you mean .{hint}?)' if hint else ''}; "
                    f"its qualifiers are {_describe_allowed(allowed)}"
                )
            if kind not in ("type", "layout") and tok in self.by_kind.get(kind, []):
                raise _fail(f"qualifier .{tok} appears twice in {opcode}")
            self.by_kind.setdefault(kind, []).append(tok)

    def get(self, kind: str) -> list[str]:
        return self.by_kind.get(kind, [])

    def one(self, kind: str, what: str, choices=None) -> str | None:
        vals = self.get(kind)
        if len(vals) > 1:
            raise _fail(f"{self.opcode} takes one {what}, got {_choices(vals)}")
        return vals[0] if vals else None

    def shape(self, choices: str) -> Shape:
        tok = self.one("shape", "shape")
        if tok is None:
            raise _fail(f"{self.opcode} needs a shape qualifier; valid shapes: {choices}")
        numbers = _SHAPE_RE.match(tok).groups()
        if max(map(len, numbers)) > 4:  # no ISA shape needs more; int() refuses thousands of digits
            raise _fail(f"shape .{excerpt(tok, 30)} has a number of more than 4 digits (no shape's M, N or K "
                        f"has more than 3)")
        m, n, k = map(int, numbers)
        return Shape(m, n, k)


_KIND_NAMES = {
    "sync": ".sync", "aligned": ".aligned", "shape": ".shape", "type": "type qualifiers",
    "layout": ".row/.col", "satfinite": ".satfinite", "rounding": ".rn/.rz/.rm/.rp",
    "op": ".and/.xor", "popc": ".popc", "ss": ".global/.shared/.shared::cta",
    "mshape": ".m8n8", "num": ".x1/.x2/.x4", "trans": ".trans", "spvariant": ".sp/.sp::ordered_metadata",
}


def _describe_allowed(kinds) -> str:
    return ", ".join(_KIND_NAMES[k] for k in kinds)


def _bit_op(quals, row, what: str) -> str | None:
    """``.op.popc``: required, with ``.op`` in ``row.ops``, on a single-bit (.b1) row of the
    instruction ``what``; refused on every other row."""
    op = quals.one("op", ".op")
    popc = bool(quals.get("popc"))
    if row.ops:
        if op not in row.ops or not popc:
            raise _fail(f"single-bit {what} needs .op.popc with .op in {_choices(row.ops)}; got "
                        f"{('.' + op) if op else 'no .op'}{'' if popc else ' and no .popc'}")
    elif op or popc:
        raise _fail(f".{op or 'popc'} is only valid on single-bit (.b1) {what}, not on {row.name}")
    return op


# ---------------------------------------------------------------- opcode dispatch


def _base(opcode: str) -> str:
    """The opcode without its matrix (``wmma.load.a`` -> ``wmma.load``)."""
    return opcode[:-2] if opcode.startswith(("wmma.load.", "wmma.store.")) else opcode


@public
def parse(text: str) -> Instruction:
    """Parse one wgmma, wmma, mma, ldmatrix, stmatrix or movmatrix statement into an immutable
    instruction object.

    Raises :class:`~fastmma.errors.PTXSyntaxError` for malformed text,
    :class:`~fastmma.errors.InvalidInstructionError` for qualifiers or operands the ISA
    does not allow, :class:`~fastmma.errors.UnsupportedInstructionError` for other
    instructions.
    """
    if not isinstance(text, str):
        raise PTXSyntaxError(f"instruction text must be a str, got {type(text).__name__}")
    return _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Instruction:
    """:func:`parse`, once per distinct text: a simulator issues the same few instructions
    millions of times, and the objects are immutable."""
    name, operand_text = _split_statement(text)
    parts = name.split(".")
    opcode, rest = _match_opcode(parts, name)
    operands = tuple(parse_operand(o) for o in _split_operands(operand_text)) if operand_text else None
    quals = _Quals(opcode, rest)
    builder = _BUILDERS[_base(opcode)]
    return builder(opcode, quals, operands, text.strip())


def _match_opcode(parts: list[str], name: str) -> tuple[str, list[str]]:
    if len(parts) >= 2 and parts[0] == "wmma" and parts[1] in ("load", "store"):
        if len(parts) < 3 or parts[2] not in (("a", "b", "c") if parts[1] == "load" else ("d",)):
            valid = ".a, .b, .c" if parts[1] == "load" else ".d"
            got = f".{parts[2]}" if len(parts) > 2 else "nothing"
            raise _fail(f"wmma.{parts[1]} must name its matrix ({valid}); got {got} in {name!r}")
        return ".".join(parts[:3]), parts[3:]
    if len(parts) >= 2 and parts[0] == "wmma" and parts[1] == "mma":
        rest = parts[2:]
        return "wmma.mma", rest
    if parts[0] == "mma":
        _refuse_unmodelled_mma(parts, name)
        if len(parts) > 1 and parts[1] in tables.MMA_SP_VARIANTS:
            return "mma.sp", parts[1:]
        return "mma", parts[1:]
    if parts[0] in ("ldmatrix", "stmatrix", "movmatrix"):
        return parts[0], parts[1:]
    if len(parts) >= 2 and parts[0] == "wgmma":
        if parts[1] == "mma_async" and len(parts) > 2 and parts[2] == "sp":
            return "wgmma.mma_async.sp", parts[3:]
        op = "wgmma." + parts[1]
        if op in OPCODES:
            return op, parts[2:]
        raise _fail(f"unknown wgmma instruction {op!r}; valid: wgmma.mma_async, wgmma.fence, "
                    f"wgmma.commit_group, wgmma.wait_group")
    raise UnsupportedInstructionError(
        f"{excerpt(repr(name.split('.')[0]), 30)}... is not a wgmma, wmma, mma or warp matrix-move instruction; "
        f"fastmma parses {_grouped(OPCODES)}")


def _grouped(opcodes) -> str:
    """Opcodes with their first word said once: ``wgmma.{fence,commit_group}, mma, mma.sp``."""
    groups = {}
    for op in opcodes:
        head, _, tail = op.partition(".")
        groups.setdefault(head, []).append(tail)
    return ", ".join(f"{head}.{{{','.join(tails)}}}" if len(tails) > 1 and all(tails) else
                     ", ".join(f"{head}.{t}" if t else head for t in tails) for head, tails in groups.items())


# Qualifiers (the part before any ``::``) of mma forms fastmma does not execute, with the
# reason: the sm_100+/sm_120 .kind / block-scale forms (PTX ISA 9.7.14.5, 9.7.14.6).
_MMA_UNMODELLED = {
    "kind": "mma.sync .kind::... forms are not sm_90a instructions (sm_100+/sm_120); fastmma models sm_90a",
    "block_scale": "mma.sync .block_scale forms are not sm_90a instructions (sm_100+/sm_120); fastmma models sm_90a",
    "scale_vec": "mma.sync .scale_vec::... (block scaling) is not an sm_90a qualifier; fastmma models sm_90a",
}


def _refuse_unmodelled_mma(parts: list[str], name: str) -> None:
    """Raise :class:`UnsupportedInstructionError` for valid mma forms fastmma does not
    execute; they are recognised before the qualifiers are checked, since ``.kind::f8f6f4``
    and the like are not in fastmma's qualifier vocabulary."""
    for tok in parts[1:]:
        why = _MMA_UNMODELLED.get(tok.split("::")[0])
        if why is not None:
            raise UnsupportedInstructionError(
                f"{why} (in {name!r}); fastmma parses mma.sync.aligned and mma.sp.sync.aligned without .kind, "
                f".block_scale or .scale_vec")


# ---------------------------------------------------------------- wgmma


def _build_wgmma_plain(opcode, quals, operands, text):
    cls = {"wgmma.fence": WgmmaFence, "wgmma.commit_group": WgmmaCommitGroup}.get(opcode)
    if cls is not None:
        if operands:
            raise _fail(f"{opcode} takes no operands, got {len(operands)}")
        return cls(opcode, text, operands)
    # wait_group N
    if not operands or len(operands) != 1 or operands[0].kind != "imm":
        raise _fail("wgmma.wait_group takes one integer immediate operand N (e.g. "
                    "'wgmma.wait_group.sync.aligned 0;')")
    n = operands[0].value
    if not 0 <= n <= 0x7FFFFFFF:
        raise _fail(f"wgmma.wait_group N must be a non-negative integer, got {n}")
    return WgmmaWaitGroup(opcode, text, operands, n=n)


def _wgmma_shapes(rows) -> str:
    """``.m64nNkK`` of each row (name, K, N list), rows of one K together, and the N list that
    most rows share said once."""
    lists = [n for _, _, n in rows]
    common = max(lists, key=lists.count)
    by_k = {}
    for name, k, _ in rows:
        by_k.setdefault(k, []).append(name)
    others = "; ".join(f"{name}: {n}" for name, _, n in rows if n != common)
    return (", ".join(f".m64nNk{k} ({', '.join(names)})" for k, names in by_k.items())
            + f"; N in {common}" + (f" ({others})" if others else ""))


def _build_wgmma_mma(opcode, quals, operands, text):
    """``wgmma.mma_async`` (PTX ISA 9.7.15.5.2) and ``wgmma.mma_async.sp`` (9.7.15.6.3),
    validated against ``tables.WGMMA_TYPE_ROWS``: the sparse form has every row but .b1, with
    K doubled, and two more operands after b-desc, ``sp-meta`` (a 32-bit register) and
    ``sp-sel`` (an integer constant in ``tables.WGMMA_SP_SELECTORS``)."""
    sparse = opcode == "wgmma.mma_async.sp"
    rows = [r for r in tables.WGMMA_TYPE_ROWS if not sparse or r.name in tables.WGMMA_SP_SELECTORS]
    k_of = (lambda r: 2 * r.k) if sparse else (lambda r: r.k)
    shape = quals.shape(_wgmma_shapes([(r.name, k_of(r), _n_list(r.n_values)) for r in rows]))
    types = quals.get("type")
    if len(types) != 3:
        raise _fail(f"{opcode} needs three type qualifiers .dtype.atype.btype, got {_choices(types) or 'none'}")
    dtype, atype, btype = types
    row = (tables.wgmma_sp_type_row if sparse else tables.wgmma_type_row)(atype, btype)
    if row is None:
        pairs = "; ".join(f"{'|'.join(r.atypes)} with {'|'.join(r.btypes)}" for r in rows)
        raise _fail(f"{opcode} has no variant with .atype .{atype} and .btype .{btype}; "
                    f"valid .atype/.btype pairs: {pairs}")
    if shape.m != tables.WGMMA_M or shape.k != k_of(row) or shape.n not in row.n_values:
        raise _fail(f"shape .{shape} is not valid for {row.name} {opcode}: valid shapes are "
                    f".m64nNk{k_of(row)} with N in {_n_list(row.n_values)}")
    if dtype not in row.dtypes:
        raise _fail(f".dtype .{dtype} is not valid for {row.name} {opcode}; allowed: {_choices(row.dtypes)}")
    satfinite = bool(quals.get("satfinite"))
    if satfinite and not row.satfinite:
        raise _fail(f".satfinite is only valid on integer (.s8/.u8) {opcode}, not on {row.name}")
    kw = dict(shape=shape, dtype=dtype, atype=atype, btype=btype, satfinite=satfinite)
    if sparse:
        inst = WgmmaMmaAsyncSp(opcode, text, operands, **kw)
    else:
        inst = WgmmaMmaAsync(opcode, text, operands, **kw, op=_bit_op(quals, row, "wgmma.mma_async"))
    return _wgmma_operands(inst, row, operands) if operands is not None else inst


def _wgmma_operands(inst, row, ops):
    from dataclasses import replace

    what = inst.opcode
    sparse = isinstance(inst, WgmmaMmaAsyncSp)
    d = ops[0]
    if d.kind != "vector" or len(d.regs) != inst.d_regs:
        raise _fail(f"{what} .{inst.shape}.{inst.dtype}: operand d must be a vector of "
                    f"{inst.d_regs} registers, got {d.text!r}")
    if len(ops) < 2:
        raise _fail(f"{what} needs operands d, a (or a-desc), b-desc, {'sp-meta, sp-sel, ' * sparse}scale-d, ...")
    a_source = "reg" if ops[1].kind == "vector" else "desc"
    if a_source == "reg":
        if len(ops[1].regs) != 4:
            raise _fail(f"{what}: operand a in registers must be a vector of 4 registers, got {ops[1].text!r}")
    elif ops[1].kind not in ("reg", "imm"):
        raise _fail(f"operand a-desc must be a 64-bit register, got {ops[1].text!r}")
    imm_names = []
    if row.scale:
        imm_names += ["imm-scale-a", "imm-scale-b"]
    if row.transpose:
        imm_names += (["imm-trans-a"] if a_source == "desc" else []) + ["imm-trans-b"]
    sp = ["sp-meta", "sp-sel"] if sparse else []
    expected = ["d", "a" if a_source == "reg" else "a-desc", "b-desc"] + sp + ["scale-d"] + imm_names
    if len(ops) != len(expected):
        raise _fail(f"{row.name} {what} with A from {'registers' if a_source == 'reg' else 'a descriptor'} "
                    f"takes {len(expected)} operands ({', '.join(expected)}), got {len(ops)}")
    if ops[2].kind not in ("reg", "imm"):
        raise _fail(f"operand b-desc must be a 64-bit register, got {ops[2].text!r}")
    values = {}
    if sparse:
        meta, sel = ops[3], ops[4]
        if meta.kind != "reg" or meta.negated:
            raise _fail(f"{what} operand sp-meta (the metadata) must be a 32-bit register, got {meta.text!r}")
        allowed = tables.WGMMA_SP_SELECTORS[row.name]
        if sel.kind != "imm" or sel.value not in allowed:
            raise _fail(f"{row.name} {what}: the sparsity selector sp-sel must be an integer constant in "
                        f"{_choices(allowed, dot=False)}, got {sel.text!r}")
        values["selector"] = sel.value
        ops = ops[:3] + ops[5:]
    if ops[3].kind not in ("reg", "imm"):
        raise _fail(f"operand scale-d must be a predicate or an immediate, got {ops[3].text!r}")
    for name, op in zip(imm_names, ops[4:]):
        if op.kind != "imm":
            raise _fail(f"operand {name} must be an integer immediate, got {op.text!r}")
        allowed = (-1, 1) if "scale" in name else (0, 1)
        if op.value not in allowed:
            raise _fail(f"operand {name} must be {' or '.join(map(str, allowed))}, got {op.value}")
        values[name.replace("-", "_")] = op.value
    if a_source == "reg" and values.get("imm_trans_a"):
        raise _fail("imm-trans-a does not exist when A comes from registers")
    return replace(inst, a_source=a_source, scale_d=ops[3], **values)


# ---------------------------------------------------------------- wmma


def _wmma_shape(quals) -> str:
    shape = quals.shape(_choices(tables.WMMA_SHAPES))
    if str(shape) not in tables.WMMA_SHAPES:
        raise _fail(f"shape .{shape} is not a wmma shape; valid shapes: {_choices(tables.WMMA_SHAPES)}")
    return shape


def _build_wmma_mma(opcode, quals, operands, text):
    shape = _wmma_shape(quals)
    layouts = quals.get("layout")
    if len(layouts) != 2:
        raise _fail(f"wmma.mma needs two layout qualifiers .alayout.blayout (.row/.col), got "
                    f"{_choices(layouts) or 'none'}")
    alayout, blayout = layouts
    types = quals.get("type")
    if len(types) == 2:
        dtype, ctype = types
        atype = btype = "f16"
        row = tables.WMMA_TYPE_ROWS[0]
        if dtype not in row.cd_types or ctype not in row.cd_types:
            raise _fail(f"wmma.mma with two type qualifiers is the .f16 form .dtype.ctype with both in "
                        f"{_choices(row.cd_types)}; got {_choices(types)}")
    elif len(types) == 4:
        dtype, atype, btype, ctype = types
        row = tables.wmma_row_for_ab(atype)
        if row is None or row.name == ".f16" or btype not in row.ab_types:
            forms = "; ".join(f"{'|'.join(r.ab_types)} inputs: .{r.cd_types[0]}.atype.btype.{r.cd_types[0]}"
                              for r in tables.WMMA_TYPE_ROWS[1:])
            raise _fail(f"wmma.mma has no variant with .atype .{atype} and .btype .{btype}; valid "
                        f"(f16 uses .dtype.ctype): {forms}")
        if dtype != row.cd_types[0] or ctype != row.cd_types[0]:
            raise _fail(f"{row.name} wmma.mma must be spelled .{row.cd_types[0]}.{atype}.{btype}."
                        f"{row.cd_types[0]}; got .{'.'.join(types)}")
    else:
        raise _fail(f"wmma.mma needs .dtype.ctype (f16) or .dtype.atype.btype.ctype, got "
                    f"{_choices(types) or 'no type qualifiers'}")
    if str(shape) not in row.shapes:
        raise _fail(f"shape .{shape} is not valid for {row.name} wmma.mma: "
                    + (".tf32 needs .m16n16k8" if row.name == ".tf32" else f"valid shapes: {_choices(row.shapes)}"))
    if alayout not in row.a_layouts or blayout not in row.b_layouts:
        raise _fail(f"{row.name} wmma.mma needs .alayout in {_choices(row.a_layouts)} and .blayout in "
                    f"{_choices(row.b_layouts)}; got .{alayout}.{blayout}")
    satfinite = bool(quals.get("satfinite"))
    if satfinite and not row.satfinite:
        if row.name == ".f16":
            raise _fail(".satfinite on floating-point wmma.mma was removed in PTX ISA 6.5; it is only "
                        "valid on integer wmma.mma (.s8/.u8/.s4/.u4)")
        raise _fail(f".satfinite is not valid on {row.name} wmma.mma; only on integer variants")
    rounding = quals.one("rounding", "rounding modifier")
    if rounding and not row.roundings:
        raise _fail(f"rounding modifier .{rounding} is only valid on .f64 wmma.mma")
    op = _bit_op(quals, row, "wmma.mma")
    inst = WmmaMma(opcode, text, operands, alayout=alayout, blayout=blayout, shape=shape, dtype=dtype,
                   atype=atype, btype=btype, ctype=ctype, satfinite=satfinite,
                   rounding=(rounding or "rn") if row.roundings else None, op=op)
    if operands is not None:
        _dabc_operands(inst, operands, "wmma.mma", f".{shape}")
    return inst


def _build_wmma_memory(opcode, quals, operands, text):
    matrix = opcode[-1]
    shape = _wmma_shape(quals)
    layout = quals.one("layout", "layout")
    if layout is None:
        raise _fail(f"{opcode} needs a layout qualifier: .row or .col")
    ss = quals.one("ss", "state space")
    types = quals.get("type")
    if len(types) != 1:
        raise _fail(f"{opcode} needs one type qualifier, got {_choices(types) or 'none'}")
    elem = types[0]
    rows = tables.wmma_rows_for_shape(str(shape))
    if matrix in ("a", "b"):
        valid = [t for r in rows for t in r.ab_types]
        row = next((r for r in rows if elem in r.ab_types), None)
    else:
        valid = list(dict.fromkeys(t for r in rows for t in r.cd_types))
        row = next((r for r in rows if elem in r.cd_types), None)
    if row is None:
        raise _fail(f"{opcode} .{shape} has no type .{elem}; valid types: {_choices(valid)}")
    allowed_layouts = {"a": row.a_layouts, "b": row.b_layouts}.get(matrix, tables.LAYOUTS)
    if layout not in allowed_layouts:
        raise _fail(f"{opcode} of .{elem} needs layout {_choices(allowed_layouts)}, got .{layout}")
    cls = WmmaStore if matrix == "d" else WmmaLoad
    kw = {} if matrix == "d" else {"matrix": matrix}
    inst = cls(opcode, text, operands, layout=layout, shape=shape, state_space=ss, type=elem, **kw)
    if operands is not None:
        _wmma_memory_operands(inst, operands)
    return inst


def _wmma_memory_operands(inst, ops):
    store = isinstance(inst, WmmaStore)
    if len(ops) not in (2, 3):
        what = "[p], r {, stride}" if store else "r, [p] {, stride}"
        raise _fail(f"{inst.opcode} takes operands {what}; got {len(ops)}")
    vec, addr = (ops[1], ops[0]) if store else (ops[0], ops[1])
    if addr.kind != "address":
        raise _fail(f"{inst.opcode}: the address operand must be [p], got {addr.text!r}")
    if vec.kind != "vector" or len(vec.regs) != inst.regs:
        raise _fail(f"{inst.opcode} .{inst.shape}.{inst.type}: the fragment must be a vector of "
                    f"{inst.regs} registers, got {vec.text!r}")
    if len(ops) == 3 and ops[2].kind not in ("reg", "imm"):
        raise _fail(f"{inst.opcode}: stride must be a 32-bit register or immediate, got {ops[2].text!r}")


# ---------------------------------------------------------------- mma (mma.sync)


def _mma_row(types: list[str], shape: Shape, sparse: bool = False):
    """The row of ``tables.MMA_TYPE_ROWS`` (``MMA_SP_TYPE_ROWS`` where ``sparse``) of
    ``.dtype.atype.btype.ctype`` (PTX ISA 9.7.14.5-6): four type qualifiers, always, and a
    shape the row has."""
    what, rows, find = (("mma.sp", tables.MMA_SP_TYPE_ROWS, tables.mma_sp_type_row) if sparse
                        else ("mma.sync", tables.MMA_TYPE_ROWS, tables.mma_type_row))
    if len(types) != 4:
        raise _fail(f"{what} needs four type qualifiers .dtype.atype.btype.ctype, got {_choices(types) or 'none'}")
    atype, btype = types[1], types[2]
    row = find(atype, btype, str(shape))
    if row is None:
        pairs = "; ".join(f"{'|'.join(r.atypes)} with {'|'.join(r.btypes)}" for r in rows)
        raise _fail(f"{what} has no variant with .atype .{atype} and .btype .{btype}; "
                    f"valid .atype/.btype pairs: {pairs}")
    if str(shape) not in row.shapes:
        raise _fail(f"shape .{shape} is not valid for {row.name} {what}; valid shapes: {_choices(row.shapes)}")
    return row


def _mma_accumulator(row, dtype: str, ctype: str) -> None:
    """.dtype and .ctype: both in the row's accumulator types, and equal or one of the row's
    ``cd_pairs`` (ptxas sm_90a)."""
    for what, value in ((".dtype", dtype), (".ctype", ctype)):
        if value not in row.cd_types:
            raise _fail(f"{what} .{value} is not valid for {row.name} mma.sync; allowed: "
                        f"{_choices(row.cd_types)}")
    if row.cd_pairs and (dtype, ctype) not in row.cd_pairs:
        pairs = ", ".join(f".{d}.{c}" for d, c in row.cd_pairs)
        raise _fail(f".dtype .{dtype} with .ctype .{ctype}: {row.name} mma.sync takes .dtype/.ctype {pairs} "
                    f"(.dtype must be .f32 where .ctype is .f32)")
    if dtype != ctype and not row.cd_pairs:
        raise _fail(f".dtype .{dtype} with .ctype .{ctype}: {row.name} mma.sync needs .dtype equal to "
                    f".ctype, both in {_choices(row.cd_types)}")


def _mma_layouts(quals, row) -> tuple[str, str]:
    """``.alayout.blayout``: two layout qualifiers, ``.row.col`` for every form but m8n8k4 .f16."""
    layouts = quals.get("layout")
    if len(layouts) != 2:
        raise _fail(f"mma.sync needs two layout qualifiers .alayout.blayout ({_choices(row.a_layouts)} then "
                    f"{_choices(row.b_layouts)}), got "
                    f"{_choices(layouts) or 'none'}")
    alayout, blayout = layouts
    if alayout not in row.a_layouts or blayout not in row.b_layouts:
        raise _fail(f"{row.name} mma.sync needs .alayout in {_choices(row.a_layouts)} and .blayout in "
                    f"{_choices(row.b_layouts)}; got .{alayout}.{blayout}")
    return alayout, blayout


def _mma_modifiers(quals, row) -> tuple[bool, str | None, str | None]:
    """.satfinite (integer rows), the rounding modifier (.f64: .rn) and .op.popc (.b1)."""
    satfinite = bool(quals.get("satfinite"))
    if satfinite and not row.satfinite:
        names = ", ".join(r.name for r in tables.MMA_TYPE_ROWS if r.satfinite)
        raise _fail(f".satfinite is not valid on {row.name} mma.sync; only on {names} "
                    f"({_choices(t for r in tables.MMA_TYPE_ROWS if r.satfinite for t in r.atypes)})")
    rounding = quals.one("rounding", "rounding modifier")
    if rounding and rounding not in row.roundings:
        where = "; ".join(f"{_choices(r.roundings)} on {r.name}" for r in tables.MMA_TYPE_ROWS if r.roundings)
        raise _fail(f"rounding modifier .{rounding} is not valid on {row.name} mma.sync; rounding modifiers "
                    f"allowed: {where} only")
    op = _bit_op(quals, row, "mma.sync")
    return satfinite, (rounding or "rn") if row.roundings else None, op


def _dabc_operands(inst, operands, what: str, form: str) -> None:
    """d, a, b, c of a warp-level mma (``wmma.mma``, ``mma.sync``): four vectors of
    ``fragment_regs`` registers each; errors name ``what`` and its ``form``."""
    if len(operands) != 4:
        raise _fail(f"{what} takes 4 operands d, a, b, c; got {len(operands)}")
    for name, op in zip("dabc", operands):
        want = inst.fragment_regs(name)
        if op.kind != "vector" or len(op.regs) != want:
            raise _fail(f"{what} {form} operand {name} must be a vector of {want} registers, got {op.text!r}")


def _build_mma(opcode, quals, operands, text):
    """``mma.sync.aligned.shape.row.col{.satfinite|.rn|.op.popc}.dtype.atype.btype.ctype``,
    validated against ``tables.MMA_TYPE_ROWS`` (PTX ISA 9.7.14.5, as ptxas sm_90a accepts)."""
    shape = quals.shape(_choices(tables.MMA_SHAPES))
    if str(shape) not in tables.MMA_SHAPES:
        raise _fail(f"shape .{shape} is not an mma.sync shape; valid shapes: {_choices(tables.MMA_SHAPES)}")
    types = quals.get("type")
    row = _mma_row(types, shape)
    dtype, atype, btype, ctype = types
    _mma_accumulator(row, dtype, ctype)
    alayout, blayout = _mma_layouts(quals, row)
    satfinite, rounding, op = _mma_modifiers(quals, row)
    inst = MmaSync(opcode, text, operands, shape=shape, alayout=alayout, blayout=blayout, dtype=dtype,
                   atype=atype, btype=btype, ctype=ctype, satfinite=satfinite, rounding=rounding, op=op)
    if operands is not None:
        _dabc_operands(inst, operands, "mma.sync", f".{shape}.{dtype}.{atype}.{btype}.{ctype}")
    return inst


# ---------------------------------------------------------------- mma.sp


def _build_mma_sp(opcode, quals, operands, text):
    """``mma.sp{::ordered_metadata}.sync.aligned.shape.row.col{.satfinite}.dtype.atype.btype.ctype
    d, a, b, c, e, f``, validated against ``tables.MMA_SP_TYPE_ROWS`` (PTX ISA 9.7.14.6.3, as ptxas
    sm_90a accepts it): ``e`` the metadata register, ``f`` the sparsity selector, an integer
    constant the shape allows."""
    what = "mma.sp"
    spvariant = quals.one("spvariant", "sparse variant")
    shape = quals.shape(_choices(tables.MMA_SP_SHAPES))
    types = quals.get("type")
    row = _mma_row(types, shape, sparse=True)
    dtype, atype, btype, ctype = types
    if (dtype, ctype) not in row.cd_pairs:
        pairs = ", ".join(f".{d}.{c}" for d, c in row.cd_pairs)
        raise _fail(f".dtype .{dtype} with .ctype .{ctype} is not valid for {row.name} {what}; .dtype.ctype: {pairs}")
    if quals.get("layout") != ["row", "col"]:
        raise _fail(f"{what} needs the layouts .row.col, got {_choices(quals.get('layout')) or 'none'}")
    satfinite = bool(quals.get("satfinite"))
    if satfinite and not row.satfinite:
        raise _fail(f".satfinite is not valid on {row.name} {what}; only on integer (.s8/.u8/.s4/.u4) forms")
    inst = MmaSp(opcode, text, operands, spvariant=spvariant, shape=shape, alayout="row", blayout="col",
                 dtype=dtype, atype=atype, btype=btype, ctype=ctype, satfinite=satfinite)
    if operands is None:
        return inst
    form = f".{shape}.{dtype}.{atype}.{btype}.{ctype}"
    if len(operands) != 6:
        raise _fail(f"{what} takes 6 operands d, a, b, c, e, f; got {len(operands)}")
    _dabc_operands(inst, operands[:4], what, form)
    e, f = operands[4:]
    if e.kind != "reg" or e.negated:
        raise _fail(f"{what} operand e (the metadata) must be a 32-bit register, got {e.text!r}")
    allowed = row.selectors[str(shape)]
    if f.kind != "imm" or f.value not in allowed:
        raise _fail(f"{what} {form}: the sparsity selector f must be an integer constant in "
                    f"{_choices(allowed, dot=False)}, got {f.text!r}")
    return dataclasses.replace(inst, selector=f.value)


# ---------------------------------------------------------------- ldmatrix / stmatrix


def _build_matrix_move(opcode, quals, operands, text):
    """``ldmatrix`` / ``stmatrix.sync.aligned.m8n8.num{.trans}{.ss}.b16`` (PTX ISA
    9.7.14.5.15-16), validated against ``tables.MATRIX_MOVE`` (the forms ptxas takes for
    sm_90a); operands ``r, [p]`` (ldmatrix) or ``[p], r`` (stmatrix), ``r`` a vector of
    ``.num`` 32-bit registers."""
    row = tables.MATRIX_MOVE
    shape = quals.one("mshape", "shape")
    if shape not in row.shapes:
        got = f".{shape}" if shape else "none"
        raise _fail(f"{opcode} needs the shape {_choices(row.shapes)} on sm_90a (.m16n16 / .m16n8 are sm_100+); "
                    f"got {got}")
    num = quals.one("num", ".num")
    if num is None:
        raise _fail(f"{opcode} needs .num: one of {_choices(row.nums)} (how many 8x8 matrices)")
    types = quals.get("type")
    if types != ["b16"]:
        raise _fail(f"{opcode}.{shape} needs one type qualifier, {_choices(row.types)} on sm_90a; got "
                    f"{_choices(types) or 'none'}")
    ss = quals.one("ss", "state space")
    if ss is not None and ss not in row.state_spaces:
        raise _fail(f"{opcode} reads or writes shared memory: state space {_choices(row.state_spaces)} or none "
                    f"(a generic address), got .{ss}")
    cls = Ldmatrix if opcode == "ldmatrix" else Stmatrix
    inst = cls(opcode, text, operands, shape=shape, num=int(num[1:]), trans=bool(quals.get("trans")),
               state_space=ss, type=types[0])
    if operands is not None:
        _matrix_move_operands(inst, operands)
    return inst


def _matrix_move_operands(inst, ops) -> None:
    load = isinstance(inst, Ldmatrix)
    form = "r, [p]" if load else "[p], r"
    if len(ops) != 2:
        raise _fail(f"{inst.opcode} takes operands {form}; got {len(ops)}")
    vec, addr = ops if load else ops[::-1]
    if addr.kind != "address":
        raise _fail(f"{inst.opcode}: the address operand must be [p], got {addr.text!r}")
    if vec.kind != "vector" or len(vec.regs) != inst.regs:
        raise _fail(f"{inst.opcode} .x{inst.num}: r must be a vector of {inst.regs} 32-bit registers, got "
                    f"{vec.text!r}")


# ---------------------------------------------------------------- movmatrix


def _build_movmatrix(opcode, quals, operands, text):
    """``movmatrix{.sync.aligned}.m8n8.trans.b16 d, a`` (PTX ISA 9.7.14.5.17), validated against
    ``tables.MOVMATRIX``: ``.trans`` is mandatory (the ISA has no other form); ``d`` and ``a``
    are 32-bit registers."""
    row = tables.MOVMATRIX
    if not quals.get("trans"):
        raise _fail("movmatrix needs .trans (its one form is movmatrix.sync.aligned.m8n8.trans.b16 d, a)")
    shape = quals.one("mshape", "shape")
    if shape not in row.shapes:
        raise _fail(f"movmatrix needs the shape {_choices(row.shapes)}; got {f'.{shape}' if shape else 'none'}")
    types = quals.get("type")
    if types != list(row.types):
        raise _fail(f"movmatrix.{shape} needs one type qualifier, {_choices(row.types)}; got "
                    f"{_choices(types) or 'none'}")
    inst = Movmatrix(opcode, text, operands, shape=shape, type=types[0])
    if operands is not None:
        if len(operands) != 2 or any(o.kind != "reg" or o.negated for o in operands):
            raise _fail(f"movmatrix takes operands d, a: two 32-bit registers; got "
                        f"{', '.join(o.text for o in operands)!r}")
    return inst


_BUILDERS = {
    "wgmma.mma_async": _build_wgmma_mma,
    "wgmma.mma_async.sp": _build_wgmma_mma,
    "wgmma.fence": _build_wgmma_plain,
    "wgmma.commit_group": _build_wgmma_plain,
    "wgmma.wait_group": _build_wgmma_plain,
    "wmma.mma": _build_wmma_mma,
    "wmma.load": _build_wmma_memory,
    "wmma.store": _build_wmma_memory,
    "mma": _build_mma,
    "mma.sp": _build_mma_sp,
    "ldmatrix": _build_matrix_move,
    "stmatrix": _build_matrix_move,
    "movmatrix": _build_movmatrix,
}
