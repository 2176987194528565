"""One ``wgmma.mma_async`` on caller-owned registers and shared memory.

The register-level entry point for simulators: give the warpgroup's accumulator registers
(``uint32[128, ND]``), A as registers (``uint32[128, 4]``) or a 64-bit matrix descriptor,
B's descriptor and the shared-memory image; get back the D registers.  No asynchronous
state is kept (see :mod:`fastmma.warpgroup` for fence / commit_group / wait_group).

Data flow (PTX ISA 9.7.15.5): descriptors -> A and B gathered from the image
(:mod:`fastmma.layout.descriptor`), A and C from register fragments
(:mod:`fastmma.layout.wgmma_fragments`) -> kernel -> D scattered into registers.
"""

from __future__ import annotations

import numpy as np

from .errors import InvalidInstructionError, OperandError
from .formats import as_numpy
from .isa import WgmmaMmaAsync
from .kernels import execute
from .layout import register_file
from .layout.descriptor import gather_operand, major_from_trans
from .layout.wgmma_fragments import pack_d, unpack_a, unpack_d
from .mma import as_instruction, scale_d_flag

THREADS = 128


def registers(values, nregs: int, name: str) -> np.ndarray:
    """``values`` checked to be ``uint32[128, nregs]``: one row per thread of the warpgroup."""
    return register_file(values, THREADS, nregs, name)


def gather_operands(inst: WgmmaMmaAsync, smem, a_desc=None, a_regs=None, b_desc=None,
                    image_address: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The logical A (64×K) and B (K×N) bits one wgmma reads."""
    if b_desc is None:
        raise OperandError("b_desc is required: wgmma.mma_async always reads B from shared memory")
    smem = as_numpy(smem, "smem") if smem is not None else None
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    if (a_desc is None) == (a_regs is None):
        raise OperandError("give exactly one of a_desc (A in shared memory) and a_regs (A in registers)")
    if inst.a_source is not None and (inst.a_source == "reg") != (a_regs is not None):
        want = "a_regs" if inst.a_source == "reg" else "a_desc"
        raise OperandError(f"the instruction text reads A from {'registers' if want == 'a_regs' else 'a descriptor'}: pass {want}")
    if smem is None:
        raise OperandError("smem (the shared-memory image, uint8[S]) is required")
    if a_regs is not None:
        if inst.imm_trans_a:
            raise InvalidInstructionError("imm-trans-a does not exist when A comes from registers")
        a = unpack_a(registers(a_regs, inst.a_regs, "a_regs"), inst.atype)
    else:
        a = gather_operand(smem, _u64(a_desc, "a_desc"), m, k, inst.atype, major_from_trans(inst.imm_trans_a),
                           image_address=image_address, name="a_desc")
    b = gather_operand(smem, _u64(b_desc, "b_desc"), n, k, inst.btype, major_from_trans(inst.imm_trans_b),
                       image_address=image_address, name="b_desc")
    return np.ascontiguousarray(a), np.ascontiguousarray(b.T)


def _u64(desc, name):
    if isinstance(desc, (int, np.integer)):
        if not 0 <= int(desc) < 1 << 64:
            raise OperandError(f"{name} must be a 64-bit descriptor value, got {desc}")
        return int(desc)
    return desc


def mma_async(instruction, d_regs, *, b_desc, smem, a_desc=None, a_regs=None, scale_d: bool = True,
              image_address: int = 0) -> np.ndarray:
    """Execute one ``wgmma.mma_async`` and return the new accumulator registers.

    ``instruction``: PTX text or a parsed :class:`~fastmma.isa.WgmmaMmaAsync` (its
    immediates imm-scale-a/b and imm-trans-a/b apply).  ``d_regs``: ``uint32[128, ND]``
    accumulators (C on input).  ``scale_d``: the run-time scale-d predicate (False: D = A·B,
    C ignored).  ``smem``: the shared-memory image (``uint8[S]``), image byte 0 at shared
    address ``image_address`` (1024-byte aligned for the swizzles to match the hardware).
    Nothing is modified; the returned array is new.
    """
    inst = as_instruction(instruction, (WgmmaMmaAsync,))
    c_regs = registers(d_regs, inst.d_regs, "d_regs")
    a, b = gather_operands(inst, smem, a_desc, a_regs, b_desc, image_address)
    c = unpack_d(c_regs, inst.dtype, inst.shape.n)
    d = execute(inst.rule, a, b, c, inst.atype, inst.btype, inst.dtype, inst.dtype,
                use_c=scale_d_flag(scale_d), neg_a=inst.imm_scale_a == -1, neg_b=inst.imm_scale_b == -1)
    return pack_d(d, inst.dtype)
