"""Bit-exact GEMMs on a Dask cluster: the numbers of :func:`fastmma.matmul`, computed in blocks.

Partitioning rule.  Only the OUTPUT is partitioned: ``D`` (M x N) is cut into blocks along M
and N, and the task of block ``(i, j)`` computes
``fastmma.matmul(A[rows_i, :], B[:, cols_j], C[rows_i, cols_j])`` over the FULL K, in
increasing k.  Every output element of a GEMM is an independent k-loop, so any partition of
M and N gives the same bits as one ``fastmma.matmul`` call on one machine, whatever the
chunking of the inputs.

K is never split.  A tensor-core k-loop rounds its accumulator to D's type after every
instruction, in increasing k; a K-split reduction (what ``dask.array.matmul`` /
``tensordot`` do) would round partial sums of K slices separately and then add them in
another order with other roundings (and for ``.satfinite`` integers, saturate elsewhere):
other numbers.  Chunks of the inputs along K are therefore gathered (concatenated, once per
row panel of A and column panel of B) so that each task sees whole K panels.

Numba.  The kernels are compiled with ``cache=True``: a worker process loads them from the
on-disk cache (``__pycache__`` beside fastmma's sources, or ``$NUMBA_CACHE_DIR`` where
that is set; set it on the workers, to a persistent directory, where the package directory
is read-only).  The first task per worker pays that load (about 0.2 s), or a full compile
(10-30 s) where no cache exists yet; :func:`warmup` runs a tiny GEMM on every worker first.
In one process, block tasks run one at a time (a lock; numba's thread pool is shared and its
``workqueue`` layer is not thread-safe), each on ``threads`` numba threads: by default the
``nthreads`` of the Dask worker it runs on, or all numba threads on the local scheduler.

Needs the ``dask`` extra: ``pip install "fastmma[dask]"`` (``dask[array]`` and
``distributed``).  ``import fastmma`` never imports dask.
"""

from __future__ import annotations

import importlib
import re
import sys
import threading
import time
import uuid
from contextlib import contextmanager, nullcontext

import numpy as np

from .errors import FastmmaError, OperandError
from .formats import as_numpy, get_format, to_bits
from .gemm import checked_progress, resolve_instruction
from .gemm import matmul as _local_matmul
from .mma import scale_d_flag
from .progress import as_callback, make_bar
from .validate import decoded, excerpt, integer, public, quote, working_set

INSTALL_HINT = 'pip install "fastmma[dask]"'
DEFAULT_BLOCK = 1024  # rows / columns of an output block made from numpy inputs
MIN_BLOCK = 128
MAX_BLOCK = 1 << 40  # past any matrix in memory, and within the int64 sizes dask's chunks hold
PANEL_BYTES = 256 << 20  # a default block keeps each A row panel / B column panel below this
WARMUP_INSTRUCTIONS = ("m64n256k16.f32.f16.f16",)

_KERNEL_LOCK = threading.Lock()
_ADDRESS = re.compile(r"(\w+://)?[^\s/]{1,253}(:\d{1,5})?")


class DaskMissingError(FastmmaError, ImportError):
    """fastmma.dask was used without the ``dask`` extra installed."""


class ClusterError(FastmmaError, RuntimeError):
    """The Dask scheduler cannot be reached, or the cluster lost the job."""


def _require(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise DaskMissingError(
            f"fastmma.dask needs the optional dependency {name.split('.')[0]!r}, which is not installed "
            f"({exc}); install the extra: {INSTALL_HINT}") from exc


# ---------------------------------------------------------------- the GEMM as a dask array


@public
def matmul(A, B, C=None, *, instruction, scale_d: bool | None = None, block=None, threads: int | None = None):
    """``D = A @ B + C`` as a lazy dask array, bit-identical to :func:`fastmma.matmul`.

    ``A`` (M, K), ``B`` (K, N) and ``C`` (M, N) or None are dask arrays or numpy arrays (or
    anything :func:`fastmma.matmul` takes) of the instruction's types.  Numpy inputs are cut
    into output blocks of ``block`` rows and columns (default :data:`DEFAULT_BLOCK`, halved
    while an A row panel or B column panel would exceed :data:`PANEL_BYTES`); dask inputs
    keep A's row chunks and B's column chunks unless ``block`` (an int, or ``(rows, cols)``
    with None for "keep") is given.  Chunks along K are gathered, never reduced: see the
    module docstring.

    Returns a dask array of D's type (the instruction's accumulator: ``float32`` for .f32,
    ``float16`` for .f16, ``int32`` for .s32, ``float64`` for .f64) with one chunk per
    output block: ``A.chunks[0]`` x ``B.chunks[1]`` after the blocking above.  ``threads``:
    numba threads per block task (default: see the module docstring).  Computes on whatever
    scheduler is active (local threads, processes, or a ``distributed.Client``).

    Raises :class:`DaskMissingError` without the ``dask`` extra, and what
    :func:`fastmma.matmul` raises for the instruction and the operands, when the graph is built,
    as it does for a block task whose decoding would not fit in this process's memory.
    Example: ``fastmma.dask.matmul(A, B, instruction="m64n256k16.f32.f16.f16").compute()``.
    """
    da = _require("dask.array")
    inst = resolve_instruction(instruction)
    scale_d = _checked_options(scale_d, block, threads)
    a, b, c = _operands(da, A, B, C, inst)
    blocked = _blocked(da, a, b, c, block)
    _block_memory(a, blocked)
    return _blockwise(da, *blocked, inst, scale_d, threads)


def _operands(da, A, B, C, inst):
    """A, B, C as dask or numpy arrays, with shapes and dtypes checked eagerly."""
    a, b = _array(da, A, "A"), _array(da, B, "B")
    c = None if C is None else _array(da, C, "C")
    for x, name, fmt in ((a, "A", inst.atype), (b, "B", inst.btype), (c, "C", inst.ctype)):
        if x is not None:
            _check_matrix(x, name, fmt)
        if isinstance(x, np.ndarray):  # dask's token of a strided view hashes a contiguous copy of it
            decoded(x, name, x.dtype.itemsize)
    if a.shape[1] != b.shape[0]:
        raise OperandError(f"A is {a.shape[0]}x{a.shape[1]} and B is {b.shape[0]}x{b.shape[1]}: their K must agree")
    if c is not None and c.shape != (a.shape[0], b.shape[1]):
        raise OperandError(f"C must have shape {(a.shape[0], b.shape[1])}, got {c.shape}")
    return a, b, c


def _array(da, x, name):
    return x if isinstance(x, da.Array) else as_numpy(x, name)


def _check_matrix(x, name, fmt):
    if x.ndim != 2:
        raise OperandError(f"{name} must be a 2-D matrix, got shape {x.shape}")
    if any(np.isnan(s) for s in x.shape):
        raise OperandError(f"{name} has unknown chunk sizes {x.shape}; call {name}.compute_chunk_sizes() first")
    to_bits(np.empty((0, 0), x.dtype), get_format(fmt), name)  # the dtype check, without the data


def _blocked(da, a, b, c, block):
    """Dask arrays: A in row panels (whole K), B in column panels (whole K), C as D."""
    rows, cols = _block_shape(block, a, b)
    a = _chunked(da, a, (rows, -1))
    b = _chunked(da, b, (-1, cols))
    if c is not None:
        c = _chunked(da, c, (a.chunks[0], b.chunks[1]))
    return a, b, c


def _block_memory(a, blocked) -> None:
    """Refuse a GEMM whose largest block task could not decode its panels (A's rows, B's
    columns, the block of C and D, at up to 4 bytes an element) in this process's memory."""
    rows, cols = (max(chunks, default=0) for chunks in (blocked[0].chunks[0], blocked[1].chunks[1]))
    k = a.shape[1]
    working_set({"A": blocked[0], "B": blocked[1]}, 4 * (rows * k + k * cols + 2 * rows * cols), rows, k, cols,
                what="decoding each block task's", advice="pass a smaller block")


def _checked_options(scale_d, block, threads):
    """``scale_d`` as a bool (or None), after checking it, ``block`` and ``threads``: when the
    graph is built, or before connecting to a cluster, not inside a task."""
    _block_pair(block)
    if threads is not None:
        integer(threads, "threads (or None)", 1)
    return None if scale_d is None else scale_d_flag(scale_d)


def _block_pair(block):
    """``(rows, cols)`` as ``block`` gives them, each a positive int or None."""
    pair = isinstance(block, (tuple, list))
    rows, cols = block if pair and len(block) == 2 else (block, block)
    try:
        if pair and len(block) != 2:
            raise OperandError
        return tuple(None if size is None else integer(size, "block", 1, MAX_BLOCK) for size in (rows, cols))
    except OperandError:
        raise OperandError(f"block must be an integer in [1, 2^40], (rows, cols) of such integers or None, or None; "
                           f"got {quote(block)}") from None


def _block_shape(block, a, b):
    """``(rows, cols)`` of an output block; None (for both or in one slot) keeps a dask
    input's own chunks and gives numpy inputs the default."""
    rows, cols = _block_pair(block)
    return (_default_block(a, 1) if rows is None else rows), (_default_block(b, 0) if cols is None else cols)


def _default_block(x, k_axis):
    """DEFAULT_BLOCK, halved while a panel of K elements would exceed PANEL_BYTES; None for
    a dask array (its chunks stand)."""
    if not isinstance(x, np.ndarray):
        return None
    size, panel = DEFAULT_BLOCK, max(1, x.shape[k_axis]) * x.dtype.itemsize
    while size > MIN_BLOCK and size * panel > PANEL_BYTES:
        size //= 2
    return size


def _chunked(da, x, chunks):
    """``x`` as a dask array with ``chunks`` (None in a slot: keep that axis's chunks)."""
    if isinstance(x, da.Array):
        wanted = tuple(x.chunks[i] if c is None else c for i, c in enumerate(chunks))
        return x.rechunk(wanted)
    wanted = tuple(-1 if c is None else c for c in chunks)
    return da.from_array(x, chunks=wanted)


def _blockwise(da, a, b, c, inst, scale_d, threads):
    from dask.base import tokenize

    out = np.dtype(get_format(inst.dtype).value_dtype)
    args = (a, "ik", b, "kj") + (() if c is None else (c, "ij"))
    name = "fastmma-matmul-" + tokenize(a, b, c, repr(inst), scale_d, threads)
    return da.blockwise(gemm_block, "ij", *args, concatenate=True, dtype=out, meta=np.empty((0, 0), out),
                        name=name, inst=inst, scale_d=scale_d, threads=threads)


def gemm_block(a, b, c=None, *, inst, scale_d=None, threads=None):
    """One output block: :func:`fastmma.matmul` over whole K panels (what each task runs)."""
    with _KERNEL_LOCK, numba_threads(threads):
        return _local_matmul(a, b, c, instruction=inst, scale_d=scale_d)


@contextmanager
def numba_threads(threads: int | None):
    """Run numba's parallel kernels on ``threads`` threads (None: the Dask worker's
    ``nthreads``, or all numba threads; at most ``NUMBA_NUM_THREADS``), restoring the
    calling thread's setting after."""
    import numba

    limit = numba.config.NUMBA_NUM_THREADS
    wanted = threads if threads is not None else (_worker_nthreads() or limit)
    old = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(wanted), limit)))
    try:
        yield
    finally:
        numba.set_num_threads(old)


def _worker_nthreads() -> int | None:
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        worker = distributed.get_worker()
    except ValueError:  # not inside a worker's task
        return None
    state = getattr(worker, "state", worker)  # WorkerState holds nthreads in recent versions
    return getattr(state, "nthreads", None) or getattr(worker, "nthreads", None)


# ---------------------------------------------------------------- workers


@public
def warmup(client, instructions=WARMUP_INSTRUCTIONS) -> dict:
    """Load (or compile and cache) the kernels of ``instructions`` on every worker of
    ``client``, by running a tiny GEMM of each there as a task pinned to that worker.

    Returns ``{worker address: {"seconds", "loaded_from_cache", "compiled", "cache_dir"}}``:
    ``compiled`` > 0 means that worker found no usable cache and compiled (10-30 s a kernel
    family; later processes on that machine then load it).

    Raises :class:`DaskMissingError` without the ``dask`` extra.
    """
    texts = tuple(str(resolve_instruction(i)) for i in instructions)
    tag = uuid.uuid4().hex[:8]
    futures = {w: client.submit(_warm_worker, texts, key=f"fastmma-warmup-{tag}-{n}", workers=[w],
                                allow_other_workers=False, pure=False)
               for n, w in enumerate(client.nthreads())}
    return {w: f.result() for w, f in futures.items()}


def _warm_worker(texts) -> dict:
    t0 = time.perf_counter()
    for text in texts:
        inst = resolve_instruction(text)
        s = inst.shape
        A, B = _warm_operand(inst.atype, (s.m, 2 * s.k)), _warm_operand(inst.btype, (2 * s.k, s.n))
        A[0, 0] = _special(inst.atype, A.dtype)  # one special value: the fix-up kernel too
        gemm_block(A, B, None, inst=inst)
        gemm_block(A, B, np.zeros((s.m, s.n), get_format(inst.ctype).value_dtype), inst=inst)
    hits, misses, where = _cache_stats()
    return {"seconds": time.perf_counter() - t0, "loaded_from_cache": hits, "compiled": misses, "cache_dir": where}


def _warm_operand(fmt_name, shape):
    fmt = get_format(fmt_name)
    if fmt.is_float:
        dt = np.float32 if fmt.name == "tf32" else fmt.value_dtype
        return np.random.default_rng(0).standard_normal(shape).astype(dt)
    return np.ones(shape, fmt.value_dtype)


def _special(fmt_name, dtype):
    return np.array(np.nan if get_format(fmt_name).is_float else 1).astype(dtype)


def _cache_stats():
    """(kernels loaded from numba's cache, kernels compiled, cache directory) in this process."""
    hits = misses = 0
    where = None
    for name, module in list(sys.modules.items()):
        if not name.startswith("fastmma.kernels.") or module is None:
            continue
        for obj in vars(module).values():
            stats = getattr(obj, "stats", None)
            if hasattr(obj, "py_func") and hasattr(stats, "cache_hits"):
                hits += sum(stats.cache_hits.values())
                misses += sum(stats.cache_misses.values())
                where = where or stats.cache_path
    return hits, misses, where


# ---------------------------------------------------------------- the CLI's entry point


@public
def run_gemm_on_cluster(A, B, C=None, *, instruction, scheduler: str, progress=None, progress_stream=None,
                        scale_d: bool | None = None, block=None, threads: int | None = None,
                        timeout: float = 30.0) -> np.ndarray:
    """Connect to the Dask scheduler at ``scheduler`` (``tcp://host:port``), compute
    ``D = A @ B + C`` there block by block, and return D as a numpy array, bit-identical to
    :func:`fastmma.matmul` (for ``fastmma gemm --scheduler``).

    The workers need fastmma (and this extra) installed.  Numpy inputs are scattered to the
    workers in panels (not shipped inside the task graph).  ``progress(done, total)`` is
    called as output blocks complete; ``progress_stream`` (e.g. ``sys.stderr``) instead draws
    a tqdm bar of the blocks on it (:func:`fastmma.progress.make_bar`: in place on a
    terminal, a line now and then into a pipe).  Raises :class:`ClusterError` when the scheduler cannot be
    reached in ``timeout`` seconds or the cluster loses the job.
    """
    distributed = _require("distributed")
    checked_progress(progress)
    scale_d = _checked_options(scale_d, block, threads)  # a bad option is an error before waiting on a connection
    if not isinstance(scheduler, str) or not _ADDRESS.fullmatch(scheduler):  # a failed Client's __del__ hangs
        raise OperandError(f"scheduler must be an address such as 'tcp://host:8786' (a host name of at most 253 "
                           f"characters), got {quote(scheduler)}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise OperandError(f"timeout must be a positive number of seconds, got {quote(timeout)}")
    bar = nullcontext(None)
    if progress is None and progress_stream is not None:
        bar = make_bar(f"gemm @ {scheduler}", unit="block", show="always", stream=progress_stream)
    with bar as shown, _connect(distributed, scheduler, timeout) as client:
        return compute_on(client, A, B, C, instruction=instruction, progress=progress if shown is None else
                          as_callback(shown), scale_d=scale_d, block=block, threads=threads)


def _connect(distributed, scheduler, timeout):
    try:
        return distributed.Client(scheduler, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise ClusterError(
            f"cannot connect to the Dask scheduler at {quote(scheduler)} within {timeout:g} s ({excerpt(str(exc))}); "
            "start one "
            "with `dask scheduler` and workers with `dask worker tcp://HOST:8786`") from exc


@public
def compute_on(client, A, B, C=None, *, instruction, progress=None, scale_d=None, block=None,
               threads=None) -> np.ndarray:
    """:func:`run_gemm_on_cluster` on an open ``distributed.Client``.

    Raises :class:`ClusterError` where the cluster loses the job, and what :func:`matmul` raises.
    """
    distributed = _require("distributed")
    da = _require("dask.array")
    from distributed.scheduler import KilledWorker

    inst = resolve_instruction(instruction)
    checked_progress(progress)
    a, b, c = _operands(da, A, B, C, inst)
    a, b, c = _scattered(client, da, a, b, c, block)
    d = client.persist(matmul(a, b, c, instruction=inst, scale_d=scale_d, block=block, threads=threads))
    try:
        return _gather(distributed, client, d, progress)
    except KilledWorker as exc:
        raise ClusterError(f"the cluster lost the GEMM: {exc}") from exc


def _scattered(client, da, a, b, c, block):
    """Numpy operands as dask arrays of panels (blocks for C) scattered to the workers; dask
    operands as they are."""
    rows, cols = _block_shape(block, a, b)
    row_chunks = da.core.normalize_chunks((a.chunks[0] if rows is None else rows,), (a.shape[0],))
    col_chunks = da.core.normalize_chunks((b.chunks[1] if cols is None else cols,), (b.shape[1],))
    k = (a.shape[1],)
    a = _scatter(client, da, a, row_chunks + (k,))
    b = _scatter(client, da, b, (k,) + col_chunks)
    c = None if c is None else _scatter(client, da, c, row_chunks + col_chunks)
    return a, b, c


def _scatter(client, da, x, chunks):
    """A numpy array as a dask array of ``chunks`` whose blocks are already on the workers."""
    if not isinstance(x, np.ndarray):
        return x
    edges = [np.cumsum((0,) + tuple(ch)) for ch in chunks]
    blocks = [[x[r0:r1, c0:c1] for c0, c1 in zip(edges[1][:-1], edges[1][1:])]
              for r0, r1 in zip(edges[0][:-1], edges[0][1:])]
    futures = iter(client.scatter([blk for row in blocks for blk in row]))
    return da.block([[da.from_delayed(next(futures), blk.shape, x.dtype) for blk in row] for row in blocks])


def _gather(distributed, client, d, progress):
    futures = {f.key: f for f in distributed.futures_of(d)}
    total, done = len(futures), 0
    if progress is not None:
        progress(0, total)
    for _ in distributed.as_completed(list(futures.values()), loop=client.loop):
        done += 1
        if progress is not None:
            progress(done, total)
    parts = client.gather([[futures[k] for k in row] for row in d.__dask_keys__()])
    return np.block(parts)
