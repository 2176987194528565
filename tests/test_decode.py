"""Float decoders checked against ml_dtypes / numpy on every code; integer codecs likewise."""

import math

import ml_dtypes
import numpy as np
import pytest
from numba import njit

from fastmma.formats import FORMATS, from_bits, get_format, to_bits
from fastmma.errors import OperandError
from fastmma.kernels.decode import FINITE, INF, NAN, ZERO, decode_float, float_params


@njit(cache=True)
def _decode_all(bits, e, m, bias, ieee, low):
    n = bits.size
    cls = np.empty(n, np.int64)
    val = np.empty(n, np.float64)
    for i in range(n):
        c, s, ex, sig = decode_float(bits[i], e, m, bias, ieee, low)
        cls[i] = c
        v = math.ldexp(np.float64(sig), ex - m) if c == FINITE else 0.0
        val[i] = -v if s else v
    return cls, val


def _as_f64(values: np.ndarray) -> np.ndarray:
    """``values`` as float64; signalling NaNs among them are quietened without numpy's warning."""
    with np.errstate(invalid="ignore"):
        return values.astype(np.float64)


def _check(name, codes, reference_values):
    fmt = get_format(name)
    cls, val = _decode_all(codes, *float_params(fmt))
    ref = np.asarray(reference_values, dtype=np.float64)
    assert np.array_equal(cls == NAN, np.isnan(ref))
    assert np.array_equal(cls == INF, np.isinf(ref))
    assert np.array_equal(cls == ZERO, ref == 0)
    finite = cls == FINITE
    assert np.array_equal(val[finite], ref[finite])
    zeros = cls == ZERO  # the sign of zero is kept in the code; value 0 either way
    assert np.all(val[zeros] == 0)


@pytest.mark.parametrize("name,dtype,nbits", [
    ("f16", np.float16, 16), ("bf16", ml_dtypes.bfloat16, 16),
    ("e4m3", ml_dtypes.float8_e4m3fn, 8), ("e5m2", ml_dtypes.float8_e5m2, 8),
])
def test_every_code_matches_ml_dtypes(name, dtype, nbits):
    storage = np.uint16 if nbits == 16 else np.uint8
    codes = np.arange(1 << nbits, dtype=np.uint64).astype(storage)
    _check(name, codes.astype(np.uint64), _as_f64(codes.view(dtype)))


def test_every_tf32_code_ignores_the_low_13_bits():
    top = np.arange(1 << 19, dtype=np.uint32) << np.uint32(13)
    rng = np.random.default_rng(0)
    low = rng.integers(0, 1 << 13, size=top.size, dtype=np.uint32)
    # tf32 is the float32 with the low 13 bits cleared, whatever they held
    _check("tf32", (top | low).astype(np.uint64), _as_f64(top.view(np.float32)))


def test_f32_and_f64_samples_match_numpy():
    rng = np.random.default_rng(1)
    b32 = np.concatenate([rng.integers(0, 1 << 32, 200_000, dtype=np.uint64),
                          np.array([0, 1, 0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000, 0x007FFFFF], np.uint64)])
    _check("f32", b32, _as_f64(b32.astype(np.uint32).view(np.float32)))
    b64 = rng.integers(0, 1 << 63, 200_000, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, 200_000, dtype=np.uint64)
    specials = np.array([0, 1, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000001, 0x000FFFFFFFFFFFFF], np.uint64)
    b64 = np.concatenate([b64, specials])
    _check("f64", b64, b64.view(np.float64))


@pytest.mark.parametrize("name,lo,hi", [("s8", -128, 127), ("u8", 0, 255), ("s4", -8, 7), ("u4", 0, 15), ("b1", 0, 1)])
def test_integer_codecs_round_trip_every_value(name, lo, hi):
    fmt = get_format(name)
    values = np.arange(lo, hi + 1).astype(fmt.value_dtype)
    bits = to_bits(values, fmt)
    assert bits.dtype == fmt.storage
    assert np.all(bits < (1 << fmt.bits))
    assert np.array_equal(from_bits(bits, fmt), values)
    # two's complement: the bit pattern of -1 is all ones
    if lo < 0:
        assert bits[values.tolist().index(-1)] == (1 << fmt.bits) - 1


def test_sub_byte_values_out_of_range_are_refused():
    with pytest.raises(OperandError, match=r"s4 values, which must lie in \[-8, 7\]"):
        to_bits(np.array([0, 8], np.int8), "s4")
    with pytest.raises(OperandError, match="u4"):
        to_bits(np.array([16], np.uint8), "u4")


def test_wrong_float_dtype_is_refused_with_the_expected_dtype_named():
    with pytest.raises(OperandError, match="bfloat16"):
        to_bits(np.zeros(3, np.float16), "bf16", "A")


def test_every_format_has_a_storage_wide_enough():
    for fmt in FORMATS.values():
        assert 8 * fmt.storage.itemsize >= fmt.bits
