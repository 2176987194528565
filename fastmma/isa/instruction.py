"""Immutable instruction objects: what a parsed wgmma / wmma / mma statement says.

An instruction knows its qualifiers, its operands (when the text had them), its fragment
sizes and its numerics rule.  It knows nothing of registers' contents or memory: executing
it is the job of ``fastmma.wmma``, ``fastmma.wgmma`` and ``fastmma.warpgroup``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidInstructionError
from . import numerics, tables


@dataclass(frozen=True)
class Shape:
    """``.mMnNkK``."""

    m: int
    n: int
    k: int

    def __str__(self) -> str:
        return f"m{self.m}n{self.n}k{self.k}"


@dataclass(frozen=True)
class Operand:
    """One operand as written.

    ``kind`` is ``"reg"`` (a register or predicate name, maybe negated with ``!``),
    ``"imm"`` (an integer literal), ``"vector"`` (a brace-enclosed register list) or
    ``"address"`` (``[reg]``, ``[reg+imm]`` or ``[imm]``).
    """

    kind: str
    text: str
    name: str | None = None
    value: int | None = None
    regs: tuple[str, ...] = ()
    negated: bool = False

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Instruction:
    """Base of every parsed statement: its opcode, source text and operands (or ``None``
    when the text gave qualifiers only)."""

    opcode: str
    text: str = field(default="", compare=False)
    operands: tuple[Operand, ...] | None = field(default=None, compare=False)

    family = ""

    def __str__(self) -> str:
        return self.text or self.opcode


@dataclass(frozen=True)
class WgmmaFence(Instruction):
    """``wgmma.fence``: orders register and shared-memory accesses before the next wgmma."""
    family = "wgmma"


@dataclass(frozen=True)
class WgmmaCommitGroup(Instruction):
    """``wgmma.commit_group``: closes the pending wgmma instructions into one async group."""
    family = "wgmma"


@dataclass(frozen=True)
class WgmmaWaitGroup(Instruction):
    """``wgmma.wait_group N``: wait until at most ``n`` groups are pending."""

    n: int = 0
    family = "wgmma"

    def __post_init__(self):
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
            raise InvalidInstructionError(f"wgmma.wait_group N must be a non-negative integer, got {self.n!r}")


@dataclass(frozen=True)
class _WgmmaMma(Instruction):
    """The fields and checks ``wgmma.mma_async`` and ``wgmma.mma_async.sp`` share.

    ``a_source`` is ``"desc"`` or ``"reg"`` (``None`` when the text had no operands).
    ``imm_scale_a/b`` (±1) negate A/B; ``imm_trans_a/b`` (0/1) read A/B MN-major from
    shared memory.  ``scale_d`` is the scale-d operand (predicate or immediate) or None.
    """

    shape: Shape = Shape(64, 8, 16)
    dtype: str = "f32"
    atype: str = "f16"
    btype: str = "f16"
    satfinite: bool = False
    op: str | None = None
    a_source: str | None = None
    scale_d: Operand | None = field(default=None, compare=False)
    imm_scale_a: int = 1
    imm_scale_b: int = 1
    imm_trans_a: int = 0
    imm_trans_b: int = 0

    def __post_init__(self):
        for name, allowed in (("imm_scale_a", (-1, 1)), ("imm_scale_b", (-1, 1)),
                              ("imm_trans_a", (0, 1)), ("imm_trans_b", (0, 1))):
            value = getattr(self, name)
            if value not in allowed or isinstance(value, bool):
                raise InvalidInstructionError(
                    f"{name.replace('_', '-')} must be {' or '.join(map(str, allowed))}, got {value!r}")
        row = tables.wgmma_type_row(self.atype, self.btype)
        if row is not None and not row.transpose and (self.imm_trans_a or self.imm_trans_b):
            raise InvalidInstructionError(
                f"imm-trans-a/-b exist only for .f16/.bf16 wgmma.mma_async, not .{self.atype}")
        if row is not None and not row.scale and (self.imm_scale_a != 1 or self.imm_scale_b != 1):
            raise InvalidInstructionError(
                f"imm-scale-a/-b exist only for floating-point wgmma.mma_async, not .{self.atype}")
        if self.a_source == "reg" and self.imm_trans_a:
            raise InvalidInstructionError("imm-trans-a does not exist when A comes from registers")
        if self.a_source not in (None, "reg", "desc"):
            raise InvalidInstructionError(f"a_source must be 'reg' or 'desc', got {self.a_source!r}")

    @property
    def ctype(self) -> str:
        return self.dtype

    @property
    def a_regs(self) -> int:
        """Registers per thread of the A fragment (always 4)."""
        return 4

    @property
    def d_regs(self) -> int:
        """Registers per thread of the accumulator: N/4 packed f16x2, else N/2."""
        return self.shape.n // 4 if self.dtype == "f16" else self.shape.n // 2

    def with_operands(self, **immediates):
        """A copy with other immediates (``imm_scale_a=-1``, ...)."""
        from dataclasses import replace

        return replace(self, **immediates)


@dataclass(frozen=True)
class WgmmaMmaAsync(_WgmmaMma):
    """``wgmma.mma_async``: D (64×N) = A (64×K) · B (K×N) + D, across a warpgroup (PTX ISA
    9.7.15.5)."""

    family = "wgmma"

    @property
    def rule(self):
        """The numerics rule of this instruction (:mod:`fastmma.isa.numerics`)."""
        return numerics.wgmma_rule(self.atype, self.dtype, self.shape.k, self.satfinite, self.op)


@dataclass(frozen=True)
class WgmmaMmaAsyncSp(_WgmmaMma):
    """``wgmma.mma_async.sp``: D (64×N) = A (64×K) · B (K×N) + D across a warpgroup, with A
    structured sparse (PTX ISA 9.7.15.6): A (registers or a descriptor) holds the compressed
    64×K/2 matrix, and each thread's metadata register ``sp-meta`` says where the kept elements
    of its warp's rows lie.  ``selector`` is the sparsity selector ``sp-sel`` (``None`` where the
    text gave no operands)."""

    shape: Shape = Shape(64, 8, 32)
    selector: int | None = None
    family = "wgmma_sp"

    @property
    def rule(self):
        """The numerics rule of this instruction (:mod:`fastmma.isa.numerics`)."""
        return numerics.wgmma_sp_rule(self.atype, self.dtype, self.shape.k, self.satfinite)

    @property
    def type_row(self):
        """The row of ``tables.WGMMA_TYPE_ROWS`` this form belongs to."""
        return tables.wgmma_sp_type_row(self.atype, self.btype)

    @property
    def selectors(self) -> tuple[int, ...]:
        """The sparsity selectors the ISA allows this form (``tables.WGMMA_SP_SELECTORS``)."""
        return tables.WGMMA_SP_SELECTORS[self.type_row.name]

    @property
    def metadata_shape(self) -> str:
        """The ``mma.sp`` shape whose metadata map each warp of the warpgroup follows for its 16
        rows (``m16n8k{K}``; recorded: tests/golden/probes/q16_wgmma_sp)."""
        return f"m16n8k{self.shape.k}"


@dataclass(frozen=True)
class WmmaLoad(Instruction):
    """``wmma.load.{a,b,c}``: one fragment from memory, ``stride`` in elements."""

    matrix: str = "a"
    layout: str = "row"
    shape: Shape = Shape(16, 16, 16)
    state_space: str | None = None
    type: str = "f16"
    family = "wmma"

    @property
    def regs(self) -> int:
        """Registers per thread of the fragment (PTX ISA 9.7.14.2)."""
        return tables.wmma_fragment_regs(self.matrix, str(self.shape), self.type)

    @property
    def words(self) -> int:
        """32-bit words per thread (an f64 register is two words)."""
        return self.regs * (2 if self.type == "f64" else 1)


@dataclass(frozen=True)
class WmmaStore(Instruction):
    """``wmma.store.d``: the D fragment to memory."""

    layout: str = "row"
    shape: Shape = Shape(16, 16, 16)
    state_space: str | None = None
    type: str = "f32"
    family = "wmma"

    @property
    def matrix(self) -> str:
        """The matrix stored: always ``"d"``."""
        return "d"

    @property
    def regs(self) -> int:
        """Registers per thread of the D fragment (PTX ISA 9.7.14.2)."""
        return tables.wmma_fragment_regs("d", str(self.shape), self.type)

    @property
    def words(self) -> int:
        """32-bit words per thread (an f64 register is two words)."""
        return self.regs * (2 if self.type == "f64" else 1)


@dataclass(frozen=True)
class _WarpMma(Instruction):
    """What ``wmma.mma`` and ``mma.sync`` share: a warp's D = A · B + C on fragments, their
    qualifiers, and fragment sizes from a table of registers per thread (:meth:`_regs`)."""

    alayout: str = "row"
    blayout: str = "col"
    shape: Shape = Shape(16, 16, 16)
    dtype: str = "f32"
    atype: str = "f16"
    btype: str = "f16"
    ctype: str = "f32"
    satfinite: bool = False
    rounding: str | None = None
    op: str | None = None

    _regs = staticmethod(tables.wmma_fragment_regs)

    def fragment_regs(self, matrix: str) -> int:
        """Registers per thread of the ``matrix`` ("a", "b", "c" or "d") fragment."""
        elem = {"a": self.atype, "b": self.btype, "c": self.ctype, "d": self.dtype}[matrix]
        return self._regs(matrix, str(self.shape), elem)

    def fragment_words(self, matrix: str) -> int:
        """32-bit words per thread (an f64 register is two words)."""
        return self.fragment_regs(matrix) * (2 if self.atype == "f64" else 1)


@dataclass(frozen=True)
class WmmaMma(_WarpMma):
    """``wmma.mma``: D = A · B + C across a warp, on fragments."""

    family = "wmma"

    @property
    def rule(self):
        """The numerics rule of this instruction (:mod:`fastmma.isa.numerics`)."""
        return numerics.wmma_rule(self.atype, self.ctype, self.dtype, self.shape.k, self.satfinite,
                                  self.op, self.rounding)


@dataclass(frozen=True)
class MmaSync(_WarpMma):
    """``mma.sync.aligned``: D (M×N) = A (M×K) · B (K×N) + C across a warp, on fragments
    in registers (PTX ISA 9.7.14.5).  ``rounding`` is ``"rn"`` for .f64 (its only and
    default mode) and ``None`` otherwise; ``op`` is .and/.xor for .b1.  ``m8n8k4`` with .f16
    inputs is four independent products a warp, one per quad pair (:attr:`quad_pairs`)."""

    shape: Shape = Shape(16, 8, 16)
    family = "mma"
    _regs = staticmethod(tables.mma_fragment_regs)

    @property
    def quad_pairs(self) -> bool:
        """Whether the warp runs four independent M x N x K products, one per quad pair (its
        row of ``tables.MMA_TYPE_ROWS`` says)."""
        return tables.mma_type_row(self.atype, self.btype, str(self.shape)).quad_pairs

    @property
    def rule(self):
        """The numerics rule of this instruction (:mod:`fastmma.isa.numerics`)."""
        return numerics.mma_rule(self.atype, self.ctype, self.dtype, self.shape.k, self.satfinite,
                                 self.op, self.rounding, self.quad_pairs)


@dataclass(frozen=True)
class MmaSp(_WarpMma):
    """``mma.sp{::ordered_metadata}.sync.aligned``: D (M×N) = A (M×K) · B (K×N) + C across a
    warp, with A structured sparse (PTX ISA 9.7.14.6): its fragment holds the compressed M×K/2
    matrix, and the metadata operand ``e`` says where each kept element lies in its row.
    ``spvariant`` is ``"sp"`` or ``"sp::ordered_metadata"``; ``selector`` is the sparsity
    selector operand ``f`` (which threads of each four hold the metadata), ``None`` where the
    text gave no operands."""

    spvariant: str = "sp::ordered_metadata"
    selector: int | None = None
    shape: Shape = Shape(16, 8, 32)
    family = "mma_sp"
    _regs = staticmethod(tables.mma_sp_fragment_regs)

    @property
    def type_row(self):
        """The row of ``tables.MMA_SP_TYPE_ROWS`` this form belongs to."""
        return tables.mma_sp_type_row(self.atype, self.btype)

    @property
    def rule(self):
        """The numerics rule of this instruction (:mod:`fastmma.isa.numerics`)."""
        return numerics.mma_sp_rule(self.atype, self.ctype, self.dtype, self.shape.k, self.satfinite)


@dataclass(frozen=True)
class _MatrixMove(Instruction):
    """What ``ldmatrix`` and ``stmatrix`` share: ``num`` 8x8 matrices of 16-bit elements,
    optionally transposed, one register of each per lane."""

    shape: str = "m8n8"
    num: int = 1
    trans: bool = False
    state_space: str | None = None
    type: str = "b16"

    @property
    def regs(self) -> int:
        """Registers per lane: one of each matrix."""
        return self.num


@dataclass(frozen=True)
class Ldmatrix(_MatrixMove):
    """``ldmatrix.sync.aligned.m8n8.num{.trans}{.ss}.b16 r, [p]`` (PTX ISA 9.7.14.5.15): a warp
    loads ``num`` 8x8 matrices of 16-bit elements from shared memory, lane ``8i + r`` giving
    the address of row ``r`` of matrix ``i``; each lane receives one register of each."""

    family = "ldmatrix"


@dataclass(frozen=True)
class Stmatrix(_MatrixMove):
    """``stmatrix.sync.aligned.m8n8.num{.trans}{.ss}.b16 [p], r`` (PTX ISA 9.7.14.5.16): the
    reverse of :class:`Ldmatrix`, each lane's registers to the rows the lanes address."""

    family = "stmatrix"


@dataclass(frozen=True)
class Movmatrix(Instruction):
    """``movmatrix.sync.aligned.m8n8.trans.b16 d, a`` (PTX ISA 9.7.14.5.17): a warp transposes one
    8x8 matrix of 16-bit elements held in registers, one 32-bit register ``a`` a lane (the
    fragment ``ldmatrix`` loads), into ``d`` of every lane, each lane's ``d`` holding its
    position of the transposed matrix."""

    shape: str = "m8n8"
    type: str = "b16"
    family = "movmatrix"
