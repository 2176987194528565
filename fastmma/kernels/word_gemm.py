"""Integer GEMMs on the CPU's integer dot-product instructions, bit-identical to :mod:`.int_dot`.

Rule (as ``int_dot``; PTX ISA wgmma.mma_async / wmma.mma, integer variants, confirmed by the
H100 recordings): the products and their sum with C are exact; the s32 result wraps modulo
2^32, or under ``.satfinite`` is clamped to the int32 range once per instruction of ``group``
k-terms.  Any exact order of the sum gives those bits, so this kernel sums in int32 lanes:

- a *word* holds ``per_word`` consecutive k-terms of one row of A (or one column of B), and
  one vector instruction adds to each int32 lane the products of a word of A with a word of
  B: ``vpmaddwd`` (int16 pairs, any x86 with AVX2; with VNNI LLVM fuses it with the add into
  ``vpdpwssd``) or ``vpdpbusd`` (u8 x s8 quads, AVX-512 VNNI);
- ``vpdpbusd`` takes A unsigned and B signed, so A enters as ``a + oa`` and B as ``b - ob``
  (:func:`offsets`), and the wrapped sum over K is mended exactly (modulo 2^32) by
  ``sum a*b = sum a'*b' + ob * sum a' - oa * sum b' - K * oa * ob``, from the row sums of A'
  and the column sums of B';
- under ``.satfinite`` a pairs form (no offsets) sums each group of k-terms afresh (at most
  64 * 255 * 255 in magnitude: never past int32) and adds it to the int32 state clamped to
  the int32 range, which is the rule's clamp of the exact sum; without it every partial sum
  wraps and the whole K is one run.

Blocking: A and B are packed once into words (A as rows of words, B as column tiles of ``_NB``
columns, each a (K / per_word) x ``_NB`` block of words), the output is cut into tasks of
``_MB`` x ``_NB`` spread over the threads, and within a task a register block of
``form.rows`` rows x ``form.vectors`` vectors of output sums runs over a k-block of words
(:func:`_make_dot_block`), the B sliver staying in L1 while the row blocks pass it.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .int_gemm import _operand, decoded
from .vector_ops import codegen_features

_MB = 128  # rows per task
_NB = 256  # columns per task (and per packed column tile of B)
_KB = 256  # k per block of a task


class DotForm(NamedTuple):
    """One way to add products of words: ``per_word`` k-terms a word, A's of ``element_a`` and
    B's of ``element_b``, ``lanes`` int32 sums a vector, a register block of ``rows`` x
    ``vectors`` vectors, the products added by ``instruction``."""
    name: str
    per_word: int
    element_a: type
    element_b: type
    lanes: int
    rows: int
    vectors: int
    instruction: str  # an LLVM intrinsic ("": portable vector code)


def _splat(builder, word, lanes):
    vec = ir.VectorType(word.type, lanes)
    one = builder.insert_element(ir.Constant(vec, None), word, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, ir.Constant(vec, None), ir.Constant(ir.VectorType(ir.IntType(32), lanes), None))


def _lane_terms(builder, a, b, form):
    """The per_word products that each int32 lane adds, as ``per_word`` vectors of int32:
    words split into their elements (A's zero- or sign-extended as its element type says)."""
    lanes, p = form.lanes, form.per_word
    width = 32 // p
    wide = ir.VectorType(ir.IntType(32), lanes)
    parts = ir.VectorType(ir.IntType(width), lanes * p)
    ea = builder.bitcast(a, parts)
    eb = builder.bitcast(b, parts)
    terms = []
    for t in range(p):
        pick = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [ir.Constant(ir.IntType(32), p * i + t)
                                                                    for i in range(lanes)])
        xa = builder.shuffle_vector(ea, ir.Constant(parts, None), pick)
        xb = builder.shuffle_vector(eb, ir.Constant(parts, None), pick)
        xa = builder.zext(xa, wide) if form.element_a == np.uint8 else builder.sext(xa, wide)
        terms.append(builder.mul(xa, builder.sext(xb, wide)))
    return terms


def _dot(builder, acc, a, b, form):
    """``acc`` plus each lane's products of the words ``a`` (a splat of A's word) and ``b``:
    through the form's instruction (``vpdpbusd`` adds to ``acc`` itself; ``vpmaddwd`` sums the
    pairs, then an add), else in portable vector code."""
    vec = acc.type
    if "vpdpbusd" in form.instruction:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3), form.instruction)
        return builder.call(fn, [acc, a, b])
    if form.instruction:
        halves = ir.VectorType(ir.IntType(16), 2 * form.lanes)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [halves] * 2), form.instruction)
        return builder.add(acc, builder.call(fn, [builder.bitcast(a, halves), builder.bitcast(b, halves)]))
    terms = _lane_terms(builder, a, b, form)
    total = terms[0]
    for t in terms[1:]:
        total = builder.add(total, t)
    return builder.add(acc, total)


def _plus(builder, x, n):
    return builder.add(x, ir.Constant(x.type, n))


def _row_pointer(context, builder, array, row, col, element):
    """Pointer to ``arr[row, col]`` as ``element*``, for ``array`` = (type, value) a 2-D int32
    array whose rows are contiguous (a view of some rows and columns of a larger one will do)."""
    arr = context.make_array(array[0])(context, builder, array[1])
    stride = cgutils.unpack_tuple(builder, arr.strides, 2)[0]
    at = builder.add(builder.mul(row, stride), builder.mul(col, ir.Constant(ir.IntType(64), 4)))
    base = builder.bitcast(arr.data, ir.IntType(8).as_pointer())
    return builder.bitcast(builder.gep(base, [at]), element.as_pointer())


def _sadd_sat(builder, vec):
    """``llvm.sadd.sat`` of ``vec``: the sum clamped to the element type's range."""
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 2),
                                          f"llvm.sadd.sat.v{vec.count}i32")


def _tile_pointers(context, builder, array, r, j, rows, form):
    """Pointers to the ``rows`` x ``form.vectors`` int32 vectors of ``arr[r:r + rows, j:...]``."""
    vec = ir.VectorType(ir.IntType(32), form.lanes)
    return [[_row_pointer(context, builder, array, _plus(builder, r, i), _plus(builder, j, c * form.lanes), vec)
             for c in range(form.vectors)] for i in range(rows)]


def _make_dot_block(form: DotForm, settle: bool):
    """The register block of ``form`` as an intrinsic ``block(acc, r, j, a, b, q0, q)`` that
    forms, for ``i < rows`` and ``c < lanes * vectors``, the dot products of A's words
    ``a[r + i, q0:q0 + q]`` with B's words ``b[q0:q0 + q, j + c]`` in int32 lanes (wrapping),
    and adds them to ``acc[r + i, j + c]``: wrapping, or where ``settle``, as one sum clamped
    to the int32 range (``llvm.sadd.sat``, the rule's ``.satfinite`` step).  Nothing is
    checked: the caller keeps every index inside the arrays."""
    rows, lanes = form.rows, form.lanes
    vec = ir.VectorType(ir.IntType(32), lanes)

    @intrinsic
    def block(typingctx, acc, r, j, a, b, q0, q):
        if not (all(isinstance(x, types.Array) and x.ndim == 2 and x.dtype == types.int32 for x in (acc, a, b))
                and all(isinstance(x, types.Integer) for x in (r, j, q0, q))):
            return None

        def codegen(context, builder, signature, args):
            acc_t, a_t, b_t = (signature.args[i] for i in (0, 3, 4))
            acc_v, a_v, b_v = args[0], args[3], args[4]
            r, j, q0, q = (context.cast(builder, args[i], signature.args[i], types.int64) for i in (1, 2, 5, 6))
            tile = _tile_pointers(context, builder, (acc_t, acc_v), r, j, rows, form)
            slots = [[cgutils.alloca_once_value(builder, ir.Constant(vec, None) if settle else builder.load(p, align=4))
                      for p in row] for row in tile]
            with cgutils.for_range(builder, q) as loop:
                k = builder.add(q0, loop.index)
                brow = _tile_pointers(context, builder, (b_t, b_v), k, j, 1, form)[0]
                bvec = [builder.load(p, align=4) for p in brow]
                for i, row in enumerate(slots):
                    at = _row_pointer(context, builder, (a_t, a_v), _plus(builder, r, i), k, ir.IntType(32))
                    aw = _splat(builder, builder.load(at, align=4), lanes)
                    for slot, bv in zip(row, bvec):
                        builder.store(_dot(builder, builder.load(slot), aw, bv, form), slot)
            for row, pointers in zip(slots, tile):
                for slot, p in zip(row, pointers):
                    total = builder.load(slot)
                    if settle:
                        total = builder.call(_sadd_sat(builder, vec), [builder.load(p, align=4), total])
                    builder.store(total, p, align=4)
            return context.get_dummy_value()

        return types.void(acc, r, j, a, b, q0, q), codegen

    return block


#: The forms, by name, each with the CPU features that its instruction needs.  The
#: portable ones run anywhere: ``pairs-ir`` where no instruction is known, and ``quads-ir``,
#: the arithmetic and register block of ``vnni`` (slowly), lets any CPU test the mending of
#: A's and B's offsets and the blocks of 64 columns.
FORMS = {f.name: f for f in (
    DotForm("vnni", 4, np.uint8, np.int8, 16, 4, 4, "llvm.x86.avx512.vpdpbusd.512"),
    DotForm("pairs-512", 2, np.int16, np.int16, 16, 4, 4, "llvm.x86.avx512.pmaddw.d.512"),
    DotForm("pairs", 2, np.int16, np.int16, 8, 4, 2, "llvm.x86.avx2.pmadd.wd"),
    DotForm("pairs-ir", 2, np.int16, np.int16, 8, 4, 2, ""),
    DotForm("quads-ir", 4, np.uint8, np.int8, 16, 4, 4, ""),
)}
NEEDS = {"vnni": {"+avx512vnni", "+avx512bw", "+avx512f"}, "pairs-512": {"+avx512bw", "+avx512f"},
         "pairs": {"+avx2"}, "pairs-ir": set()}


def host_form(satfinite: bool = False) -> DotForm:
    """The first form of :data:`NEEDS` whose features the code generator's CPU has; under
    ``.satfinite`` the first of the pairs, whose groups' sums are clamped as they stand."""
    features = set(codegen_features().split(","))
    return next(FORMS[name] for name, needs in NEEDS.items()
                if needs <= features and (FORMS[name].per_word == 2 or not satfinite))


def offsets(form: DotForm, a_signed: bool, b_width: int, b_signed: bool):
    """(oa, ob): A enters as ``a + oa`` and B as ``b - ob``, so that they fit the form's
    element types (unsigned A and signed B bytes for the quads; int16 holds every value)."""
    if form.per_word == 2:
        return 0, 0
    return (128 if a_signed else 0), (128 if not b_signed and b_width > 7 else 0)


class Sums(NamedTuple):
    """How the sums of one GEMM are formed: the offsets that A and B entered with, the
    instruction's group of k-terms, and whether it clamps (``satfinite``) and adds C."""
    oa: int
    ob: int
    group: int
    satfinite: bool
    use_c: bool


@njit(parallel=True, cache=True)
def _pack(a, b, a_el, b_el, dpa, dpb, oa, ob):
    """A's elements as ``value + oa`` (rows past M: 0) and B's as ``value - ob`` in column
    tiles of words (columns past N: 0)."""
    count, m, kk = a.shape
    n = b.shape[2]
    rows = a_el.shape[1]
    for t in prange(count * rows):
        s, i = t // rows, t % rows
        for k in range(kk):
            a_el[s, i, k] = decoded(a[s, i, k], dpa) + oa if i < m else 0
    ntile, nword, width, per = b_el.shape[1], b_el.shape[2], b_el.shape[3], b_el.shape[4]
    for t in prange(count * ntile * nword):
        s, tj, q = t // (ntile * nword), (t // nword) % ntile, t % nword
        for jj in range(width):
            col = tj * width + jj
            for p in range(per):
                b_el[s, tj, q, jj, p] = decoded(b[s, q * per + p, col], dpb) - ob if col < n else 0


@njit(parallel=True, cache=True)
def _mending_sums(a_el, b_el, ra, cb):
    """The row sums of A's elements and the column sums of B's, over the whole K."""
    count, rows, kk = a_el.shape
    for t in prange(count * rows):
        s, i = t // rows, t % rows
        total = np.int64(0)
        for k in range(kk):
            total += np.int64(a_el[s, i, k])
        ra[s, i] = np.int32(total)
    ntile, width = b_el.shape[1], b_el.shape[3]
    for t in prange(count * ntile):
        s, tj = t // ntile, t % ntile
        for jj in range(width):
            total = np.int64(0)
            for q in range(b_el.shape[2]):
                for p in range(b_el.shape[4]):
                    total += np.int64(b_el[s, tj, q, jj, p])
            cb[s, tj * width + jj] = np.int32(total)


def _tasks_template(rows, width, per_word, block_words):
    """The parallel kernel of one form: its register block ``rows`` x ``width`` columns, its
    words ``per_word`` k-terms each, ``block_words`` words a k-block."""

    def tasks(aw, bw, c, out, ra, cb, sums):
        count, m, n = out.shape
        nword, tile = bw.shape[2], bw.shape[3]
        per = (m + _MB - 1) // _MB * bw.shape[1]
        gw = sums.group // per_word if sums.satfinite else 1
        kbw = gw * max(1, block_words // gw)
        fix = -np.int64(nword * per_word) * sums.oa * sums.ob
        for t in prange(count * per):
            s, ti, tj = t // per, (t % per) // bw.shape[1], t % bw.shape[1]
            i0, j0 = ti * _MB, tj * tile
            nr, nc = min(_MB, m - i0), min(tile, n - j0)
            nrp = (nr + rows - 1) // rows * rows
            ap, bp = aw[s, i0:i0 + nrp], bw[s, tj]
            st = np.zeros((nrp, tile), np.int32)
            if sums.use_c:
                for i in range(nr):
                    for j in range(nc):
                        st[i, j] = c[s, i0 + i, j0 + j]
            for k0 in range(0, nword, kbw):
                kq = min(kbw, nword - k0)
                for j in range(0, tile, width):
                    for r in range(0, nrp, rows):
                        if sums.satfinite:
                            for g0 in range(k0, k0 + kq, gw):
                                dot_settle(st, r, j, ap, bp, g0, gw)
                        else:
                            dot_add(st, r, j, ap, bp, k0, kq)
            for i in range(nr):
                row_fix = fix + np.int64(sums.ob) * ra[s, i0 + i]
                for j in range(nc):
                    out[s, i0 + i, j0 + j] = np.int32(st[i, j] + row_fix - np.int64(sums.oa) * cb[s, j0 + j])

    return tasks


@functools.lru_cache(maxsize=None)
def _kernels(name):
    """The parallel kernel of the form ``name``, compiled when first used."""
    from .variants import variant

    form = FORMS[name]
    template = _tasks_template(form.rows, form.lanes * form.vectors, form.per_word, _KB // form.per_word)
    calls = {"dot_add": _make_dot_block(form, False), "dot_settle": _make_dot_block(form, True)}
    return variant(template, f"word_tasks_{name.replace('-', '_')}", calls, parallel=True, cache=True)


def word_gemm(a, b, c, out, types_, group, satfinite, use_c, form=None):
    """``out = C + A @ B`` (int32) by instructions of ``group`` k each, on stacks (S, M, K) x
    (S, K, N); == :func:`.int_dot.int_dot_mma`.  ``types_`` is (a_width, a_signed, b_width,
    b_signed); ``form`` a :data:`FORMS` entry (default: :func:`host_form`'s)."""
    form = form or host_form(satfinite)
    a_width, a_signed, b_width, b_signed = types_
    count, m, kk = a.shape
    n, per = b.shape[2], form.per_word
    oa, ob = offsets(form, bool(a_signed), b_width, bool(b_signed))
    if kk % per or (satfinite and (group % per or oa or ob)):
        raise ValueError(f"the {form.name} form takes K in multiples of {per}, and .satfinite only where "
                         "A and B enter unchanged (the pairs forms)")
    width = form.lanes * form.vectors
    tile = min(_NB, -(-n // width) * width)
    ntile = -(-n // tile)
    a_el = np.empty((count, -(-m // form.rows) * form.rows, kk), form.element_a)
    b_el = np.empty((count, ntile, kk // per, tile, per), form.element_b)
    (dpa, _), (dpb, _) = _operand(a_width, bool(a_signed)), _operand(b_width, bool(b_signed))
    _pack(a, b, a_el, b_el, dpa, dpb, oa, ob)
    ra, cb = np.zeros((count, a_el.shape[1]), np.int32), np.zeros((count, ntile * tile), np.int32)
    if oa or ob:
        _mending_sums(a_el, b_el, ra, cb)
    aw = a_el.view(np.int32)
    bw = b_el.reshape(count, ntile, kk // per, tile * per).view(np.int32)
    _kernels(form.name)(aw, bw, c, out, ra, cb, Sums(oa, ob, group, bool(satfinite), bool(use_c)))
