"""fastmma.matmul beside numpy float32 matmul (and MMA-Sim where installed), same run.

    python -m pytest bench/bench_matmul.py --benchmark-columns=min,mean --ratio-table bench/results.md

Each case times ``fastmma.matmul`` with pytest-benchmark and numpy's ``A @ B`` on float32
arrays of the same shape in the same test, one numpy call before each fastmma round, and
records ``best fastmma time / best numpy time``.
"""

import ctypes
import ctypes.util
import os
import subprocess
import sys
import time

import ml_dtypes
import numpy as np
import pytest

import fastmma

SIZES = [int(s) for s in os.environ.get("FASTMMA_BENCH_SIZES", "512,1024,2048").split(",")]
CASES = {
    "f16->f32": ("m64n256k16.f32.f16.f16", np.float16),
    "bf16->f32": ("m64n256k16.f32.bf16.bf16", ml_dtypes.bfloat16),
    "tf32->f32": ("m64n256k8.f32.tf32.tf32", np.float32),
    "e4m3->f32": ("m64n256k32.f32.e4m3.e4m3", ml_dtypes.float8_e4m3fn),
    "s8->s32": ("m64n224k32.s32.s8.s8", np.int8),
}


#: M x K x N shapes that fill none of the kernels' blocks (64 rows, 256 columns, whole
#: groups of k): their last blocks are padded (README, Performance), and a slow remainder
#: loop there would show here, not at the cubes above
RAGGED = [(1000, 1000, 1000), (1024, 1024, 96)]

#: M x K x N shapes of few rows (a batch of 64 or 16 vectors, or one, against a weight
#: matrix): the threads share the output by blocks of rows, or up to 32 rows by chunks of
#: columns, and these show whether every thread has a share
FEW_ROWS = [(64, 2048, 4096), (16, 2048, 4096), (1, 4096, 4096)]

#: S x M x K x N: stacks of S small GEMMs (a simulator's warpgroup tiles, attention's batched
#: products), which the stack kernels share among the threads GEMM by GEMM (README, Performance)
STACKS = [(512, 64, 32, 256), (64, 128, 64, 128)]


def operands(dtype, shape, seed=0):
    """Random A (M x K) and B (K x N) of ``dtype`` for ``shape = (M, K, N)``, or stacks of S
    of them, (S, M, K) and (S, K, N), for ``shape = (S, M, K, N)``."""
    *s, m, k, n = shape
    rng = np.random.default_rng(seed)
    if dtype == np.int8:
        return (rng.integers(-128, 128, (*s, m, k)).astype(np.int8),
                rng.integers(-128, 128, (*s, k, n)).astype(np.int8))
    return rng.standard_normal((*s, m, k)).astype(dtype), rng.standard_normal((*s, k, n)).astype(dtype)


#: Seconds to wait after numpy's call before fastmma's round: OpenBLAS's worker threads keep
#: spinning for about a tenth of a second after a call, and on 2 cores they took half of
#: fastmma's time (512^3 f16: 5.6 ms after a pause of 0.25 s, 9-12 ms after none or 10 ms).
BLAS_SETTLE_SECONDS = 0.25


class PageFaults:
    """The process's minor page faults over a ``with`` block (``count``; 0 where the platform
    has no ``resource`` module).  A call whose scratch lands on freshly mapped pages pays a
    fault per 4 KiB page: fastmma's scratch pool (``fastmma.kernels.scratch``) is there so
    that its rounds pay none."""

    def __enter__(self):
        self.count, self._start = 0, _minor_faults()
        return self

    def __exit__(self, *exc):
        self.count = _minor_faults() - self._start


def _minor_faults() -> int:
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class InterleavedBaseline:
    """numpy's ``A @ B`` timed before each round of the benchmark (pytest-benchmark's
    ``setup``, which it does not time), so that both sides of a ratio meet the same state of
    a shared machine: timed one after the other, a noisy neighbour's burst can land on either
    alone (seen on a 2-core virtual machine: numpy's 2048^3 time ranged 56-85 ms in one run)."""

    def __init__(self, shape):
        self.x, self.y = operands(np.float32, shape, 1)
        self.x @ self.y  # warm-up
        self.best = float("inf")

    def __call__(self):
        t = time.perf_counter()
        self.x @ self.y
        self.best = min(self.best, time.perf_counter() - t)
        time.sleep(BLAS_SETTLE_SECONDS)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("case", list(CASES))
def bench_matmul(benchmark, record_ratio, case, size):
    _beside_numpy(benchmark, record_ratio, case, (size, size, size), f"{size}^3", max(7, (2048 // size) ** 2))


@pytest.mark.parametrize("shape", RAGGED, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", list(CASES))
def bench_matmul_ragged(benchmark, record_ratio, case, shape):
    """:func:`bench_matmul` on the shapes of :data:`RAGGED`."""
    _beside_numpy(benchmark, record_ratio, case, shape, "x".join(map(str, shape)), 7)


@pytest.mark.parametrize("shape", FEW_ROWS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", list(CASES))
def bench_matmul_few_rows(benchmark, record_ratio, case, shape):
    """:func:`bench_matmul` on the shapes of :data:`FEW_ROWS`."""
    _beside_numpy(benchmark, record_ratio, case, shape, "x".join(map(str, shape)), 7)


@pytest.mark.parametrize("shape", STACKS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", list(CASES))
def bench_matmul_stack(benchmark, record_ratio, case, shape):
    """:func:`bench_matmul` on the stacks of :data:`STACKS`, beside numpy's stacked ``A @ B``."""
    _beside_numpy(benchmark, record_ratio, case, shape, "x".join(map(str, shape)), 7)


def _beside_numpy(benchmark, record_ratio, case, shape, label, rounds):
    """``fastmma.matmul`` of ``case`` on ``shape`` (M, K, N or S, M, K, N), each round after a numpy round
    (:class:`InterleavedBaseline`), and the ratio of the best times recorded as ``label``."""
    instruction, dtype = CASES[case]
    A, B = operands(dtype, shape)
    fastmma.matmul(A, B, instruction=instruction)  # compile or load the cached kernels
    numpy_round = InterleavedBaseline(shape)
    benchmark.pedantic(fastmma.matmul, args=(A, B), kwargs={"instruction": instruction}, setup=numpy_round,
                       rounds=rounds, iterations=1, warmup_rounds=1)
    baseline = numpy_round.best
    benchmark.extra_info.update(numpy_seconds=baseline, ratio=benchmark.stats.stats.min / baseline)
    record_ratio(case, label, benchmark.stats.stats.min, "numpy float32", baseline)


#: structured-sparse GEMMs (``fastmma.matmul_sp``, a k-loop of ``wgmma.mma_async.sp``, and of
#: ``mma.sp`` for fp8, whose rule differs): the dense M = K = N of the cube, half of K kept in
#: every chunk of a row
SPARSE_CASES = {
    "f16->f32 2:4": ("m64n256k32.f32.f16.f16", np.float16),
    "e4m3->f32 2:4": ("m64n256k64.f32.e4m3.e4m3", ml_dtypes.float8_e4m3fn),
    "e4m3->f32 2:4 mma.sp": ("mma.sp.sync.aligned.m16n8k64.row.col.f32.e4m3.e4m3.f32", ml_dtypes.float8_e4m3fn),
    "s8->s32 2:4": ("m64n224k64.s32.s8.s8", np.int8),
}
SPARSE_SIZES = [size for size in SIZES if size <= 1024]


def sparse_operands(dtype, n, seed=0):
    """A pruned to 2:4 (random places of each chunk of 4), as kept values and their columns, and B."""
    from fastmma.layout.sparse_metadata import compress

    A, B = operands(dtype, (n, n, n), seed)
    keep = np.argsort(np.random.default_rng(seed + 1).random((n, n // 4, 4)), axis=-1)[..., :2]
    mask = np.zeros((n, n // 4, 4), bool)
    np.put_along_axis(mask, keep, True, axis=-1)
    pruned = np.where(mask.reshape(n, n), A, np.zeros((), A.dtype)).astype(dtype)
    return (*compress(pruned, {np.int8: "s8", np.float16: "f16"}.get(dtype, "e4m3")), B)


@pytest.mark.parametrize("size", SPARSE_SIZES)
@pytest.mark.parametrize("case", list(SPARSE_CASES))
def bench_matmul_sparse(benchmark, record_ratio, case, size):
    """``fastmma.matmul_sp`` on a 2:4-pruned A, beside numpy's float32 product of the dense
    (pruned) A of the same M x K x N."""
    instruction, dtype = SPARSE_CASES[case]
    kept, columns, B = sparse_operands(dtype, size)
    fastmma.matmul_sp(kept, columns, B, instruction=instruction)  # compile or load the cached kernels
    numpy_round = InterleavedBaseline((size, size, size))
    benchmark.pedantic(fastmma.matmul_sp, args=(kept, columns, B), kwargs={"instruction": instruction},
                       setup=numpy_round, rounds=7, iterations=1, warmup_rounds=1)
    baseline = numpy_round.best
    benchmark.extra_info.update(numpy_seconds=baseline, ratio=benchmark.stats.stats.min / baseline)
    record_ratio(case, f"{size}^3", benchmark.stats.stats.min, "numpy float32 (dense)", baseline)


#: glibc ``mallopt`` settings that keep freed memory for reuse: M_MMAP_THRESHOLD (-3),
#: M_TRIM_THRESHOLD (-1), M_TOP_PAD (-2); MMA-Sim's tuned column (and bench_compat) runs with them
KEEP_FREED_MEMORY = ((-3, 32 << 20), (-1, 1 << 30), (-2, 64 << 20))


def keep_freed_memory():
    """This process's glibc allocator set to :data:`KEEP_FREED_MEMORY` (MMA-Sim timed in the
    benchmark's own process); elsewhere than glibc nothing."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "mallopt"):
        for option, value in KEEP_FREED_MEMORY:
            libc.mallopt(option, value)


MMASIM_SCRIPT = """
import ctypes, ctypes.util, sys, time
import numpy as np, torch
from mmasim.nv_ptx import WGMMA
n, instruction, dtype = int(sys.argv[1]), sys.argv[2], getattr(torch, sys.argv[3])
repeat, tuned = int(sys.argv[4]), sys.argv[5] == "tuned"
if tuned:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    assert all(libc.mallopt(opt, value) == 1 for opt, value in KEEP_FREED_MEMORY)
rng = np.random.default_rng(0)
A, B = (torch.from_numpy(rng.standard_normal((n, n)).astype(np.float32)).to(dtype) for _ in range(2))
C = torch.zeros((n, n), dtype=torch.float32)
sim = WGMMA("Hopper", instruction)
sim(A, B, C)
best = float("inf")
for _ in range(repeat):
    t = time.perf_counter()
    sim(A, B, C)
    best = min(best, time.perf_counter() - t)
print(best)
""".replace("KEEP_FREED_MEMORY", repr(KEEP_FREED_MEMORY))

#: The cases MMA-Sim models (it has no integer wgmma), with the torch dtype of its operands
#: (tf32 operands are float32 tensors, as fastmma takes them).
MMASIM_DTYPES = {"f16->f32": "float16", "bf16->f32": "bfloat16", "tf32->f32": "float32",
                 "e4m3->f32": "float8_e4m3fn"}


def mmasim_seconds(case, n, allocator):
    """MMA-Sim's best time for an n^3 GEMM of ``case`` (after one warm-up call), in a fresh
    process with glibc's default allocator or one ``tuned`` to keep freed memory: MMA-Sim's
    tensor temporaries otherwise come from fresh pages, which cost it up to 2.5x its time,
    and whether they do varies from one process to the next.  The best of 3 calls at 256^3,
    of 2 at 512^3 (a call takes seconds there, and one alone varied by a quarter: f16 tuned
    1.7-2.2 s on one machine)."""
    args = [str(n), CASES[case][0], MMASIM_DTYPES[case], "3" if n <= 256 else "2", allocator]
    out = subprocess.run([sys.executable, "-c", MMASIM_SCRIPT, *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return float(out.stdout)


#: fastmma's rounds beside MMA-Sim, at both sizes (30 of 512^3 take about a tenth of a second):
#: the best of 5 at 512^3 once came out at twice the best of 50 timed alone (f16, 5.0 ms
#: against 2.4 ms), a burst of load on the shared machine over every round
MMASIM_ROUNDS = 30
#: fastmma's untimed rounds before them: in some processes its first 10 to 60 calls of a
#: shape ran up to a quarter slower than the later ones (e4m3 256^3 307-327 us against
#: 254-263 us), and with one warm-up round the best of 30 was at times one of them (tf32
#: 256^3 443-451 us, 391 us after 30 warm-up rounds; e4m3 512^3 1950-1975 us, 1763 us)
MMASIM_WARMUP_ROUNDS = 30


@pytest.mark.parametrize("size", [256, 512])
@pytest.mark.parametrize("case", list(MMASIM_DTYPES))
def bench_against_mmasim(benchmark, record_speedup, case, size):
    pytest.importorskip("mmasim", reason="MMA-Sim is an optional comparison: pip install mmasim")
    pytest.importorskip("torch")
    instruction, dtype = CASES[case]
    A, B = operands(dtype, (size, size, size))
    with PageFaults() as faults:
        benchmark.pedantic(fastmma.matmul, args=(A, B), kwargs={"instruction": instruction},
                           rounds=MMASIM_ROUNDS, iterations=1, warmup_rounds=MMASIM_WARMUP_ROUNDS)
    ours = benchmark.stats.stats.min
    default, tuned = mmasim_seconds(case, size, "default"), mmasim_seconds(case, size, "tuned")
    benchmark.extra_info.update(mmasim_seconds=default, mmasim_tuned_seconds=tuned, speedup=default / ours,
                                speedup_tuned=tuned / ours,
                                page_faults_per_round=faults.count / (MMASIM_WARMUP_ROUNDS + MMASIM_ROUNDS))
    record_speedup(case, f"{size}^3", ours, default, tuned)


PEAK_SCRIPT = """
import sys, threading, time, ml_dtypes, numpy as np, fastmma
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
n, dtype, instruction = int(sys.argv[1]), getattr(ml_dtypes, sys.argv[2], None) or np.dtype(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
A = rng.standard_normal((n, n)).astype(dtype); B = rng.standard_normal((n, n)).astype(dtype)
fastmma.matmul(A[:256, :256], B[:256, :256], instruction=instruction)  # load the kernels
peak, done = [0], [False]
def watch():
    while not done[0]:
        peak[0] = max(peak[0], rss())
        time.sleep(0.0005)
before = rss()
t = threading.Thread(target=watch); t.start()
D = fastmma.matmul(A, B, instruction=instruction)
done[0] = True; t.join()
print(max(peak[0], rss()) - before, A.nbytes + B.nbytes + D.nbytes)
"""


@pytest.mark.parametrize("case, dtype, instruction", [
    ("f16->f32", "float16", "m64n256k16.f32.f16.f16"),
    ("e4m3->f32", "float8_e4m3fn", "m64n256k32.f32.e4m3.e4m3"),  # 1-byte inputs: the most added per input byte
])
def bench_peak_memory(record_memory, case, dtype, instruction):
    """Resident memory a 2048^3 GEMM adds (its output included), against the size of its
    inputs plus output."""
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, "2048", dtype, instruction], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    grown, base = map(int, out.stdout.split())
    record_memory(f"{case} 2048^3", grown, base)
    assert grown < 3 * base, (grown, base)
