"""fastmma.matmul beside numpy float32 matmul at 1, 2, 4, ... threads, up to the machine's cores.

    FASTMMA_BENCH_THREADS_SIZE=4096 python -m pytest bench/bench_threads.py -s

Each thread count runs in a process of its own, started with ``NUMBA_NUM_THREADS`` and the
BLAS libraries' thread variables set to it, since both thread pools read them once at start.
The process times numpy's ``A @ B`` on float32 arrays and ``fastmma.matmul`` on the case's
type (best of a few rounds each) and watches its resident memory during one more fastmma call.

Parallel efficiency at ``t`` threads is ``T(1) / (t * T(t))``; the table gives fastmma's,
BLAS's and their quotient, which issue 75 asks to be at least 0.8 at 16 threads and 4096^3.
"""

import json
import os
import subprocess
import sys

import pytest

SIZE = int(os.environ.get("FASTMMA_BENCH_THREADS_SIZE", "2048"))
ROUNDS = int(os.environ.get("FASTMMA_BENCH_THREADS_ROUNDS", "2"))
CORES = os.cpu_count() or 1
THREADS = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= CORES]
CASES = {
    "f16->f32": ("float16", "m64n256k16.f32.f16.f16"),
    "bf16->f32": ("bfloat16", "m64n256k16.f32.bf16.bf16"),
    "e4m3->f32": ("float8_e4m3fn", "m64n256k32.f32.e4m3.e4m3"),
    "s8->s32": ("int8", "m64n224k32.s32.s8.s8"),
}
THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS")

SCRIPT = """
import json, sys, threading, time, ml_dtypes, numpy as np, fastmma
n, dtype, instruction, rounds = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
dtype = getattr(ml_dtypes, dtype, None) or np.dtype(dtype)
rng = np.random.default_rng(0)
if np.dtype(dtype) == np.int8:
    A, B = (rng.integers(-128, 128, s).astype(np.int8) for s in ((n, n), (n, n)))
else:
    A, B = (rng.standard_normal(s).astype(dtype) for s in ((n, n), (n, n)))
Af, Bf = A.astype(np.float32), B.astype(np.float32)
def best(f):
    f()
    times = []
    for _ in range(rounds):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return min(times)
blas = best(lambda: Af @ Bf)
time.sleep(0.25)  # OpenBLAS's threads spin for a while after a call
ours = best(lambda: fastmma.matmul(A, B, instruction=instruction))
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
peak, done = [0], [False]
def watch():
    while not done[0]:
        peak[0] = max(peak[0], rss()); time.sleep(0.0005)
before = rss(); w = threading.Thread(target=watch); w.start()
D = fastmma.matmul(A, B, instruction=instruction)
done[0] = True; w.join()
print(json.dumps({"blas": blas, "fastmma": ours, "grown": max(peak[0], rss()) - before,
                  "base": A.nbytes + B.nbytes + D.nbytes}))
"""


def run_at(threads: int, dtype: str, instruction: str) -> dict:
    env = dict(os.environ, **{v: str(threads) for v in THREAD_VARIABLES})
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(SIZE), dtype, instruction, str(ROUNDS)],
                         capture_output=True, text=True, env=env, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(case: str, rows: dict) -> str:
    one = rows[1]
    lines = [f"{case}, {SIZE}^3, {CORES} cores",
             "| threads | numpy f32 s | fastmma s | ratio | BLAS efficiency | fastmma efficiency | quotient | peak / (inputs+output) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t, r in rows.items():
        eb, ef = one["blas"] / (t * r["blas"]), one["fastmma"] / (t * r["fastmma"])
        lines.append(f"| {t} | {r['blas']:.3f} | {r['fastmma']:.3f} | {r['fastmma'] / r['blas']:.2f} | {eb:.2f} | "
                     f"{ef:.2f} | {ef / eb:.2f} | {r['grown'] / r['base']:.2f} |")
    return "\n".join(lines)


@pytest.mark.parametrize("case", list(CASES))
def bench_thread_scaling(case, record_ratio, capsys):
    dtype, instruction = CASES[case]
    rows = {t: run_at(t, dtype, instruction) for t in THREADS}
    for t, r in rows.items():
        record_ratio(f"{case} {t} threads", f"{SIZE}^3", r["fastmma"], "numpy f32", r["blas"])
    text = table(case, rows)
    with capsys.disabled():
        print("\n" + text)
    if os.environ.get("FASTMMA_BENCH_THREADS_TABLE"):
        with open(os.environ["FASTMMA_BENCH_THREADS_TABLE"], "a") as f:
            f.write(text + "\n\n")
    assert all(r["grown"] < 3 * r["base"] for r in rows.values()), {t: (r["grown"], r["base"]) for t, r in rows.items()}
