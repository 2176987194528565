"""``mma.sync`` (PTX ISA 9.7.14.5, the warp-level ``mma``) on a warp's fragment registers.

Fragments are ``uint32[32, words]`` as in :mod:`fastmma.wmma`: word ``w`` of lane ``l`` is
``frag[l, w]``, registers in the order of the PTX vector operand, an ``.f64`` register as two
words (low first).  Which element each register holds is the ISA's own map
(:mod:`fastmma.layout.mma_fragments`); how the numbers combine was recorded on an sm_90
GPU (tests/golden/probes/q10_mma_sync; :func:`fastmma.isa.numerics.mma_rule`).
``mma.sync.m8n8k4`` with ``.f16`` inputs runs four independent products, one per quad pair
(:func:`fastmma.layout.mma_fragments.quad_pair_layout`; recorded in
tests/golden/probes/q14_mma_m8n8k4).  :func:`mma_sp` runs the sparse ``mma.sp`` and
``mma.sp::ordered_metadata`` (PTX ISA 9.7.14.6) with its metadata register
(:mod:`fastmma.layout.sparse_metadata`; recorded in tests/golden/probes/q15_mma_sp).

Example::

    d = fastmma.mma_sync.mma("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", a, b, c)

:func:`mma_stack` runs one instruction for a stack of warps in one call, and :func:`prepare`
parses and checks one once for a simulator that issues it again and again.  On logical
matrices, :func:`fastmma.mma` and :func:`fastmma.matmul` take the same instructions.
"""

from __future__ import annotations

import numpy as np

from .isa import MmaSp, MmaSync
from .kernels import execute_stack
from .layout import register_file
from .layout.mma_fragments import QUAD_PAIRS, fragment_layout, quad_pair_layout, sparse_fragment_layout
from .layout.sparse_metadata import kept_columns
from .layout.wmma_fragments import pack_fragment
from .mma import as_instruction, broadcast_stacks, flat_stack, sparse_rows, sparse_selector
from .wmma import PreparedWarpMma, fragment_matrices, mma_on_fragments, mma_stack_on_fragments
from .validate import public

WARP_SIZE = 32


@public
def mma(instruction, a, b, c) -> np.ndarray:
    """``mma.sync``: the D fragment ``uint32[32, words]`` from the A, B and C fragments.

    Raises :class:`~fastmma.errors.InvalidInstructionError` for text that is no ``mma.sync``, and
    :class:`~fastmma.errors.OperandError` for fragments of the wrong dtype or shape.
    Example: ``d = mma_sync.mma("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", a, b, c)``.
    """
    inst = as_instruction(instruction, (MmaSync,))
    if inst.quad_pairs:
        return _quad_pair_mma(inst, a, b, c, stack=False)
    return mma_on_fragments(inst, a, b, c, fragment_layout)


@public
def mma_stack(instruction, a, b, c) -> np.ndarray:
    """:func:`mma` for a stack of warps in one call: ``a``, ``b`` and ``c`` are fragments
    ``uint32[..., 32, words]`` whose leading (stack) dimensions broadcast together as
    numpy's do, and D is ``uint32[..., 32, words]`` over them, each warp's bit for bit what
    :func:`mma` gives it.

    Raises what :func:`mma` raises.
    """
    inst = as_instruction(instruction, (MmaSync,))
    if inst.quad_pairs:
        return _quad_pair_mma(inst, a, b, c, stack=True)
    return mma_stack_on_fragments(inst, a, b, c, fragment_layout)


def prepare(instruction) -> PreparedWarpMma:
    """One ``mma.sync`` (PTX text or a parsed :class:`~fastmma.isa.MmaSync`) parsed and
    checked once, its fragment maps built once: a
    :class:`~fastmma.wmma.PreparedWarpMma`, called as ``op(a, b, c)`` for each issue, bit
    for bit what :func:`mma` gives.

    Example::

        op = fastmma.mma_sync.prepare("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
        d = op(a, b, c)
    """
    inst = as_instruction(instruction, (MmaSync,))
    if not inst.quad_pairs:
        return PreparedWarpMma(inst, fragment_layout)

    def layout_of(matrix, shape, elem_type):
        return quad_pair_layout(matrix, elem_type, {"a": inst.alayout, "b": inst.blayout}.get(matrix))

    return PreparedWarpMma(inst, layout_of, _quad_pair_operand)


def _quad_pair_operand(name: str, index: np.ndarray) -> np.ndarray:
    """An operand of ``mma.sync.m8n8k4`` .f16 (A 32 x 4, B 4 x 32, C 32 x 8: the quad pairs'
    products side by side) as the stack of the four products, as :func:`_quad_pair_mma`
    lays it out for the kernels."""
    if name == "b":
        return np.ascontiguousarray(np.swapaxes(index.reshape(4, QUAD_PAIRS, 8), 0, 1))
    return index.reshape(QUAD_PAIRS, 8, -1)


def _quad_pair_mma(inst, a, b, c, *, stack: bool) -> np.ndarray:
    """``mma.sync.m8n8k4`` with ``.f16`` inputs: each warp's four quad-pair products (8 x 8 x 4)
    as one stack of GEMMs, their matrices read and written by :func:`quad_pair_layout`."""
    def layout_of(matrix, shape, elem_type):
        return quad_pair_layout(matrix, elem_type, {"a": inst.alayout, "b": inst.blayout}.get(matrix))

    mats = fragment_matrices(inst, a, b, c, layout_of, stack=stack)
    d_layout = layout_of("d", "m8n8k4", inst.dtype)
    batch = broadcast_stacks({x: m.shape[:-2] for x, m in mats.items()},
                             "the stack dimensions (all but the last two of a, b and c)") if stack else ()
    a4 = flat_stack(mats["a"], batch).reshape(-1, 8, 4)  # rows 8p..8p+7 of A are product p's
    b4 = np.swapaxes(flat_stack(mats["b"], batch).reshape(-1, 4, QUAD_PAIRS, 8), 1, 2).reshape(-1, 4, 8)
    c4 = flat_stack(mats["c"], batch).reshape(-1, 8, 8)
    d = execute_stack(inst.rule, np.ascontiguousarray(a4), np.ascontiguousarray(b4), np.ascontiguousarray(c4),
                      inst.atype, inst.btype, inst.ctype, inst.dtype)
    d = pack_fragment(d.reshape(batch + (WARP_SIZE, 8)), d_layout)
    return d if stack else d.reshape(WARP_SIZE, d_layout.words)


@public
def mma_sp(instruction, a, b, c, e, selector: int | None = None) -> np.ndarray:
    """``mma.sp`` / ``mma.sp::ordered_metadata``: the D fragment ``uint32[32, words]`` from the
    compressed A, the B and C fragments and the metadata register ``e`` (``uint32[32, 1]``, one
    register a lane).  ``selector`` is the sparsity selector operand ``f``; it may instead come
    with the instruction's operands (``... d, a, b, c, e, 1;``), and must where both are given
    agree.  Metadata that the selected lanes hold and the ISA leaves undefined raise
    :class:`~fastmma.errors.OperandError`."""
    return _sparse_mma(as_instruction(instruction, (MmaSp,)), a, b, c, e, selector, stack=False)


@public
def mma_sp_stack(instruction, a, b, c, e, selector: int | None = None) -> np.ndarray:
    """:func:`mma_sp` for a stack of warps in one call: ``a``, ``b``, ``c`` and ``e`` are
    ``uint32[..., 32, words]`` (``e``: one word) whose stack dimensions broadcast together.

    Raises what :func:`mma_sp` raises.
    """
    return _sparse_mma(as_instruction(instruction, (MmaSp,)), a, b, c, e, selector, stack=True)


def _sparse_mma(inst, a, b, c, e, selector, *, stack: bool) -> np.ndarray:
    """The fragments' matrices and the metadata's kept columns, through :func:`fastmma.mma.sparse_rows`."""
    row = inst.type_row
    selector = sparse_selector(inst, selector, row.selectors[str(inst.shape)], f"{row.name} mma.sp .{inst.shape}")
    mats = fragment_matrices(inst, a, b, c, sparse_fragment_layout, stack=stack)
    mats["e"] = register_file(e, WARP_SIZE, 1, "e", stack=stack)
    batch = broadcast_stacks({x: m.shape[:-2] for x, m in mats.items()},
                             "the stack dimensions (all but the last two of a, b, c and e)") if stack else ()
    a2, b2, c2, e2 = (flat_stack(mats[x], batch) for x in "abce")
    kept = kept_columns(e2[..., 0], inst.atype, str(inst.shape), selector, inst.spvariant)  # (S, M, K/2)
    d_layout = sparse_fragment_layout("d", str(inst.shape), inst.dtype)
    d = pack_fragment(sparse_rows(inst, a2, kept, b2, c2).reshape(batch + kept.shape[-2:-1] + (b2.shape[-1],)),
                      d_layout)
    return d if stack else d.reshape(WARP_SIZE, d_layout.words)
