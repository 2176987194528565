"""Two loops over k whose running values stay in vector registers, written in LLVM IR.

``fma_block(a, b, acc, ra, j0, kn)``: for the ``ROWS`` rows ``q`` and ``COLUMNS`` (64)
columns ``j`` of a block (``fma_block64``: ``COLUMNS64``, 32, in float64),

    acc[q, j0 + j] = fma(a[ra + q, kn - 1], b[kn - 1, j0 + j], ... fma(a[ra + q, 0], b[0, j0 + j], acc[q, j0 + j]))

each step rounded once as the CPU's rounding mode says (float32, or float64).

``count_block(a, b, cnt, ra, j0, kn)``: for ``ROWS`` rows and ``BYTE_COLUMNS`` (128)
columns of uint8 codes (``count_half_block``: 64, one vector), ``cnt[q, j0 + j]`` (a
threshold on entry) becomes the number of ``k < kn`` with ``uint8(a[ra + q, k] + b[k, j0
+ j]) < cnt[q, j0 + j]``.  A's codes come as uint32, each code in all four bytes: a 32-bit
broadcast from memory is a plain load, where a byte broadcast also takes a slot on the
shuffle port, which the compares need; the count adds by AVX-512's masked add
(:func:`_opaque_ones`), one instruction where LLVM's own form takes two.

Each k loads the block's vectors of B once for all rows and broadcasts one element of A
per row; the running sums (and, for the count, the thresholds) are phi nodes of the k-loop,
so they never leave the registers.  Written for numba's loop vectoriser instead (k
unrolled inside a loop over columns), the same loops kept one column vector at a time,
broadcast every element of A's row into a register of its own before the loop and spilled
them when a group has 32, and loaded B once per row.

Every address comes from the arrays' own strides, so views and slices are fine.  The caller
keeps the block inside its arrays: nothing here checks bounds.
"""

from __future__ import annotations

import functools

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .vector_ops import codegen_features

ROWS = 4  #: rows of a block
VECTORS = 4  #: 16-lane float32 (or 8-lane float64) vectors across a block of fma_block (fma_block64)
COLUMNS = 16 * VECTORS
COLUMNS64 = 8 * VECTORS
BYTE_VECTORS = 2  #: 64-lane uint8 vectors across a block of count_block
BYTE_COLUMNS = 64 * BYTE_VECTORS

_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_I8 = ir.IntType(8)
_V16F = ir.VectorType(ir.FloatType(), 16)
_V8D = ir.VectorType(ir.DoubleType(), 8)
_V64B = ir.VectorType(_I8, 64)
_V16I = ir.VectorType(_I32, 16)
_FLOAT_SUFFIX = {"float": "f32", "double": "f64"}  # LLVM's intrinsic names by element type


def _address(builder, arr, i, j):
    """The address (an i64) of ``arr[i, j]`` of a 2-D array struct."""
    base = builder.ptrtoint(arr.data, _I64)
    s0 = builder.extract_value(arr.strides, 0)
    s1 = builder.extract_value(arr.strides, 1)
    return builder.add(base, builder.add(builder.mul(i, s0), builder.mul(j, s1)))


def _pointer(builder, address, offset, ty):
    return builder.inttoptr(builder.add(address, ir.Constant(_I64, offset)), ty.as_pointer())


def _splat(builder, x, vty):
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(_I32, 0))
    lanes = ir.Constant(ir.VectorType(_I32, vty.count), [0] * vty.count)
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined), lanes)


def _k_loop(builder, A, B, C, ra, j0, kn, vty, vectors, start, step, a_elem):
    """The block's loop: ``state = start(c_vectors)`` (per row, one value per vector, kept
    as phi nodes), then for each k ``state = step(builder, state, a_k, b_k, c_vectors)``
    with ``a_k`` the rows' elements of A at k (of LLVM type ``a_elem``) and ``b_k`` the
    block's vectors of B's row k; the last state is stored into C's block."""
    width = 64  # bytes per vector: 16 float32, 8 float64 or 64 uint8
    zero = ir.Constant(_I64, 0)
    c_rows = [_address(builder, C, ir.Constant(_I64, q), j0) for q in range(ROWS)]
    c_vecs = [[builder.load(_pointer(builder, c_rows[q], width * v, vty), align=1) for v in range(vectors)]
              for q in range(ROWS)]
    init = start(c_vecs)
    a_rows = [_address(builder, A, builder.add(ra, ir.Constant(_I64, q)), zero) for q in range(ROWS)]
    a_step = builder.extract_value(A.strides, 1)
    b_col = _address(builder, B, zero, j0)
    b_step = builder.extract_value(B.strides, 0)

    entry = builder.block
    loop = builder.append_basic_block("block.k")
    done = builder.append_basic_block("block.done")
    builder.cbranch(builder.icmp_signed(">", kn, zero), loop, done)

    builder.position_at_end(loop)
    k = builder.phi(_I64)
    phis = [[builder.phi(vty) for _ in range(vectors)] for _ in range(ROWS)]
    b_row = builder.add(b_col, builder.mul(k, b_step))
    b_k = [builder.load(_pointer(builder, b_row, width * v, vty), align=1) for v in range(vectors)]
    a_k = [builder.load(builder.inttoptr(builder.add(a_rows[q], builder.mul(k, a_step)), a_elem.as_pointer()), align=1)
           for q in range(ROWS)]
    new = step(builder, phis, a_k, b_k, c_vecs)
    k_next = builder.add(k, ir.Constant(_I64, 1))
    body_end = builder.block
    builder.cbranch(builder.icmp_signed("<", k_next, kn), loop, done)
    k.add_incoming(zero, entry)
    k.add_incoming(k_next, body_end)
    for q in range(ROWS):
        for v in range(vectors):
            phis[q][v].add_incoming(init[q][v], entry)
            phis[q][v].add_incoming(new[q][v], body_end)

    builder.position_at_end(done)
    final = [[builder.phi(vty) for _ in range(vectors)] for _ in range(ROWS)]
    for q in range(ROWS):
        for v in range(vectors):
            final[q][v].add_incoming(init[q][v], entry)
            final[q][v].add_incoming(new[q][v], body_end)
            builder.store(final[q][v], _pointer(builder, c_rows[q], width * v, vty), align=1)


def _fma_step(builder, sums, a_k, b_k, c_vecs):
    """One fused multiply-add per running sum, in the sums' own vector type (float32 or
    float64 lanes)."""
    vty = sums[0][0].type
    name = f"llvm.fma.v{vty.count}{_FLOAT_SUFFIX[str(vty.element)]}"
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3), name)
    return [[builder.call(fma, [_splat(builder, a_k[q], vty), b, s]) for b, s in zip(b_k, sums[q])]
            for q in range(ROWS)]


def _opaque_ones(builder):
    """A vector of 64 ones that LLVM cannot see is constant (an empty inline asm passes it
    through, in the function's entry block).  With a visible constant, LLVM turns ``n +
    (below ? 1 : 0)`` into ``n - sext(below)``, two instructions (mask to vector, subtract)
    where AVX-512's masked add is one.  Without AVX-512 no register holds 64 bytes, the asm
    could not be given one, and the constant is used as it is."""
    ones = ir.Constant(_V64B, [1] * 64)
    if not fits_registers():
        return ones
    with builder.goto_entry_block():
        asm = ir.InlineAsm(ir.FunctionType(_V64B, [_V64B]), "", "=v,0")
        return builder.call(asm, [ones])


def _count_step(builder, counts, a_k, b_k, thresholds):
    ones = _opaque_ones(builder)
    out = []
    for q in range(ROWS):
        a = builder.bitcast(_splat(builder, a_k[q], _V16I), _V64B)
        row = []
        for b, n, t in zip(b_k, counts[q], thresholds[q]):
            below = builder.icmp_unsigned("<", builder.add(a, b), t)
            row.append(builder.select(below, builder.add(n, ones), n))
        out.append(row)
    return out


def _matrix(t, dtype):
    return isinstance(t, types.Array) and t.ndim == 2 and t.dtype == dtype


def _typer(dtype, vty, vectors, start, step, a, b, c, ra, j0, kn, a_dtype=None):
    if not (_matrix(a, a_dtype or dtype) and _matrix(b, dtype) and _matrix(c, dtype)):
        return None
    if not all(isinstance(t, types.Integer) for t in (ra, j0, kn)):
        return None

    def codegen(context, builder, signature, args):
        arrays = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args[:3], args[:3])]
        ints = [context.cast(builder, v, t, types.int64) for t, v in zip(signature.args[3:], args[3:])]
        a_elem = context.get_data_type(signature.args[0].dtype)  # count_block's A: uint32, not C's uint8
        _k_loop(builder, *arrays, *ints, vty, vectors, start, step, a_elem)
        return context.get_dummy_value()

    return types.void(a, b, c, ra, j0, kn), codegen


@intrinsic
def fma_block(typingctx, a, b, acc, ra, j0, kn):
    """``acc[:ROWS, j0:j0 + COLUMNS]`` <- the chains over ``k < kn`` of ``a[ra + q, k] *
    b[k, j0 + j]`` fused onto it; float32 2-D arrays, integer indices (see the module)."""
    return _typer(types.float32, _V16F, VECTORS, lambda c: c, _fma_step, a, b, acc, ra, j0, kn)


@intrinsic
def fma_block64(typingctx, a, b, acc, ra, j0, kn):
    """:func:`fma_block` in float64: ``acc[:ROWS, j0:j0 + COLUMNS64]``, float64 2-D arrays."""
    return _typer(types.float64, _V8D, VECTORS, lambda c: c, _fma_step, a, b, acc, ra, j0, kn)


def _no_counts(thresholds):
    return [[ir.Constant(_V64B, None) for _ in row] for row in thresholds]


@intrinsic
def count_block(typingctx, a, b, cnt, ra, j0, kn):
    """``cnt[:ROWS, j0:j0 + BYTE_COLUMNS]`` (thresholds) <- how many ``uint8(a[ra + q, k] +
    b[k, j0 + j])`` fall below them; ``a`` uint32 (each code in its four bytes), ``b`` and
    ``cnt`` uint8, 2-D arrays, integer indices (see the module)."""
    return _typer(types.uint8, _V64B, BYTE_VECTORS, _no_counts, _count_step, a, b, cnt, ra, j0, kn, types.uint32)


@intrinsic
def count_half_block(typingctx, a, b, cnt, ra, j0, kn):
    """:func:`count_block` for ``BYTE_COLUMNS // 2`` columns (one vector of uint8)."""
    return _typer(types.uint8, _V64B, 1, _no_counts, _count_step, a, b, cnt, ra, j0, kn, types.uint32)


@njit(cache=True, inline="always")
def count_columns(a, b, cnt, ra, nb, kn):
    """:func:`count_block` over columns ``0 .. nb`` (a multiple of ``BYTE_COLUMNS // 2``):
    whole blocks, then :func:`count_half_block` where half a block is left."""
    jt = nb - nb % BYTE_COLUMNS
    for j0 in range(0, jt, BYTE_COLUMNS):
        count_block(a, b, cnt, ra, j0, kn)
    if jt < nb:
        count_half_block(a, b, cnt, ra, jt, kn)


def fits_registers() -> bool:
    """Whether numba's code generator targets AVX-512 (F and BW): 32 vector registers of 64
    bytes, so that a block's running values and thresholds stay in them.  With 16 registers
    of 32 bytes (AVX2) each value takes two and the blocks spill, and the conversion pass is
    the faster."""
    return _has_avx512(codegen_features())


@functools.lru_cache(maxsize=16)
def _has_avx512(features: str) -> bool:
    """Whether the comma-separated LLVM ``features`` enable AVX-512 F and BW.  Cached, because
    it is asked on every GEMM call, a single instruction's included, and splitting the
    feature string (and numba's reading of the host's features, where fastmma has set none)
    is slow next to such a call."""
    return {"+avx512f", "+avx512bw"} <= set(features.split(","))
