"""The register-blocked loops of kernels.register_blocks against plain loops, on views."""

import numpy as np
import pytest
from numba import njit

from fastmma.kernels.register_blocks import (BYTE_COLUMNS, COLUMNS, COLUMNS64, ROWS, count_columns, fma_block,
                                              fma_block64)
from fastmma.kernels.vector_ops import fma_f32, fma_f64


@njit(cache=False)
def _fma_blocks(a, b, acc, ra, nb, kn):
    for j0 in range(0, nb, COLUMNS):
        fma_block(a, b, acc, ra, j0, kn)


@njit(cache=False)
def _fma_blocks64(a, b, acc, ra, nb, kn):
    for j0 in range(0, nb, COLUMNS64):
        fma_block64(a, b, acc, ra, j0, kn)


def _by_hand(fma):
    """The blocks' chains as plain loops, with the scalar ``fma``."""
    def chains(a, b, acc, ra, nb, kn):
        out = acc.copy()
        for q in range(ROWS):
            for j in range(nb):
                t = out[q, j]
                for k in range(kn):
                    t = fma(a[ra + q, k], b[k, j], t)
                out[q, j] = t
        return out

    return njit(cache=False)(chains)


#: (blocked loop, plain loop, columns of a block, element type)
FMA_BLOCKS = {"float32": (_fma_blocks, _by_hand(fma_f32), COLUMNS, np.float32),
              "float64": (_fma_blocks64, _by_hand(fma_f64), COLUMNS64, np.float64)}


@pytest.mark.parametrize("dtype", list(FMA_BLOCKS))
@pytest.mark.parametrize("ra, kn", [(0, 32), (5, 7), (3, 1), (2, 0)])
def test_fma_block_is_a_chain_of_fused_multiply_adds(ra, kn, dtype):
    """Each column's chain, in order, rounded once per step (values whose products need
    the fused rounding: a separate multiply and add would differ), on a view of B that
    starts inside a row; the columns past the blocks are not touched."""
    blocks, by_hand, columns, ftype = FMA_BLOCKS[dtype]
    rng = np.random.default_rng(kn)
    a = (rng.standard_normal((9, 40)) * 2.0 ** rng.integers(-30, 30, (9, 40))).astype(ftype)
    b_all = (rng.standard_normal((45, 2 * columns + 30)) * 2.0 ** rng.integers(-30, 30, (45, 2 * columns + 30)))
    b = b_all.astype(ftype)[3:3 + kn, 5:]
    acc = rng.standard_normal((ROWS, b.shape[1])).astype(ftype)
    got = acc.copy()
    blocks(a, b, got, ra, 2 * columns, kn)
    want = by_hand(a, b, acc, ra, 2 * columns, kn)
    assert np.array_equal(got[:, :2 * columns], want[:, :2 * columns])
    assert np.array_equal(got[:, 2 * columns:], acc[:, 2 * columns:])
    if kn:
        unfused = acc[:, :2 * columns].astype(ftype)
        for k in range(kn):
            unfused = unfused + a[ra:ra + ROWS, k:k + 1] * b[k, :2 * columns]
        assert not np.array_equal(got[:, :2 * columns], unfused)


@pytest.mark.parametrize("nb", [2 * BYTE_COLUMNS, 2 * BYTE_COLUMNS + BYTE_COLUMNS // 2])
@pytest.mark.parametrize("ra, kn", [(0, 32), (5, 7), (3, 1), (2, 0)])
def test_count_block_counts_the_sums_below_each_threshold(ra, kn, nb):
    """A's codes come as uint32 with the code in each of their four bytes; every 0/1 count
    and threshold, on a view of B that starts inside a row; whole blocks, and whole blocks
    and a half block (count_columns); the columns past the blocks are not touched."""
    rng = np.random.default_rng(kn + 100)
    a = rng.integers(0, 256, (9, 40)).astype(np.uint8)
    b = rng.integers(0, 256, (45, 3 * BYTE_COLUMNS + 30)).astype(np.uint8)[2:2 + kn, 3:]
    thresholds = rng.integers(0, 256, (ROWS, b.shape[1])).astype(np.uint8)
    got = thresholds.copy()
    count_columns(a.astype(np.uint32) * np.uint32(0x01010101), b, got, ra, nb, kn)
    sums = (a[ra:ra + ROWS, :kn, None].astype(np.int64) + b[None, :, :nb]) % 256  # [q, k, j]
    want = (sums < thresholds[:, None, :nb]).sum(axis=1)
    assert np.array_equal(got[:, :nb], want)
    assert np.array_equal(got[:, nb:], thresholds[:, nb:])


def test_fits_registers_reads_numbas_target_features(monkeypatch):
    from numba import config

    from fastmma.kernels.register_blocks import fits_registers

    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,+avx512f,+avx512bw")
    assert fits_registers()
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,-avx512f,-avx512bw")
    assert not fits_registers()


def test_count_block_compiles_for_avx2(tmp_path):
    """Where numba targets AVX2 (no 64-byte registers) the count block keeps its constant
    ones (the inline asm that hides them from LLVM needs one register for 64 bytes), and it
    still counts right: compiled and checked in a process of its own, for a Haswell core."""
    import os
    import subprocess
    import sys

    script = """
import numpy as np
from numba import njit
from fastmma.kernels.register_blocks import BYTE_COLUMNS, ROWS, count_block, fits_registers
assert not fits_registers()
@njit
def run(a, b, c):
    count_block(a, b, c, 0, 0, b.shape[0])
rng = np.random.default_rng(7)
a = rng.integers(0, 256, (ROWS, 5)).astype(np.uint8)
b = rng.integers(0, 256, (5, BYTE_COLUMNS)).astype(np.uint8)
t = rng.integers(0, 256, (ROWS, BYTE_COLUMNS)).astype(np.uint8)
got = t.copy()
run(a.astype(np.uint32) * np.uint32(0x01010101), b, got)
want = (((a[:, :, None].astype(np.int64) + b[None]) % 256) < t[:, None]).sum(axis=1)
assert np.array_equal(got, want)
print("ok")
"""
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="+avx,+avx2,+fma,+sse4.2,+popcnt,+bmi,+bmi2",
               NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
