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
from .kernels import execute, execute_stack
from .layout import register_file
from .layout.mma_fragments import fragment_layout
from .layout.wmma_fragments import pack_fragment, unpack_fragment
from .mma import as_instruction, broadcast_stacks, flat_stack

WARP_SIZE = 32


def mma(instruction, a, b, c) -> np.ndarray:
    """``mma.sync``: the D fragment ``uint32[32, words]`` from the A, B and C fragments."""
    inst = as_instruction(instruction, (MmaSync,))
    mats = _matrices(inst, a, b, c, stack=False)
    d = execute(inst.rule, mats["a"], mats["b"], mats["c"], inst.atype, inst.btype, inst.ctype, inst.dtype)
    return pack_fragment(d, fragment_layout("d", str(inst.shape), inst.dtype))


def mma_stack(instruction, a, b, c) -> np.ndarray:
    """:func:`mma` for a stack of warps in one call: ``a``, ``b`` and ``c`` are fragments
    ``uint32[..., 32, words]`` whose leading (stack) dimensions broadcast together as
    numpy's do, and D is ``uint32[..., 32, words]`` over them, each warp's bit for bit what
    :func:`mma` gives it."""
    inst = as_instruction(instruction, (MmaSync,))
    mats = _matrices(inst, a, b, c, stack=True)
    batch = broadcast_stacks({name: x.shape[:-2] for name, x in mats.items()},
                             "the stack dimensions (all but the last two of a, b and c)")
    d = execute_stack(inst.rule, *(flat_stack(mats[name], batch) for name in "abc"), inst.atype, inst.btype,
                      inst.ctype, inst.dtype)
    d_layout = fragment_layout("d", str(inst.shape), inst.dtype)
    return pack_fragment(d, d_layout).reshape(batch + (WARP_SIZE, d_layout.words))


def _matrices(inst: MmaSync, a, b, c, *, stack: bool) -> dict:
    """The A, B and C element bits the fragments hold (each checked to be ``uint32[32,
    words]``, or a stack of them where ``stack``)."""
    mats = {}
    for name, frag, elem in (("a", a, inst.atype), ("b", b, inst.btype), ("c", c, inst.ctype)):
        layout = fragment_layout(name, str(inst.shape), elem)
        mats[name] = unpack_fragment(register_file(frag, WARP_SIZE, layout.words, name, stack=stack), layout)
    return mats
