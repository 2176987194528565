"""The addition of C in fp8's converted rule (:class:`~fastmma.isa.numerics.ConvertedF16Rule`):
each f16 step's sum plus the D before it, one IEEE addition rounded to nearest even in D's
type, which the blocked kernels do as they write D (``addend``) and every other route after
its kernel.

Expected values: the same route's sum without an addend (checked against the recordings and
the reference kernel elsewhere) and the addend added by numpy's IEEE arithmetic.
"""

import ml_dtypes
import numpy as np
import pytest

import fastmma
from fastmma import kernels
from fastmma.isa.numerics import mma_rule

STORAGE = {"f32": (np.uint32, np.float32, 0x7FFFFFFF), "f16": (np.uint16, np.float16, 0x7FFF)}


def _ieee_sum(p_bits, addend, dtype):
    """numpy's sum of D bits ``p_bits`` and ``addend`` in D's type, a NaN canonical (the f16
    sum taken in float32 and rounded again: exact, 24 >= 2 * 11 + 2)."""
    storage, ftype, nan = STORAGE[dtype]
    with np.errstate(all="ignore"):
        s = (p_bits.view(ftype).astype(np.float32) + addend.view(ftype).astype(np.float32)).astype(ftype)
    bits = s.view(storage).copy()
    bits[np.isnan(s)] = nan
    return bits


def _addend(rng, shape, dtype):
    """Random bits of D's type: NaNs, infinities, subnormals and zeros of both signs among
    them."""
    storage = STORAGE[dtype][0]
    bits = rng.integers(0, np.iinfo(storage).max, size=shape, dtype=np.uint64).astype(storage)
    flat = bits.reshape(-1)
    flat[::3] &= storage(0x8FFFFFFF if dtype == "f32" else 0xC7FF)  # most of them near the sums' range
    flat[::5] &= storage(0x807FFFFF if dtype == "f32" else 0x83FF)  # subnormals and zeros
    return bits


def _operands(rng, shape_a, shape_b, specials):
    """f16 bits of A and B, spread over a wide range; where ``specials``, a row of A holding an
    infinity and a column of B a NaN (the kernels leave those to their fix-up)."""
    a = (rng.standard_normal(shape_a) * 2.0 ** rng.integers(-12, 12, shape_a)).astype(np.float16)
    b = (rng.standard_normal(shape_b) * 2.0 ** rng.integers(-12, 12, shape_b)).astype(np.float16)
    if specials:
        a[..., -1, 3] = np.inf
        b[..., 5, -1] = np.nan
    return a.view(np.uint16), b.view(np.uint16)


def _check(route, rule, a, b, addend, dtype, **kw):
    c = np.zeros(a.shape[:-1] + b.shape[-1:], STORAGE[dtype][0])
    args = (rule, a, b, c, "f16", "f16", dtype, dtype)
    plain = route(*args, use_c=False, **kw)
    before = addend.copy()
    got = route(*args, use_c=False, addend=addend, **kw)
    np.testing.assert_array_equal(got, _ieee_sum(plain, addend, dtype))
    assert np.array_equal(addend, before), "the addend was written over"


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("specials", [False, True])
@pytest.mark.parametrize("m,n", [(200, 72), (16, 600), (16, 8), (96, 1)])
def test_execute_adds_the_addend_as_ieee_addition(dtype, specials, m, n):
    """The blocked kernels (200 x 72), a GEMM of few rows in chunks of columns (16 x 600),
    the one-thread kernel (16 x 8), a GEMV."""
    rng = np.random.default_rng(m * n + specials)
    rule = mma_rule("e4m3", dtype, dtype, 32, False, None, None).inner
    a, b = _operands(rng, (m, 32), (32, n), specials)
    _check(kernels.execute, rule, a, b, _addend(rng, (m, n), dtype), dtype)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("specials", [False, True])
def test_stacks_add_the_addend_of_each_gemm(dtype, specials):
    rng = np.random.default_rng(11 + specials)
    rule = mma_rule("e4m3", dtype, dtype, 32, False, None, None).inner
    a, b = _operands(rng, (5, 16, 32), (5, 32, 64), specials)
    _check(kernels.execute_stack, rule, a, b, _addend(rng, (5, 16, 64), dtype), dtype)
    # mma.sp's rows: GEMVs of their own B, through the stack kernels and the per-element one
    for n in (24, 4):
        a, b = _operands(rng, (40, 1, 32), (40, 32, n), specials)
        _check(kernels.execute_rows, rule, a, b, _addend(rng, (40, 1, n), dtype), dtype)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_a_spread_sparse_a_adds_the_addend(dtype):
    rng = np.random.default_rng(13)
    rule = mma_rule("e4m3", dtype, dtype, 32, False, None, None).inner
    a, b = _operands(rng, (200, 32), (32, 72), False)
    a[:, 1::2] = 0  # at most half of each group's terms are non-zero
    _check(kernels.execute_spread, rule, a, b, _addend(rng, (200, 72), dtype), dtype, terms=8)


def test_an_addend_needs_a_fused_rule_and_no_c():
    from fastmma.isa.numerics import IntDotRule

    rule = mma_rule("e4m3", "f32", "f32", 32, False, None, None).inner
    a, b = np.zeros((200, 32), np.uint16), np.zeros((32, 72), np.uint16)
    c = np.zeros((200, 72), np.uint32)
    with pytest.raises(ValueError, match="without C"):
        kernels.execute(rule, a, b, c, "f16", "f16", "f32", "f32", use_c=True, addend=c)
    with pytest.raises(ValueError, match=r"D's bits, uint32 \(200, 72\)"):  # f16 bits for an f32 D
        kernels.execute(rule, a, b, c, "f16", "f16", "f32", "f32", use_c=False, addend=np.zeros((200, 72), np.uint16))
    with pytest.raises(ValueError, match="FusedDotRule"):
        kernels.execute(IntDotRule(group=32, satfinite=False), a.astype(np.uint8), b.astype(np.uint8), c, "s8", "s8",
                        "s32", "s32", use_c=False, addend=c)


@pytest.mark.parametrize("short, ctype", [("m16n8k32.f32.e4m3.e5m2.f32", np.float32),
                                          ("m16n8k32.f16.e4m3.e4m3.f16", np.float16)])
def test_a_large_fp8_gemm_is_its_instructions_one_by_one(short, ctype):
    """A GEMM large enough for the blocked kernels (which add C as they write D) equals the k-loop
    of single ``mma.sync`` instructions, each on its own tile (whose small kernels add C after)."""
    rng = np.random.default_rng(17)
    m, n, k = 48, 64, 128
    A = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn)
    B = (rng.standard_normal((k, n)) * 4).astype(ml_dtypes.float8_e5m2 if "e5m2" in short else
                                                 ml_dtypes.float8_e4m3fn)
    C = (rng.standard_normal((m, n)) * 64).astype(ctype)
    C[3, 5], C[7, 9], C[11, 13] = np.inf, -np.inf, np.nan
    d = np.asarray(fastmma.matmul(A, B, C, instruction=short))
    inst = fastmma.gemm.resolve_instruction(short)
    want = np.empty_like(C)
    for i in range(0, m, 16):
        for j in range(0, n, 8):
            step = C[i:i + 16, j:j + 8]
            for s in range(0, k, 32):
                step = fastmma.mma(inst, A[i:i + 16, s:s + 32], B[s:s + 32, j:j + 8], step)
            want[i:i + 16, j:j + 8] = np.asarray(step)
    np.testing.assert_array_equal(d.view(np.uint8), want.view(np.uint8))
