"""Speed of int_gemm / popc_gemm beside numpy float32 ``A @ B`` of the same shape.

Run:  python -m pytest bench/bench_int_gemm.py -q -s     (or: python bench/bench_int_gemm.py)

Each case times the fast kernel with pytest-benchmark, times numpy's sgemm of the same
(M, K, N) in the same process (best of a few), and prints ``ratio = ours / numpy``.
The b1 cases use K = 8 N (bits are cheap; one byte per element on input).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from fastmma.kernels.int_gemm import int_gemm, popc_gemm

SIZES = [512, 1024, 2048]
# name: (a_width, a_signed, b_width, b_signed, group)
INT_KINDS = {"s8": (8, True, 8, True, 32), "u8": (8, False, 8, False, 32),
             "s4": (4, True, 4, True, 64)}


def _rounds(n):
    """More rounds for small sizes, whose best time is easily hit by a busy machine."""
    return max(3, 3 * (2048 // n) ** 2)


def _numpy_seconds(m, k, n, repeat=3):
    rng = np.random.default_rng(0)
    x = rng.random((m, k), dtype=np.float32)
    y = rng.random((k, n), dtype=np.float32)
    x @ y
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        x @ y
        best = min(best, time.perf_counter() - t)
    return best


def _report(benchmark, capsys, label, m, k, n):
    ours = benchmark.stats.stats.min
    ref = _numpy_seconds(m, k, n, _rounds(m))
    benchmark.extra_info.update(numpy_s=ref, ratio=ours / ref)
    with capsys.disabled():
        print(f"\n{label:18s} {m}x{k}x{n}: {ours * 1e3:8.1f} ms   numpy f32 {ref * 1e3:8.1f} ms"
              f"   ratio {ours / ref:5.2f}")


@pytest.mark.parametrize("satfinite", [True, False], ids=["sat", "wrap"])
@pytest.mark.parametrize("kind", list(INT_KINDS))
@pytest.mark.parametrize("n", SIZES)
def test_int_gemm_speed(benchmark, capsys, n, kind, satfinite):
    aw, asg, bw, bsg, group = INT_KINDS[kind]
    rng = np.random.default_rng(1)
    a = rng.integers(0, 1 << aw, (n, n), dtype=np.uint8)
    b = rng.integers(0, 1 << bw, (n, n), dtype=np.uint8)
    c = rng.integers(-(1 << 31), 1 << 31, (n, n), dtype=np.int64).astype(np.int32)
    out = np.empty((n, n), np.int32)
    int_gemm(a, b, c, out, aw, asg, bw, bsg, group, satfinite, True)  # compile / load cache
    benchmark.pedantic(int_gemm, (a, b, c, out, aw, asg, bw, bsg, group, satfinite, True),
                       rounds=_rounds(n), iterations=1)
    _report(benchmark, capsys, f"{kind} {'sat' if satfinite else 'wrap'} g{group}", n, n, n)


@pytest.mark.parametrize("xor", [False, True], ids=["and", "xor"])
@pytest.mark.parametrize("n", SIZES)
def test_popc_gemm_speed(benchmark, capsys, n, xor):
    k = 8 * n
    rng = np.random.default_rng(2)
    a = rng.integers(0, 2, (n, k), dtype=np.uint8)
    b = rng.integers(0, 2, (k, n), dtype=np.uint8)
    c = np.zeros((n, n), np.int32)
    out = np.empty((n, n), np.int32)
    popc_gemm(a, b, c, out, xor, True)
    benchmark.pedantic(popc_gemm, (a, b, c, out, xor, True), rounds=_rounds(n), iterations=1)
    _report(benchmark, capsys, f"b1 {'xor' if xor else 'and'}", n, k, n)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
