"""``fastmma.matmul``: a whole GEMM with the numbers of a tensor-core k-loop.

``D = A @ B (+ C)`` computed as a GPU kernel would compute it by issuing one instruction per
k-step in increasing k: the accumulator starts at C (or +0), and after every instruction it
is rounded to the instruction's D type.  Each output element is an independent k-loop, so
M and N may be anything; a K that is not a multiple of the instruction's k is zero-padded at
the end, as a kernel's out-of-bounds fill would pad it (zero terms take part in the
hardware's alignment: see :class:`fastmma.isa.numerics.FusedDotRule`).  For the wmma forms
whose C and D types differ (``.f16.f32``, ``.f32.f16``), the first step reads C in its type
and later steps read the accumulator in D's type, as the loop's accumulator fragment holds it.
Stacks of matrices broadcast as in ``numpy.matmul``, each matrix its own GEMM.

The k-loop runs through :func:`fastmma.kernels.execute`, the same function every single
instruction uses, so the recorded hardware cases exercise the very kernels a GEMM runs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np

from .errors import OperandError
from .formats import as_numpy, from_bits, get_format
from .isa.short_form import dense_kinds, resolve
from .kernels import execute, execute_stack, stack_run
from .mma import batch_shape, flat_stack, scale_d_flag, stack_bits
from .validate import public, working_set


def resolve_instruction(instruction):
    """An instruction object from text, a short form or an object.

    Short forms name the shape and types only (:mod:`fastmma.isa.short_form`):
    ``"m64n256k16.f32.f16.f16"`` is read as ``wgmma.mma_async``, ``"m16n16k16.f32.f32"`` or
    ``"m16n16k8.f32.tf32.tf32.f32"`` as ``wmma.mma`` (row.col; the layouts do not change the
    numbers), ``"m16n8k16.f32.f16.f16.f32"`` as ``mma.sync`` (a shape that both wmma and mma
    have, such as ``m8n8k4`` f64, is read as wmma: the two compute the same numbers there).
    """
    return resolve(instruction, DENSE)


DENSE = dense_kinds("matmul", "fastmma.matmul_sp")


def decoding(A: np.ndarray, B: np.ndarray, C) -> None:
    """Refuse, before anything is allocated, a GEMM whose operands the kernels could not
    decode in this process's memory: they hold A, B (and C) and D at up to 4 bytes an element,
    beside the contiguous copies of any strided or broadcast operand."""
    if A.ndim < 2 or B.ndim < 2:
        return  # stack_bits names the operand
    batch = max(math.prod(A.shape[:-2]), math.prod(B.shape[:-2]), 1)
    m, k, n = A.shape[-2], A.shape[-1], B.shape[-1]
    working_set({"A": A, "B": B}, 4 * batch * (m * k + k * n + 2 * m * n), m, k, n, batch)


def _pad_k(a: np.ndarray, b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero-pad K up to a positive multiple of ``k`` (of one GEMM, or of a stack)."""
    kk = a.shape[-1]
    pad = (-kk) % k if kk else k
    if pad:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (pad,), a.dtype)], axis=-1)
        b = np.concatenate([b, np.zeros(b.shape[:-2] + (pad, b.shape[-1]), b.dtype)], axis=-2)
    return a, b


@public
def matmul(A, B, C=None, *, instruction, scale_d: bool | None = None, progress=None) -> np.ndarray:
    """``D = A @ B + C`` with the exact numbers of a k-loop of ``instruction``.

    ``A`` (M, K) and ``B`` (K, N) hold the instruction's input types (numpy / ml_dtypes
    arrays, torch tensors, any strides), ``C`` (M, N) its accumulator type or None.  The
    instruction's immediates apply (imm-scale-a/b = -1 negate A/B).  Returns a new (M, N)
    array of the accumulator type.

    Stacks of matrices multiply as in ``numpy.matmul``: ``A`` (..., M, K), ``B`` (..., K, N)
    and ``C`` (..., M, N) have their leading (batch) dimensions broadcast together, and D is
    (batch..., M, N); each matrix of the stack is its own GEMM, bit for bit what the 2-D call
    on that matrix gives.  Operands need at least two dimensions (a vector is a 1 x K or
    K x 1 matrix).

    ``progress(done, total)``, if given, is called as blocks of the output complete (the
    CLI's progress bar), ``done`` rising to ``total``; the numbers do not depend on it.

    Raises :class:`~fastmma.errors.InvalidInstructionError` for an instruction that is not a
    dense mma instruction (``matmul_sp`` takes the sparse ones), and
    :class:`~fastmma.errors.OperandError` for operands of the wrong type or of shapes that do
    not fit.  Example: ``fastmma.matmul(A, B, instruction="m64n256k16.f32.f16.f16")``.
    """
    inst = resolve_instruction(instruction)
    checked_progress(progress)
    A, B = as_numpy(A, "A"), as_numpy(B, "B")
    decoding(A, B, C)
    a = stack_bits(A, inst.atype, "A")
    b = stack_bits(B, inst.btype, "B")
    m, kk = a.shape[-2:]
    if b.shape[-2] != kk:
        raise OperandError(f"A is {m}x{kk} and B is {b.shape[-2]}x{b.shape[-1]}: their K must agree")
    n = b.shape[-1]
    c = None if C is None else stack_bits(C, inst.ctype, "C")
    if c is not None and c.shape[-2:] != (m, n):
        raise OperandError(f"C must have shape {(m, n)} (or a stack of such matrices), got {c.shape}")
    batch = batch_shape(a, b, c)
    scales_c = scale_d is None or scale_d_flag(scale_d)  # checked even where there is no C
    c = c if scales_c else None
    if not batch:
        return from_bits(_matmul_bits(inst, a, b, c, progress), inst.dtype)
    if 0 in batch:
        return from_bits(np.empty(batch + (m, n), get_format(inst.dtype).storage), inst.dtype)
    if all(s == 1 for s in b.shape[:-2]):  # one B for the whole stack: A's rows stacked, one GEMM
        d = _matmul_bits(inst, _rows(a, batch), b.reshape(kk, n), None if c is None else _rows(c, batch), progress)
        return from_bits(d.reshape(batch + (m, n)), inst.dtype)
    if all(s == 1 for s in a.shape[:-2]):  # one A: B's columns stacked side by side
        d = _matmul_bits(inst, a.reshape(m, kk), _columns(b, batch), None if c is None else _columns(c, batch),
                         progress)
        return from_bits(np.ascontiguousarray(np.moveaxis(d.reshape((m,) + batch + (n,)), 0, -2)), inst.dtype)
    return from_bits(_stack(inst, a, b, c, batch, progress), inst.dtype)


def _rows(x, batch):
    """A stack of matrices broadcast to ``batch`` as one matrix: their rows one after another."""
    return np.broadcast_to(x, batch + x.shape[-2:]).reshape(math.prod(batch) * x.shape[-2], x.shape[-1])


def _columns(x, batch):
    """A stack of matrices broadcast to ``batch`` as one matrix: their columns side by side."""
    rows = x.shape[-2]
    return np.moveaxis(np.broadcast_to(x, batch + x.shape[-2:]), -2, 0).reshape(rows, math.prod(batch) * x.shape[-1])


def _stack(inst, a, b, c, batch, progress):
    """D bits of a stack whose A and B both vary (:func:`fastmma.kernels.execute_stack`).
    ``progress`` counts the output columns of all its GEMMs, after each call of the stack
    kernels (:func:`fastmma.kernels.stack_run` GEMMs), or by blocks of columns for a GEMM
    that runs by itself."""
    m, kk, n = a.shape[-2], a.shape[-1], b.shape[-1]
    a, b, c = flat_stack(a, batch), flat_stack(b, batch), None if c is None else flat_stack(c, batch)
    if progress is None:
        return _matmul_bits(inst, a, b, c, None).reshape(batch + (m, n))
    count = a.shape[0]
    run = stack_run(m, kk, n)
    d = np.empty((count, m, n), get_format(inst.dtype).storage)
    for s0 in range(0, count, run):
        s1 = min(count, s0 + run)
        part = slice(s0, s1) if s1 - s0 > 1 else s0  # one GEMM: the 2-D call, its progress by columns
        step = None if s1 - s0 > 1 else (lambda done, total, s0=s0: progress(s0 * total + done, count * total))
        d[part] = _matmul_bits(inst, a[part], b[part], None if c is None else c[part], step)
        if s1 - s0 > 1:
            progress(s1 * n, count * n)
    return d.reshape(batch + (m, n))


def _matmul_bits(inst, a, b, c, progress):
    """D bits of one GEMM, A (M, K) by B (K, N), or of a stack of them, A (S, M, K) by B
    (S, K, N), from raw bits; ``c`` None where no kernel reads C (none given, or scale-d
    false).  ``progress`` only for one GEMM."""
    shape = a.shape[:-1] + b.shape[-1:]
    ctype, dtype = inst.ctype, inst.dtype
    use_c = c is not None
    c = np.ascontiguousarray(c) if use_c else np.empty(shape, get_format(ctype).storage)  # no kernel reads it
    if a.shape[-1] == 0 and ctype == dtype:  # no instruction runs: D is C, bit for bit (or +0)
        return c.copy() if use_c else np.zeros_like(c)
    # K = 0 with C of another type: one zero step
    a, b = _pad_k(np.ascontiguousarray(a), np.ascontiguousarray(b), inst.shape.k)
    run = _k_loop(inst, use_c)
    if progress is None:
        return run(a, b, c)
    return _by_column_blocks(run, a, b, c, get_format(dtype).storage, progress)


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


@lru_cache(maxsize=256)
def _k_loop(inst, use_c):
    """(a, b, c) -> d bits: the whole k-loop; a first step of C's type, if it differs."""
    rest = accumulator_instruction(inst)
    if rest is inst:
        return _kernel(inst, use_c)
    k = inst.shape.k
    first, then = _kernel(inst, use_c), _kernel(rest, True)

    def run(a, b, c):
        d = first(np.ascontiguousarray(a[..., :k]), np.ascontiguousarray(b[..., :k, :]), c)
        if a.shape[-1] == k:
            return d
        return then(np.ascontiguousarray(a[..., k:]), np.ascontiguousarray(b[..., k:, :]), d)
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
    """A function (a_bits, b_bits, c_bits) -> d_bits: ``inst``'s rule over a whole k-loop,
    of one GEMM or of a stack of them (3-D operands)."""
    neg_a = getattr(inst, "imm_scale_a", 1) == -1
    neg_b = getattr(inst, "imm_scale_b", 1) == -1
    return lambda a, b, c: (execute if a.ndim == 2 else execute_stack)(
        inst.rule, a, b, c, inst.atype, inst.btype, inst.ctype, inst.dtype, use_c=use_c, neg_a=neg_a, neg_b=neg_b)
