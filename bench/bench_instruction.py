"""One instruction at a time, as a GPU simulator issues it.

Run:  python -m pytest bench/bench_instruction.py -q

A simulator calls fastmma once per ``wgmma.mma_async`` (or ``wmma.mma``) its warps issue,
so what it pays is the whole call: parsing, descriptors read against the shared-memory
image, register fragments unpacked and packed, the kernel.  Each wgmma case times one
instruction by three paths:

* ``wgmma.mma_async``: the register-level entry point (accumulator registers, A and B by
  128B-swizzled matrix descriptors into a shared-memory image);
* ``Warpgroup``: ``wgmma.fence``, ``mma_async``, ``commit_group``, ``wait_group 0`` on a
  warpgroup's register file, with the hazard checks of strict mode, as one step of a k-loop
  (the accumulators stay in the register file from one call to the next);
* ``fastmma.mma``: the same instruction on logical matrices;

and two stacks of 512, one call issuing the instruction for each (the time recorded per
instruction): ``fastmma.mma`` on 512 tiles, and ``wgmma.mma_async_stack`` on 512
warpgroups, each with its own registers and shared-memory image.

Each wmma case times ``fastmma.wmma.mma`` on a warp's A, B and C fragments (D's fragment
out) and ``fastmma.mma`` on the logical matrices; each ``mma.sync`` case times
``fastmma.mma_sync.mma`` the same way, one call and a stack of 512 warps.

The prepared forms (``fastmma.wgmma.prepare``, ``fastmma.mma_sync.prepare``,
``fastmma.wmma.prepare``: the instruction parsed and its index maps built once) time one
call of each case beside the unprepared call in the same process, and a simulator's loop of
:data:`CHAIN` chained instructions (the D of one the C of the next).

Beside each, in the same run: numpy's float32 ``A @ B`` of the same tile (not bit-exact, a
floor no emulator reaches: the ratio says how many such products one call costs), and
MMA-Sim's ``WGMMA`` (``MMA`` for ``mma.sync``) on the same logical matrices where it is
installed and models the form (it has no integer wgmma, and no fp8 or integer mma), timed in this process with glibc told to keep freed memory
(``bench_matmul.keep_freed_memory``).  The results of every path are checked bit for bit
against each other and against MMA-Sim.
"""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest

import fastmma
from bench_matmul import keep_freed_memory
from fastmma.formats import get_format, to_bits
from fastmma.isa import WmmaLoad
from fastmma.layout.descriptor import MatrixDescriptor, element_addresses
from fastmma.layout.wgmma_fragments import pack_d, unpack_d
from fastmma.layout.mma_fragments import fragment_layout as mma_fragment_layout
from fastmma.layout.wmma_fragments import fragment_layout, pack_fragment, unpack_fragment
from fastmma.warpgroup import register_names

try:
    import torch
    from mmasim.nv_ptx import MMA as MmaSimMMA
    from mmasim.nv_ptx import WGMMA as MmaSimWGMMA
except ImportError:  # MMA-Sim's column is left empty
    MmaSimWGMMA = MmaSimMMA = None

keep_freed_memory()

#: short form -> (A/B numpy dtype, torch dtype name for MMA-Sim or None, accumulator dtype)
CASES = {
    "m64n8k16.f32.f16.f16": (np.float16, "float16", np.float32),
    "m64n64k16.f32.f16.f16": (np.float16, "float16", np.float32),
    "m64n256k16.f32.f16.f16": (np.float16, "float16", np.float32),
    "m64n256k16.f32.bf16.bf16": (ml_dtypes.bfloat16, "bfloat16", np.float32),
    "m64n256k8.f32.tf32.tf32": (np.float32, "float32", np.float32),
    "m64n256k32.f32.e4m3.e4m3": (ml_dtypes.float8_e4m3fn, "float8_e4m3fn", np.float32),
    "m64n128k32.s32.s8.s8": (np.int8, None, np.int32),
}
PATHS = ("wgmma.mma_async", "Warpgroup", "fastmma.mma")
#: wmma.mma text -> (A/B numpy dtype, accumulator dtype)
WMMA_CASES = {
    "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32": (np.float16, np.float32),
    "wmma.mma.sync.aligned.row.col.m16n16k16.f32.bf16.bf16.f32": (ml_dtypes.bfloat16, np.float32),
    "wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32": (np.float32, np.float32),
    "wmma.mma.sync.aligned.row.col.m16n16k16.s32.s8.s8.s32": (np.int8, np.int32),
    "wmma.mma.sync.aligned.row.col.m8n8k4.rn.f64.f64.f64.f64": (np.float64, np.float64),
}
WMMA_PATHS = ("wmma.mma", "fastmma.mma")
#: mma.sync text -> (A/B numpy dtype, accumulator dtype, torch dtype name for MMA-Sim's MMA or None)
MMA_SYNC_CASES = {
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": (np.float16, np.float32, "float16"),
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": (ml_dtypes.bfloat16, np.float32, "bfloat16"),
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32": (np.float32, np.float32, "float32"),
    "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32": (ml_dtypes.float8_e4m3fn, np.float32, None),
    "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32": (np.int8, np.int32, None),
    "mma.sync.aligned.m16n8k8.row.col.rn.f64.f64.f64.f64": (np.float64, np.float64, "float64"),
}
SMEM_BYTES = 48 * 1024
A_AT, B_AT = 0, 8192  # 64 rows of 128 bytes for A, then B's rows


def _operands(short):
    dtype, _, acc = CASES[short]
    return _random(fastmma.parse("wgmma.mma_async.sync.aligned." + short).shape, dtype, acc)


def _random(shape, dtype, acc):
    """Random A (M x K), B (K x N) of ``dtype`` and C (M x N) of ``acc``."""
    m, n, k = shape.m, shape.n, shape.k
    rng = np.random.default_rng(0)
    if np.dtype(dtype).kind == "i":
        A, B = (rng.integers(-128, 128, size=s).astype(dtype) for s in ((m, k), (k, n)))
    else:
        A, B = (rng.standard_normal(s).astype(dtype) for s in ((m, k), (k, n)))
    C = rng.standard_normal((m, n)).astype(acc) if np.dtype(acc).kind == "f" else rng.integers(-999, 999, (m, n), acc)
    return A, B, C


def _shared_memory(A, B):
    """A and B K-major in a 128B-swizzled image (one 128-byte row per M or N, 8-row groups
    1024 bytes apart), as CUTLASS lays out Hopper tiles; their descriptors."""
    a_desc = MatrixDescriptor(start_address=A_AT, leading_byte_offset=16, stride_byte_offset=1024, swizzle="128B")
    b_desc = MatrixDescriptor(start_address=B_AT, leading_byte_offset=16, stride_byte_offset=1024, swizzle="128B")
    smem = np.zeros(SMEM_BYTES, np.uint8)
    width = A.dtype.itemsize
    for desc, rows in ((a_desc, A), (b_desc, B.T)):
        byte, _ = element_addresses(desc, *rows.shape, 8 * width)
        elements = np.ascontiguousarray(rows).view(np.uint8).reshape(rows.shape + (width,))
        for q in range(width):
            smem[byte + q] = elements[..., q]
    return smem, a_desc, b_desc


def _issue(short, path, A, B, C):
    """Two functions that issue the instruction once by ``path``: the first returns D's
    bits as a matrix, the second (the one timed) what the path itself returns."""
    inst = "wgmma.mma_async.sync.aligned." + short
    acc = "f32" if C.dtype == np.float32 else "s32"
    n = C.shape[1]
    if path == "fastmma.mma":
        call = lambda: fastmma.mma(inst, A, B, C).view(np.uint32)  # noqa: E731
        return call, call
    smem, a_desc, b_desc = _shared_memory(A, B)
    c_regs = pack_d(C, acc)
    if path == "wgmma.mma_async":
        call = lambda: fastmma.wgmma.mma_async(inst, c_regs, a_desc=a_desc, b_desc=b_desc, smem=smem)  # noqa: E731
        return lambda: unpack_d(call(), acc, n), call
    wg = fastmma.Warpgroup(smem)
    d = register_names("%r", c_regs.shape[1])
    wg.write(d, c_regs)

    def warpgroup():  # one step of a k-loop: D accumulates from call to call
        wg.fence()
        wg.mma_async(inst, d=d, a=a_desc, b_desc=b_desc)
        wg.commit_group()
        wg.wait_group(0)

    def first_step():
        warpgroup()
        return unpack_d(wg.read(d), acc, n)

    return first_step, warpgroup


def _best_seconds(fn, repeat):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("short", list(CASES))
def test_one_instruction(benchmark, record_instruction, short, path):
    A, B, C = _operands(short)
    first, call = _issue(short, path, A, B, C)
    expect = fastmma.mma("wgmma.mma_async.sync.aligned." + short, A, B, C).view(np.uint32)
    assert np.array_equal(first(), expect)  # also compiles or loads the kernels
    benchmark.pedantic(call, rounds=50, iterations=1, warmup_rounds=3)
    a32, b32 = A.astype(np.float32), B.astype(np.float32)
    numpy_s = _best_seconds(lambda: a32 @ b32, 200)
    mmasim_s = None
    torch_dtype = CASES[short][1]
    if MmaSimWGMMA is not None and torch_dtype is not None:
        args = [torch.from_numpy(x.astype(np.float32)).to(getattr(torch, torch_dtype)) for x in (A, B)]
        sim = MmaSimWGMMA("Hopper", short)
        theirs = sim(*args, torch.from_numpy(C))
        assert np.array_equal(theirs.numpy().view(np.uint32), expect)
        mmasim_s = _best_seconds(lambda: sim(*args, torch.from_numpy(C)), 20)
    record_instruction(short, path, benchmark.stats.stats.min, numpy_s, mmasim_s)


#: How many tiles the stacked case issues in one call (a simulator's warpgroups, gathered)
STACK = 512


@pytest.mark.parametrize("short", list(CASES))
def test_stack_of_instructions(benchmark, record_instruction, short):
    """``fastmma.mma`` on a stack of :data:`STACK` tiles, one instruction per tile in one call
    (the stack kernels for the float types), recorded per instruction beside numpy's stacked
    float32 product, per tile."""
    text = "wgmma.mma_async.sync.aligned." + short
    dtype, _, acc = CASES[short]
    shape = fastmma.parse(text).shape
    tiles = [_random(shape, dtype, acc) for _ in range(2)]  # two different tiles, alternating
    A, B, C = (np.stack([tiles[i % 2][j] for i in range(STACK)]) for j in range(3))
    got = fastmma.mma(text, A, B, C)  # also compiles or loads the kernels
    for i in (0, 1, STACK - 1):
        assert np.array_equal(got[i].view(np.uint32), fastmma.mma(text, A[i], B[i], C[i]).view(np.uint32))
    benchmark.pedantic(fastmma.mma, args=(text, A, B, C), rounds=10, iterations=1, warmup_rounds=1)
    a32, b32 = A.astype(np.float32), B.astype(np.float32)
    numpy_s = _best_seconds(lambda: a32 @ b32, 20)
    record_instruction(short, f"fastmma.mma, a stack of {STACK}", benchmark.stats.stats.min / STACK,
                       numpy_s / STACK, None)


@pytest.mark.parametrize("short", list(CASES))
def test_stack_of_wgmma(benchmark, record_instruction, short):
    """``wgmma.mma_async_stack`` on :data:`STACK` warpgroups, each with its own registers and
    its own shared-memory image (a simulator's warpgroups issuing the same instruction),
    recorded per instruction beside numpy's stacked float32 product, per tile."""
    text = "wgmma.mma_async.sync.aligned." + short
    dtype, _, acc = CASES[short]
    shape = fastmma.parse(text).shape
    tiles = [_random(shape, dtype, acc) for _ in range(2)]  # two different tiles, alternating
    images = [_shared_memory(A, B) for A, B, _ in tiles]
    smem = np.stack([images[i % 2][0] for i in range(STACK)])
    _, a_desc, b_desc = images[0]
    acc_name = "f32" if acc == np.float32 else "s32"
    regs = np.stack([pack_d(tiles[i % 2][2], acc_name) for i in range(STACK)])
    got = fastmma.wgmma.mma_async_stack(text, regs, a_desc=a_desc, b_desc=b_desc, smem=smem)  # compiles or loads
    for i in (0, 1, STACK - 1):
        one = fastmma.wgmma.mma_async(text, regs[i], a_desc=a_desc, b_desc=b_desc, smem=smem[i])
        assert np.array_equal(got[i], one)
    benchmark.pedantic(fastmma.wgmma.mma_async_stack, args=(text, regs), rounds=10, iterations=1, warmup_rounds=1,
                       kwargs=dict(a_desc=a_desc, b_desc=b_desc, smem=smem))
    A, B = (np.stack([tiles[i % 2][j] for i in range(STACK)]).astype(np.float32) for j in range(2))
    numpy_s = _best_seconds(lambda: A @ B, 20)
    record_instruction(short, f"wgmma.mma_async_stack, a stack of {STACK}", benchmark.stats.stats.min / STACK,
                       numpy_s / STACK, None)


@pytest.mark.parametrize("text", list(WMMA_CASES))
def test_stack_of_wmma(benchmark, record_instruction, text):
    """``wmma.mma_stack`` on :data:`STACK` warps, each with its own fragments (a simulator's
    warps issuing the same instruction), recorded per instruction beside numpy's stacked
    float32 product, per tile."""
    inst = fastmma.parse(text)
    tiles = [_random(inst.shape, *WMMA_CASES[text]) for _ in range(2)]  # two different tiles, alternating
    short = f"wmma {inst.shape}.{inst.dtype}.{inst.atype}.{inst.btype}.{inst.ctype}"
    _time_stack_of_warps(benchmark, record_instruction, inst, tiles, fastmma.wmma, fragment_layout, short)


def _time_stack_of_warps(benchmark, record_instruction, inst, tiles, module, layout_of, short):
    """``module.mma_stack`` (``fastmma.wmma`` or ``fastmma.mma_sync``) on :data:`STACK` warps
    holding the ``tiles`` in turn (fragments placed by ``layout_of``), checked against one
    call each and recorded per instruction beside numpy's stacked float32 product, per tile."""
    frags = [_fragments(inst, A, B, C, layout_of) for A, B, C in tiles]
    a, b, c = (np.stack([frags[i % 2][j] for i in range(STACK)]) for j in range(3))
    got = module.mma_stack(inst, a, b, c)  # compiles or loads the kernels
    for i in (0, 1, STACK - 1):
        assert np.array_equal(got[i], module.mma(inst, a[i], b[i], c[i]))
    benchmark.pedantic(module.mma_stack, args=(inst, a, b, c), rounds=10, iterations=1, warmup_rounds=1)
    A, B = (np.stack([tiles[i % 2][j] for i in range(STACK)]).astype(np.float32) for j in range(2))
    numpy_s = _best_seconds(lambda: A @ B, 20)
    record_instruction(short, f"{module.__name__.split('.')[-1]}.mma_stack, a stack of {STACK}",
                       benchmark.stats.stats.min / STACK, numpy_s / STACK, None)


#: wmma.load and wmma.store of a stack of warps
WMMA_MEMORY_CASES = ("wmma.load.a.sync.aligned.row.m16n16k16.f16", "wmma.store.d.sync.aligned.row.m16n16k16.f32")


@pytest.mark.parametrize("text", WMMA_MEMORY_CASES)
def test_stack_of_wmma_memory(benchmark, record_instruction, text):
    """``wmma.load_stack`` / ``store_stack`` on :data:`STACK` warps, each at its own address
    of one memory image with a stride of its own, recorded per warp beside one call and
    numpy copying the same bytes (the matrices' rows as one slice each)."""
    inst = fastmma.parse(text)
    rng = np.random.default_rng(0)
    mem = rng.integers(0, 256, STACK * 2048, dtype=np.uint8)
    offsets = np.arange(STACK) * 2048
    strides = 16 + 8 * (np.arange(STACK) % 3)  # 16, 24 or 32 elements
    if isinstance(inst, WmmaLoad):
        name = "wmma.load"
        stack = lambda: fastmma.wmma.load_stack(text, mem, offsets, strides)  # noqa: E731
        one = lambda: fastmma.wmma.load(text, mem, int(offsets[1]), int(strides[1]))  # noqa: E731
        assert np.array_equal(stack()[1], one())  # compiles or loads the loops
    else:
        name = "wmma.store"
        d = rng.integers(0, 2**32, (STACK, 32, fragment_layout("d", str(inst.shape), inst.type, inst.layout).words),
                         dtype=np.uint32)
        stack = lambda: fastmma.wmma.store_stack(text, mem, offsets, d, strides)  # noqa: E731
        one = lambda: fastmma.wmma.store(text, mem, int(offsets[1]), d[1], int(strides[1]))  # noqa: E731
        stack()  # compiles or loads the loops
    benchmark.pedantic(stack, rounds=20, iterations=1, warmup_rounds=1)
    single_s = _best_seconds(one, 50)
    rows = mem.reshape(STACK, 16, -1)[:, :, :16 * get_format(inst.type).bits // 8]  # 16 rows of 16 elements
    numpy_s = _best_seconds(rows.copy, 20)
    short = text.split(".aligned.")[1]
    record_instruction(short, f"{name}_stack, a stack of {STACK}", benchmark.stats.stats.min / STACK,
                       numpy_s / STACK, None)
    record_instruction(short, name, single_s, numpy_s / STACK, None)


def _fragments(inst, A, B, C, layout_of=fragment_layout):
    """The warp's A, B and C fragments holding the matrices ``A``, ``B`` and ``C``
    (``layout_of``: wmma's fragment maps, or mma's)."""
    return [pack_fragment(to_bits(values, elem), layout_of(matrix, str(inst.shape), elem))
            for matrix, values, elem in (("a", A, inst.atype), ("b", B, inst.btype), ("c", C, inst.ctype))]


@pytest.mark.parametrize("path", WMMA_PATHS)
@pytest.mark.parametrize("text", list(WMMA_CASES))
def test_one_wmma(benchmark, record_instruction, text, path):
    inst = fastmma.parse(text)
    A, B, C = _random(inst.shape, *WMMA_CASES[text])
    expect = fastmma.mma(inst, A, B, C)
    d_layout = fragment_layout("d", str(inst.shape), inst.dtype)
    if path == "wmma.mma":
        a, b, c = _fragments(inst, A, B, C)
        call = lambda: fastmma.wmma.mma(inst, a, b, c)  # noqa: E731
        assert np.array_equal(unpack_fragment(call(), d_layout), to_bits(expect, inst.dtype))
    else:
        call = lambda: fastmma.mma(inst, A, B, C)  # noqa: E731
    benchmark.pedantic(call, rounds=50, iterations=1, warmup_rounds=3)
    a32, b32 = A.astype(np.float32), B.astype(np.float32)
    numpy_s = _best_seconds(lambda: a32 @ b32, 200)
    short = f"wmma {inst.shape}.{inst.dtype}.{inst.atype}.{inst.btype}.{inst.ctype}"
    record_instruction(short, path, benchmark.stats.stats.min, numpy_s, None)


def _mma_sync_short(inst) -> str:
    return f"mma {inst.shape}.{inst.dtype}.{inst.atype}.{inst.btype}.{inst.ctype}"


@pytest.mark.parametrize("path", ("mma_sync.mma", "fastmma.mma"))
@pytest.mark.parametrize("text", list(MMA_SYNC_CASES))
def test_one_mma_sync(benchmark, record_instruction, text, path):
    """One ``mma.sync`` on a warp's fragments (or on the logical matrices), beside MMA-Sim's
    ``MMA`` of the same form where it models it."""
    inst = fastmma.parse(text)
    dtype, acc, torch_dtype = MMA_SYNC_CASES[text]
    A, B, C = _random(inst.shape, dtype, acc)
    expect = to_bits(fastmma.mma(inst, A, B, C), inst.dtype)
    if path == "mma_sync.mma":
        a, b, c = _fragments(inst, A, B, C, mma_fragment_layout)
        call = lambda: fastmma.mma_sync.mma(inst, a, b, c)  # noqa: E731
        assert np.array_equal(unpack_fragment(call(), mma_fragment_layout("d", str(inst.shape), inst.dtype)), expect)
    else:
        call = lambda: fastmma.mma(inst, A, B, C)  # noqa: E731
    benchmark.pedantic(call, rounds=50, iterations=1, warmup_rounds=3)
    a32, b32 = A.astype(np.float32), B.astype(np.float32)
    numpy_s = _best_seconds(lambda: a32 @ b32, 200)
    mmasim_s = None
    if MmaSimMMA is not None and torch_dtype is not None:
        sim = MmaSimMMA("Hopper", f"{inst.shape}.{inst.dtype}.{inst.atype}.{inst.btype}.{inst.ctype}")
        args = [torch.from_numpy(np.asarray(x, np.float64).astype(np.float32 if torch_dtype != "float64" else np.float64))
                .to(getattr(torch, torch_dtype)) for x in (A, B)] + [torch.from_numpy(C)]
        theirs = sim(*args).numpy()
        assert np.array_equal(theirs.view(expect.dtype), expect)
        mmasim_s = _best_seconds(lambda: sim(*args), 20)
    record_instruction(_mma_sync_short(inst), path, benchmark.stats.stats.min, numpy_s, mmasim_s)


@pytest.mark.parametrize("text", list(MMA_SYNC_CASES))
def test_stack_of_mma_sync(benchmark, record_instruction, text):
    """``mma_sync.mma_stack`` on :data:`STACK` warps, each with its own fragments, recorded
    per instruction beside numpy's stacked float32 product, per tile."""
    inst = fastmma.parse(text)
    dtype, acc, _ = MMA_SYNC_CASES[text]
    tiles = [_random(inst.shape, dtype, acc) for _ in range(2)]  # two different tiles, alternating
    _time_stack_of_warps(benchmark, record_instruction, inst, tiles, fastmma.mma_sync, mma_fragment_layout,
                         _mma_sync_short(inst))


#: Instructions of the chained loop (a simulator issuing one instruction after another, each
#: accumulating into the registers the last one wrote)
CHAIN = 10_000


def _prepared_wgmma(short):
    """The prepared and the unprepared call of one wgmma case (A and B by descriptors into a
    128B-swizzled image), each ``call(d_regs)``, and the first C registers."""
    text = "wgmma.mma_async.sync.aligned." + short
    A, B, C = _operands(short)
    smem, a_desc, b_desc = _shared_memory(A, B)
    c_regs = pack_d(C, "f32" if C.dtype == np.float32 else "s32")
    op = fastmma.wgmma.prepare(text)
    a, b = a_desc.encode(), b_desc.encode()
    return (lambda d: op(d, a, b, smem),
            lambda d: fastmma.wgmma.mma_async(text, d, a_desc=a_desc, b_desc=b_desc, smem=smem), c_regs)


def _prepared_warp(text, module, layout_of, dtype, acc):
    """The prepared and the unprepared call of one warp-level case, each ``call(c)``, and the
    first C fragment."""
    inst = fastmma.parse(text)
    a, b, c = _fragments(inst, *_random(inst.shape, dtype, acc), layout_of)
    op = module.prepare(text)
    return lambda d: op(a, b, d), lambda d: module.mma(text, a, b, d), c


def _prepared_cases():
    """Every case of the tables above, as (label, prepared call, unprepared call, first C)."""
    for short in CASES:
        yield (f"wgmma {short}", *_prepared_wgmma(short))
    for text, (dtype, acc, _) in MMA_SYNC_CASES.items():
        yield (_mma_sync_short(fastmma.parse(text)),
               *_prepared_warp(text, fastmma.mma_sync, mma_fragment_layout, dtype, acc))
    for text, (dtype, acc) in WMMA_CASES.items():
        inst = fastmma.parse(text)
        yield (f"wmma {inst.shape}.{inst.dtype}.{inst.atype}.{inst.btype}.{inst.ctype}",
               *_prepared_warp(text, fastmma.wmma, fragment_layout, dtype, acc))


PREPARED = {label: (prepared, unprepared, c) for label, prepared, unprepared, c in _prepared_cases()}


@pytest.mark.parametrize("label", list(PREPARED))
def test_prepared_instruction(benchmark, record_ratio, label):
    """One call of the prepared instruction, recorded against the unprepared call of the same
    instruction on the same operands, the two timed in turns (one unprepared call before each
    prepared one: on a machine shared with other work both meet the same load)."""
    prepared, unprepared, c = PREPARED[label]
    assert np.array_equal(prepared(c), unprepared(c))  # also compiles or loads the kernels
    baseline = []

    def unprepared_call():
        baseline.append(_best_seconds(lambda: unprepared(c), 1))
        return (c,), {}

    benchmark.pedantic(prepared, setup=unprepared_call, rounds=200, iterations=1, warmup_rounds=5)
    record_ratio(label, "one call, prepared", benchmark.stats.stats.min, "unprepared call", min(baseline))


CHAINED = ("wgmma m64n8k16.f32.f16.f16", "wgmma m64n256k16.f32.f16.f16",
           "mma m16n8k16.f32.f16.f16.f32")


@pytest.mark.parametrize("label", CHAINED)
def test_chained_prepared_instructions(benchmark, record_ratio, label):
    """A simulator's loop: :data:`CHAIN` prepared instructions, the D of each the C of the
    next, recorded per instruction against the same loop of unprepared calls (a tenth as many)."""
    prepared, unprepared, c = PREPARED[label]

    def loop(call, count):
        d = c
        for _ in range(count):
            d = call(d)
        return d

    assert np.array_equal(loop(prepared, 3), loop(unprepared, 3))
    benchmark.pedantic(loop, args=(prepared, CHAIN), rounds=1, iterations=1, warmup_rounds=0)
    record_ratio(label, f"a chain of {CHAIN}, per instruction", benchmark.stats.stats.min / CHAIN,
                 "unprepared chain", _best_seconds(lambda: loop(unprepared, CHAIN // 10), 2) / (CHAIN // 10))
