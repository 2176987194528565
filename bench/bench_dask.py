"""Scaling of fastmma.dask over local worker processes: a 4096^3 f16 GEMM (m64n256k16.f32.f16.f16).

Run:  pip install -e ".[dask,test]" && python -m pytest bench/bench_dask.py -q -s
      (FASTMMA_BENCH_DASK_SIZE=2048 for a quicker run)

Cases, each timed with pytest-benchmark (best of the rounds):

* ``in-process``: ``fastmma.matmul`` on one numba thread, the baseline;
* ``1x1``, ``2x1``: ``run_gemm_on_cluster`` (what ``fastmma gemm --scheduler`` runs: connect,
  scatter the panels, 16 output blocks of 1024 x 1024, gather) on a ``LocalCluster`` of 1 or 2
  worker processes of 1 thread each (one numba thread per task);
* ``1x2``: one worker process of 2 threads (block tasks run one at a time on 2 numba threads),
  numba's own threading for comparison.

Every result is checked bit for bit against the in-process one.  Printed: seconds, G
multiply-adds/s, and ``scaling = t(1x1) / t(2x1)``.  On a 2-core machine expect well under 2:
the two workers share the cores with the scheduler, the client and the data transfers (and
the cores may be hyperthreads).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fastmma
import fastmma.dask as fdask

pytest.importorskip("dask.array", reason='dask is not installed: pip install -e ".[dask,test]"')
pytest.importorskip("distributed", reason='distributed is not installed: pip install -e ".[dask,test]"')

SIZE = int(os.environ.get("FASTMMA_BENCH_DASK_SIZE", "4096"))
TEXT = "m64n256k16.f32.f16.f16"
BLOCK = max(1, SIZE // 4)  # 16 output blocks
SECONDS: dict[str, float] = {}
RESULT: dict[str, np.ndarray] = {}


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((SIZE, SIZE)).astype(np.float16)
    B = rng.standard_normal((SIZE, SIZE)).astype(np.float16)
    return A, B


def _report(benchmark, capsys, label):
    t = SECONDS[label] = benchmark.stats.stats.min
    benchmark.extra_info.update(seconds=t, size=SIZE)
    line = (f"\n{label:10s} {SIZE}^3 f16: {t:7.2f} s  {SIZE ** 3 / t / 1e9:6.2f} G multiply-adds/s"
            f"  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    if "1x1" in SECONDS and "2x1" in SECONDS and label == "2x1":
        scaling = SECONDS["1x1"] / SECONDS["2x1"]
        benchmark.extra_info["scaling"] = scaling
        line += f"\nscaling 2 workers / 1 worker: {scaling:4.2f}x (ideal 2.00x)"
    with capsys.disabled():
        print(line)


def test_in_process(benchmark, capsys, operands):
    A, B = operands

    def run():
        with fdask.numba_threads(1):
            return fastmma.matmul(A, B, instruction=TEXT)
    fastmma.matmul(A[:64, :64], B[:64, :64], instruction=TEXT)  # kernels loaded before the clock starts
    RESULT["want"] = benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    _report(benchmark, capsys, "in-process")


@pytest.mark.parametrize("workers,threads", [(1, 1), (2, 1), (1, 2)], ids=["1x1", "2x1", "1x2"])
def test_local_cluster(benchmark, capsys, operands, workers, threads):
    from distributed import Client, LocalCluster

    A, B = operands
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        fdask.warmup(client, [TEXT])  # kernels loaded before the clock starts
        D = benchmark.pedantic(fdask.run_gemm_on_cluster, args=(A, B),
                               kwargs={"instruction": TEXT, "scheduler": cluster.scheduler_address, "block": BLOCK},
                               rounds=2, iterations=1, warmup_rounds=0)
    if "want" in RESULT:
        assert np.array_equal(D.view(np.uint32), RESULT["want"].view(np.uint32))
    _report(benchmark, capsys, f"{workers}x{threads}")
