"""``wmma.load`` / ``wmma.mma`` / ``wmma.store`` on a warp's fragment registers.

Fragments are ``uint32[32, words]``: word ``w`` of lane ``l`` is ``frag[l, w]``, registers in
the order of the PTX vector operand, an ``.f64`` register as two words (low first).  Their
content is exactly what an sm_90 GPU holds (:mod:`fastmma.layout.wmma_fragments`, derived
from the H100 recordings).  Memory is a 1-D ``uint8`` numpy array (for the stacks, also an
image per warp ``[..., bytes]``); ``offset`` is the byte address of the matrix in it and
``stride`` the optional stride operand in elements (PTX ISA 9.7.14.4.2, "Matrix Storage for
WMMA"; alignment rules in :mod:`fastmma.layout.wmma_memory`).

Example::

    a = fastmma.wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", mem, 0)
    ...
    d = fastmma.wmma.mma("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", a, b, c)
    fastmma.wmma.store("wmma.store.d.sync.aligned.row.m16n16k16.f32", mem, 4096, d)

:func:`load_stack`, :func:`mma_stack` and :func:`store_stack` run one instruction for a
stack of warps in one call; :func:`prepare` parses and checks a ``wmma.mma`` once for a
simulator that issues it again and again.
"""

from __future__ import annotations

import functools

import numpy as np

from .errors import OperandError
from .isa import WmmaLoad, WmmaMma, WmmaStore
from .kernels import execute, execute_stack
from .layout import register_file
from .layout.index_maps import checked_registers, fragment_gather, fragment_scatter
from .layout.wmma_fragments import fragment_layout, pack_fragment, unpack_fragment
from .layout.wmma_memory import load_wmma_matrix, store_wmma_matrix
from .mma import as_instruction, broadcast_stacks, flat_stack, kernel_call
from .validate import output_array, public

WARP_SIZE = 32


def _stride(stride):
    if stride is None:
        return None
    if isinstance(stride, (bool, np.bool_)) or not isinstance(stride, (int, np.integer)):
        raise OperandError(f"stride must be an integer number of elements, got {stride!r}")
    return int(stride)


def fragment(values, inst_words: int, name: str) -> np.ndarray:
    """``values`` checked to be a warp fragment ``uint32[32, words]``: one row per lane.

    Raises :class:`~fastmma.errors.OperandError` for another dtype or shape.
    """
    return register_file(values, WARP_SIZE, inst_words, name)


@public
def load(instruction, mem, offset: int = 0, stride: int | None = None, *,
         isa_strict: bool = False) -> np.ndarray:
    """``wmma.load.{a,b,c}``: the fragment registers ``uint32[32, words]`` every lane holds.

    ``stride=None`` takes the ISA's default stride.  ``isa_strict=True`` demands the ISA's
    literal alignment rule (see :mod:`fastmma.layout.wmma_memory`).

    Raises :class:`~fastmma.errors.InvalidInstructionError` for text that is no ``wmma.load``,
    :class:`~fastmma.errors.AlignmentError` for a misaligned address or stride, and
    :class:`~fastmma.errors.MemoryBoundsError` for bytes outside the image.
    Example: ``a = wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.global.f16", mem, 0)``.
    """
    inst = as_instruction(instruction, (WmmaLoad,))
    shape = str(inst.shape)
    bits = load_wmma_matrix(mem, offset, inst.matrix, shape, inst.type, inst.layout, _stride(stride),
                            isa_strict=isa_strict)
    return pack_fragment(bits, fragment_layout(inst.matrix, shape, inst.type, inst.layout))


@public
def load_stack(instruction, mem, offset, stride=None, *, isa_strict: bool = False) -> np.ndarray:
    """:func:`load` for a stack of warps (a simulator's, gathered) in one call: ``offset``
    and ``stride`` are integers or integer arrays (one per warp), ``mem`` one image that
    every warp reads (1-D) or an image per warp ``[..., bytes]``; they broadcast together as
    numpy's arrays do into the stack's shape, and the fragments are ``uint32[..., 32,
    words]`` over it, each warp's bit for bit what :func:`load` gives it.  Every access is
    checked before any is made; an error names the first at fault by its stack index.

    Raises what :func:`load` raises, naming the first warp at fault by its stack index.
    """
    inst = as_instruction(instruction, (WmmaLoad,))
    bits = load_wmma_matrix(mem, offset, inst.matrix, str(inst.shape), inst.type, inst.layout, stride,
                            isa_strict=isa_strict, stack=True)
    layout = fragment_layout(inst.matrix, str(inst.shape), inst.type, inst.layout)
    return pack_fragment(bits, layout)


@public
def mma(instruction, a, b, c) -> np.ndarray:
    """``wmma.mma``: D fragment ``uint32[32, words]`` from the A, B and C fragments.

    Raises :class:`~fastmma.errors.InvalidInstructionError` for text that is no ``wmma.mma``, and
    :class:`~fastmma.errors.OperandError` for fragments of the wrong dtype or shape.
    """
    return mma_on_fragments(as_instruction(instruction, (WmmaMma,)), a, b, c, fragment_layout)


@public
def mma_stack(instruction, a, b, c) -> np.ndarray:
    """:func:`mma` for a stack of warps (a simulator's, gathered) in one call: ``a``, ``b``
    and ``c`` are fragments ``uint32[..., 32, words]`` whose leading (stack) dimensions
    broadcast together as numpy's do (one B fragment for every warp, say), and D is
    ``uint32[..., 32, words]`` over them, each warp's bit for bit what :func:`mma` gives it.
    The instruction runs through the stack kernels (:func:`fastmma.kernels.execute_stack`),
    so the fixed cost of a call is paid once for the stack, not for each warp.

    Raises what :func:`mma` raises.
    """
    return mma_stack_on_fragments(as_instruction(instruction, (WmmaMma,)), a, b, c, fragment_layout)


def prepare(instruction) -> PreparedWarpMma:
    """One ``wmma.mma`` (PTX text or a parsed :class:`~fastmma.isa.WmmaMma`) parsed and
    checked once, its fragment maps built once: a :class:`PreparedWarpMma`, called as
    ``op(a, b, c)`` for each issue, bit for bit what :func:`mma` gives."""
    return PreparedWarpMma(as_instruction(instruction, (WmmaMma,)), fragment_layout)


class PreparedWarpMma:
    """A prepared warp-level mma, ``wmma.mma`` (:func:`prepare`) or ``mma.sync``
    (:func:`fastmma.mma_sync.prepare`); :attr:`instruction` is the parsed instruction.

    ``op(a, b, c)`` takes the A, B and C fragments ``uint32[32, words]`` and returns D's,
    as :func:`mma` and :func:`fastmma.mma_sync.mma` do.  Each call checks the fragments'
    shape and dtype and reads and writes them by index maps built once from the family's
    fragment layouts (``layout_of(matrix, shape, elem_type)``;
    :mod:`fastmma.layout.index_maps`).  ``arrange``: where given, a function of an operand's
    name and its index matrix that lays the operands out as the kernel takes them, with the
    kernel run on stacks (``mma.sync.m8n8k4``'s quad pairs)."""

    def __init__(self, inst, layout_of, arrange=None):
        self.instruction = inst
        shape = str(inst.shape)
        maps = []
        for name, elem in (("a", inst.atype), ("b", inst.btype), ("c", inst.ctype)):
            layout = layout_of(name, shape, elem)
            maps.append((fragment_gather(layout, None if arrange is None else functools.partial(arrange, name)),
                         (WARP_SIZE, layout.words)))
        (self._a, self._a_shape), (self._b, self._b_shape), (self._c, self._c_shape) = maps
        self._d = fragment_scatter(layout_of("d", shape, inst.dtype))
        self._kernel = kernel_call(inst.rule, inst.atype, inst.btype, inst.ctype, inst.dtype, shape=inst.shape,
                                   stack=arrange is not None)

    def __call__(self, a, b, c) -> np.ndarray:
        a = self._a(checked_registers(a, self._a_shape, "a"))
        b = self._b(checked_registers(b, self._b_shape, "b"))
        return self._d(self._kernel(a, b, self._c(checked_registers(c, self._c_shape, "c"))))

    def __repr__(self) -> str:
        module = "wmma" if isinstance(self.instruction, WmmaMma) else "mma_sync"
        return f"fastmma.{module}.prepare({self.instruction.text or str(self.instruction)!r})"


def mma_on_fragments(inst, a, b, c, layout_of) -> np.ndarray:
    """A warp-level mma (``wmma.mma`` or ``mma.sync``) on fragments, its elements placed by
    ``layout_of(matrix, shape, elem_type)`` (the instruction family's fragment maps).

    Raises :class:`~fastmma.errors.OperandError` for fragments of the wrong dtype or shape.
    """
    mats = fragment_matrices(inst, a, b, c, layout_of, stack=False)
    d = execute(inst.rule, mats["a"], mats["b"], mats["c"], inst.atype, inst.btype, inst.ctype, inst.dtype)
    return pack_fragment(d, layout_of("d", str(inst.shape), inst.dtype))


def mma_stack_on_fragments(inst, a, b, c, layout_of) -> np.ndarray:
    """:func:`mma_on_fragments` for a stack of warps, through the stack kernels.

    Raises :class:`~fastmma.errors.OperandError` for fragments of the wrong dtype or shape.
    """
    mats = fragment_matrices(inst, a, b, c, layout_of, stack=True)
    batch = broadcast_stacks({name: x.shape[:-2] for name, x in mats.items()},
                             "the stack dimensions (all but the last two of a, b and c)")
    d = execute_stack(inst.rule, *(flat_stack(mats[name], batch) for name in "abc"), inst.atype, inst.btype,
                      inst.ctype, inst.dtype)
    d_layout = layout_of("d", str(inst.shape), inst.dtype)
    return pack_fragment(d, d_layout).reshape(batch + (WARP_SIZE, d_layout.words))


def fragment_matrices(inst, a, b, c, layout_of, *, stack: bool) -> dict:
    """The A, B and C element bits that the fragments hold (checked to be ``uint32[32,
    words]``, or stacks of them where ``stack``).

    Raises :class:`~fastmma.errors.OperandError` for fragments of the wrong dtype or shape.
    """
    mats = {}
    for name, frag, elem in (("a", a, inst.atype), ("b", b, inst.btype), ("c", c, inst.ctype)):
        layout = layout_of(name, str(inst.shape), elem)
        mats[name] = unpack_fragment(register_file(frag, WARP_SIZE, layout.words, name, stack=stack), layout)
    return mats


@public
def store(instruction, mem, offset: int, d, stride: int | None = None, *, isa_strict: bool = False) -> None:
    """``wmma.store.d``: write the D fragment to ``mem`` (in place) at byte ``offset``.

    Raises :class:`~fastmma.errors.InvalidInstructionError` for text that is no ``wmma.store``,
    :class:`~fastmma.errors.OperandError` for a fragment of the wrong dtype or shape,
    :class:`~fastmma.errors.AlignmentError` for a misaligned address or stride, and
    :class:`~fastmma.errors.MemoryBoundsError` for bytes outside the image.
    """
    inst = as_instruction(instruction, (WmmaStore,))
    shape = str(inst.shape)
    layout = fragment_layout("d", shape, inst.type, inst.layout)
    output_array(mem, "mem", np.uint8, what="wmma.store writes it")
    bits = unpack_fragment(fragment(d, layout.words, "d"), layout)
    store_wmma_matrix(mem, offset, bits, shape, inst.type, inst.layout, _stride(stride), isa_strict=isa_strict)


@public
def store_stack(instruction, mem, offset, d, stride=None, *, isa_strict: bool = False) -> None:
    """:func:`store` for a stack of warps in one call: ``d`` is ``uint32[..., 32, words]``,
    and ``offset``, ``stride`` and ``mem`` are as :func:`load_stack` takes them (``mem`` is
    written in place).  The warps store in the stack's C order, as if one after another:
    where two warps' matrices share bytes (a race on a GPU, whose outcome the ISA leaves
    open), the later warp's bytes are what memory keeps.  Every access is checked before
    memory is written.

    Raises what :func:`store` raises, naming the first warp at fault by its stack index;
    nothing is written then.
    """
    inst = as_instruction(instruction, (WmmaStore,))
    shape = str(inst.shape)
    layout = fragment_layout("d", shape, inst.type, inst.layout)
    output_array(mem, "mem", np.uint8, what="wmma.store writes it")
    bits = unpack_fragment(register_file(d, WARP_SIZE, layout.words, "d", stack=True), layout)
    store_wmma_matrix(mem, offset, bits, shape, inst.type, inst.layout, stride, isa_strict=isa_strict, stack=True)
