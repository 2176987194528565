"""fastmma.matmul against the single-instruction path chained tile by tile, bit for bit."""

import ml_dtypes
import numpy as np
import pytest
from conftest import seed

import fastmma
from fastmma.errors import InvalidInstructionError, OperandError
from fastmma.formats import get_format
from fastmma.gemm import accumulator_instruction, matmul, resolve_instruction

FLOAT_INSTRUCTIONS = [
    "m64n16k16.f32.f16.f16", "m64n16k16.f16.f16.f16", "m64n16k16.f32.bf16.bf16", "m64n16k8.f32.tf32.tf32",
    "m64n16k32.f32.e4m3.e5m2", "m64n16k32.f16.e5m2.e4m3", "m64n16k32.f32.e5m2.e5m2",
    "wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32",
    "wmma.mma.sync.aligned.row.col.m16n16k16.f16.f32", "wmma.mma.sync.aligned.row.col.m32n8k16.f32.f16",
    "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {d0,d1,d2,d3,d4,d5,d6,d7}, a, b, p, -1, 1, 0, 0;",
]
INT_INSTRUCTIONS = [
    "m64n16k32.s32.s8.u8", "m64n16k32.s32.u8.s8.satfinite", "m64n16k256.s32.b1.b1.and.popc",
    "wmma.mma.sync.aligned.row.col.m8n8k32.s32.s4.s4.s32.satfinite",
    "wmma.mma.xor.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32",
    "wmma.mma.sync.aligned.row.col.m8n8k4.rm.f64.f64.f64.f64",
]


def values(rng, fmt, shape, mode):
    f = get_format(fmt)
    if f.is_float:
        scale = {"narrow": 3, "wide": 20, "tiny": 40, "specials": 3}[mode]
        v = rng.standard_normal(shape) * 2.0 ** rng.integers(-scale, scale // 2 + 1, shape)
        if mode == "tiny":
            v *= 2.0 ** -30
        if mode == "specials":
            v = rng.standard_normal(shape)
            flat = v.reshape(-1)
            picks = rng.integers(0, flat.size, max(1, flat.size // 20))
            flat[picks] = rng.choice([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e-30], picks.size)
        dt = np.float32 if fmt == "tf32" else f.value_dtype
        with np.errstate(over="ignore", invalid="ignore"):
            return v.astype(dt)
    if fmt == "b1":
        return rng.integers(0, 2, shape).astype(np.uint8)
    lo, hi = {"s8": (-128, 127), "u8": (0, 255), "s4": (-8, 7), "u4": (0, 15), "s32": (-2**31, 2**31 - 1)}[fmt]
    return rng.integers(lo, hi + 1, shape).astype(f.value_dtype)


def chained(inst, A, B, C):
    """The k-loop: one fastmma.mma per instruction tile, zero-padded at the edges."""
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    M, K = A.shape
    N = B.shape[1]
    pad = lambda x, r, c: np.pad(x, ((0, r - x.shape[0]), (0, c - x.shape[1])))
    Mp, Np, Kp = -(-M // m) * m, -(-N // n) * n, max(k, -(-K // k) * k)
    Ap, Bp = pad(A, Mp, Kp), pad(B, Kp, Np)
    D = np.zeros((Mp, Np), get_format(inst.dtype).value_dtype if inst.dtype != "f32" else np.float32)
    for i in range(0, Mp, m):
        for j in range(0, Np, n):
            acc = None if C is None else pad(C, Mp, Np)[i:i + m, j:j + n]
            for kk in range(0, Kp, k):
                step = inst if kk == 0 else accumulator_instruction(inst)
                acc = fastmma.mma(step, Ap[i:i + m, kk:kk + k], Bp[kk:kk + k, j:j + n], acc)
            D[i:i + m, j:j + n] = acc
    return D[:M, :N]


def bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


@pytest.mark.parametrize("text", FLOAT_INSTRUCTIONS)
@pytest.mark.parametrize("mode", ["narrow", "wide", "tiny", "specials"])
@pytest.mark.parametrize("shape", [(67, 23, 70), (1, 5, 3), (130, 17, 96)])
def test_float_matmul_equals_chained_instructions(text, mode, shape):
    inst = resolve_instruction(text)
    M, N, K = shape
    rng = np.random.default_rng(seed(text, mode, shape))
    A, B = values(rng, inst.atype, (M, K), mode), values(rng, inst.btype, (K, N), mode)
    C = values(rng, inst.ctype, (M, N), mode)
    got = matmul(A, B, C, instruction=text)
    assert np.array_equal(bits(got), bits(chained(inst, A, B, C)))


@pytest.mark.parametrize("text", INT_INSTRUCTIONS)
@pytest.mark.parametrize("shape", [(70, 19, 300), (3, 1, 1), (64, 16, 512)])
def test_integer_and_f64_matmul_equals_chained_instructions(text, shape):
    inst = resolve_instruction(text)
    M, N, K = shape
    rng = np.random.default_rng(seed(text, shape))
    A, B = values(rng, inst.atype, (M, K), "wide"), values(rng, inst.btype, (K, N), "wide")
    C = values(rng, inst.ctype, (M, N), "wide")
    assert np.array_equal(bits(matmul(A, B, C, instruction=text)), bits(chained(inst, A, B, C)))
    assert np.array_equal(bits(matmul(A, B, instruction=text)), bits(chained(inst, A, B, None)))


@pytest.mark.parametrize("text", FLOAT_INSTRUCTIONS + INT_INSTRUCTIONS)
@pytest.mark.parametrize("shape", [(5, 7, 3), (64, 64, 96)])  # the per-element kernels, and the fast ones
def test_without_c_no_kernel_reads_c(text, shape):
    """matmul with no C hands the kernels an uninitialised C and use_c=False: the k-loop's
    result must not depend on what that C holds (all bits set: NaNs, -1; or zeros)."""
    from fastmma.gemm import _k_loop, _pad_k
    from fastmma.mma import stack_bits

    inst = resolve_instruction(text)
    M, N, K = shape
    rng = np.random.default_rng(3)
    a = stack_bits(values(rng, inst.atype, (M, K), "wide"), inst.atype, "A")
    b = stack_bits(values(rng, inst.btype, (K, N), "wide"), inst.btype, "B")
    a, b = _pad_k(a, b, inst.shape.k)
    storage = get_format(inst.ctype).storage
    run = _k_loop(inst, False)
    ones = run(a, b, np.full((M, N), np.iinfo(storage).max, storage))
    zeros = run(a, b, np.zeros((M, N), storage))
    assert np.array_equal(ones, zeros)


def test_accumulator_overflow_to_infinity_stays_infinite():
    A = np.full((4, 64), 60000, np.float16)
    B = np.full((64, 4), 60000, np.float16)
    got = matmul(A, B, instruction="m64n8k16.f32.f16.f16")
    # 16 products of 3.6e9 per step stay finite in f32; nothing here overflows f32...
    assert np.all(np.isfinite(got))
    got16 = matmul(A, B, instruction="m64n8k16.f16.f16.f16")
    # ...but an f16 accumulator overflows on the first step and stays +inf
    assert np.all(got16 == np.inf)
    assert np.array_equal(bits(got16), bits(chained(resolve_instruction("m64n8k16.f16.f16.f16"), A, B, None)))


def test_non_contiguous_and_short_forms():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((80, 64)).astype(np.float16)
    B = rng.standard_normal((64, 48)).astype(np.float16)
    full = matmul(A, B, instruction="wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16")
    short = matmul(np.asfortranarray(A), B[:, ::1], instruction="m64n8k16.f32.f16.f16")
    strided = matmul(A[::2], B, instruction="m64n8k16.f32.f16.f16")
    assert np.array_equal(bits(full), bits(short))
    assert np.array_equal(bits(full[::2]), bits(strided))


def test_k_zero_returns_c():
    C = np.array([[-0.0, 1.5]], np.float32)
    D = matmul(np.zeros((1, 0), np.float16), np.zeros((0, 2), np.float16), C, instruction="m64n8k16.f32.f16.f16")
    assert np.array_equal(bits(D), bits(C))


@pytest.mark.parametrize("call,error,needle", [
    (lambda: matmul(np.zeros((4, 16), np.float16), np.zeros((8, 4), np.float16), instruction="m64n8k16.f32.f16.f16"),
     OperandError, "K must agree"),
    (lambda: matmul(np.zeros((4, 16), np.float32), np.zeros((16, 4), np.float16), instruction="m64n8k16.f32.f16.f16"),
     OperandError, "float16"),
    (lambda: matmul(np.zeros(16, np.float16), np.zeros((16, 4), np.float16), instruction="m64n8k16.f32.f16.f16"),
     OperandError, "2-D"),
    (lambda: matmul(np.zeros((4, 16), np.float16), np.zeros((16, 4), np.float16), np.zeros((4, 5), np.float32),
                    instruction="m64n8k16.f32.f16.f16"), OperandError, r"\(4, 4\)"),
    (lambda: matmul(np.zeros((4, 16), np.float16), np.zeros((16, 4), np.float16), instruction="m64n8k16.f64.f16.f16"),
     InvalidInstructionError, "short form"),
    (lambda: matmul(np.zeros((4, 16), np.float16), np.zeros((16, 4), np.float16), instruction="wgmma.fence.sync.aligned"),
     InvalidInstructionError, "mma instruction"),
    (lambda: matmul(np.zeros((4, 16), np.float16), np.zeros((16, 4), np.float16), instruction=3),
     InvalidInstructionError, "PTX text"),
])
def test_bad_input_is_refused(call, error, needle):
    with pytest.raises(error, match=needle):
        call()


@pytest.mark.parametrize("path", ["matmul", "mma"])
def test_torch_tensors_when_installed(path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    A = rng.standard_normal((64, 16)).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    ta = torch.from_numpy(A.view(np.int16)).view(torch.bfloat16)
    tb = torch.from_numpy(B.view(np.int16)).view(torch.bfloat16)
    if path == "matmul":
        def run(a, b):
            return matmul(a, b, instruction="m64n8k16.f32.bf16.bf16")
    else:
        def run(a, b):
            return fastmma.mma("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", a, b)
    assert np.array_equal(bits(run(ta, tb)), bits(run(A, B)))


@pytest.mark.parametrize("make", [
    lambda torch: torch.zeros(64, 16, dtype=torch.float16, device="meta"),  # no data to read
    lambda torch: torch.zeros(64, 16, dtype=torch.float16).to_sparse(),
    lambda torch: torch.quantize_per_tensor(torch.zeros(64, 16), 0.5, 0, torch.qint8),
    lambda torch: torch.zeros(64, 16, dtype=torch.complex32),
], ids=["meta", "sparse", "qint8", "complex32"])
def test_torch_tensors_numpy_cannot_take_are_refused(make):
    torch = pytest.importorskip("torch")
    B = np.zeros((16, 8), np.float16)
    with pytest.raises(OperandError, match="A must be a dense tensor with data"):
        matmul(make(torch), B, instruction="m64n8k16.f32.f16.f16")


# ---------------------------------------------------------------- stacks of matrices

STACKS = [  # (A's, B's, C's batch dimensions): B shared, A shared, neither, C alone batched
    ((2, 3), (), (3,)),
    ((), (2, 2), None),
    ((3, 1), (1, 2), (2,)),
    ((1,), (), (2, 1)),
]


def _matrix_of(x, batch, index):
    """Matrix ``index`` of the stack ``x`` broadcast to ``batch`` (None for None)."""
    return None if x is None else np.broadcast_to(x, batch + x.shape[-2:])[index]


@pytest.mark.parametrize("text", ["m64n8k16.f32.f16.f16", "m64n16k32.f16.e5m2.e4m3", "m64n16k32.s32.s8.u8",
                                  "wmma.mma.sync.aligned.row.col.m16n16k16.f16.f32",
                                  "wmma.mma.sync.aligned.row.col.m8n8k4.rn.f64.f64.f64.f64"])
@pytest.mark.parametrize("stack", STACKS)
def test_stacks_of_matrices_broadcast_as_numpy_matmul(text, stack):
    """Each matrix of a stack's D is the k-loop of its own A, B and C, chained tile by tile,
    with the batch dimensions broadcast as numpy.matmul broadcasts them."""
    inst = resolve_instruction(text)
    a_batch, b_batch, c_batch = stack
    M, N, K = 19, 10, 40
    rng = np.random.default_rng(seed(text, stack))
    A = values(rng, inst.atype, a_batch + (M, K), "specials" if get_format(inst.atype).is_float else "wide")
    B = values(rng, inst.btype, b_batch + (K, N), "wide")
    C = None if c_batch is None else values(rng, inst.ctype, c_batch + (M, N), "wide")
    batch = np.broadcast_shapes(a_batch, b_batch, () if c_batch is None else c_batch)
    got = matmul(A, B, C, instruction=text)
    assert got.shape == batch + (M, N) and got.flags.c_contiguous
    for index in np.ndindex(*batch):
        A_i, B_i, C_i = (_matrix_of(x, batch, index) for x in (A, B, C))
        assert np.array_equal(bits(got[index]), bits(chained(inst, A_i, B_i, C_i))), index


@pytest.mark.parametrize("text", ["m64n16k16.f32.f16.f16", "m64n16k16.f16.f16.f16", "m64n16k32.f32.e4m3.e5m2",
                                  "m64n16k8.f32.tf32.tf32"])
@pytest.mark.parametrize("with_c", [True, False])
def test_stack_in_several_kernel_calls_writes_each_part_in_place(monkeypatch, text, with_c):
    """A stack larger than one call of the stack kernels takes (``STACK_ELEMENTS``, made small
    here: 3 GEMMs a call, so 8 GEMMs take calls of 3, 3 and 2) has its D written part by part
    into one array (in place where D is f32): each matrix equals its own k-loop, chained
    tile by tile, C's infinities and NaNs and all."""
    import fastmma.kernels as kernels

    inst = resolve_instruction(text)
    M, N, K = 33, 40, 64
    monkeypatch.setattr(kernels, "STACK_ELEMENTS", 3 * (M * K + K * N + M * N))
    assert kernels.stack_run(M, K, N) == 3
    rng = np.random.default_rng(seed(text, with_c))
    A = values(rng, inst.atype, (8, M, K), "wide")
    B = values(rng, inst.btype, (8, K, N), "wide")
    C = values(rng, inst.ctype, (8, M, N), "specials") if with_c else None
    got = matmul(A, B, C, instruction=text)
    assert got.shape == (8, M, N) and got.flags.c_contiguous
    for s in range(8):
        assert np.array_equal(bits(got[s]), bits(chained(inst, A[s], B[s], None if C is None else C[s]))), s


def test_stack_with_scale_d_false_ignores_c():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((2, 8, 16)).astype(np.float16)
    B = rng.standard_normal((2, 16, 8)).astype(np.float16)
    C = np.full((2, 8, 8), np.nan, np.float32)
    got = matmul(A, B, C, instruction="m64n8k16.f32.f16.f16", scale_d=False)
    assert np.array_equal(bits(got), bits(matmul(A, B, instruction="m64n8k16.f32.f16.f16")))
    assert not np.isnan(got).any()


@pytest.mark.parametrize("elements, calls", [(1, 6), (2 * (4 * 16 + 16 * 700 + 4 * 700), 3), (None, 1)],
                         ids=["gemm-by-gemm", "runs-of-two", "one-run"])
def test_stack_progress_rises_to_its_total(monkeypatch, elements, calls):
    """progress counts the output columns of the whole stack: by blocks of columns where the
    GEMMs run one by one, by runs of GEMMs where they run together (kernels.STACK_ELEMENTS;
    a run of two, then the last GEMM by itself)."""
    import fastmma.kernels

    if elements is not None:
        monkeypatch.setattr(fastmma.kernels, "STACK_ELEMENTS", elements)
    seen = []
    rng = np.random.default_rng(2)
    A = rng.standard_normal((3, 4, 16)).astype(np.float16)
    B = rng.standard_normal((3, 16, 700)).astype(np.float16)  # two blocks of columns per GEMM
    D = matmul(A, B, instruction="m64n8k16.f32.f16.f16", progress=lambda done, total: seen.append((done, total)))
    assert len(seen) == calls
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1] == (3 * 700, 3 * 700)
    assert np.array_equal(bits(D), bits(matmul(A, B, instruction="m64n8k16.f32.f16.f16")))
    assert np.array_equal(bits(D[1]), bits(matmul(A[1], B[1], instruction="m64n8k16.f32.f16.f16")))


def test_empty_stack():
    got = matmul(np.zeros((0, 4, 16), np.float16), np.zeros((3, 1, 16, 8), np.float16), instruction="m64n8k16.f16.f16.f16")
    assert got.shape == (3, 0, 4, 8) and got.dtype == np.float16


@pytest.mark.parametrize("a_shape, b_shape, c_shape", [
    ((2, 0, 0), (2, 0, 0), None), ((0, 0), (2, 0, 0), None), ((2, 0, 16), (16, 8), None), ((2, 4, 16), (16, 0), None),
    ((4, 16), (2, 16, 0), None), ((2, 3, 0), (2, 0, 5), (2, 3, 5)), ((3, 0), (2, 0, 5), (3, 5)),
    ((2, 3, 0), (0, 5), None),
])
def test_stacks_of_matrices_with_no_rows_columns_or_k(a_shape, b_shape, c_shape):
    """Stacks whose matrices have a zero M, N or K, with one A, one B or both stacked (found
    by the long hostile-input run: numpy could not infer a -1 in a reshape of no elements).
    D has numpy.matmul's shape, and each of its matrices is the 2-D call's on that matrix:
    where K is 0, C's values (a -0 kept, as test_k_zero_returns_c has it) or +0."""
    text = "m64n8k16.f32.f16.f16"
    rng = np.random.default_rng(13)
    A = rng.standard_normal(a_shape).astype(np.float16)
    B = rng.standard_normal(b_shape).astype(np.float16)
    C = None
    if c_shape is not None:
        C = np.where(rng.random(c_shape) < 0.5, -0.0, rng.standard_normal(c_shape)).astype(np.float32)
    got = matmul(A, B, C, instruction=text)
    batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2], () if C is None else C.shape[:-2])
    assert got.shape == batch + (A.shape[-2], B.shape[-1]) and got.dtype == np.float32
    for index in np.ndindex(*batch):
        A_i, B_i, C_i = (_matrix_of(x, batch, index) for x in (A, B, C))
        assert np.array_equal(bits(got[index]), bits(matmul(A_i, B_i, C_i, instruction=text))), index
        if A.shape[-1] == 0:  # K = 0: D is C, or +0 where there is none
            want = np.zeros(got.shape[-2:], np.float32) if C is None else np.broadcast_to(C_i, got.shape[-2:])
            assert np.array_equal(bits(got[index]), bits(want)), index


@pytest.mark.parametrize("call,needle", [
    (lambda: matmul(np.zeros((2, 4, 16), np.float16), np.zeros((3, 16, 8), np.float16),
                    instruction="m64n8k16.f32.f16.f16"), r"broadcast together, got A \(2,\), B \(3,\)"),
    (lambda: matmul(np.zeros((2, 4, 16), np.float16), np.zeros((16, 8), np.float16), np.zeros((3, 4, 8), np.float32),
                    instruction="m64n8k16.f32.f16.f16"), r"A \(2,\), B \(\), C \(3,\)"),
    (lambda: matmul(np.zeros((2, 4, 16), np.float16), np.zeros((2, 16, 8), np.float16), np.zeros((2, 8, 4), np.float32),
                    instruction="m64n8k16.f32.f16.f16"), r"C must have shape \(4, 8\)"),
    (lambda: matmul(np.zeros((2, 4, 16), np.float16), np.zeros((2, 8, 8), np.float16),
                    instruction="m64n8k16.f32.f16.f16"), "K must agree"),
])
def test_stacks_that_do_not_fit_are_refused(call, needle):
    with pytest.raises(OperandError, match=needle):
        call()


def test_torch_stacks_when_installed():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    A = rng.standard_normal((2, 20, 32)).astype(np.float16)
    B = rng.standard_normal((2, 32, 8)).astype(np.float16)
    text = "m64n8k16.f32.f16.f16"
    assert np.array_equal(bits(matmul(torch.from_numpy(A), torch.from_numpy(B), instruction=text)),
                          bits(matmul(A, B, instruction=text)))


@pytest.mark.parametrize("text", ["wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16",
                                  "wgmma.mma_async.sync.aligned.m64n16k32.f16.e4m3.e5m2",
                                  "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8.satfinite",
                                  "wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32"])
def test_mma_on_stacks_issues_the_instruction_per_matrix(text):
    """fastmma.mma on stacks (a simulator's warpgroups in one call): each matrix of D is the
    single instruction on its own A, B and C, with the batch dimensions broadcast."""
    inst = resolve_instruction(text)
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    rng = np.random.default_rng(seed(text))
    A = values(rng, inst.atype, (3, 1, m, k), "specials" if get_format(inst.atype).is_float else "wide")
    B = values(rng, inst.btype, (2, k, n), "wide")
    C = values(rng, inst.ctype, (m, n), "wide")
    got = fastmma.mma(text, A, B, C)
    assert got.shape == (3, 2, m, n)
    for i, j in np.ndindex(3, 2):
        assert np.array_equal(bits(got[i, j]), bits(fastmma.mma(text, A[i, 0], B[j], C)))
    assert np.array_equal(bits(fastmma.mma(text, A[:, 0], B[:1])[2]), bits(fastmma.mma(text, A[2, 0], B[0])))
    with pytest.raises(OperandError, match=r"A must have shape .* \(or be a stack of such matrices"):
        fastmma.mma(text, A[..., :-1], B)
    with pytest.raises(OperandError, match="broadcast together"):
        fastmma.mma(text, A[:, 0], B)
