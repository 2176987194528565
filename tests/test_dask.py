"""fastmma.dask: block GEMMs on Dask, bit-identical to fastmma.matmul whatever the chunking.

Needs the ``dask`` extra; without it every test here but the missing-extra ones is skipped.
Run them with:  pip install -e ".[dask,test]" && python -m pytest tests/test_dask.py
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fastmma
import fastmma.dask as fdask
from fastmma.formats import get_format
from fastmma.gemm import resolve_instruction

try:
    import dask.array  # noqa: F401
    import distributed  # noqa: F401
    HAVE_DASK = True
except ImportError:
    HAVE_DASK = False
needs_dask = pytest.mark.skipif(
    not HAVE_DASK, reason='dask[array] and distributed are not installed; run these tests with: '
                          'pip install -e ".[dask,test]" && python -m pytest tests/test_dask.py')

INSTRUCTIONS = ["m64n256k16.f32.f16.f16", "m64n256k16.f32.bf16.bf16", "m64n256k32.f32.e4m3.e4m3",
                "m64n224k32.s32.s8.s8"]
M, N, K = 157, 203, 71  # ragged: no multiple of any instruction's m, n or k
# (A chunks, B chunks) for dask inputs, or a block size for numpy inputs
CHUNKINGS = {
    "numpy-default": None,
    "numpy-block-50": 50,
    "numpy-block-(64,33)": (64, 33),
    "dask-ragged-k-split": (((100, 50, 7), (30, 1, 40)), ((71,), (9, 194))),
    "dask-k-mismatch": (((157,), (50, 21)), ((20, 20, 31), (100, 100, 3))),
    "dask-one-per-row": (((1,) * 157, (71,)), ((35, 36), (203,))),
}


def values(rng, fmt_name, shape, specials=True):
    """Random operands, with a few specials (inf, NaN, huge, tiny) for the float types."""
    fmt = get_format(fmt_name)
    if not fmt.is_float:
        info = np.iinfo(fmt.value_dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(fmt.value_dtype)
    v = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 4, shape)
    flat = v.reshape(-1)
    picks = rng.integers(0, flat.size, max(1, flat.size // 200)) if flat.size and specials else np.zeros(0, int)
    flat[picks] = rng.choice([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e4, 1e-6], picks.size)
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(fmt.value_dtype)


def operands(text, seed=0, shape=(M, N, K), with_c=True, specials=True):
    inst = resolve_instruction(text)
    m, n, k = shape
    rng = np.random.default_rng(seed)
    A, B = values(rng, inst.atype, (m, k), specials), values(rng, inst.btype, (k, n), specials)
    return A, B, values(rng, inst.ctype, (m, n), specials) if with_c else None


def bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    differ = int((bits(got) != bits(want)).sum())
    assert differ == 0, f"{differ} of {want.size} elements differ from fastmma.matmul"


def dask_inputs(A, B, C, chunking):
    """(A, B, C, block) for fastmma.dask.matmul under one of CHUNKINGS."""
    if not (isinstance(chunking, tuple) and isinstance(chunking[0], tuple)):
        return A, B, C, chunking
    import dask.array as da

    a = da.from_array(A, chunks=chunking[0])
    b = da.from_array(B, chunks=chunking[1])
    c = None if C is None else da.from_array(C, chunks=(a.chunks[0], b.chunks[1]))
    return a, b, c, None


# ---------------------------------------------------------------- without the extra


def test_import_fastmma_does_not_import_dask():
    code = "import sys, fastmma, fastmma.dask; assert 'dask' not in sys.modules and 'distributed' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("call", ["matmul", "run_gemm_on_cluster"])
def test_missing_extra_raises_fastmma_error_naming_it(monkeypatch, call):
    for name in ("dask", "dask.array", "distributed"):
        monkeypatch.setitem(sys.modules, name, None)  # import of it now fails
    A = np.ones((4, 16), np.float16)
    with pytest.raises(fdask.DaskMissingError, match=r'fastmma\[dask\]') as info:
        if call == "matmul":
            fdask.matmul(A, A.T, instruction=INSTRUCTIONS[0])
        else:
            fdask.run_gemm_on_cluster(A, A.T, instruction=INSTRUCTIONS[0], scheduler="tcp://127.0.0.1:1")
    assert isinstance(info.value, fastmma.FastmmaError) and isinstance(info.value, ImportError)


# ---------------------------------------------------------------- local schedulers


@needs_dask
@pytest.mark.parametrize("chunking", list(CHUNKINGS), ids=list(CHUNKINGS))
@pytest.mark.parametrize("text", INSTRUCTIONS)
def test_local_threads_bit_identical(text, chunking):
    A, B, C = operands(text)
    want = fastmma.matmul(A, B, C, instruction=text)
    a, b, c, block = dask_inputs(A, B, C, CHUNKINGS[chunking])
    D = fdask.matmul(a, b, c, instruction=text, block=block)
    assert_same_bits(D.compute(scheduler="threads"), want)


@needs_dask
@pytest.mark.parametrize("text", INSTRUCTIONS)
def test_local_sync_without_c_and_scale_d(text):
    A, B, C = operands(text, seed=1)
    a, b, _, _ = dask_inputs(A, B, C, CHUNKINGS["dask-k-mismatch"])
    assert_same_bits(fdask.matmul(a, b, instruction=text).compute(scheduler="sync"),
                     fastmma.matmul(A, B, instruction=text))
    assert_same_bits(fdask.matmul(A, B, C, instruction=text, scale_d=False, block=40).compute(scheduler="sync"),
                     fastmma.matmul(A, B, C, instruction=text, scale_d=False))


@needs_dask
def test_local_processes_scheduler():
    text = INSTRUCTIONS[1]
    A, B, C = operands(text, seed=7)
    a, b, c, _ = dask_inputs(A, B, C, CHUNKINGS["dask-ragged-k-split"])
    D = fdask.matmul(a, b, c, instruction=text).compute(scheduler="processes", num_workers=2)
    assert_same_bits(D, fastmma.matmul(A, B, C, instruction=text))


@needs_dask
def test_result_is_lazy_with_output_chunks_and_accumulator_dtype():
    import dask.array as da

    A, B, C = operands(INSTRUCTIONS[0])
    a, b, _, _ = dask_inputs(A, B, C, CHUNKINGS["dask-ragged-k-split"])
    D = fdask.matmul(a, b, instruction=INSTRUCTIONS[0])
    assert isinstance(D, da.Array) and D.chunks == (a.chunks[0], b.chunks[1]) and D.dtype == np.float32
    assert fdask.matmul(A, B, instruction=INSTRUCTIONS[0], block=(64, 100)).chunks == ((64, 64, 29), (100, 100, 3))
    assert fdask.matmul(*operands(INSTRUCTIONS[3])[:2], instruction=INSTRUCTIONS[3]).dtype == np.int32
    assert fdask.matmul(A, B, instruction="m64n256k16.f16.f16.f16").dtype == np.float16


@needs_dask
@pytest.mark.parametrize("shape", [(0, 5, 16), (3, 0, 16), (3, 5, 0), (1, 1, 1)])
def test_degenerate_shapes(shape):
    A, B, C = operands(INSTRUCTIONS[0], shape=shape)
    assert_same_bits(fdask.matmul(A, B, C, instruction=INSTRUCTIONS[0], block=2).compute(),
                     fastmma.matmul(A, B, C, instruction=INSTRUCTIONS[0]))


@needs_dask
def test_operand_errors_are_raised_when_building_the_graph():
    A = np.ones((8, 16), np.float16)
    with pytest.raises(fastmma.errors.OperandError, match="K must agree"):
        fdask.matmul(A, np.ones((15, 8), np.float16), instruction=INSTRUCTIONS[0])
    with pytest.raises(fastmma.errors.OperandError, match="B must hold f16"):
        fdask.matmul(A, np.ones((16, 8), np.float32), instruction=INSTRUCTIONS[0])
    with pytest.raises(fastmma.errors.OperandError, match="C must have shape"):
        fdask.matmul(A, A.T, np.ones((8, 7), np.float32), instruction=INSTRUCTIONS[0])


@needs_dask
@pytest.mark.parametrize("option, needle", [
    ({"block": (1, 2, 3)}, "block must be"), ({"block": "x"}, "block must be"), ({"block": 2.5}, "block must be"),
    ({"block": (4, 0)}, "block must be"), ({"threads": 0}, "threads .or None. must be"),
    ({"threads": "2"}, "threads .or None. must be"),
])
def test_bad_block_and_threads_are_operand_errors(option, needle):
    A = np.ones((8, 16), np.float16)
    with pytest.raises(fastmma.errors.OperandError, match=needle):
        fdask.matmul(A, A.T, instruction=INSTRUCTIONS[0], **option)


# ---------------------------------------------------------------- a LocalCluster of 2 worker processes


@pytest.fixture(scope="module")
def client():
    if not HAVE_DASK:
        pytest.skip("dask[array] and distributed are not installed")
    import cloudpickle
    from distributed import Client, LocalCluster

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


@needs_dask
def test_warmup_loads_kernels_on_every_worker(client):
    report = fdask.warmup(client, INSTRUCTIONS)
    assert set(report) == set(client.nthreads()) and len(report) == 2
    for info in report.values():
        assert info["loaded_from_cache"] + info["compiled"] > 0 and info["cache_dir"]


def _task_numba_threads(threads):
    import numba

    with fdask.numba_threads(threads):
        return numba.get_num_threads()


@needs_dask
def test_block_tasks_use_the_workers_threads(client):
    import numba

    assert client.submit(_task_numba_threads, None, pure=False).result() == 1  # threads_per_worker=1
    assert client.submit(_task_numba_threads, 2, pure=False).result() == min(2, numba.config.NUMBA_NUM_THREADS)


@needs_dask
@pytest.mark.parametrize("chunking", ["numpy-block-50", "dask-ragged-k-split", "dask-k-mismatch"])
@pytest.mark.parametrize("text", INSTRUCTIONS)
def test_cluster_bit_identical(client, text, chunking):
    A, B, C = operands(text, seed=2)
    a, b, c, block = dask_inputs(A, B, C, CHUNKINGS[chunking])
    D = fdask.matmul(a, b, c, instruction=text, block=block)
    assert_same_bits(client.compute(D).result(), fastmma.matmul(A, B, C, instruction=text))


@needs_dask
@pytest.mark.parametrize("text", INSTRUCTIONS)
def test_run_gemm_on_cluster_with_progress(client, text):
    A, B, C = operands(text, seed=3)
    calls, stream = [], io.StringIO()
    D = fdask.run_gemm_on_cluster(A, B, C, instruction=text, scheduler=client.scheduler_info()["address"], block=64,
                                  progress=lambda done, total: calls.append((done, total)))
    assert_same_bits(D, fastmma.matmul(A, B, C, instruction=text))
    assert calls == [(i, 12) for i in range(13)]  # 3 x 4 blocks of 64
    fdask.run_gemm_on_cluster(A, B, C, instruction=text, scheduler=client.scheduler_info()["address"], block=100,
                              progress_stream=stream)
    shown = stream.getvalue()  # a StringIO is no terminal: whole lines, no \r redraws
    assert "100%" in shown and shown.endswith("\n") and "\r" not in shown


@needs_dask
def test_run_gemm_on_cluster_with_dask_inputs_and_numpy_c(client):
    text = INSTRUCTIONS[3]
    A, B, C = operands(text, seed=6)
    a, b, _, _ = dask_inputs(A, B, C, CHUNKINGS["dask-ragged-k-split"])
    address = client.scheduler_info()["address"]
    want = fastmma.matmul(A, B, C, instruction=text)
    assert_same_bits(fdask.run_gemm_on_cluster(a, b, C, instruction=text, scheduler=address), want)
    assert_same_bits(fdask.run_gemm_on_cluster(a, B, C, instruction=text, scheduler=address, block=(None, 70)), want)


@needs_dask
def test_unreachable_scheduler_is_a_cluster_error():
    A = np.ones((4, 16), np.float16)
    with pytest.raises(fdask.ClusterError, match="cannot connect"):
        fdask.run_gemm_on_cluster(A, A.T, instruction=INSTRUCTIONS[0], scheduler="tcp://127.0.0.1:9", timeout=2)


def _die_once(block, marker):
    """Kill this worker process the first time a task runs it (SIGKILL: no clean-up); dask's
    meta probe (an empty block, in the client) passes."""
    marker = Path(marker)
    if block.size and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return block


def _worker_pids(client):
    client.wait_for_workers(2, timeout=60)
    return set(client.run(os.getpid).values())


@needs_dask
def test_worker_killed_by_its_task_still_gives_the_same_bits(client, tmp_path):
    import dask.array as da

    text = INSTRUCTIONS[0]
    A, B, C = operands(text, seed=4)
    before = _worker_pids(client)
    marker = tmp_path / "killed"
    a = da.from_array(A, chunks=((40, 40, 40, 37), (71,))).map_blocks(_die_once, str(marker), meta=A[:0, :0])
    D = fdask.matmul(a, B, C, instruction=text, block=(None, 64))
    assert_same_bits(client.compute(D).result(timeout=120), fastmma.matmul(A, B, C, instruction=text))
    assert int(marker.read_text()) in before  # a worker did die mid-job ...
    assert _worker_pids(client) != before  # ... and its nanny started a new one


@needs_dask
def test_worker_killed_during_the_gemm_blocks_still_gives_the_same_bits(client):
    from distributed import as_completed, futures_of

    text = INSTRUCTIONS[0]
    A, B, C = operands(text, seed=5, shape=(1024, 1024, 1024), specials=False)
    want = fastmma.matmul(A, B, C, instruction=text)
    _worker_pids(client)
    D = client.persist(fdask.matmul(A, B, C, instruction=text, block=128))
    futures = futures_of(D)
    done = as_completed(futures)
    next(done)  # one block finished: the job is under way
    busy = [w for w, keys in client.processing().items() if any("fastmma-matmul" in str(k) for k in keys)]
    assert busy, "no worker was computing a block when the first one finished"
    os.kill(client.run(os.getpid, workers=[busy[0]])[busy[0]], signal.SIGKILL)
    assert_same_bits(client.compute(D).result(timeout=120), want)
    _worker_pids(client)
