"""fastmma.matmul_sp against the H100's sparse k-loops (q17: 16 mma.sp, q18: 8 wgmma.mma_async.sp
in one commit group), against the single sparse instruction (fastmma.mma_sp, itself checked
against the q15 / q16 recordings) chained tile by tile, bit for bit; and against sums that
numpy computes exactly."""

from pathlib import Path

import numpy as np
import pytest
from conftest import seed
from test_matmul import bits, values
from test_probes import _k_major_128b

import fastmma
from fastmma.conform import load_recording
from fastmma.errors import InvalidInstructionError, OperandError
from fastmma.formats import from_bits, get_format, to_bits
from fastmma.isa import parse
from fastmma.layout.mma_fragments import sparse_fragment_layout
from fastmma.layout.sparse_metadata import chunk_geometry, compress, kept_columns, warpgroup_kept_columns
from fastmma.layout.wgmma_fragments import unpack_d
from fastmma.layout.wmma_fragments import unpack_fragment
from fastmma.sparse_gemm import resolve_sparse_instruction

PROBES = Path(__file__).parent / "golden" / "probes"

WGMMA_SP = [
    "m64n16k32.f32.f16.f16", "m64n8k32.f16.f16.f16", "wgmma.mma_async.sp.sync.aligned.m64n24k32.f32.bf16.bf16",
    "m64n16k16.f32.tf32.tf32", "m64n8k64.f32.e4m3.e5m2", "m64n16k64.f16.e5m2.e4m3",
    "wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {%f0, %f1, %f2, %f3}, %rd1, %rd2, %r1, 0, p, -1, 1, 0, 0;",
]
MMA_SP = [
    "mma.sp.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
    "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32",
    "m16n8k16.f32.tf32.tf32.f32",
    "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e4m3.e5m2.f32",
]
INT_SP = [
    "m64n8k64.s32.s8.u8.satfinite", "m64n16k64.s32.u8.s8",
    "mma.sp.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32",
    "mma.sp.sync.aligned.m16n8k128.row.col.s32.u4.s4.s32",
]


def ordered(inst) -> bool:
    """Whether the instruction's metadata names each chunk's places in increasing order only
    (``::ordered_metadata``, and fp8 ``mma.sp``; ``wgmma.mma_async.sp`` takes either order)."""
    if isinstance(inst, fastmma.isa.WgmmaMmaAsyncSp):
        return False
    return inst.spvariant != "sp" or inst.atype in ("e4m3", "e5m2")


def random_columns(rng, inst, rows, kk):
    """Each row's dense column of each kept element: random places of each chunk."""
    chunk, kept = chunk_geometry(inst.atype)
    unit = 2 if chunk == 8 else 1
    chunks = kk // chunk
    picks = np.argsort(rng.random((rows, chunks, chunk // unit)), axis=-1)[..., :kept // unit]
    if ordered(inst):
        picks = np.sort(picks, axis=-1)
    places = (picks[..., None] * unit + np.arange(unit)).reshape(rows, chunks, kept)
    return (places + chunk * np.arange(chunks)[:, None]).reshape(rows, chunks * kept)


def chained(inst, A, cols, B, C):
    """The k-loop, one fastmma.mma_sp per instruction tile: M and N padded with zeros, K with
    whole chunks (zeros kept at their first places)."""
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    chunk, kept = chunk_geometry(inst.atype)
    M, N, K = A.shape[0], B.shape[1], B.shape[0]
    Mp, Np, Kp = -(-M // m) * m, -(-N // n) * n, max(k, -(-K // k) * k)
    first = (chunk * np.arange(Kp // chunk)[:, None] + np.arange(kept)).ravel()  # every chunk's first places
    Ap = np.zeros((Mp, Kp // 2), A.dtype)
    Ap[:M, :A.shape[1]] = A
    cp = np.tile(first, (Mp, 1))
    cp[:M, :cols.shape[1]] = cols
    Bp = np.zeros((Kp, Np), B.dtype)
    Bp[:K, :N] = B
    out = np.zeros((Mp, Np), get_format(inst.dtype).value_dtype)
    h = k // 2
    for i in range(0, Mp, m):
        for j in range(0, Np, n):
            acc = None if C is None else np.pad(C, ((0, Mp - M), (0, Np - N)))[i:i + m, j:j + n]
            for t in range(Kp // k):
                acc = fastmma.mma_sp(inst, Ap[i:i + m, t * h:(t + 1) * h], cp[i:i + m, t * h:(t + 1) * h] - t * k,
                                     Bp[t * k:(t + 1) * k, j:j + n], acc)
            out[i:i + m, j:j + n] = acc
    return out[:M, :N]


def operands(inst, shape, mode, rng):
    M, N, K = shape
    A = values(rng, inst.atype, (M, K // 2), mode)
    B = values(rng, inst.btype, (K, N), mode)
    C = values(rng, inst.ctype, (M, N), mode)
    return A, random_columns(rng, inst, M, K), B, C


@pytest.mark.parametrize("path", sorted(PROBES.glob("q17_mma_sp_k_loop/*.npz")), ids=lambda p: p.stem)
def test_q17_matmul_sp_equals_the_recorded_k_loop(path):
    """q17: a warp's k-loop of 16 ``mma.sp``, each step with its own metadata.  ``matmul_sp`` of
    the whole compressed A (16 x 8k), the dense columns the steps' metadata name (step ``j``'s
    offset by ``j * k``) and B (16k x 8) gives the D the GPU's loop ended with."""
    arrays, meta = load_recording(path)
    q = meta["qualifiers"]
    assert q["chain"] == 16
    lay = {x: sparse_fragment_layout(x, q["shape"], q[f"{x}type"]) for x in "abcd"}
    for i in range(len(arrays["mode"])):
        A = np.concatenate([unpack_fragment(r, lay["a"]) for r in arrays["a_regs"][i]], axis=1)
        columns = np.concatenate([kept_columns(e[:, 0], q["atype"], q["shape"], q["selector"], q["sparse"])
                                  + j * q["k"] for j, e in enumerate(arrays["e_regs"][i])], axis=1)
        B = np.concatenate([unpack_fragment(r, lay["b"]) for r in arrays["b_regs"][i]], axis=0)
        C = unpack_fragment(arrays["c_regs"][i], lay["c"])
        D = fastmma.matmul_sp(from_bits(A, q["atype"]), columns, from_bits(B, q["btype"]), from_bits(C, q["ctype"]),
                              instruction=meta["ptx_template"][0].split()[0])
        want = unpack_fragment(arrays["d_regs"][i], lay["d"])
        np.testing.assert_array_equal(to_bits(D, q["dtype"]), want, err_msg=f"case {i}")


@pytest.mark.parametrize("path", sorted(PROBES.glob("q18_wgmma_sp_k_loop/*.npz")), ids=lambda p: p.stem)
def test_q18_matmul_sp_equals_the_recorded_k_loop(path):
    """q18: a sparse GEMM's k-loop, 8 ``wgmma.mma_async.sp`` in one commit group stepping 32
    bytes a row along the compressed A and 64 along B inside 128B-swizzled K-blocks, each step
    with its own metadata.  ``matmul_sp`` of the A and B read back by the ISA's canonical layout
    (written out in the test, not fastmma's) and the steps' columns gives the recorded D."""
    arrays, meta = load_recording(path)
    q = meta["qualifiers"]
    inst = parse(meta["ptx"][1])
    a_fmt, b_fmt = get_format(q["atype"]), get_format(q["btype"])
    assert q["chain"] == 8 and meta["smem_base_observed"] == [1024]
    for i in range(len(arrays["mode"])):
        smem = arrays["smem"][i]
        A = np.concatenate([_k_major_128b(smem, int(d), 64) for d in arrays["a_desc"][i]], axis=1)
        Bt = np.concatenate([_k_major_128b(smem, int(d), q["n"], 64) for d in arrays["b_desc"][i]], axis=1)
        A, B = A.view(a_fmt.storage), Bt.view(b_fmt.storage).T
        columns = np.concatenate([warpgroup_kept_columns(e[:, 0], q["atype"], inst.metadata_shape, q["selector"])
                                  + j * q["k"] for j, e in enumerate(arrays["e_regs"][i])], axis=1)
        assert A.shape == columns.shape == (64, q["k"] * 4) and B.shape == (q["k"] * 8, q["n"])
        C = unpack_d(arrays["c_regs"][i], q["dtype"], q["n"]) if arrays["scale_d"][i] else None
        D = fastmma.matmul_sp(A, columns, B, C, instruction=meta["ptx_template"][0].split()[0])
        expected = unpack_d(arrays["d_regs"][i], q["dtype"], q["n"])
        np.testing.assert_array_equal(D.view(expected.dtype), expected, err_msg=f"case {i}")


@pytest.mark.parametrize("text", WGMMA_SP + MMA_SP)
@pytest.mark.parametrize("mode", ["narrow", "wide", "tiny", "specials"])
@pytest.mark.parametrize("shape", [(67, 23, 96), (1, 5, 16), (130, 17, 64)])
def test_float_matmul_sp_equals_chained_instructions(text, mode, shape):
    inst = resolve_sparse_instruction(text)
    rng = np.random.default_rng(seed(text, mode, shape))
    A, cols, B, C = operands(inst, shape, mode, rng)
    got = fastmma.matmul_sp(A, cols, B, C, instruction=text)
    assert got.dtype == get_format(inst.dtype).value_dtype and got.shape == shape[:2]
    assert np.array_equal(bits(got), bits(chained(inst, A, cols, B, C)))
    assert np.array_equal(bits(fastmma.matmul_sp(A, cols, B, instruction=text)), bits(chained(inst, A, cols, B, None)))


@pytest.mark.parametrize("text", INT_SP)
@pytest.mark.parametrize("shape", [(70, 19, 256), (3, 1, 128)])
def test_integer_matmul_sp_equals_chained_instructions_and_the_exact_sum(text, shape):
    inst = resolve_sparse_instruction(text)
    rng = np.random.default_rng(seed(text, shape))
    A, cols, B, C = operands(inst, shape, "wide", rng)
    got = fastmma.matmul_sp(A, cols, B, C, instruction=text)
    assert np.array_equal(got, chained(inst, A, cols, B, C))
    dense = np.zeros(shape[::2], np.int64)
    np.put_along_axis(dense, cols, A.astype(np.int64), axis=-1)
    exact = dense @ B.astype(np.int64)
    small = (C // 2 ** 12).astype(np.int32)  # no sum near the s32 limits: the exact sum, clamped or not
    assert np.array_equal(fastmma.matmul_sp(A, cols, B, small, instruction=text), exact + small)
    if not inst.satfinite:  # a wrap modulo 2^32 at every step is one wrap of the whole sum
        assert np.array_equal(got, ((exact + C + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))


def test_exact_data_against_numpy_and_imm_scale_negates():
    """Small integers in f16 (every partial sum exact in f32): numpy's product of the dense A;
    imm-scale-a = -1 negates A, scale_d=False drops C."""
    rng = np.random.default_rng(11)
    inst = resolve_sparse_instruction("m64n16k32.f32.f16.f16")
    A = rng.integers(-8, 9, (90, 48)).astype(np.float16)
    cols = random_columns(rng, inst, 90, 96)
    B = rng.integers(-8, 9, (96, 40)).astype(np.float16)
    C = rng.integers(-100, 100, (90, 40)).astype(np.float32)
    dense = np.zeros((90, 96))
    np.put_along_axis(dense, cols, A.astype(np.float64), axis=-1)
    want = dense @ B.astype(np.float64)
    np.testing.assert_array_equal(fastmma.matmul_sp(A, cols, B, C, instruction=inst), (want + C).astype(np.float32))
    np.testing.assert_array_equal(fastmma.matmul_sp(A, cols, B, C, instruction=inst, scale_d=False),
                                  want.astype(np.float32))
    neg = ("wgmma.mma_async.sp.sync.aligned.m64n16k32.f32.f16.f16 {" + ", ".join(f"%f{i}" for i in range(8))
           + "}, %rd1, %rd2, %r1, 0, p, -1, 1, 0, 0;")
    np.testing.assert_array_equal(fastmma.matmul_sp(A, cols, B, C, instruction=neg), (C - want).astype(np.float32))


@pytest.mark.parametrize("text", ["m64n16k32.f32.f16.f16", "m64n8k32.f16.f16.f16", "m64n8k32.f32.bf16.bf16",
                                  "m64n8k16.f32.tf32.tf32", "mma.sp.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                                  "m16n8k16.f16.f16.f16.f16", "m64n8k64.s32.u8.s8.satfinite",
                                  "mma.sp.sync.aligned.m16n8k128.row.col.s32.s4.u4.s32", "m64n8k64.f32.e4m3.e5m2",
                                  "m64n16k64.f16.e5m2.e4m3", "mma.sp.sync.aligned.m16n8k64.row.col.f32.e4m3.e5m2.f32",
                                  "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e5m2.e5m2.f32"])
@pytest.mark.parametrize("mode", ["narrow", "wide", "tiny", "specials in A and C"])
def test_spread_and_rows_give_the_same_bits(monkeypatch, text, mode):
    """The two ways (fastmma.sparse_gemm's docstring) on the same operands, B finite: the spread
    dense GEMM, and the rows' GEMVs that the instruction-by-instruction tests check."""
    import fastmma.sparse_gemm as sg

    inst = resolve_sparse_instruction(text)
    assert sg.spread_rule(inst) is not None
    rng = np.random.default_rng(seed(text, mode))
    A, cols, B, C = operands(inst, (150, 70, 8 * inst.shape.k), mode.split()[0], rng)
    if mode.startswith("specials"):
        B = values(rng, inst.btype, B.shape, "wide")
    with np.errstate(invalid="ignore"):  # finite, the spread way's condition (e4m3 has no inf: wide values give NaN)
        B = np.where(np.isfinite(B.astype(np.float64)), B, np.zeros((), B.dtype))
    spreads, spread_way = [], sg._spread
    monkeypatch.setattr(sg, "_spread", lambda *args: spreads.append(1) or spread_way(*args))
    spread = fastmma.matmul_sp(A, cols, B, C, instruction=inst)
    assert spreads, "the spread way did not run"
    monkeypatch.setattr(sg, "spread_rule", lambda inst: None)
    assert np.array_equal(bits(spread), bits(fastmma.matmul_sp(A, cols, B, C, instruction=inst)))


@pytest.mark.parametrize("text", ["m64n16k32.f32.f16.f16", "m64n8k64.f16.e5m2.e4m3", "m64n8k64.s32.u8.s8.satfinite",
                                  "mma.sp.sync.aligned.m16n8k64.row.col.f32.e4m3.e5m2.f32"])
def test_columns_of_b_with_specials(monkeypatch, text):
    """Where some of B's columns hold an inf or NaN (a stack of two Bs, each with its own): a
    fused rule runs the spread way alone, on B with each of them zeroed, and decides the
    elements that meet one by their terms; fp8 mma.sp (two f16 steps) gives those columns to
    the rows and runs the spread way on B with them zeroed.  The same bits as the rows for
    every column, and progress rises to its total."""
    import fastmma.sparse_gemm as sg
    from fastmma.isa import FusedDotRule

    inst = resolve_sparse_instruction(text)
    rng = np.random.default_rng(seed(text, "columns"))
    A, cols, B, C = operands(inst, (40, 30, 4 * inst.shape.k), "narrow", rng)
    B = np.stack([B, B[:, ::-1]])
    if get_format(inst.btype).is_float:
        special = np.inf if inst.btype != "e4m3" else np.nan
        B[0, 3, 5] = B[1, 7, 11] = special
        B[1, 0, 5] = -special
    ways = []
    for name, b_arg in (("_spread", 4), ("_row_blocks", 3)):
        way = getattr(sg, name)
        monkeypatch.setattr(sg, name, lambda *args, way=way, name=name, i=b_arg: ways.append((name, args[i].shape[-1]))
                            or way(*args))
    calls = []
    split = fastmma.matmul_sp(A, cols, B, C, instruction=inst, progress=lambda d, t: calls.append((d, t)))
    by_rows = get_format(inst.btype).is_float and not isinstance(sg.spread_rule(inst), FusedDotRule)
    assert sorted(ways) == ([("_row_blocks", 2), ("_spread", 30)] if by_rows else [("_spread", 30)])
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[-1][0] == calls[-1][1]
    monkeypatch.setattr(sg, "spread_rule", lambda inst: None)
    rows = fastmma.matmul_sp(A, cols, B, C, instruction=inst)
    assert np.array_equal(bits(split), bits(rows))
    if get_format(inst.btype).is_float:
        assert np.isnan(split[:, :, 5]).any() or np.isinf(split[:, :, 5]).any()


FUSED_SP = ["m64n16k32.f32.f16.f16", "m64n8k32.f16.f16.f16", "m64n8k32.f32.bf16.bf16", "m64n8k16.f32.tf32.tf32",
            "mma.sp.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", "m64n8k64.f32.e4m3.e5m2", "m64n16k64.f16.e5m2.e4m3",
            "wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {%f0, %f1, %f2, %f3}, %rd1, %rd2, %r1, 0, p, -1, -1, "
            "0, 0;"]


def _sprinkle(rng, x, fraction, choices):
    """``x`` with a ``fraction`` of its elements replaced by picks of ``choices``."""
    x = x.copy()
    flat = x.reshape(-1)
    picks = rng.random(flat.size) < fraction
    with np.errstate(over="ignore", invalid="ignore"):
        flat[picks] = np.asarray(rng.choice(choices, int(picks.sum())), np.float64).astype(x.dtype)
    return x


@pytest.mark.parametrize("text", FUSED_SP)
@pytest.mark.parametrize("where", ["every column", "few columns", "specials of A and C too"])
def test_specials_of_b_decided_by_their_terms_equal_the_rows(monkeypatch, text, where):
    """Infinities and NaN of B at places some rows keep and others leave out, zeros facing
    them, overflowing products: the spread way with the elements that meet one decided by
    their terms gives the rows' bits (a stack of two Bs; the rows run without the spread way
    when spread_rule is None), and never the rows' GEMVs."""
    import fastmma.sparse_gemm as sg

    inst = resolve_sparse_instruction(text)
    rng = np.random.default_rng(seed(text, where))
    A, cols, B, C = operands(inst, (70, 37, 6 * inst.shape.k), "narrow", rng)
    infs = [np.inf, -np.inf, np.nan] if inst.btype != "e4m3" else [np.nan]
    top = {"f16": 6e4, "e5m2": 5e4, "e4m3": 448.0}.get(inst.btype, 1e38)
    big = [top, -top, 0.0]
    B = np.stack([B, B[::-1]])
    if where == "every column":
        for s in range(2):
            B[s, rng.integers(0, B.shape[1], B.shape[2]), np.arange(B.shape[2])] = rng.choice(infs, B.shape[2])
    else:
        B[:, :, rng.integers(0, B.shape[2], 6)] = _sprinkle(rng, B, 0.05, infs + big)[:, :, :6]
    if where.startswith("specials"):
        A = _sprinkle(rng, A, 0.01, [np.inf, -np.inf, np.nan, 0.0] if inst.atype != "e4m3" else [np.nan, 0.0])
        C = _sprinkle(rng, C, 0.02, [np.inf, -np.inf, np.nan])
    assert not np.isfinite(B.astype(np.float64)).all()
    ways = []
    rows_way = sg._row_blocks
    monkeypatch.setattr(sg, "_row_blocks", lambda *args: ways.append(1) or rows_way(*args))
    got = fastmma.matmul_sp(A, cols, B, C, instruction=inst)
    assert not ways, "the rows ran"
    monkeypatch.setattr(sg, "spread_rule", lambda inst: None)
    want = fastmma.matmul_sp(A, cols, B, C, instruction=inst)
    assert ways
    assert np.array_equal(bits(got), bits(want))
    assert np.isnan(got.astype(np.float64)).any()


def test_an_overflowing_prefix_meets_a_kept_infinity():
    """f16 accumulators: the groups before the one that keeps a -inf of B overflow to +inf, so
    D is NaN; where the row leaves that place out, D is the +inf of the overflow; where the
    -inf is kept but the groups before stay finite, D is -inf.  Against the instructions chained
    one by one."""
    text = "m64n8k32.f16.f16.f16"
    inst = resolve_sparse_instruction(text)
    rows, kk = 4, 4 * inst.shape.k
    A = np.full((rows, kk // 2), 60000, np.float16)
    A[2, :inst.shape.k // 2 * 3] = 1  # row 2: the three groups before the -inf stay finite
    cols = np.tile([0, 1], (rows, kk // 4)) + np.repeat(4 * np.arange(kk // 4), 2)
    last = 3 * inst.shape.k  # the last group's first chunk
    cols[1, last // 2:last // 2 + 2] = [last + 2, last + 3]  # row 1 leaves places last and last + 1 out
    B = np.ones((kk, 8), np.float16)
    B[last, :] = -np.inf
    got = fastmma.matmul_sp(A, cols, B, instruction=text)
    want = chained(inst, A, cols, B, None)
    assert np.array_equal(bits(got), bits(want))
    assert np.isnan(got[0]).all() and np.isnan(got[3]).all()
    assert np.isposinf(got[1]).all() and np.isneginf(got[2]).all()


@pytest.mark.parametrize("text", ["m64n8k32.f32.f16.f16", "m64n8k32.f16.f16.f16", "m64n8k32.f32.bf16.bf16",
                                  "m64n8k16.f32.tf32.tf32", "m64n8k64.f16.e4m3.e5m2",
                                  "mma.sp.sync.aligned.m16n8k64.row.col.f32.e5m2.e4m3.f32"])
def test_narrow_rows_by_the_per_element_kernel(monkeypatch, text):
    """The rows' float GEMVs of at most ROWS_REFERENCE_COLUMNS columns run through the
    per-element kernel (fused_dot_mma, over the whole stack), wider ones through the blocked
    stack kernels: the same bits, with infinities and NaN in A, B and C."""
    import fastmma.kernels as kernels
    import fastmma.sparse_gemm as sg

    monkeypatch.setattr(sg, "spread_rule", lambda inst: None)
    inst = resolve_sparse_instruction(text)
    A, cols, B, C = operands(inst, (70, kernels.ROWS_REFERENCE_COLUMNS, 4 * inst.shape.k), "specials",
                             np.random.default_rng(seed(text, "narrow rows")))
    used, per_element = [], kernels._fused_reference
    monkeypatch.setattr(kernels, "_fused_reference",
                        lambda rule, a, *args: used.append(a.ndim) or per_element(rule, a, *args))
    narrow = fastmma.matmul_sp(A, cols, B, C, instruction=inst)
    assert used and set(used) == {3}
    used.clear()
    monkeypatch.setattr(kernels, "ROWS_REFERENCE_COLUMNS", 0)
    blocked = fastmma.matmul_sp(A, cols, B, C, instruction=inst)
    assert not used
    assert np.array_equal(bits(narrow), bits(blocked))
    assert not np.isfinite(narrow).all(), "the data should reach D's infinities or NaN"


def test_spread_int32_sums_that_wrap_are_rounded_right():
    """f16 in a group of 32 spread terms, 16 of them non-zero: 16 products of 1.999^2 and C =
    1.5 sum to more than 2^31 units of the group's grid (2^-25 of e_max = 0), which the int32
    sums must carry as the group of 16 does; the exact sum is an f32 (63.9375... + 1.5)."""
    A, B = np.full((8, 16), 1.999, np.float16), np.full((32, 8), 1.999, np.float16)
    cols = np.tile(np.arange(32).reshape(8, 4)[:, [0, 3]].ravel(), (8, 1))
    exact = np.float32(16 * float(np.float16(1.999)) ** 2 + 1.5)
    assert float(exact) == 16 * float(np.float16(1.999)) ** 2 + 1.5
    for sign in (1, -1):
        D = fastmma.matmul_sp(sign * A, cols, B, np.full((8, 8), sign * 1.5, np.float32),
                              instruction="m64n8k32.f32.f16.f16")
        np.testing.assert_array_equal(D, np.full((8, 8), sign * exact))


@pytest.mark.parametrize("fmt", ["f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u4"])
def test_non_finite_reads_the_bits(fmt):
    """formats.non_finite (which decides the spread way) against numpy's isfinite of the values."""
    f = get_format(fmt)
    every = np.arange(1 << min(f.bits, 16), dtype=np.int64)
    if fmt == "tf32":  # a float32's top 19 bits, the low 13 random
        every = (every << 16 | np.random.default_rng(0).integers(0, 1 << 16, every.size)).astype(np.uint32)
    every = every.astype(f.storage)
    with np.errstate(invalid="ignore"):
        values_of = fastmma.formats.from_bits(every, fmt).astype(np.float64)
    want = ~np.isfinite(values_of) if f.is_float else np.zeros(every.shape, bool)
    assert np.array_equal(fastmma.formats.non_finite(every, fmt), want)


def test_spread_groups_are_the_kernels():
    from fastmma.kernels import SPREAD_GROUPS
    from fastmma.kernels.fused_gemm import KERNELS

    assert set(SPREAD_GROUPS) == {group for group, _ in KERNELS}


def test_left_out_elements_take_no_part():
    """A NaN or infinity of B facing an element the columns leave out does not reach D; the
    same zero kept at that place gives NaN (0 x inf)."""
    inst = "m64n8k32.f32.f16.f16"
    A = np.ones((4, 16), np.float16)
    cols = np.tile([0, 1], (4, 8)) + np.repeat(4 * np.arange(8), 2)
    B = np.ones((32, 8), np.float16)
    B[2, :4] = np.inf
    B[7, 4:] = np.nan
    np.testing.assert_array_equal(fastmma.matmul_sp(A, cols, B, instruction=inst), np.full((4, 8), 16, np.float32))
    A2, cols2 = np.zeros((4, 16), np.float16), cols.copy()
    cols2[:, 1] = 2  # row keeps columns 0 and 2 of the first chunk, a zero facing inf
    assert np.isnan(fastmma.matmul_sp(A2, cols2, B, instruction=inst)[:, :4]).all()


@pytest.mark.parametrize("text", ["m64n16k32.f32.bf16.bf16", "mma.sp.sync.aligned.m16n8k128.row.col.s32.s4.s4.s32",
                                  "m64n8k16.f32.tf32.tf32"])
def test_compress_gives_what_the_dense_product_needs(text):
    """compress of a pruned dense A: matmul_sp of it equals numpy's product of the dense A on
    exact data, and the kept values are the non-zero ones."""
    inst = resolve_sparse_instruction(text)
    rng = np.random.default_rng(seed(text))
    chunk, kept = chunk_geometry(inst.atype)
    M, K, N = 33, 4 * inst.shape.k, 9
    cols = random_columns(rng, inst, M, K)
    dense = np.zeros((M, K), np.int64)
    np.put_along_axis(dense, cols, rng.integers(-7, 8, cols.shape), axis=-1)
    dt = get_format(inst.atype).value_dtype if inst.atype != "tf32" else np.float32
    vals, got_cols = compress(dense.astype(dt), inst.atype)
    assert vals.shape == cols.shape and np.array_equal(np.diff(got_cols.reshape(M, -1, kept), axis=-1) > 0,
                                                       np.ones((M, K // chunk, kept - 1), bool))
    B = rng.integers(-7, 8, (K, N))
    got = fastmma.matmul_sp(vals, got_cols, B.astype(dt), instruction=inst)
    np.testing.assert_array_equal(got.astype(np.int64), dense @ B)


def test_compress_refuses_a_chunk_too_full():
    with pytest.raises(OperandError, match=r"row 1, chunk 2 \(columns 8..11\) holds 3 non-zero"):
        compress(np.eye(2, 12, dtype=np.float16) + np.pad(np.ones((1, 3), np.float16), ((1, 0), (8, 1))), "f16")
    with pytest.raises(OperandError, match="aligned pairs"):
        compress(np.array([[1, 0, 1, 0, 1, 0, 0, 0]], np.int8), "s4")


def test_stacks_broadcast_and_k_padding():
    """A stack of A against one B: each matrix its own GEMM; K of whole chunks, not of k."""
    inst = resolve_sparse_instruction("m64n8k32.f32.f16.f16")
    rng = np.random.default_rng(5)
    A = values(rng, "f16", (3, 20, 18), "wide")
    cols = np.stack([random_columns(rng, inst, 20, 36) for _ in range(3)])
    B = values(rng, "f16", (36, 11), "wide")
    C = values(rng, "f32", (20, 11), "wide")
    got = fastmma.matmul_sp(A, cols, B, C, instruction=inst)
    for s in range(3):
        assert np.array_equal(bits(got[s]), bits(chained(inst, A[s], cols[s], B, C)))
    got2 = fastmma.matmul_sp(A[:, None], cols[:, None], np.stack([B, B]), instruction=inst)
    assert got2.shape == (3, 2, 20, 11) and np.array_equal(bits(got2[:, 1]), bits(fastmma.matmul_sp(
        A, cols, B, instruction=inst)))


def test_blocks_of_rows_and_columns_and_progress(monkeypatch):
    """Small gather blocks (many blocks of rows and of columns) give the same bits, and the
    progress calls rise to their total (the rows way for every column)."""
    import fastmma.sparse_gemm as sg

    monkeypatch.setattr(sg, "spread_rule", lambda inst: None)
    inst = resolve_sparse_instruction("m64n8k64.f32.e4m3.e4m3")
    rng = np.random.default_rng(9)
    A, cols, B, C = operands(inst, (50, 300, 128), "specials", rng)
    whole = fastmma.matmul_sp(A, cols, B, C, instruction=inst)
    monkeypatch.setattr(sg, "GATHER_BYTES", 1 << 12)
    calls = []
    parts = fastmma.matmul_sp(A, cols, B, C, instruction=inst, progress=lambda d, t: calls.append((d, t)))
    assert np.array_equal(bits(whole), bits(parts))
    assert len(calls) > 4 and calls[-1][0] == calls[-1][1] and [d for d, _ in calls] == list(range(1, len(calls) + 1))


def test_k_zero_and_empty():
    inst = "m64n8k32.f32.f16.f16"
    C = np.arange(6, dtype=np.float32).reshape(2, 3)
    A, cols, B = np.zeros((2, 0), np.float16), np.zeros((2, 0), int), np.zeros((0, 3), np.float16)
    assert np.array_equal(fastmma.matmul_sp(A, cols, B, C, instruction=inst), C)
    assert np.array_equal(bits(fastmma.matmul_sp(A, cols, B, instruction=inst)), np.zeros((2, 3), np.uint32))
    assert fastmma.matmul_sp(np.zeros((0, 8), np.float16), np.zeros((0, 8), int), np.zeros((16, 3), np.float16),
                             instruction=inst).shape == (0, 3)


F16 = "m64n8k32.f32.f16.f16"
_A, _COLS, _B = np.ones((4, 8), np.float16), np.tile([0, 1, 4, 5, 8, 9, 12, 13], (4, 1)), np.ones((16, 8), np.float16)


@pytest.mark.parametrize("call,error,needle", [
    (lambda: fastmma.matmul_sp(_A, _COLS, _B, instruction="m64n8k16.f32.f16.f16"), InvalidInstructionError,
     "fastmma.matmul takes the dense ones; short form m64n8k16.f32.f16.f16 reads as wgmma.mma_async"),
    (lambda: fastmma.matmul_sp(_A, _COLS, _B, instruction="wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"),
     InvalidInstructionError, "fastmma.matmul takes the dense ones"),
    (lambda: fastmma.matmul_sp(_A, _COLS, _B, instruction=3), InvalidInstructionError, "must be PTX text"),
    (lambda: fastmma.matmul_sp(_A, _COLS, _B[:12], instruction=F16), OperandError, "A 8 kept columns"),
    (lambda: fastmma.matmul_sp(_A, _COLS, _B[:14], instruction=F16), OperandError, "whole number of f16's chunks"),
    (lambda: fastmma.matmul_sp(_A, _COLS[:, :6], _B, instruction=F16), OperandError, "columns must be integers"),
    (lambda: fastmma.matmul_sp(_A, _COLS * 1.0, _B, instruction=F16), OperandError, "columns must be integers"),
    (lambda: fastmma.matmul_sp(_A, _COLS + 16, _B, instruction=F16), OperandError, r"lie in 0..15"),
    (lambda: fastmma.matmul_sp(_A, np.tile([0, 0, 4, 5, 8, 9, 12, 13], (4, 1)), _B, instruction=F16),
     OperandError, r"row 0, chunk 0 \(dense columns 0..3\) keeps columns \(0, 0\); each row keeps two different"),
    (lambda: fastmma.matmul_sp(_A, np.tile([0, 1, 4, 5, 8, 9, 12, 3], (4, 1)), _B, instruction=F16),
     OperandError, r"chunk 3 \(dense columns 12..15\) keeps columns \(12, 3\)"),
    (lambda: fastmma.matmul_sp(_A, np.tile([1, 0, 4, 5, 8, 9, 12, 13], (4, 1)), _B,
                               instruction="mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
     OperandError, r"keeps columns \(1, 0\).*in an order the metadata can name"),
    (lambda: fastmma.matmul_sp(_A, _COLS, _B, np.ones((4, 7), np.float32), instruction=F16), OperandError,
     "C must have shape"),
    (lambda: fastmma.matmul_sp(_A.astype(np.float32), _COLS, _B, instruction=F16), OperandError, "f16"),
    (lambda: fastmma.matmul_sp(_A, _COLS, _B, instruction="m16n8k16.f32.f16.f16.f32", scale_d=False), OperandError,
     "scale_d is a wgmma.mma_async.sp operand"),
    (lambda: fastmma.matmul_sp(_A, _COLS, _B, instruction=F16, scale_d="no"), OperandError, "scale_d must be"),
    (lambda: fastmma.matmul_sp(_A, _COLS, _B, instruction=F16, progress=5), OperandError, "progress must be"),
    (lambda: fastmma.matmul_sp(np.ones((2, 4, 8), np.float16), np.stack([_COLS] * 3), _B, instruction=F16),
     OperandError, "must broadcast together"),
])
def test_bad_input_is_refused(call, error, needle):
    with pytest.raises(error, match=needle):
        call()
