"""Short forms: an mma instruction named by its shape and types alone (``"m64n256k16.f32.f16.f16"``).

The logical-matrix entry points (``fastmma.mma``, ``fastmma.mma_sp``, ``fastmma.matmul``,
``fastmma.matmul_sp``) take them, since there the layouts and the operands do not change the
numbers.  A short form is tried as PTX text of each of its entry point's instruction kinds in
turn (:class:`InstructionKinds`), in the ISA's order of qualifiers: wmma's layouts come before
the shape, mma's after it; the first that parses is the instruction.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from ..errors import InvalidInstructionError
from .near_miss import did_you_mean, is_qualifier
from .instruction import Instruction, MmaSp, MmaSync, WgmmaMmaAsync, WgmmaMmaAsyncSp, WmmaMma
from .parser import parse
from ..validate import excerpt

#: The dense instructions a short form is read as, in order: a shape that both wmma and mma
#: have (``m8n8k4`` f64) is read as wmma, which computes the same numbers there.
DENSE_TEMPLATES = ("wgmma.mma_async.sync.aligned.{shape}.{types}", "wmma.mma.sync.aligned.row.col.{shape}.{types}",
                   "mma.sync.aligned.{shape}.row.col.{types}")

#: The sparse ones: ``wgmma.mma_async.sp``, then ``mma.sp`` (row.col).
SPARSE_TEMPLATES = ("wgmma.mma_async.sp.sync.aligned.{shape}.{types}", "mma.sp.sync.aligned.{shape}.row.col.{types}")

DENSE_CLASSES = (WgmmaMmaAsync, WmmaMma, MmaSync)
SPARSE_CLASSES = (MmaSp, WgmmaMmaAsyncSp)

_SHORT_FORM = re.compile(r"\.?m\d+n\d+k\d+(\..*)?")


class InstructionKinds(NamedTuple):
    """What an entry point takes: instruction classes, the PTX templates its short forms are
    tried as (in order), a short form for the messages, and what it needs, in words."""

    classes: tuple
    templates: tuple[str, ...]
    example: str
    needs: str


def dense_kinds(entry: str, sparse_entry: str) -> InstructionKinds:
    """The dense mma instructions, as ``entry`` takes them (``sparse_entry`` takes the sparse ones)."""
    return InstructionKinds(DENSE_CLASSES, DENSE_TEMPLATES, "m64n256k16.f32.f16.f16",
                            f"{entry} needs a dense mma instruction (wgmma.mma_async, wmma.mma or mma.sync; "
                            f"{sparse_entry} takes mma.sp and wgmma.mma_async.sp)")


def sparse_kinds(entry: str, dense_entry: str) -> InstructionKinds:
    """The sparse mma instructions, as ``entry`` takes them (``dense_entry`` takes the dense ones)."""
    return InstructionKinds(SPARSE_CLASSES, SPARSE_TEMPLATES, "m64n256k32.f32.f16.f16",
                            f"{entry} needs a sparse instruction (mma.sp or wgmma.mma_async.sp); {dense_entry} "
                            f"takes the dense ones")


def resolve(instruction, kinds: InstructionKinds) -> Instruction:
    """An instruction of ``kinds`` from PTX text, a short form or a parsed instruction;
    :class:`~fastmma.errors.InvalidInstructionError` naming what was wanted otherwise."""
    if isinstance(instruction, kinds.classes):
        return instruction
    if isinstance(instruction, Instruction):
        raise InvalidInstructionError(f"{kinds.needs}, got {instruction}")
    if not isinstance(instruction, str):
        names = "/".join(c.__name__ for c in kinds.classes)
        raise InvalidInstructionError(
            f"instruction must be PTX text, a short form such as {kinds.example!r} or a parsed {names} instruction, "
            f"got {type(instruction).__name__}")
    return _resolve_text(instruction.strip(), kinds)


@lru_cache(maxsize=256)
def _resolve_text(text: str, kinds: InstructionKinds) -> Instruction:
    """The parsed instruction of ``text`` (instructions are immutable, so a loop of small
    GEMMs parses each text once)."""
    if not _SHORT_FORM.fullmatch(text):
        inst = parse(text)
        if not isinstance(inst, kinds.classes):
            raise InvalidInstructionError(f"{kinds.needs}, got {inst}")
        return inst
    shape, _, types = text.lstrip(".").partition(".")
    errors = {}
    for template in kinds.templates:
        try:
            return parse(template.format(shape=shape, types=types))
        except InvalidInstructionError as exc:
            errors[template.split(".sync")[0]] = str(exc)
    hint = _near_miss(types)
    if hint:
        raise InvalidInstructionError(f"'{excerpt(text)}' is not a valid short form: {hint}")
    other = _other_family(shape, types, kinds)
    if other is not None:
        raise InvalidInstructionError(f"{kinds.needs}; short form {excerpt(text)} reads as {other.opcode}")
    family = next((f for f in errors if f.startswith("wgmma") == shape.startswith("m64n")), next(iter(errors)))
    others = " or ".join(f for f in errors if f != family)
    raise InvalidInstructionError(f"'{excerpt(text)}' is not a valid short form (as {family}: {errors[family]}"
                                  + (f"; nor a {others} form)" if others else ")"))


def _near_miss(types: str) -> str | None:
    """``qualifier .f17 is no PTX qualifier; did you mean .f16?`` for the first qualifier of
    ``types`` that no matrix instruction has and that is close to one that some has."""
    for token in types.split("."):
        if token and not is_qualifier(token):
            hint = did_you_mean(token)
            if hint:
                return f"qualifier .{token} is no PTX qualifier of a matrix instruction; did you mean .{hint}?"
    return None


def _other_family(shape: str, types: str, kinds: InstructionKinds):
    """The instruction a failed short form is in the other family (dense or sparse), or None:
    a sparse shape given to a dense entry point is pointed to the sparse one, and back."""
    types = types.removesuffix(".sp")
    for template in SPARSE_TEMPLATES + DENSE_TEMPLATES:
        if template not in kinds.templates:
            try:
                return parse(template.format(shape=shape, types=types))
            except InvalidInstructionError:
                continue
    return None
