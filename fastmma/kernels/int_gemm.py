"""Fast integer and b1 GEMMs, bit-identical to :mod:`fastmma.kernels.int_dot`.

Rule (same as ``int_dot``; PTX ISA wgmma.mma_async / wmma.mma, integer variants, confirmed
by the H100 recordings): the products and their sum with C are exact; the s32 result wraps
modulo 2^32, or with ``.satfinite`` is clamped to [INT32_MIN, INT32_MAX] once per
instruction of ``group`` k-terms (a k-loop of instructions clamps after each one).  For
``.b1`` each term is ``popc(a AND b)`` (or ``XOR``) of one bit pair, and the sum wraps.
Operands arrive one element per byte: integers as their two's-complement bits (``width``
wide, higher bits ignored) and b1 as 0/1 (only bit 0 counts).

Why float32 is exact: a group's products are integers of magnitude at most
``maxabs(A) * maxabs(B)`` (<= 255 * 255), so while ``group * maxabs(A) * maxabs(B) < 2^24``
every partial sum of a group is an integer that float32 holds exactly, in any order: the
kernel sums in fused multiply-adds on eight independent partial sums.  Each group's sum
(below 2^24) is then added to the running int32 state in int32 lanes, wrapping, and under
``satfinite`` an overflow (found from the signs) is clamped to the int32 range: exactly the
clamp of the exact sum (int32 lanes, twice as many a vector as int64 ones).  Wrapping is
associative, so without ``satfinite`` the chunk of k summed in float32 need not be the
instruction's group.  Shapes outside the float32 bound take a generic path that sums each
group in float64 (exact up to 2^53).

GEMMs of at least ``_WORDS_FROM`` products, ``_WORDS_ROWS`` rows and a K of ``_WORDS_DEPTH``
go to :mod:`.word_gemm`, which sums in int32 lanes on the CPU's integer dot-product
instructions; the float32 path below is for the others, where its single parallel pass
starts sooner than word_gemm's packing passes.

Blocking (int): the output is cut into tasks of ``_MB`` rows x ``_NB`` columns, spread over
threads with ``prange``.  A task walks K in blocks of ``_KB``: it decodes the A block
(rows x KB) and the B panel (KB x NB) into contiguous float32 buffers, then for each chunk of
``G`` k-terms keeps the G x NB slice of B in L1 while streaming its rows past it.  The
innermost loop runs over the NB contiguous columns with a constant-trip, fully unrolled loop
over the G terms inside, which LLVM vectorizes 16 lanes wide (zmm).  A constant G comes from
the literal passed by one thin top-level kernel per chunk size (16, 32, 64; 64 runs as two
sub-chunks of 32 summed in a float32 tile).  ``int_gemm`` picks that kernel in Python, so
that a call compiles only the kernel it runs: picked inside an njit function, the first
GEMM would compile all four.

Stacks: both kernels take a stack of S GEMMs (S, M, K) x (S, K, N) as well, and the tasks are
the tiles of all of them, so that a stack of instruction-sized GEMMs (a tile each) keeps every
thread busy and pays one start of the threads; a single GEMM is a stack of one.

Blocking (b1): A is packed to uint64 words of 64 k-bits per row (M x W; a 64-byte vector
test per word) and B to words per column (W x N, stored per column tile), zero-padded to a
multiple of ``_WT`` words (zero pads add nothing under AND and XOR).  Tasks are as above;
the inner loop runs over the columns with an unrolled loop over ``_WC`` words (``_WT`` for
the tail) of ``popc(a & b)`` (LLVM emits ``vpopcntq``), accumulated in int64.

Memory: besides the packed bits (1/8 of the b1 inputs), each running thread holds one
task's buffers (at most about 0.6 MiB, less for small shapes); the float32 copies of the
operands are never more than one tile's panels.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .int_dot import _value
from .operands import read_only
from .vector_ops import add_i32, fma_f32

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

_MB = 128  # rows per task
_NB = 256  # columns per task (the G x NB float32 slice of B stays in L1)
_KB = 256  # k per decoded panel
_WC = 16  # b1: uint64 words per unrolled chunk (1024 k-bits)
_WT = 4  # b1: words per tail chunk; K is zero-padded to a multiple of 256 bits
_F32_EXACT = 1 << 24
_PARTS = 256  # prange iterations at most (numba.get_num_threads() would defeat caching)
_WORDS_FROM = 1 << 22  # products (M * N * K, over a stack) from which word_gemm is faster
_WORDS_ROWS = 32  # and rows of A from which it is (it packs all of B, which a GEMV reads once)
_WORDS_DEPTH = 64  # and K from which it is (its packing passes outweigh a short K's sums)


# ---------------------------------------------------------------------------------------
# shared helpers


@njit(cache=True)
def _max_abs(width, signed):
    """Largest magnitude an operand byte can decode to."""
    best = np.int64(0)
    for x in range(256):
        best = max(best, abs(_value(x, width, signed)))
    return best


@njit(cache=True, inline="always")
def _n_tasks(m, n):
    return ((m + _MB - 1) // _MB) * ((n + _NB - 1) // _NB)


@njit(cache=True, inline="always")
def _task_tile(task, m, n):
    """(i0, rows, j0, cols) of one output tile."""
    tn = (n + _NB - 1) // _NB
    i0 = (task // tn) * _MB
    j0 = (task % tn) * _NB
    return i0, min(_MB, m - i0), j0, min(_NB, n - j0)


@njit(cache=True, inline="always")
def _n_parts(ntask):
    """prange iterations; each allocates its buffers once and takes every nparts-th task."""
    return max(1, min(ntask, _PARTS))


# ---------------------------------------------------------------------------------------
# integer path: decode panels


@njit(cache=True, inline="always")
def _dec_params(width, signed):
    """(mask, sign threshold, 2^width) so that decode(x) = v - full if v >= half."""
    mask = (np.int64(1) << width) - 1
    if signed:
        return mask, np.int64(1) << (width - 1), np.int64(1) << width
    return mask, np.int64(1) << 62, np.int64(0)


@njit(cache=True, inline="always")
def decoded(x, dp):
    """The integer value of an operand byte ``x``, ``dp`` its type's :func:`_dec_params`."""
    mask, half, full = dp
    v = np.int64(x) & mask
    return v - full if v >= half else v


@njit(cache=True, inline="always")
def _pack(src, dst, r0, nr, c0, nc, dp):
    """dst[r, t] = value(src[r0 + r, c0 + t]) as float32, for ``nr`` rows of ``nc`` elements:
    a block of A's rows, or of B's k-rows."""
    for r in range(nr):
        row = src[r0 + r, c0:c0 + nc]
        out = dst[r]
        for t in range(nc):
            out[t] = np.float32(decoded(row[t], dp))


# ---------------------------------------------------------------------------------------
# integer path: one chunk of G k-terms for all rows of a tile


@njit(cache=True, inline="always")
def _settle(s, satfinite):
    """New int32 state from the exact int64 sum ``s``: clamped to the int32 range under
    satfinite, then wrapped modulo 2^32."""
    return np.int32(min(max(s, np.int64(INT32_MIN)), np.int64(INT32_MAX))) if satfinite else np.int32(s)


@njit(cache=True, inline="always")
def _settle32(x, acc, satfinite):
    """New int32 state from the state ``x`` and a group's exact float32 sum ``acc`` (an
    integer below 2^24), in int32: ``x + acc`` modulo 2^32, or under ``satfinite`` clamped to
    the int32 range where the sum overflows (the wrapped sum's sign then differs from both
    addends', and the true sum lies past the end that ``x``'s sign points to)."""
    y = np.int32(acc)
    s = add_i32(x, y)
    if satfinite:
        overflow = np.int32(np.int32(x ^ s) & np.int32(y ^ s)) < 0
        return np.int32(np.int32(INT32_MAX) ^ np.int32(x >> 31)) if overflow else s
    return s


@njit(cache=True, inline="always")
def _sub_sum(arow, bg, j, S):
    """sum_{t<S} arow[t] * bg[t, j] in float32 (exact), S a literal multiple of 8: unrolled,
    in fused multiply-adds on eight independent partial sums, enough to keep two FMA units
    busy through each one's latency."""
    acc0 = arow[0] * bg[0, j]
    acc1 = arow[1] * bg[1, j]
    acc2 = arow[2] * bg[2, j]
    acc3 = arow[3] * bg[3, j]
    acc4 = arow[4] * bg[4, j]
    acc5 = arow[5] * bg[5, j]
    acc6 = arow[6] * bg[6, j]
    acc7 = arow[7] * bg[7, j]
    for t in range(8, S, 8):
        acc0 = fma_f32(arow[t], bg[t, j], acc0)
        acc1 = fma_f32(arow[t + 1], bg[t + 1, j], acc1)
        acc2 = fma_f32(arow[t + 2], bg[t + 2, j], acc2)
        acc3 = fma_f32(arow[t + 3], bg[t + 3, j], acc3)
        acc4 = fma_f32(arow[t + 4], bg[t + 4, j], acc4)
        acc5 = fma_f32(arow[t + 5], bg[t + 5, j], acc5)
        acc6 = fma_f32(arow[t + 6], bg[t + 6, j], acc6)
        acc7 = fma_f32(arow[t + 7], bg[t + 7, j], acc7)
    return ((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7))


@njit(cache=True, inline="always")
def _chunk_f32(ap, bp, st, fb, nr, nb, ka, G, satfinite):
    """st[r, :nb] <- settle(st + sum_{t<G} ap[r, ka+t] * bp[ka+t, :nb]), G a literal.

    Chunks longer than 32 (too long to unroll) go in sub-chunks of 32, each kept in L1 while
    all rows pass, summed through the float32 tile ``fb``; every partial sum is still exact."""
    S = 32 if G > 32 else G
    if G > S:
        fb[:nr, :nb] = 0
    for s0 in range(ka, ka + G - S, S):
        bg = bp[s0:s0 + S]
        for r in range(nr):
            arow = ap[r, s0:s0 + S]
            frow = fb[r]
            for j in range(nb):
                frow[j] += _sub_sum(arow, bg, j, S)
    s0 = ka + G - S
    bg = bp[s0:s0 + S]
    for r in range(nr):
        arow = ap[r, s0:s0 + S]
        srow = st[r]
        if G > S:
            frow = fb[r]
            for j in range(nb):
                srow[j] = _settle32(srow[j], _sub_sum(arow, bg, j, S) + frow[j], satfinite)
        else:
            for j in range(nb):
                srow[j] = _settle32(srow[j], _sub_sum(arow, bg, j, S), satfinite)


@njit(cache=True, inline="always")
def _chunk_f64(ap, bp, st, buf, nr, nb, ka, g, satfinite):
    """Generic chunk: any g, exact in float64 through a row buffer."""
    for r in range(nr):
        buf[:nb] = 0.0
        for t in range(ka, ka + g):
            av = np.float64(ap[r, t])
            brow = bp[t]
            for j in range(nb):
                buf[j] += av * np.float64(brow[j])
        srow = st[r]
        for j in range(nb):
            s = np.int64(srow[j]) + np.int64(buf[j])
            srow[j] = _settle(s, satfinite)


@njit(cache=True, inline="always")
def _int_tile(a, b, c, out, ap, bp, st, buf, fb, task, dpa, dpb, G, kb_max, satfinite, use_c, generic):
    m, kk = a.shape
    n = b.shape[1]
    i0, nr, j0, nb = _task_tile(task, m, n)
    for r in range(nr):
        for j in range(nb):
            st[r, j] = c[i0 + r, j0 + j] if use_c else 0
    for k0 in range(0, kk, kb_max):
        kb = min(kb_max, kk - k0)
        _pack(a, ap, i0, nr, k0, kb, dpa)
        _pack(b, bp, k0, kb, j0, nb, dpb)
        for ka in range(0, kb, G):
            if generic:
                _chunk_f64(ap, bp, st, buf, nr, nb, ka, G, satfinite)
            else:
                _chunk_f32(ap, bp, st, fb, nr, nb, ka, G, satfinite)
    for r in range(nr):
        for j in range(nb):
            out[i0 + r, j0 + j] = st[r, j]


@njit(cache=True, inline="always")
def _int_body(a, b, c, out, dpa, dpb, G, satfinite, use_c, generic):
    """A stack (S, M, K) x (S, K, N): the threads share the tiles of all S GEMMs."""
    count, m, kk = a.shape
    n = b.shape[2]
    per = _n_tasks(m, n)
    ntask = count * per
    nparts = _n_parts(ntask)
    kb_max = min(G * max(1, _KB // G), max(kk, G))
    mb, nb = min(_MB, m), min(_NB, n)
    for p in prange(nparts):
        ap = np.empty((mb, kb_max), np.float32)
        bp = np.empty((kb_max, nb), np.float32)
        st = np.empty((mb, nb), np.int32)
        buf = np.empty(nb if generic else 0, np.float64)
        fb = np.empty((mb if G > 32 and not generic else 0, nb), np.float32)
        for task in range(p, ntask, nparts):
            s = task // per
            _int_tile(a[s], b[s], c[s], out[s], ap, bp, st, buf, fb, task % per, dpa, dpb, G, kb_max, satfinite,
                      use_c, generic)


@njit(parallel=True, cache=True)
def _int_gemm_16(a, b, c, out, dpa, dpb, satfinite, use_c):
    _int_body(a, b, c, out, dpa, dpb, 16, satfinite, use_c, False)


@njit(parallel=True, cache=True)
def _int_gemm_32(a, b, c, out, dpa, dpb, satfinite, use_c):
    _int_body(a, b, c, out, dpa, dpb, 32, satfinite, use_c, False)


@njit(parallel=True, cache=True)
def _int_gemm_64(a, b, c, out, dpa, dpb, satfinite, use_c):
    _int_body(a, b, c, out, dpa, dpb, 64, satfinite, use_c, False)


@njit(parallel=True, cache=True)
def _int_gemm_any(a, b, c, out, dpa, dpb, group, satfinite, use_c):
    _int_body(a, b, c, out, dpa, dpb, group, satfinite, use_c, True)


_CHUNK_KERNELS = {16: _int_gemm_16, 32: _int_gemm_32, 64: _int_gemm_64}


def _chunk_size(kk, group, satfinite, max_prod):
    """Literal chunk (16/32/64) summed exactly in float32, or 0 for the generic path."""
    if satfinite:
        ok = group in (16, 32, 64) and group * max_prod < _F32_EXACT
        return group if ok else 0
    for g in (32, 16, 64):  # wrapping is associative: any chunk dividing K will do
        if kk % g == 0 and g * max_prod < _F32_EXACT:
            return g
    return 0


@functools.lru_cache(maxsize=None)
def _operand(width, signed):
    """(decode parameters, largest magnitude) of an operand type, computed once per type."""
    return _dec_params(width, signed), int(_max_abs(width, signed))


def _stacked(a, b, c, out):
    """The operands as stacks: a 2-D array becomes a stack of one (a view); A, B and C
    read-only (:func:`.operands.read_only`)."""
    return tuple(x if x.ndim == 3 else x[None] for x in (read_only(a), read_only(b), read_only(c), out))


def int_gemm(a, b, c, out, a_width, a_signed, b_width, b_signed, group, satfinite, use_c):
    """``out = C + A @ B`` (int32) by instructions of ``group`` k each; == ``int_dot_mma``.

    ``a`` (M, K), ``b`` (K, N), ``c`` and ``out`` (M, N), or stacks of them (S, M, K) ...,
    each GEMM of the stack on its own; the threads share the tiles of the whole stack."""
    kk = a.shape[-1]
    if group <= 0 or kk % group != 0:
        raise ValueError("K must be a positive multiple of group")
    satfinite, use_c = bool(satfinite), bool(use_c)
    (dpa, max_a), (dpb, max_b) = _operand(a_width, bool(a_signed)), _operand(b_width, bool(b_signed))
    g = _chunk_size(kk, group, satfinite, max_a * max_b)
    a, b, c, out = _stacked(a, b, c, out)
    if a.size * b.shape[-1] >= _WORDS_FROM and a.shape[1] >= _WORDS_ROWS and kk >= _WORDS_DEPTH and group % 4 == 0:
        from .word_gemm import word_gemm

        word_gemm(a, b, c, out, (a_width, bool(a_signed), b_width, bool(b_signed)), group, satfinite, use_c)
    elif g in _CHUNK_KERNELS:
        _CHUNK_KERNELS[g](a, b, c, out, dpa, dpb, satfinite, use_c)
    else:
        _int_gemm_any(a, b, c, out, dpa, dpb, group, satfinite, use_c)


# ---------------------------------------------------------------------------------------
# b1 path


@njit(cache=True, inline="always")
def _popcount(x):
    """SWAR popcount of a uint64 (LLVM turns it into ctpop / vpopcntq)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@intrinsic
def _bits64(typingctx, arr, i, k0):
    """uint64 whose bit t is ``arr[i, k0 + t] & 1``, for a 2-D uint8 array with unit stride
    along its rows: one 64-byte load, a vector test and a mask move (vptestmb, kmovq)."""
    sig = types.uint64(arr, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        stride = cgutils.unpack_tuple(builder, ary.strides, 2)[0]
        off = builder.add(builder.mul(args[1], stride), args[2])
        ptr = builder.gep(builder.bitcast(ary.data, ir.IntType(8).as_pointer()), [off])
        vty = ir.VectorType(ir.IntType(8), 64)
        v = builder.load(builder.bitcast(ptr, vty.as_pointer()), align=1)
        bit0 = builder.and_(v, ir.Constant(vty, [1] * 64))
        mask = builder.icmp_unsigned("!=", bit0, ir.Constant(vty, [0] * 64))
        return builder.bitcast(mask, ir.IntType(64))

    return sig, codegen


@njit(parallel=True, cache=True)
def _pack_rows(a, words):
    """words[s, i, w] bit t = a[s, i, 64 w + t] & 1 (zero past K)."""
    count, m, kk = a.shape
    nw = words.shape[2]
    full = kk // 64 if a.strides[2] == 1 else 0
    for si in prange(count * m):
        s, i = si // m, si % m
        rows, dst = a[s], words[s, i]
        for w in range(full):
            dst[w] = _bits64(rows, i, w * 64)
        for w in range(full, nw):
            k0 = w * 64
            x = np.uint64(0)
            for k in range(k0, min(kk, k0 + 64)):
                x |= np.uint64(rows[i, k] & 1) << np.uint64(k - k0)
            dst[w] = x


@njit(parallel=True, cache=True)
def _pack_cols(b, words):
    """words[s, jt, w, jj] bit t = b[s, 64 w + t, jt * nbe + jj] & 1 (zero past K and N)."""
    count, kk, n = b.shape
    ntj, nw, nbe = words.shape[1:]
    for sw in prange(count * nw):
        s, w = sw // nw, sw % nw
        for jt in range(ntj):
            j0 = jt * nbe
            nb = min(nbe, n - j0)
            dst = words[s, jt, w]
            dst[:] = 0
            for k in range(w * 64, min(kk, w * 64 + 64)):
                src = b[s, k, j0:j0 + nb]
                sh = np.uint64(k - w * 64)
                for j in range(nb):
                    dst[j] |= np.uint64(src[j] & 1) << sh


@njit(cache=True, inline="always")
def _popc_chunk(ap, bt, st, i0, nr, nb, w0, W, xor):
    """st[r, :nb] += sum_{t<W} popc(ap[i0+r, w0+t] op bt[w0+t, :nb]), W a literal."""
    bg = bt[w0:w0 + W]
    for r in range(nr):
        arow = ap[i0 + r, w0:w0 + W]
        srow = st[r]
        for j in range(nb):
            acc = np.uint64(0)
            for t in range(W):
                x = (arow[t] ^ bg[t, j]) if xor else (arow[t] & bg[t, j])
                acc += _popcount(x)
            srow[j] += np.int64(acc)


@njit(cache=True, inline="always")
def _popc_tile(ap, bp, c, out, st, task, xor, use_c):
    m, n = out.shape
    i0, nr, j0, nb = _task_tile(task, m, n)
    for r in range(nr):
        for j in range(nb):
            st[r, j] = c[i0 + r, j0 + j] if use_c else 0
    bt = bp[j0 // bp.shape[2]]
    nw = ap.shape[1]
    nw_big = nw - nw % _WC
    for w0 in range(0, nw_big, _WC):
        if xor:
            _popc_chunk(ap, bt, st, i0, nr, nb, w0, _WC, True)
        else:
            _popc_chunk(ap, bt, st, i0, nr, nb, w0, _WC, False)
    for w0 in range(nw_big, nw, _WT):
        if xor:
            _popc_chunk(ap, bt, st, i0, nr, nb, w0, _WT, True)
        else:
            _popc_chunk(ap, bt, st, i0, nr, nb, w0, _WT, False)
    for r in range(nr):
        for j in range(nb):
            out[i0 + r, j0 + j] = np.int32(st[r, j])


@njit(parallel=True, cache=True)
def _popc_tiles(ap, bp, c, out, xor, use_c):
    count, m, n = out.shape
    per = _n_tasks(m, n)
    ntask = count * per
    nparts = _n_parts(ntask)
    for p in prange(nparts):
        st = np.empty((min(_MB, m), bp.shape[3]), np.int64)
        for task in range(p, ntask, nparts):
            s = task // per
            _popc_tile(ap[s], bp[s], c[s], out[s], st, task % per, xor, use_c)


@njit(cache=True)
def _popc_stack(a, b, c, out, xor, use_c):
    count, m, kk = a.shape
    n = b.shape[2]
    if count == 0 or m == 0 or n == 0:
        return
    nw = (kk + 63) // 64
    nw = (nw + _WT - 1) // _WT * _WT
    nbe = min(_NB, n)  # the column tiles of _task_tile
    ap = np.empty((count, m, nw), np.uint64)
    bp = np.empty((count, (n + nbe - 1) // nbe, nw, nbe), np.uint64)
    _pack_rows(a, ap)
    _pack_cols(b, bp)
    _popc_tiles(ap, bp, c, out, xor, use_c)


def popc_gemm(a, b, c, out, xor, use_c):
    """``out = C + sum_k popc(a[i,k] op b[k,j])`` over 0/1 elements; == ``popc_mma``.
    Takes 2-D operands or stacks of them, as :func:`int_gemm` does."""
    _popc_stack(*_stacked(a, b, c, out), bool(xor), bool(use_c))
