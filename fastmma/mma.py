"""``fastmma.mma``: one wgmma, wmma or mma instruction on logical matrices.

The matrix-level view: A is M×K, B is K×N, C and D are M×N, exactly the instruction's
shape, in the user-facing dtypes of :mod:`fastmma.formats` (``float16``, ``bfloat16``,
``float32`` for tf32, ``float8_e4m3fn``, ``float8_e5m2``, ``int8``/``uint8``, s4 as int8 in
[-8, 7], u4 as uint8 in [0, 15], b1 as bool or 0/1, ``float64``).  Where an element lives
in registers or memory does not matter here: see :mod:`fastmma.wmma`, :mod:`fastmma.mma_sync`
and :mod:`fastmma.wgmma` for that.
"""

from __future__ import annotations

import functools
import importlib
import math

import numpy as np

from . import kernels
from .errors import InvalidInstructionError, OperandError
from .formats import as_numpy, from_bits, get_format, to_bits
from .isa import FusedDotRule, Instruction, MmaSp, WgmmaMmaAsyncSp, parse
from .isa.short_form import dense_kinds, resolve, sparse_kinds
from .kernels import execute, execute_rows, execute_stack
from .kernels.operands import read_only
from .layout.sparse_metadata import check_columns, check_warpgroup_columns
from .validate import decoded, public, quote


MMA = dense_kinds("fastmma.mma", "fastmma.mma_sp")
MMA_SP = sparse_kinds("fastmma.mma_sp", "fastmma.mma")


def as_instruction(instruction, allowed: tuple) -> Instruction:
    """An instruction object from text or an object, checked to be one of ``allowed``."""
    inst = parse(instruction) if isinstance(instruction, str) else instruction
    if not isinstance(inst, allowed):
        names = " or ".join(c.__name__ for c in allowed)
        hint = ""
        if isinstance(inst, (MmaSp, WgmmaMmaAsyncSp)) and MmaSp not in allowed and WgmmaMmaAsyncSp not in allowed:
            hint = (" (a sparse instruction: fastmma.mma_sp takes it on logical matrices, "
                    + ("fastmma.wgmma.mma_async_sp" if isinstance(inst, WgmmaMmaAsyncSp) else "fastmma.mma_sync.mma_sp")
                    + " on registers)")
        raise InvalidInstructionError(f"expected a {names} instruction, got {inst!s}{hint}")
    return inst


@public
def mma(instruction, A, B, C=None, *, scale_d: bool | None = None) -> np.ndarray:
    """D = A · B + C with the exact numerics of one ``wgmma.mma_async``, ``wmma.mma`` or ``mma.sync``.

    ``instruction`` is PTX text (operands optional), a short form of its shape and types as
    :func:`fastmma.matmul` reads it (``"m64n256k16.f32.f16.f16"`` is ``wgmma.mma_async``) or
    a parsed instruction.  For wgmma,
    ``imm-scale-a/b = -1`` negate A/B; C is used when it is given and ``scale_d`` (default:
    the instruction's immediate scale-d, or true) holds.  Returns D in the accumulator's
    dtype.  ``mma.sync.m8n8k4`` with f16 inputs computes four products a warp, one per quad
    pair; here A (8, 4), B (4, 8) and C (8, 8) are one of them.

    Stacks of operands, A (..., M, K), B (..., K, N) and C (..., M, N) with their leading
    dimensions broadcast as in ``numpy.matmul``, issue the instruction once per matrix of the
    stack (the warpgroups of a simulator, say) in one call: D is (..., M, N).

    Raises :class:`~fastmma.errors.InvalidInstructionError` for text that is no dense mma
    instruction, and :class:`~fastmma.errors.OperandError` for operands of the wrong type or
    shape.  Example: ``fastmma.mma("m64n8k16.f32.f16.f16", A, B, C)``.
    """
    inst = resolve(instruction, MMA)
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    ctype = inst.ctype
    a = stack_bits(A, inst.atype, "A", (m, k))
    b = stack_bits(B, inst.btype, "B", (k, n))
    scales_c = _scale_d(inst) if scale_d is None else scale_d_flag(scale_d)  # checked even where there is no C
    use_c = C is not None and scales_c
    c = np.zeros((m, n), get_format(ctype).storage) if C is None else stack_bits(C, ctype, "C", (m, n))
    batch = batch_shape(a, b, c)
    neg_a = getattr(inst, "imm_scale_a", 1) == -1
    neg_b = getattr(inst, "imm_scale_b", 1) == -1
    if not batch:
        d = execute(inst.rule, a, b, c, inst.atype, inst.btype, ctype, inst.dtype,
                    use_c=use_c, neg_a=neg_a, neg_b=neg_b)
        return from_bits(d, inst.dtype)
    d = execute_stack(inst.rule, flat_stack(a, batch), flat_stack(b, batch), flat_stack(c, batch),
                      inst.atype, inst.btype, ctype, inst.dtype, use_c=use_c, neg_a=neg_a, neg_b=neg_b)
    return from_bits(d.reshape(batch + (m, n)), inst.dtype)


@public
def mma_sp(instruction, A, columns, B, C=None) -> np.ndarray:
    """D = A · B + C with the exact numerics of one ``mma.sp`` / ``mma.sp::ordered_metadata``
    (PTX ISA 9.7.14.6) or ``wgmma.mma_async.sp`` (9.7.15.6), on logical matrices; the
    instruction as PTX text, a short form as :func:`fastmma.matmul_sp` reads it
    (``"m16n8k32.f32.f16.f16.f32"`` is ``mma.sp``, ``"m64n8k32.f32.f16.f16"``
    ``wgmma.mma_async.sp``) or a parsed instruction.  ``A`` the
    compressed M x K/2 matrix (each row's kept elements, in order), ``columns`` (int, M x K/2)
    the dense column of each of them in its row, as the metadata would place them
    (:func:`fastmma.layout.sparse_metadata.kept_columns`;
    :func:`~fastmma.layout.sparse_metadata.encode_metadata` and
    :func:`~fastmma.layout.sparse_metadata.encode_warpgroup_metadata` give the metadata
    registers), B (K x N), C (M x N).  ``columns`` must follow the ISA's structure: in each
    chunk (4 columns; 2 for .tf32; 8 for .s4/.u4, kept in aligned pairs) two places of its own
    (one for .tf32), increasing where the variant or the type asks for it; otherwise
    :class:`~fastmma.errors.OperandError`.  Where C is None, ``mma.sp`` adds zeros and
    ``wgmma.mma_async.sp`` runs with scale-d false (D = A · B); a wgmma's imm-scale-a/b = -1
    negate A/B.  Stacks (leading dimensions) broadcast as in ``numpy.matmul``.  Returns D in
    the accumulator's dtype."""
    inst = resolve(instruction, MMA_SP)
    warpgroup = isinstance(inst, WgmmaMmaAsyncSp)
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    a = stack_bits(A, inst.atype, "A", (m, k // 2))
    b = stack_bits(B, inst.btype, "B", (k, n))
    c = np.zeros((m, n), get_format(inst.ctype).storage) if C is None else stack_bits(C, inst.ctype, "C", (m, n))
    cols = checked_columns(columns, (m, k // 2), k)
    if warpgroup:  # each warp's 16 rows as one mma.sp's
        check_warpgroup_columns(cols, inst.atype, inst.metadata_shape)
        kw = dict(use_c=C is not None, neg_a=inst.imm_scale_a == -1, neg_b=inst.imm_scale_b == -1)
    else:
        check_columns(cols, inst.atype, str(inst.shape), inst.spvariant)
        kw = {}
    batch = broadcast_stacks({name: x.shape[:-2] for name, x in zip(("A", "columns", "B", "C"), (a, cols, b, c))},
                             "the batch dimensions (all but the last two)")
    d = sparse_rows(inst, *(flat_stack(x, batch) for x in (a, cols, b, c)), **kw)
    return from_bits(d.reshape(batch + (m, n)), inst.dtype)


def checked_columns(columns, shape: tuple[int, int], k: int) -> np.ndarray:
    """A sparse A's ``columns`` as int64, checked to be integers of A's matrix ``shape`` (or a
    stack of such matrices), each a dense column in 0..``k``-1."""
    cols = as_numpy(columns, "columns")
    if cols.dtype.kind not in "iu" or cols.ndim < 2 or cols.shape[-2:] != tuple(shape):
        raise OperandError(f"columns must be integers of A's shape (..., {shape[0]}, {shape[1]}), got "
                           f"{cols.dtype}{list(cols.shape)}")
    cols = cols.astype(np.int64)
    if cols.size and (cols.min() < 0 or cols.max() >= k):
        raise OperandError(f"columns must lie in 0..{k - 1} (B's K = {k} rows)")
    return cols


def sparse_rows(inst, a: np.ndarray, kept: np.ndarray, b: np.ndarray, c: np.ndarray, **kw) -> np.ndarray:
    """D bits (S, M, N) of a stack of ``mma.sp`` or ``wgmma.mma_async.sp``: each row of A keeps
    K/2 elements, at the dense columns ``kept`` (S, M, K/2), which pick the rows of B they meet;
    each row of D is one GEMV of its kept products under the instruction's rule, every row of
    the stack in one call (:func:`fastmma.kernels.execute_rows`, which takes ``kw``: ``use_c``,
    ``neg_a``, ``neg_b``)."""
    count, m, half = kept.shape
    n = b.shape[-1]
    b_kept = b[np.arange(count)[:, None, None], kept]  # (S, M, K/2, N)
    d = execute_rows(inst.rule, np.ascontiguousarray(a.reshape(count * m, 1, half)),
                     np.ascontiguousarray(b_kept.reshape(count * m, half, n)),
                     np.ascontiguousarray(c.reshape(count * m, 1, n)), inst.atype, inst.btype, inst.ctype, inst.dtype,
                     **kw)
    return d.reshape(count, m, n)


def sparse_selector(inst, selector, allowed, form: str) -> int:
    """The sparsity selector of a sparse instruction: ``selector`` where given (agreeing with
    the instruction's operand, where it has one), else the operand's; one of ``allowed``."""
    if selector is None:
        selector = inst.selector
    elif inst.selector is not None and selector != inst.selector:
        raise OperandError(f"selector={selector!r} disagrees with the instruction's sparsity selector operand "
                           f"{inst.selector}")
    if selector is None:
        raise OperandError(f"{form} needs its sparsity selector: pass selector= (one of "
                           f"{', '.join(map(str, allowed))}) or write the operands")
    if isinstance(selector, bool) or not isinstance(selector, (int, np.integer)) or selector not in allowed:
        raise OperandError(f"sparsity selector of {form} must be one of {', '.join(map(str, allowed))}, "
                           f"got {selector!r}")
    return int(selector)


def stack_bits(values, fmt_name: str, name: str, shape: tuple[int, int] | None = None) -> np.ndarray:
    """Contiguous raw bits of an operand matrix, or of a stack of them (batch dimensions
    first), after checking its dtype and its matrices' ``shape`` (where given: an
    instruction's; else any matrix, at least two dimensions)."""
    arr = as_numpy(values, name)
    if shape is not None and arr.shape[-2:] != shape:
        raise OperandError(f"{name} must have shape {shape} for this instruction (or be a stack of such "
                           f"matrices, (..., {shape[0]}, {shape[1]})), got {arr.shape}")
    if arr.ndim < 2:
        raise OperandError(f"{name} must be a 2-D matrix or a stack of matrices (..., rows, columns), got shape "
                           f"{arr.shape}; a vector is a 1 x K or K x 1 matrix")
    fmt = get_format(fmt_name)
    decoded(arr, name, fmt.storage.itemsize)
    return to_bits(arr, fmt, name)


def flat_stack(x: np.ndarray, batch: tuple[int, ...]) -> np.ndarray:
    """A stack of matrices broadcast to ``batch``, as one list of matrices (S, rows,
    columns); a copy only where ``x`` was broadcast."""
    return np.broadcast_to(x, batch + x.shape[-2:]).reshape((math.prod(batch),) + x.shape[-2:])


def batch_shape(a, b, c) -> tuple[int, ...]:
    """The leading (batch) dimensions of stacks of A, B and C (or None) broadcast together,
    as ``numpy.matmul`` broadcasts them; ``()`` for single matrices."""
    shapes = {name: x.shape[:-2] for name, x in zip("ABC", (a, b, c)) if x is not None}
    if not any(shapes.values()):  # single matrices: the usual call, without numpy's broadcasting
        return ()
    return broadcast_stacks(shapes, "the batch dimensions (all but the last two)")


def broadcast_stacks(shapes: dict, what: str) -> tuple[int, ...]:
    """The stack dimensions ``shapes`` (argument name -> its leading shape) broadcast
    together as numpy broadcasts them, or an :class:`OperandError` naming each argument's
    (``what``: which of their dimensions these are)."""
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise OperandError(f"{what} must broadcast together, got {listed}") from None


def scale_d_flag(value, allowed: str = "a bool (or 0 / 1)") -> bool:
    """The scale-d predicate given as a Python value: a bool, or the integer 0 or 1.  Anything
    else (a string such as ``"false"``, None, an array, 2) is an :class:`OperandError`, not
    read by its truth value; ``allowed`` says in the message what the caller takes."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise OperandError(f"scale_d must be {allowed}, got {quote(value)}")


def _scale_d(inst) -> bool:
    op = getattr(inst, "scale_d", None)
    return op is None or op.kind != "imm" or op.value != 0


def kernel_call(rule, atype: str, btype: str, ctype: str, dtype: str, *, shape=None, neg_a: bool = False,
                neg_b: bool = False, stack: bool = False):
    """A prepared instruction's kernel: ``run(a, b, c, use_c)``, D's bits from its A, B and C
    bits, with what :func:`~fastmma.kernels.execute` (``stack``:
    :func:`~fastmma.kernels.execute_stack`) takes besides them fixed once: the rule, the
    four types and the imm-scale negations.  A fused-dot tile of ``shape`` small enough for
    :mod:`fastmma.kernels.small_gemm` (where ``execute`` sends it) runs that module's kernel
    directly (:class:`_SmallTile`)."""
    neg_a, neg_b = bool(neg_a), bool(neg_b)
    small = (not stack and shape is not None and type(rule) is FusedDotRule
             and shape.m * shape.n * shape.k <= kernels.SMALL_KERNEL_MACS and shape.k % rule.group == 0
             and rule.group in importlib.import_module("fastmma.kernels.small_gemm").SMALL_KERNELS)
    if small:
        return _SmallTile(rule, atype, btype, ctype, dtype, neg_a, neg_b)
    run = execute_stack if stack else execute

    def through_execute(a, b, c, use_c=True):
        return run(rule, a, b, c, atype, btype, ctype, dtype, use_c=use_c, neg_a=neg_a, neg_b=neg_b)

    return through_execute


class _SmallTile:
    """:func:`~fastmma.kernels.execute` of a tile it sends to :func:`.kernels.small_gemm.small_gemm`,
    with the rule's kernel and parameters found once: under the launch lock, C as the sum
    reads it (:func:`~fastmma.kernels.c_as_accumulator`), the kernel, D's bits, and the
    reference rule for the outputs an inf or NaN reaches (:func:`.kernels.fused_gemm.fix_specials`)."""

    __slots__ = ("rule", "kernel", "params", "formats", "ctype", "widen_c", "negate", "d_bits", "fix_specials",
                 "compiled")

    def __init__(self, rule, atype, btype, ctype, dtype, neg_a, neg_b):
        small = importlib.import_module("fastmma.kernels.small_gemm")
        fused = importlib.import_module("fastmma.kernels.fused_gemm")
        self.rule, self.ctype = rule, ctype
        self.widen_c = kernels.c_as_accumulator(rule, np.zeros(0, np.uint16), ctype)[1] != ctype
        c_sum = "f32" if self.widen_c else ctype
        af, bf, cf, df = (kernels.format_params(t) for t in (atype, btype, c_sum, dtype))
        self.formats = (af, bf, cf, df)
        self.kernel = small.SMALL_KERNELS[rule.group]
        self.params = (af, bf, rule.frac_bits, rule.e_zero, rule.out_man_bits, small.rounding_code(rule),
                       get_format(c_sum).min_exponent, get_format(dtype).min_exponent)
        self.negate = (neg_a, neg_b)
        # D's bits are the accumulator's own where fused_gemm._d_bits views them, else converted by it
        own = small.rounding_code(rule) == importlib.import_module("fastmma.kernels.fused_dot").ROUND_RZ
        self.d_bits = None if own else functools.partial(fused._d_bits, rule=rule)
        self.fix_specials, self.compiled = fused.fix_specials, None

    def __call__(self, a, b, c, use_c=True):
        with kernels.launch_lock:
            if self.widen_c:
                c, _ = kernels.c_as_accumulator(self.rule, c, self.ctype)
            args = (a, b, c, *self.params, bool(use_c), int(self.negate[0]), int(self.negate[1]))
            if self.compiled is None:
                self.compiled = self._compiled(args)
            acc, rows, cols, elems, special = self.compiled(*args)
            d = acc.view(np.uint32) if self.d_bits is None else self.d_bits(acc)
            if special:
                af, bf, cf, df = self.formats
                self.fix_specials(self.rule, *map(read_only, (a, b, c)), d, af, bf, cf, df, use_c, *self.negate, rows,
                                  cols, elems)
        return d

    def _compiled(self, args):
        """The kernel's compiled function for these arguments with A, B and C read-only, as
        the kernels take them (compiled or loaded through the dispatcher first): called
        directly, it skips the dispatcher's typing of each call, which for read-only arrays
        takes numba's slow path, and the writeable arrays given to it read the same memory."""
        args = tuple(map(read_only, args[:3])) + args[3:]
        self.kernel(*args)
        return self.kernel.get_overload(tuple(self.kernel.typeof_pyval(x) for x in args))
