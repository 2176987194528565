"""``fastmma.matmul_sp``: a whole GEMM of a structured-sparse A, as a k-loop of ``mma.sp`` or
``wgmma.mma_async.sp`` computes it (PTX ISA 9.7.14.6, 9.7.15.6).

A is given compressed, as the instructions take it: each row's kept elements in order
(M x K/2), with ``columns``, the dense column of each (what the metadata of each k-step's
instruction would encode).  K counts B's rows, the dense K; it is a whole number of the
type's chunks (4 dense elements for 2:4 sparsity, 2 for ``.tf32``'s 1:2, 8 for
``.s4``/``.u4``), and one that is not a multiple of the instruction's k is padded at the end
with whole chunks: zeros in A kept at the chunk's first places, zero rows in B, as a kernel's
out-of-bounds fill would give them.

Each k-step is one instruction: its rule over each row's kept products of that step, the
accumulator rounded to D's type after every step (the sparse rules are those of
:mod:`fastmma.isa.numerics`, recorded in tests/golden/probes/q15_mma_sp and q16_wgmma_sp).
Elements the columns leave out take no part (an infinity or NaN of B facing one does not
reach D).  Two ways compute it, with the same bits:

* **Spread** (:func:`fastmma.kernels.execute_spread`), where the instruction's rule is one
  fused sum or an exact integer dot of its kept products and the blocked kernels have a group
  of its whole k: A is spread to its dense columns, zeros elsewhere, and one dense GEMM runs
  with a group of the instruction's k.  A zero term adds nothing to a group and does not move
  its ``e_max``, which starts at ``e_zero``; an infinity or NaN of B facing a spread zero
  would make a NaN, so the GEMM runs on B with each of them zeroed, and under a fused rule
  the elements whose row keeps a place where one stands are then decided by their special
  terms (:func:`fastmma.kernels.fix_spread_specials`).  ``mma.sp``'s fp8 expansion, two fused
  f16 steps per instruction, runs so as well, each step a group of half the instruction's
  dense columns (:class:`~fastmma.isa.numerics.SpreadConvertedF16Rule`), but only for the
  columns of B that hold no infinity or NaN.
* **Rows** otherwise (and for fp8 ``mma.sp``'s columns of B that hold an infinity or NaN, each
  column of D depending on its column of B alone; the spread way then runs on B with them
  zeroed): each row of D is one chain of GEMVs against the B rows its kept elements pick,
  which :func:`fastmma.kernels.kept_rows.gather_kept_rows` gathers for blocks of rows and
  columns, and :func:`fastmma.kernels.execute_rows` runs each row's k-loop in one call.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .errors import OperandError
from .formats import as_numpy, from_bits, get_format, non_finite
from .gemm import checked_progress
from .isa import FusedDotRule, IntDotRule, SparseConvertedF16Rule, SpreadConvertedF16Rule, WgmmaMmaAsyncSp
from .isa.short_form import resolve, sparse_kinds
from .kernels import SPREAD_GROUPS, execute_rows, execute_spread, fix_spread_specials, launch_lock
from .kernels.kept_rows import gather_kept_rows
from .layout.sparse_metadata import WGMMA_SP, check_row_columns, chunk_geometry
from .mma import _scale_d, broadcast_stacks, checked_columns, flat_stack, scale_d_flag, stack_bits
from .validate import public, working_set

#: The B rows gathered for one call of the row kernels: about this many bytes (the rows of a
#: block of A's rows, over a range of B's columns), so that they stay in the cores' caches.
GATHER_BYTES = 1 << 22


SPARSE = sparse_kinds("matmul_sp", "fastmma.matmul")


def resolve_sparse_instruction(instruction):
    """A sparse instruction object from PTX text, a short form or an object: the short form
    ``"m64n256k32.f32.f16.f16"`` is read as ``wgmma.mma_async.sp``, ``"m16n8k32.f32.f16.f16.f32"``
    as ``mma.sp`` (row.col)."""
    return resolve(instruction, SPARSE)


@public
def matmul_sp(A, columns, B, C=None, *, instruction, scale_d: bool | None = None, progress=None) -> np.ndarray:
    """``D = A @ B + C`` for a structured-sparse A, with the exact numbers of a k-loop of
    ``instruction`` (``mma.sp``, ``mma.sp::ordered_metadata`` or ``wgmma.mma_async.sp``; text,
    a short form or a parsed instruction).

    ``A`` (M, K/2) holds each row's kept elements in order, ``columns`` (M, K/2, integers) the
    dense column of each in 0..K-1, ``B`` (K, N); in each chunk of a row the kept elements lie
    at places of that chunk which the instruction's metadata can name
    (:func:`fastmma.layout.sparse_metadata.compress` builds both from a dense, pruned A).
    ``C`` (M, N) is the accumulator type or None: a ``wgmma.mma_async.sp`` then runs with
    scale-d false (``scale_d=False`` does the same with a C), an ``mma.sp`` adds zeros (it has
    no scale-d).  A wgmma's imm-scale-a/b = -1 negate A/B.  Stacks broadcast as in
    ``numpy.matmul`` (``columns`` with A).  Returns a new (M, N) array of D's type.

    ``progress(done, total)``, if given, is called as blocks of the output complete.

    Raises :class:`~fastmma.errors.InvalidInstructionError` for an instruction that is not
    ``mma.sp`` or ``wgmma.mma_async.sp``, and :class:`~fastmma.errors.OperandError` for operands
    of the wrong type or shape, or columns that the instruction's metadata cannot name (the
    message names the row and the chunk).
    """
    inst = resolve_sparse_instruction(instruction)
    checked_progress(progress)
    warpgroup = isinstance(inst, WgmmaMmaAsyncSp)
    A, columns, B = as_numpy(A, "A"), as_numpy(columns, "columns"), as_numpy(B, "B")
    _decoding(A, columns, B)
    a = stack_bits(A, inst.atype, "A")
    b = stack_bits(B, inst.btype, "B")
    m, half = a.shape[-2:]
    kk, n = b.shape[-2:]
    chunk, kept = chunk_geometry(inst.atype)
    if kk % chunk or half != kk // chunk * kept:
        raise OperandError(f"B has K = {kk} rows and A {half} kept columns: K must be a whole number of "
                           f"{inst.atype}'s chunks of {chunk}, of which A keeps {kept} each "
                           f"(K/{chunk // kept} columns)")
    cols = checked_columns(columns, a.shape[-2:], kk)
    check_row_columns(cols, inst.atype, WGMMA_SP if warpgroup else inst.spvariant)
    c = None if C is None else stack_bits(C, inst.ctype, "C")
    if c is not None and c.shape[-2:] != (m, n):
        raise OperandError(f"C must have shape {(m, n)} (or a stack of such matrices), got {c.shape}")
    if warpgroup:  # scale_d checked even where there is no C
        use_c = (_scale_d(inst) if scale_d is None else scale_d_flag(scale_d)) and c is not None
    elif scale_d is not None:
        raise OperandError(f"scale_d is a wgmma.mma_async.sp operand; {inst.opcode} always adds C (zeros where "
                           f"C is None)")
    else:
        use_c = True
    parts = {"A": a.shape[:-2], "columns": cols.shape[:-2], "B": b.shape[:-2]}
    if c is not None:
        parts["C"] = c.shape[:-2]
    batch = broadcast_stacks(parts, "the batch dimensions (all but the last two)")
    if 0 in batch or m == 0 or n == 0 or kk == 0:  # no instruction runs: D is C (or +0), bit for bit
        d = np.zeros(batch + (m, n), get_format(inst.dtype).storage)
        if use_c and d.size:
            d[...] = c
        return from_bits(d, inst.dtype)
    a, cols, b = _pad_k(inst, a, cols, b, chunk, kept)
    count = math.prod(batch)
    rows = count * m
    b_index = np.repeat(np.broadcast_to(np.arange(math.prod(b.shape[:-2])).reshape(b.shape[:-2]), batch).ravel(), m)
    b = np.ascontiguousarray(b.reshape((-1,) + b.shape[-2:]))
    a = flat_stack(a, batch).reshape(rows, 1, -1)
    cols = flat_stack(cols, batch).reshape(rows, -1)
    if c is None or not use_c:
        c = np.zeros((rows, 1, n), get_format(inst.ctype).storage)
    else:
        c = flat_stack(c, batch).reshape(rows, 1, n)
    kw = dict(use_c=use_c, neg_a=getattr(inst, "imm_scale_a", 1) == -1, neg_b=getattr(inst, "imm_scale_b", 1) == -1)
    rule = spread_rule(inst)
    # B's infs and NaN, and its columns that hold one (any B of the stack), scanned only where the spread way can run
    special = None if rule is None else non_finite(b, inst.btype)
    b_columns = None if rule is None else special.any(axis=1)  # (B's stack, N)
    rows_only = None if rule is None else b_columns.any(axis=0)
    if rows_only is None or (rows_only.all() and not isinstance(rule, FusedDotRule)):
        d = _row_blocks(inst, a, cols, b, b_index, c, kw, progress)
    elif not rows_only.any():
        d = _spread(inst, rule, a, cols, b, b_index, c, kw, progress, m)
    elif isinstance(rule, FusedDotRule):
        d = _spread_specials(inst, rule, a, cols, b, special, b_columns, b_index, c, kw, progress, m)
    else:
        d = _split_columns(inst, rule, a, cols, b, b_index, c, kw, progress, m, rows_only)
    return from_bits(d.reshape(batch + (m, n)), inst.dtype)


def _decoding(A: np.ndarray, columns: np.ndarray, B: np.ndarray) -> None:
    """Refuse, before anything is allocated, a sparse GEMM whose working set would not fit: per
    kept element of A 4 bytes of bits and 16 of columns (int64, and its stacked copy), per
    element of the spread A 4, of C and D 4 each, and per element of B 12 (a peak of 6 measured
    for f16 and 12 for tf32: its bits, a finite copy, a block of columns, the decoded panels)."""
    if A.ndim < 2 or B.ndim < 2:
        return  # stack_bits names the operand
    batch = max(math.prod(A.shape[:-2]), math.prod(columns.shape[:-2]), math.prod(B.shape[:-2]), 1)
    m, half, (kk, n) = A.shape[-2], A.shape[-1], B.shape[-2:]
    need = batch * (20 * m * half + 4 * m * kk + 12 * kk * n + 8 * m * n)
    working_set({"A": A, "columns": columns, "B": B}, need, m, kk, n, batch)


def _spread_specials(inst, rule, a, cols, b, special, b_columns, b_index, c, kw, progress, m) -> np.ndarray:
    """D bits (R, 1, N) of a fused rule where B holds an inf or NaN (``special``; ``b_columns``,
    each B's columns that hold one): the spread way on B with each of them zeroed, which is
    right wherever a row keeps no place that holds one in its element's column; those elements
    are then decided by their special terms (:func:`fastmma.kernels.fix_spread_specials`)."""
    finite = np.where(special, np.zeros((), b.dtype), b)
    d = _spread(inst, rule, a, cols, finite, b_index, c, kw, progress, m)
    rows, n = cols.shape[0], b.shape[-1]
    fix_spread_specials(rule, a.reshape(rows, -1), cols, chunk_geometry(inst.atype), b, finite, b_index,
                        c.reshape(rows, n), d.reshape(rows, n), inst.atype, inst.btype, inst.ctype, inst.dtype,
                        columns=b_columns, **kw)
    return d


def _split_columns(inst, rule, a, cols, b, b_index, c, kw, progress, m, rows_only) -> np.ndarray:
    """D bits (R, 1, N) of fp8 ``mma.sp`` where only some of B's columns hold an inf or NaN:
    each column of D depends on its own column of B alone, so these take the rows, and the
    spread way runs on a B whose columns that hold one are zeros (cheaper than gathering the
    others: the spread way's cost on the columns it need not compute is below the rows' on
    them)."""
    bad = np.flatnonzero(rows_only)
    first, second = _shares(progress, [b.shape[-1], bad.size])
    finite = b.copy()
    finite[..., bad] = 0
    d = _spread(inst, rule, a, cols, finite, b_index, c, kw, first, m)
    d[..., bad] = _row_blocks(inst, a, cols, _columns(b, bad), b_index, _columns(c, bad), kw, second)
    return d


def _columns(x, picks):
    return np.ascontiguousarray(x[..., picks])


def _shares(progress, sizes):
    """``progress`` callbacks for parts of a GEMM run one after another, each part's
    ``(done, total)`` reported as its share (``sizes``) of one count that rises to their sum."""
    if progress is None:
        return [None] * len(sizes)
    whole, starts = sum(sizes), np.cumsum([0] + list(sizes[:-1]))
    return [lambda done, total, start=int(start), size=int(size): progress(start + size * done // total, whole)
            for start, size in zip(starts, sizes)]


def spread_rule(inst):
    """The dense rule a spread A runs under (module docstring): the instruction's rule with a
    group of its whole k (fp8 ``mma.sp``: its two f16 steps over the dense columns, each a
    group of half of them); None where the rows must run instead."""
    rule, k = inst.rule, inst.shape.k
    if isinstance(rule, IntDotRule) or (isinstance(rule, FusedDotRule) and k in SPREAD_GROUPS):
        return replace(rule, group=k)
    if isinstance(rule, SparseConvertedF16Rule) and k // 2 in SPREAD_GROUPS:
        return SpreadConvertedF16Rule(replace(rule.inner, group=k // 2), k)
    return None


def _spread(inst, rule, a, cols, b, b_index, c, kw, progress, m) -> np.ndarray:
    """D bits (R, 1, N): A's rows spread to their dense columns and run as dense GEMMs, one
    for each B of the stack (all the rows in one where B is one matrix), by blocks of 512 of
    B's columns where ``progress`` is given."""
    rows = cols.shape[0]
    kk, n = b.shape[-2:]
    dense = _spread_a(a, cols, kk)
    c = c.reshape(rows, n)
    d = np.empty((rows, n), get_format(inst.dtype).storage)
    groups = [(0, rows)] if b.shape[0] == 1 else [(r, r + m) for r in range(0, rows, m)]
    width = n if progress is None else 512
    blocks, done = len(groups) * -(-n // width), 0
    for r0, r1 in groups:
        bs = b[b_index[r0]]
        for j0 in range(0, n, width):
            j1 = min(n, j0 + width)
            d[r0:r1, j0:j1] = execute_spread(rule, dense[r0:r1], np.ascontiguousarray(bs[:, j0:j1]),
                                             np.ascontiguousarray(c[r0:r1, j0:j1]), inst.atype, inst.btype,
                                             inst.ctype, inst.dtype, terms=inst.shape.k // 2, **kw)
            done += 1
            if progress is not None:
                progress(done, blocks)
    return d.reshape(rows, 1, n)


def _spread_a(a, cols, kk):
    """A (R, 1, K/2) spread to its dense columns ``cols`` (R, K/2): (R, ``kk``), zeros at the
    places a row does not keep."""
    rows, half = cols.shape
    dense = np.zeros((rows, kk), a.dtype)
    np.put_along_axis(dense, cols, a.reshape(rows, half), axis=1)
    return dense


def _pad_k(inst, a, cols, b, chunk, kept):
    """K padded up to a multiple of the instruction's k with whole chunks: A's padding zeros,
    kept at the first places of each new chunk, B's zero rows."""
    pad = (-b.shape[-2]) % inst.shape.k
    kk = b.shape[-2]
    if not pad:
        return a, cols, b
    new = kk + np.arange(0, pad, chunk)[:, None] + np.arange(kept)
    places = np.broadcast_to(new.ravel(), cols.shape[:-1] + (new.size,))
    a = np.concatenate([a, np.zeros(a.shape[:-1] + (new.size,), a.dtype)], axis=-1)
    cols = np.concatenate([cols, places], axis=-1)
    b = np.concatenate([b, np.zeros(b.shape[:-2] + (pad, b.shape[-1]), b.dtype)], axis=-2)
    return a, cols, b


def _row_blocks(inst, a, cols, b, b_index, c, kw, progress) -> np.ndarray:
    """D bits (R, 1, N): the rows' k-loops, by blocks of rows and of B's columns whose gathered
    B rows come to about :data:`GATHER_BYTES`."""
    rows, half = cols.shape
    n = b.shape[-1]
    per_row = half * b.dtype.itemsize
    width = min(n, max(64, GATHER_BYTES // (16 * per_row)))
    step = max(1, min(rows, GATHER_BYTES // (per_row * width)))
    d = np.empty((rows, 1, n), get_format(inst.dtype).storage)
    blocks = -(-rows // step) * -(-n // width)
    done = 0
    for j0 in range(0, n, width):
        j1 = min(n, j0 + width)
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            kept_b = np.empty((r1 - r0, half, j1 - j0), b.dtype)
            with launch_lock:
                gather_kept_rows(b, b_index[r0:r1], cols[r0:r1], j0, kept_b)
            d[r0:r1, :, j0:j1] = execute_rows(inst.rule, a[r0:r1], kept_b, np.ascontiguousarray(c[r0:r1, :, j0:j1]),
                                              inst.atype, inst.btype, inst.ctype, inst.dtype, **kw)
            done += 1
            if progress is not None:
                progress(done, blocks)
    return d
