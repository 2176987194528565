"""The fast GEMM kernel for the float rule, bit for bit against the reference kernel.


The reference (kernels.fused_dot) is the one the recordings verify; the fast kernel computes
the same rule another way (float32 or float64 lanes, int32/int64 sums, blocked).
"""

import math
import os

import ml_dtypes
import numpy as np
import pytest
from conftest import seed
from numba import njit, prange
from hypothesis import given, settings, strategies as st

from fastmma.formats import get_format
from fastmma.isa import parse
from fastmma.kernels import c_as_accumulator, format_params, reference
from fastmma.kernels.fp_env import HAS_MXCSR, MXCSR_NEAREST, MXCSR_TOWARD_ZERO, read_mxcsr, write_mxcsr
from fastmma.kernels.fused_gemm import (_GENERAL, _VIA_F32, INT16_LANES, NEG_EXP, ZERO_EXP8, _block_sizes,
                                      _c_exponent, _decode_b_run, _finish_row_rne16, _finish_row_rz32,
                                      _finish_row_rz_fenv, _finish_row_rz_normal, _normal_bound, _scale_normal,
                                      b_decoder, exponent_lanes, fused_gemm, prescale)
from fastmma.kernels.vector_ops import F16_CONVERSIONS

INSTRUCTIONS = [
    "wgmma.mma_async.m64n8k16.f32.f16.f16", "wgmma.mma_async.m64n8k16.f16.f16.f16",
    "wgmma.mma_async.m64n8k16.f32.bf16.bf16", "wgmma.mma_async.m64n8k8.f32.tf32.tf32",
    "wgmma.mma_async.m64n8k32.f32.e4m3.e5m2", "wgmma.mma_async.m64n8k32.f16.e5m2.e5m2",
    "wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32",
    "wmma.mma.sync.aligned.row.col.m16n16k16.f16.f32", "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f16",
]


def random_bits(rng, fmt, shape, mode):
    f = get_format(fmt)
    if mode == "raw":  # any pattern: NaNs, infinities, subnormals included
        return rng.integers(0, 1 << f.bits, shape, dtype=np.uint64).astype(f.storage)
    spread = {"narrow": (-3, 4), "wide": (-20, 20), "tiny": (-40, -10)}[mode]
    v = rng.standard_normal(shape) * 2.0 ** rng.integers(*spread, shape)
    with np.errstate(over="ignore"):
        v = v.astype(np.float32 if fmt == "tf32" else f.value_dtype)
    return v.view(f.storage)


def run(text, a, b, c, use_c=True, wide=None, blocks=None, exp_lanes=None, fma=None, narrow=None):
    inst = parse(text)
    neg = dict(neg_a=getattr(inst, "imm_scale_a", 1) == -1, neg_b=getattr(inst, "imm_scale_b", 1) == -1)
    kw = dict(c_emin=get_format(inst.ctype).min_exponent, d_emin=get_format(inst.dtype).min_exponent,
              use_c=use_c, wide=wide, exp_lanes=exp_lanes, fma=fma, narrow=narrow, **neg)
    if blocks:
        kw["blocks"] = blocks
    c_acc, ctype = c_as_accumulator(inst.rule, c, inst.ctype)  # as kernels.execute hands it over
    kw["c_emin"] = get_format(ctype).min_exponent
    got = fused_gemm(inst.rule, a, b, c_acc, *(format_params(t) for t in (inst.atype, inst.btype, ctype, inst.dtype)),
                     **kw)
    ref = reference(inst.rule, a, b, c, inst.atype, inst.btype, inst.ctype, inst.dtype, use_c=use_c, **neg)
    return got, ref


@pytest.mark.parametrize("text", INSTRUCTIONS)
@pytest.mark.parametrize("mode", ["narrow", "wide", "tiny", "raw"])
@pytest.mark.parametrize("wide", [False, True])
def test_both_lane_widths_equal_the_reference(text, mode, wide):
    inst = parse(text)
    rng = np.random.default_rng(seed(text, mode))
    k = 4 * inst.rule.group
    a = random_bits(rng, inst.atype, (37, k), mode)
    b = random_bits(rng, inst.btype, (k, 45), mode)
    c = random_bits(rng, inst.ctype, (37, 45), mode)
    try:
        got, ref = run(text, a, b, c, wide=wide)
    except ValueError:
        assert not wide and inst.atype in ("bf16", "tf32") and mode == "raw"  # no float32 path exists
        return
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("k", [96, 80])
@pytest.mark.parametrize("blocks", [(16, 8, 1), (32, 24, 5), (48, 24, 7), (512, 128, 32)])
def test_blocking_does_not_change_bits(blocks, k):
    # k = 80 with K-blocks of at most 48 terms: blocks of 48 and 32, the last one shorter
    rng = np.random.default_rng(1)
    a = random_bits(rng, "f16", (70, k), "wide")
    b = random_bits(rng, "f16", (k, 50), "wide")
    c = random_bits(rng, "f32", (70, 50), "wide")
    for wide in (False, True):
        got, ref = run(INSTRUCTIONS[0], a, b, c, blocks=blocks, wide=wide)
        assert np.array_equal(got, ref)


@pytest.mark.parametrize("text", [INSTRUCTIONS[0], INSTRUCTIONS[2], "wgmma.mma_async.m64n8k32.f32.e4m3.e4m3"])
@pytest.mark.parametrize("wide", [False, True])
def test_a_decoded_inside_the_kernel(monkeypatch, text, wide):
    """The 2-D kernels decode A themselves, each task the block of rows it computes, in the
    first block of columns: with several K-, N- and M-blocks (the last block of rows
    partial, padded to whole 4-row blocks by the fp8 pass by fused multiply-adds) and an
    inf or NaN in a row of the last K-block, the bits are the reference's, the row is
    flagged, and no decoding runs before the kernel."""
    from fastmma.kernels import fused_gemm as fg

    inst = parse(text)
    if wide and inst.atype == "e4m3":
        pytest.skip("fp8 has no float64 path of its own to force")
    monkeypatch.setattr(fg.drive, "decode_packed", lambda *a, **k: pytest.fail("A decoded before the kernel"))
    rng = np.random.default_rng(11)
    G = inst.rule.group
    m, k, n = 45, 3 * G, 200
    a = random_bits(rng, inst.atype, (m, k), "narrow")
    b = random_bits(rng, inst.btype, (k, n), "narrow")
    c = random_bits(rng, inst.ctype, (m, n), "narrow")
    special = {"f16": 0x7E00, "bf16": 0x7FC0, "e4m3": 0x7F}[inst.atype]
    a[43, 2 * G + 1] = special  # K-block 3 of 3, the last block of rows (rows 40-44 of 8-row blocks)
    assert fg.decodes_by_blocks(format_params(inst.atype), a.itemsize * 8, 0)
    got, ref = run(text, a, b, c, wide=wide or None, blocks=(G, 64, 8))
    assert np.array_equal(got, ref)
    nan_rows = np.isnan(got.view(np.float32 if got.dtype == np.uint32 else np.float16)).any(axis=1)
    assert nan_rows[43] and nan_rows.sum() == 1


def test_block_sizes_split_k_evenly_in_whole_groups():
    # K = 2080 in blocks of at most 2048: two blocks, 1056 + 1024 terms (33 and 32 groups of 32)
    assert _block_sizes((2048, 256, 64), 100, 2080, 32) == (1056, 256, 64)
    assert _block_sizes((2048, 256, 64), 100, 2048, 32) == (2048, 256, 64)
    assert _block_sizes((2048, 256, 64), 10, 48, 16) == (48, 256, 12)  # no taller than M, in whole 4-row blocks
    assert _block_sizes((8, 256, 64), 10, 48, 16) == (16, 256, 12)  # at least one group
    assert _block_sizes((2048, 256, 64), 0, 0, 16) == (16, 256, 4)  # an empty GEMM still has blocks
    assert _block_sizes((2048, 256, 7), 100, 64, 16) == (64, 256, 8)  # rows in whole 4-row blocks


def test_block_sizes_give_every_thread_rows():
    # the blocks of rows are the threads' share: M over the threads where that is below blocks[2]
    assert _block_sizes((2048, 256, 64), 64, 16, 16, 2) == (16, 256, 32)  # one m64 instruction, two cores
    assert _block_sizes((2048, 256, 64), 66, 16, 16, 2) == (16, 256, 36)  # 33 rows each, in 4-row blocks
    assert _block_sizes((2048, 256, 64), 16, 16, 16, 8) == (16, 256, 4)  # no block below 4 rows
    assert _block_sizes((2048, 256, 64), 2048, 16, 16, 8) == (16, 256, 64)  # blocks[2] where M is large
    assert _block_sizes((2048, 256, 64), 100, 16, 16, 0) == _block_sizes((2048, 256, 64), 100, 16, 16)


def test_few_rows_are_shared_among_threads(monkeypatch):
    """A GEMM of 64 rows on two threads runs two blocks of rows (the kernels' prange), each
    the reference's bits."""
    from fastmma.kernels import fused_gemm as fg

    seen = []
    real = fg._block_sizes.__wrapped__
    monkeypatch.setattr(fg.drive, "_block_sizes", lambda *args: seen.append(real(*args)) or seen[-1])
    monkeypatch.setattr(fg.drive, "get_num_threads", lambda: 2)
    rng = np.random.default_rng(5)
    a = random_bits(rng, "f16", (64, 32), "wide")
    b = random_bits(rng, "f16", (32, 40), "wide")
    c = random_bits(rng, "f32", (64, 40), "wide")
    got, ref = run(INSTRUCTIONS[0], a, b, c)
    assert seen and seen[-1][2] == 32
    assert np.array_equal(got, ref)


def test_k_must_be_a_multiple_of_the_group():
    rng = np.random.default_rng(3)
    a = random_bits(rng, "f16", (4, 24), "narrow")
    b = random_bits(rng, "f16", (24, 4), "narrow")
    c = random_bits(rng, "f32", (4, 4), "narrow")
    with pytest.raises(ValueError, match="K = 24 is not a multiple"):
        run(INSTRUCTIONS[0], a, b, c)
    got, ref = run(INSTRUCTIONS[0], a[:, :0], b[:0], c)  # K = 0: D = C
    assert np.array_equal(got, ref)


def test_negation_and_absent_c():
    rng = np.random.default_rng(2)
    text = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {a,b,c,d}, x, y, p, -1, -1, 0, 0;"
    a = random_bits(rng, "f16", (20, 32), "narrow")
    b = random_bits(rng, "f16", (32, 9), "narrow")
    c = random_bits(rng, "f32", (20, 9), "narrow")
    for use_c in (True, False):
        got, ref = run(text, a, b, c, use_c=use_c)
        assert np.array_equal(got, ref)


def test_prescale_exists_for_f16_and_fp8_whatever_the_data():
    # the extreme exponents of each format
    assert prescale(-14, 15, -14, 15, 10, 10, 25, -133) is not None
    assert prescale(-14, 15, -14, 15, 10, 10, 25, -21) is not None
    assert prescale(-6, 8, -14, 15, 3, 2, 13, -133) is not None
    assert prescale(-126, 127, -126, 127, 7, 7, 25, -133) is None  # full bf16 range: float64 lanes


def test_whole_format_lanes_by_hand():
    """f16 and fp8 operands: one prescale and int8 lanes fit every value of their formats
    (the sh found by hand from prescale's bounds is the smallest that does); bf16 and tf32:
    none do."""
    from fastmma.kernels.fused_gemm import whole_format_lanes

    f16, e4m3, e5m2, bf16 = (format_params(t) for t in ("f16", "e4m3", "e5m2", "bf16"))
    # f16 x f16 into f32: the scale 2^(25 + 133 - sh) must be finite: sh >= 31
    sh, lanes = whole_format_lanes(f16, f16, 25, -133)
    assert sh == 31 and lanes.dtype == np.int8 and (lanes.off_a, lanes.off_b) == (0, 0)
    # e4m3 (exponents -6..8) x e5m2 (-14..15): centred less 1 and 0
    sh, lanes = whole_format_lanes(e4m3, e5m2, 13, -133)
    assert sh == 19 and lanes.dtype == np.int8 and (lanes.off_a, lanes.off_b) == (1, 0)
    assert whole_format_lanes(bf16, bf16, 25, -133) is None
    assert whole_format_lanes(format_params("tf32"), format_params("tf32"), 25, -133) is None


@pytest.mark.parametrize("text", [INSTRUCTIONS[0], INSTRUCTIONS[1], INSTRUCTIONS[4], INSTRUCTIONS[5]])
def test_f16_and_fp8_take_the_whole_format_path_without_scans(text, monkeypatch):
    """With no scan of the data at all (scan_operands fails if called), any bit patterns of
    f16 and fp8 operands, NaNs and infinities included, equal the reference; the columns of
    B with specials are found after the kernel reports that B has some."""
    import fastmma.kernels.fused_gemm as fg

    def no_scan(*args):
        raise AssertionError("scanned")

    monkeypatch.setattr(fg.plan, "scan_operands", no_scan)
    inst = parse(text)
    rng = np.random.default_rng(11)
    for mode in ("narrow", "raw"):
        a = random_bits(rng, inst.atype, (70, 4 * inst.rule.group), mode)
        b = random_bits(rng, inst.btype, (4 * inst.rule.group, 90), mode)
        c = random_bits(rng, inst.ctype, (70, 90), "narrow")
        got, ref = run(text, a, b, c)
        assert np.array_equal(got, ref), mode


def test_exponent_lanes_by_hand():
    # f16 and fp8: the whole format's range fits int8 lanes, each operand centred
    assert exponent_lanes(-14, 15, -14, 15) == (np.int8, ZERO_EXP8, 0, 0, -28)
    assert exponent_lanes(-6, 8, -14, 15) == (np.int8, ZERO_EXP8, 1, 0, -21)
    # a span of 42 binades fits: a sum with a zero is at most -64 + 21 = -43 < -21 - 21;
    # one more binade and -64 + 22 = -42 would reach the smallest true sum
    assert exponent_lanes(-121, -79, 100, 142) == (np.int8, ZERO_EXP8, -100, 121, -42)
    assert exponent_lanes(-21, 22, -21, 22) == INT16_LANES
    assert exponent_lanes(-21, 22, -21, 22, np.int8) is None
    assert exponent_lanes(-14, 15, -14, 15, np.int16) == INT16_LANES
    # an operand with no non-zero element has no range to place
    assert exponent_lanes(1 << 20, NEG_EXP, -126, -90) == (np.int8, ZERO_EXP8, 0, -108, -18)
    assert exponent_lanes(-126, 127, -126, 127) == INT16_LANES  # bf16's whole range


@pytest.mark.parametrize("text", [INSTRUCTIONS[0], INSTRUCTIONS[2], INSTRUCTIONS[3], INSTRUCTIONS[4]])
@pytest.mark.parametrize("exp_lanes", [np.int8, np.int16])
def test_both_exponent_lanes_equal_the_reference_with_zeros_and_tiny_accumulators(text, exp_lanes):
    """Zero products next to true ones and a C far below them, so that a sum with a zero
    that counted as a true exponent would move e_max and cut C's low bits; rows and columns
    all zeros make every product of some elements zero.  bf16 and tf32 data far from 1
    take the offsets."""
    inst = parse(text)
    rng = np.random.default_rng(7)
    k = 4 * inst.rule.group
    a = random_bits(rng, inst.atype, (33, k), "narrow")
    b = random_bits(rng, inst.btype, (k, 40), "narrow")
    if inst.atype in ("bf16", "tf32"):
        fa, fb = get_format(inst.atype), get_format(inst.btype)
        a = (a.view(fa.value_dtype).astype(np.float32) * 2.0 ** 90).astype(fa.value_dtype).view(fa.storage)
        b = (b.view(fb.value_dtype).astype(np.float32) * 2.0 ** -70).astype(fb.value_dtype).view(fb.storage)
    a[rng.random(a.shape) < 0.3] = 0
    b[rng.random(b.shape) < 0.3] = 0
    a[5] = 0
    b[:, 7] = 0
    c = (rng.standard_normal((33, 40)) * 2.0 ** -120).astype(np.float32)
    if inst.ctype == "f16":
        c = (rng.standard_normal((33, 40)) * 2.0 ** -20).astype(np.float16)
    c = c.view(get_format(inst.ctype).storage)
    got, ref = run(text, a, b, c, wide=False, exp_lanes=exp_lanes)
    assert np.array_equal(got, ref)


def test_int8_exponent_lanes_refuse_data_too_wide_for_them():
    rng = np.random.default_rng(8)
    a = random_bits(rng, "bf16", (4, 16), "narrow")
    b = random_bits(rng, "bf16", (16, 4), "narrow")
    c = random_bits(rng, "f32", (4, 4), "narrow")
    a[0, 0], a[0, 1] = 0x2B80, 0x5380  # 2^-40 and 2^40: float32 lanes, but not int8 exponents
    with pytest.raises(ValueError, match="int8 exponent lanes"):
        run(INSTRUCTIONS[2], a, b, c, wide=False, exp_lanes=np.int8)
    got, ref = run(INSTRUCTIONS[2], a, b, c, wide=False)  # int16 lanes
    assert np.array_equal(got, ref)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), text=st.sampled_from(INSTRUCTIONS),
       m=st.integers(1, 40), n=st.integers(1, 40), groups=st.integers(1, 5),
       mode=st.sampled_from(["narrow", "wide", "tiny", "raw"]))
def test_random_shapes(seed, text, m, n, groups, mode):
    inst = parse(text)
    rng = np.random.default_rng(seed)
    k = groups * inst.rule.group
    a = random_bits(rng, inst.atype, (m, k), mode)
    b = random_bits(rng, inst.btype, (k, n), mode)
    c = random_bits(rng, inst.ctype, (m, n), mode)
    got, ref = run(text, a, b, c)
    assert np.array_equal(got, ref)


FP8_PAIRS = [f"wgmma.mma_async.m64n8k32.{d}.{a}.{b}" for d in ("f32", "f16") for a in ("e4m3", "e5m2")
             for b in ("e4m3", "e5m2")]


def adversarial_bits(rng, fmt, shape, mode):
    """Data the plain modes rarely give: ``samesign`` (products near their largest, of one
    sign: group sums near int32's edge), ``subnormal`` (around the format's smallest normal
    exponent), ``cancel`` (few distinct magnitudes of both signs: sums that cancel exactly),
    ``huge`` (near the format's largest exponent: accumulators that overflow)."""
    f = get_format(fmt)
    if mode == "samesign":
        v = (1.75 + 0.25 * rng.random(shape)) * 2.0 ** rng.integers(0, 2, shape)
    elif mode == "subnormal":
        v = rng.standard_normal(shape) * 2.0 ** rng.integers(f.min_exponent - 12, f.min_exponent + 3, shape)
    elif mode == "cancel":
        v = rng.choice([-1.0, 1.0], shape) * (1 + rng.integers(0, 4, shape) / 8) * 2.0 ** rng.integers(-2, 3, shape)
    elif mode == "huge":
        top = (1 << f.exp_bits) - 1 - f.bias - int(f.ieee_specials)  # the largest normal exponent
        v = rng.standard_normal(shape) * 2.0 ** rng.integers(top - 4, top + 1, shape)
    else:
        return random_bits(rng, fmt, shape, mode)
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.float32 if fmt == "tf32" else f.value_dtype).view(f.storage)


def adversarial_operands(rng, inst, m, n, k, modes):
    """A (M x K), B (K x N) and C (M x N) bits of ``inst``'s types, by :func:`adversarial_bits`
    in ``modes`` (one for each)."""
    return (adversarial_bits(rng, inst.atype, (m, k), modes[0]), adversarial_bits(rng, inst.btype, (k, n), modes[1]),
            adversarial_bits(rng, inst.ctype, (m, n), modes[2]))


@settings(max_examples=int(os.environ.get("FASTMMA_FUZZ_EXAMPLES", "12")), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), text=st.sampled_from(INSTRUCTIONS + FP8_PAIRS),
       m=st.integers(1, 140), n=st.integers(120, 300), groups=st.integers(1, 4),
       modes=st.tuples(*[st.sampled_from(["narrow", "wide", "raw", "samesign", "subnormal", "cancel", "huge"])] * 3),
       use_c=st.booleans(), small_blocks=st.booleans())
def test_random_shapes_across_whole_register_blocks(seed, text, m, n, groups, modes, use_c, small_blocks):
    """Columns enough for whole blocks of :mod:`.register_blocks` (128 count columns, 64 FMA
    columns) and rows past several of their 4-row blocks, with adversarial data, C or none,
    the default blocking or small K, N and M blocks."""
    inst = parse(text)
    rng = np.random.default_rng(seed)
    k = groups * inst.rule.group
    a, b, c = adversarial_operands(rng, inst, m, n, k, modes)
    blocks = (inst.rule.group * int(rng.integers(1, groups + 1)), int(rng.integers(1, 300)),
              int(rng.integers(1, 80))) if small_blocks else None
    got, ref = run(text, a, b, c, use_c=use_c, blocks=blocks)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("text", [INSTRUCTIONS[0], INSTRUCTIONS[2], INSTRUCTIONS[4]])
def test_lone_specials_and_extreme_exponents_past_the_first_scan_block(text):
    """One inf or NaN in a single row of A or column of B, and the smallest and largest
    exponents of the data, each placed far from the first rows and column blocks the scans
    visit: the rows and columns they touch, and nothing else, take the reference's path."""
    inst = parse(text)
    rng = np.random.default_rng(7)
    k = 2 * inst.rule.group
    a = random_bits(rng, inst.atype, (150, k), "narrow")
    b = random_bits(rng, inst.btype, (k, 300), "narrow")
    c = random_bits(rng, inst.ctype, (150, 300), "narrow")
    fa, fb = get_format(inst.atype), get_format(inst.btype)
    inf_a = np.dtype(fa.storage).type(((1 << fa.exp_bits) - 1) << fa.man_bits) if fa.ieee_specials else None
    nan_b = np.dtype(fb.storage).type((1 << (fb.bits - 1)) - 1)  # all ones but the sign: NaN in every format here
    if inf_a is not None:
        a[131, 1] = inf_a
    b[0, 257] = nan_b
    a[140, 0] = 1  # the smallest subnormal
    b[1, 290] = ((1 << fb.exp_bits) - 2) << fb.man_bits  # the largest finite exponent
    got, ref = run(text, a, b, c)
    assert np.array_equal(got, ref)
    out = got.view(np.float32) if got.dtype == np.uint32 else got.view(np.float16)
    assert np.isnan(out[:, 257]).all()
    if inf_a is not None:
        assert not np.isfinite(out[131]).any()
    assert np.isfinite(np.delete(np.delete(out, [131, 140], axis=0), [257, 290], axis=1)).all()


@pytest.mark.parametrize("text", [INSTRUCTIONS[2], INSTRUCTIONS[3]])
def test_accumulator_at_the_largest_finite_values_on_the_float32_lanes(text):
    """C at +-FLT_MAX and the largest products the float32 lanes take: the sums truncate
    back to FLT_MAX (rounding toward zero) or move away from it, as the reference says."""
    inst = parse(text)
    rng = np.random.default_rng(11)
    k = 4 * inst.rule.group
    storage = np.dtype(np.float32 if inst.atype == "tf32" else get_format(inst.atype).value_dtype).type
    a = (rng.standard_normal((40, k)) * 2.0 ** 40).astype(storage)
    b = (rng.standard_normal((k, 33)) * 2.0 ** 40).astype(storage)
    c = (rng.standard_normal((40, 33)) * 2.0 ** 100).astype(np.float32)
    c[17, :] = np.finfo(np.float32).max
    c[18, :] = -np.finfo(np.float32).max
    a[17:19, 0] = storage(2.0 ** 47)
    a, b, c = a.view(get_format(inst.atype).storage), b.view(get_format(inst.btype).storage), c.view(np.uint32)
    got, ref = run(text, a, b, c, wide=False)
    assert np.array_equal(got, ref)
    assert np.isfinite(got.view(np.float32)).all()


@pytest.mark.parametrize("text", [INSTRUCTIONS[0], INSTRUCTIONS[2]])  # f16 and bf16 into f32: groups of 16
def test_group_sums_that_pass_int32_on_the_float32_lanes(text):
    """Rows whose 16 products are all near their largest, of one sign, with an accumulator
    of that sign just below the next power of two: the group's int32 sum wraps past 2^31
    (worked out below), and the rows around it do not; all equal the reference."""
    inst = parse(text)
    top = 2.0 - 2.0 ** -10 if inst.atype == "f16" else 2.0 - 2.0 ** -7  # the largest significand
    storage = get_format(inst.atype).value_dtype
    rng = np.random.default_rng(13)
    a = rng.standard_normal((64, 64)).astype(storage)
    b = rng.standard_normal((64, 64)).astype(storage)
    c = rng.standard_normal((64, 64)).astype(np.float32)
    a[5, :16], b[:16, 7], c[5, 7] = top, top, 2.0 - 2.0 ** -20  # products and C at exponent 0
    a[9, :16], b[:16, 7], c[9, 7] = -top, top, -(2.0 - 2.0 ** -20)
    term = math.floor(top * top * 2.0**25)  # each product times 2^(25 - e_max), e_max = 0
    assert abs(16 * term + math.floor((2.0 - 2.0 ** -20) * 2.0**25)) >= 2**31
    a, b, c = a.view(get_format(inst.atype).storage), b.view(get_format(inst.btype).storage), c.view(np.uint32)
    got, ref = run(text, a, b, c, wide=False)
    assert np.array_equal(got, ref)
    assert got.view(np.float32)[5, 7] > 2**3 and got.view(np.float32)[9, 7] < -2**3


def test_may_wrap_at_its_bound():
    """With 25 fraction bits the accumulator's term is below 2^26, so a group's sum can carry
    x past int32 only from above 2^31 - 2^26, of either sign."""
    from fastmma.kernels.fused_gemm import _may_wrap

    may_wrap = njit(lambda t: _may_wrap(t, len(t), 25))
    edge = 2**31 - 2**26
    assert not may_wrap(np.array([0, 5, -edge, edge, -7], np.int32))
    assert may_wrap(np.array([0, edge + 1, 3], np.int32))
    assert may_wrap(np.array([-(edge + 1)], np.int32))
    assert may_wrap(np.array([1, 2, -(2**31 - 1)], np.int32))


@njit
def _finish_fenv(acc, E, T, nb, frac, omb, wraps):
    """The rounding by the CPU's mode, run as the GEMM runs it: MXCSR set, then restored."""
    saved = read_mxcsr()
    write_mxcsr(np.int32(MXCSR_TOWARD_ZERO))
    if wraps:
        _finish_row_rz_fenv(acc, E, T, nb, frac, omb, True)
    else:
        _finish_row_rz_fenv(acc, E, T, nb, frac, omb, False)
    write_mxcsr(saved)


FINISHES = [pytest.param(_finish_row_rz32, id="count-and-mask"),
            pytest.param(_finish_fenv, id="mxcsr", marks=pytest.mark.skipif(not HAS_MXCSR, reason="x86 only"))]


@pytest.mark.parametrize("finish", FINISHES)
def test_float32_lanes_rounding_toward_zero_by_hand(finish):
    """The 16-lane rounding toward zero on sums worked out by hand: an int32 sum that wraps
    past 2^31, both signs, a zero (+0), the subnormal grid, and a sum with more than 24
    significant bits."""
    acc = np.array([1.0, -1.0, 0.0, 0.0, 0.0, 0.0], np.float32)
    E = np.array([0, 0, -133, -124, -124, 0], np.int16)
    T = np.array([2**31 - 2**24, -(2**31 - 2**24), 3, 1025, -(2**26 + 1), (1 << 25) + 1], np.int32)
    start = acc.copy()
    finish(acc, E, T, 6, 25, 23, True)
    # (2^31 - 2^24 + 2^25) * 2^-25 = 64.5; 3 * 2^-158 is below the smallest subnormal;
    # 1025 * 2^-149 is a subnormal; (2^26 + 1) * 2^-149 = 2^-123 + 2^-149 keeps 24 bits: 2^-123;
    # 2^25 + 1 (26 bits) loses its last bit: 1.0
    want = np.array([64.5, -64.5, 0.0, 1025 * 2.0**-149, -(2.0**-123), 1.0], np.float64)
    assert list(acc.astype(np.float64)) == list(want)
    assert acc.view(np.uint32)[2] == 0  # +0
    # the exponents the next group reads from these values (subnormals at -126, zero at NEG_EXP)
    assert [_c_exponent(np.float32(x), -126) for x in acc] == [6, 6, NEG_EXP, -126, -123, 0]
    # the sums that do not wrap int32 give the same without the wrap handling
    acc2 = start[2:].copy()
    finish(acc2, E[2:], T[2:], 4, 25, 23, False)
    assert acc2.view(np.uint32).tolist() == acc[2:].view(np.uint32).tolist()


def _rz_by_integers(c, t, e, frac, omb):
    """(float32 bits, exact x) of x * 2^(e - frac), x = t + trunc(c * 2^(frac - e)), truncated
    to omb + 1 significant bits and to the grid 2^(-126 - omb), +0 for zero: in Python
    integers."""
    m, ce = math.frexp(float(c))  # c = cm * 2^(ce - 24), cm an integer of at most 24 bits
    cm = int(m * 2**24)
    shift = ce - 24 + frac - e
    tc = cm << shift if shift >= 0 else (abs(cm) >> -shift) * (1 if cm >= 0 else -1)
    x = t + tc
    mag, unit = abs(x), e - frac
    drop = max(mag.bit_length() - (omb + 1), (-126 - omb) - unit, 0)
    mag = (mag >> drop) << drop
    value = math.ldexp(-mag if x < 0 else mag, unit) if mag else 0.0
    return int(np.float32(value).view(np.uint32)), x


@pytest.mark.parametrize("finish", FINISHES)
@pytest.mark.parametrize("frac, omb, wraps", [(25, 23, True), (25, 23, False), (13, 13, False)])
def test_float32_lanes_rounding_toward_zero_on_random_sums(finish, frac, omb, wraps):
    """Random group sums (both signs, int32 sums past 2^31 where the rule allows them,
    results down in the subnormals, accumulators that truncate away) rounded by the 16-lane
    loop, against the same rounding done in Python integers."""
    rng = np.random.default_rng(5)
    n = 4000
    E = rng.integers(-133, 40, n)
    acc = (rng.uniform(1, 2, n) * rng.choice([-1, 1], n) * 2.0 ** (E - rng.integers(0, 30, n))).astype(np.float32)
    acc[::7] = 0
    # the rule's premise: E is at least the accumulator's exponent, subnormals at 2^-126
    E = np.where(acc != 0, np.maximum(E, np.maximum(np.frexp(acc)[1] - 1, -126)), E).astype(np.int16)
    bound = (16 if wraps else 8) << (frac + 2)  # a group of 16 (8) terms below 2^(frac + 2)
    T = (rng.integers(-bound, bound, n) >> rng.integers(0, frac + 5, n)).astype(np.int32)
    if wraps:  # every 11th: T near +-2^31 and the accumulator's term of its sign carry it past
        sign = rng.choice([-1, 1], n // 11 + 1)
        T[::11] = sign * (2**31 - rng.integers(1, 2**22, len(sign)))
        acc[::11] = (sign * rng.uniform(1, 2, len(sign)) * 2.0 ** E[::11]).astype(np.float32)
    want, sums = zip(*(_rz_by_integers(c, int(t), int(e), frac, omb) for c, t, e in zip(acc, T, E)))
    finish(acc, E, T, n, frac, omb, wraps)
    assert acc.view(np.uint32).tolist() == list(want)
    assert any(0 < (w & 0x7FFFFFFF) < 0x800000 for w in want)  # subnormal results
    assert any(abs(x) >= 2**31 for x in sums) == wraps  # int32 sums that wrap, where allowed


@njit
def _finish_rne16(acc, E, T, nb, frac, wraps):
    saved = read_mxcsr()
    write_mxcsr(np.int32(MXCSR_NEAREST))
    if wraps:
        _finish_row_rne16(acc, E, T, nb, frac, True)
    else:
        _finish_row_rne16(acc, E, T, nb, frac, False)
    write_mxcsr(saved)


@pytest.mark.parametrize("frac, wraps", [(25, True), (25, False), (13, False)])
def test_float32_lanes_rounding_to_nearest_f16_on_random_sums(frac, wraps):
    """The f16 mode's rounding in 16 lanes: x = t + trunc(c * 2^(frac - e)) times 2^(e -
    frac), to nearest even f16, against numpy's float64-to-float16 conversion of the exact
    value (x computed in Python integers): both signs, ties, f16 subnormals, overflow to
    inf, zeros (+0), int32 sums past 2^31 where the rule allows them, and accumulators
    already infinite, which stay."""
    rng = np.random.default_rng(11)
    n = 6000
    E = rng.integers(-21, 32, n)  # e_max: C's zero term at -21 up to the largest f16 products
    with np.errstate(over="ignore"):  # an exponent above 15 overflows to inf, replaced below
        acc = np.float16(rng.uniform(1, 2, n) * rng.choice([-1, 1], n) * 2.0 ** (E - rng.integers(0, 30, n)))
    acc = acc.astype(np.float32)
    acc[~np.isfinite(acc) | (np.arange(n) % 7 == 0)] = 0
    bound = (16 if wraps else 8) << (frac + 2)
    T = (rng.integers(-bound, bound, n) >> rng.integers(0, frac + 8, n)).astype(np.int32)
    ties = np.arange(n) % 13 == 1  # odd multiples of a power of two: ties for some shifts
    T[ties] = (rng.integers(0, 2**10, ties.sum()) * 2 + 1) << rng.integers(0, 20, ties.sum())
    acc[ties] = 0
    if wraps:
        sign = rng.choice([-1, 1], n // 11 + 1)
        T[::11] = sign * (2**31 - rng.integers(1, 2**22, len(sign)))
        acc[::11] = np.float16(sign * rng.uniform(1, 1.9, len(sign)) * 2.0 ** np.minimum(E[::11], 15)).astype(np.float32)
        E[::11] = np.maximum(E[::11], 15)
    overflowed = np.arange(n) % 17 == 3  # an accumulator that an earlier group took to inf stays
    acc[overflowed] = np.where(np.arange(overflowed.sum()) % 2, np.inf, -np.inf)
    want, sums = [], []
    for c, t, e in zip(acc, T, E):
        if np.isinf(c):
            want.append(np.float32(c).view(np.uint32))
            continue
        x = int(t) + math.trunc(float(c) * 2.0 ** (frac - int(e)))
        with np.errstate(over="ignore"):
            r = np.float16(math.ldexp(x, int(e) - frac))  # correctly rounded, to inf past the largest f16
        want.append(np.float32(r if r != 0 else np.float16(0)).view(np.uint32))
        sums.append(x)
    got = acc.copy()
    _finish_rne16(got, E.astype(np.int32), T, n, frac, wraps)
    assert got.view(np.uint32).tolist() == [int(w) for w in want]
    results = np.array(want, np.uint32).view(np.float32)
    assert np.isinf(results).any() and (results == 0).any()
    assert ((np.abs(results) < 2.0**-14) & (results != 0)).any()  # f16 subnormals
    assert any(abs(x) >= 2**31 for x in sums) == wraps


@njit
def _finish_normal(acc, U, T, nb, omb, wraps):
    saved = read_mxcsr()
    write_mxcsr(np.int32(MXCSR_TOWARD_ZERO))
    if wraps:
        _finish_row_rz_normal(acc, U, T, nb, omb, True)
    else:
        _finish_row_rz_normal(acc, U, T, nb, omb, False)
    write_mxcsr(saved)


@pytest.mark.skipif(not HAS_MXCSR, reason="x86 only")
@pytest.mark.parametrize("frac, omb, wraps", [(25, 23, True), (25, 23, False), (13, 13, False)])
def test_rounding_of_normal_results_on_random_sums(frac, omb, wraps):
    """The rounding for groups whose non-zero results are all normal (e_max >= frac - 126),
    with 2^(frac - e_max) given as float32 bits, against the rounding in Python integers:
    both signs, int32 sums past 2^31 where the rule allows them, zero and subnormal
    accumulators, accumulators that truncate away, and e_max up to 127."""
    rng = np.random.default_rng(9)
    n = 4000
    E = rng.integers(frac - 126, 128, n)
    acc = (rng.uniform(1, 2, n) * rng.choice([-1, 1], n) * 2.0 ** (E - rng.integers(0, 40, n))).astype(np.float32)
    acc[::7] = 0
    acc[3::13] = (rng.integers(1, 2**23, len(acc[3::13])) * 2.0**-149).astype(np.float32)  # subnormal C
    E = np.where(acc != 0, np.maximum(E, np.frexp(acc)[1] - 1), E)
    bound = (16 if wraps else 8) << (frac + 2)
    T = (rng.integers(-bound, bound, n) >> rng.integers(0, frac + 5, n)).astype(np.int32)
    if wraps:
        sign = rng.choice([-1, 1], n // 11 + 1)
        T[::11] = sign * (2**31 - rng.integers(1, 2**22, len(sign)))
        E[::11] = np.minimum(E[::11], 100)
        acc[::11] = (sign * rng.uniform(1, 2, len(sign)) * 2.0 ** E[::11]).astype(np.float32)
    # but the largest results must be finite, as the kernel's inputs guarantee
    big = np.abs(T.astype(np.float64) + 2.0 ** (frac + 1)) * 2.0 ** (E - frac) >= 2.0**127
    T[big] >>= 8
    E[big] = np.minimum(E[big], 100)
    acc[big] = np.float32(0)
    want, sums = zip(*(_rz_by_integers(c, int(t), int(e), frac, omb) for c, t, e in zip(acc, T, E)))
    U = ((frac - E + 127) << 23).astype(np.int32)  # the float32 2^(frac - e_max)
    _finish_normal(acc, U, T, n, omb, wraps)
    assert acc.view(np.uint32).tolist() == list(want)
    assert any(abs(x) >= 2**31 for x in sums) == wraps
    assert all((w & 0x7FFFFFFF) == 0 or (w & 0x7F800000) != 0 for w in want)  # no subnormal results


def test_scale_of_normal_results_by_hand():
    """e_max from the largest product exponent (stored less ``po``) and the accumulator's
    exponent field: a zero, a subnormal and an accumulator below the products do not win, a
    larger one does; S32 = 2^(frac - e_max - sh), U = the bits of 2^(frac - e_max), and a
    scale that underflows is 0."""
    frac, sh, po = 25, 31, 2
    P = np.array([10, -3, 0, 5, 0], np.int8)  # product exponents 12, -1, 2, 7, 2
    acc = np.array([0.0, 2.0**-140, 3.0, -(2.0**40), 2.0**126], np.float32)
    U, S = np.zeros(5, np.int32), np.zeros(5, np.float32)
    njit(lambda acc, P, U, S: _scale_normal(acc, P, U, S, 5, frac, sh, po))(acc, P, U, S)
    e_max = [12, -1, 2, 40, 126]
    assert U.tolist() == [(frac - e + 127) << 23 for e in e_max]
    assert S.tolist() == [2.0 ** (frac - e - sh) if frac - e - sh >= -126 else 0.0 for e in e_max]
    assert S[4] == 0.0


def test_normal_results_by_hand():
    """The normal-results path is taken only where every column's largest product exponent is
    known (no column of only zero products: below ``thr``) and at least the floor: no P[j]
    below the bound, which is clamped to P's type (never met above it, always below it)."""
    bound_of = njit(lambda P, thr, po, floor: _normal_bound(P, thr, po, floor))

    def check(P, thr, po, floor):
        possible, bound = bound_of(P, thr, po, floor)
        return bool(possible) and not (P < bound).any()

    P = np.array([10, -3, 0, 5], np.int8)
    assert check(P, -40, 2, -101)
    assert check(P, -40, 2, -1) and not check(P, -40, 2, 0)  # the lowest: -3 + 2 = -1
    assert not check(P, -2, 2, -101)  # -3 is below thr: a column of zero products
    assert check(P.astype(np.int16), -40, 2, -1)
    assert bound_of(P, -40, -200, 0) == (False, 127)  # a bound of 200: above every int8
    assert bound_of(P, -300, 2, -400) == (True, -128)  # below every int8: always met
    assert bound_of(P.astype(np.int16), -40, -200, 0) == (True, 200)


@pytest.mark.parametrize("text", [t for t in INSTRUCTIONS if parse(t).ctype == parse(t).dtype == "f32"])
def test_rows_of_both_rounding_paths_equal_the_reference(text):
    """In one GEMM, row groups whose results are all normal take the normal-results path and
    the others the general one: rows whose products fall below 2^-101 (subnormal results),
    rows with a group of zeros (columns of only zero products), zero and subnormal C."""
    inst = parse(text)
    rng = np.random.default_rng(17)
    m, k, n = 48, 4 * inst.rule.group, 40
    f = get_format(inst.atype)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    if inst.atype in ("bf16", "tf32"):
        a[::5] *= 2.0**-70  # products near 2^-70 * 2^-60: below 2^-101, results subnormal
        b[:, ::3] *= 2.0**-60
    a[1::4, inst.rule.group:2 * inst.rule.group] = 0  # a group of zeros in every fourth row
    c = rng.standard_normal((m, n)).astype(np.float32)
    c[::3, ::2] = 0
    c[1::3, ::5] = np.float32(2.0**-140)
    dt = np.float32 if inst.atype == "tf32" else f.value_dtype
    a, b = a.astype(dt).view(f.storage), b.astype(dt).view(get_format(inst.btype).storage)
    got, ref = run(text, a, b, c.view(np.uint32), wide=False)
    assert np.array_equal(got, ref)
    d = got.view(np.float32)
    assert ((d != 0) & (np.abs(d) < 2.0**-126)).any() == (inst.atype in ("bf16", "tf32"))


@pytest.mark.skipif(not HAS_MXCSR, reason="x86 only")
def test_gemm_leaves_every_threads_rounding_mode_as_it_found_it():
    """The float32 kernel rounds toward zero by setting MXCSR in each thread it runs on; after
    a GEMM, the calling thread and numba's worker threads round to nearest again."""
    @njit(parallel=True)
    def modes(n):
        out = np.empty(n, np.int32)
        for i in prange(n):
            out[i] = read_mxcsr()
        return out

    before = int(modes(1)[0])
    text = INSTRUCTIONS[3]  # tf32 -> f32: rounds toward zero on the float32 lanes
    rng = np.random.default_rng(2)
    a = random_bits(rng, "tf32", (300, 64), "narrow")
    b = random_bits(rng, "tf32", (64, 300), "narrow")
    got, ref = run(text, a, b, np.zeros((300, 300), np.uint32), use_c=False, wide=False)
    assert np.array_equal(got, ref)
    after = modes(256)
    assert {int(x) & 0x6000 for x in after} == {0}  # rounding control: to nearest
    assert int(modes(1)[0]) == before
    assert np.float32(1) + np.float32(1.5 * 2.0**-24) == np.float32(1 + 2.0**-23)  # numpy rounds to nearest


@pytest.mark.skipif(not HAS_MXCSR, reason="x86 only")
@pytest.mark.parametrize("subnormal", ["a", "b"])
def test_a_callers_flush_to_zero_does_not_flush_subnormal_operands(subnormal):
    """A calling thread may have set flush-to-zero and denormals-are-zero (a library built
    with fast-math does): bf16 subnormals still count, on the float32 lanes, where B's are
    float32 subnormals and A's are scaled up to normal numbers."""
    @njit
    def set_mxcsr(x):
        write_mxcsr(np.int32(x))

    rng = np.random.default_rng(5)
    small = np.float32(2.0**-130)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((64, 128)).astype(np.float32)
    if subnormal == "a":
        a *= small
    else:
        b *= small
    a, b = (x.astype(ml_dtypes.bfloat16).view(np.uint16) for x in (a, b))
    text = INSTRUCTIONS[2]  # bf16 -> f32
    c = np.zeros((128, 128), np.uint32)
    set_mxcsr(MXCSR_NEAREST | 0x8040)  # flush-to-zero (bit 15) and denormals-are-zero (bit 6)
    try:
        got = run(text, a, b, c, use_c=False, wide=False)[0]
    finally:
        set_mxcsr(MXCSR_NEAREST)
    ref = run(text, a, b, c, use_c=False, wide=False)[1]
    assert np.count_nonzero(ref) > 128 * 100
    assert np.array_equal(got, ref)


def test_prescale_keeps_products_below_where_an_accumulator_could_overflow():
    """Products at 2^(127 - frac_bits) or above could carry a finite accumulator past 2^128:
    such data takes the float64 lanes, whatever the zero exponent allows."""
    assert prescale(0, 50, 0, 50, 10, 10, 25, -21) is not None  # every product below 2^102
    assert prescale(0, 51, 0, 50, 10, 10, 25, -21) is None


def test_prescale_keeps_a_itself_finite_and_exact_in_float32():
    """A is stored times 2^sh in float32: an A near 2^120 times a B near 2^-125 has
    products near 2^-4, but A times the smallest scale allowed (2^31) would overflow, so the
    data takes the float64 lanes; one binade lower it fits."""
    assert prescale(120, 120, -125, -125, 7, 7, 25, -133) is None
    assert prescale(96, 96, -125, -125, 7, 7, 25, -133) == 31
    assert prescale(97, 97, -125, -125, 7, 7, 25, -133) is None
    # the smallest A must keep its last bit: 2^(a_lo - man_a + sh) >= 2^-149
    assert prescale(-133, -133, 20, 20, 7, 7, 25, 100) == -149 + 133 + 7
    # a B of zeros makes every product zero, but A is stored all the same
    from fastmma.kernels.fused_gemm import _NO_LOW

    assert prescale(96, 96, _NO_LOW, NEG_EXP, 7, 7, 25, -133) == 31
    assert prescale(97, 97, _NO_LOW, NEG_EXP, 7, 7, 25, -133) is None
    assert prescale(_NO_LOW, NEG_EXP, 97, 97, 7, 7, 25, -133) == 31  # B is not scaled


@pytest.mark.parametrize("text", [INSTRUCTIONS[2], INSTRUCTIONS[3]])
@pytest.mark.parametrize("a_exp,b_exp", [(120, -125), (-125, 120), (96, -100)])
def test_an_a_far_above_one_times_a_b_far_below(text, a_exp, b_exp):
    """Products near 1 from operands near the ends of the bf16/tf32 range, through
    ``fastmma.matmul`` at a size that takes the fast kernel: the same bits as the reference
    kernel (an A times 2^sh that overflowed float32 once gave wrong sums here)."""
    import ml_dtypes

    import fastmma

    inst = parse(text)
    rng = np.random.default_rng(abs(a_exp - b_exp))
    dtype = ml_dtypes.bfloat16 if inst.atype == "bf16" else np.float32
    n = 64
    A = (rng.uniform(-2, 2, (n, n)) * 2.0**a_exp).astype(dtype)
    B = (rng.uniform(-2, 2, (n, n)) * 2.0**b_exp).astype(dtype)
    got = fastmma.matmul(A, B, instruction=text)
    a = np.ascontiguousarray(A).view(get_format(inst.atype).storage)
    b = np.ascontiguousarray(B).view(get_format(inst.btype).storage)
    c = np.zeros((n, n), get_format(inst.ctype).storage)
    ref = reference(inst.rule, a, b, c, inst.atype, inst.btype, inst.ctype, inst.dtype, use_c=False)
    assert np.array_equal(np.asarray(got).view(ref.dtype), ref)


def _skewed_bits(rng, fmt, shape):
    """Values of ``fmt`` whose exponents lie in a window of up to 40 binades placed anywhere
    in the format's range (smallest subnormal to largest finite binade), independently for
    each operand; some zeros, now and then one arbitrary bit pattern (an inf, a NaN)."""
    f = get_format(fmt)
    lowest = f.min_exponent - f.man_bits
    highest = (1 << f.exp_bits) - 1 - f.bias - int(f.ieee_specials)  # e4m3 keeps its top exponent
    top = int(rng.integers(lowest, highest + 1))
    e = rng.integers(top - int(rng.integers(0, 40)), top + 1, shape).clip(lowest, highest)
    v = rng.uniform(-2, 2, shape) * 2.0**e
    v[rng.random(shape) < rng.choice([0.0, 0.1, 0.5])] = 0
    with np.errstate(over="ignore"):
        bits = np.ascontiguousarray(v.astype(np.float32 if fmt == "tf32" else f.value_dtype)).view(f.storage).copy()
    if rng.random() < 0.1:
        bits[tuple(rng.integers(0, n) for n in shape)] = rng.integers(0, 1 << f.bits)
    return bits


@pytest.mark.parametrize("seed", range(4))
def test_operands_of_unrelated_ranges_equal_the_reference(seed):
    """A, B and C each from its own window of exponents anywhere in its format (an A near
    the top of bf16 with a B near the bottom, a C far above or below the products), every
    float instruction, ragged shapes: 400 cases per seed, each the reference's bits."""
    rng = np.random.default_rng(seed)
    for _ in range(400):
        text = INSTRUCTIONS[int(rng.integers(0, len(INSTRUCTIONS)))]
        inst = parse(text)
        m, k, n = int(rng.integers(1, 40)), inst.rule.group * int(rng.integers(1, 6)), int(rng.integers(1, 40))
        a = _skewed_bits(rng, inst.atype, (m, k))
        b = _skewed_bits(rng, inst.btype, (k, n))
        c = _skewed_bits(rng, inst.ctype, (m, n))
        got, ref = run(text, a, b, c, use_c=bool(rng.random() < 0.7))
        assert np.array_equal(got, ref), (text, m, k, n)


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.float32, np.float64])
def test_scratch_arrays_start_on_a_cache_line(n, dtype):
    """The kernels' scratch arrays start on a 64-byte boundary and hold exactly ``n``
    elements of the asked type, writable end to end."""
    from fastmma.kernels.fused_gemm import _aligned_empty

    @njit
    def make(n):
        x = _aligned_empty(n, dtype)
        for i in range(n):
            x[i] = i
        return x

    x = make(n)
    assert x.dtype == dtype and x.shape == (n,)
    assert x.ctypes.data % 64 == 0
    assert list(x) == list(range(n))


@pytest.mark.parametrize("m,kk", [(1, 16), (65, 48), (256, 4096)])
@pytest.mark.parametrize("dtypes", [(np.int8,), (np.int16,), (np.float32, np.int8), (np.float64, np.int16, np.int32)])
def test_packed_a_starts_on_a_cache_line(m, kk, dtypes):
    """decode_packed's output arrays start on a 64-byte boundary and have the packed shape
    (K blocks, M blocks, groups per K block, MB, G), writable end to end without touching
    each other."""
    from fastmma.kernels.fused_gemm import _packed_empty

    arrays = _packed_empty(m, kk, 2048, 64, 16, *dtypes)
    assert len(arrays) == len(dtypes)
    for n, (x, dtype) in enumerate(zip(arrays, dtypes)):
        assert x.dtype == dtype and x.shape == (-(-kk // 2048), -(-m // 64), 128, 64, 16)
        assert x.ctypes.data % 64 == 0 and x.flags.c_contiguous
        x[...] = n + 1
    for n, x in enumerate(arrays):
        assert (x == n + 1).all()


def _scan_reference(bits, fmt):
    """Per row, from the values (numpy's frexp, not the kernel's fields): the lowest and
    highest exponent of the non-zero finite elements (subnormals at the smallest normal
    exponent) and whether the row holds an inf or NaN."""
    from fastmma.kernels.fused_gemm import _NO_LOW

    f = get_format(fmt)
    if fmt == "tf32":  # the low 13 bits are not part of a tf32 value
        bits = bits & np.uint32(0xFFFFE000)
    with np.errstate(invalid="ignore"):
        v = bits.view(np.float32 if fmt == "tf32" else f.value_dtype).astype(np.float64)
    live = np.isfinite(v) & (v != 0)
    e = np.maximum(np.frexp(np.where(live, v, 1.0))[1] - 1, f.min_exponent)
    lo = np.where(live, e, _NO_LOW).min(axis=1)
    hi = np.where(live, e, NEG_EXP).max(axis=1)
    return np.stack([lo, hi], axis=1), (~np.isfinite(v)).any(axis=1)


@pytest.mark.parametrize("fmt", ["f16", "bf16", "tf32", "e4m3", "e5m2", "f32"])
@pytest.mark.parametrize("shape", [(37, 29), (1, 300), (300, 1), (64, 256), (300, 2000)])
def test_scans_equal_exponents_read_from_the_values(fmt, shape):
    """scan_rows and scan_columns (on one thread and on all) against
    :func:`_scan_reference`, on any bit patterns (NaNs, infinities, subnormals), with zeros
    sprinkled in and one all-zero row and column."""
    from fastmma.kernels.fused_gemm import scan_columns, scan_columns_by, scan_rows, scan_rows_by

    rng = np.random.default_rng(sum(shape))
    f = get_format(fmt)
    bits = rng.integers(0, 1 << f.bits, shape, dtype=np.uint64).astype(f.storage)
    bits[rng.random(shape) < 0.3] = 0
    bits[rng.random(shape) < 0.2] &= np.dtype(f.storage).type((1 << (f.bits // 2)) - 1)  # subnormals
    bits[shape[0] // 2, :] = 0
    bits[:, shape[1] // 2] = 0
    p = format_params(fmt)
    for scan, rows_of in ((scan_rows, bits), (lambda x, p: scan_rows_by(x, p, True), bits),
                          (lambda x, p: scan_rows_by(x, p, False), bits), (scan_columns, bits.T),
                          (lambda x, p: scan_columns_by(x, p, True), bits.T),
                          (lambda x, p: scan_columns_by(x, p, False), bits.T)):
        lo_hi, special = scan(bits, p)
        want_lo_hi, want_special = _scan_reference(np.ascontiguousarray(rows_of), fmt)
        assert np.array_equal(lo_hi, want_lo_hi), (scan.__name__, fmt)
        assert np.array_equal(special, want_special), (scan.__name__, fmt)


def _every_pattern(fmt):
    """Every bit pattern of an 8- or 16-bit format; for tf32, every pattern of its 19 bits
    with the 13 ignored low bits all zeros and all ones."""
    if fmt != "tf32":
        f = get_format(fmt)
        return np.arange(1 << f.bits, dtype=np.uint64).astype(f.storage)
    top = np.arange(1 << 19, dtype=np.uint32) << np.uint32(13)
    return np.concatenate([top, top | np.uint32(0x1FFF)])


@pytest.mark.parametrize("fmt", ["f16", "bf16", "tf32", "e4m3", "e5m2"])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("sh, neg", [(0, 0), (7, 1), (-30, 0)])
def test_decode_packed_gives_every_patterns_value_and_exponent(fmt, wide, sh, neg):
    """A decoded by decode_packed, in float32 (times 2^sh) and float64 lanes, against values
    from ml_dtypes/numpy and exponents from frexp: every pattern (NaNs, infinities,
    subnormals, both zeros).  Zeros and specials read +0 with the exponent ``zero``; the
    float32 lanes are checked where the scaled value is a float32 (prescale's promise)."""
    from fastmma.kernels.fused_gemm import _packed_empty, decode_packed

    f = get_format(fmt)
    flat = _every_pattern(fmt)
    bits = flat.reshape(-1, 16)
    sh = 0 if wide else sh
    vals, exps = _packed_empty(len(bits), 16, 16, 64, 16, np.float64 if wide else np.float32, np.int32)
    decode_packed(bits, format_params(fmt), neg, sh, -999, 5, vals, exps, np.zeros((1, 1, 1, 0, 16), np.uint8), 0, 0)
    got_v = vals.reshape(-1)[:flat.size].astype(np.float64)
    got_e = exps.reshape(-1)[:flat.size]
    with np.errstate(invalid="ignore"):
        v = (flat & np.uint32(0xFFFFE000)).view(np.float32) if fmt == "tf32" else flat.view(f.value_dtype)
        v = v.astype(np.float64) * (-1.0 if neg else 1.0)
    live = np.isfinite(v) & (v != 0)
    want_e = np.maximum(np.frexp(np.where(live, v, 1.0))[1] - 1, f.min_exponent) - 5
    assert np.array_equal(got_e, np.where(live, want_e, -999))
    want_v = np.where(live, v * 2.0**sh, 0.0)
    with np.errstate(over="ignore"):
        exact = want_v.astype(np.float32).astype(np.float64) == want_v
    assert exact.mean() > 0.6
    assert np.array_equal(got_v[exact], want_v[exact])
    assert not np.signbit(got_v[~live]).any()


@pytest.mark.parametrize("fmt", ["f16", "bf16", "tf32", "e4m3", "e5m2"])
@pytest.mark.parametrize("G, KB, MB, m, kk", [(16, 32, 64, 130, 96), (32, 64, 8, 21, 160), (8, 16, 16, 17, 40),
                                              (4, 8, 4, 7, 20), (2, 4, 4, 5, 6), (16, 16, 64, 1, 16)])
@pytest.mark.parametrize("wide, lows, neg", [(False, False, 0), (False, True, 1), (True, False, 1)])
def test_decode_packed_by_blocks_equals_run_by_run(fmt, G, KB, MB, m, kk, wide, lows, neg):
    """decode_packed, which gathers each group's runs of a block of rows and decodes them as
    one array, gives the packed layout's every element (values, exponents and low codes) as
    the run-by-run decoding of each row (_decode_packed_row, kept for the general formats),
    for the kernels' group sizes and one other (2), rows and K not filling the last blocks,
    several K-blocks, and random bit patterns with infinities and NaNs in some rows only:
    those rows, and no others, are flagged (checked against numpy)."""
    from fastmma.kernels.fused_gemm import (_decode_packed_row, _packed_empty, b_decoder, decode_packed,
                                            f32_decoder)

    rng = np.random.default_rng(G * 1000 + m)
    f = get_format(fmt)
    bits = rng.integers(0, 1 << f.bits, (m, kk), dtype=np.uint64).astype(f.storage)
    with np.errstate(invalid="ignore", over="ignore"):
        values = lambda x: ((x & np.uint32(0xFFFFE000)).view(np.float32) if fmt == "tf32"
                            else x.view(f.value_dtype)).astype(np.float64)
        calm = np.arange(m) % 3 != 1  # these rows get finite values only, the others a NaN at least
        while not np.isfinite(values(bits[calm])).all():
            bad = ~np.isfinite(values(bits)) & calm[:, None]
            bits[bad] = rng.integers(0, 1 << f.bits, int(bad.sum()), dtype=np.uint64).astype(f.storage)
        nan = (1 << (f.bits - 1)) - 1  # every magnitude bit set: a NaN in each of these formats
        bits[~calm, rng.integers(0, kk, int((~calm).sum()))] = nan
        want_special = ~np.isfinite(values(bits)).all(axis=1)
    assert np.array_equal(want_special, ~calm)
    p = format_params(fmt)
    sh = 0 if wide else {"f16": 20, "bf16": -3, "tf32": 1, "e4m3": 19, "e5m2": -40}[fmt]
    dtypes = (np.float64 if wide else np.float32, np.int16, np.uint32)
    got = _packed_empty(m, kk, KB, MB, G, *dtypes, low_rows=lows)
    want = _packed_empty(m, kk, KB, MB, G, *dtypes, low_rows=lows)
    for x, y in zip(got, want):
        x.view(np.uint8)[...] = 0xA5
        y.view(np.uint8)[...] = 0xA5
    lo, low_zero = -30, 201
    special, any_special = decode_packed(bits, p, neg, sh, -999, 3, *got, lo, low_zero)
    @njit(cache=False)
    def run_by_run(bits, p, neg, zero, off, vals, exps, lows, lo, low_zero, sh):
        q = f32_decoder(p, bits.itemsize * 8, sh, neg)
        return [_decode_packed_row(bits, r, p, q, neg, zero, off, vals, exps, lows, lo, low_zero, sh)
                for r in range(bits.shape[0])]

    rows = run_by_run(bits, p, neg, -999, 3, *want, lo, low_zero, sh)
    assert b_decoder(p, bits.itemsize * 8, neg, 3, 1, 0).kind != _GENERAL or not F16_CONVERSIONS
    for x, y in zip(got, want):
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8))
    assert np.array_equal(special, want_special) and np.array_equal(rows, want_special)
    assert any_special == (m > 1)


@pytest.mark.parametrize("fmt", ["bf16", "tf32"])
@pytest.mark.parametrize("sh", [131, -160])
def test_decode_packed_with_a_power_outside_float32(fmt, sh):
    """decode_packed takes any power 2^sh, also one that is no float32 (none that prescale
    gives): every value of A that is a float32 times 2^sh is decoded exactly (subnormals
    times 2^131, the largest values times 2^-160)."""
    from fastmma.kernels.fused_gemm import _packed_empty, decode_packed

    f = get_format(fmt)
    flat = _every_pattern(fmt)
    bits = flat.reshape(-1, 16)
    vals, exps = _packed_empty(len(bits), 16, 16, 64, 16, np.float32, np.int32)
    decode_packed(bits, format_params(fmt), 0, sh, -999, 0, vals, exps, np.zeros((1, 1, 1, 0, 16), np.uint8), 0, 0)
    got = vals.reshape(-1)[:flat.size].astype(np.float64)
    with np.errstate(invalid="ignore"):
        v = ((flat & np.uint32(0xFFFFE000)).view(np.float32) if fmt == "tf32" else flat.view(f.value_dtype))
        v = v.astype(np.float64)
    live = np.isfinite(v) & (v != 0)
    want = np.where(live, v * 2.0**sh, 0.0)
    with np.errstate(over="ignore"):
        exact = (want.astype(np.float32).astype(np.float64) == want) & live
    assert exact.sum() > 1000
    assert np.array_equal(got[exact], want[exact])


@pytest.mark.parametrize("serial", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 13, 64])
def test_scan_columns_merges_its_row_chunks(rows, serial):
    """Column minima/maxima and special flags, scanned in row chunks (or on one thread):
    equal to scanning the rows of the transposed copy, and to values placed by hand (an inf
    in the last row, the smallest subnormal and the largest exponent in different chunks, an
    all-zero column)."""
    from fastmma.kernels.fused_gemm import _NO_LOW, scan_columns_by, scan_rows

    p = format_params("f32")
    x = np.full((rows, 5), 1.0, np.float32)
    x[:, 3] = 0.0
    x[-1, 0] = np.inf
    x[0, 1] = np.float32(2.0**-149)
    x[rows // 2, 2] = np.float32(2.0**127)
    bits = x.view(np.uint32)
    lo_hi, special = scan_columns_by(bits, p, serial)
    assert list(special) == [True, False, False, False, False]
    assert list(lo_hi[1]) == [-126, -126 if rows == 1 else 0]  # a subnormal counts at the smallest normal exponent
    assert list(lo_hi[2]) == [127 if rows == 1 else 0, 127]
    assert list(lo_hi[3]) == [_NO_LOW, NEG_EXP]
    assert list(lo_hi[4]) == [0, 0]
    t_lo_hi, t_special = scan_rows(np.ascontiguousarray(bits.T), p)
    assert np.array_equal(lo_hi, t_lo_hi) and np.array_equal(special, t_special)


# ---------------------------------------------------------------- pass 2 by fused multiply-adds

FP8 = ["wgmma.mma_async.m64n8k32.f32.e4m3.e4m3", "wgmma.mma_async.m64n8k32.f32.e4m3.e5m2",
       "wgmma.mma_async.m64n8k32.f32.e5m2.e4m3", "wgmma.mma_async.m64n8k32.f32.e5m2.e5m2",
       "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2 {a,b,c,d}, x, y, p, -1, 1;",
       "wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e4m3 {a,b,c,d}, x, y, p, 1, -1;",
       "wgmma.mma_async.m64n8k32.f16.e4m3.e4m3", "wgmma.mma_async.m64n8k32.f16.e5m2.e4m3"]


@pytest.mark.skipif(not HAS_MXCSR, reason="the pass by fused multiply-adds needs x86's rounding mode")
@pytest.mark.parametrize("text", FP8)
@pytest.mark.parametrize("mode", ["narrow", "wide", "tiny", "raw"])
@pytest.mark.parametrize("fma", [False, True])
def test_both_fp8_passes_equal_the_reference(text, mode, fma):
    """Row counts that do and do not fill the 4-row blocks and column counts that do and do
    not fill the 64- and 128-column blocks, with and without C, f32 and f16 results (an f16
    C takes the f16 mode, rounded once to nearest even; an f32 C rounds toward zero to f32,
    then to f16): the pass by conversions and
    the pass by fused multiply-adds (whose counts of terms moved away from zero matter on
    "wide" and "tiny" data, where many terms are far below a group's largest)."""
    inst = parse(text)
    rng = np.random.default_rng(seed(text, mode))
    for m, k, n in [(37, 128, 45), (64, 64, 256), (9, 32, 70), (70, 96, 200)]:
        a = random_bits(rng, inst.atype, (m, k), mode)
        b = random_bits(rng, inst.btype, (k, n), mode)
        c = random_bits(rng, inst.ctype, (m, n), mode)
        for use_c in (True, False):
            got, ref = run(text, a, b, c, use_c=use_c, fma=fma)
            assert np.array_equal(got, ref), (m, k, n, use_c)


def test_the_fma_pass_is_taken_only_where_exact():
    from fastmma.kernels.fused_gemm import FMA_KERNELS, low_codes

    rng = np.random.default_rng(4)
    for text in (INSTRUCTIONS[0], INSTRUCTIONS[3]):  # f16 and tf32: 25 fraction bits
        inst = parse(text)
        a = random_bits(rng, inst.atype, (8, 2 * inst.rule.group), "narrow")
        b = random_bits(rng, inst.btype, (2 * inst.rule.group, 8), "narrow")
        c = random_bits(rng, inst.ctype, (8, 8), "narrow")
        with pytest.raises(ValueError, match="fused multiply-adds is not exact"):
            run(text, a, b, c, fma=True)
    f16, e4m3, e5m2 = (format_params(t) for t in ("f16", "e4m3", "e5m2"))
    assert low_codes(f16, f16, 25, -133, 16, 31) is None  # 16 terms below 2^27 do not fit 2^22
    assert low_codes(e4m3, e5m2, 13, -133, 32, 19) is not None
    assert low_codes(e4m3, e5m2, 13, -133, 32, -10) is None  # the smallest magic number would be subnormal
    assert low_codes(e4m3, e5m2, 13, -133, 64, 19) is not None  # 64 terms below 2^15: a spread sparse group
    assert set(FMA_KERNELS) == {32, 64}


@pytest.mark.parametrize("text", ["wgmma.mma_async.m64n8k32.f32.e4m3.e5m2", "wgmma.mma_async.m64n8k32.f16.e5m2.e4m3"])
@pytest.mark.parametrize("mode", ["narrow", "wide", "tiny", "raw"])
def test_groups_of_64_equal_the_reference(text, mode):
    """The kernels of groups of 64 (a sparse fp8 ``wgmma.mma_async.sp`` spread to its dense
    columns, :func:`fastmma.kernels.execute_spread`) on fp8 rules with every one of the 64
    terms of a group non-zero: the pass by fused multiply-adds and by conversions, float32
    and float64 lanes, the 2-D and the stack (narrow) kernels, against the reference kernel
    run with the same group."""
    from dataclasses import replace

    inst = parse(text)
    rule = replace(inst.rule, group=64)
    rng = np.random.default_rng(seed(text, mode, 64))
    c_acc, ctype = c_as_accumulator(rule, random_bits(rng, inst.ctype, (40, 70), mode), inst.ctype)
    params = [format_params(t) for t in (inst.atype, inst.btype, ctype, inst.dtype)]
    for m, fma, wide, narrow in [(40, None, None, False), (40, False, False, False), (40, False, True, False),
                                 (20, True, None, True), (20, False, False, True), (5, None, True, True)]:
        a = random_bits(rng, inst.atype, (m, 3 * 64), mode)
        b = random_bits(rng, inst.btype, (3 * 64, 70), mode)
        c = c_acc[:m]
        for use_c in (True, False):
            got = fused_gemm(rule, a, b, c, *params, c_emin=get_format(ctype).min_exponent,
                             d_emin=get_format(inst.dtype).min_exponent, use_c=use_c, neg_a=False, neg_b=False,
                             wide=wide, fma=fma, narrow=narrow)
            ref = reference(rule, a, b, c, inst.atype, inst.btype, ctype, inst.dtype, use_c=use_c)
            assert np.array_equal(got, ref), (m, fma, wide, narrow, use_c)


@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")])
def test_low_codes_count_exactly_the_negative_terms_off_the_grid(fa, fb):
    """Every pair of codes (every last-bit exponent and sign of each operand, and zeros)
    against every threshold: the sum of the codes falls below it exactly where the signs
    differ and ``la + lb`` is below ``e_max - frac``; a zero never counts."""
    from fastmma.kernels.fused_gemm import low_codes

    pa, pb = format_params(fa), format_params(fb)
    lc = low_codes(pa, pb, 13, -133, 32, 19)
    # the last set bit: from the smallest subnormal's to the exponent of the largest power of two
    largest = {"e4m3": 8, "e5m2": 15}  # 448 = 1.75 * 2^8, 57344 = 1.75 * 2^15
    fa_, fb_ = get_format(fa), get_format(fb)
    la_all = range(fa_.min_exponent - fa_.man_bits, largest[fa] + 1)
    lb_all = range(fb_.min_exponent - fb_.man_bits, largest[fb] + 1)
    wmin = min(la_all) + min(lb_all)
    assert lc.wmin == wmin and lc.span == len(la_all) + len(lb_all) - 1
    codes_a = {(la, sa): (la - lc.lo_a + 128 * sa) % 256 for la in la_all for sa in (0, 1)}
    codes_b = {(lb, sb): (lb - lc.lo_b + 128 * (1 - sb)) % 256 for lb in lb_all for sb in (0, 1)}
    for e_max_less_frac in range(wmin - 3, wmin + lc.span + 3):
        t = min(max(e_max_less_frac - wmin, 0), lc.span)
        for (la, sa), ca in codes_a.items():
            for (lb, sb), cb in codes_b.items():
                want = sa != sb and la + lb < e_max_less_frac
                assert ((ca + cb) % 256 < t) == want
            assert (ca + lc.zero_b) % 256 >= t
        for cb in codes_b.values():
            assert (lc.zero_a + cb) % 256 >= t
        assert (lc.zero_a + lc.zero_b) % 256 >= t


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("neg, flip", [(0, 0), (1, 0), (0, 1)])
def test_low_code_of_every_pattern(fmt, neg, flip):
    """_low_code (of _decode_f32's value, scaled by 2^scale) against the last set bit's
    exponent found from the value itself (times 2^30, an integer, whose lowest set bit is
    isolated by ``x & -x``); the scales put A's values among float32 subnormals and near
    2^127."""
    from fastmma.kernels.fused_gemm import _I32, _decode_f32, _low_code, f32_decoder

    f = get_format(fmt)
    bits = np.arange(256, dtype=np.uint8)
    p = format_params(fmt)

    @njit(cache=False)
    def codes(bits, p, neg, scale, lo, flip, zero):
        q = f32_decoder(p, 8, scale, neg)
        out = np.empty(len(bits), np.uint8)
        for i in range(len(bits)):
            v, e, dead, special = _decode_f32(bits[i], q)
            out[i] = _low_code(v, dead, scale, _I32(lo), _I32(flip), _I32(zero))
        return out

    lo, zero = -20, 201
    got = codes(bits, p, neg, 0, lo, flip, zero)
    for scale in (-125, 100):  # e5m2's values times 2^-125 reach 2^-141, times 2^100 2^116
        assert np.array_equal(codes(bits, p, neg, scale, lo, flip, zero), got)
    with np.errstate(invalid="ignore"):
        v = bits.view(f.value_dtype).astype(np.float64) * (-1.0 if neg else 1.0)
    live = np.isfinite(v) & (v != 0)
    x = np.where(live, np.abs(v) * 2.0**30, 1).astype(np.int64)
    last = np.log2(x & -x).astype(np.int64) - 30
    want = np.where(live, (last - lo + 128 * ((v < 0) ^ flip)) % 256, zero)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("m, mb, last, copies", [(1, 4, 0, [1, 2, 3]), (10, 12, 9, [10, 11]), (70, 64, 5, [6, 7]),
                                                 (64, 64, 63, []), (7, 4, 2, [3])])
def test_pad_rows_copies_a_last_row_into_its_blocks_whole_rows(m, mb, last, copies):
    """In the packed layout (K blocks, M blocks, groups, MB, G), the rows of the last block
    past A's last row (``last`` in its block), up to a multiple of 4 (a block of _rows_fma),
    become copies of that row; every other row is left as it was."""
    from fastmma.kernels.fused_gemm import _pad_rows

    rng = np.random.default_rng(m)
    shape = (2, -(-m // mb), 3, mb, 5)
    arrays = [rng.integers(0, 100, shape).astype(t) for t in (np.float32, np.int8, np.uint32)]
    before = [x.copy() for x in arrays]
    _pad_rows(arrays, m)
    for x, x0 in zip(arrays, before):
        want = x0.copy()
        for r in copies:
            want[:, -1, :, r] = x0[:, -1, :, last]
        assert np.array_equal(x, want)


# ---------------------------------------------------------------- stacks of GEMMs


def _special_bits(fmt, value):
    f = get_format(fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.array(value).astype(np.float32 if fmt == "tf32" else f.value_dtype).view(f.storage)


@pytest.mark.parametrize("text", [INSTRUCTIONS[0], INSTRUCTIONS[1], INSTRUCTIONS[3], INSTRUCTIONS[4], INSTRUCTIONS[8]])
@pytest.mark.parametrize("path", [{}, {"wide": True}, {"wide": False, "exp_lanes": np.int16}, {"fma": False}],
                         ids=["chosen", "float64", "scanned-int16", "no-fma"])
def test_a_stack_equals_the_reference_gemm_by_gemm(monkeypatch, text, path):
    """fused_gemm_stack on each path against the reference kernel, GEMM by GEMM, with an inf
    or NaN in one GEMM's A, another's B and another's C only (their fix-up must stay in
    their own GEMM, and the three take one call of fixup_specials), on a shape of ragged
    blocks."""
    import fastmma.kernels.fused_gemm as fg

    calls, fixup = [], fg.fixup_specials
    monkeypatch.setattr(fg.specials, "fixup_specials", lambda a, *args: calls.append(a.shape) or fixup(a, *args))

    inst = parse(text)
    rng = np.random.default_rng(seed(text, str(path)))
    S, m, n, k = 5, 37, 45, 3 * inst.rule.group
    a = random_bits(rng, inst.atype, (S, m, k), "narrow")
    b = random_bits(rng, inst.btype, (S, k, n), "narrow")
    c = random_bits(rng, inst.ctype, (S, m, n), "narrow")
    a[1, 5, 3] = _special_bits(inst.atype, np.nan)
    b[2, 7, 40] = _special_bits(inst.btype, -np.inf)
    c[3, 36, 0] = _special_bits(inst.ctype, np.inf)
    c_acc, ctype = c_as_accumulator(inst.rule, c, inst.ctype)
    params = [format_params(t) for t in (inst.atype, inst.btype, ctype, inst.dtype)]
    got = fg.fused_gemm_stack(inst.rule, a, b, c_acc, *params, c_emin=get_format(ctype).min_exponent,
                              d_emin=get_format(inst.dtype).min_exponent, use_c=True, neg_a=False, neg_b=False,
                              **path)
    assert got.shape == (S, m, n) and calls == [(S, m, k)]
    for s in range(S):
        ref = reference(inst.rule, a[s], b[s], c[s], inst.atype, inst.btype, inst.ctype, inst.dtype)
        assert np.array_equal(got[s], ref), s


def test_a_stack_of_small_float_gemms_takes_the_stack_kernels(monkeypatch):
    """execute_stack runs a stack of small float GEMMs in one call of fused_gemm_stack (in
    runs of STACK_ELEMENTS operand elements, the last GEMM alone through execute), and
    larger ones GEMM by GEMM through execute."""
    import fastmma.kernels as kernels
    from fastmma.kernels import fused_gemm as fg

    calls = []
    real = fg.fused_gemm_stack
    monkeypatch.setattr(fg, "fused_gemm_stack", lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    inst = parse(INSTRUCTIONS[0])
    rng = np.random.default_rng(0)
    a, b = random_bits(rng, "f16", (3, 64, 16), "narrow"), random_bits(rng, "f16", (3, 16, 64), "narrow")
    c = np.zeros((3, 64, 64), np.uint32)
    args = (inst.rule, a, b, c, "f16", "f16", "f32", "f32")
    got = kernels.execute_stack(*args)
    assert calls == [(3, 64, 16)]
    monkeypatch.setattr(kernels, "STACK_ELEMENTS", 2 * (64 * 16 + 16 * 64 + 64 * 64))  # runs of two GEMMs
    assert np.array_equal(kernels.execute_stack(*args), got) and calls == [(3, 64, 16), (2, 64, 16)]
    monkeypatch.setattr(kernels, "STACK_MAX_MACS", 64 * 16 * 64)  # now too large: one by one
    assert np.array_equal(kernels.execute_stack(*args), got) and calls == [(3, 64, 16), (2, 64, 16)]
    for s in range(3):
        assert np.array_equal(got[s], kernels.execute(inst.rule, a[s], b[s], c[s], "f16", "f16", "f32", "f32"))


# ---------------------------------------------------------------- GEMMs of few rows


@pytest.mark.parametrize("text", INSTRUCTIONS)
@pytest.mark.parametrize("m, special", [(1, "b"), (5, "c"), (32, "b")])
def test_a_narrow_gemm_in_chunks_of_columns_equals_the_reference(text, m, special, monkeypatch):
    """A GEMM of at most NARROW_ROWS rows runs in chunks of B's columns: here seven chunks of
    48 columns for N = 250 (as four threads would have them), the last one past N and so
    empty.  An inf in B in the third chunk (found by that chunk's decoding only), or a NaN
    in C in the fifth, stays in its own columns, and every column equals the reference."""
    from fastmma.kernels import fused_gemm as fg

    chunks = []
    real = fg.fused_gemm_stack
    monkeypatch.setattr(fg.drive, "fused_gemm_stack", lambda *a, **k: chunks.append(k["chunks"]) or real(*a, **k))
    monkeypatch.setattr(fg.drive, "get_num_threads", lambda: 4)
    monkeypatch.setattr(fg.plan, "NARROW_CHUNK", 32)
    inst = parse(text)
    rng = np.random.default_rng(seed(text, m))
    n, k = 250, 3 * inst.rule.group
    a = random_bits(rng, inst.atype, (m, k), "narrow")
    b = random_bits(rng, inst.btype, (k, n), "narrow")
    c = random_bits(rng, inst.ctype, (m, n), "narrow")
    assert np.isfinite(reference(inst.rule, a, b, c, inst.atype, inst.btype, inst.ctype, inst.dtype)
                       .view(np.float16 if inst.dtype == "f16" else np.float32)).all()
    if special == "b":
        b[1, 100] = _special_bits(inst.btype, -np.inf)
    else:
        c[m - 1, 200] = _special_bits(inst.ctype, np.nan)
    got, ref = run(text, a, b, c)
    assert chunks == [7]
    assert np.array_equal(got, ref)


def test_only_few_rows_run_in_chunks_of_columns(monkeypatch):
    """fused_gemm takes the chunks of columns up to NARROW_ROWS rows, unless told not to;
    ``narrow=True`` takes them for any M, and ``narrow=False`` gives the same bits."""
    from fastmma.kernels import fused_gemm as fg

    chunks = []
    real = fg.fused_gemm_stack
    monkeypatch.setattr(fg.drive, "fused_gemm_stack", lambda *a, **k: chunks.append(k["chunks"]) or real(*a, **k))
    monkeypatch.setattr(fg.drive, "get_num_threads", lambda: 2)
    rng = np.random.default_rng(3)
    for m, narrow, want in [(fg.NARROW_ROWS, None, [2]), (fg.NARROW_ROWS + 1, None, []), (40, True, [2]),
                            (8, False, [])]:
        chunks.clear()
        a = random_bits(rng, "f16", (m, 32), "wide")
        b = random_bits(rng, "f16", (32, 2 * fg.NARROW_CHUNK), "wide")
        c = np.zeros((m, 2 * fg.NARROW_CHUNK), np.uint32)
        got, ref = run(INSTRUCTIONS[0], a, b, c, narrow=narrow)
        assert chunks == want and np.array_equal(got, ref)


def test_column_chunks_by_hand():
    """Two chunks a thread, none narrower than NARROW_CHUNK columns, at least one."""
    from fastmma.kernels.fused_gemm import NARROW_CHUNK, column_chunks

    assert NARROW_CHUNK == 256
    assert column_chunks(4096, 2) == 4
    assert column_chunks(4096, 16) == 16
    assert column_chunks(600, 8) == 2
    assert column_chunks(300, 2) == 1
    assert column_chunks(16, 2) == 1
    assert column_chunks(0, 2) == 1


# ---------------------------------------------------------------- B unscanned (GEMMs of few rows)


def test_bounded_lanes_by_hand():
    """tf32, A in [2^-25, 2^3]: sh = 25 + 133 - 127 = 31 (the smallest scale's bound; A's
    own, -149 + 25 + 10, is lower); B's last bit must stay at or above 2^-149 at 2^31,
    -149 + 25 + 10 + 10 - 31 = -135; the largest product below 2^(127 - 25 - 2) and A times
    B within float32 at 2^31: 125 - 3 - 31 = 91.  One binade more either way and no sh
    fits: 2^-136 needs sh = 32, which 2^91 does not allow."""
    from fastmma.kernels.fused_gemm import bounded_lanes

    tf32 = format_params("tf32")
    assert bounded_lanes(-25, 3, tf32, tf32, 25, -133) == (31, -135, 91)
    assert prescale(-25, 3, -135, 91, 10, 10, 25, -133) == 31
    assert prescale(-25, 3, -136, 90, 10, 10, 25, -133) == 32
    assert prescale(-25, 3, -136, 91, 10, 10, 25, -133) is None
    assert prescale(-25, 3, -135, 92, 10, 10, 25, -133) is None
    assert bounded_lanes(1, 0, tf32, tf32, 25, -133) == (31, 1, 0)  # A all zeros: B needs no bounds
    assert bounded_lanes(-25, 100, tf32, tf32, 25, -133) is None  # A itself too large at 2^31


def test_b_window_by_hand():
    """int8 lanes with B's widest window beside A's, over the sample with three quarters of
    the slack below it; int16 lanes with the bounds where the sample is wider; nothing where
    it passes the bounds."""
    from fastmma.kernels.fused_gemm import _int8_width, b_window, exponent_lanes

    bf16 = format_params("bf16")
    width = _int8_width(-12, 2)
    assert exponent_lanes(-12, 2, 0, width, np.int8) is not None
    assert exponent_lanes(-12, 2, 0, width + 1, np.int8) is None
    assert exponent_lanes(-12, 2, 40, 40 + width, np.int8) is not None  # only the span counts
    sh, lanes, lo, hi = b_window(-12, 2, -18, 2, bf16, bf16, 25, -133)
    assert lanes.dtype == np.int8 and hi - lo == width and hi == 2 + (width - 20) // 4
    assert sh == prescale(-12, 2, lo, hi, 7, 7, 25, -133)
    # bf16, A up to 2^2: B from -149 + 12 + 7 + 7 - 31 = -154 to 125 - 2 - 31 = 92
    assert b_window(-12, 2, -18 - width, 2, bf16, bf16, 25, -133) == (31, INT16_LANES, -154, 92)
    assert b_window(-12, 2, -18, 93, bf16, bf16, 25, -133) is None
    assert b_window(-12, 2, 1, 0, bf16, bf16, 25, -133) == (31, INT16_LANES, -154, 92)  # a sample of zeros


@pytest.mark.parametrize("text", [INSTRUCTIONS[2], INSTRUCTIONS[3]])
@pytest.mark.parametrize("outlier", [None, "inf", 2.0 ** -60, 2.0 ** 100])
def test_a_gemm_of_few_rows_leaves_b_unscanned_unless_it_leaves_the_window(text, outlier, monkeypatch):
    """bf16 and tf32 GEMMs of few rows scan A and every fourth row of B (K = 256) only, and
    B's decoding checks the rest against the window: an inf there is fixed up as usual, but
    a value below the window (2^-60) or past the float32 path's bounds (2^100) in a row
    outside the sample runs the GEMM again with B scanned.  Every case equals the
    reference."""
    from fastmma.kernels import fused_gemm as fg

    scans = []
    real = fg.scan_operands
    monkeypatch.setattr(fg.plan, "scan_operands", lambda *a: scans.append(1) or real(*a))
    inst = parse(text)
    rng = np.random.default_rng(11)
    m, k, n = 3, 256, 100
    a = random_bits(rng, inst.atype, (m, k), "narrow")
    b = random_bits(rng, inst.btype, (k, n), "narrow")
    c = random_bits(rng, inst.ctype, (m, n), "narrow")
    if outlier is not None:
        b[k // fg.B_SAMPLE_ROWS + 1, 30] = _special_bits(inst.btype, np.inf if outlier == "inf" else outlier)
    got, ref = run(text, a, b, c)
    assert np.array_equal(got, ref)
    assert scans == ([1] if outlier in (2.0 ** -60, 2.0 ** 100) else [])


def _every_pattern(fmt):
    """Every bit pattern of ``fmt``, or for tf32 (32-bit storage) every exponent field with
    the fraction's extremes and a spread of random fractions, signs and ignored low bits."""
    f = get_format(fmt)
    if f.bits <= 16:
        return np.arange(1 << f.bits, dtype=np.uint64).astype(f.storage)
    rng = np.random.default_rng(5)
    exp = np.arange(256, dtype=np.uint32) << 23
    frac = np.concatenate([[0, 1 << 13, 0x7FE000, 0x7FFFFF, 0x1FFF], rng.integers(0, 1 << 23, 27)]).astype(np.uint32)
    both = (exp[:, None] | frac[None, :]).ravel()
    return np.concatenate([both, both | np.uint32(1 << 31)])


@njit(cache=False)
def _decode_b_runs(bits, p, neg, off, lo, hi, zero, vals, exps, flags):
    """B's decoding in runs of 64 elements, a flag for each run (none where b_decoder's
    kind, which it returns, is _GENERAL)."""
    fq = b_decoder(p, bits.itemsize * 8, neg, off, lo, hi)
    if fq.kind != _GENERAL:
        for c in range(len(flags)):
            k = c * 64
            flags[c] = _decode_b_run(bits[k:], vals[k:], exps[k:], min(64, len(bits) - k), fq, zero)
    return fq.kind


@pytest.mark.parametrize("fmt", ["f16", "bf16", "tf32", "e4m3", "e5m2"])
@pytest.mark.parametrize("neg", [0, 1])
@pytest.mark.parametrize("exp_dtype", [np.int8, np.int16])
@pytest.mark.parametrize("window", [None, (-3, 4), (-14, 0), (-20, -15), (-126, -120), (-140, -127), (2, 127),
                                    (-200, -150)])
def test_b_decoding_of_every_pattern(fmt, neg, exp_dtype, window):
    """B's panel decoding (_decode_b_run, the kind b_decoder picks) against values and
    exponents worked out from the patterns with ml_dtypes: a zero, inf or NaN is +0 with
    the zero code, any other element its value (negated where ``neg``) and ``max(field, 1) -
    bias - off``; each run of 64 (and a last, shorter one) is flagged exactly where it holds
    an inf or NaN or, with a window, a non-zero finite element whose exponent lies outside
    it (the first run holds ones and zeros: a zero is never outside; a window that ends just
    below the subnormals' exponent, ``1 - bias``, flags them)."""

    f = get_format(fmt)
    p = format_params(fmt)
    lo, hi = window or (1, 0)
    off, zero, n = 3, -100, 64

    bits = _every_pattern(fmt)
    ones_and_zeros = np.resize(np.array([1.0, 0.0, -0.0, 1.5], f.value_dtype).view(f.storage), n)
    bits = np.concatenate([ones_and_zeros, bits, bits[: len(bits) // 3]])  # a last run shorter than 64
    vals = np.full(len(bits), np.nan, np.float32)
    exps = np.zeros(len(bits), exp_dtype)
    flags = np.zeros(-(-len(bits) // n), np.bool_)
    kind = _decode_b_runs(bits, p, neg, off, lo, hi, zero, vals, exps, flags)
    assert kind != _GENERAL if F16_CONVERSIONS else kind in (_GENERAL, _VIA_F32)
    if kind == _GENERAL:
        return  # this CPU does not convert halves: such formats take _decode_run (A's decoding tests it)

    wide = bits.astype(np.uint64) >> np.uint64(f.ignored_low_bits)
    field = ((wide >> np.uint64(f.man_bits)) & np.uint64((1 << f.exp_bits) - 1)).astype(np.int64)
    storage = (bits & np.uint32(0xFFFFE000)) if fmt == "tf32" else bits
    with np.errstate(invalid="ignore", over="ignore"):
        v = storage.view(f.value_dtype).astype(np.float64)
    dead = ~np.isfinite(v) | (v == 0)
    special = ~np.isfinite(v)
    e = np.maximum(field, 1) - f.bias
    want_vals = np.where(dead, 0.0, -v if neg else v).astype(np.float32)
    assert np.array_equal(vals.view(np.uint32), want_vals.view(np.uint32))
    assert np.array_equal(exps, np.where(dead, zero, e - off).astype(exp_dtype))
    flagged = special.copy()
    if window is not None:
        flagged |= ~dead & ((e < lo) | (e > hi))
    want = np.array([flagged[k:k + n].any() for k in range(0, len(bits), n)])
    assert np.array_equal(flags, want)
    if window == (-3, 4) and fmt in ("f16", "bf16"):
        assert want.any() and not want.all()


#: (instruction, M): f16 B decodes through a half (_AS_F16) and fp8 B through a half's fields
#: (_VIA_F16) where the CPU converts halves; without F16C both take the general decoding.
WITHOUT_F16C_CASES = [("wgmma.mma_async.m64n8k16.f32.f16.f16", 3), ("wgmma.mma_async.m64n8k32.f32.e4m3.e5m2", 20)]

_WITHOUT_F16C = r"""
import sys
import numpy as np
from fastmma.kernels import vector_ops
assert not vector_ops.F16_CONVERSIONS
from fastmma.formats import get_format
from fastmma.isa import parse
from fastmma.kernels import c_as_accumulator, format_params
from fastmma.kernels.fused_gemm import _GENERAL, b_decoder, fused_gemm

data = np.load(sys.argv[1])
for i, text in enumerate(sys.argv[2:]):
    inst = parse(text)
    assert b_decoder(format_params(inst.btype), get_format(inst.btype).bits, 0, 0, 1, 0).kind == _GENERAL
    a, b, c = data[f"a{i}"], data[f"b{i}"], data[f"c{i}"]
    c_acc, ctype = c_as_accumulator(inst.rule, c, inst.ctype)
    got = fused_gemm(inst.rule, a, b, c_acc, *(format_params(t) for t in (inst.atype, inst.btype, ctype, inst.dtype)),
                     c_emin=get_format(ctype).min_exponent, d_emin=get_format(inst.dtype).min_exponent, use_c=True,
                     neg_a=False, neg_b=False)
    assert np.array_equal(got, data[f"d{i}"]), text
print("ok")
"""


@pytest.mark.skipif(not HAS_MXCSR, reason="an x86 CPU without F16C; every 64-bit Arm converts halves")
def test_b_decoding_where_the_cpu_does_not_convert_halves(tmp_path):
    """Where numba targets a CPU without F16C (x86-64 v2 here), f16 and fp8 B take the
    general decoding (_decode_run): the reference's bits, on any bit patterns (infinities
    and NaNs included), in GEMMs of few rows (M = 3 and 20).  The reference runs here, so
    that the process of its own compiles only the blocked kernels' path."""
    import subprocess
    import sys

    rng = np.random.default_rng(11)
    arrays = {}
    for i, (text, m) in enumerate(WITHOUT_F16C_CASES):
        inst = parse(text)
        a, b = (rng.integers(0, 1 << get_format(t).bits, shape, dtype=np.uint64).astype(get_format(t).storage)
                for t, shape in ((inst.atype, (m, 96)), (inst.btype, (96, 300))))
        c = rng.standard_normal((m, 300)).astype(np.float32).view(np.uint32)
        arrays.update({f"a{i}": a, f"b{i}": b, f"c{i}": c,
                       f"d{i}": reference(inst.rule, a, b, c, inst.atype, inst.btype, inst.ctype, inst.dtype,
                                          use_c=True, neg_a=False, neg_b=False)})
    np.savez(tmp_path / "cases.npz", **arrays)
    features = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16"
    env = dict(os.environ, NUMBA_CPU_NAME="nehalem", NUMBA_CPU_FEATURES=features,
               NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run([sys.executable, "-c", _WITHOUT_F16C, str(tmp_path / "cases.npz"),
                          *(text for text, _ in WITHOUT_F16C_CASES)], capture_output=True, text=True, env=env,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"


def test_b_decoder_picks_the_ieee_type_each_format_is_a_narrower_field_of():
    """f16 as a half, fp8 through a half's fields, bf16 and tf32 as float32 bits; a format
    whose all-ones exponent is finite, as wide as the IEEE type's (a non-IEEE 5-bit or 8-bit
    exponent), or with another bias where it would be read as float32 bits, decodes the
    general way (_decode_run)."""
    from fastmma.kernels.fused_gemm import _AS_F16, _VIA_F16

    def kind(p, width):
        return b_decoder(p, width, 0, 0, 1, 0).kind

    half = (lambda k: k) if F16_CONVERSIONS else (lambda k: _GENERAL)
    assert kind(format_params("f16"), 16) == half(_AS_F16)
    assert kind(format_params("e4m3"), 8) == half(_VIA_F16)  # 4-bit exponent: never a half's all-ones field
    assert kind(format_params("e5m2"), 8) == half(_VIA_F16)
    assert kind(format_params("bf16"), 16) == _VIA_F32
    assert kind(format_params("tf32"), 32) == _VIA_F32
    assert kind((5, 2, 15, 0, 0), 8) == _GENERAL  # e5m2's fields with a finite all-ones exponent
    assert kind((8, 7, 127, 0, 0), 16) == _GENERAL  # bf16's, the same
    assert kind((8, 7, 120, 1, 0), 16) == _GENERAL  # another bias


# ---------------------------------------------------------------- the one-thread kernel of small tiles


def run_small(text, a, b, c, use_c=True, neg_a=False, neg_b=False):
    """:func:`.small_gemm.small_gemm` and the reference on the same operands, as
    ``kernels.execute`` hands them over."""
    from fastmma.kernels.small_gemm import small_gemm

    inst = parse(text)
    c_acc, ctype = c_as_accumulator(inst.rule, c, inst.ctype)
    got = small_gemm(inst.rule, a, b, c_acc, *(format_params(t) for t in (inst.atype, inst.btype, ctype, inst.dtype)),
                     c_emin=get_format(ctype).min_exponent, d_emin=get_format(inst.dtype).min_exponent,
                     use_c=use_c, neg_a=neg_a, neg_b=neg_b)
    ref = reference(inst.rule, a, b, c, inst.atype, inst.btype, inst.ctype, inst.dtype, use_c=use_c,
                    neg_a=neg_a, neg_b=neg_b)
    return got, ref


@settings(max_examples=int(os.environ.get("FASTMMA_FUZZ_EXAMPLES", "60")), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), text=st.sampled_from(INSTRUCTIONS + FP8_PAIRS),
       m=st.integers(1, 40), n=st.integers(1, 70), groups=st.integers(1, 4),
       modes=st.tuples(*[st.sampled_from(["narrow", "wide", "tiny", "raw", "samesign", "subnormal", "cancel",
                                          "huge"])] * 3),
       use_c=st.booleans(), neg=st.tuples(st.booleans(), st.booleans()))
def test_small_kernel_equals_the_reference(seed, text, m, n, groups, modes, use_c, neg):
    """Every float rule on the one-thread kernel of single instructions' tiles, with
    adversarial data, infinities and NaNs among it, negation, C or none."""
    inst = parse(text)
    rng = np.random.default_rng(seed)
    k = groups * inst.rule.group
    a, b, c = adversarial_operands(rng, inst, m, n, k, modes)
    got, ref = run_small(text, a, b, c, use_c, *neg)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("m, n", [(0, 8), (5, 0), (0, 0), (37, 1), (1, 16), (40, 16), (3, 17)])
def test_small_kernel_on_empty_and_narrow_tiles(m, n):
    """No rows or no columns give an empty D; tiles of up to 16 columns (taken in blocks of
    rows, the last block short) and the first wider one equal the reference."""
    text = INSTRUCTIONS[0]
    inst = parse(text)
    rng = np.random.default_rng(m * 100 + n)
    a, b, c = adversarial_operands(rng, inst, m, n, 2 * inst.rule.group, ("wide", "narrow", "samesign"))
    got, ref = run_small(text, a, b, c)
    assert got.shape == (m, n)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("text", INSTRUCTIONS)
def test_small_kernel_with_a_lone_special_in_each_operand(text):
    """One inf or NaN in A, in B or in C, among finite data: only its row, column or element
    differs from the data without it, and every output equals the reference."""
    inst = parse(text)
    rng = np.random.default_rng(11)
    k = 2 * inst.rule.group
    a, b, c = adversarial_operands(rng, inst, 9, 40, k, ("narrow",) * 3)
    clean, _ = run_small(text, a, b, c)
    for name, x, where in (("a", a, (3, 5)), ("b", b, (k - 1, 33)), ("c", c, (8, 0))):
        for special in ("inf", "nan"):
            fmt = get_format({"a": inst.atype, "b": inst.btype, "c": inst.ctype}[name])
            if special == "inf" and not fmt.ieee_specials:
                continue  # e4m3 has no infinity
            bad = x.copy()
            value = np.array([np.inf if special == "inf" else np.nan], np.float32)
            bad[where] = value.astype(np.float32 if fmt.name == "tf32" else fmt.value_dtype).view(fmt.storage)[0]
            ops = {"a": a, "b": b, "c": c, name: bad}
            got, ref = run_small(text, ops["a"], ops["b"], ops["c"])
            assert np.array_equal(got, ref), (name, special)
            row, col = (where[0], None) if name == "a" else (None, where[1]) if name == "b" else where
            changed = np.argwhere(got != clean)
            assert all((row is None or r == row) and (col is None or j == col) for r, j in changed), (name, special)


@pytest.mark.parametrize("text", [INSTRUCTIONS[7], INSTRUCTIONS[1], INSTRUCTIONS[0]])
def test_small_kernel_with_accumulators_below_the_output_formats_normals(text):
    """An f32 C far below f16's smallest normal exponent (wmma f16 D from f32 C) and tiny
    products, over two groups: the first group reads C's exponent by C's format, the second
    the accumulator's by D's."""
    inst = parse(text)
    rng = np.random.default_rng(4)
    k = 2 * inst.rule.group
    a = random_bits(rng, inst.atype, (7, k), "tiny")
    b = random_bits(rng, inst.btype, (k, 12), "tiny")
    cf = get_format(inst.ctype)
    c = (rng.standard_normal((7, 12)) * 2.0 ** rng.integers(-34, -18, (7, 12))).astype(cf.value_dtype).view(cf.storage)
    got, ref = run_small(text, a, b, c)
    assert np.array_equal(got, ref)


def test_small_kernel_reads_an_f32_c_below_f16s_normals_by_its_own_format():
    """wmma f16 D from an f32 C (the f32 mode): C = 2^-25 is half of f16's smallest
    subnormal, and one product 2^-24 * 2^-24 = 2^-48 lies on the group's grid (e_max = -25,
    25 fraction bits: 2^-50) only if C's exponent is read as f32's, not clamped to f16's
    smallest normal exponent -14 (grid 2^-39, where the product truncates to 0).  The sum
    2^-25 + 2^-48 is above the tie, so it rounds to nearest f16 as 2^-24 (bits 0x0001);
    the tie alone would round to +0."""
    text = INSTRUCTIONS[7]  # wmma m16n16k16, D f16, C f32
    a = np.zeros((16, 16), np.float16)
    b = np.zeros((16, 16), np.float16)
    a[:, 0] = b[0, :] = np.float16(2.0**-24)
    c = np.full((16, 16), 2.0**-25, np.float32)
    got, ref = run_small(text, a.view(np.uint16), b.view(np.uint16), c.view(np.uint32))
    assert np.array_equal(got, ref)
    assert (got == 0x0001).all()


@pytest.mark.skipif(not HAS_MXCSR, reason="x86 only")
@pytest.mark.parametrize("text", [INSTRUCTIONS[1], INSTRUCTIONS[7], INSTRUCTIONS[2]])
def test_small_kernel_ignores_the_callers_rounding_mode_and_flush_to_zero(text):
    """The small-tile kernel runs on the calling thread, whose MXCSR may round toward zero
    and flush subnormals (a library built with fast-math): its f16 rounding (by adding and
    subtracting a constant) needs round to nearest, and bf16 operands and an f32 C below
    2^-126 are subnormal values that denormals-are-zero would read as zeros.  The caller's
    MXCSR settings come back as they were."""
    @njit
    def set_mxcsr(x):
        write_mxcsr(np.int32(x))

    @njit
    def get_mxcsr():
        return read_mxcsr()

    inst = parse(text)
    rng = np.random.default_rng(8)
    k = 2 * inst.rule.group
    a, b, c = adversarial_operands(rng, inst, 24, 40, k, ("subnormal", "narrow", "subnormal"))
    hostile = MXCSR_TOWARD_ZERO | 0x8040  # toward zero, flush-to-zero (bit 15), denormals-are-zero (bit 6)
    set_mxcsr(hostile)
    try:
        got = run_small(text, a, b, c)[0]
        left = get_mxcsr()
    finally:
        set_mxcsr(MXCSR_NEAREST)
    ref = run_small(text, a, b, c)[1]
    assert np.array_equal(got, ref)
    assert left & ~0x3F == hostile  # the control bits (bits 0-5 are sticky exception flags)


@pytest.mark.parametrize("shape", [(3, 64, 256), (1, 1000, 1001)])
def test_accumulator_copies_c_with_its_infs_and_nans_at_zero(shape):
    """C copied into the accumulator, every inf and NaN as 0 and flagged."""
    from fastmma.kernels.fused_gemm import _accumulator

    rng = np.random.default_rng(len(shape) + shape[0])
    c = rng.standard_normal(shape).astype(np.float32)
    where = rng.random(shape) < 1e-3
    c[where] = rng.choice(np.array([np.inf, -np.inf, np.nan], np.float32), where.sum())
    c.reshape(-1)[-1] = np.nan  # the last element
    bits = c.view(np.uint32)
    out, elems = _accumulator(bits, True, shape)
    finite = np.isfinite(c)
    assert np.array_equal(out.view(np.uint32), np.where(finite, c, np.float32(0)).view(np.uint32))
    assert elems is not None and np.array_equal(elems, ~finite)
    clean = np.where(finite, c, np.float32(1))
    out, elems = _accumulator(clean.view(np.uint32), True, shape)
    assert elems is None and np.array_equal(out, clean)


def test_f16_bits_of_f32_rounds_to_nearest_even_as_numpy_does():
    """D's f16 bits (``_d_bits``) and fp8's f16 additions go through ``f16_bits_of_f32``:
    against numpy's conversion on every half (exact), on float32 values between halves (ties
    among them, the subnormal grid and the overflow edge at 65520), and a NaN canonical."""
    from fastmma.kernels.fused_gemm import _f16_bits_of

    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    halves = halves[np.isfinite(halves)].astype(np.float32)
    rng = np.random.default_rng(seed("f16_bits_of_f32"))
    between = rng.integers(0x33000000, 0x47800000, 200000, dtype=np.int64).astype(np.uint32).view(np.float32)
    nextup = np.nextafter(halves, np.float32(np.inf))
    ties = ((halves[:-1].astype(np.float64) + halves[1:]) / 2).astype(np.float32)
    edges = np.array([65519.99, 65520, 65536, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -14 - 2.0 ** -25, 1e-30, np.inf],
                     np.float32)
    x = np.concatenate([halves, nextup, ties, between, edges, -between, -edges])
    got = np.empty(x.size, np.uint16)
    _f16_bits_of(x, got)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(got, want)
    nan = np.array([np.nan, -np.nan, np.uint32(0x7F800001).view(np.float32)], np.float32)
    _f16_bits_of(nan, got[:3])
    assert (got[:3] == 0x7FFF).all()
