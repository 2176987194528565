"""The scratch pool (fastmma.kernels.scratch): buffers lent, given back, lent again, and GEMMs
that run on whatever an earlier call left in them."""

import threading

import ml_dtypes
import numpy as np
import pytest

import fastmma
import fastmma.kernels.fused_gemm as fused_gemm
from fastmma.kernels.scratch import ALIGN, ScratchPool

from fastmma.gemm import resolve_instruction
from test_matmul import bits, chained


def _address(x):
    return x.__array_interface__["data"][0]


def test_a_buffer_lent_starts_on_a_cache_line_and_has_the_size_asked():
    pool = ScratchPool()
    with pool.borrow(0) as buf:
        assert buf.dtype == np.uint8 and buf.shape == (0,)
    for n in (1, 63, 64, 1000, 1 << 20):
        with pool.borrow(n) as buf:
            assert buf.dtype == np.uint8 and buf.shape == (n,)
            assert _address(buf) % ALIGN == 0
            buf[:] = 7  # writable end to end


def test_a_buffer_given_back_is_lent_again():
    pool = ScratchPool()
    with pool.borrow(1 << 16) as first:
        where = _address(first)
    assert pool.kept_bytes() >= 1 << 16
    with pool.borrow(1 << 15) as again:  # smaller: the same memory serves
        assert _address(again) == where
    with pool.borrow(1 << 17) as bigger:  # does not fit: a new buffer, the old one stays free
        assert _address(bigger) != where
        assert pool.kept_bytes() >= 1 << 16
    assert pool.kept_bytes() >= (1 << 16) + (1 << 17)


def test_the_smallest_free_buffer_that_fits_is_lent():
    pool = ScratchPool()
    with pool.borrow(1 << 20) as big, pool.borrow(1 << 12) as small:
        where_big, where_small = _address(big), _address(small)
    with pool.borrow(1000) as buf:
        assert _address(buf) == where_small
    with pool.borrow(5000) as buf:
        assert _address(buf) == where_big


def test_buffers_lent_at_once_do_not_overlap():
    pool = ScratchPool()
    with pool.borrow(4096):
        pass
    with pool.borrow(4096) as a, pool.borrow(4096) as b:
        a[:] = 1
        b[:] = 2
        assert (a == 1).all() and (b == 2).all()
        assert abs(_address(a) - _address(b)) >= 4096


def test_the_pool_keeps_at_most_its_bytes():
    pool = ScratchPool(keep_bytes=10_000)
    with pool.borrow(20_000):  # larger than the pool keeps: dropped when given back
        pass
    assert pool.kept_bytes() == 0
    with pool.borrow(4000) as a, pool.borrow(4000) as b, pool.borrow(4000) as c:
        where = [_address(x) for x in (a, b, c)]
    assert pool.kept_bytes() <= 10_000
    with pool.borrow(3000) as x, pool.borrow(3000) as y:
        assert {_address(x), _address(y)} == set(where[:2])  # c, given back first, was dropped
    pool.clear()
    assert pool.kept_bytes() == 0


def test_arrays_are_carved_on_cache_lines_and_kept_for_the_next_call():
    """``arrays(specs)`` lends the arrays of ``specs`` from one buffer, each starting on a cache
    line, apart from each other; the next loan of the same specs from that buffer gets the
    same arrays again (not carved anew), other specs other arrays of the same memory."""
    pool = ScratchPool()
    specs = ((np.dtype(np.float32), (3, 5)), (np.dtype(np.int8), (7,)), (np.dtype(np.uint32), (2, 0, 4)))
    with pool.arrays(specs) as first:
        assert [(x.dtype, x.shape) for x in first] == list(specs)
        assert all(_address(x) % ALIGN == 0 for x in first)
        first[0][...] = 1.5
        first[1][...] = -3
        assert (first[0] == 1.5).all() and (first[1] == -3).all()  # no overlap
        where = _address(first[0])
    with pool.arrays(specs) as again:
        assert all(x is y for x, y in zip(again, first))
    other = ((np.dtype(np.int16), (10,)),)
    with pool.arrays(other) as third:
        assert _address(third[0]) == where and third[0].shape == (10,)
    with pool.arrays(specs) as first_again, pool.arrays(specs) as second:  # two at once: two buffers
        assert _address(first_again[0]) != _address(second[0])


def test_threads_each_get_their_own_buffer():
    pool = ScratchPool()
    errors = []

    def work(tag):
        for _ in range(200):
            with pool.borrow(4096 + tag) as buf:
                buf[:] = tag
                if not (buf == tag).all():
                    errors.append(tag)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


POISONS = [0xFF, 0x7F, 0x80, 0x00]


@pytest.mark.parametrize("text,dtype", [
    ("m64n64k16.f32.f16.f16", np.float16), ("m64n64k16.f16.f16.f16", np.float16),
    ("m64n64k16.f32.bf16.bf16", ml_dtypes.bfloat16), ("m64n64k8.f32.tf32.tf32", np.float32),
    ("m64n64k32.f32.e4m3.e4m3", ml_dtypes.float8_e4m3fn), ("m64n64k32.f16.e5m2.e4m3", ml_dtypes.float8_e5m2),
])
@pytest.mark.parametrize("shape", [(130, 96, 70), (256, 64, 200), (20, 64, 300)])
@pytest.mark.parametrize("poison", POISONS)
def test_gemms_on_scratch_an_earlier_call_filled(monkeypatch, text, dtype, shape, poison):
    """The blocked kernels read nothing of their scratch before writing it: with every byte
    of the pool's buffers set to ``poison`` (NaN, inf and other patterns in every lane
    width), a GEMM still equals the instructions chained tile by tile, and it did borrow
    those buffers."""
    pool = ScratchPool()
    poisoned = []
    for size in (1 << 12, 1 << 16, 1 << 20, 1 << 23):
        with pool.borrow(size) as buf:
            buf[:] = poison
            poisoned.append(buf)  # a view: the pool keeps the memory
    monkeypatch.setattr(fused_gemm.drive, "POOL", pool)
    inst = resolve_instruction(text)
    M, N, K = shape
    rng = np.random.default_rng(poison + M)
    A = rng.standard_normal((M, K)).astype({"e5m2": ml_dtypes.float8_e5m2}.get(inst.atype, dtype))
    B = rng.standard_normal((K, N)).astype({"e4m3": ml_dtypes.float8_e4m3fn}.get(inst.btype, dtype))
    C = rng.standard_normal((M, N)).astype(np.float32 if inst.ctype == "f32" else np.float16)
    got = fastmma.matmul(A, B, C, instruction=text)
    assert np.array_equal(bits(got), bits(chained(inst, A, B, C)))
    assert any((p != poison).any() for p in poisoned)
