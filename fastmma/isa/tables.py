"""The PTX ISA's tables of valid qualifiers for wgmma, wmma and mma, held as data.

Sources: PTX ISA sections 9.7.15.5.2 (``wgmma.mma_async``), 9.7.14.4 (``wmma.load``,
``wmma.store``, ``wmma.mma``), 9.7.14.2 ("Matrix Fragments for WMMA", register counts) and
9.7.14.5 ("Matrix multiply-accumulate operation using mma instruction": ``mma.sync`` and its
fragments), the last narrowed to what ``ptxas -arch=sm_90a`` (CUDA 13.0) accepts.
Nothing here decides numerics or element positions; the parser checks text against these
tables and the rest of fastmma reads the results.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# ---------------------------------------------------------------- qualifier vocabulary

TYPES = ("f64", "f32", "tf32", "f16", "bf16", "e4m3", "e5m2", "s32", "s8", "u8", "s4", "u4", "b1")
LAYOUTS = ("row", "col")
ROUNDINGS = ("rn", "rz", "rm", "rp")
BIT_OPS = ("and", "xor")
STATE_SPACES = ("global", "shared", "shared::cta")

# ---------------------------------------------------------------- wgmma.mma_async

_N_ALL = tuple(range(8, 257, 8))
_N_INT = (8, 16, 24, 32) + tuple(range(48, 225, 16))
_N_B1 = (8, 16, 24, 32) + tuple(range(48, 257, 16))


@dataclass(frozen=True)
class WgmmaTypeRow:
    """One row of the wgmma.mma_async syntax tables: the inputs, k, N and D types allowed."""

    name: str
    atypes: tuple[str, ...]
    btypes: tuple[str, ...]
    k: int
    n_values: tuple[int, ...]
    dtypes: tuple[str, ...]
    transpose: bool = False  # imm-trans-a/-b exist
    scale: bool = False  # imm-scale-a/-b exist
    satfinite: bool = False
    ops: tuple[str, ...] = ()  # b1: .op.popc required


WGMMA_M = 64

WGMMA_TYPE_ROWS = (
    WgmmaTypeRow(".f16", ("f16",), ("f16",), 16, _N_ALL, ("f16", "f32"), transpose=True, scale=True),
    WgmmaTypeRow(".bf16", ("bf16",), ("bf16",), 16, _N_ALL, ("f32",), transpose=True, scale=True),
    WgmmaTypeRow(".tf32", ("tf32",), ("tf32",), 8, _N_ALL, ("f32",), scale=True),
    WgmmaTypeRow("FP8", ("e4m3", "e5m2"), ("e4m3", "e5m2"), 32, _N_ALL, ("f16", "f32"), scale=True),
    WgmmaTypeRow("integer", ("s8", "u8"), ("s8", "u8"), 32, _N_INT, ("s32",), satfinite=True),
    WgmmaTypeRow("single-bit", ("b1",), ("b1",), 256, _N_B1, ("s32",), ops=("and",)),
)


def wgmma_type_row(atype: str, btype: str) -> WgmmaTypeRow | None:
    """The syntax-table row whose .atype/.btype lists hold this pair, if any."""
    for row in WGMMA_TYPE_ROWS:
        if atype in row.atypes and btype in row.btypes:
            return row
    return None


#: wgmma.mma_async.sp (PTX ISA 9.7.15.6): every row of :data:`WGMMA_TYPE_ROWS` but .b1, with K
#: twice the row's (A holds K/2 elements of each row) and these sparsity selectors (as ptxas of
#: CUDA 13.0 takes them for sm_90a)
WGMMA_SP_SELECTORS = {".f16": (0, 1), ".bf16": (0, 1), ".tf32": (0, 1), "FP8": (0,), "integer": (0,)}


def wgmma_sp_type_row(atype: str, btype: str) -> WgmmaTypeRow | None:
    """The dense row whose types this wgmma.mma_async.sp pair has, if it has a sparse form."""
    row = wgmma_type_row(atype, btype)
    return row if row is not None and row.name in WGMMA_SP_SELECTORS else None


# ---------------------------------------------------------------- wmma


@dataclass(frozen=True)
class WmmaTypeRow:
    """One row of the wmma syntax tables.

    ``ab_types``: element types of A and B; ``cd_types``: accumulator types; ``shapes``;
    ``a_layouts``/``b_layouts``: the layouts allowed for A and B (sub-byte and b1 are fixed
    to row/col); ``mma_types``: how the ``wmma.mma`` type qualifiers are spelled, as the
    positions they name (``"d"``, ``"a"``, ``"b"``, ``"c"``).
    """

    name: str
    ab_types: tuple[str, ...]
    cd_types: tuple[str, ...]
    shapes: tuple[str, ...]
    mma_types: tuple[str, ...]
    a_layouts: tuple[str, ...] = LAYOUTS
    b_layouts: tuple[str, ...] = LAYOUTS
    satfinite: bool = False
    roundings: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()


_WMMA_16 = ("m16n16k16", "m8n32k16", "m32n8k16")

WMMA_TYPE_ROWS = (
    WmmaTypeRow(".f16", ("f16",), ("f16", "f32"), _WMMA_16, ("d", "c")),
    WmmaTypeRow(".bf16", ("bf16",), ("f32",), _WMMA_16, ("d", "a", "b", "c")),
    WmmaTypeRow(".tf32", ("tf32",), ("f32",), ("m16n16k8",), ("d", "a", "b", "c")),
    WmmaTypeRow(".f64", ("f64",), ("f64",), ("m8n8k4",), ("d", "a", "b", "c"), roundings=ROUNDINGS),
    WmmaTypeRow("integer", ("s8", "u8"), ("s32",), _WMMA_16, ("d", "a", "b", "c"), satfinite=True),
    WmmaTypeRow("sub-byte", ("s4", "u4"), ("s32",), ("m8n8k32",), ("d", "a", "b", "c"),
                ("row",), ("col",), satfinite=True),
    WmmaTypeRow("single-bit", ("b1",), ("s32",), ("m8n8k128",), ("d", "a", "b", "c"),
                ("row",), ("col",), ops=BIT_OPS),
)

WMMA_SHAPES = tuple(dict.fromkeys(s for row in WMMA_TYPE_ROWS for s in row.shapes))


def wmma_rows_for_shape(shape: str) -> tuple[WmmaTypeRow, ...]:
    """The wmma type rows that have ``shape`` (e.g. ``"m16n16k16"``), in table order."""
    return tuple(row for row in WMMA_TYPE_ROWS if shape in row.shapes)


def wmma_row_for_ab(atype: str, shape: str | None = None) -> WmmaTypeRow | None:
    """The wmma type row whose A/B types include ``atype`` (and that has ``shape``, where
    given), or None."""
    for row in WMMA_TYPE_ROWS:
        if atype in row.ab_types and (shape is None or shape in row.shapes):
            return row
    return None


# Registers per thread of each wmma fragment (PTX ISA "Matrix Fragments for WMMA").  A
# register is 32 bits, except .f64 fragments whose registers are 64 bits.
_AB_REGS = {
    ("f16", "m16n16k16"): (8, 8), ("f16", "m8n32k16"): (8, 8), ("f16", "m32n8k16"): (8, 8),
    ("bf16", "m16n16k16"): (4, 4), ("bf16", "m8n32k16"): (2, 8), ("bf16", "m32n8k16"): (8, 2),
    ("s8", "m16n16k16"): (2, 2), ("s8", "m8n32k16"): (1, 4), ("s8", "m32n8k16"): (4, 1),
    ("tf32", "m16n16k8"): (4, 4),
    ("f64", "m8n8k4"): (1, 1),
    ("s4", "m8n8k32"): (1, 1),
    ("b1", "m8n8k128"): (1, 1),
}
_CD_REGS = {"f16": 4, "f32": 8, "s32": 8, "f64": 2}
_CD_REGS_SMALL = {"m8n8k32": 2, "m8n8k128": 2, "m8n8k4": 2}


def wmma_fragment_regs(matrix: str, shape: str, elem_type: str) -> int:
    """Registers per thread of the ``matrix`` ("a", "b", "c" or "d") fragment."""
    if matrix in ("c", "d"):
        return _CD_REGS_SMALL.get(shape, _CD_REGS[elem_type])
    key = {"u8": "s8", "u4": "s4"}.get(elem_type, elem_type)
    return _AB_REGS[(key, shape)][0 if matrix == "a" else 1]


# ---------------------------------------------------------------- mma (mma.sync)


@dataclass(frozen=True)
class MmaTypeRow:
    """One row of the mma.sync syntax tables (PTX ISA 9.7.14.5), as ptxas -arch=sm_90a
    accepts them.

    ``atypes``/``btypes``: element types of A and B (any pair of the two lists);
    ``shapes``; ``cd_types``: accumulator types, with .dtype equal to .ctype unless
    ``cd_pairs`` lists the (.dtype, .ctype) pairs allowed (".dtype must be '.f32' when
    .ctype is '.f32'", ptxas); ``a_layouts``/``b_layouts``: ``.row.col`` for every form but
    m8n8k4 .f16, which takes either for each; ``satfinite``: .satfinite allowed; ``ops``:
    .op.popc required (b1); ``roundings``: the rounding modifiers allowed (f64 only, default
    .rn); ``quad_pairs``: four independent products a warp, one per quad pair (m8n8k4 .f16).
    """

    name: str
    atypes: tuple[str, ...]
    btypes: tuple[str, ...]
    shapes: tuple[str, ...]
    cd_types: tuple[str, ...]
    a_layouts: tuple[str, ...] = ("row",)
    b_layouts: tuple[str, ...] = ("col",)
    satfinite: bool = False
    ops: tuple[str, ...] = ()
    roundings: tuple[str, ...] = ()
    cd_pairs: tuple[tuple[str, str], ...] = ()
    quad_pairs: bool = False


_FP8 = ("e4m3", "e5m2")

MMA_TYPE_ROWS = (
    MmaTypeRow(".f16 m8n8k4", ("f16",), ("f16",), ("m8n8k4",), ("f16", "f32"), ("row", "col"), ("row", "col"),
               cd_pairs=(("f16", "f16"), ("f32", "f16"), ("f32", "f32")), quad_pairs=True),
    MmaTypeRow(".f16", ("f16",), ("f16",), ("m16n8k8", "m16n8k16"), ("f16", "f32")),
    MmaTypeRow(".bf16", ("bf16",), ("bf16",), ("m16n8k8", "m16n8k16"), ("f32",)),
    MmaTypeRow(".tf32", ("tf32",), ("tf32",), ("m16n8k4", "m16n8k8"), ("f32",)),
    MmaTypeRow("FP8", _FP8, _FP8, ("m16n8k16", "m16n8k32"), ("f16", "f32")),
    MmaTypeRow(".f64", ("f64",), ("f64",), ("m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16"), ("f64",),
               roundings=("rn",)),
    MmaTypeRow("integer", ("s8", "u8"), ("s8", "u8"), ("m8n8k16", "m16n8k16", "m16n8k32"), ("s32",),
               satfinite=True),
    MmaTypeRow("sub-byte", ("s4", "u4"), ("s4", "u4"), ("m8n8k32", "m16n8k32", "m16n8k64"), ("s32",),
               satfinite=True),
    MmaTypeRow("single-bit", ("b1",), ("b1",), ("m8n8k128", "m16n8k128", "m16n8k256"), ("s32",),
               ops=BIT_OPS),
)

MMA_SHAPES = tuple(sorted(dict.fromkeys(s for row in MMA_TYPE_ROWS for s in row.shapes),
                          key=lambda s: tuple(map(int, re.findall(r"\d+", s)))))

@functools.lru_cache(maxsize=256)  # asked on every mma.sync call (MmaSync.quad_pairs)
def mma_type_row(atype: str, btype: str, shape: str | None = None) -> MmaTypeRow | None:
    """The mma.sync syntax-table row whose .atype/.btype lists hold this pair (and whose
    shapes hold ``shape``, where a row for it exists), if any."""
    rows = [row for row in MMA_TYPE_ROWS if atype in row.atypes and btype in row.btypes]
    return next((row for row in rows if shape in row.shapes), rows[0] if rows else None)


# Bits per element of each fragment type; f16 C/D are packed .f16x2, so 16 bits as well.
MMA_ELEM_BITS = {
    "f64": 64, "f32": 32, "tf32": 32, "s32": 32, "f16": 16, "bf16": 16,
    "e4m3": 8, "e5m2": 8, "s8": 8, "u8": 8, "s4": 4, "u4": 4, "b1": 1,
}


def mma_fragment_regs(matrix: str, shape: str, elem_type: str) -> int:
    """Registers per thread of the mma.sync ``matrix`` ("a", "b", "c" or "d") fragment.

    The warp's 32 threads share the matrix evenly (PTX ISA 9.7.14.5, "Matrix fragments for
    mma.m16n8k*"): R×C elements of b bits make R*C*b/1024 32-bit registers; an .f64
    register is 64 bits, so .f64 fragments take R*C/32.  A is M×K, B is K×N, C/D are M×N;
    m8n8k4 with 16-bit A (.f16) holds four such products' matrices.
    """
    m, n, k = map(int, re.match(r"^m(\d+)n(\d+)k(\d+)$", shape).groups())
    rows, cols = {"a": (m, k), "b": (k, n), "c": (m, n), "d": (m, n)}[matrix]
    if elem_type == "f64":
        return rows * cols // 32
    products = 4 if shape == "m8n8k4" else 1  # only .f16 (and .f64, above) has this shape
    return products * rows * cols * MMA_ELEM_BITS[elem_type] // 1024


# ---------------------------------------------------------------- mma.sp (sparse A)


@dataclass(frozen=True)
class MmaSpTypeRow:
    """One row of the ``mma.sp`` / ``mma.sp::ordered_metadata`` syntax tables (PTX ISA
    9.7.14.6.3), as ptxas -arch=sm_90a accepts them: ``.row.col`` only; ``cd_pairs`` the
    (.dtype, .ctype) pairs (ptxas 13.0 refuses an f16 D with an f32 C and the reverse, and fp8
    with an f16 D); ``selectors`` the sparsity selectors the ISA allows at each shape ("Sparse
    matrix storage": one thread of four, a thread pair, or all four contribute metadata);
    ``chunk`` the dense elements a metadata nibble covers (4: 2:4 sparsity; 2: .tf32's 1:2;
    8: .s4/.u4's pair-wise 4:8) and ``nibbles`` the index values the ISA gives a meaning, by
    variant ("sp" or "sp::ordered_metadata")."""

    name: str
    atypes: tuple[str, ...]
    btypes: tuple[str, ...]
    selectors: dict  # shape -> allowed sparsity selectors
    cd_pairs: tuple[tuple[str, str], ...]
    chunk: int = 4
    satfinite: bool = False
    nibbles: dict = None  # variant -> meaningful nibble values

    @property
    def shapes(self) -> tuple[str, ...]:
        """The row's shapes: those its sparsity selectors are listed for."""
        return tuple(self.selectors)


MMA_SP_VARIANTS = ("sp", "sp::ordered_metadata")
#: metadata nibbles (index of the first kept element in bits 0-1, the second in bits 2-3): any
#: two different indices for .sp, increasing ones for ::ordered_metadata; .tf32 keeps one of two
_ANY_PAIR = tuple(v for v in range(16) if v & 3 != v >> 2)
_INCREASING = tuple(v for v in range(16) if v & 3 < v >> 2)
#: ``"wgmma.sp"``: the nibbles of wgmma.mma_async.sp, any two different indices for every type
#: but .tf32 (recorded: fp8 takes them in either order too, tests/golden/probes/q16_wgmma_sp)
_PAIR_NIBBLES = {"sp": _ANY_PAIR, "sp::ordered_metadata": _INCREASING, "wgmma.sp": _ANY_PAIR}

MMA_SP_TYPE_ROWS = (
    MmaSpTypeRow(".f16", ("f16",), ("f16",), {"m16n8k16": (0, 1, 2, 3), "m16n8k32": (0, 1)},
                 (("f16", "f16"), ("f32", "f32")), nibbles=_PAIR_NIBBLES),
    MmaSpTypeRow(".bf16", ("bf16",), ("bf16",), {"m16n8k16": (0, 1, 2, 3), "m16n8k32": (0, 1)},
                 (("f32", "f32"),), nibbles=_PAIR_NIBBLES),
    MmaSpTypeRow(".tf32", ("tf32",), ("tf32",), {"m16n8k8": (0, 1, 2, 3), "m16n8k16": (0, 1)},
                 (("f32", "f32"),), chunk=2, nibbles={v: (0x4, 0xE) for v in (*MMA_SP_VARIANTS, "wgmma.sp")}),
    MmaSpTypeRow("FP8", _FP8, _FP8, {"m16n8k64": (0,)}, (("f32", "f32"),),
                 nibbles={"sp": _INCREASING, "sp::ordered_metadata": _INCREASING, "wgmma.sp": _ANY_PAIR}),
    MmaSpTypeRow("integer", ("s8", "u8"), ("s8", "u8"), {"m16n8k32": (0, 1), "m16n8k64": (0,)},
                 (("s32", "s32"),), satfinite=True, nibbles=_PAIR_NIBBLES),
    MmaSpTypeRow("sub-byte", ("s4", "u4"), ("s4", "u4"), {"m16n8k64": (0, 1), "m16n8k128": (0,)},
                 (("s32", "s32"),), chunk=8, satfinite=True, nibbles=_PAIR_NIBBLES),
)

MMA_SP_SHAPES = tuple(sorted(dict.fromkeys(s for row in MMA_SP_TYPE_ROWS for s in row.shapes),
                             key=lambda s: tuple(map(int, re.findall(r"\d+", s)))))


def mma_sp_type_row(atype: str, btype: str, shape: str | None = None) -> MmaSpTypeRow | None:
    """The mma.sp syntax-table row whose .atype/.btype lists hold this pair, if any (one row
    a pair: ``shape`` is taken for :func:`mma_type_row`'s signature and not needed)."""
    return next((row for row in MMA_SP_TYPE_ROWS if atype in row.atypes and btype in row.btypes), None)


def mma_sp_fragment_regs(matrix: str, shape: str, elem_type: str) -> int:
    """Registers per thread of the mma.sp ``matrix`` fragment: A is the compressed M x K/2
    matrix (PTX ISA 9.7.14.6.2), B, C and D as for a dense ``mma`` of the shape."""
    m, n, k = map(int, re.match(r"^m(\d+)n(\d+)k(\d+)$", shape).groups())
    rows, cols = {"a": (m, k // 2), "b": (k, n)}.get(matrix, (m, n))
    return rows * cols * MMA_ELEM_BITS[elem_type] // 1024


# ---------------------------------------------------------------- ldmatrix / stmatrix


@dataclass(frozen=True)
class MatrixMoveRow:
    """``ldmatrix`` / ``stmatrix`` as ptxas -arch=sm_90a (CUDA 13.0) accepts them (PTX ISA
    9.7.14.5.15-16; the ``.m16n16`` / ``.m16n8`` ``.b8`` and packed 6/4-bit forms are sm_100+):
    ``.num`` 8x8 matrices of 16-bit elements, one 16-byte row an address, optionally
    transposed, from or to shared memory (``.shared``, ``.shared::cta``, or a generic address
    that falls in it)."""

    shapes: tuple[str, ...] = ("m8n8",)
    nums: tuple[str, ...] = ("x1", "x2", "x4")
    types: tuple[str, ...] = ("b16",)
    state_spaces: tuple[str, ...] = ("shared", "shared::cta")


MATRIX_MOVE = MatrixMoveRow()
#: Type qualifiers of the matrix moves in other targets' forms, recognised to be refused by name.
MATRIX_MOVE_OTHER_TYPES = ("b8",)


@dataclass(frozen=True)
class MovmatrixRow:
    """``movmatrix`` (PTX ISA 9.7.14.5.17): one 8x8 matrix of 16-bit elements transposed across
    a warp's registers; ``.trans`` is mandatory, and this is the only form."""

    shapes: tuple[str, ...] = ("m8n8",)
    types: tuple[str, ...] = ("b16",)


MOVMATRIX = MovmatrixRow()
