"""The three ways to compute pass 2 of the float rule, timed alone (one thread, data in L1).

    python bench/pass2_lanes.py

Pass 2 sums one group's terms ``trunc(a_k * b_k * S)`` for every output.  The f16, bf16 and
tf32 GEMMs take it by conversions (``fused_gemm._pass2``: multiply, scale, truncating
conversion, integer add per 16 products); the fp8 GEMMs by chains of fused multiply-adds
onto a float32 magic number (``register_blocks.fma_block``), which f16 terms overflow: they
need 27 bits of the grid, a float32 holds 24.  The third is the chain in float64 lanes, which
would hold f16 terms: this script times all three per product, to show what the float64
chain could save before its count and its per-group costs (magic numbers and sums in
8-lane vectors) are paid.  Nothing here is exact GEMM output: the operands are random and
the sums are thrown away.
"""

from __future__ import annotations

import time

import fastmma  # noqa: F401  (first: numba then makes 512-bit vectors where the CPU has them)
import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from fastmma.kernels import register_blocks as rb
from fastmma.kernels.fused_gemm import _pass2

G, NB, MB, REPS = 16, 256, 64, 4000  # f16's group, the kernel's column and row blocks
_V8D = ir.VectorType(ir.DoubleType(), 8)


@intrinsic
def fma_block_f64(typingctx, a, b, acc, ra, j0, kn):
    """``register_blocks.fma_block`` in 8 float64 lanes: the same block of rows and
    vectors, so half as many columns."""
    return rb._typer(types.float64, _V8D, rb.VECTORS, lambda c: c, rb._fma_step, a, b, acc, ra, j0, kn)


@njit
def conversions(av, bp, S, T, reps):
    for _ in range(reps):
        for i in range(MB):
            _pass2(16, 16, 0, NB, av, i, 0, bp, S, T)


@njit
def chains_f32(av, bp, F, reps):
    for _ in range(reps):
        for r0 in range(0, MB, rb.ROWS):
            for j0 in range(0, NB, rb.COLUMNS):
                rb.fma_block(av, bp, F, r0, j0, G)


@njit
def chains_f64(av, bp, F, reps):
    for _ in range(reps):
        for r0 in range(0, MB, rb.ROWS):
            for j0 in range(0, NB, rb.COLUMNS // 2):
                fma_block_f64(av, bp, F, r0, j0, G)


def per_product(cases: dict, rounds: int = 7) -> dict:
    """Each case's best time over ``rounds`` rounds, in picoseconds per product; the rounds
    take the cases in turn, so that a neighbour's burst of load meets them alike."""
    best = dict.fromkeys(cases, float("inf"))
    for fn, *args in cases.values():
        fn(*args[:-1], 1)  # compile
    for _ in range(rounds):
        for name, (fn, *args) in cases.items():
            best[name] = min(best[name], _seconds(fn, *args))
    return {name: s / (REPS * MB * NB * G) * 1e12 for name, s in best.items()}


def _seconds(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def main() -> None:
    numba.set_num_threads(1)
    rng = np.random.default_rng(0)
    av = rng.standard_normal((MB, G)).astype(np.float32)
    bp = rng.standard_normal((G, NB)).astype(np.float32)
    times = per_product({
        "conversions, 16 float32 lanes (f16, bf16, tf32)":
            (conversions, av, bp, np.full(NB, 2.0**10, np.float32), np.zeros(NB, np.int32), REPS),
        "fused multiply-adds, 16 float32 lanes (fp8)":
            (chains_f32, av, bp, np.zeros((rb.ROWS, NB), np.float32), REPS),
        "fused multiply-adds, 8 float64 lanes":
            (chains_f64, av.astype(np.float64), bp.astype(np.float64), np.zeros((rb.ROWS, NB)), REPS),
    })
    base = next(iter(times.values()))
    for name, ps in times.items():
        print(f"{name:50s} {ps:6.1f} ps per product  {ps / base:5.2f}x")


if __name__ == "__main__":
    main()
