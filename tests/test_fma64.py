"""fastmma.kernels.fma64 against the H100 recordings and against exact rational arithmetic.

* Every recorded ``wmma.m8n8k4 ... .f64`` case is reproduced bit for bit.
* ``fma_bits`` is compared on random finite operands with an independent reference: the
  exact a*b + c as a ``Fraction``, rounded to float64 in each direction by the code below.
* NaN, inf and signed-zero rules are checked on literal bit patterns taken from recorded
  cases ("<layouts>.<rnd> case i D[r, c]" names file ``wmma.m8n8k4.<layouts>.f64.f64.f64.
  <rnd>.c*.d*.npz``, position i in the file, output element (r, c); "step k" is the fma over
  k, whose accumulator is C for k = 0 and the running d otherwise).
"""

from __future__ import annotations

import json
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastmma.errors import OperandError
from fastmma.kernels.fma64 import _KB, _NB, RM, RN, RP, RZ, fma_bits, fma_gemm, mma_f64, mma_f64_stack
from fastmma.kernels.fp_env import HAS_MXCSR
from fastmma.kernels.register_blocks import fits_registers

GOLDEN = Path(__file__).parent / "golden" / "wmma"
F64_FILES = sorted(GOLDEN.glob("wmma.m8n8k4.*.f64.f64.f64.*.npz"))
ROUNDINGS = {"rn": RN, "rz": RZ, "rm": RM, "rp": RP}
#: mma_f64's two kernels: the CPU's FMAs (x86 only) and integer arithmetic
HOST_FMA = [True, False] if HAS_MXCSR else [False]
M, N, K = 8, 8, 4

# ---- reading the recordings -------------------------------------------------------------


def _matrix(mem, ld, layout, rows, cols):
    """Logical (rows x cols) uint64 matrix of a memory image, per FORMAT.md."""
    words = np.frombuffer(mem.tobytes(), dtype="<u8")
    r, c = np.indices((rows, cols))
    index = r * ld + c if layout == "row" else c * ld + r
    return words[index].astype(np.uint64)


def _variant(path):
    """(alayout, blayout, rounding, clayout, dlayout) from the file name."""
    f = path.name.split(".")
    return f[2], f[3], f[7], f[8][1:], f[9][1:]


def _cases(path):
    """[(mode, A, B, C, D)] of one recording, all uint64 bit patterns."""
    alayout, blayout, _, clayout, dlayout = _variant(path)
    z = np.load(path)
    return [
        (
            int(z["mode"][i]),
            _matrix(z["a_mem"][i], z["lda"][i], alayout, M, K),
            _matrix(z["b_mem"][i], z["ldb"][i], blayout, K, N),
            _matrix(z["c_mem"][i], z["ldc"][i], clayout, M, N),
            _matrix(z["d_mem"][i], z["ldd"][i], dlayout, M, N),
        )
        for i in range(len(z["mode"]))
    ]


def _frag_values(frag):
    """The f64 values held by a fragment (two 32-bit words each, low word first)."""
    words = frag.astype(np.uint64).reshape(32, -1, 2)
    return np.sort((words[..., 0] | (words[..., 1] << np.uint64(32))).ravel())


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


# ---- the recordings ------------------------------------------------------------------------


def test_all_f64_recordings_present():
    assert len(F64_FILES) == 16
    assert sorted({_variant(p)[2] for p in F64_FILES}) == ["rm", "rn", "rp", "rz"]


@pytest.mark.parametrize("path", F64_FILES, ids=lambda p: p.stem)
def test_reader_matches_fragments(path):
    """The matrices read from memory hold the values the wmma.load/mma registers held."""
    z = np.load(path)
    meta = json.loads(bytes(z["meta"]).decode())
    assert meta["qualifiers"]["rounding"] == _variant(path)[2]
    for i, (_, a, b, c, d) in enumerate(_cases(path)):
        for mat, frag in ((a, "a_frag"), (b, "b_frag"), (c, "c_frag"), (d, "d_frag")):
            np.testing.assert_array_equal(np.sort(mat.ravel()), _frag_values(z[frag][i]))


@pytest.mark.parametrize("host_fma", HOST_FMA, ids=lambda h: "host fma" if h else "integer")
@pytest.mark.parametrize("path", F64_FILES, ids=lambda p: p.stem)
def test_recorded_cases_bit_exact(path, host_fma):
    rounding = ROUNDINGS[_variant(path)[2]]
    cases = _cases(path)
    assert cases
    for i, (mode, a, b, c, d) in enumerate(cases):
        got = mma_f64(a, b, c, rounding, host_fma=host_fma)
        bad = np.argwhere(got != d)
        assert bad.size == 0, (
            f"case {i} (mode {mode}): {len(bad)} of 64 outputs differ, first "
            + ", ".join(f"D[{r},{j}] got {got[r, j]:#018x} want {d[r, j]:#018x}" for r, j in bad[:4])
        )


@pytest.mark.parametrize("path", F64_FILES, ids=lambda p: p.stem)
def test_recorded_cases_as_one_stack(path):
    """Every case of a file in one call of the stack kernel, each D the recorded one."""
    rounding = ROUNDINGS[_variant(path)[2]]
    cases = _cases(path)
    a, b, c, d = (np.stack([case[j] for case in cases]) for j in (1, 2, 3, 4))
    got = mma_f64_stack(a, b, c, rounding)
    bad = np.flatnonzero((got != d).any(axis=(1, 2)))
    assert got.shape == d.shape and bad.size == 0, f"cases {bad.tolist()} differ from the H100's bits"


def test_stack_equals_each_gemm_and_checks_its_operands():
    rng = np.random.default_rng(8)
    specials = np.array([0x7FF0000000000000, 0xFFF8000000000001, 0x7FF4000000000002, 0x8000000000000000, 1],
                        np.uint64)

    def stack(shape):
        x = rng.standard_normal(shape).view(np.uint64)
        where = rng.random(shape) < 0.05
        x[where] = rng.choice(specials, where.sum())
        return x

    a, b, c = stack((6, 8, 4)), stack((6, 4, 8)), stack((6, 8, 8))
    for rounding in (RN, RZ, RM, RP):
        got = mma_f64_stack(a, b, c, rounding)
        for s in range(6):
            assert np.array_equal(got[s], mma_f64(a[s], b[s], c[s], rounding, host_fma=False)), (rounding, s)
    with pytest.raises(OperandError, match="3-D uint64 array"):
        mma_f64_stack(a[0], b[0], c[0], RN)
    with pytest.raises(OperandError, match=r"a\[S, M, K\], b\[S, K, N\], c\[S, M, N\]"):
        mma_f64_stack(a, b[:5], c, RN)
    with pytest.raises(OperandError, match="rounding"):
        mma_f64_stack(a, b, c, 7)


@pytest.mark.parametrize("path", F64_FILES[::3], ids=lambda p: p.stem)
def test_recorded_cases_by_fma_bits_chain(path):
    """The scalar fma_bits, chained over k from Python, gives the recorded D too."""
    rounding = ROUNDINGS[_variant(path)[2]]
    for _, a, b, c, d in _cases(path):
        for i in range(M):
            for j in range(N):
                acc = int(c[i, j])
                for k in range(K):
                    acc = int(fma_bits(int(a[i, k]), int(b[k, j]), acc, rounding))
                assert acc == int(d[i, j])


# ---- literal special cases from the recordings ---------------------------------------------

INF, NINF = 0x7FF0000000000000, 0xFFF0000000000000
MAX, NMAX = 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF
PZ, NZ = 0x0, 0x8000000000000000
GPU_DEFAULT_NAN = 0xFFF8000000000000

SPECIAL_CASES = [
    # (a, b, c, rounding, expected, recorded case)
    # -- NaN precedence: B's NaN, then the accumulator's, then A's; the winner is quieted.
    (0xBFCEC5310E370D94, 0xFFFF04DC59768B6A, 0x7FFC4E527DCF7488, RN, 0xFFFF04DC59768B6A,
     "col.col.rn case 5 D[0,3] step 1: B qNaN beats accumulator qNaN"),
    (0x3FCFBD8F4D861A2C, 0xFFF6A9F6DC74CA40, 0x7FFA3BFCBC945533, RN, 0xFFFEA9F6DC74CA40,
     "row.col.rn case 15 D[5,2] step 0: B sNaN beats C qNaN, quieted"),
    (0x7FF1E58C2AB9D232, 0x3FC6EC7E7F38CA01, 0xFFFF04DC59768B6A, RN, 0xFFFF04DC59768B6A,
     "col.col.rn case 5 D[0,3] step 3: accumulator qNaN beats A sNaN"),
    (0xFFFD3A2CEFF1C051, 0x0000000000000001, 0x7FF25D17100D44F2, RP, 0x7FFA5D17100D44F2,
     "col.row.rp case 12 D[4,1] step 0: C sNaN beats A qNaN, quieted"),
    (0x7FF5D7AB7EFC8A34, 0xC020E87F399ED9F5, 0x7FF5761CCCD2EA06, RP, 0x7FFD761CCCD2EA06,
     "col.row.rp case 0 D[4,5] step 0: C sNaN beats A sNaN"),
    (0x7FFE9966660D9427, 0x8000000000000000, 0x7FFB2D3D4E3F025D, RN, 0x7FFB2D3D4E3F025D,
     "col.row.rn case 10 D[6,6] step 0: C qNaN beats A qNaN (A NaN times -0)"),
    (0x7FFFCB6B81B06F9F, 0x7FF0BE2C9E76F38E, NINF, RZ, 0x7FF8BE2C9E76F38E,
     "col.col.rz case 10 D[0,1] step 3: B sNaN beats A qNaN"),
    (0x7FF502609BFBADD0, 0x7FF177BAC0D54E2E, 0xC025C016C4035FDE, RZ, 0x7FF977BAC0D54E2E,
     "col.row.rz case 11 D[3,2] step 1: B sNaN beats A sNaN"),
    (0x7FFC6AACD8D37534, 0xFFFBB5CE941B3C88, 0x7FFB96DE814C789F, RP, 0xFFFBB5CE941B3C88,
     "row.col.rp case 7 D[5,4] step 1: B qNaN beats A and accumulator qNaNs"),
    # -- a single NaN keeps its sign and payload and is quieted
    (0xFFF0C5169395CD88, 0x3FF88A4B40811777, 0x3FCE1DDE7EFB8F71, RZ, 0xFFF8C5169395CD88,
     "col.col.rz case 4 D[7,0] step 0: negative A sNaN"),
    (0xC01F6FE0978EA819, 0xFFF7F4FA90C87E69, 0xC0288743D4E48CB5, RN, 0xFFFFF4FA90C87E69,
     "row.col.rn case 3 D[0,6] step 0: negative B sNaN"),
    (0x40268ACB4DB5A99B, 0x8000000000000000, 0x7FF37D13E92B961A, RM, 0x7FFB7D13E92B961A,
     "col.col.rm case 7 D[3,3] step 0: C sNaN"),
    (0x7FFE98F96A5AD1EE, 0xBFFDF55FA46B6326, 0x3FD97B36BEBEBBDB, RM, 0x7FFE98F96A5AD1EE,
     "col.col.rm case 1 D[5,0] step 0: A qNaN unchanged"),
    # -- invalid operations
    (PZ, INF, 0xBFE4F2E1EC014AE7, RZ, GPU_DEFAULT_NAN,
     "row.col.rz case 10 D[0,5] step 0: 0 * inf + finite"),
    (INF, PZ, INF, RZ, GPU_DEFAULT_NAN,
     "row.col.rz case 4 D[3,2] step 2: inf * 0 + inf (accumulator = C = +inf)"),
    (NZ, INF, 0xFFF82D62E62EDBC2, RP, 0xFFF82D62E62EDBC2,
     "col.row.rp case 0 D[3,6] step 3: -0 * inf + NaN gives the NaN (C sNaN quieted at step 0)"),
    (0xC017FB5931CF1B5E, NINF, NINF, RM, GPU_DEFAULT_NAN,
     "col.col.rm case 13 D[5,3] step 3: (-x) * (-inf) + (-inf) = inf - inf"),
    # -- overflow in each direction
    (0x5FDDD3BB462010E4, 0x5FD1A81DEB44C85C, 0x7FED9A21BBE6607B, RN, INF,
     "col.col.rn case 0 D[3,6] step 0"),
    (0x5FDDD3BB462010E4, 0xDFCA5990A8831363, 0xFFEDB35F8D2EEE32, RN, NINF,
     "col.col.rn case 0 D[3,3] step 0"),
    (0xDFE81593FA7A054F, 0xDFC9B03FC592BE54, 0x7FEED290BB1BCAB7, RZ, MAX,
     "col.col.rz case 5 D[3,5] step 0"),
    (0x761370A15601B4FD, 0xF56642B497A054F1, 0x801A0DEE98BF23BF, RZ, NMAX,
     "col.col.rz case 8 D[3,4] step 0"),
    (0x6236AE1393117826, 0x7A6F4A57861A08ED, 0x800F08355FEB5612, RM, MAX,
     "col.col.rm case 11 D[5,2] step 0"),
    (0x3FCF532D75B5F8C4, 0xC005FCAEDA18CF89, NMAX, RM, NINF,
     "col.col.rm case 1 D[1,4] step 0"),
    (0xEDF3BC4EE9E80FEA, 0xEE6694853D04C43A, 0xBE7E45BDD434BEEF, RP, INF,
     "col.col.rp case 1 D[4,2] step 0"),
    (0xF6F9270D19B95307, 0x62A703890EA474CB, 0xBF56B391A2DEC4AE, RP, NMAX,
     "col.col.rp case 7 D[7,1] step 0"),
]


@pytest.mark.parametrize("a, b, c, rounding, expected, source", SPECIAL_CASES, ids=[s[5] for s in SPECIAL_CASES])
def test_recorded_special_case(a, b, c, rounding, expected, source):
    got = int(fma_bits(a, b, c, rounding))
    assert got == expected, f"{source}: got {got:#018x}, recorded {expected:#018x}"


# Whole recorded chains whose result depends on the sign of an exact zero sum: opposite-signed
# zeros add to +0, and to -0 under .rm.  (A row, B column, C, rounding, recorded D, source.)
ZERO_CHAINS = [
    ((PZ, PZ, PZ, NZ), (0xC025C1B1D2F3A6AB, 0xBFEA1BA6544F508D, 0x3FE9EBEB352D125B, 0xC01EF3F15B77E535),
     PZ, RN, PZ, "row.row.rn case 8 D[6,3]"),
    ((0xC0108A8351AADAFE, 0xBFCEBEBF30A6B1FA, 0xBFC37244F890081C, PZ), (PZ, NZ, PZ, PZ),
     NZ, RZ, PZ, "col.row.rz case 5 D[7,4]"),
    ((NZ, 0xBFC2908F3F1F8F33, 0xC0260C2CF7623252, 0x400F9378F98A452C), (PZ, PZ, NZ, NZ),
     NZ, RP, PZ, "col.col.rp case 3 D[4,0]"),
    ((NZ, PZ, PZ, NZ), (PZ, PZ, NZ, PZ), PZ, RM, NZ, "col.col.rm case 7 D[0,4]"),
]


@pytest.mark.parametrize("a_row, b_col, c, rounding, expected, source", ZERO_CHAINS, ids=[s[5] for s in ZERO_CHAINS])
def test_recorded_signed_zero_chain(a_row, b_col, c, rounding, expected, source):
    acc = c
    for a, b in zip(a_row, b_col):
        acc = int(fma_bits(a, b, acc, rounding))
    assert acc == expected, f"{source}: got {acc:#018x}, recorded {expected:#018x}"


def test_rn_tie_goes_to_even():
    # (1 + 2**-52) * 1.5 = 1.5 + 2**-52 + 2**-53: exactly half-way between 1.5 + 1 ulp (odd)
    # and 1.5 + 2 ulp (even).  Worked out by hand.
    a, b = 0x3FF0000000000001, 0x3FF8000000000000
    assert int(fma_bits(a, b, PZ, RN)) == 0x3FF8000000000002
    assert int(fma_bits(a, b, PZ, RZ)) == 0x3FF8000000000001
    assert int(fma_bits(a, b, PZ, RM)) == 0x3FF8000000000001
    assert int(fma_bits(a, b, PZ, RP)) == 0x3FF8000000000002
    assert int(fma_bits(a | NZ, b, NZ, RM)) == 0xBFF8000000000002


def test_fma_bits_rejects_bad_rounding():
    with pytest.raises(ValueError):
        fma_bits(0, 0, 0, 4)


# ---- exact reference ------------------------------------------------------------------------

MAX_FINITE = Fraction(_float(MAX))


def _exponent(x: Fraction) -> int:
    """floor(log2(x)) for x > 0."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    return e if Fraction(2) ** e <= x else e - 1


def _round(x: Fraction, rounding: int) -> int:
    """float64 bits of the nonzero rational x rounded in direction ``rounding``."""
    negative = x < 0
    mag = -x if negative else x
    ulp = Fraction(2) ** (max(_exponent(mag), -1022) - 52)
    units, rest = divmod(mag, ulp)
    units = int(units)
    if rest:
        if rounding == RN:
            units += rest > ulp / 2 or (rest == ulp / 2 and units % 2 == 1)
        elif (rounding == RM and negative) or (rounding == RP and not negative):
            units += 1
    value = units * ulp
    if value > MAX_FINITE:
        to_inf = rounding == RN or (rounding == RM and negative) or (rounding == RP and not negative)
        bits = INF if to_inf else MAX
    else:
        bits = _bits(float(value))  # exact: value is representable
    return bits | (NZ if negative else 0)


def reference_fma(a: int, b: int, c: int, rounding: int) -> int:
    """IEEE 754 fusedMultiplyAdd of finite operands, via exact rationals."""
    product = Fraction(_float(a)) * Fraction(_float(b))
    total = product + Fraction(_float(c))
    if total != 0:
        return _round(total, rounding)
    product_negative = (a ^ b) >> 63
    if product == 0 and c & ~NZ == 0 and product_negative == c >> 63:
        return c  # zeros of one sign
    return NZ if rounding == RM else PZ


@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(allow_nan=False, allow_infinity=False))
def test_reference_agrees_with_host_rn_multiply_and_add(x, y):
    """The reference itself: IEEE multiply and add are correctly rounded to nearest."""
    one, zero = _bits(1.0), _bits(-0.0)
    assert reference_fma(_bits(x), _bits(y), zero, RN) == _bits(x * y)
    assert reference_fma(_bits(x), one, _bits(y), RN) == _bits(x + y)


# ---- random finite operands -----------------------------------------------------------------

_SIGNIFICANDS = st.one_of(
    st.integers(0, (1 << 52) - 1),
    st.sampled_from([0, 1, 2, 3, (1 << 51), (1 << 52) - 1, (1 << 52) - 2, (1 << 51) + 1]),
    st.integers(0, (1 << 26) - 1).map(lambda f: f << 26),  # short: exact products, ties
)
_EXPONENTS = st.one_of(
    st.integers(0, 2046),
    st.integers(0, 3),  # subnormal and smallest normal
    st.integers(480, 560),  # products near the subnormal range
    st.integers(990, 1060),  # near 1
    st.integers(1500, 1570),  # products near overflow
    st.integers(2000, 2046),  # huge
)


@st.composite
def finite_doubles(draw):
    sign = draw(st.booleans())
    return (int(sign) << 63) | (draw(_EXPONENTS) << 52) | draw(_SIGNIFICANDS)


def _nudge(bits: int, ulps: int) -> int:
    """bits moved by ``ulps`` units in the last place along the integer line, kept finite."""
    magnitude = min(max((bits & ~NZ) + ulps, 0), MAX)
    return (bits & NZ) | magnitude


@st.composite
def cancelling_triples(draw):
    """c close to -(a*b): a few ulps off the rounded product, so most bits cancel."""
    a, b = draw(finite_doubles()), draw(finite_doubles())
    product = _float(a) * _float(b)  # input generation only, never an expected value
    if product != product or abs(product) == float("inf"):
        product = 0.0
    c = _nudge(_bits(-product), draw(st.integers(-3, 3)))
    return a, b, c


@st.composite
def exactly_cancelling_triples(draw):
    """a, b with short significands so a*b is exact; c = -(a*b)."""
    short = st.integers(0, (1 << 20) - 1).map(lambda f: f << 32)
    exponent = st.integers(700, 1340)
    a = (draw(st.integers(0, 1)) << 63) | (draw(exponent) << 52) | draw(short)
    b = (draw(st.integers(0, 1)) << 63) | (draw(exponent) << 52) | draw(short)
    return a, b, _bits(-(_float(a) * _float(b)))


TRIPLES = st.one_of(
    st.tuples(finite_doubles(), finite_doubles(), finite_doubles()),
    cancelling_triples(),
    exactly_cancelling_triples(),
)


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TRIPLES, st.sampled_from([RN, RZ, RM, RP]))
def test_fma_bits_matches_exact_reference(triple, rounding):
    a, b, c = triple
    got = int(fma_bits(a, b, c, rounding))
    want = reference_fma(a, b, c, rounding)
    assert got == want, f"fma({a:#018x}, {b:#018x}, {c:#018x}, {rounding}): got {got:#018x} want {want:#018x}"


def test_reference_sweep_hits_the_hard_regions():
    """The strategies above do reach subnormal, overflowing and exactly zero results."""
    seen = set()

    @settings(max_examples=1500, deadline=None, database=None)
    @given(TRIPLES, st.sampled_from([RN, RZ, RM, RP]))
    def collect(triple, rounding):
        r = reference_fma(*triple, rounding)
        if r & ~NZ == 0:
            seen.add("zero")
        elif (r >> 52) & 0x7FF == 0:
            seen.add("subnormal")
        elif r & ~NZ in (INF, MAX):
            seen.add("overflow")

    collect()
    assert seen == {"zero", "subnormal", "overflow"}


# ---- the array kernel -----------------------------------------------------------------------


def _random_bits(rng, shape, specials=False):
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape))
    bits = x.view(np.uint64).copy()
    if specials:
        pool = np.array([INF, NINF, PZ, NZ, MAX, 1, 0x7FF4000000000001, 0xFFF8000000000123], dtype=np.uint64)
        mask = rng.random(shape) < 0.05
        bits[mask] = rng.choice(pool, mask.sum())
    return bits


def reference_gpu_fma(a: int, b: int, c: int, rounding: int) -> int:
    """reference_fma plus the special-value rules the recordings showed (see SPECIAL_CASES)."""
    quiet = 0x0008000000000000
    for x in (b, c, a):  # NaN precedence: B, accumulator, A
        if x & ~NZ > INF:
            return x | quiet
    a_inf, b_inf, c_inf = a & ~NZ == INF, b & ~NZ == INF, c & ~NZ == INF
    product_sign = (a ^ b) & NZ
    if a_inf or b_inf:
        if a & ~NZ == 0 or b & ~NZ == 0 or (c_inf and c & NZ != product_sign):
            return GPU_DEFAULT_NAN
        return INF | product_sign
    if c_inf:
        return c
    return reference_fma(a, b, c, rounding)


@pytest.mark.parametrize("host_fma", HOST_FMA, ids=lambda h: "host fma" if h else "integer")
@pytest.mark.parametrize("rounding", [RN, RZ, RM, RP])
def test_mma_f64_matches_reference_chain(rounding, host_fma):
    rng = np.random.default_rng(rounding)
    m, k, n = 5, 7, 3
    a, b, c = (_random_bits(rng, s, specials=True) for s in ((m, k), (k, n), (m, n)))
    d = mma_f64(a, b, c, rounding, host_fma=host_fma)
    assert d.dtype == np.uint64 and d.shape == (m, n)
    for i in range(m):
        for j in range(n):
            acc = int(c[i, j])
            for kk in range(k):  # increasing k
                acc = reference_gpu_fma(int(a[i, kk]), int(b[kk, j]), acc, rounding)
            assert int(d[i, j]) == acc, f"D[{i},{j}]"


@pytest.mark.skipif(not HAS_MXCSR, reason="the CPU's FMAs are used only on x86")
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TRIPLES, st.sampled_from([RN, RZ, RM, RP]))
def test_host_fma_matches_exact_reference(triple, rounding):
    """One fma by the CPU (a 1x1x1 product) against exact rational arithmetic: subnormal,
    overflowing and exactly cancelling results in every direction."""
    a, b, c = (np.array([[x]], np.uint64) for x in triple)
    got = int(mma_f64(a, b, c, rounding, host_fma=True)[0, 0])
    want = reference_fma(*triple, rounding)
    assert got == want, f"fma({triple[0]:#018x}, {triple[1]:#018x}, {triple[2]:#018x}, {rounding}): got {got:#018x}"


def _hard_chains(rng, m, k, n):
    """A, B, C whose chains overflow, turn subnormal, cancel exactly and meet every special:
    each row of A and column of B has its own binade, so that their products land in the
    normal range, past the largest double or among the subnormals; C is scaled to match."""
    row_binade = rng.choice([0, 0, -540, 512, -1000, 40], m)
    col_binade = rng.choice([0, -520, 512, -60, 20], n)
    a = np.ldexp(rng.standard_normal((m, k)), row_binade[:, None] + rng.integers(-3, 4, (m, k)))
    b = np.ldexp(rng.standard_normal((k, n)), col_binade[None, :] + rng.integers(-3, 4, (k, n)))
    c = np.ldexp(rng.standard_normal((m, n)), np.clip(row_binade[:, None] + col_binade[None, :] + 5, -1074, 1015))
    a[0], b[:, 0] = rng.integers(-9, 9, k), rng.integers(-9, 9, k)  # small integers: exact products
    c[0, 0] = -a[0, 0] * b[0, 0]  # the chain's first step cancels exactly
    a, b, c = (x.view(np.uint64).copy() for x in (a, b, c))
    pool = np.array([INF, NINF, PZ, NZ, MAX, 1, 0x7FF4000000000001, 0xFFF8000000000123], dtype=np.uint64)
    a[-1, rng.integers(0, k, 3)] = rng.choice(pool, 3)  # the last row meets specials
    b[rng.integers(0, k, 4), rng.integers(0, n, 4)] = rng.choice(pool, 4)  # and a few columns
    c[rng.integers(0, m, 4), rng.integers(0, n, 4)] = rng.choice(pool, 4)
    return a, b, c


@pytest.mark.skipif(not HAS_MXCSR, reason="the CPU's FMAs are used only on x86")
@pytest.mark.parametrize("blocks, split", [(True, False), (True, True), (False, False)],
                         ids=["register blocks", "split", "rows"])
@pytest.mark.parametrize("rounding", [RN, RZ, RM, RP])
@pytest.mark.parametrize("shape", [(13, _KB + 44, _NB + 88), (3, 40, 5), (6, 8, 70), (1, 300, _NB + 200)])
def test_host_fma_chains_match_the_integer_kernel(rounding, blocks, split, shape):
    """Whole chains across the host kernel's panels of K and N (one more of each than fits,
    and a block of rows that is not full), and products smaller than one register block in
    rows, columns or both, with overflow, subnormals, exact cancellation and specials, give
    the integer kernel's bits, with the register blocks (and their padded edge blocks) or
    without them, and with the threads sharing the register blocks of columns too
    (``split``, a matrix-vector product's)."""
    if blocks and not fits_registers():
        pytest.skip("the register blocks need AVX-512")
    rng = np.random.default_rng(10)
    a, b, c = _hard_chains(rng, *shape)
    host = fma_gemm(a, b, c, rounding, blocks, split)
    integer = mma_f64(a, b, c, rounding, host_fma=False)
    assert (host == integer).all(), f"{(host != integer).sum()} elements differ"


@pytest.mark.parametrize("shape, host", [((8, 4, 8), False), ((32, 32, 16), True), ((16, 64, 16), True)])
def test_mma_f64_takes_the_host_kernel_from_its_minimum_work(monkeypatch, shape, host):
    """By default the CPU's FMAs serve products of HOST_FMA_MIN_WORK fmas and more (x86),
    the integer kernel smaller ones, whose start costs less."""
    from fastmma.kernels import fma64

    taken = []
    monkeypatch.setattr(fma64, "fma_gemm", lambda a, b, c, r, blocks, split: taken.append("host"))
    monkeypatch.setattr(fma64, "mma_f64_kernel", lambda a, b, c, r: taken.append("integer"))
    m, k, n = shape
    assert (m * k * n >= fma64.HOST_FMA_MIN_WORK) == host
    mma_f64(*(np.zeros(s, np.uint64) for s in ((m, k), (k, n), (m, n))), RN)
    assert taken == ["host" if host and HAS_MXCSR else "integer"]


def test_mma_f64_accepts_rounding_names():
    rng = np.random.default_rng(7)
    a, b, c = (_random_bits(rng, s) for s in ((8, 4), (4, 8), (8, 8)))
    for name, code in ROUNDINGS.items():
        np.testing.assert_array_equal(mma_f64(a, b, c, name), mma_f64(a, b, c, code))


@pytest.mark.parametrize(
    "a, b, c, rounding",
    [
        (np.zeros((8, 4)), np.zeros((4, 8), np.uint64), np.zeros((8, 8), np.uint64), RN),  # float64
        (np.zeros((8, 4), np.uint64), np.zeros((5, 8), np.uint64), np.zeros((8, 8), np.uint64), RN),
        (np.zeros((8, 4), np.uint64), np.zeros((4, 8), np.uint64), np.zeros((8, 7), np.uint64), RN),
        (np.zeros((8, 4), np.uint64), np.zeros((4, 8), np.uint64), np.zeros((8, 8), np.uint64), 4),
        (np.zeros((8, 4), np.uint64), np.zeros((4, 8), np.uint64), np.zeros((8, 8), np.uint64), "rx"),
    ],
)
def test_mma_f64_rejects_bad_operands(a, b, c, rounding):
    with pytest.raises(OperandError):
        mma_f64(a, b, c, rounding)
