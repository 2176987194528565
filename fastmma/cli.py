"""The ``fastmma`` command line: ``gemm``, ``conform``, ``info``, ``explain``, ``ptx``.

Errors of fastmma's own print as one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from .errors import FastmmaError, OperandError
from .progress import SHOW_CHOICES, as_callback, is_terminal, make_bar, while_running
from .validate import excerpt, read_npy, read_npz, shorten

DEFAULT_INSTRUCTION = "m64n256k16.f32.f16.f16"
PROGRESS_MIN_MACS = 1 << 31  # show a bar for GEMMs of at least this many multiply-adds


# ---------------------------------------------------------------- gemm


def _random_operand(rng, fmt, shape):
    if fmt.is_float:
        v = rng.standard_normal(shape)
        return v.astype(np.float32 if fmt.name == "tf32" else fmt.value_dtype)
    if fmt.name == "b1":
        return rng.integers(0, 2, shape).astype(np.uint8)
    lo, hi = (-(1 << (fmt.bits - 1)), (1 << (fmt.bits - 1)) - 1) if fmt.kind == "int" else (0, (1 << fmt.bits) - 1)
    return rng.integers(lo, hi + 1, shape).astype(fmt.value_dtype)


def _load(path, name):
    return read_npy(path, f"--{name}")


def _reference(inst, A, B, C):
    """The exact (integer) or float64 product, for the error report."""
    if inst.atype in ("s8", "u8", "s4", "u4", "b1"):
        if inst.atype == "b1":
            a, b = A.astype(np.int64), B.astype(np.int64)
            a, b = a[..., :, :, None], b[..., None, :, :]  # (M, K, 1) against (1, K, N), stacks too
            prod = (a ^ b if inst.op == "xor" else a & b).sum(axis=-2)
        else:
            prod = A.astype(np.int64) @ B.astype(np.int64)
        return prod + (0 if C is None else C.astype(np.int64))
    return A.astype(np.float64) @ B.astype(np.float64) + (0 if C is None else C.astype(np.float64))


def _resolve(text: str, sparse: bool = False):
    """``(instruction, sparse)`` of text or a short form.  ``sparse`` reads it as ``mma.sp`` /
    ``wgmma.mma_async.sp``; otherwise it is read as a dense one first and as a sparse one
    second (a short form such as ``m64n256k32.f32.f16.f16`` names only a sparse instruction)."""
    from .errors import InvalidInstructionError
    from .gemm import resolve_instruction
    from .sparse_gemm import resolve_sparse_instruction

    if sparse:
        return resolve_sparse_instruction(text), True
    try:
        return resolve_instruction(text), False
    except InvalidInstructionError as dense_error:
        try:
            return resolve_sparse_instruction(text), True
        except InvalidInstructionError:
            raise dense_error from None


def _pruned(rng, A, atype):
    """A random dense A pruned as ``atype``'s sparsity keeps it: in each chunk, the kept number
    of places (``.s4``/``.u4``: aligned pairs) chosen at random, the others zero."""
    from .layout.sparse_metadata import chunk_geometry

    chunk, kept = chunk_geometry(atype)
    if A.shape[-1] % chunk:
        raise OperandError(f"--sparse: K must be a whole number of {atype}'s chunks of {chunk}, got K={A.shape[-1]}")
    unit = 2 if chunk == 8 else 1
    order = rng.random(A.shape[:-1] + (A.shape[-1] // chunk, chunk // unit)).argsort(axis=-1)
    keep = order < kept // unit
    return np.where(np.repeat(keep, unit, axis=-1).reshape(A.shape), A, np.zeros_like(A))


def _sparse_operands(args, inst, A, B):
    """``(dense A, kept A, columns)`` of a sparse GEMM: ``--a`` is the compressed A where
    ``--columns`` gives its columns, else a dense, pruned A (random inputs: pruned here), which
    :func:`fastmma.layout.sparse_metadata.compress` compresses.  The dense A is for the error
    report."""
    from .formats import get_format
    from .layout.sparse_metadata import compress
    from .mma import checked_columns

    if args.columns is None:
        return (A,) + compress(A, inst.atype)
    columns = _load(args.columns, "columns")
    if A.ndim < 2 or B.ndim < 2 or columns.shape != A.shape:
        raise OperandError(f"--a and --columns must be matrices (or stacks) of one shape, --b a matrix (..., K, N); "
                           f"got {A.shape}, {columns.shape} and {B.shape}")
    columns = checked_columns(columns, A.shape[-2:], B.shape[-2])
    dense = np.zeros(A.shape[:-1] + (B.shape[-2],), np.float64 if get_format(inst.atype).is_float else np.int64)
    np.put_along_axis(dense, columns, A.astype(dense.dtype), axis=-1)
    return dense, A, columns


def _cmd_gemm(args) -> int:
    from .formats import get_format
    from .gemm import matmul
    from .sparse_gemm import matmul_sp

    inst, sparse = _resolve(args.instruction, args.sparse)
    fa, fb, fc = get_format(inst.atype), get_format(inst.btype), get_format(inst.ctype)
    _check_options(args, sparse)
    if args.a or args.b:
        if not (args.a and args.b):
            raise OperandError("--a and --b go together (give both .npy files, or neither for random inputs)")
        A, B = _load(args.a, "a"), _load(args.b, "b")
        C = _load(args.c, "c") if args.c else None
        source = f"A={args.a} B={args.b}" + (f" C={args.c}" if args.c else "")
    else:
        m, n, k = (args.size if x is None else x for x in (args.m, args.n, args.k))
        if min(m, n, k) < 1:
            raise OperandError(f"matrix sizes must be positive, got M={m} N={n} K={k}")
        _check_memory(m, n, k, fa, fb, args)
        rng = np.random.default_rng(args.seed)
        A, B = _random_operand(rng, fa, (m, k)), _random_operand(rng, fb, (k, n))
        C = _random_operand(rng, fc, (m, n)) if args.with_c else None
        source = f"random inputs (standard normal / full-range integers), seed {args.seed}"
        if sparse:
            A = _pruned(rng, A, inst.atype)
            source += f", A pruned at random to {inst.atype}'s sparsity"
    if sparse:
        A, kept, columns = _sparse_operands(args, inst, A, B)
    M, K = A.shape[-2:] if A.ndim >= 2 else (0, 0)
    N = B.shape[-1] if B.ndim >= 2 else 0
    stack = _stack_shape(A, B, C)
    out = sys.stdout
    print(f"instruction: {inst}", file=out)
    print(f"shape: M={M} N={N} K={K}{f', a stack of {stack}' if stack else ''}; {source}", file=out)
    macs = M * N * K * math.prod(stack)
    if sparse:
        _warm_up(inst, kept, B, C, out, columns, show=args.progress)
    elif not args.scheduler:
        _warm_up(inst, A, B, C, out, show=args.progress)
    small = args.progress == "auto" and macs < PROGRESS_MIN_MACS and not args.scheduler
    label, unit = (f"gemm @ {args.scheduler}", "block") if args.scheduler else ("gemm", "column")
    # the bar is made after the warm-up, so that its clock counts no compile
    with make_bar(label, unit=unit, show="never" if small else args.progress) as bar:
        progress = None if bar.disable else as_callback(bar)
        t0 = time.perf_counter()
        if sparse:
            D = matmul_sp(kept, columns, B, C, instruction=inst, progress=progress)
        elif args.scheduler:
            from .dask import run_gemm_on_cluster

            D = run_gemm_on_cluster(A, B, C, instruction=inst, scheduler=args.scheduler, progress=progress,
                                    block=args.block)
        else:
            D = matmul(A, B, C, instruction=inst, progress=progress)
        dt = time.perf_counter() - t0
    print(f"time: {dt:.3f} s ({macs / dt / 1e9:.2f} G multiply-adds/s)", file=out)
    if args.out:
        try:
            np.save(args.out, D)
        except OSError as exc:
            raise OperandError(f"--out: cannot write {args.out} ({exc})") from exc
        print(f"D ({D.dtype}, bit-exact) written to {args.out}", file=out)
    if not args.no_check:
        _report_error(inst, A, B, C, D, out)
    return 0


def _check_options(args, sparse: bool) -> None:
    """The options that need no data, checked before any input is made or read and before
    minutes of work: a bad one is an error now, not a traceback at the end."""
    if sparse and args.scheduler:
        raise OperandError("--scheduler runs dense GEMMs; a sparse instruction runs here (fastmma.matmul_sp)")
    if args.columns and not (sparse and args.a):
        raise OperandError("--columns gives the columns of a compressed --a, for a sparse instruction (--sparse)")
    if args.seed < 0:
        raise OperandError(f"--seed must be a non-negative integer, got {args.seed}")
    if args.out:
        try:
            folder = Path(args.out).resolve().parent.is_dir()
        except OSError:  # a name too long to look up
            folder = False
        if not folder:
            raise OperandError(f"--out: the folder of {excerpt(args.out)} does not exist")


def _check_memory(m, n, k, fa, fb, args) -> None:
    """Random inputs that cannot fit in this machine's memory are refused before numpy tries.
    The estimate: the largest array as generated (float64 for float types), A and B as kept,
    C or D (8 bytes an element at most), and the float64 copies of the error report."""
    made = [m * k * (8 if fa.is_float else 1), k * n * (8 if fb.is_float else 1), m * n * 8]
    need = max(made) + m * k * fa.value_dtype.itemsize + k * n * fb.value_dtype.itemsize + m * n * 8
    if not args.no_check:
        need += 8 * (m * k + k * n + m * n)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every platform says
        return
    if need > total:
        raise OperandError(f"M={m} N={n} K={k} needs about {need / 2**30:.1f} GiB for its random inputs, output "
                           f"and check, more than this machine's {total / 2**30:.1f} GiB of memory")


def _warm_up(inst, A, B, C, out, columns=None, show="auto"):
    """Load (or, the first time, compile) the kernels on a corner of the data, so that the
    time reported is the GEMM's and not numba's.  While a compile runs, stderr says so and
    for which types (:func:`fastmma.progress.while_running`).  With ``columns``, ``A`` is a
    sparse GEMM's compressed A (the corner's K/2 kept elements of each row lie in its K
    columns, which are whole chunks)."""
    from .gemm import matmul
    from .kernels import FAST_KERNEL_MIN_MACS
    from .sparse_gemm import matmul_sp

    if any(x.ndim < 2 or 0 in x.shape[:-2] for x in (A, B, C, columns) if x is not None):
        return  # matmul refuses them, or has no GEMM to run
    A, B, C, columns = (None if x is None else x[(0,) * (x.ndim - 2)] for x in (A, B, C, columns))  # a stack's first
    if A.shape[0] * B.shape[0] * B.shape[1] < FAST_KERNEL_MIN_MACS:
        return
    m, k, n = min(A.shape[0], 64), min(B.shape[0], 512), min(B.shape[1], 512)
    C = None if C is None else C[:m, :n]
    types = f".{inst.atype} x .{inst.btype} -> .{inst.dtype}"
    what = f"kernels for {types}: numba compiles them (first run only, then cached on disk)"
    t0 = time.perf_counter()
    with while_running(what, show="never" if show == "never" else "always"):
        if columns is None:
            matmul(A[:m, :k], B[:k, :n], C, instruction=inst)
        else:
            matmul_sp(A[:m, :k // 2], columns[:m, :k // 2], B[:k, :n], C, instruction=inst)
    dt = time.perf_counter() - t0
    how = "compiled (once: numba caches them on disk)" if dt > 2.0 else "loaded from numba's cache"
    print(f"kernels for {types}: {how} in {dt:.1f} s", file=out)


def _stack_shape(A, B, C) -> tuple[int, ...]:
    """The batch dimensions of a stack of GEMMs (``()`` for one, or where matmul will refuse
    the shapes and say why)."""
    from .mma import batch_shape

    try:
        return batch_shape(A, B, C)
    except OperandError:
        return ()


def _report_error(inst, A, B, C, D, out):
    ref = _reference(inst, A, B, C)
    if inst.dtype == "s32":
        differ = int((D.astype(np.int64) != ref).sum())
        print(f"vs the exact integer product: {differ} of {D.size} entries differ (s32 wrap or saturation)",
              file=out)
        return
    d = D.astype(np.float64)
    finite = np.isfinite(d) & np.isfinite(ref)
    if not finite.any():
        print("vs float64 reference: no finite entries to compare", file=out)
        return
    err = np.abs(d - ref)[finite]
    scale = _magnitude(inst, A, B, C)[finite]
    rel = err / np.maximum(scale, np.finfo(np.float64).tiny)
    print(f"vs float64 reference: max abs error {err.max():.3g}, max error relative to |A|.|B| + |C| "
          f"{rel.max():.3g} ({int(finite.sum())} finite entries)", file=out)


def _magnitude(inst, A, B, C):
    """|A|.|B| + |C| in float64: the size of the terms summed, which bounds a dot product's
    rounding error (the error relative to the result itself is unbounded where terms cancel)."""
    a, b = (np.abs(x.astype(np.float64)) for x in (A, B))
    return a @ b + (0 if C is None else np.abs(C.astype(np.float64)))


# ---------------------------------------------------------------- conform / info / explain


def _cmd_conform(args) -> int:
    from tqdm.contrib import DummyTqdmFile

    from .conform import recording_files, run

    files = recording_files(args.paths)
    with make_bar("conform", total=len(files), unit="file", show=args.progress) as bar:
        out = sys.stdout if bar.disable or not is_terminal(sys.stdout) else DummyTqdmFile(sys.stdout)
        passed, failed = run(files, out=out, limit=args.show, progress=bar.update)
    return 1 if failed else 0


def default_recordings() -> Path | None:
    """tests/golden of a source checkout, if this fastmma runs from one."""
    here = Path(__file__).resolve().parent.parent / "tests" / "golden"
    return here if here.is_dir() else None


def _integer_forms() -> str:
    """Which dot-product form the integer GEMMs take on this CPU (:mod:`fastmma.kernels.word_gemm`)."""
    from .kernels.word_gemm import host_form

    def named(form):
        return f"{form.name} ({form.instruction or 'portable vector code'})"

    wrap, clamp = host_form(), host_form(satfinite=True)
    return named(wrap) + ("" if clamp == wrap else f"; .satfinite: {named(clamp)}")


def _cmd_info(args) -> int:
    import ml_dtypes
    import numba

    from . import __version__, codegen, kernel_cache

    print(f"fastmma {__version__}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
          f"ml_dtypes {ml_dtypes.__version__}")
    print(f"threads: numba {numba.get_num_threads()} of {numba.config.NUMBA_NUM_THREADS} "
          f"(set NUMBA_NUM_THREADS to change); machine: {platform.machine()}, {platform.processor() or '?'}")
    print(f"vectors: {codegen.state} (numba CPU features: see fastmma.codegen)")
    print(f"integer GEMMs: {_integer_forms()}")
    print("instructions: wgmma.mma_async (f16, bf16, tf32, e4m3/e5m2, s8/u8, b1), wgmma.mma_async.sp (f16, bf16, "
          "tf32, e4m3/e5m2, s8/u8), wgmma.fence/commit_group/"
          "wait_group, wmma.load/mma/store (f16, bf16, tf32, f64, s8/u8, s4/u4, b1), mma.sync (f16 with m8n8k4, bf16, "
          "tf32, e4m3/e5m2, f64, s8/u8, s4/u4, b1), mma.sp / mma.sp::ordered_metadata (f16, bf16, tf32, e4m3/e5m2, "
          "s8/u8, s4/u4), ldmatrix/stmatrix (.m8n8 .b16), movmatrix (.m8n8.trans .b16)")
    _print_kernel_cache(kernel_cache.state)
    if args.verify is None:
        print("recordings: not replayed (fastmma info --verify [DIR] replays them)")
        return 0
    root = Path(args.verify) if args.verify else default_recordings()
    if root is None:
        print("recordings: none found (pass --verify DIR, e.g. tests/golden of a source checkout)")
        return 0
    return _verify(root, args.progress)


def _print_kernel_cache(stamp_state: str) -> None:
    """Which kernels have compiled code on disk, from the cache's index files (compiles nothing)."""
    from .kernel_report import cached_kernels

    try:
        report = cached_kernels()
    except AttributeError as exc:  # a numba whose cache objects differ from those this reads
        print(f"kernel cache: unknown (numba's cache layout differs: {exc})")
        return
    where = sorted({w for m in report for w in m.where})
    compiled, total = sum(m.compiled for m in report), sum(m.kernels for m in report)
    print(f"kernel cache: {compiled} of {total} kernels compiled ({stamp_state}) in {', '.join(where) or '?'}")
    for m in report:
        stale = f", {m.stale} stale (rebuilt on first use)" if m.stale else ""
        print(f"  {m.module:<16} {m.compiled:>3} of {m.kernels:<3} compiled, {m.signatures} signatures{stale}")


def _verify(root: Path, show: str) -> int:
    """Replay every recording under ``root`` and print the cases passing per family; exit
    status 1 where any fails."""
    from .conform import check_file, recording_files

    by_family: dict[str, list[int]] = {}
    files = recording_files([root])
    with make_bar("verify", total=len(files), unit="file", show=show) as bar:
        for path in files:
            res = check_file(path, limit=0)
            tally = by_family.setdefault(_family_of(path.stem), [0, 0])
            tally[0] += res.passed if res.error is None else 0
            tally[1] += res.cases
            bar.update()
    print(f"recorded cases passing ({root}):")
    for key in sorted(by_family):
        ok, total = by_family[key]
        print(f"  {key:<36} {ok:>5} / {total}")
    return 0 if all(ok == total for ok, total in by_family.values()) else 1


def _family_of(stem: str) -> str:
    """:func:`_family_key` of a recording's file name; a name outside the recorder's scheme is its own family."""
    try:
        return _family_key(stem)
    except IndexError:
        return f"(other) {excerpt(stem, 36)}"


def _family_key(stem: str) -> str:
    parts = stem.split(".")
    if parts[0] == "wgmma_sp":  # wgmma.mma_async.sp files: shape, types
        return f"wgmma.sp {'.'.join(parts[2:5])}" + (".satfinite" if "satfinite" in parts else "")
    if parts[0] == "wgmma":
        rest = parts[2:] if parts[1] == "chain4" else parts[1:]
        types = ".".join(rest[1:4])
        return f"wgmma {types}" + (" chain4" if parts[1] == "chain4" else "")
    if parts[0] in ("ldmatrix", "stmatrix", "movmatrix"):
        return " ".join((parts[0], ".".join(parts[1:])))
    if parts[0] == "mma" and parts[1] in ("sp", "sp_ordered"):  # mma.sp files: variant, shape, types
        sat = ".satfinite" if "satfinite" in parts else ""
        return f"mma.{parts[1]} {parts[2]} {'.'.join(parts[5:8])}{sat}"
    if parts[0] == "mma":
        chain = parts[1] if parts[1].startswith("chain") else None
        rest = parts[2:] if chain else parts[1:]
        layouts = "" if rest[1:3] == ["row", "col"] else f" {rest[1]}.{rest[2]}"  # m8n8k4 .f16 takes any
        ctype = f".{rest[6]}" if len(rest) > 6 and rest[6] != rest[3] else ""
        return f"mma {rest[0]}{layouts} {'.'.join(rest[3:6])}{ctype}" + (f" {chain}" if chain else "")
    return f"wmma {parts[1]} {parts[4]}.{parts[6]}"


def _numerics(inst) -> str:
    """The rule in words, with how many times one instruction applies it along its k."""
    text = inst.rule.describe()
    group = getattr(inst.rule, "group", None)
    sparse = getattr(inst, "family", None) in ("mma_sp", "wgmma_sp")
    terms = inst.shape.k // 2 if sparse else inst.shape.k  # mma.sp, wgmma.mma_async.sp: kept products
    if group and terms > group:
        text += (f"; applied {terms // group} times in increasing k (K={inst.shape.k}), each result "
                 f"the next one's C")
    elif terms < inst.shape.k:
        text += f" (the {terms} kept products of each row; the elements the metadata leaves out take no part)"
    return text


def _cmd_explain(args) -> int:
    from .isa import (Ldmatrix, MmaSp, MmaSync, Movmatrix, Stmatrix, WgmmaMmaAsync, WgmmaMmaAsyncSp, WmmaLoad, WmmaMma,
                      WmmaStore, parse)

    text = args.instruction
    full = ("wgmma", "wmma", "mma.", "ldmatrix", "stmatrix", "movmatrix")
    inst = parse(text) if text.strip().startswith(full) else _resolve(text)[0]
    print(f"instruction: {inst}")
    print(f"kind: {type(inst).__name__} ({inst.opcode})")
    if isinstance(inst, (WgmmaMmaAsync, WgmmaMmaAsyncSp)):
        s = inst.shape
        sparse = isinstance(inst, WgmmaMmaAsyncSp)
        print(f"shape: M={s.m} N={s.n} K={s.k}; D/C .{inst.dtype}, A .{inst.atype}, B .{inst.btype}"
              + (", .satfinite" if inst.satfinite else "") + (f", .{inst.op}.popc" if inst.op else ""))
        a_text = f"A {s.m}x{s.k // 2} (compressed: a row keeps {s.k // 2} of its {s.k})" if sparse else f"A {s.m}x{s.k}"
        print(f"operands: {a_text} from {inst.a_source or 'a descriptor or registers'}; B {s.k}x{s.n} from "
              f"a descriptor; D {s.m}x{s.n}")
        if sparse:
            chosen = f"selector {inst.selector}" if inst.selector is not None else "selector not given"
            print(f"metadata sp-meta: 1 register a thread, each warp's 16 rows as mma.sp .{inst.metadata_shape}; "
                  f"sparsity selector sp-sel: one of {', '.join(map(str, inst.selectors))} ({chosen})")
        print(f"fragments per thread (128 threads): D {inst.d_regs} registers"
              + (" (.f16x2)" if inst.dtype == "f16" else "") + f"; A in registers: {inst.a_regs} registers")
        print(f"immediates: imm-scale-a {inst.imm_scale_a}, imm-scale-b {inst.imm_scale_b}, "
              f"imm-trans-a {inst.imm_trans_a}, imm-trans-b {inst.imm_trans_b}")
        print(f"numerics: {_numerics(inst)}")
    elif isinstance(inst, MmaSp):
        s, row = inst.shape, inst.type_row
        print(f"shape: M={s.m} N={s.n} K={s.k}; A .{inst.atype} structured sparse (a row keeps {s.k // 2} of its "
              f"{s.k}: {row.chunk // 2} of each {row.chunk}), B .{inst.btype}, C .{inst.ctype}, D .{inst.dtype}"
              + (", .satfinite" if inst.satfinite else ""))
        regs = ", ".join(f"{m.upper()} {inst.fragment_regs(m)}" for m in "abcd")
        print(f"fragments per lane (32 lanes), registers: {regs} (A: the compressed {s.m}x{s.k // 2}); "
              f"metadata e: 1 register")
        chosen = f"selector {inst.selector}" if inst.selector is not None else "selector not given"
        print(f"sparsity selector f: one of {', '.join(map(str, row.selectors[str(s)]))} ({chosen}); the metadata "
              f"nibbles the ISA gives a meaning (.{inst.spvariant}): "
              + ", ".join(f"0b{v:04b}" for v in row.nibbles[inst.spvariant]))
        print(f"numerics: {_numerics(inst)}")
    elif isinstance(inst, (WmmaMma, MmaSync)):
        s = inst.shape
        print(f"shape: M={s.m} N={s.n} K={s.k}; A .{inst.atype} ({inst.alayout}), B .{inst.btype} ({inst.blayout}), "
              f"C .{inst.ctype}, D .{inst.dtype}" + (f", rounding .{inst.rounding}" if inst.rounding else ""))
        regs = ", ".join(f"{m.upper()} {inst.fragment_regs(m)}" for m in "abcd")
        print(f"fragments per lane (32 lanes), registers: {regs}"
              + (" (64-bit)" if inst.atype == "f64" else ""))
        if getattr(inst, "quad_pairs", False):
            print("four independent products, one per quad pair: lanes 4p..4p+3 and 4p+16..4p+19 compute product p")
        print(f"numerics: {_numerics(inst)}")
    elif isinstance(inst, (WmmaLoad, WmmaStore)):
        print(f"matrix {inst.matrix.upper()}, .{inst.shape}, .{inst.type}, layout .{inst.layout}, state space "
              f"{'.' + inst.state_space if inst.state_space else 'generic'}; {inst.regs} registers per lane")
    elif isinstance(inst, (Ldmatrix, Stmatrix)):
        moves = "loads" if isinstance(inst, Ldmatrix) else "stores"
        print(f"{moves} {inst.num} matrices of 8x8 .{inst.type}{', transposed' if inst.trans else ''}, state space "
              f"{'.' + inst.state_space if inst.state_space else 'generic'}; lane 8i + r gives the address of row r "
              f"of matrix i (16 bytes, 16-byte aligned); {inst.regs} registers per lane")
    elif isinstance(inst, Movmatrix):
        print(f"transposes one 8x8 .{inst.type} matrix across the warp: lane l's a holds elements (l // 4, 2 (l % 4)) "
              "and (l // 4, 2 (l % 4) + 1), its d the same positions of the transpose; 1 register per lane")
    return 0


# ---------------------------------------------------------------- ptx


def _register_value(text: str):
    """``NAME[:TYPE]=VALUE`` -> (name, value for :func:`fastmma.ptx.run`): an integer (decimal,
    0x, 0b) is a bit pattern, a number with a point or exponent a value, true/false a predicate."""
    name, sep, value = text.partition("=")
    name, _, typ = name.partition(":")
    if not sep or not name or not value:
        raise OperandError(f"--reg takes NAME[:TYPE]=VALUE (e.g. descA:b64=0x4000004000010000), got {text!r}")
    low = value.strip().lower()
    if low in ("true", "false"):
        parsed = low == "true"
    else:
        try:
            parsed = int(low, 0)
        except ValueError:
            if low.lstrip("+-").isdigit():  # an integer past Python's 4300 digits, not a float to round
                raise OperandError(f"--reg {excerpt(name, 40)}: an integer of {len(low)} digits does not fit a "
                                   f"register (64 bits at most)") from None
            try:
                parsed = float(low)
            except ValueError:
                raise OperandError(f"--reg {excerpt(name, 40)}: '{excerpt(value)}' is not an integer, a number or "
                                   f"true/false") from None
    return name, ((typ, parsed) if typ else parsed)


def _image(path: str | None, name: str):
    """A memory image from a raw binary file or a .npy file of uint8 (None: none given)."""
    if path is None:
        return None
    if str(path).endswith(".npy"):
        return _load(path, name)
    try:
        return np.fromfile(path, np.uint8)
    except OSError as exc:
        raise OperandError(f"--{name}: cannot read {path}: {exc.strerror}") from None


def _shown(values: np.ndarray, most: int = 8) -> str:
    """A register's per-thread values: one value where every thread holds it."""
    if values.size and (values == values[0]).all() or (values.dtype.kind == "f" and np.isnan(values).all()):
        return f"{values[0]} (every thread)"
    head = ", ".join(str(v) for v in values[:most])
    return f"[{head}{', ...' if values.size > most else ''}] ({values.size} threads)"


def _cmd_ptx(args) -> int:
    from . import ptx

    registers = dict(_register_value(text) for text in args.reg or ())
    if args.regs:
        registers.update(read_npz(args.regs, "--regs"))
    smem, global_mem = _image(args.smem, "smem"), _image(args.global_mem, "global")
    try:
        source = sys.stdin.read() if args.snippet == "-" else Path(args.snippet).read_text()
    except OSError as exc:
        raise OperandError(f"cannot read {args.snippet}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise OperandError(f"snippet: {args.snippet} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                           f"offset {exc.start}); PTX is text") from None
    steps = {} if args.max_steps is None else {"max_steps": args.max_steps}  # else ptx.run's own default
    m = ptx.run(source, registers or None, smem=smem, global_mem=global_mem,
                strict=not args.non_strict, threads=args.threads, **steps)
    names = args.show.split(",") if args.show else list(m.registers)
    for name in names:
        print(f"{name} .{m.type_of(name).name}: {_shown(m.peek(name, m.type_of(name).view))}")
    if args.save:
        arrays = {name: m.peek(name) for name in m.registers}
        try:
            np.savez(args.save, **arrays, **{"%smem": np.array(m.smem), "%global": np.array(m.global_mem)})
        except OSError as exc:
            raise OperandError(f"--save: cannot write {args.save}: {exc.strerror}") from None
        print(f"saved every register (raw bits, one value per thread), %smem and %global to {args.save}")
    return 0


def _cmd_warmup(args) -> int:
    from .warmup import warmup

    report = warmup(args.types or None, processes=args.jobs, progress=args.progress)
    print(f"warmup: {' '.join(report.types)}: {report.compiled} functions compiled, {report.loaded} loaded from "
          f"numba's cache, {report.calls} calls, {report.seconds:.1f} s")
    return 0


# ---------------------------------------------------------------- parser


def _progress_option(parser, what: str) -> None:
    parser.add_argument("--progress", choices=SHOW_CHOICES, default="auto",
                        help=f"{what}; always: also into a pipe, a line at a time; never: no bar")


class UsageError(FastmmaError):
    """A command line that argparse refuses (reported as one line, exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, whose errors are one ``fastmma: error:`` line rather than a usage block."""

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``fastmma`` command's argument parser, one subcommand per command."""
    parser = _Parser(prog="fastmma", description="Bit-exact Hopper (sm_90a) wgmma/wmma on the CPU.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("gemm", help="a bit-exact GEMM with a k-loop of one instruction")
    p.add_argument("--instruction", "-i", default=DEFAULT_INSTRUCTION,
                   help=f"PTX text or short form (default {DEFAULT_INSTRUCTION})")
    p.add_argument("--size", type=int, default=1024, help="M = N = K for random inputs (default 1024)")
    p.add_argument("--m", type=int, help="rows of A and D (overrides --size)")
    p.add_argument("--n", type=int, help="columns of B and D (overrides --size)")
    p.add_argument("--k", type=int, help="columns of A, rows of B (overrides --size)")
    p.add_argument("--a", metavar="A.npy", help="A from a .npy file (with --b)")
    p.add_argument("--b", metavar="B.npy", help="B from a .npy file (with --a)")
    p.add_argument("--c", metavar="C.npy", help="C from a .npy file")
    p.add_argument("--sparse", action="store_true",
                   help="read the instruction as mma.sp / wgmma.mma_async.sp (fastmma.matmul_sp): A is a dense, "
                        "pruned matrix (random inputs: pruned at random), or with --columns the compressed one")
    p.add_argument("--columns", metavar="COLUMNS.npy",
                   help="with --sparse and --a: the dense column of each element of a compressed A (M x K/2)")
    p.add_argument("--with-c", action="store_true", help="random inputs: add a random C")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--out", "-o", metavar="D.npy", help="write D to a .npy file")
    _progress_option(p, "a bar on stderr (auto: on a terminal, for GEMMs of 2^31 multiply-adds or more)")
    p.add_argument("--no-check", action="store_true", help="skip the error report against a float64 reference")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="run on a Dask cluster (pip install 'fastmma[dask]'); same bits as the local run")
    p.add_argument("--block", type=int, metavar="N", help="with --scheduler: output block size (default 1024)")
    p.set_defaults(func=_cmd_gemm)

    p = sub.add_parser("conform", help="replay hardware recordings (golden format v1) and compare every bit")
    p.add_argument("paths", nargs="+", help="recording files or directories")
    p.add_argument("--show", type=int, default=8, metavar="N", help="mismatches to print per file (default 8)")
    _progress_option(p, "a bar of files on stderr (auto: on a terminal only)")
    p.set_defaults(func=_cmd_conform)

    p = sub.add_parser("info", help="versions, threads, vector width, kernels in the cache; --verify replays "
                                    "the recordings")
    p.add_argument("--verify", nargs="?", const="", metavar="DIR",
                   help="replay the recordings under DIR (default: tests/golden of a checkout) and count the "
                        "cases passing")
    p.add_argument("--recordings", dest="verify", metavar="DIR", help=argparse.SUPPRESS)  # the older spelling
    _progress_option(p, "with --verify: a bar of files on stderr (auto: on a terminal only)")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("warmup", help="compile the kernels ahead of use, in parallel, into numba's cache")
    p.add_argument("types", nargs="*", metavar="TYPE", help="types to compile for (default: all): f16 bf16 tf32 "
                                                            "e4m3 e5m2 s8 u8 s4 u4 b1 f64")
    p.add_argument("--jobs", "-j", type=int, help="processes at once (default: the CPUs)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress bar on stderr (auto: on a terminal; always: a line now and then in a pipe)")
    p.set_defaults(func=_cmd_warmup)

    p = sub.add_parser("explain", help="what an instruction is: qualifiers, sizes, numerics rule")
    p.add_argument("instruction", help="PTX text or short form")
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("ptx", help="run a PTX snippet (fastmma.ptx) and print its registers")
    p.add_argument("snippet", help="a file of PTX text, or - for standard input")
    p.add_argument("--reg", action="append", metavar="NAME[:TYPE]=VALUE",
                   help="a register's value for every thread (repeatable); TYPE for one the snippet does not "
                        "declare, e.g. descA:b64=0x...")
    p.add_argument("--regs", metavar="REGS.npz", help="registers' values, one array per register (a value per "
                                                      "thread, or one for all)")
    p.add_argument("--smem", metavar="FILE", help="the shared-memory image (raw bytes, or a .npy of uint8)")
    p.add_argument("--global", dest="global_mem", metavar="FILE", help="the global-memory image (raw bytes or .npy)")
    p.add_argument("--threads", type=int, help="threads to run (default: 128 with wgmma, else 32)")
    p.add_argument("--show", metavar="NAMES", help="comma-separated registers to print (default: every register)")
    p.add_argument("--save", metavar="OUT.npz", help="write every register and both memory images to a .npz")
    p.add_argument("--non-strict", action="store_true", help="run the ISA's undefined cases instead of reporting them")
    p.add_argument("--max-steps", type=int, help="statements to run before stopping (default 2^20, as fastmma.ptx.run)")
    p.set_defaults(func=_cmd_ptx)

    from .verify import add_parser as add_verify  # fastmma/verify.py: its options and command

    add_verify(sub)
    return parser


def main(argv=None) -> int:
    """Run the ``fastmma`` command on ``argv`` (default ``sys.argv[1:]``) and return its exit
    status: 0, 1 where ``conform`` or ``info --verify`` finds a mismatch, 2 for a fastmma error
    (printed as one line on stderr).  Example: ``main(["explain", "m64n8k16.f32.f16.f16"])``."""
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except FastmmaError as exc:
        message = shorten(" ".join(str(exc).split()))
        print(f"fastmma: error: {message}", file=sys.stderr)
        return 2
    except MemoryError as exc:  # numpy's message names the array it could not allocate
        print(f"fastmma: error: out of memory: {exc}", file=sys.stderr)
        return 2
