"""D elements whose chain meets an inf or NaN (:mod:`fastmma.kernels.special_chains`): the
blocked kernels leave them to a fix-up that decides each from its special terms, and sums the
groups before the first of them only where those could overflow.

Expected values: IEEE products (numpy) for the flags of a term; hand-built chains whose D is
known (an overflow to +inf met by a -inf is NaN); and the per-element reference kernel
(:func:`fastmma.kernels.reference`, the rule's chain group by group, checked against the
recordings in test_conformance) on random operands with specials and overflows.
"""

import ml_dtypes
import numpy as np
import pytest

from fastmma import kernels
from fastmma.formats import get_format
from fastmma.isa.numerics import float_rule, mma_rule
from fastmma.kernels import format_params
from fastmma.kernels.decode import decode_float
from fastmma.kernels.fused_dot import NAN_TERM, NEG_INF_TERM, POS_INF_TERM, special_bits, special_term
from fastmma.kernels.special_chains import column_specials, prefix_bound, prefix_bounded

NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32, "f32": np.float32,
         "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _bits(values, fmt):
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.asarray(values, np.float64).astype(NUMPY[fmt])
    bits = x.view(get_format(fmt).storage).copy()
    if fmt == "tf32":
        bits &= np.uint32(0xFFFFE000)
    return bits


def _specials(fmt):
    """Bits of +inf, -inf and NaNs of ``fmt`` (e4m3: its NaNs only)."""
    f = get_format(fmt)
    top = ((1 << f.exp_bits) - 1) << f.man_bits
    sign = 1 << (f.exp_bits + f.man_bits)
    if not f.ieee_specials:
        return [top | ((1 << f.man_bits) - 1), sign | top | ((1 << f.man_bits) - 1)]
    return [top, sign | top, top | 1, sign | top | (1 << (f.man_bits - 1))]


def test_a_terms_flags_are_its_ieee_products_class():
    values = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.5, -2.0]
    p = format_params("f32")
    for x in values:
        for y in values:
            for neg in (0, 1):
                cx = decode_float(int(_bits([x], "f32")[0]), *p)
                cy = decode_float(int(_bits([y], "f32")[0]), *p)
                with np.errstate(invalid="ignore"):
                    product = np.float64(x) * np.float64(y) * (-1) ** neg
                want = (NAN_TERM if np.isnan(product) else POS_INF_TERM if product == np.inf
                        else NEG_INF_TERM if product == -np.inf else 0)
                assert special_term(cx[0], cx[1], cy[0], cy[1], neg) == want, (x, y, neg)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_the_flags_make_the_canonical_nan_or_the_infinity(dtype):
    p = format_params(dtype)
    nan, pos, neg = {"f32": (0x7FFFFFFF, 0x7F800000, 0xFF800000), "f16": (0x7FFF, 0x7C00, 0xFC00)}[dtype]
    assert special_bits(POS_INF_TERM, p) == pos
    assert special_bits(NEG_INF_TERM, p) == neg
    assert special_bits(POS_INF_TERM | NEG_INF_TERM, p) == nan
    assert special_bits(NAN_TERM | POS_INF_TERM, p) == nan


def test_column_specials_lists_each_flagged_columns_infinities_and_nans_in_k_order():
    rng = np.random.default_rng(3)
    values = rng.standard_normal((3, 40, 150))
    values[rng.random(values.shape) < 0.05] = np.inf
    values[rng.random(values.shape) < 0.03] = np.nan
    values[1, :, 7] = -np.inf
    b = _bits(values, "bf16")
    cols = rng.random((3, 150)) < 0.5
    cols[1, 7] = True
    ptr, ks = column_specials(b, format_params("bf16"), cols)
    for s in range(3):
        for j in range(150):
            got = ks[ptr[s * 150 + j]:ptr[s * 150 + j + 1]]
            want = np.flatnonzero(~np.isfinite(values[s, :, j])) if cols[s, j] else []
            np.testing.assert_array_equal(got, want)


def _run(rule, a, b, c, types, **kw):
    got = kernels.execute(rule, a, b, c, *types, **kw)
    want = kernels.reference(rule, a, b, c, *types, **kw)
    return got, want


def test_an_overflow_before_the_first_special_group_counts_as_an_infinity():
    """f16 accumulators: group 0 (k < 16) overflows to +inf in row 0 and not in the others;
    group 2 meets -inf in every element.  Row 0's D is NaN, the others' -inf, whether C is
    added or not."""
    rule = float_rule("f16", "f16", "f16", 16)
    m, k, n = 64, 256, 256
    a = np.full((m, k), 0.01)
    b = np.full((k, n), 0.01)
    a[0, :16], a[1:, :16], b[:16] = 200.0, 1.0, 200.0
    a[:, 32], b[32] = 1.0, -np.inf
    for use_c in (True, False):
        got = kernels.execute(rule, _bits(a, "f16"), _bits(b, "f16"), _bits(np.ones((m, n)), "f16"),
                              "f16", "f16", "f16", "f16", use_c=use_c)
        assert (got[0] == 0x7FFF).all() and (got[1:] == 0xFC00).all(), use_c


def test_bf16_sums_that_overflow_f32_before_an_infinity():
    """f32 accumulators overflow only from huge bf16 products: group 0 reaches +inf in the
    even rows, and a later -inf of B makes their D NaN; the odd rows' D is that -inf."""
    rule = float_rule("bf16", "f32", "f32", 16)
    m, k, n = 32, 512, 130
    a = np.ones((m, k))
    b = np.ones((k, n))
    a[::2, :16], b[:16] = 2.0 ** 120, 2.0 ** 120
    b[300, :] = -np.inf
    got = kernels.execute(rule, _bits(a, "bf16"), _bits(b, "bf16"), np.zeros((m, n), np.uint32),
                          "bf16", "bf16", "f32", "f32", use_c=False)
    assert (got[::2] == 0x7FFFFFFF).all() and (got[1::2] == 0xFF800000).all()


CASES = [("f16", "f32", "f32", 16), ("f16", "f16", "f16", 16), ("f16", "f32", "f16", 16), ("bf16", "f32", "f32", 16),
         ("tf32", "f32", "f32", 8), ("tf32", "f32", "f32", 4)]


@pytest.mark.parametrize("atype,ctype,dtype,group", CASES, ids=["-".join(map(str, c)) for c in CASES])
@pytest.mark.parametrize("scale", [1.0, 60.0, 2.0 ** 40])
def test_specials_and_overflows_against_the_reference_chain(atype, ctype, dtype, group, scale):
    """Random operands with infinities and NaNs in A's rows, B's columns (a whole row of B
    in one of them) and C, zeros among them, scaled so that sums overflow in some chains."""
    rule = float_rule(atype, ctype, dtype, group)
    rng = np.random.default_rng(hash((atype, ctype, dtype, group, scale)) % 2 ** 32)
    for trial in range(3):
        m, n, k = int(rng.integers(33, 130)), int(rng.integers(33, 200)), group * int(rng.integers(8, 48))
        a = rng.standard_normal((m, k)) * scale
        b = rng.standard_normal((k, n)) * scale
        a[rng.random((m, k)) < 0.05] = 0.0
        a, b, c = _bits(a, atype), _bits(b, atype), _bits(rng.standard_normal((m, n)) * scale, ctype)
        for _ in range(int(rng.integers(1, 10))):
            a[rng.integers(m), rng.integers(k)] = rng.choice(_specials(atype))
            b[rng.integers(k), rng.integers(n)] = rng.choice(_specials(atype))
            c[rng.integers(m), rng.integers(n)] = rng.choice(_specials(ctype))
        if trial == 1:
            b[rng.integers(k)] = _specials(atype)[1]
        kw = dict(use_c=trial != 2, neg_a=trial == 1, neg_b=trial == 2)
        got, want = _run(rule, a, b, c, (atype, atype, ctype, dtype), **kw)
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")


@pytest.mark.parametrize("atype,btype,dtype", [("e4m3", "e5m2", "f16"), ("e5m2", "e5m2", "f32")])
def test_fp8_steps_with_specials_against_the_reference_chain(atype, btype, dtype):
    """fp8 ``mma.sync``: each f16 step's special elements plus the D before (the addend)."""
    rule = mma_rule(atype, dtype, dtype, 32, False, None, None)
    rng = np.random.default_rng(5)
    m, n, k = 80, 96, 32 * 12
    a, b = _bits(rng.standard_normal((m, k)) * 30, atype), _bits(rng.standard_normal((k, n)) * 30, btype)
    c = _bits(rng.standard_normal((m, n)), dtype)
    for _ in range(8):
        a[rng.integers(m), rng.integers(k)] = rng.choice(_specials(atype))
        b[rng.integers(k), rng.integers(n)] = rng.choice(_specials(btype))
    b[100] = _specials(btype)[0]
    got, want = _run(rule, a, b, c, (atype, btype, dtype, dtype))
    np.testing.assert_array_equal(got, want)


def test_stacks_fix_each_gemms_specials():
    rule = float_rule("f16", "f16", "f16", 16)
    rng = np.random.default_rng(9)
    a = _bits(rng.standard_normal((6, 16, 128)) * 40, "f16")
    b = _bits(rng.standard_normal((6, 128, 64)) * 40, "f16")
    c = _bits(rng.standard_normal((6, 16, 64)), "f16")
    a[1, 3, 70] = _specials("f16")[0]
    b[4, 90, :] = _specials("f16")[1]
    b[5, 5, 9] = _specials("f16")[2]
    got = kernels.execute_stack(rule, a, b, c, "f16", "f16", "f16", "f16")
    want = kernels.reference(rule, a, b, c, "f16", "f16", "f16", "f16")
    np.testing.assert_array_equal(got, want)


def test_the_prefix_bound_takes_the_formats_where_they_suffice_and_the_data_where_not():
    p16, p32 = format_params("f16"), format_params("f32")
    a = _bits(np.full((4, 64), 3.0), "f16")[None]
    b = _bits(np.full((64, 4), 5.0), "f16")[None]
    t, limit = prefix_bound(a, b, p16, p16, p32, 16, False)
    assert t == 16 * 65504.0 ** 2 + 1 and limit == 2.0 ** 128  # toward zero: 2^128 overflows
    t, limit = prefix_bound(a, b, p16, p16, p16, 16, True)
    assert t == 16 * 15.0 + 1 and limit == 65520.0  # to nearest: 65504 + half a unit
    assert prefix_bounded(0.0, 10, t, limit) and not prefix_bounded(0.0, 300, t, limit)
    assert not prefix_bounded(65400.0, 1, t, limit)
