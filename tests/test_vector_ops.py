"""The LLVM operations of ``fastmma.kernels.vector_ops``, on values worked out by hand."""

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from fastmma.kernels.vector_ops import (F16_CONVERSIONS, add_i32, as_element_of, clz_u32, copy_run,
                                        f32_from_f16_bits, f32_from_f16_bits_by_integers, fma_f32, ldexp_f32,
                                        lshr_i32, shl_i32, sub_i32)


@njit
def _sub(a, b):
    return sub_i32(np.int32(a), np.int32(b))


@njit
def _add(a, b):
    return add_i32(np.int32(a), np.int32(b))


@njit
def _fma(a, b, c):
    return fma_f32(np.float32(a), np.float32(b), np.float32(c))


@njit
def _clz(x):
    return clz_u32(np.uint32(x))


@njit
def _as_element_of(x, like):
    return as_element_of(x, like)


@njit
def _ldexp(x, e):
    return ldexp_f32(np.float32(x), np.int32(e))


@njit
def _shifts(x, n):
    return shl_i32(np.int32(x), np.int32(n)), lshr_i32(np.int32(x), np.int32(n))


def test_shifts_stay_in_32_bits():
    assert _shifts(0x12345678, 4) == (0x23456780, 0x01234567)
    assert _shifts(-1, 4) == (-16, 0x0FFFFFFF)  # logical: zeros come in at the top
    assert _shifts(-2**31, 31) == (0, 1)
    assert _shifts(3, 31) == (-2**31, 0)  # the bit shifted out of 32 is lost, not kept in int64


def test_sub_i32_wraps_in_32_bits():
    assert _sub(7, 9) == -2
    assert _sub(-2**31, 1) == 2**31 - 1  # int64 arithmetic would give -2^31 - 1
    assert _sub(2**31 - 1, -1) == -2**31


def test_clz_u32_counts_leading_zero_bits():
    assert [_clz(x) for x in (0, 1, 2, 0xFFFF, 0x10000, 2**31, 2**32 - 1)] == [32, 31, 30, 16, 15, 0, 0]


def test_ldexp_f32_is_exact_and_overflows_to_infinity():
    assert _ldexp(1.5, 3) == 12.0
    assert _ldexp(1.0, -149) == np.float32(2.0**-149)  # the smallest subnormal
    assert _ldexp(1.0, 128) == np.inf
    assert _ldexp(-1.0, 200) == -np.inf


def test_as_element_of_converts_to_the_arrays_type_wrapping():
    for dtype, x, want in [(np.int8, 100, 100), (np.int8, -128, -128), (np.int8, 200, -56), (np.int8, -129, 127),
                           (np.int16, 200, 200), (np.int16, 40000, 40000 - 65536)]:
        assert _as_element_of(x, np.zeros(1, dtype)) == want


def test_add_i32_wraps_in_32_bits():
    assert _add(2**31 - 1, 1) == -2**31
    assert _add(-2**31, -1) == 2**31 - 1
    assert _add(-5, 3) == -2


def test_fma_f32_rounds_once():
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the product alone rounds the 2^-24 away (to even)
    x = 1 + 2.0**-12
    assert _fma(x, x, -1.0) == np.float32(2.0**-11 + 2.0**-24)
    assert np.float32(np.float32(x) * np.float32(x)) - np.float32(1.0) == np.float32(2.0**-11)
    assert _fma(3.0, 5.0, 7.0) == np.float32(22.0)


@njit
def _copy_runs(dst, di, src, si):
    copy_run(dst, di, src, si, 4)
    copy_run(dst, di + 4, src, si + 100, 16)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.float32])
def test_copy_run_copies_exactly_its_run(dtype):
    """A run of 4 and one of 16 (literals) land at their places; every other element of the
    destination keeps its value, whatever the runs' alignment (offsets 3 and 101)."""
    src = np.arange(300).astype(dtype)
    dst = np.full(40, 7, dtype)
    _copy_runs(dst, 3, src, 101)
    want = np.full(40, 7, dtype)
    want[3:7] = np.arange(101, 105)
    want[7:23] = np.arange(201, 217) % 256 if dtype == np.uint8 else np.arange(201, 217)
    assert np.array_equal(dst, want)


def test_copy_run_needs_a_literal_length_and_one_dtype():
    @njit
    def by_variable(dst, src, n):
        copy_run(dst, 0, src, 0, n)

    @njit
    def across_dtypes(dst, src):
        copy_run(dst, 0, src, 0, 4)

    with pytest.raises(TypingError):
        by_variable(np.zeros(8, np.uint16), np.zeros(8, np.uint16), 4)
    with pytest.raises(TypingError):
        across_dtypes(np.zeros(8, np.uint16), np.zeros(8, np.uint32))


@njit
def _halves(bits, by_integers, out):
    for i in range(len(bits)):
        out[i] = f32_from_f16_bits_by_integers(bits[i]) if by_integers else f32_from_f16_bits(bits[i])


def test_f32_from_f16_bits_of_every_half():
    """Both ways of widening a half (the CPU's conversion where it has one) against numpy's
    float16 values, for all 65536 patterns held in uint16 and in int32 with high bits set
    (ignored): equal bits for every non-NaN, a NaN for each NaN."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    want = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    for held in (bits, bits.astype(np.int32) | np.int32(-(1 << 16))):
        for by_integers in (True, False):
            got = np.zeros(len(bits), np.float32)
            _halves(held, by_integers, got)
            assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
            assert np.isnan(got[nan]).all()
    assert f32_from_f16_bits is not f32_from_f16_bits_by_integers or not F16_CONVERSIONS
