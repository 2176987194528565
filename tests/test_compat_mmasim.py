"""fastmma.compat.mmasim: the MMA-Sim drop-in.

Part 1 (always): the drop-in against fastmma.mma / fastmma.matmul on numpy inputs, for every
Hopper shape and type MMA-Sim models (random and special values), with the documented
differences applied; constructor and operand validation.
Part 2 (when mmasim is installed, ``pip install ".[compat]"``): bit-identical to MMA-Sim
itself, through torch tensors, for every Hopper shape and type it models.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import seed

import fastmma
from fastmma.compat.mmasim import (
    HOPPER_MMA_SHAPE_AND_TYPE,
    HOPPER_WGMMA_SHAPE_AND_TYPE,
    MMA,
    WGMMA,
    UnsupportedOperationError,
)
from fastmma.errors import FastmmaError, OperandError
from fastmma.formats import get_format
from fastmma.isa.numerics import FmaChainRule

MODES = ("values", "bits", "special", "tiny", "cancel")
# one N per wgmma type in the quick sweeps; every N in the mmasim sweep
WGMMA_TYPES = sorted({st.split(".", 1)[1]: st for st in HOPPER_WGMMA_SHAPE_AND_TYPE}.values())
FLOAT_MMA = [st for st in HOPPER_MMA_SHAPE_AND_TYPE if ".f64." not in st]
F64_MMA = [st for st in HOPPER_MMA_SHAPE_AND_TYPE if ".f64." in st]


# ---------------------------------------------------------------- operand generators


def _special_bits(ptx: str) -> list[int]:
    """Zeros, subnormals, normals, max-finite, infinities and NaNs of a format, both signs."""
    f = get_format(ptx)
    lo, m, e = f.ignored_low_bits, f.man_bits, f.exp_bits
    one_exp = (1 << (e - 1)) - 1
    top = (1 << e) - 1
    pats = [0, 1 << lo, ((1 << m) - 1) << lo, 1 << (m + lo), one_exp << (m + lo), (one_exp << m | 1) << lo]
    if f.ieee_specials:
        pats += [((top - 1) << m | ((1 << m) - 1)) << lo, top << (m + lo), (top << m | 1 << (m - 1)) << lo,
                 (top << m | 1) << lo, (top << m | ((1 << m) - 1)) << lo]
    else:  # e4m3: no infinity, one NaN mantissa
        pats += [(top << m | ((1 << m) - 2)), (top << m | ((1 << m) - 1))]
    if lo:  # tf32: a NaN whose payload sits in the ignored bits reads as infinity
        pats += [(top << (m + lo)) | 1, (one_exp << (m + lo)) | ((1 << lo) - 1)]
    return pats + [p | (1 << (f.bits - 1)) for p in pats]


def _from_values(v: np.ndarray, ptx: str) -> np.ndarray:
    f = get_format(ptx)
    dt = np.float32 if ptx == "tf32" else f.value_dtype
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.float32 if dt != np.float64 else np.float64).astype(dt).view(f.storage)


def operand(ptx: str, shape, rng, mode: str) -> np.ndarray:
    """Raw bits of one operand: ``values`` (normal numbers over a few binades), ``bits``
    (uniform bit patterns), ``special`` (values with specials and random patterns mixed
    in), ``tiny`` (subnormals and the smallest normals), ``cancel`` (small exact values
    that cancel)."""
    f = get_format(ptx)
    shape = tuple(shape)
    if mode == "bits":
        return rng.integers(0, 1 << f.bits, shape, dtype=np.uint64).astype(f.storage)
    if mode == "tiny":
        field = rng.integers(0, 1 << (f.man_bits + 1 + f.ignored_low_bits), shape, dtype=np.uint64)
        sign = rng.integers(0, 2, shape, dtype=np.uint64) << np.uint64(f.bits - 1)
        return (field | sign).astype(f.storage)
    if mode == "cancel":
        return _from_values(rng.choice([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 0.75, -0.75], shape), ptx)
    v = rng.standard_normal(shape) * 2.0 ** rng.integers(-4, 5, shape)
    bits = _from_values(v, ptx)
    if ptx == "tf32":
        bits = bits | rng.integers(0, 1 << 13, shape, dtype=np.uint64).astype(np.uint32)
    if mode == "special":
        flat = bits.reshape(-1)
        pick = rng.random(flat.size)
        sp = np.array(_special_bits(ptx), np.uint64).astype(f.storage)
        flat[pick < 0.25] = rng.choice(sp, int((pick < 0.25).sum()))
        rnd = (pick >= 0.25) & (pick < 0.4)
        flat[rnd] = rng.integers(0, 1 << f.bits, int(rnd.sum()), dtype=np.uint64).astype(f.storage)
    return bits


def mixed(ptx: str, shape, rng, axis: int) -> np.ndarray:
    """Bits whose rows (axis 0) or columns (axis 1) cycle through every mode."""
    out = np.empty(shape, get_format(ptx).storage)
    for i in range(shape[axis]):
        mode = MODES[i % len(MODES)]
        if axis == 0:
            out[i] = operand(ptx, (shape[1],), rng, mode)
        else:
            out[:, i] = operand(ptx, (shape[0],), rng, mode)
    return out


def inputs(op, m, n, k, rng, mode):
    """A (m, k), B (k, n), C (m, n) raw bits for ``op``; mode ``mixed`` cycles the modes."""
    if mode == "mixed":
        return (mixed(op.a_type_ptx, (m, k), rng, 0), mixed(op.b_type_ptx, (k, n), rng, 1),
                operand(op.c_type_ptx, (m, n), rng, "special"))
    c_mode = "tiny" if mode == "tiny" else ("cancel" if mode == "cancel" else "special")
    return (operand(op.a_type_ptx, (m, k), rng, mode), operand(op.b_type_ptx, (k, n), rng, mode),
            operand(op.c_type_ptx, (m, n), rng, c_mode))


def values_of(bits, ptx):
    f = get_format(ptx)
    return bits.view(np.float32 if ptx == "tf32" else f.value_dtype)


def as_bits(d) -> np.ndarray:
    d = np.asarray(d)
    return d.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[d.itemsize])


def plus_zero(bits: np.ndarray) -> np.ndarray:
    """Zeros as MMA-Sim gives them: +0 (fastmma may keep the sign of an underflow)."""
    bits = bits.copy()
    bits[bits == bits.dtype.type(1 << (8 * bits.itemsize - 1))] = 0
    return bits


def assert_same_bits(got, want, what: str):
    got, want = as_bits(got), as_bits(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.argwhere(got != want)
    assert bad.size == 0, (f"{what}: {len(bad)} of {got.size} differ, first at {tuple(bad[0])}: "
                           f"got 0x{int(got[tuple(bad[0])]):x}, want 0x{int(want[tuple(bad[0])]):x}")


def _call(op, a, b, c):
    return op(values_of(a, op.a_type_ptx), values_of(b, op.b_type_ptx), values_of(c, op.c_type_ptx))


# ---------------------------------------------------------------- part 1: tables and rules


def test_tables_cover_mmasim_hopper():
    assert len(HOPPER_WGMMA_SHAPE_AND_TYPE) == 32 * 12 == len(set(HOPPER_WGMMA_SHAPE_AND_TYPE))
    assert len(HOPPER_MMA_SHAPE_AND_TYPE) == 12
    for st in HOPPER_WGMMA_SHAPE_AND_TYPE:
        fastmma.parse("wgmma.mma_async.sync.aligned." + st)  # every one is a real wgmma


@pytest.mark.parametrize("st", WGMMA_TYPES)
def test_wgmma_rule_is_fastmmas(st):
    """For wgmma MMA-Sim's parameters are the recorded rule, instruction by instruction."""
    assert WGMMA("Hopper", st).rule == fastmma.parse("wgmma.mma_async.sync.aligned." + st).rule


# MMA-Sim's Hopper parameters (mmasim/nv_ptx/sim.py): F, L = 32 bytes / element, e_zero, rho
MMASIM_PARAMS = {("f16", "f32"): (25, 16, -133, 23, "rz"), ("bf16", "f32"): (25, 16, -133, 23, "rz"),
                 ("f16", "f16"): (25, 16, -21, 10, "rne"), ("tf32", "f32"): (25, 8, -133, 23, "rz"),
                 ("e4m3", "f32"): (13, 32, -133, 13, "rz"), ("e5m2", "f32"): (13, 32, -133, 13, "rz"),
                 ("e4m3", "f16"): (13, 32, -21, 10, "rne"), ("e5m2", "f16"): (13, 32, -21, 10, "rne")}


@pytest.mark.parametrize("st", WGMMA_TYPES + list(HOPPER_MMA_SHAPE_AND_TYPE))
def test_rule_has_mmasims_parameters(st):
    op = (WGMMA if st.startswith("m64") else MMA)("Hopper", st)
    if op.a_type_ptx == "f64":
        assert op.rule == FmaChainRule("rn")
        return
    r = op.rule
    assert (r.frac_bits, r.group, r.e_zero, r.out_man_bits, r.rounding) == MMASIM_PARAMS[op.a_type_ptx, op.d_type_ptx]
    assert op.c_type_ptx == op.d_type_ptx


# ---------------------------------------------------------------- part 1: against fastmma


@pytest.mark.parametrize("mode", MODES + ("mixed",))
@pytest.mark.parametrize("st", WGMMA_TYPES)
def test_wgmma_matches_fastmma_mma(st, mode):
    op = WGMMA("Hopper", st)
    rng = np.random.default_rng(seed(st, mode))
    a, b, c = inputs(op, 64, op.n, op.k, rng, mode)
    want = fastmma.mma("wgmma.mma_async.sync.aligned." + st, *(values_of(x, t) for x, t in (
        (a, op.a_type_ptx), (b, op.b_type_ptx), (c, op.c_type_ptx))))
    assert_same_bits(_call(op, a, b, c), plus_zero(as_bits(want)), f"{st} {mode}")


@pytest.mark.parametrize("mode", ("values", "special", "tiny"))
@pytest.mark.parametrize("st", WGMMA_TYPES)
def test_wgmma_long_k_matches_matmul(st, mode):
    """Any M, N, K: a k-loop of the instruction (k = MMA-Sim's group), partial last group."""
    op = WGMMA("Hopper", st)
    rng = np.random.default_rng(7)
    a, b, c = inputs(op, 37, 19, 3 * op.k + 5, rng, mode)
    want = fastmma.matmul(*(values_of(x, t) for x, t in ((a, op.a_type_ptx), (b, op.b_type_ptx),
                                                         (c, op.c_type_ptx))), instruction=st)
    assert_same_bits(_call(op, a, b, c), plus_zero(as_bits(want)), f"{st} long K {mode}")


def _equivalent_wgmma(op) -> str:
    """A wgmma whose fastmma rule is this MMA's rule (same types, k = MMA-Sim's group)."""
    return f"m64n8k{op.rule.group}.{op.d_type_ptx}.{op.a_type_ptx}.{op.b_type_ptx}"


@pytest.mark.parametrize("mode", MODES + ("mixed",))
@pytest.mark.parametrize("st", FLOAT_MMA)
def test_float_mma_matches_matmul(st, mode):
    op = MMA("Hopper", st)
    rng = np.random.default_rng(seed(st, mode))
    for m, n, k in ((op.m, op.n, op.k), (24, 16, 2 * op.rule.group + 3)):
        a, b, c = inputs(op, m, n, k, rng, mode)
        want = fastmma.matmul(*(values_of(x, t) for x, t in ((a, op.a_type_ptx), (b, op.b_type_ptx),
                                                             (c, op.c_type_ptx))), instruction=_equivalent_wgmma(op))
        assert_same_bits(_call(op, a, b, c), plus_zero(as_bits(want)), f"{st} {m}x{n}x{k} {mode}")


def _x86_fma_chain_nan(a, b, c):
    """The NaN an x86-64 fma chain ends with, where a NaN operand decides it: per step, the
    first NaN of (a, b, accumulator), quietened.  None where no NaN operand is known (a
    number, or an invalid operation's default NaN)."""
    isnan = lambda v: (int(v) & ~(1 << 63)) > 0x7FF0000000000000
    acc = int(c) | 1 << 51 if isnan(c) else None
    for x, y in zip(a, b):
        first = next((int(v) for v in (x, y) if isnan(v)), acc)
        acc = None if first is None else first | 1 << 51
    return acc


@pytest.mark.parametrize("mode", MODES + ("mixed",))
@pytest.mark.parametrize("st", F64_MMA)
def test_f64_mma_matches_fma_chain(st, mode):
    """fastmma's f64 fma chain, except the NaN payload choice (documented difference 4)."""
    op = MMA("Hopper", st)
    rng = np.random.default_rng(seed(st, mode))
    for m, n, k in ((op.m, op.n, op.k), (9, 11, 23)):
        a, b, c = inputs(op, m, n, k, rng, mode)
        got = as_bits(_call(op, a, b, c))
        want = as_bits(fastmma.matmul(a.view(np.float64), b.view(np.float64), c.view(np.float64),
                                      instruction="m8n8k4.rn.f64.f64.f64.f64"))
        nan = np.isnan(want.view(np.float64))
        assert (np.isnan(got.view(np.float64)) == nan).all()
        assert_same_bits(got[~nan], want[~nan], f"{st} {mode} non-NaN")
        for i, j in np.argwhere(nan)[:50]:
            x86 = _x86_fma_chain_nan(a[i], b[:, j], c[i, j])
            if x86 is not None:  # None: an invalid operation made the NaN
                assert int(got[i, j]) == x86, (st, mode, i, j)


def test_f64_nan_priority_is_the_hosts():
    op = MMA("Hopper", "m8n8k4.f64.f64.f64.f64")
    q = lambda p, s=0: np.uint64((s << 63) | 0x7FF8000000000000 | p)
    a = np.zeros((8, 4), np.uint64); b = np.zeros((4, 8), np.uint64); c = np.zeros((8, 8), np.uint64)
    a[0, 0], b[0, 0], c[0, 0] = q(1), q(2, 1), q(3)  # scenario i in D[i, i]
    a[1, 0], c[1, 1] = np.uint64(0x7FF0000000000000), q(4)  # inf * 0 + NaN: the NaN
    a[2, 0] = np.uint64(0x7FF0000000000000)  # inf * 0: the default NaN
    a[3, 1], b[0, 3] = np.uint64(0x7FF0000000000001), q(5)  # a later NaN wins, quietened
    d = as_bits(_call(op, a, b, c))
    assert [hex(int(d[i, i])) for i in range(4)] == [hex(q(1)), hex(q(4)), "0xfff8000000000000", hex(q(1))]
    gpu = as_bits(fastmma.matmul(a.view(np.float64), b.view(np.float64), c.view(np.float64),
                                 instruction="m8n8k4.rn.f64.f64.f64.f64"))
    assert int(gpu[0, 0]) == int(q(2, 1))  # the H100 takes B's NaN first


@pytest.mark.parametrize("st", ["m16n8k16.f32.bf16.bf16.f32", "m16n8k16.f16.f16.f16.f16"])
def test_underflowing_sum_is_plus_zero(st):
    """A negative sum that rounds to zero gives +0, as in MMA-Sim."""
    op = MMA("Hopper", st)
    tiny = 2.0 ** -75 if op.a_type_ptx == "bf16" else 2.0 ** -15  # products underflow D
    vt = values_of(np.zeros(1, get_format(op.a_type_ptx).storage), op.a_type_ptx).dtype
    A = np.zeros((16, 16), np.float32)
    A[:, 0] = tiny  # one product per sum, below D's smallest subnormal
    A = A.astype(vt)
    B = np.full((16, 8), -tiny, np.float32).astype(vt)
    C = np.zeros((16, 8), get_format(op.c_type_ptx).value_dtype)
    assert (fastmma.matmul(A, B, C, instruction=_equivalent_wgmma(op)) == 0).all()
    d = op(A, B, C)
    assert (d == 0).all() and not np.signbit(d).any()


@pytest.mark.parametrize("st", ["m64n16k16.f32.f16.f16", "m64n8k32.f16.e4m3.e5m2", "m64n8k8.f32.tf32.tf32"])
def test_dpa_is_call_per_vector(st):
    op = WGMMA("Hopper", st)
    rng = np.random.default_rng(3)
    a, b, c = inputs(op, 5, 7, 2 * op.k + 3, rng, "mixed")
    A, B, C = values_of(a, op.a_type_ptx), values_of(b, op.b_type_ptx), values_of(c, op.c_type_ptx)
    want = as_bits(op(A, B, C))
    assert_same_bits(op.dpa(A[:, None, :], B.T[None, :, :], C), want, "broadcast dpa")
    full = op.dpa(np.broadcast_to(A[:, None, :], (5, 7, A.shape[1])), np.broadcast_to(B.T, (5, 7, A.shape[1])), C)
    assert_same_bits(full, want, "dpa")
    assert_same_bits(op.dpa(A[2], B[:, 4], C[2, 4]), want[2, 4], "0-d dpa")


def test_f64_dpa_is_call_per_vector():
    op = MMA("Hopper", "m16n8k16.f64.f64.f64.f64")
    rng = np.random.default_rng(4)
    a, b, c = (x.view(np.float64) for x in inputs(op, 6, 5, 21, rng, "mixed"))
    assert_same_bits(op.dpa(a[:, None, :], b.T[None, :, :], c), op(a, b, c), "f64 dpa")


def test_empty_m_or_n():
    op = WGMMA("Hopper", "m64n8k16.f32.f16.f16")
    d = op(np.zeros((0, 16), np.float16), np.zeros((16, 3), np.float16), np.zeros((0, 3), np.float32))
    assert d.shape == (0, 3) and d.dtype == np.float32


# ---------------------------------------------------------------- part 1: validation


@pytest.mark.parametrize("cls", [WGMMA, MMA])
@pytest.mark.parametrize("arch", ["Ampere", "Blackwell", "hopper", "sm_90a", None])
def test_unsupported_arch(cls, arch):
    st = HOPPER_WGMMA_SHAPE_AND_TYPE[0] if cls is WGMMA else HOPPER_MMA_SHAPE_AND_TYPE[0]
    with pytest.raises(UnsupportedOperationError, match="supported: 'Hopper'") as info:
        cls(arch, st)
    assert isinstance(info.value, FastmmaError) and isinstance(info.value, AssertionError)


@pytest.mark.parametrize("cls,st", [
    (WGMMA, "m64n8k16.f32.f16.f16.f32"), (WGMMA, "m64n264k16.f32.f16.f16"), (WGMMA, "m64n8k32.s32.s8.s8"),
    (WGMMA, "m64n8k16.f16.bf16.bf16"), (MMA, "m16n8k32.f32.e4m3.e4m3.f32"), (MMA, "m8n8k4.f32.f16.f16.f32"),
    (MMA, "m64n8k16.f32.f16.f16"), (MMA, 42),
])
def test_unsupported_shape_and_type(cls, st):
    with pytest.raises(UnsupportedOperationError, match="supported: ") as info:
        cls("Hopper", st)
    listed = "m64n{N}k16.{f32,f16}.f16.f16" if cls is WGMMA else "m16n8k{16,8}.{f32.f16.f16.f32,"
    assert listed in str(info.value)


def _expand(pattern: str) -> set[str]:
    """Every string a pattern with {a,b} alternatives names."""
    head, brace, rest = pattern.partition("{")
    if not brace:
        return {pattern}
    choices, _, tail = rest.partition("}")
    return {head + c + t for c in choices.split(",") for t in _expand(tail)}


def test_mma_summary_names_exactly_the_table():
    with pytest.raises(UnsupportedOperationError) as info:
        MMA("Hopper", "m16n8k32.f32.e4m3.e4m3.f32")
    summary = str(info.value).split("supported: ")[1]
    named = set().union(*(_expand(p) for p in summary.split(", m")))
    assert {n if n.startswith("m") else "m" + n for n in named} == set(HOPPER_MMA_SHAPE_AND_TYPE)


def test_operand_errors():
    op = WGMMA("Hopper", "m64n8k16.f32.f16.f16")
    A, B, C = np.zeros((64, 16), np.float16), np.zeros((16, 8), np.float16), np.zeros((64, 8), np.float32)
    bad = [
        (A.astype(np.float32), B, C, "A must hold f16"), (A, B.astype(ml_dtypes.bfloat16), C, "B must hold f16"),
        (A, B, C.astype(np.float16), "C must hold f32"), (A[0], B, C, "2-D"), (A, B[:15], C, "K must agree"),
        (A, B, C[:, :4], "C must have shape"), (A[:, :0], B[:0], C, "at least 1"),
        (A.astype(np.int16), B, C, "A must hold f16"),
    ]
    for a, b, c, msg in bad:
        with pytest.raises(OperandError, match=msg):
            op(a, b, c)
    with pytest.raises(OperandError, match="one length K"):
        op.dpa(A[0], B[:8, 0], C[0, 0])
    with pytest.raises(OperandError, match="broadcast"):
        op.dpa(A[:3], A[:3], C[:2, 0])
    with pytest.raises(OperandError, match="must hold f64"):
        MMA("Hopper", "m8n8k4.f64.f64.f64.f64")(np.zeros((8, 4), np.float32), np.zeros((4, 8)), np.zeros((8, 8)))


def test_attributes_and_numpy_out():
    op = MMA("Hopper", "m16n8k8.f32.tf32.tf32.f32")
    assert (op.arch, op.m, op.n, op.k, op.a_type_ptx, op.c_type_ptx, op.kind) == ("Hopper", 16, 8, 8, "tf32", "f32",
                                                                                 None)
    assert repr(op) == "MMA('Hopper', 'm16n8k8.f32.tf32.tf32.f32')"
    d = op(np.ones((16, 8), np.float32), np.ones((8, 8), np.float32), np.zeros((16, 8), np.float32))
    assert isinstance(d, np.ndarray) and d.dtype == np.float32 and (d == 8).all()


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch", reason="torch not installed")
    op = WGMMA("Hopper", "m64n16k32.f16.e4m3.e5m2")
    assert op.a_type == torch.float8_e4m3fn and op.d_type == torch.float16
    rng = np.random.default_rng(5)
    a, b, c = inputs(op, 64, 16, 32, rng, "special")
    t = lambda x, dt: torch.from_numpy(x).view(dt)
    d = op(t(a, torch.float8_e4m3fn), t(b, torch.float8_e5m2), t(c.view(np.int16), torch.float16))
    assert isinstance(d, torch.Tensor) and d.dtype == torch.float16 and d.device.type == "cpu"
    assert_same_bits(d.view(torch.int16).numpy(), _call(op, a, b, c), "torch vs numpy")


# ---------------------------------------------------------------- part 2: against MMA-Sim


@pytest.fixture(scope="module")
def mmasim():
    pytest.importorskip("mmasim", reason="MMA-Sim not installed (pip install '.[compat]')")
    return pytest.importorskip("mmasim.nv_ptx", reason="MMA-Sim's nv_ptx did not import (its C++ extension)")


_TORCH_NAMES = {"f64": "float64", "f32": "float32", "tf32": "float32", "f16": "float16", "bf16": "bfloat16",
                "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
_SIGNED = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def _tensor(bits, ptx):
    import torch

    return torch.from_numpy(np.ascontiguousarray(bits).view(_SIGNED[bits.itemsize])).view(
        getattr(torch, _TORCH_NAMES[ptx]))


def _tensor_bits(t):
    import torch

    assert isinstance(t, torch.Tensor)
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]).numpy()


def _compare(ref, ours, a, b, c, what, form="call"):
    ts = [_tensor(x, t) for x, t in ((a, ours.a_type_ptx), (b, ours.b_type_ptx), (c, ours.c_type_ptx))]
    if form == "dpa":
        ts = [ts[0][:, None, :].expand(-1, c.shape[1], -1), ts[1].T[None, :, :].expand(c.shape[0], -1, -1), ts[2]]
    want = getattr(ref, "__call__" if form == "call" else "dpa")(*ts)
    got = getattr(ours, "__call__" if form == "call" else "dpa")(*ts)
    assert got.dtype == want.dtype and got.device == want.device and got.shape == want.shape
    assert_same_bits(_tensor_bits(got), _tensor_bits(want), what)
    return want.numel()


def test_mmasim_tables_match(mmasim):
    from mmasim.nv_ptx import isa_mma, isa_wgmma

    assert set(HOPPER_WGMMA_SHAPE_AND_TYPE) == set(isa_wgmma.wgmma_shape_and_type["Hopper"])
    assert set(HOPPER_MMA_SHAPE_AND_TYPE) == set(isa_mma.mma_shape_and_type["Hopper"])
    others = {st for arch, sts in isa_mma.mma_shape_and_type.items() if arch != "Hopper" for st in sts}
    for st in sorted(others - set(HOPPER_MMA_SHAPE_AND_TYPE)):
        with pytest.raises(AssertionError):
            mmasim.MMA("Hopper", st)
        with pytest.raises(UnsupportedOperationError):
            MMA("Hopper", st)


def test_mmasim_every_wgmma_shape_and_type(mmasim):
    """All 384 Hopper wgmma forms, one call each on inputs that cycle through every mode
    (16 of the 64 rows: each element is computed alone, and MMA-Sim's time grows with M;
    the full m64n256 shapes run in test_mmasim_wgmma_modes)."""
    rng = np.random.default_rng(11)
    for st in HOPPER_WGMMA_SHAPE_AND_TYPE:
        ours, ref = WGMMA("Hopper", st), mmasim.WGMMA("Hopper", st)
        _compare(ref, ours, *inputs(ours, 16, ours.n, ours.k, rng, "mixed"), st)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("st", WGMMA_TYPES)
def test_mmasim_wgmma_modes(mmasim, st, mode):
    ours, ref = WGMMA("Hopper", st), mmasim.WGMMA("Hopper", st)
    rng = np.random.default_rng(seed(st, mode, 1))
    _compare(ref, ours, *inputs(ours, 64, ours.n, ours.k, rng, mode), f"{st} {mode}")
    _compare(ref, ours, *inputs(ours, 33, 21, 3 * ours.k + 7, rng, mode), f"{st} {mode} long K")
    _compare(ref, ours, *inputs(ours, 6, 5, ours.k // 2 + 1, rng, mode), f"{st} {mode} short K")
    _compare(ref, ours, *inputs(ours, 6, 5, 2 * ours.k + 1, rng, mode), f"{st} {mode} dpa", form="dpa")


@pytest.mark.parametrize("mode", MODES + ("mixed",))
@pytest.mark.parametrize("st", HOPPER_MMA_SHAPE_AND_TYPE)
def test_mmasim_every_mma_shape_and_type(mmasim, st, mode):
    ours, ref = MMA("Hopper", st), mmasim.MMA("Hopper", st)
    rng = np.random.default_rng(seed(st, mode, 2))
    _compare(ref, ours, *inputs(ours, ours.m, ours.n, ours.k, rng, mode), f"{st} {mode}")
    _compare(ref, ours, *inputs(ours, 24, 16, 40, rng, mode), f"{st} {mode} long K")
    _compare(ref, ours, *inputs(ours, 6, 5, 2 * ours.k + 1, rng, mode), f"{st} {mode} dpa", form="dpa")


def test_mmasim_0d_dpa(mmasim):
    import torch

    ours, ref = MMA("Hopper", "m16n8k8.f32.tf32.tf32.f32"), mmasim.MMA("Hopper", "m16n8k8.f32.tf32.tf32.f32")
    a, b, c = torch.randn(13), torch.randn(13), torch.tensor(0.5)
    want, got = ref.dpa(a, b, c), ours.dpa(a, b, c)
    assert got.shape == want.shape == () and got.dtype == want.dtype
    assert_same_bits(_tensor_bits(got), _tensor_bits(want), "0-d dpa")


def test_mmasim_unsupported_arch_raises_assertion_in_both(mmasim):
    for cls, ref in ((WGMMA, mmasim.WGMMA), (MMA, mmasim.MMA)):
        with pytest.raises(AssertionError):
            ref("Hopperr", HOPPER_MMA_SHAPE_AND_TYPE[0])
        with pytest.raises(AssertionError):
            cls("Hopperr", HOPPER_MMA_SHAPE_AND_TYPE[0])


def test_mmasim_beside_the_mma_sync_recordings(mmasim):
    """The module docstring's account of MMA-Sim against the sm_90 ``mma.sync`` recordings
    (tests/golden/probes/q10_mma_sync): it gives the hardware's bits for every f16, bf16 and
    tf32 execution, and differs only in NaN payloads on f64 (14 of 96)."""
    import json
    from pathlib import Path

    from fastmma.layout.mma_fragments import fragment_layout
    from fastmma.layout.wmma_fragments import unpack_fragment

    agree = differ = 0
    for path in sorted((Path(__file__).parent / "golden" / "probes" / "q10_mma_sync").glob("*.npz")):
        with np.load(path) as f:
            arrays = {k: f[k] for k in f.files}
        q = json.loads(bytes(arrays["meta"]).decode())["qualifiers"]
        st = f"{q['shape']}.{q['dtype']}.{q['atype']}.{q['btype']}.{q['ctype']}"
        if st not in HOPPER_MMA_SHAPE_AND_TYPE:
            continue
        ref = mmasim.MMA("Hopper", st)
        for i in range(len(arrays["mode"])):
            mats = [unpack_fragment(arrays[f"{x}_regs"][i], fragment_layout(x, q["shape"], q[f"{x}type"]))
                    for x in "abc"]
            got = _tensor_bits(ref(*(_tensor(m, q[f"{x}type"]) for m, x in zip(mats, "abc"))))
            want = unpack_fragment(arrays["d_regs"][i], fragment_layout("d", q["shape"], q["dtype"]))
            same = np.array_equal(got.view(want.dtype), want)
            if q["atype"] != "f64":
                assert same, f"{path.name} case {i}"
            else:
                nan = np.isnan(want.view(np.float64))
                assert np.array_equal(got.view(want.dtype)[~nan], want[~nan]), f"{path.name} case {i}"
            agree += same
            differ += not same
    assert (agree, differ) == (288 - 14, 14)
