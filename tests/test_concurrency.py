"""Thread safety and determinism: the same inputs give the same bits from concurrent threads,
with any number of numba threads, and in another process."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastmma
from fastmma import wgmma
from fastmma.layout.wgmma_fragments import pack_d

JOBS = [
    ("m64n64k16.f32.f16.f16", np.float16), ("m64n64k16.f16.f16.f16", np.float16),
    ("m64n64k32.s32.s8.u8.satfinite", np.int8), ("m64n64k8.f32.tf32.tf32", np.float32),
]


def _operands(i, dtype):
    rng = np.random.default_rng(100 + i)
    if dtype == np.int8:
        return rng.integers(-128, 128, (96, 160)).astype(np.int8), rng.integers(0, 256, (160, 72)).astype(np.uint8)
    return rng.standard_normal((96, 160)).astype(dtype), rng.standard_normal((160, 72)).astype(dtype)


def _job(i):
    text, dtype = JOBS[i % len(JOBS)]
    A, B = _operands(i, dtype)
    return fastmma.matmul(A, B, instruction=text)


def _wgmma_job(i):
    rng = np.random.default_rng(i)
    smem = rng.integers(0, 256, 16384, dtype=np.uint8)
    d = pack_d(rng.standard_normal((64, 32)).astype(np.float32), "f32")
    return wgmma.mma_async("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16", d,
                           a_desc=(128 >> 4) | (1024 >> 4 << 32) | (1 << 62), b_desc=(8192 >> 4) | (1024 >> 4 << 32) | (1 << 62),
                           smem=smem)


def _bits(x):
    return np.asarray(x).view(f"u{np.asarray(x).dtype.itemsize}")


@pytest.mark.parametrize("job", [_job, _wgmma_job])
def test_concurrent_threads_give_the_serial_bits(job):
    serial = [job(i) for i in range(12)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        threaded = list(pool.map(job, range(12)))
    for s, t in zip(serial, threaded):
        assert np.array_equal(_bits(s), _bits(t))


DIGEST_SCRIPT = """
import hashlib, numpy as np, fastmma
h = hashlib.sha256()
for text, dtype in {jobs}:
    rng = np.random.default_rng(7)
    if dtype == 'i8':
        A = rng.integers(-128, 128, (130, 200)).astype(np.int8); B = rng.integers(-128, 128, (200, 90)).astype(np.int8)
    else:
        A = rng.standard_normal((130, 200)).astype(dtype); B = rng.standard_normal((200, 90)).astype(dtype)
    h.update(np.ascontiguousarray(fastmma.matmul(A, B, instruction=text)).tobytes())
print(h.hexdigest())
"""


def _digest_in_process(threads: int) -> str:
    jobs = [("m64n64k16.f32.f16.f16", "float16"), ("m64n64k16.f32.bf16.bf16", "bfloat16"),
            ("m64n64k32.s32.s8.s8", "i8")]
    script = DIGEST_SCRIPT.format(jobs=repr(jobs)).replace("astype(dtype)", "astype(getattr(np, dtype, None) or __import__('ml_dtypes').bfloat16)")
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_same_bits_across_processes_and_thread_counts():
    one, two = _digest_in_process(1), _digest_in_process(2)
    assert one == two
    assert len(one) == 64
