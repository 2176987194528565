"""``fastmma.ptx``: run PTX snippets of wgmma / wmma code, k-loops included, bit for bit.

Example::

    import numpy as np
    from fastmma import ptx
    from fastmma.layout.descriptor import MatrixDescriptor

    smem = np.zeros(4096, np.uint8)          # the caller puts A at byte 0 and B at byte 2048
    m = ptx.run('''
        .reg .f32  d<4>;
        .reg .b64  descA, descB;
        .reg .pred p;
        mov.f32    d0, 0f3F800000;            // C: 1.0 in d0, 0 elsewhere
        setp.ne.b32 p, 1, 0;                  // scale-d: accumulate onto C
        wgmma.fence.sync.aligned;
        wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, descA, descB, p, 1, 1, 0, 0;
        wgmma.commit_group.sync.aligned;
        wgmma.wait_group.sync.aligned 0;
    ''', {"descA": MatrixDescriptor(0, 128, 256).encode(),
          "descB": MatrixDescriptor(2048, 128, 256).encode()}, smem=smem)
    m["d0"]        # float32[128]: register d0 of each thread of the warpgroup
    m.smem, m.global_mem, m.warpgroup

:func:`run` returns a :class:`Machine`; ``machine.run(more_ptx)`` continues on the same state.

**What runs** (everything else raises :class:`~fastmma.errors.UnsupportedInstructionError`
with its line and column):

* declarations: ``.reg`` (``.pred .b8-.b64 .u8-.u64 .s8-.s64 .f16 .f16x2 .bf16 .bf16x2 .f32
  .f64``, several names per line, ``name<N>`` ranges), ``.global`` / ``.shared`` variables
  (``.align``, arrays), ``{ }`` blocks with their scopes; comments ``//`` and ``/* */``;
* ``mov``, ``setp``, integer ``add sub mul mad shl shr and or xor not``, ``bra`` to a label
  (uniform: every thread takes it or none does), ``ld`` / ``st`` (global, shared or generic;
  ``.v2`` / ``.v4``), ``fence.proxy.async`` (and its ``.global`` / ``.shared::{cta,cluster}``
  forms), ``wgmma.fence / mma_async / commit_group / wait_group``,
  ``wmma.load / mma / store``, ``mma.sync``, ``mma.sp``, ``ldmatrix`` / ``stmatrix`` / ``movmatrix``, guarded by ``@p`` / ``@!p``: see :mod:`fastmma.ptx.statements`;
* labels (``LOOP:``), so a snippet may loop; ``max_steps`` bounds the statements a run executes;
* operands: registers, brace-enclosed register vectors, integer and floating-point literals
  (``0f3F800000``, ``0d...``, ``1.5``), addresses ``[reg]``, ``[reg+imm]``, ``[var+imm]``,
  ``[imm]`` in ``.global``, ``.shared`` or generic space, special registers ``%tid.x``,
  ``%laneid``, ``%warpid`` ...

**Threads, registers, memory, generic addresses**: :mod:`fastmma.ptx.machine`.  In short: a
snippet with ``wgmma`` runs on a warpgroup (128 threads, a :class:`fastmma.Warpgroup` holds
registers and shared memory, so its strict hazard checks apply to every access); otherwise on
one warp of 32 lanes (or ``threads=``), each warp running ``wmma`` and ``mma.sync`` on its own
lanes.

**Errors**, all with ``line`` and ``column``, in source order, before anything runs:
:class:`~fastmma.errors.PTXSyntaxError` (text that is not PTX; undeclared or twice-declared
names), :class:`~fastmma.errors.InvalidInstructionError` (qualifiers or operands the ISA does
not allow, operand types that do not agree: PTX ISA 9.4),
:class:`~fastmma.errors.UnsupportedInstructionError`; a branch to no label once the whole
snippet is read.  While running: :class:`~fastmma.errors.HazardError` (strict mode), memory
bounds and alignment errors, a divergent branch
(:class:`~fastmma.errors.UnsupportedInstructionError`),
:class:`~fastmma.errors.ExecutionLimitError` past ``max_steps``; these also carry ``machine``
(the state when it failed) and ``statement``.

PTX ISA sections: 4 (syntax), 5 (state spaces, types, variables), 6.4 (addresses), 9.4 (type
checking), 9.7.1 (integer arithmetic), 9.7.6.2 (setp), 9.7.8 (logic and shift), 9.7.9 (mov, ld,
st), 9.7.12.3 (bra), 9.7.13.4 (proxy fences), 9.7.14.4 (wmma), 9.7.14.5 (mma, ldmatrix, stmatrix, movmatrix), 9.7.15 (wgmma), as numbered at
ptx.poole.ai.
"""

from .machine import GENERIC_SHARED_BASE, Machine, run
from .syntax import parse_program

__all__ = ["run", "Machine", "GENERIC_SHARED_BASE", "parse_program"]
