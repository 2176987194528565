"""Speed of fastmma.compat.mmasim.WGMMA beside MMA-Sim's own WGMMA (when mmasim is installed).

Run:  python -m pytest bench/bench_compat.py -q -s      (needs: pip install ".[compat]")

Each case times our drop-in with pytest-benchmark on torch tensors (conversions included),
times MMA-Sim's ``WGMMA`` on the same tensors in the same process (best of a few), checks
that the two results are bit-identical, and prints ``speed-up = mmasim / ours``.  The
process keeps freed memory for reuse (glibc ``mallopt``, as ``bench_matmul``'s tuned
column): MMA-Sim's torch temporaries would otherwise land on freshly mapped pages in some
processes and not others, which changes its time up to 2.5x.
"""

from __future__ import annotations

import time

import pytest

mmasim = pytest.importorskip("mmasim", reason="MMA-Sim not installed (pip install '.[compat]')")
torch = pytest.importorskip("torch", reason="torch not installed")
from mmasim.nv_ptx import WGMMA as MmaSimWGMMA  # noqa: E402

from bench_matmul import keep_freed_memory  # noqa: E402
from fastmma.compat.mmasim import WGMMA  # noqa: E402


keep_freed_memory()
ST = "m64n256k16.f32.f16.f16"
CASES = {"one m64n256k16 call": (64, 256, 16), "256^3 GEMM": (256, 256, 256)}


def _operands(m, n, k):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(m, k, generator=g).half(), torch.randn(k, n, generator=g).half(),
            torch.randn(m, n, generator=g))


def _best_seconds(fn, args, repeat):
    fn(*args)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t)
    return best


@pytest.mark.parametrize("case", list(CASES))
def test_wgmma_speed_vs_mmasim(benchmark, capsys, case):
    m, n, k = CASES[case]
    args = _operands(m, n, k)
    ours, ref = WGMMA("Hopper", ST), MmaSimWGMMA("Hopper", ST)
    got = ours(*args)  # compile / load the numba cache
    assert torch.equal(got.view(torch.int32), ref(*args).view(torch.int32))
    benchmark.pedantic(ours, args, rounds=20, iterations=1, warmup_rounds=2)
    mine = benchmark.stats.stats.min
    theirs = _best_seconds(ref, args, repeat=5)
    benchmark.extra_info.update(mmasim_s=theirs, speedup=theirs / mine)
    with capsys.disabled():
        print(f"\n{ST} {case} ({m}x{k}x{n}): fastmma {mine * 1e3:8.2f} ms   mmasim {theirs * 1e3:8.2f} ms"
              f"   speed-up {theirs / mine:6.1f}x")
