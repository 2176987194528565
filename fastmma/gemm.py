"""``fastmma.matmul``: a whole GEMM with the numbers of a tensor-core k-loop.

``D = A @ B (+ C)`` computed as a GPU kernel would compute it by issuing one instruction per
k-step in increasing k: the accumulator starts at C (or +0), and after every instruction it
is rounded to the instruction's D type.  Each output element is an independent k-loop, so
M and N may be anything; a K that is not a multiple of the instruction's k is zero-padded at
the end, as a kernel's out-of-bounds fill would pad it (zero terms take part in the
hardware's alignment: see :class:`fastmma.isa.numerics.FusedDotRule`).  For the wmma forms
whose C and D types differ (``.f16.f32``, ``.f32.f16``), the first step reads C in its type
and later steps read the accumulator in D's type, as the loop's accumulator fragment holds it.

The k-loop runs through :func:`fastmma.kernels.execute`, the same function every single
instruction uses, so the recorded hardware cases exercise the very kernels a GEMM runs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from .errors import InvalidInstructionError, OperandError
from .formats import as_numpy, from_bits, get_format, to_bits
from .isa import WgmmaMmaAsync, WmmaMma, parse
from .kernels import execute
from .mma import scale_d_flag

SHORT_FORM_PREFIXES = ("wgmma.mma_async.sync.aligned.", "wmma.mma.sync.aligned.row.col.")


def resolve_instruction(instruction):
    """An instruction object from text, a short form or an object.

    Short forms name the shape and types only: ``"m64n256k16.f32.f16.f16"`` is read as
    ``wgmma.mma_async``, ``"m16n16k16.f32.f32"`` or ``"m16n16k8.f32.tf32.tf32.f32"`` as
    ``wmma.mma`` (row.col; the layouts do not change the numbers).
    """
    if isinstance(instruction, (WgmmaMmaAsync, WmmaMma)):
        return instruction
    if not isinstance(instruction, str):
        raise InvalidInstructionError(
            f"instruction must be PTX text, a short form such as 'm64n256k16.f32.f16.f16' or a parsed "
            f"wgmma/wmma instruction, got {type(instruction).__name__}")
    return _resolve_text(instruction.strip())


@lru_cache(maxsize=256)
def _resolve_text(text: str):
    """The parsed instruction of ``text`` (instructions are immutable, so a loop of small
    GEMMs parses each text once)."""
    if text.startswith(("wgmma", "wmma")):
        inst = parse(text)
        if not isinstance(inst, (WgmmaMmaAsync, WmmaMma)):
            raise InvalidInstructionError(f"matmul needs an mma instruction (wgmma.mma_async or wmma.mma), got {inst}")
        return inst
    errors = []
    for prefix in SHORT_FORM_PREFIXES:
        try:
            return parse(prefix + text.lstrip("."))
        except InvalidInstructionError as exc:
            errors.append(f"as {prefix.split('.')[0]}: {exc}")
    raise InvalidInstructionError(f"{text!r} is not a valid short form ({'; '.join(errors)})")


def _operand(x, fmt_name: str, name: str, ndim_shape=None) -> np.ndarray:
    arr = as_numpy(x, name)
    if arr.ndim != 2:
        raise OperandError(f"{name} must be a 2-D matrix, got shape {arr.shape}")
    if ndim_shape is not None and arr.shape != ndim_shape:
        raise OperandError(f"{name} must have shape {ndim_shape}, got {arr.shape}")
    return np.ascontiguousarray(to_bits(arr, get_format(fmt_name), name))


def _pad_k(a: np.ndarray, b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero-pad K up to a positive multiple of ``k``."""
    kk = a.shape[1]
    pad = (-kk) % k if kk else k
    if pad:
        a = np.concatenate([a, np.zeros((a.shape[0], pad), a.dtype)], axis=1)
        b = np.concatenate([b, np.zeros((pad, b.shape[1]), b.dtype)], axis=0)
    return a, b


def matmul(A, B, C=None, *, instruction, scale_d: bool | None = None, progress=None) -> np.ndarray:
    """``D = A @ B + C`` with the exact numbers of a k-loop of ``instruction``.

    ``A`` (M, K) and ``B`` (K, N) hold the instruction's input types (numpy / ml_dtypes
    arrays, torch tensors, any strides), ``C`` (M, N) its accumulator type or None.  The
    instruction's immediates apply (imm-scale-a/b = -1 negate A/B).  Returns a new (M, N)
    array of the accumulator type.  ``progress(done, total)``, if given, is called as blocks
    of columns complete (the CLI's progress bar); the numbers do not depend on it.
    """
    inst = resolve_instruction(instruction)
    checked_progress(progress)
    a = _operand(A, inst.atype, "A")
    b = _operand(B, inst.btype, "B")
    m, kk = a.shape
    if b.shape[0] != kk:
        raise OperandError(f"A is {a.shape[0]}x{kk} and B is {b.shape[0]}x{b.shape[1]}: their K must agree")
    n = b.shape[1]
    ctype, dtype = inst.ctype, inst.dtype
    scales_c = scale_d is None or scale_d_flag(scale_d)  # checked even where there is no C
    use_c = C is not None and scales_c
    # with no C, no kernel reads C's values (use_c=False), so it needs no zeros
    c = _operand(C, ctype, "C", (m, n)) if C is not None else np.empty((m, n), get_format(ctype).storage)
    if kk == 0 and ctype == dtype:  # no instruction runs: D is C, bit for bit (or +0)
        return from_bits(c.copy() if use_c else np.zeros_like(c), dtype)
    a, b = _pad_k(a, b, inst.shape.k)  # K = 0 with C of another type: one zero step
    run = _k_loop(inst, use_c)
    if progress is None:
        return from_bits(run(a, b, c), dtype)
    return from_bits(_by_column_blocks(run, a, b, c, get_format(dtype).storage, progress), dtype)


def checked_progress(progress):
    """``progress`` if it is None or a callable ``progress(done, total)``; anything else is an
    error before the GEMM starts, not a TypeError at its first block."""
    if progress is not None and not callable(progress):
        raise OperandError(f"progress must be a callable progress(done, total) or None, got {progress!r}")
    return progress


def accumulator_instruction(inst):
    """The instruction a k-loop issues after its first step: the same one, but reading its
    C in D's type (the accumulator the loop carries).  Differs only for the wmma f16 forms
    whose C and D types differ."""
    return inst if inst.ctype == inst.dtype else replace(inst, ctype=inst.dtype)


def _k_loop(inst, use_c):
    """(a, b, c) -> d bits: the whole k-loop; a first step of C's type, if it differs."""
    rest = accumulator_instruction(inst)
    if rest is inst:
        return _kernel(inst, use_c)
    k = inst.shape.k
    first, then = _kernel(inst, use_c), _kernel(rest, True)

    def run(a, b, c):
        d = first(np.ascontiguousarray(a[:, :k]), np.ascontiguousarray(b[:k]), c)
        if a.shape[1] == k:
            return d
        return then(np.ascontiguousarray(a[:, k:]), np.ascontiguousarray(b[k:]), d)
    return run


def _by_column_blocks(run, a, b, c, storage, progress, width: int = 512):
    n = b.shape[1]
    d = np.empty((a.shape[0], n), storage)
    for j0 in range(0, n, width):
        j1 = min(n, j0 + width)
        d[:, j0:j1] = run(a, np.ascontiguousarray(b[:, j0:j1]), np.ascontiguousarray(c[:, j0:j1]))
        progress(j1, n)
    return d


def _kernel(inst, use_c):
    """A function (a_bits, b_bits, c_bits) -> d_bits: ``inst``'s rule over a whole k-loop."""
    neg_a = getattr(inst, "imm_scale_a", 1) == -1
    neg_b = getattr(inst, "imm_scale_b", 1) == -1
    return lambda a, b, c: execute(inst.rule, a, b, c, inst.atype, inst.btype, inst.ctype, inst.dtype,
                                   use_c=use_c, neg_a=neg_a, neg_b=neg_b)
