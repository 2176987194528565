"""Compile fastmma's kernels ahead of use, each once, and leave them in numba's cache.

numba compiles a kernel the first time a process calls it with new argument types, and keeps
the machine code on disk (:mod:`fastmma.kernel_cache` says where and when it is stale).  A
fresh install therefore spends its first minutes compiling; several processes started
together (pytest-xdist's workers, Dask's) each compile the same kernels at once.
:func:`warmup` does that work once, in parallel processes, before they start.

Kernels are shared by types of the same storage width and kind (f16 and bf16 take the same
16-bit kernels), so the unit of work is a *family* of :data:`FAMILIES`: its types run one
after another in one process, and each family in a process of its own.  Each type runs the
instructions of :data:`PLAN` through :func:`fastmma.matmul` on the shapes of :data:`SHAPES`
(one instruction's tile, a blocked GEMM, a stack) and the data of :data:`STYLES`, which
between them reach the small-tile, per-element, blocked and stack kernels, both exponent
lanes and the pass over infinities and NaN; :data:`SPARSE_PLAN` does the same for the
structured-sparse instructions through :func:`fastmma.matmul_sp`.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import time
from typing import NamedTuple

import numpy as np

from .errors import FastmmaError

#: The instructions each type warms, in the short forms of :func:`fastmma.matmul`.
PLAN = {
    "f16": ("m64n256k16.f32.f16.f16", "m64n256k16.f16.f16.f16", "m16n8k16.f32.f16.f16.f32",
            "m16n8k8.f32.f16.f16.f32", "m16n16k16.f32.f16", "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32"),
    "bf16": ("m64n256k16.f32.bf16.bf16", "m16n8k8.f32.bf16.bf16.f32"),
    "tf32": ("m64n256k8.f32.tf32.tf32", "m16n16k8.f32.tf32.tf32.f32", "m16n8k4.f32.tf32.tf32.f32"),
    "e4m3": ("m64n256k32.f32.e4m3.e4m3", "m64n256k32.f16.e4m3.e4m3", "m16n8k32.f32.e4m3.e4m3.f32"),
    "e5m2": ("m64n256k32.f32.e5m2.e4m3", "m16n8k16.f16.e5m2.e5m2.f16"),
    "s8": ("m64n224k32.s32.s8.s8", "m64n224k32.s32.s8.u8.satfinite", "m16n8k32.s32.s8.s8.s32"),
    "u8": ("m64n224k32.s32.u8.u8",),
    "s4": ("m16n8k64.s32.s4.s4.s32", "m8n8k32.s32.s4.s4.s32"),
    "u4": ("m16n8k64.s32.u4.u4.s32",),
    "b1": ("m64n256k256.s32.b1.b1.and.popc", "m8n8k128.s32.b1.b1.s32.xor.popc"),
    "f64": ("m8n8k4.rn.f64.f64.f64.f64", "m8n8k4.rz.f64.f64.f64.f64", "m16n8k16.f64.f64.f64.f64"),
}

#: The sparse instructions each type warms through :func:`fastmma.matmul_sp` (wgmma's and
#: mma.sp's, whose spread A and fp8 steps reach kernels of their own).
SPARSE_PLAN = {
    "f16": ("m64n256k32.f32.f16.f16", "m16n8k32.f32.f16.f16.f32", "m64n256k32.f16.f16.f16"),
    "bf16": ("m64n256k32.f32.bf16.bf16", "m16n8k32.f32.bf16.bf16.f32"),
    "tf32": ("m64n256k16.f32.tf32.tf32", "m16n8k16.f32.tf32.tf32.f32"),
    "e4m3": ("m64n256k64.f32.e4m3.e4m3", "m16n8k64.f32.e4m3.e5m2.f32"),
    "e5m2": ("m64n256k64.f16.e5m2.e4m3",),
    "s8": ("m64n224k64.s32.s8.s8", "m16n8k64.s32.s8.u8.s32.satfinite"),
    "u8": ("m64n224k64.s32.u8.u8",),
    "s4": ("m16n8k128.s32.s4.s4.s32",),
    "u4": ("m16n8k128.s32.u4.s4.s32",),
}

#: Types whose kernels are the same code for the same storage: warmed one after another.
FAMILIES = (("f16", "bf16"), ("tf32",), ("e4m3", "e5m2"), ("s8", "u8", "s4", "u4"), ("b1",), ("f64",))

TYPES = tuple(PLAN)

#: (batch, M, K, N): one tile (the small-tile and per-element kernels), a blocked GEMM, a stack.
SHAPES = ((), 16, 32, 8), ((), 192, 256, 160), ((3,), 64, 64, 64)

#: ``"normal"`` values keep a narrow exponent range; ``"bits"`` are random bit patterns, wide
#: exponents, subnormals, infinities and NaN among them.
STYLES = ("normal", "bits")


class WarmupReport(NamedTuple):
    """What :func:`warmup` did: the types warmed, the calls made, numba's compiles and
    cache loads counted in its processes, and the seconds it took."""

    types: tuple
    calls: int
    compiled: int
    loaded: int
    seconds: float


def _operand(fmt, shape, style, rng):
    """A random operand of ``fmt``'s values: standard normal ones, or random bit patterns."""
    from .formats import from_bits

    if fmt.kind == "float" and style == "normal":
        return rng.standard_normal(shape).astype(fmt.value_dtype)
    return from_bits(rng.integers(0, 1 << fmt.bits, size=shape, dtype=np.uint64).astype(fmt.storage), fmt)


def _warm_type(name: str) -> int:
    """Run :data:`PLAN`'s instructions for ``name``; the number of calls made."""
    from .formats import get_format
    from .gemm import matmul, resolve_instruction

    rng = np.random.default_rng(0)
    calls = 0
    for text in PLAN[name]:
        inst = resolve_instruction(text)
        fa, fb, fc = get_format(inst.atype), get_format(inst.btype), get_format(inst.ctype)
        for batch, m, k, n in SHAPES:
            for style in STYLES:
                a = _operand(fa, batch + (m, k), style, rng)
                b = _operand(fb, batch + (k, n), style, rng)
                c = _operand(fc, batch + (m, n), style, rng)
                for given in (c, None):
                    matmul(a, b, given, instruction=inst)
                    calls += 1
    return calls


def _warm_sparse(name: str) -> int:
    """Run :data:`SPARSE_PLAN`'s instructions for ``name`` through :func:`fastmma.matmul_sp`,
    each row keeping the first places of its chunks; the number of calls made."""
    from .formats import get_format
    from .layout.sparse_metadata import chunk_geometry
    from .sparse_gemm import matmul_sp, resolve_sparse_instruction

    rng = np.random.default_rng(0)
    calls = 0
    for text in SPARSE_PLAN.get(name, ()):
        inst = resolve_sparse_instruction(text)
        fa, fb, fc = get_format(inst.atype), get_format(inst.btype), get_format(inst.ctype)
        chunk, kept = chunk_geometry(inst.atype)
        for batch, m, k, n in SHAPES:
            k = max(k, inst.shape.k)
            half = k // chunk * kept  # A's kept columns
            columns = np.broadcast_to((chunk * np.arange(k // chunk)[:, None] + np.arange(kept)).ravel(),
                                      batch + (m, half))
            for style in STYLES:
                a = _operand(fa, batch + (m, half), style, rng)
                b = _operand(fb, batch + (k, n), style, rng)
                c = _operand(fc, batch + (m, n), style, rng)
                matmul_sp(a, columns, b, c, instruction=inst)
                calls += 1
    return calls


def _counts() -> tuple[int, int]:
    """numba's compiles and cache loads in this process, over fastmma's cached kernels
    (:func:`fastmma.kernel_report.kernels_of`, the variant tables included)."""
    import sys

    from .kernel_report import kernels_of

    compiled = loaded = 0
    modules = [m for name, m in list(sys.modules.items()) if name.startswith("fastmma.") and m is not None]
    for dispatcher in {id(k): k for m in modules for k in kernels_of(m)}.values():
        stats = dispatcher.stats
        compiled += sum(stats.cache_misses.values())
        loaded += sum(stats.cache_hits.values())
    return compiled, loaded


def _warm_family(types: tuple) -> tuple[int, int, int]:
    """One process's work: each of ``types`` in turn; (calls, compiled, loaded)."""
    before = _counts()  # a process may warm several families: count this one's alone
    calls = sum(_warm_type(name) + _warm_sparse(name) for name in types)
    log_counts("warmup " + "+".join(types))
    return (calls, *(after - earlier for after, earlier in zip(_counts(), before)))


#: Where set, the file that :func:`log_counts` appends to (``tools/compile_count.py`` sets it).
COUNT_LOG = "FASTMMA_COMPILE_LOG"


def log_counts(role: str) -> None:
    """Append this process's :func:`_counts` as a JSON line to ``$FASTMMA_COMPILE_LOG``, where
    it is set: the compiles of several processes (a test session's workers) add up there."""
    path = os.environ.get(COUNT_LOG)
    if path:
        import json

        compiled, loaded = _counts()
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "role": role, "compiled": compiled, "loaded": loaded}) + "\n")


def families(types=None) -> list[tuple]:
    """The :data:`FAMILIES` parts of ``types`` (default: all of :data:`TYPES`), largest first."""
    if types is None:
        types = TYPES
    unknown = sorted(set(types) - set(TYPES))
    if unknown:
        raise FastmmaError(f"warmup: unknown type(s) {', '.join(unknown)[:80]}; allowed: {', '.join(TYPES)}")
    parts = [tuple(t for t in family if t in types) for family in FAMILIES]
    return [part for part in parts if part]


def warmup(types=None, processes: int | None = None, progress: bool | str | None = None) -> WarmupReport:
    """Compile the kernels that ``types`` (names of :data:`TYPES`; default all) use, each
    family of :data:`FAMILIES` in its own process, ``processes`` at a time (default: the
    CPUs), and leave them in numba's cache.  ``progress``: a bar on standard error that names
    the types left (:func:`fastmma.progress.make_bar`'s ``show``; True is ``"always"``, False
    ``"never"``, None ``"auto"``).

    Example: ``fastmma.warmup.warmup(["f16"])`` before timing a first f16 GEMM.
    """
    parts = families(types)
    if processes is not None and (not isinstance(processes, int) or isinstance(processes, bool) or processes < 1):
        raise FastmmaError(f"warmup: processes must be a positive integer, got {str(processes)[:40]!r}")
    workers = min(len(parts), processes or os.cpu_count() or 1)
    start = time.perf_counter()
    totals = [0, 0, 0]
    from .progress import make_bar

    show = {None: "auto", True: "always", False: "never"}.get(progress, progress)
    context = multiprocessing.get_context("spawn")  # numba's threads must not be forked
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool, \
            make_bar("compiling", total=len(parts), unit="family", show=show) as bar:
        futures = {pool.submit(_warm_family, part): part for part in parts}
        bar.set_postfix_str(_names(parts))
        for done in concurrent.futures.as_completed(futures):
            if done.exception() is not None:
                pool.shutdown(cancel_futures=True)
            totals = [x + y for x, y in zip(totals, done.result())]
            bar.set_postfix_str(_names(part for f, part in futures.items() if not f.done()))
            bar.update()
    return WarmupReport(tuple(t for part in parts for t in part), *totals, time.perf_counter() - start)


def _names(parts) -> str:
    return " ".join("+".join(part) for part in parts)
