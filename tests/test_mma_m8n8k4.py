"""``mma.sync.m8n8k4`` with ``.f16`` inputs: four quad-pair products a warp.  The ISA's fragment
maps written out here lane by lane, the sm_90 recordings (tests/golden/probes/q14_mma_m8n8k4),
the rules as literal checks on hand-made operands, stacks, ``fastmma.mma`` / ``matmul`` and
the PTX interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fastmma
from fastmma import mma_sync
from fastmma.conform import check_file
from fastmma.isa import FfmaExpansionRule
from fastmma.kernels import execute
from fastmma.layout.mma_fragments import quad_pair_layout
from fastmma.layout.wmma_fragments import pack_fragment, unpack_fragment

Q14 = Path(__file__).parent / "golden" / "probes" / "q14_mma_m8n8k4"
FILES = sorted(Q14.glob("*.npz"))


def _isa_element(matrix, elem_type, layout, lane, i):
    """PTX ISA 9.7.14.5.1 for one slot: (quad pair, row, col) of element i of ``lane``."""
    pair = (lane % 16) // 4  # lanes 4p..4p+3 and 4p+16..4p+19 compute product p
    low = lane < 16
    if matrix == "a" and layout == "row":
        return pair, lane % 4 if low else lane % 4 + 4, i
    if matrix == "a":
        return pair, i % 4 if low else i % 4 + 4, lane % 4
    if matrix == "b" and layout == "row":
        return pair, lane % 4, i if low else i + 4
    if matrix == "b":
        return pair, i, lane % 4 if low else lane % 4 + 4
    if elem_type == "f16":
        return pair, lane % 4 if low else lane % 4 + 4, i
    x = (lane & 0b1) + (i & 0b10)
    return pair, x if low else x + 4, (i & 0b100) + (lane & 0b10) + (i & 0b1)


@pytest.mark.parametrize("matrix, elem_type, layout", [
    ("a", "f16", "row"), ("a", "f16", "col"), ("b", "f16", "row"), ("b", "f16", "col"),
    ("c", "f16", None), ("c", "f32", None), ("d", "f16", None), ("d", "f32", None),
])
def test_quad_pair_layout_is_the_isas_map(matrix, elem_type, layout):
    lay = quad_pair_layout(matrix, elem_type, layout)
    slots = 4 if matrix in "ab" else 8
    assert lay.index.shape == (32, slots) and lay.words == slots * lay.elem_bits // 32
    for lane in range(32):
        for i in range(slots):
            p, r, c = _isa_element(matrix, elem_type, layout, lane, i)
            row, col = (r, 8 * p + c) if matrix == "b" else (8 * p + r, c)
            assert lay.index[lane, i] == row * lay.cols + col, (lane, i)


def _load(path):
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads(bytes(arrays.pop("meta")).decode())


def test_the_recordings_cover_every_form():
    names = {p.stem for p in FILES}
    assert len(names) == 12
    for al in ("row", "col"):
        for bl in ("row", "col"):
            for dc in ("f16.f16.f16.f16", "f32.f16.f16.f16", "f32.f16.f16.f32"):
                assert f"mma.m8n8k4.{al}.{bl}.{dc}" in names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_recording_as_one_stack_and_warp_by_warp(path):
    arrays, meta = _load(path)
    text = meta["ptx"][0]
    d = mma_sync.mma_stack(text, arrays["a_regs"], arrays["b_regs"], arrays["c_regs"])
    np.testing.assert_array_equal(d, arrays["d_regs"])
    for i in (0, 5, 11):
        np.testing.assert_array_equal(mma_sync.mma(text, arrays["a_regs"][i], arrays["b_regs"][i],
                                                   arrays["c_regs"][i]), arrays["d_regs"][i])


@pytest.mark.parametrize("path", FILES[:3], ids=lambda p: p.stem)
def test_conform_replays_the_recordings(path):
    result = check_file(path)
    assert result.ok and result.passed == 12


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_quad_pair_is_fastmma_mma_on_its_matrices(path):
    """The registers read back as four logical products: fastmma.mma of each (8 x 4 by 4 x 8)
    is that quad pair's part of the recorded D."""
    arrays, meta = _load(path)
    q = meta["qualifiers"]
    lays = {x: quad_pair_layout(x, t, {"a": q["alayout"], "b": q["blayout"]}.get(x))
            for x, t in (("a", "f16"), ("b", "f16"), ("c", q["ctype"]), ("d", q["dtype"]))}
    i = 7
    A, B, C, D = (unpack_fragment(arrays[f"{x}_regs"][i], lays[x]) for x in "abcd")
    dt = {"f16": np.float16, "f32": np.float32}
    for p in range(4):
        got = fastmma.mma(meta["ptx"][0], A[8 * p:8 * p + 8].view(np.float16), B[:, 8 * p:8 * p + 8].view(np.float16),
                          C[8 * p:8 * p + 8].view(dt[q["ctype"]]))
        np.testing.assert_array_equal(got.view(D.dtype), D[8 * p:8 * p + 8])


# ---------------------------------------------------------------- the rules, literally

def _f16(values):
    return np.array(values, np.float16).view(np.uint16)


def _one(rule, a, b, c, ctype="f32", dtype="f32"):
    """One element: D = C + a . b (4 terms) under ``rule``, as bits."""
    c_bits = np.array([[c]], np.float32).view(np.uint32) if ctype == "f32" else _f16([[c]])
    return int(execute(rule, _f16([a]), _f16([[x] for x in b]), c_bits, "f16", "f16", ctype, dtype)[0, 0])


def test_chain_rounds_after_every_term():
    """1 + 2^-24 three times: each fma rounds back to 1 (ties to even), where one exact sum
    (1 + 3 * 2^-24) would round to 1 + 2^-22."""
    a, b = [1.0, 2.0 ** -12, 2.0 ** -12, 2.0 ** -12], [1.0, 2.0 ** -12, 2.0 ** -12, 2.0 ** -12]
    assert _one(FfmaExpansionRule("chain"), a, b, 0.0) == 0x3F800000
    assert _one(FfmaExpansionRule("pairs"), a, b, 0.0) == 0x3F800001  # 1, then 2^-23: the other order


def test_chain_starts_from_plus_zero_and_adds_c_last():
    """All products -0: the chain from +0 gives +0, then C = -0 plus +0 is +0 (a chain that
    started from C would keep -0)."""
    assert _one(FfmaExpansionRule("chain"), [-1.0, -1.0, 1.0, 0.0], [0.0, 0.0, -0.0, 1.0], -0.0) == 0x00000000


def test_f16_d_rounds_twice():
    """C = 1 plus p01 = 2^-11 is 1 + 2^-11 in f32; p23 = 2^-40 is lost there; the f16 result is
    then a tie, to even 1.0 (0x3C00), where the exact sum would round up to 0x3C01."""
    got = _one(FfmaExpansionRule("pairs"), [2.0 ** -6, 2.0 ** -6, 2.0 ** -20, 0.0],
               [2.0 ** -6, 2.0 ** -6, 2.0 ** -20, 0.0], 1.0, "f16", "f16")
    assert got == 0x3C00


def test_subnormals_kept_nan_canonical_overflow_to_inf():
    chain = FfmaExpansionRule("chain")
    assert _one(chain, [0.0] * 4, [1.0] * 4, 2.0 ** -140) == 0x00000200  # C, an f32 subnormal, kept
    nan = np.array([0x7E01, 0, 0, 0], np.uint16)  # an f16 NaN with a payload
    d = execute(chain, nan[None], _f16([[1.0]] * 4), np.zeros((1, 1), np.uint32), "f16", "f16", "f32", "f32")
    assert int(d[0, 0]) == 0x7FFFFFFF
    assert _one(chain, [np.inf, 0, 0, 0], [0.0, 0, 0, 0], 0.0) == 0x7FFFFFFF  # inf * 0
    pairs = FfmaExpansionRule("pairs")
    assert _one(pairs, [60000.0, 60000.0, 0, 0], [1.0, 1.0, 0, 0], 0.0, "f16", "f16") == 0x7C00
    assert _one(pairs, [np.inf, 0, 0, 0], [0.0, 0, 0, 0], 0.0, "f16", "f16") == 0x7FFF


def test_a_callers_flush_to_zero_is_ignored():
    from numba import njit

    from fastmma.kernels.fp_env import HAS_MXCSR, MXCSR_NEAREST, write_mxcsr

    if not HAS_MXCSR:
        pytest.skip("x86 only")

    @njit
    def set_mxcsr(x):
        write_mxcsr(np.int32(x))

    b = _f16([[1.0], [2.0 ** -10], [1.0], [1.0]])
    c = np.array([[0x00000200]], np.uint32)  # 2^-140, an f32 subnormal, as bits: no conversion under FTZ
    set_mxcsr(MXCSR_NEAREST | 0x8040)  # flush-to-zero and denormals-are-zero
    try:
        got = execute(FfmaExpansionRule("chain"), _f16([[0.0] * 4]), b, c, "f16", "f16", "f32", "f32")
    finally:
        set_mxcsr(MXCSR_NEAREST)
    assert int(got[0, 0]) == 0x00000200  # C kept, not flushed


# ---------------------------------------------------------------- calls

def _fragments(rng, text, count=()):
    inst = fastmma.parse(text)
    words = {x: inst.fragment_words(x) for x in "abc"}
    vals = {x: rng.standard_normal(count + (32, 2 * words[x])).astype(np.float16).view(np.uint32)
            for x in "ab"}
    c = rng.standard_normal(count + (32, words["c"] * (2 if inst.ctype == "f16" else 1)))
    vals["c"] = c.astype(np.float16 if inst.ctype == "f16" else np.float32).view(np.uint32)
    return vals


def test_stack_broadcasts_and_matches_one_warp_at_a_time():
    text = "mma.sync.aligned.m8n8k4.col.row.f32.f16.f16.f16"
    rng = np.random.default_rng(3)
    f = _fragments(rng, text, (3,))
    d = mma_sync.mma_stack(text, f["a"], f["b"][0], f["c"])
    assert d.shape == (3, 32, 8)
    for s in range(3):
        np.testing.assert_array_equal(d[s], mma_sync.mma(text, f["a"][s], f["b"][0], f["c"][s]))


@pytest.mark.parametrize("text", ["mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32",
                                  "mma.sync.aligned.m8n8k4.col.col.f16.f16.f16.f16"])
def test_matmul_is_the_chain_of_single_instructions(text):
    rng = np.random.default_rng(5)
    A = rng.standard_normal((17, 10)).astype(np.float16)  # ragged: K padded with zeros to 12
    B = rng.standard_normal((10, 13)).astype(np.float16)
    ct = np.float32 if text.endswith("f32") else np.float16
    C = rng.standard_normal((17, 13)).astype(ct)
    got = fastmma.matmul(A, B, C, instruction=text)
    Ap, Bp = np.zeros((24, 12), np.float16), np.zeros((12, 16), np.float16)
    Ap[:17, :10], Bp[:10, :13] = A, B
    want = np.zeros((24, 16), ct)
    want[:17, :13] = C
    for k0 in range(0, 12, 4):
        for i0 in range(0, 24, 8):
            for j0 in range(0, 16, 8):
                want[i0:i0 + 8, j0:j0 + 8] = fastmma.mma(text, Ap[i0:i0 + 8, k0:k0 + 4], Bp[k0:k0 + 4, j0:j0 + 8],
                                                         want[i0:i0 + 8, j0:j0 + 8])
    np.testing.assert_array_equal(got.view(np.uint8), want[:17, :13].view(np.uint8))


def test_fragments_round_trip_through_the_logical_matrices():
    """Placing random logical products by quad_pair_layout and running mma_sync gives what
    fastmma.mma gives each product."""
    text = "mma.sync.aligned.m8n8k4.row.row.f32.f16.f16.f32"
    rng = np.random.default_rng(9)
    A = rng.standard_normal((32, 4)).astype(np.float16)
    B = rng.standard_normal((4, 32)).astype(np.float16)
    C = rng.standard_normal((32, 8)).astype(np.float32)
    regs = {x: pack_fragment(m.view(u), quad_pair_layout(x, t, lay)) for x, m, u, t, lay in
            (("a", A, np.uint16, "f16", "row"), ("b", B, np.uint16, "f16", "row"), ("c", C, np.uint32, "f32", None))}
    d = unpack_fragment(mma_sync.mma(text, regs["a"], regs["b"], regs["c"]), quad_pair_layout("d", "f32"))
    for p in range(4):
        want = fastmma.mma(text, A[8 * p:8 * p + 8], B[:, 8 * p:8 * p + 8], C[8 * p:8 * p + 8])
        np.testing.assert_array_equal(d[8 * p:8 * p + 8], want.view(np.uint32))


def test_ptx_interpreter_runs_it():
    from fastmma import ptx

    text = "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32"
    m = ptx.run(f"""
        .reg .b32 a<2>, b<2>, d<8>, lane;
        mov.u32 lane, %laneid;
        mul.lo.u32 a0, lane, 0x00010001;
        or.b32 a0, a0, 0x3C003C00;
        mov.b32 a1, 0x3C003800;
        mov.b32 b0, 0x40003C00;
        mov.b32 b1, 0x3C00BC00;
        mov.b32 d0, 0; mov.b32 d1, 0; mov.b32 d2, 0; mov.b32 d3, 0;
        mov.b32 d4, 0; mov.b32 d5, 0; mov.b32 d6, 0; mov.b32 d7, 0;
        {text} {{d0, d1, d2, d3, d4, d5, d6, d7}}, {{a0, a1}}, {{b0, b1}}, {{d0, d1, d2, d3, d4, d5, d6, d7}};
    """)
    a = np.stack([np.asarray(m["a0"]), np.asarray(m["a1"])], axis=1).astype(np.uint32)
    b = np.stack([np.asarray(m["b0"]), np.asarray(m["b1"])], axis=1).astype(np.uint32)
    want = mma_sync.mma(text, a, b, np.zeros((32, 8), np.uint32))
    got = np.stack([np.asarray(m[f"d{i}"]) for i in range(8)], axis=1).astype(np.uint32)
    np.testing.assert_array_equal(got, want)
    assert (want != 0).any()


def _rn32_exact(q):
    """The nearest-even binary32 (as a Python float) of the rational ``q``: by integers."""
    from fractions import Fraction

    if q == 0:
        return 0.0
    sign, q = (-1.0 if q < 0 else 1.0), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    e = e if Fraction(2) ** e <= q else e - 1  # 2^e <= q < 2^(e + 1)
    ulp = Fraction(2) ** (max(e, -126) - 23)
    n, rem = divmod(q, ulp)
    if rem * 2 > ulp or (rem * 2 == ulp and n % 2):
        n += 1
    return sign * float(n * ulp)


def test_one_f32_addition_through_float64_is_correctly_rounded():
    """The kernel's one step: two f32 values added in float64, then rounded to f32, against the
    exact sum rounded by integers: random pairs, and pairs whose sum sits at or next to a tie."""
    from fractions import Fraction

    from numba import njit

    from fastmma.kernels.ffma_expansion import add_rn32

    @njit
    def adds(x, y, out):
        for i in range(x.size):
            out[i] = add_rn32(np.float64(x[i]), np.float64(y[i]))

    rng = np.random.default_rng(11)
    n = 3000
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-140, 100, n)).astype(np.float32)
    y = (rng.standard_normal(n) * 2.0 ** rng.integers(-140, 100, n)).astype(np.float32)
    near = x.astype(np.float64) * 2.0 ** -24 * rng.choice([1.0, -1.0, 1.0 + 2.0 ** -20, 1.0 - 2.0 ** -20], n)
    y[: n // 2] = near[: n // 2].astype(np.float32)  # half an ulp of x, or just beside it
    out = np.empty(n)
    adds(x, y, out)
    for i in range(n):
        want = _rn32_exact(Fraction(float(x[i])) + Fraction(float(y[i])))
        assert np.float32(out[i]).tobytes() == np.float32(want).tobytes(), (x[i], y[i])


def test_fragment_layout_points_to_the_quad_pair_maps():
    from fastmma.errors import OperandError
    from fastmma.layout.mma_fragments import fragment_layout

    for matrix, t in (("a", "f16"), ("c", "f32"), ("d", "f16")):
        with pytest.raises(OperandError, match="quad_pair_layout"):
            fragment_layout(matrix, "m8n8k4", t)
    assert fragment_layout("a", "m8n8k4", "f64").words == 2  # the f64 form is one product
    with pytest.raises(OperandError, match=r"\.row or \.col"):
        quad_pair_layout("a", "f16")
    with pytest.raises(OperandError, match=r"\.f16 or \.f32"):
        quad_pair_layout("c", "bf16")
