"""One ``wgmma.mma_async`` on caller-owned registers and shared memory.

The register-level entry point for simulators: give the warpgroup's accumulator registers
(``uint32[128, ND]``), A as registers (``uint32[128, 4]``) or a 64-bit matrix descriptor,
B's descriptor and the shared-memory image; get back the D registers.  No asynchronous
state is kept (see :mod:`fastmma.warpgroup` for fence / commit_group / wait_group).
:func:`mma_async_stack` does the same for a stack of warpgroups in one call, and
:func:`prepare` parses and checks an instruction once for a simulator that issues it again
and again.
:func:`mma_async_sp` (and :func:`mma_async_sp_stack`) runs the sparse ``wgmma.mma_async.sp``
(PTX ISA 9.7.15.6) with each thread's metadata register (recorded:
tests/golden/probes/q16_wgmma_sp).

Data flow (PTX ISA 9.7.15.5): descriptors -> A and B gathered from the image
(:mod:`fastmma.layout.descriptor`), A and C from register fragments
(:mod:`fastmma.layout.wgmma_fragments`) -> kernel -> D scattered into registers.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import AlignmentError, InvalidInstructionError, OperandError
from .formats import as_numpy, get_format
from .isa import WgmmaMmaAsync, WgmmaMmaAsyncSp
from .kernels import execute, execute_stack
from .layout import register_file
from .layout.descriptor import (MatrixDescriptor, descriptor_values, gather_operand, gather_operand_stack,
                                major_from_trans)
from .layout.index_maps import (DescriptorReader, check_image_address, checked_image, checked_registers,
                                descriptor_value, wgmma_a_gather, wgmma_d_maps)
from .layout.sparse_metadata import warpgroup_kept_columns
from .layout.wgmma_fragments import pack_d, unpack_a, unpack_d
from .mma import as_instruction, broadcast_stacks, kernel_call, scale_d_flag, sparse_rows, sparse_selector
from .validate import public

THREADS = 128


def registers(values, nregs: int, name: str) -> np.ndarray:
    """``values`` checked to be ``uint32[128, nregs]``: one row per thread of the warpgroup.

    Raises :class:`~fastmma.errors.OperandError` for another dtype or shape.
    """
    return register_file(values, THREADS, nregs, name)


def gather_operands(inst: WgmmaMmaAsync, smem, a_desc=None, a_regs=None, b_desc=None,
                    image_address: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The logical A (64×K) and B (K×N) bits one wgmma reads.

    Raises :class:`~fastmma.errors.OperandError` for registers or descriptors of the wrong
    shape, and the descriptor's errors (:class:`~fastmma.errors.AlignmentError`,
    :class:`~fastmma.errors.SharedMemoryBoundsError`) for addresses outside the image.
    """
    _check_sources(inst, a_desc, a_regs, b_desc, smem)
    smem = as_numpy(smem, "smem")
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    if a_regs is not None:
        a = unpack_a(registers(a_regs, inst.a_regs, "a_regs"), inst.atype)
    else:
        a = gather_operand(smem, _u64(a_desc, "a_desc"), m, k, inst.atype, major_from_trans(inst.imm_trans_a),
                           image_address=image_address, name="a_desc")
    b = gather_operand(smem, _u64(b_desc, "b_desc"), n, k, inst.btype, major_from_trans(inst.imm_trans_b),
                       image_address=image_address, name="b_desc")
    return np.ascontiguousarray(a), np.ascontiguousarray(b.T)


def _check_sources(inst: WgmmaMmaAsync, a_desc, a_regs, b_desc, smem) -> None:
    """Where A and B come from, checked against the instruction: B and the image always, A
    from exactly one of a descriptor and registers (the one the text names, where it names
    one), and no imm-trans-a for A in registers."""
    if b_desc is None:
        raise OperandError("b_desc is required: wgmma.mma_async always reads B from shared memory")
    if (a_desc is None) == (a_regs is None):
        raise OperandError("give exactly one of a_desc (A in shared memory) and a_regs (A in registers)")
    if inst.a_source is not None and (inst.a_source == "reg") != (a_regs is not None):
        want = "a_regs" if inst.a_source == "reg" else "a_desc"
        raise OperandError(f"the instruction text reads A from {'registers' if want == 'a_regs' else 'a descriptor'}: pass {want}")
    if smem is None:
        raise OperandError("smem (the shared-memory image, uint8[S]) is required")
    if a_regs is not None and inst.imm_trans_a:
        raise InvalidInstructionError("imm-trans-a does not exist when A comes from registers")


def _u64(desc, name):
    if isinstance(desc, (int, np.integer)):
        if not 0 <= int(desc) < 1 << 64:
            raise OperandError(f"{name} must be a 64-bit descriptor value, got {desc}")
        return int(desc)
    return desc


@public
def mma_async(instruction, d_regs, *, b_desc, smem, a_desc=None, a_regs=None, scale_d: bool = True,
              image_address: int = 0) -> np.ndarray:
    """Execute one ``wgmma.mma_async`` and return the new accumulator registers.

    ``instruction``: PTX text or a parsed :class:`~fastmma.isa.WgmmaMmaAsync` (its
    immediates imm-scale-a/b and imm-trans-a/b apply).  ``d_regs``: ``uint32[128, ND]``
    accumulators (C on input).  ``scale_d``: the run-time scale-d predicate (False: D = A·B,
    C ignored).  ``smem``: the shared-memory image (``uint8[S]``), image byte 0 at shared
    address ``image_address`` (1024-byte aligned for the swizzles to match the hardware).
    Nothing is modified; the returned array is new.

    Raises :class:`~fastmma.errors.InvalidInstructionError` for text that is no
    ``wgmma.mma_async``, :class:`~fastmma.errors.OperandError` for registers, descriptors or an
    image of the wrong type or shape, and :class:`~fastmma.errors.AlignmentError` or
    :class:`~fastmma.errors.SharedMemoryBoundsError` where a descriptor names bytes outside
    the image.  Example: ``d = fastmma.wgmma.mma_async(inst, d, a_desc=a_desc, b_desc=b_desc, smem=smem)``.
    """
    inst = as_instruction(instruction, (WgmmaMmaAsync,))
    c_regs = registers(d_regs, inst.d_regs, "d_regs")
    a, b = gather_operands(inst, smem, a_desc, a_regs, b_desc, image_address)
    c = unpack_d(c_regs, inst.dtype, inst.shape.n)
    d = execute(inst.rule, a, b, c, inst.atype, inst.btype, inst.dtype, inst.dtype,
                use_c=scale_d_flag(scale_d), neg_a=inst.imm_scale_a == -1, neg_b=inst.imm_scale_b == -1)
    return pack_d(d, inst.dtype)


def prepare(instruction) -> PreparedWgmma:
    """One ``wgmma.mma_async`` (PTX text or a parsed
    :class:`~fastmma.isa.WgmmaMmaAsync`) parsed and checked once, its register and
    shared-memory maps built once: a :class:`PreparedWgmma`, called as
    ``op(d_regs, a, b_desc, smem)`` for each issue, bit for bit what :func:`mma_async` gives.

    Example::

        op = fastmma.wgmma.prepare("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16")
        for step in range(k_steps):
            d = op(d, a_desc + 2 * step, b_desc + 2 * step, smem)
    """
    return PreparedWgmma(as_instruction(instruction, (WgmmaMmaAsync,)))


class PreparedWgmma:
    """A prepared ``wgmma.mma_async`` (:func:`prepare`); :attr:`instruction` is the parsed
    instruction.

    ``op(d_regs, a, b_desc, smem, scale_d=True, image_address=0)`` takes what
    :func:`mma_async` takes: ``d_regs`` ``uint32[128, ND]`` (C), ``a`` A's registers
    ``uint32[128, 4]`` or A's descriptor (as the instruction text says where it names the
    source; else a :class:`~fastmma.layout.descriptor.MatrixDescriptor` or 64-bit integer is
    a descriptor and anything else registers), ``b_desc`` B's descriptor, ``smem`` the
    shared-memory image ``uint8[S]`` (byte 0 at shared address ``image_address``) and the
    scale-d predicate; it returns the new D registers.  Each call checks its operands (shape
    and dtype of the registers, the descriptors' bytes inside the image, PTX ISA 9.7.15.5.1)
    and reads them by index maps built once (:mod:`fastmma.layout.index_maps`).
    """

    def __init__(self, inst: WgmmaMmaAsync):
        m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
        self.instruction = inst
        self._c_of, self._regs_of = wgmma_d_maps(n, inst.dtype)
        self._a_of = wgmma_a_gather(inst.atype)
        self._a_desc = DescriptorReader(m, k, get_format(inst.atype), major_from_trans(inst.imm_trans_a), False,
                                        "a_desc")
        self._b_desc = DescriptorReader(n, k, get_format(inst.btype), major_from_trans(inst.imm_trans_b), True,
                                        "b_desc")
        self._kernel = kernel_call(inst.rule, inst.atype, inst.btype, inst.dtype, inst.dtype, shape=inst.shape,
                                   neg_a=inst.imm_scale_a == -1, neg_b=inst.imm_scale_b == -1)
        self._d_shape = (THREADS, inst.d_regs)

    def __call__(self, d_regs, a, b_desc, smem, scale_d=True, image_address=0) -> np.ndarray:
        c = self._c_of(checked_registers(d_regs, self._d_shape, "d_regs"))
        use_c = scale_d if type(scale_d) is bool else scale_d_flag(scale_d)
        smem = checked_image(smem)
        image_address = check_image_address(image_address)
        a = self._a_desc(smem, descriptor_value(a, "a_desc"), image_address) if self._a_is_descriptor(a) else \
            self._a_of(checked_registers(a, (THREADS, 4), "a_regs"))
        if b_desc is None:
            raise OperandError("b_desc is required: wgmma.mma_async always reads B from shared memory")
        b = self._b_desc(smem, descriptor_value(b_desc, "b_desc"), image_address)
        return self._regs_of(self._kernel(a, b, c, use_c))

    def _a_is_descriptor(self, a) -> bool:
        """Whether ``a`` is A's descriptor (else A's registers), checked against the text's A source."""
        given = isinstance(a, (int, np.integer, MatrixDescriptor))
        source = self.instruction.a_source
        if source is not None and given != (source == "desc"):
            want = "a descriptor (a MatrixDescriptor or its 64-bit value)" if source == "desc" else \
                "registers (uint32[128, 4])"
            raise OperandError(f"the instruction text reads A from {want}: got {type(a).__name__} for a")
        if not given and self.instruction.imm_trans_a:
            raise InvalidInstructionError("imm-trans-a does not exist when A comes from registers")
        return given

    def __repr__(self) -> str:
        return f"fastmma.wgmma.prepare({self.instruction.text or str(self.instruction)!r})"


#: :func:`mma_async_stack` runs a stack in parts of about this many bytes of accumulators,
#: so that a part's registers, C and D stay in the cores' caches from one step to the next
#: (timings of the part sizes: docs/performance.md, "Stacks of warpgroups in parts").
STACK_CHUNK_BYTES = 1 << 20


@public
def mma_async_stack(instruction, d_regs, *, b_desc, smem, a_desc=None, a_regs=None, scale_d=True,
                    image_address=0) -> np.ndarray:
    """:func:`mma_async` for a stack of warpgroups (a simulator's, gathered) in one call:
    each warpgroup's D registers are bit for bit what :func:`mma_async` gives it, and the
    fixed cost of a call (checks, the start of the kernels' threads) is paid once for each
    part of the stack (:data:`STACK_CHUNK_BYTES`), not for each warpgroup.

    ``d_regs``: ``uint32[..., 128, ND]``, the accumulators of each warpgroup; ``a_regs``:
    ``uint32[..., 128, 4]``; ``a_desc``, ``b_desc``: a descriptor (a
    :class:`~fastmma.layout.descriptor.MatrixDescriptor` or its 64-bit value) or an array
    of 64-bit values, one per warpgroup; ``smem``: ``uint8[..., S]``, one shared-memory
    image or one per warpgroup (or per SM, broadcast over its warpgroups); ``scale_d`` and
    ``image_address``: one value or an array.  The leading (stack) dimensions of all of
    these broadcast together as numpy's do, and D is ``uint32[..., 128, ND]`` over them.
    Operands whose descriptors differ only in their start addresses are gathered by one
    indexing, and the instruction runs through the stack kernels
    (:func:`fastmma.kernels.execute_stack`).  Nothing is modified.

    Raises what :func:`mma_async` raises, for the first warpgroup at fault.
    """
    inst = as_instruction(instruction, (WgmmaMmaAsync,))
    st = _stack(inst, d_regs, a_desc, a_regs, b_desc, smem, scale_d, image_address)
    m, n = inst.shape.m, inst.shape.n
    out = np.empty((st.count, THREADS, inst.d_regs), np.uint32)
    step = max(1, STACK_CHUNK_BYTES // (m * n * get_format(inst.dtype).bits // 8))
    for s0 in range(0, st.count, step):
        part = slice(s0, s0 + step)
        c = unpack_d(st.c_regs[part], inst.dtype, n)
        out[part] = pack_d(_execute(inst, st.a[part], st.b[part], c, st.scale[part]), inst.dtype)
    return out.reshape(st.batch + (THREADS, inst.d_regs))


@public
def mma_async_sp(instruction, d_regs, *, e_regs, b_desc, smem, a_desc=None, a_regs=None, scale_d: bool = True,
                 selector: int | None = None, image_address: int = 0) -> np.ndarray:
    """Execute one ``wgmma.mma_async.sp`` (PTX ISA 9.7.15.6) and return the new accumulator
    registers ``uint32[128, ND]``.

    As :func:`mma_async`, with A (registers ``uint32[128, 4]`` or a descriptor) the compressed
    64 x K/2 matrix, laid out as a dense A of K/2 would be, B (a descriptor) K x N, and
    ``e_regs`` (``uint32[128]`` or ``uint32[128, 1]``) each thread's ``sp-meta`` register.
    ``selector`` is the sparsity selector ``sp-sel``; it may instead come with the
    instruction's operands, and must where both are given agree.  Metadata that the selected
    threads hold and the ISA leaves undefined raise :class:`~fastmma.errors.OperandError`.
    """
    return mma_async_sp_stack(instruction, d_regs, e_regs=e_regs, b_desc=b_desc, smem=smem, a_desc=a_desc,
                              a_regs=a_regs, scale_d=scale_d, selector=selector, image_address=image_address)


@public
def mma_async_sp_stack(instruction, d_regs, *, e_regs, b_desc, smem, a_desc=None, a_regs=None, scale_d=True,
                       selector: int | None = None, image_address=0) -> np.ndarray:
    """:func:`mma_async_sp` for a stack of warpgroups in one call, the stack dimensions of
    every operand (``e_regs``: ``uint32[..., 128]`` or ``[..., 128, 1]``) broadcast together as
    in :func:`mma_async_stack`.  Each row of D is the GEMV of its kept products
    (:func:`fastmma.mma.sparse_rows`), every row of the stack in one call of the kernels.

    Raises what :func:`mma_async_sp` raises, for the first warpgroup at fault.
    """
    inst = as_instruction(instruction, (WgmmaMmaAsyncSp,))
    selector = sparse_selector(inst, selector, inst.selectors, f"{inst.type_row.name} wgmma.mma_async.sp")
    e = as_numpy(e_regs, "e_regs")
    if e.ndim >= 2 and e.shape[-2:] == (THREADS, 1):
        e = e[..., 0]
    e = register_file(e[..., None], THREADS, 1, "e_regs (one sp-meta register a thread)", stack=True)[..., 0]
    st = _stack(inst, d_regs, a_desc, a_regs, b_desc, smem, scale_d, image_address, extra={"e_regs": e.shape[:-1]})
    kept = warpgroup_kept_columns(st.flat(e, (THREADS,)), inst.atype, inst.metadata_shape, selector)
    out = np.empty((st.count, THREADS, inst.d_regs), np.uint32)
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    # each row meets a B of its own (its kept rows): parts of about STACK_CHUNK_BYTES of them
    step = max(1, STACK_CHUNK_BYTES // (m * k // 2 * n * get_format(inst.btype).storage.itemsize))
    for s0 in range(0, st.count, step):
        part = np.arange(s0, min(s0 + step, st.count))
        c = unpack_d(st.c_regs[part], inst.dtype, n)
        for use_c in (True, False):  # the scale-d predicate of each warpgroup
            which = np.flatnonzero(st.scale[part] == use_c)
            if which.size:
                at = part[which]
                d = sparse_rows(inst, st.a[at], kept[at], st.b[at], c[which], use_c=use_c,
                                neg_a=inst.imm_scale_a == -1, neg_b=inst.imm_scale_b == -1)
                out[at] = pack_d(d, inst.dtype)
    return out.reshape(st.batch + (THREADS, inst.d_regs))


class _Stack:
    """A stack of warpgroups' operands, gathered: ``a`` (S, 64, K of A) and ``b`` (S, K, N)
    bits, ``c_regs`` (S, 128, ND), ``scale`` (S,), the broadcast ``batch`` and ``flat`` (an
    array broadcast to it, as S entries)."""

    def __init__(self, batch, a, b, c_regs, scale, flat):
        self.batch, self.a, self.b, self.c_regs, self.scale, self.flat = batch, a, b, c_regs, scale, flat
        self.count = math.prod(batch)


def _stack(inst, d_regs, a_desc, a_regs, b_desc, smem, scale_d, image_address, extra=None) -> _Stack:
    """The operands of a stack of ``wgmma.mma_async`` or ``.sp`` checked, broadcast and gathered
    (A of K/2 columns for ``.sp``)."""
    _check_sources(inst, a_desc, a_regs, b_desc, smem)
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    ka = k // 2 if isinstance(inst, WgmmaMmaAsyncSp) else k
    c_regs = register_file(d_regs, THREADS, inst.d_regs, "d_regs", stack=True)
    a_regs = register_file(a_regs, THREADS, inst.a_regs, "a_regs", stack=True) if a_regs is not None else None
    images = as_numpy(smem, "smem")
    if images.dtype != np.uint8 or images.ndim < 1:
        raise OperandError(f"smem must be uint8 images, uint8[..., S], got dtype {images.dtype} and shape "
                           f"{images.shape}")
    a_desc = descriptor_values(a_desc, "a_desc") if a_desc is not None else None
    b_desc = descriptor_values(b_desc, "b_desc")
    scale = _predicates(scale_d)
    address = _image_addresses(image_address)
    parts = {"d_regs": c_regs.shape[:-2], "a_regs": None if a_regs is None else a_regs.shape[:-2],
             "a_desc": None if a_desc is None else a_desc.shape, "b_desc": b_desc.shape, "smem": images.shape[:-1],
             "scale_d": scale.shape, "image_address": address.shape, **(extra or {})}
    batch = broadcast_stacks({name: shape for name, shape in parts.items() if shape is not None},
                             "the stack dimensions (all but the last two of d_regs and a_regs, all but the last "
                             "of smem and e_regs, all of the others)")
    count = math.prod(batch)

    def flat(x, tail=()):
        return np.broadcast_to(x, batch + tail).reshape((count,) + tail)

    image_of = flat(np.arange(math.prod(images.shape[:-1])).reshape(images.shape[:-1]))
    images = np.ascontiguousarray(images.reshape(-1, images.shape[-1]))
    address = flat(address)
    if a_regs is not None:
        a = unpack_a(flat(a_regs, (THREADS, inst.a_regs)), inst.atype)
    else:
        a = gather_operand_stack(images, image_of, flat(a_desc), m, ka, inst.atype,
                                 major_from_trans(inst.imm_trans_a), image_address=address, name="a_desc")
    b = gather_operand_stack(images, image_of, flat(b_desc), n, k, inst.btype, major_from_trans(inst.imm_trans_b),
                             image_address=address, name="b_desc")
    b = np.ascontiguousarray(b.transpose(0, 2, 1))
    return _Stack(batch, a, b, flat(c_regs, (THREADS, inst.d_regs)), flat(scale), flat)


def _execute(inst: WgmmaMmaAsync, a, b, c, scale) -> np.ndarray:
    """D's bits ``[S, 64, N]`` of a stack of A, B and C bits and each one's scale-d
    (:func:`~fastmma.kernels.execute_stack`, once for each predicate present)."""
    def run(a, b, c, use_c):
        return execute_stack(inst.rule, a, b, c, inst.atype, inst.btype, inst.dtype, inst.dtype, use_c=use_c,
                             neg_a=inst.imm_scale_a == -1, neg_b=inst.imm_scale_b == -1)

    if scale.all() or not scale.any():  # one predicate: no copies of the parts
        return run(a, b, c, bool(scale.all()))
    d = np.empty(c.shape, c.dtype)
    for use_c in (True, False):
        which = np.flatnonzero(scale == use_c)
        d[which] = run(a[which], b[which], c[which], use_c)
    return d


def _predicates(scale_d) -> np.ndarray:
    """The scale-d predicate of each warpgroup: one value (:func:`~fastmma.mma.scale_d_flag`)
    or an array of bools (or of 0 and 1)."""
    if np.ndim(scale_d) == 0:
        return np.array(scale_d_flag(scale_d))
    arr = np.asarray(scale_d)
    if arr.dtype != np.bool_ and not (arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all()):
        raise OperandError(f"scale_d must be a bool (or 0 / 1) or an array of them, got {arr.dtype} values")
    return arr.astype(np.bool_)


def _image_addresses(image_address) -> np.ndarray:
    """Each image's shared address, checked to be non-negative and 16-byte aligned."""
    arr = np.asarray(image_address)
    if arr.dtype.kind not in "iu":
        raise OperandError(f"image_address must be an integer shared address or an array of them, got {arr.dtype}")
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        raise OperandError(f"image_address must be a non-negative shared address, got {arr.min()}")
    if (arr % 16).any():
        raise AlignmentError(f"image_address must be 16-byte aligned, got {arr[arr % 16 != 0].ravel()[0]}")
    return arr
