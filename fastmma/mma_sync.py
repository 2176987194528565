"""``mma.sync`` (PTX ISA 9.7.14.5, the warp-level ``mma``) on a warp's fragment registers.

Fragments are ``uint32[32, words]`` as in :mod:`fastmma.wmma`: word ``w`` of lane ``l`` is
``frag[l, w]``, registers in the order of the PTX vector operand, an ``.f64`` register as two
words (low first).  Which element each register holds is the ISA's own map
(:mod:`fastmma.layout.mma_fragments`); how the numbers combine was recorded on an sm_90
GPU (tests/golden/probes/q10_mma_sync; :func:`fastmma.isa.numerics.mma_rule`).

Example::

    d = fastmma.mma_sync.mma("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", a, b, c)

:func:`mma_stack` runs one instruction for a stack of warps in one call.  On logical
matrices, :func:`fastmma.mma` and :func:`fastmma.matmul` take the same instructions.
"""

from __future__ import annotations

import numpy as np

from .isa import MmaSync
from .layout.mma_fragments import fragment_layout
from .mma import as_instruction
from .wmma import mma_on_fragments, mma_stack_on_fragments


def mma(instruction, a, b, c) -> np.ndarray:
    """``mma.sync``: the D fragment ``uint32[32, words]`` from the A, B and C fragments."""
    return mma_on_fragments(as_instruction(instruction, (MmaSync,)), a, b, c, fragment_layout)


def mma_stack(instruction, a, b, c) -> np.ndarray:
    """:func:`mma` for a stack of warps in one call: ``a``, ``b`` and ``c`` are fragments
    ``uint32[..., 32, words]`` whose leading (stack) dimensions broadcast together as
    numpy's do, and D is ``uint32[..., 32, words]`` over them, each warp's bit for bit what
    :func:`mma` gives it."""
    return mma_stack_on_fragments(as_instruction(instruction, (MmaSync,)), a, b, c, fragment_layout)
