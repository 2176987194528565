"""PTX types and values: register types, literals, type agreement, the caller's values.

* **Register types** (PTX ISA 5.2 "Types", 5.1.1 "Register State Space"): ``.pred``, ``.b8`` ...
  ``.b64``, ``.u8`` ... ``.u64``, ``.s8`` ... ``.s64``, ``.f16``, ``.f16x2``, ``.bf16``,
  ``.bf16x2``, ``.f32``, ``.f64``.  A register holds raw bits: ``bool`` for predicates, else
  the unsigned integer of its width, one value per thread.
* **Type agreement** (9.4 "Type Information for Instructions and Operands"): an operand
  agrees with an instruction type of the same size if either is a bit-size type, if both are
  integer types, or if both are the same floating-point type.
* **Literals** (4.5, 4.6): integer literals are 64-bit, converted to the instruction type's
  size (here: they must fit, as signed or unsigned); decimal floating-point literals are f64,
  rounded to nearest even to the instruction type's size; ``0f`` keeps its exact f32 bits,
  ``0d`` its exact f64 bits.  Integer literals as predicates: zero is false.  Integer literals
  are not floating-point operands and floating-point literals not integer ones (same rules).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..errors import OperandError
from ..validate import excerpt
from ..formats import as_numpy
from ..isa.parser import unsigned_literal

STORAGE = {1: np.dtype(np.bool_), 8: np.dtype(np.uint8), 16: np.dtype(np.uint16),
           32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}
"""Width in bits -> the dtype of a register's raw per-thread values."""


@dataclass(frozen=True)
class PtxType:
    """One register or instruction type: ``name`` without the dot, width, kind, value dtype.

    ``kind`` is ``"pred"``, ``"b"`` (bit-size), ``"u"``, ``"s"`` or ``"f"``.
    """

    name: str
    bits: int
    kind: str
    view: np.dtype

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype of a register's raw per-thread values: bool for a predicate, else the unsigned
        integer of its width."""
        return STORAGE[self.bits]

    def __str__(self) -> str:
        return "." + self.name


def _t(name, bits, kind, view):
    return PtxType(name, bits, kind, np.dtype(view))


TYPES: dict[str, PtxType] = {t.name: t for t in (
    _t("pred", 1, "pred", np.bool_),
    _t("b8", 8, "b", np.uint8), _t("b16", 16, "b", np.uint16),
    _t("b32", 32, "b", np.uint32), _t("b64", 64, "b", np.uint64),
    _t("u8", 8, "u", np.uint8), _t("u16", 16, "u", np.uint16),
    _t("u32", 32, "u", np.uint32), _t("u64", 64, "u", np.uint64),
    _t("s8", 8, "s", np.int8), _t("s16", 16, "s", np.int16),
    _t("s32", 32, "s", np.int32), _t("s64", 64, "s", np.int64),
    _t("f16", 16, "f", np.float16), _t("bf16", 16, "f", ml_dtypes.bfloat16),
    _t("f16x2", 32, "f", np.uint32), _t("bf16x2", 32, "f", np.uint32),
    _t("f32", 32, "f", np.float32), _t("f64", 64, "f", np.float64),
)}
"""Every register type fastmma.ptx declares, by name."""

KNOWN_UNSUPPORTED_TYPES = frozenset({"b128", "tf32", "e4m3", "e5m2", "e4m3x2", "e5m2x2", "s16x2",
                                     "u16x2", "s8x4", "u8x4", "e2m1x2", "e3m2x2", "e2m3x2", "ue8m0x2"})
"""PTX types that exist but that fastmma.ptx registers do not hold."""

U32 = TYPES["u32"]

_FLOAT_OF_WIDTH = {16: np.float16, 32: np.float32, 64: np.float64}


def ptx_type(name: str) -> PtxType | None:
    """The type named ``name`` (with or without its dot), or None."""
    return TYPES.get(name.lstrip("."))


def agrees(instr: PtxType, operand: PtxType) -> bool:
    """PTX ISA 9.4 type checking: does an operand of type ``operand`` fit instruction type ``instr``?"""
    if instr.kind == "pred" or operand.kind == "pred":
        return instr.kind == operand.kind
    if instr.bits != operand.bits:
        return False
    if "b" in (instr.kind, operand.kind):
        return True
    if instr.kind == "f" or operand.kind == "f":
        return instr.name == operand.name
    return True


# ---------------------------------------------------------------------- literals


@dataclass(frozen=True)
class Literal:
    """A numeric literal as written: ``kind`` ``"int"``, ``"f32hex"``, ``"f64hex"`` or ``"dec"``."""

    kind: str
    value: int | float
    text: str


def parse_literal(text: str, negative: bool = False) -> Literal:
    """The literal spelled ``text`` (a lexer number token), negated when ``negative``."""
    sign = "-" if negative else ""
    head = text[:2]
    if head in ("0f", "0F") and len(text) == 10:
        bits = int(text[2:], 16) ^ (0x80000000 if negative else 0)
        return Literal("f32hex", bits, sign + text)
    if head in ("0d", "0D") and len(text) == 18:
        bits = int(text[2:], 16) ^ ((1 << 63) if negative else 0)
        return Literal("f64hex", bits, sign + text)
    if any(c in text for c in ".eE") and head not in ("0x", "0X"):
        value = float(text)
        return Literal("dec", -value if negative else value, sign + text)
    value = unsigned_literal(text)
    return Literal("int", -value if negative else value, sign + text)


def literal_bits(lit: Literal, t: PtxType) -> int:
    """The bits that ``lit`` stands for as an operand of instruction type ``t``.

    Raises ``ValueError`` with the reason when the literal does not agree with ``t``.
    """
    if t.kind == "pred":
        if lit.kind != "int":
            raise ValueError("a predicate takes an integer constant (0 is false)")
        return int(lit.value != 0)
    if lit.kind == "int":
        if t.kind == "f":
            raise ValueError(f"a {t} operand takes a floating-point literal (e.g. 1.0 or 0f3F800000), "
                             f"not the integer {lit.text}")
        if not -(1 << (t.bits - 1)) <= lit.value < 1 << t.bits:
            raise ValueError(f"{lit.text} does not fit in {t.bits} bits")
        return lit.value & ((1 << t.bits) - 1)
    if t.kind in ("u", "s"):
        raise ValueError(f"an integer {t} operand cannot take the floating-point literal {lit.text}")
    if t.bits not in _FLOAT_OF_WIDTH or t.name in ("bf16", "f16x2", "bf16x2"):
        raise ValueError(f"a {t} operand cannot take a floating-point literal")
    return _float_bits(lit, t.bits)


def _float_bits(lit: Literal, bits: int) -> int:
    if lit.kind == "f32hex" and bits == 32:
        return lit.value
    if lit.kind == "f64hex" and bits == 64:
        return lit.value
    if lit.kind == "f32hex":
        value = np.array([lit.value], np.uint32).view(np.float32).astype(np.float64)[0]
    elif lit.kind == "f64hex":
        value = np.array([lit.value], np.uint64).view(np.float64)[0]
    else:
        value = np.float64(lit.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rounded = np.array([value], np.float64).astype(_FLOAT_OF_WIDTH[bits])
    return int(rounded.view(STORAGE[bits])[0])


# ---------------------------------------------------------------------- caller values


def infer_type(values, name: str) -> PtxType:
    """The register type of caller values for a register the source does not declare.

    ``(type, values)`` names it; numpy values give it by dtype; Python bools are predicates.
    """
    if isinstance(values, tuple) and len(values) == 2 and isinstance(values[0], str):
        t = ptx_type(values[0])
        if t is None:
            raise OperandError(f"register {name}: unknown type {values[0]!r}; types: "
                               f"{', '.join('.' + n for n in TYPES)}")
        return t
    if isinstance(values, (bool, np.bool_)):
        return TYPES["pred"]
    if isinstance(values, (np.ndarray, np.generic)):
        for t in TYPES.values():
            if values.dtype == t.view and t.name not in ("f16x2", "bf16x2") and \
                    (t.kind != "b" or values.dtype.kind not in "u"):
                return t
    raise OperandError(
        f"register {name} is not declared in the source, and its type cannot be told from "
        f"{type(values).__name__} values: declare it (.reg) or pass a numpy value "
        f"(np.uint64(...), np.float32 array, ...) or (type, values), e.g. ('b64', 0x1234)")


def caller_values(values):
    """The values part of a caller's ``values`` or ``(type, values)``."""
    if isinstance(values, tuple) and len(values) == 2 and isinstance(values[0], str):
        return values[1]
    return values


def coerce(values, t: PtxType, threads: int, name: str) -> np.ndarray:
    """Caller values as the raw bits (``t.storage``) of register ``name`` in ``threads`` threads.

    A scalar is broadcast; an array must hold one value per thread.  Integers are bit
    patterns (two's complement; they must fit the width); floats are values, rounded to
    nearest to a floating-point register's format (or to the float of a bit-size register's
    width); bools are predicates.
    """
    arr = as_numpy(caller_values(values), f"register {name}")
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != threads):
        raise OperandError(f"register {name}: give a scalar or one value per thread (shape ({threads},)), "
                           f"got shape {arr.shape}")
    bits = _to_bits(arr, t, name)
    return np.broadcast_to(bits, (threads,)).astype(t.storage, copy=True)


def _to_bits(arr: np.ndarray, t: PtxType, name: str) -> np.ndarray:
    if t.kind == "pred":
        if arr.dtype == np.bool_ or (arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all()):
            return arr.astype(np.bool_)
        raise OperandError(f"register {name} is a predicate: give bools or 0/1, got {arr.dtype} values")
    if arr.dtype == np.bool_:
        return arr.astype(t.storage)
    if arr.dtype.kind in "iu":
        return _int_bits(arr, t, name)
    if arr.dtype.kind == "f" or arr.dtype == ml_dtypes.bfloat16:
        return _float_values_bits(arr, t, name)
    if arr.dtype == object and all(isinstance(v, int) for v in arr.flat):  # Python ints past 64 bits
        _out_of_range(t, name, arr)
    raise OperandError(f"register {name} ({t}) takes integers (bit patterns), floats or bools, got "
                       f"{arr.dtype} values")


def _out_of_range(t: PtxType, name: str, arr: np.ndarray):
    """The error for integers that do not fit register ``name`` of type ``t``."""
    lo, hi = -(1 << (t.bits - 1)), (1 << t.bits) - 1
    worst = max((int(v) for v in arr.flat), key=lambda v: max(lo - v, v - hi))
    raise OperandError(f"register {name} ({t}): integer values must lie in [{lo}, {hi}] ({t.bits} bits, signed "
                       f"or unsigned), got {excerpt(worst)}")


def _int_bits(arr: np.ndarray, t: PtxType, name: str) -> np.ndarray:
    if arr.dtype.itemsize * 8 == t.bits:
        return arr.view(t.storage)
    if arr.size and (int(arr.min()) < -(1 << (t.bits - 1)) or int(arr.max()) >= 1 << t.bits):
        _out_of_range(t, name, arr)
    wide = arr.astype(np.int64)  # fits: |values| < 2**bits <= 2**32 here, or a 64-bit view above
    return (wide.view(np.uint64) & np.uint64((1 << t.bits) - 1)).astype(t.storage)


def _float_values_bits(arr: np.ndarray, t: PtxType, name: str) -> np.ndarray:
    if t.kind == "f" and t.name not in ("f16x2", "bf16x2"):
        target = t.view
    elif t.kind == "b" and t.bits in _FLOAT_OF_WIDTH:
        target = np.dtype(_FLOAT_OF_WIDTH[t.bits])
    else:
        raise OperandError(f"register {name} ({t}) takes integer bit patterns, not {arr.dtype} values")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return arr.astype(target).view(t.storage)


def typed(bits: np.ndarray, t: PtxType) -> np.ndarray:
    """Raw register bits viewed as the type's values (``float32`` for ``.f32``, ...)."""
    return bits.view(t.view) if t.kind != "pred" else bits.astype(np.bool_)
