"""fastmma.ptx: PTX snippets run through the interpreter (loops: tests/test_ptx_control.py).

Expected values never come from the interpreter: they come from the H100 recordings
(tests/golden: the compiled PTX the GPU ran, replayed statement for statement), from the
single-instruction paths :func:`fastmma.wgmma.mma_async` and :mod:`fastmma.wmma` (verified
against every recording by the conformance tests), or from numpy.

The ``ISA_*`` blocks are the example code blocks of the PTX ISA, verbatim (section numbers as
published at ptx.poole.ai): 9.7.15.5.2 wgmma.mma_async, 9.7.15.7.1 wgmma.fence, 9.7.15.7.2
wgmma.commit_group, 9.7.15.7.3 wgmma.wait_group, 9.7.14.4.3 wmma.load, 9.7.14.4.4 wmma.store,
9.7.14.4.5 wmma.mma.  Blocks that are not self-contained PTX (undeclared registers, missing
``;``, ``...`` for elided code, instructions fastmma does not execute) must fail as an
assembler fails: the test names the error class, line and column.  The runnable ones run in
strict mode where the ISA's rules allow it, and their results are compared bit for bit.
"""

import re
import zlib

import numpy as np
import pytest

from conftest import golden_files
from fastmma import ptx, wgmma, wmma
from fastmma.conform import load_recording
from fastmma.errors import (
    AlignmentError,
    FastmmaError,
    HazardError,
    InvalidInstructionError,
    MemoryBoundsError,
    OperandError,
    PTXSyntaxError,
    UnsupportedInstructionError,
)
from fastmma.isa import parse
from fastmma.layout.descriptor import MatrixDescriptor

# ---------------------------------------------------------------------- ISA example blocks

# PTX ISA 9.7.15.5.2 wgmma.mma_async, examples of half precision floating point type (verbatim)
ISA_MMA_ASYNC_F16 = """\
.reg .f16x2 f16a<40>, f16d<40>;
.reg .f32   f32d<40>;
.reg .b64   descA, descB;
.reg .pred  scaleD;
wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16
  {f32d0, f32d1, f32d2, f32d3},
  {f16a0, f16a1, f16a2, f16a3},
  descB,
  1, -1, -1, 1;

wgmma.mma_async.sync.aligned.m64n72k16.f16.f16.f16
  {f16d0, f16d1,  f16d2,  f16d3,  f16d4,  f16d5,  f16d6,  f16d7,  f16d8,
   f16d9, f16d10, f16d11, f16d12, f16d13, f16d14, f16d15, f16d16, f16d17},
  descA,
  descB,
  scaleD, -1, 1, 1, 0;
"""

# PTX ISA 9.7.15.5.2 wgmma.mma_async, examples of alternate floating point type (verbatim)
ISA_MMA_ASYNC_ALT = """\
.reg .f32   f32d<40>;
.reg .b32   bf16a<40>
.reg .b64   descA, descB;

wgmma.mma_async.sync.aligned.m64n120k16.f32.bf16.bf16
  {f32d0, f32d1, f32d2, f32d3, f32d4, f32d5, f32d6, f32d7, f32d8, f32d9,
   f32d10, f32d11, f32d12, f32d13, f32d14, f32d15, f32d16, f32d17, f32d18, f32d19,
   f32d20, f32d21, f32d22, f32d23, f32d24, f32d25, f32d26, f32d27, f32d28, f32d29,
   f32d30, f32d31, f32d32, f32d33, f32d34, f32d35, f32d36, f32d37, f32d38, f32d39,
   f32d40, f32d41, f32d42, f32d43, f32d44, f32d45, f32d46, f32d47, f32d48, f32d49,
   f32d50, f32d51, f32d52, f32d53, f32d54, f32d55, f32d56, f32d57, f32d58, f32d59},
  {bf16a0, bf16a1, bf16a2, bf16a3},
  descB,
  scaleD, -1, -1, 0;

.reg .f32   f32d<40>;
.reg .b64   descA, descB;

wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32
  {f32d0, f32d1, f32d2, f32d3, f32d4, f32d5, f32d6, f32d7},
  descA,
  descB,
  0, -1, -1;

.reg .b32 f16d<8>, f16a<8>;
.reg .f32 f32d<8>;
.reg .b64   descA, descB;

wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e5m2
  {f16d0, f16d1},
  descA,
  descB,
  scaleD, -1, 1;

wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e4m3
  {f32d0, f32d1, f32d2, f32d3},
  {f16a0, f16a1, f16a2, f16a3},
  descB,
  1, -1, -1;
"""

# PTX ISA 9.7.15.5.2 wgmma.mma_async, examples of integer type (verbatim)
ISA_MMA_ASYNC_INT = """\
.reg .s32 s32d<8>, s32a<8>;
.reg .u32 u32a<8>;
.reg .pred scaleD;
.reg .b64   descA, descB;

wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8.satfinite
  {s32d0, s32d1, s32d2, s32d3},
  {s32a0, s32a1, s32a2, s32a3},
  descB,
  1;

wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8
  {s32d0, s32d1, s32d2, s32d3},
  descA,
  descB,
  scaleD;

wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8.satfinite
  {s32d0, s32d1, s32d2, s32d3},
  {s32a0, s32a1, s32a2, s32a3},
  descB,
  scaleD;

wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8
  {s32d0, s32d1, s32d2, s32d3},
  descA,
  descB,
  scaleD;
"""

# PTX ISA 9.7.15.5.2 wgmma.mma_async, examples of single bit type (verbatim)
ISA_MMA_ASYNC_B1 = """\
.reg .s32 s32d<4>;
.reg .b32 b32a<4>;
.reg .pred scaleD;
.reg .b64   descA, descB;


wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1.and.popc
  {s32d0, s32d1, s32d2, s32d3},
  {b32a0, b32a1, b32a2, b32a3},
  descB,
  scaleD;
"""

# PTX ISA 9.7.15.7.1 wgmma.fence, examples (verbatim)
ISA_FENCE = """\
// Example 1, first use example:
wgmma.fence.sync.aligned;    // Establishes an ordering w.r.t. prior accesses to the registers s32d<0-3>
wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8  {s32d0, s32d1, s32d2, s32d3},
                                                  descA, descB, scaleD;
wgmma.commit_group.sync.aligned;
wgmma.wait_group.sync.aligned 0;

// Example 2, use-case with the input value updated in between:
wgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8  {s32d0, s32d1, s32d2, s32d3},
                                                  descA, descB, scaleD;
...
mov.b32 s32d0, new_val;
wgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8  {s32d4, s32d5, s32d6, s32d7},
                                                 {s32d0, s32d1, s32d2, s32d3},
                                                  descB, scaleD;
wgmma.commit_group.sync.aligned;
wgmma.wait_group.sync.aligned 0;
"""

# PTX ISA 9.7.15.7.2 wgmma.commit_group, examples (verbatim)
ISA_COMMIT_GROUP = """\
wgmma.commit_group.sync.aligned;
"""

# PTX ISA 9.7.15.7.3 wgmma.wait_group, examples (verbatim)
ISA_WAIT_GROUP = """\
wgmma.fence.sync.aligned;

wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8  {s32d0, s32d1, s32d2, s32d3},
                                                  descA, descB, scaleD;
wgmma.commit_group.sync.aligned;

wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {f32d0, f32d1, f32d2, f32d3},
                                                  {f16a0, f16a1, f16a2, f16a3},
                                                   descB, 1, -1, -1, 1;
wgmma.commit_group.sync.aligned;

wgmma.wait_group.sync.aligned 0;
"""

# PTX ISA 9.7.14.4.3 wmma.load, examples (verbatim)
ISA_WMMA_LOAD = """\
// Load elements from f16 row-major matrix B
.reg .b32 x<8>;

wmma.load.b.sync.aligned.m16n16k16.row.f16 {x0,x1,x2,x3,x4,x5,x,x7}, [ptr];
// Now use {x0, ..., x7} for the actual wmma.mma

// Load elements from f32 column-major matrix C and scale the values:
.reg .b32 x<8>;

wmma.load.c.sync.aligned.m16n16k16.col.f32
                 {x0,x1,x2,x3,x4,x5,x6,x7}, [ptr];

mul.f32 x0, x0, 0.1;
// repeat for all registers x<8>;
...
mul.f32 x7, x7, 0.1;
// Now use {x0, ..., x7} for the actual wmma.mma

// Load elements from integer matrix A:
.reg .b32 x<4>
// destination registers x<4> contain four packed .u8 values each
wmma.load.a.sync.aligned.m32n8k16.row.u8 {x0,x1,x2,x3}, [ptr];

// Load elements from sub-byte integer matrix A:
.reg .b32 x0;
// destination register x0 contains eight packed .s4 values
wmma.load.a.sync.aligned.m8n8k32.row.s4 {x0}, [ptr];

// Load elements from .bf16 matrix A:
.reg .b32 x<4>;
wmma.load.a.sync.aligned.m16n16k16.row.bf16
                {x0,x1,x2,x3}, [ptr];

// Load elements from .tf32 matrix A:
.reg .b32 x<4>;
wmma.load.a.sync.aligned.m16n16k8.row.tf32
                {x0,x1,x2,x3}, [ptr];

// Load elements from .f64 matrix A:
.reg .b32 x<4>;
wmma.load.a.sync.aligned.m8n8k4.row.f64
                {x0}, [ptr];
"""

# PTX ISA 9.7.14.4.4 wmma.store, examples (verbatim)
ISA_WMMA_STORE = """\
// Storing f32 elements computed by a wmma.mma
.reg .b32 x<8>;

wmma.mma.sync.m16n16k16.row.col.f32.f32
              {d0, d1, d2, d3, d4, d5, d6, d7}, ...;
wmma.store.d.sync.m16n16k16.row.f32
              [ptr], {d0, d1, d2, d3, d4, d5, d6, d7};

// Store s32 accumulator for m16n16k16 shape:
.reg .b32 d<8>;
wmma.store.d.sync.aligned.m16n16k16.row.s32
              [ptr], {d0, d1, d2, d3, d4, d5, d6, d7};

// Store s32 accumulator for m8n8k128 shape:
.reg .b32 d<2>
wmma.store.d.sync.aligned.m8n8k128.row.s32
[ptr], {d0, d1};

// Store f64 accumulator for m8n8k4 shape:
.reg .f64 d<2>;
wmma.store.d.sync.aligned.m8n8k4.row.f64
              [ptr], {d0, d1};
"""

# PTX ISA 9.7.14.4.5 wmma.mma, examples (verbatim)
ISA_WMMA_MMA = """\
.global .align 32 .f16 A[256], B[256];
.global .align 32 .f32 C[256], D[256];
.reg .b32 a<8> b<8> c<8> d<8>;

wmma.load.a.sync.aligned.m16n16k16.global.row.f16
        {a0, a1, a2, a3, a4, a5, a6, a7}, [A];
wmma.load.b.sync.aligned.m16n16k16.global.col.f16
        {b0, b1, b2, b3, b4, b5, b6, b7}, [B];

wmma.load.c.sync.aligned.m16n16k16.global.row.f32
        {c0, c1, c2, c3, c4, c5, c6, c7}, [C];

wmma.mma.sync.aligned.m16n16k16.row.col.f32.f32
        {d0, d1, d2, d3, d4, d5, d6, d7},
        {a0, a1, a2, a3, a4, a5, a6, a7},
        {b0, b1, b2, b3, b4, b5, b6, b7},
        {c0, c1, c2, c3, c4, c5, c6, c7};

wmma.store.d.sync.aligned.m16n16k16.global.col.f32
        [D], {d0, d1, d2, d3, d4, d5, d6, d7};

// Compute an integer WMMA:
.reg .b32  a, b<4>;
.reg .b32 c<8>, d<8>;
wmma.mma.sync.aligned.m8n32k16.row.col.s32.s8.s8.s32
        {d0, d1, d2, d3, d4, d5, d6, d7},
        {a}, {b0, b1, b2,  b3},
        {c0, c1, c2, c3, c4, c5, c6, c7};

// Compute sub-byte WMMA:
.reg .b32 a, b, c<2> d<2>
wmma.mma.sync.aligned.m8n8k32.row.col.s32.s4.s4.s32
        {d0, d1}, {a}, {b}, {c0, c1};

// Compute single-bit type WMMA:
.reg .b32 a, b, c<2> d<2>
wmma.mma.xor.popc.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32
        {d0, d1}, {a}, {b}, {c0, c1};

// Compute double precision wmma
.reg .f64 a, b, c<2>, d<2>;
wmma.mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64
        {d0, d1}, {a}, {b}, {c0, c1};

// Compute alternate floating point precision wmma
.reg .b32 a<2>, b<2>, c<8>, d<8>;
wmma.mma.sync.aligned.m16n16k8.row.col.f32.tf32.tf32.f32
        {d0, d1, d2, d3, d4, d5, d6, d7},
        {a0, a1, a2, a3}, {b0, b1, b2, b3},
        {c0, c1, c2, c3, c4, c5, c6, c7};
"""


# ---------------------------------------------------------------------- helpers

SMEM_BYTES = 32768
DESC_A = MatrixDescriptor(0, 128, 256).encode()
DESC_B = MatrixDescriptor(16384, 128, 256).encode()
COMPLETE = "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n"


def lines(block: str, first: int, last: int) -> str:
    """Lines ``first`` to ``last`` (1-based, inclusive) of an ISA block: one sub-example."""
    return "\n".join(block.split("\n")[first - 1:last]) + "\n"


def tame_bytes(rng, n: int) -> np.ndarray:
    """Bytes whose f16 / bf16 / fp8 / tf32 readings are finite and moderate, of both signs."""
    return (rng.integers(0, 0x3C, n) | (rng.integers(0, 2, n) << 7)).astype(np.uint8)


def tame_words(rng, n: int, threads: int = 128) -> np.ndarray:
    return tame_bytes(rng, threads * n * 4).view(np.uint32).reshape(threads, n)


def random_words(rng, n: int, threads: int = 128) -> np.ndarray:
    return rng.integers(0, 1 << 32, (threads, n), dtype=np.uint64).astype(np.uint32)


def smem_image(seed: int) -> np.ndarray:
    return tame_bytes(np.random.default_rng(seed), SMEM_BYTES)


def names(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}{i}" for i in range(start, start + n)]


def columns(regs: list[str], values: np.ndarray) -> dict:
    return {name: values[:, j] for j, name in enumerate(regs)}


def gather(m, regs: list[str]) -> np.ndarray:
    return np.stack([m.read(name) for name in regs], axis=1)


def mma_text(opcode: str, d: list[str], rest: str) -> str:
    return f"{opcode} {{{', '.join(d)}}}, {rest};"


def fenced(smem, registers, **kw):
    """A warpgroup machine given ``registers``, then ``wgmma.fence``: the ISA examples that
    start mid-program (their fence elided) run on it.  (Registers given to a later
    ``Machine.run`` are thread writes after the fence: a hazard before an mma_async.)"""
    return ptx.run("wgmma.fence.sync.aligned;\n", registers, smem=smem, **kw)


def check_error(exc_info, cls, line: int, column: int) -> None:
    err = exc_info.value
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert (err.line, err.column) == (line, column), str(err)
    assert str(err).startswith(f"line {line}, column {column}: "), str(err)


# ---------------------------------------------------------------------- wgmma.mma_async (9.7.15.5.2)

F16_TEXT_1 = ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {f32d0, f32d1, f32d2, f32d3}, "
              "{f16a0, f16a1, f16a2, f16a3}, descB, 1, -1, -1, 1;")
F16_TEXT_2 = mma_text("wgmma.mma_async.sync.aligned.m64n72k16.f16.f16.f16", names("f16d", 18),
                      "descA, descB, scaleD, -1, 1, 1, 0")


@pytest.fixture
def f16_example():
    rng = np.random.default_rng(2)
    f32d = rng.standard_normal((128, 4)).astype(np.float32)
    f16a, f16d = tame_words(rng, 4), tame_words(rng, 18)
    regs = {**columns(names("f32d", 4), f32d), **columns(names("f16a", 4), f16a),
            **columns(names("f16d", 18), f16d), "descA": np.uint64(DESC_A), "descB": np.uint64(DESC_B),
            "scaleD": False}
    return smem_image(1), regs, f32d.view(np.uint32), f16a, f16d


def test_isa_mma_async_f16_alone_lacks_its_fence(f16_example):
    smem, regs, *_ = f16_example
    with pytest.raises(HazardError) as e:
        ptx.run(ISA_MMA_ASYNC_F16, regs, smem=smem)
    check_error(e, HazardError, 5, 1)
    assert "wgmma.fence" in str(e.value)


def test_isa_mma_async_f16_runs_after_a_fence(f16_example):
    smem, regs, f32d, f16a, f16d = f16_example
    m = fenced(smem, regs)
    m.run(ISA_MMA_ASYNC_F16)
    assert len(m.warpgroup.uncommitted) == 2
    with pytest.raises(HazardError):                      # accumulators in flight
        m["f32d0"]
    np.testing.assert_array_equal(m.peek("f32d0"), f32d[:, 0])  # not written yet
    m.run(COMPLETE)
    exp1 = wgmma.mma_async(F16_TEXT_1, f32d, a_regs=f16a, b_desc=DESC_B, smem=smem)
    exp2 = wgmma.mma_async(F16_TEXT_2, f16d, a_desc=DESC_A, b_desc=DESC_B, smem=smem, scale_d=False)
    assert not (exp1 == f32d).all() and not (exp2 == f16d).all()
    np.testing.assert_array_equal(gather(m, names("f32d", 4)), exp1)
    np.testing.assert_array_equal(gather(m, names("f16d", 18)), exp2)
    assert m.registers["f16d0"] == "f16x2" and m["f32d0"].dtype == np.float32


def test_isa_mma_async_alt_block_misses_a_semicolon():
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(ISA_MMA_ASYNC_ALT)
    check_error(e, PTXSyntaxError, 3, 1)
    assert "expected ',' or ';'" in str(e.value)


def test_isa_mma_async_bf16_example_declares_too_few_registers():
    bf16 = lines(ISA_MMA_ASYNC_ALT, 1, 14)
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(bf16)
    check_error(e, PTXSyntaxError, 3, 1)
    # with its ';' restored, the next defect: f32d<40> declares f32d0..f32d39, N=120 needs 60
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(bf16.replace("bf16a<40>\n", "bf16a<40>;\n"), {"scaleD": True})
    check_error(e, PTXSyntaxError, 10, 4)
    assert "f32d40 is not declared" in str(e.value)


def test_isa_mma_async_tf32_example():
    tf32 = lines(ISA_MMA_ASYNC_ALT, 16, 23)
    smem, rng = smem_image(3), np.random.default_rng(3)
    c = rng.standard_normal((128, 8)).astype(np.float32).view(np.uint32)
    m = fenced(smem, {**columns(names("f32d", 8), c), "descA": np.uint64(DESC_A), "descB": np.uint64(DESC_B)})
    m.run(tf32)
    m.run(COMPLETE)
    text = mma_text("wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32", names("f32d", 8),
                    "descA, descB, 0, -1, -1")
    exp = wgmma.mma_async(text, c, a_desc=DESC_A, b_desc=DESC_B, smem=smem, scale_d=False)
    np.testing.assert_array_equal(gather(m, names("f32d", 8)), exp)


def test_isa_mma_async_fp8_example():
    fp8 = lines(ISA_MMA_ASYNC_ALT, 25, 39)
    with pytest.raises(PTXSyntaxError) as e:      # scaleD is declared by no line of this example
        ptx.run(fp8)
    check_error(e, PTXSyntaxError, 9, 3)
    smem, rng = smem_image(4), np.random.default_rng(4)
    f16d, f32d, f16a = tame_words(rng, 2), random_words(rng, 4), tame_words(rng, 4)
    regs = {**columns(names("f16d", 2), f16d), **columns(names("f32d", 4), f32d),
            **columns(names("f16a", 4), f16a), "descA": np.uint64(DESC_A), "descB": np.uint64(DESC_B),
            "scaleD": np.bool_(True)}
    m = fenced(smem, regs).run(fp8).run(COMPLETE)
    exp1 = wgmma.mma_async(mma_text("wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e5m2", names("f16d", 2),
                                    "descA, descB, scaleD, -1, 1"),
                           f16d, a_desc=DESC_A, b_desc=DESC_B, smem=smem, scale_d=True)
    exp2 = wgmma.mma_async("wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e4m3 {f32d0, f32d1, f32d2, f32d3}, "
                           "{f16a0, f16a1, f16a2, f16a3}, descB, 1, -1, -1;",
                           f32d, a_regs=f16a, b_desc=DESC_B, smem=smem)
    np.testing.assert_array_equal(gather(m, names("f16d", 2)), exp1)
    np.testing.assert_array_equal(gather(m, names("f32d", 4)), exp2)


def test_isa_mma_async_integer_example_chains_four():
    smem, rng = smem_image(5), np.random.default_rng(5)
    s32d = rng.integers(-2**31, 2**31, (128, 4)).astype(np.int32)
    s32a = random_words(rng, 4)
    regs = {**columns(names("s32d", 4), s32d), **columns(names("s32a", 4), s32a),
            "descA": np.uint64(DESC_A), "descB": np.uint64(DESC_B), "scaleD": True}
    with pytest.raises(HazardError) as e:
        ptx.run(ISA_MMA_ASYNC_INT, regs, smem=smem)
    check_error(e, HazardError, 6, 1)
    m = fenced(smem, regs).run(ISA_MMA_ASYNC_INT)
    assert len(m.warpgroup.uncommitted) == 4
    m.run(COMPLETE)
    d, c = "{s32d0, s32d1, s32d2, s32d3}", s32d.view(np.uint32)
    a = "{s32a0, s32a1, s32a2, s32a3}"
    c = wgmma.mma_async(f"wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8.satfinite {d}, {a}, descB, 1;",
                        c, a_regs=s32a, b_desc=DESC_B, smem=smem)
    c = wgmma.mma_async(f"wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8 {d}, descA, descB, scaleD;",
                        c, a_desc=DESC_A, b_desc=DESC_B, smem=smem)
    c = wgmma.mma_async(f"wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8.satfinite {d}, {a}, descB, scaleD;",
                        c, a_regs=s32a, b_desc=DESC_B, smem=smem)
    c = wgmma.mma_async(f"wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8 {d}, descA, descB, scaleD;",
                        c, a_desc=DESC_A, b_desc=DESC_B, smem=smem)
    np.testing.assert_array_equal(gather(m, names("s32d", 4)), c)
    assert m["s32d0"].dtype == np.int32


def test_isa_mma_async_single_bit_example():
    smem, rng = smem_image(6), np.random.default_rng(6)
    s32d, b32a = random_words(rng, 4), random_words(rng, 4)
    regs = {**columns(names("s32d", 4), s32d), **columns(names("b32a", 4), b32a), "descB": np.uint64(DESC_B),
            "scaleD": True}
    m = fenced(smem, regs).run(ISA_MMA_ASYNC_B1).run(COMPLETE)
    exp = wgmma.mma_async("wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1.and.popc "
                          "{s32d0, s32d1, s32d2, s32d3}, {b32a0, b32a1, b32a2, b32a3}, descB, scaleD;",
                          s32d, a_regs=b32a, b_desc=DESC_B, smem=smem)
    np.testing.assert_array_equal(gather(m, names("s32d", 4)), exp)


# ---------------------------------------------------------------------- fence / commit / wait (9.7.15.7)

U8 = "wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8"


@pytest.fixture
def u8_registers():
    rng = np.random.default_rng(7)
    s32d = random_words(rng, 8)
    regs = {**columns(names("s32d", 8), s32d), "descA": np.uint64(DESC_A), "descB": np.uint64(DESC_B),
            "scaleD": np.bool_(True), "new_val": np.uint32(0x01020304)}
    return smem_image(7), regs, s32d


def test_isa_fence_block_has_elided_code(u8_registers):
    smem, regs, _ = u8_registers
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(ISA_FENCE, regs, smem=smem)
    check_error(e, PTXSyntaxError, 12, 1)
    assert "'...'" in str(e.value)


def test_isa_fence_example_1(u8_registers):
    smem, regs, s32d = u8_registers
    m = ptx.run(lines(ISA_FENCE, 1, 6), regs, smem=smem)
    exp = wgmma.mma_async(U8, s32d[:, :4], a_desc=DESC_A, b_desc=DESC_B, smem=smem)
    np.testing.assert_array_equal(gather(m, names("s32d", 4)), exp)
    np.testing.assert_array_equal(gather(m, names("s32d", 4, 4)), s32d[:, 4:])
    assert m.warpgroup.pending_groups == 0


def test_isa_fence_example_2_without_a_wait_is_a_hazard(u8_registers):
    smem, regs, s32d = u8_registers
    example = lines(ISA_FENCE, 8, 20).replace("...\n", "\n")
    with pytest.raises(HazardError) as e:
        ptx.run(example, regs, smem=smem)
    check_error(e, HazardError, 6, 1)             # mov.b32 s32d0, new_val: s32d0 is in flight
    assert "s32d0" in str(e.value)
    assert e.value.machine.peek("s32d0")[0] == s32d[0, 0]    # the mov changed nothing


def test_isa_fence_example_2_with_the_wait_filled_in(u8_registers):
    smem, regs, s32d = u8_registers
    m = ptx.run(lines(ISA_FENCE, 8, 20).replace("...\n", COMPLETE), regs, smem=smem)
    first = wgmma.mma_async(U8, s32d[:, :4], a_desc=DESC_A, b_desc=DESC_B, smem=smem)
    a = first.copy()
    a[:, 0] = 0x01020304
    second = wgmma.mma_async(U8 + " {s32d4, s32d5, s32d6, s32d7}, {s32d0, s32d1, s32d2, s32d3}, descB, scaleD;",
                             s32d[:, 4:], a_regs=a, b_desc=DESC_B, smem=smem)
    np.testing.assert_array_equal(gather(m, names("s32d", 4)), a)
    np.testing.assert_array_equal(gather(m, names("s32d", 4, 4)), second)


def test_isa_commit_group_example():
    m = ptx.run(ISA_COMMIT_GROUP)
    assert m.threads == 128 and m.warpgroup.pending_groups == 1     # an empty wgmma-group
    m.run(ISA_COMMIT_GROUP)
    assert m.warpgroup.pending_groups == 2
    m.run("wgmma.wait_group.sync.aligned 1;")
    assert m.warpgroup.pending_groups == 1


def test_isa_wait_group_example():
    smem, rng = smem_image(8), np.random.default_rng(8)
    s32d, f32d = random_words(rng, 4), rng.standard_normal((128, 4)).astype(np.float32)
    f16a = tame_words(rng, 4)
    regs = {**columns(names("s32d", 4), s32d), **columns(names("f32d", 4), f32d),
            **columns(names("f16a", 4), f16a), "descA": np.uint64(DESC_A), "descB": np.uint64(DESC_B),
            "scaleD": np.bool_(False)}
    m = ptx.run(ISA_WAIT_GROUP, regs, smem=smem)
    exp1 = wgmma.mma_async(U8, s32d, a_desc=DESC_A, b_desc=DESC_B, smem=smem, scale_d=False)
    exp2 = wgmma.mma_async(F16_TEXT_1, f32d.view(np.uint32), a_regs=f16a, b_desc=DESC_B, smem=smem)
    np.testing.assert_array_equal(gather(m, names("s32d", 4)), exp1)
    np.testing.assert_array_equal(gather(m, names("f32d", 4)), exp2)


# ---------------------------------------------------------------------- wmma examples (9.7.14.4.3-5)

PTR = 4096   # where the examples' [ptr] points: a generic address, i.e. global memory


def global_image(seed: int, size: int = 1 << 16) -> np.ndarray:
    return tame_bytes(np.random.default_rng(seed), size)


def fragment(m, regs: list[str]) -> np.ndarray:
    """The registers as wmma fragment words uint32[threads, words] (a 64-bit one as two)."""
    out = []
    for name in regs:
        bits = m.read(name)
        if bits.dtype == np.uint64:
            out += [(bits & np.uint64(0xFFFFFFFF)).astype(np.uint32), (bits >> np.uint64(32)).astype(np.uint32)]
        else:
            out.append(bits)
    return np.stack(out, axis=1)


def test_isa_wmma_load_block_uses_an_undeclared_register():
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(ISA_WMMA_LOAD, {"ptr": np.uint64(PTR)})
    check_error(e, PTXSyntaxError, 4, 63)         # the 'x' in {x0,x1,x2,x3,x4,x5,x,x7}
    assert "register x is not declared" in str(e.value)
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(lines(ISA_WMMA_LOAD, 1, 5), {"ptr": np.uint64(PTR)})
    check_error(e, PTXSyntaxError, 4, 63)


def test_isa_wmma_load_c_then_mul_which_fastmma_does_not_execute():
    mem = global_image(10)
    example = lines(ISA_WMMA_LOAD, 7, 17)
    with pytest.raises(UnsupportedInstructionError) as e:
        ptx.run(example, {"ptr": np.uint64(PTR)}, global_mem=mem)
    check_error(e, UnsupportedInstructionError, 7, 1)
    assert "mul" in str(e.value)
    m = ptx.run(lines(ISA_WMMA_LOAD, 7, 12), {"ptr": np.uint64(PTR)}, global_mem=mem)   # the load alone
    exp = wmma.load("wmma.load.c.sync.aligned.m16n16k16.col.f32", mem, PTR)
    np.testing.assert_array_equal(fragment(m, names("x", 8)), exp)


def test_isa_wmma_load_u8_example_misses_a_semicolon():
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(lines(ISA_WMMA_LOAD, 19, 22), {"ptr": np.uint64(PTR)})
    check_error(e, PTXSyntaxError, 4, 1)


@pytest.mark.parametrize("first,last,opcode,regs", [
    (24, 27, "wmma.load.a.sync.aligned.m8n8k32.row.s4", 1),
    (29, 32, "wmma.load.a.sync.aligned.m16n16k16.row.bf16", 4),
    (34, 37, "wmma.load.a.sync.aligned.m16n16k8.row.tf32", 4),
])
def test_isa_wmma_load_examples_that_run(first, last, opcode, regs):
    mem = global_image(first)
    m = ptx.run(lines(ISA_WMMA_LOAD, first, last), {"ptr": np.uint64(PTR)}, global_mem=mem)
    assert m.threads == 32
    exp = wmma.load(opcode, mem, PTR)
    assert exp.shape == (32, regs)
    np.testing.assert_array_equal(fragment(m, names("x", regs)), exp)


def test_isa_wmma_load_f64_example_has_32_bit_registers():
    with pytest.raises(InvalidInstructionError) as e:
        ptx.run(lines(ISA_WMMA_LOAD, 39, 42), {"ptr": np.uint64(PTR)})
    check_error(e, InvalidInstructionError, 4, 18)
    assert "x0 is .b32" in str(e.value) and "64-bit" in str(e.value)


def test_isa_wmma_store_block_elides_an_operand():
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(ISA_WMMA_STORE, {"ptr": np.uint64(PTR)})
    check_error(e, PTXSyntaxError, 5, 49)
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(lines(ISA_WMMA_STORE, 14, 17), {"ptr": np.uint64(PTR)})    # '.reg .b32 d<2>' lacks ';'
    check_error(e, PTXSyntaxError, 3, 1)


def test_isa_wmma_store_s32_example():
    rng = np.random.default_rng(11)
    d = random_words(rng, 8, threads=32)
    mem = global_image(11)
    m = ptx.run(lines(ISA_WMMA_STORE, 9, 12), {"ptr": np.uint64(PTR), **columns(names("d", 8), d)},
                global_mem=mem)
    exp = mem.copy()
    wmma.store("wmma.store.d.sync.aligned.m16n16k16.row.s32", exp, PTR, d)
    assert not (exp == mem).all()
    np.testing.assert_array_equal(m.global_mem, exp)
    np.testing.assert_array_equal(mem, global_image(11))      # the caller's image is not modified


def test_isa_wmma_store_f64_example():
    rng = np.random.default_rng(12)
    d = rng.standard_normal((32, 2))
    mem = global_image(12)
    m = ptx.run(lines(ISA_WMMA_STORE, 19, 22), {"ptr": np.uint64(PTR), "d0": d[:, 0], "d1": d[:, 1]},
                global_mem=mem)
    exp = mem.copy()
    wmma.store("wmma.store.d.sync.aligned.m8n8k4.row.f64", exp, PTR, d.view(np.uint32))
    np.testing.assert_array_equal(m.global_mem, exp)


def test_isa_wmma_mma_block_misses_commas():
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(ISA_WMMA_MMA)
    check_error(e, PTXSyntaxError, 3, 16)
    for first, last in ((30, 33), (35, 38)):      # '.reg .b32 a, b, c<2> d<2>'
        with pytest.raises(PTXSyntaxError) as e:
            ptx.run(lines(ISA_WMMA_MMA, first, last))
        check_error(e, PTXSyntaxError, 2, 22)


def test_isa_wmma_mma_first_example_with_its_commas():
    example = lines(ISA_WMMA_MMA, 1, 20).replace("a<8> b<8> c<8> d<8>", "a<8>, b<8>, c<8>, d<8>")
    rng = np.random.default_rng(13)
    mem = np.zeros(8192, np.uint8)
    ab = rng.standard_normal(512).astype(np.float16)
    c = rng.standard_normal(256).astype(np.float32)
    mem[:1024] = ab.view(np.uint8)
    mem[1024:2048] = c.view(np.uint8)
    m = ptx.run(example, global_mem=mem)
    # .global variables in declaration order, each at its .align: A 0, B 512, C 1024, D 2048
    assert [m.symbol_offset(v) for v in "ABCD"] == [0, 512, 1024, 2048]
    a = wmma.load("wmma.load.a.sync.aligned.m16n16k16.global.row.f16", mem, 0)
    b = wmma.load("wmma.load.b.sync.aligned.m16n16k16.global.col.f16", mem, 512)
    cf = wmma.load("wmma.load.c.sync.aligned.m16n16k16.global.row.f32", mem, 1024)
    d = wmma.mma("wmma.mma.sync.aligned.m16n16k16.row.col.f32.f32", a, b, cf)
    exp = mem.copy()
    wmma.store("wmma.store.d.sync.aligned.m16n16k16.global.col.f32", exp, 2048, d)
    np.testing.assert_array_equal(fragment(m, names("d", 8)), d)
    np.testing.assert_array_equal(m.global_mem[:8192], exp)


def test_isa_wmma_mma_integer_example():
    rng = np.random.default_rng(14)
    a, b, c = random_words(rng, 1, 32), random_words(rng, 4, 32), random_words(rng, 8, 32)
    regs = {"a": a[:, 0], **columns(names("b", 4), b), **columns(names("c", 8), c)}
    m = ptx.run(lines(ISA_WMMA_MMA, 22, 28), regs)
    exp = wmma.mma("wmma.mma.sync.aligned.m8n32k16.row.col.s32.s8.s8.s32", a, b, c)
    np.testing.assert_array_equal(fragment(m, names("d", 8)), exp)


def test_isa_wmma_mma_f64_example():
    rng = np.random.default_rng(15)
    a, b, c = (rng.standard_normal((32, n)) for n in (1, 1, 2))
    m = ptx.run(lines(ISA_WMMA_MMA, 40, 43), {"a": a[:, 0], "b": b[:, 0], "c0": c[:, 0], "c1": c[:, 1]})
    exp = wmma.mma("wmma.mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64",
                   a.view(np.uint32), b.view(np.uint32), c.view(np.uint32))
    np.testing.assert_array_equal(fragment(m, names("d", 2)), exp)
    assert m["d0"].dtype == np.float64


def test_isa_wmma_mma_tf32_example_declares_too_few_registers():
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(lines(ISA_WMMA_MMA, 45, 50))
    check_error(e, PTXSyntaxError, 5, 18)           # a2 of {a0, a1, a2, a3}: .reg .b32 a<2>
    assert "a2 is not declared" in str(e.value)


# ---------------------------------------------------------------------- whole snippets


WGMMA_SNIPPET = """\
// D = A * B + C for one m64n16k16 bf16 tile; C set by movs, one value per thread half
.reg .b64  %rd<2>;
.reg .b32  %r<3>;
.reg .f32  %f<8>;
.reg .pred %p<2>;
mov.b64    %rd0, {desc_a:#x};
mov.b64    %rd1, {desc_b:#x};
mov.b32    %r0, {flag};
mov.u32    %r1, %tid.x;
mov.f32    %f0, 0f3F800000;          /* 1.0 */
mov.f32    %f1, -2.5;
mov.f32    %f2, 0.1;
mov.f32    %f3, 1e-3;
mov.f32    %f4, 0d3FE0000000000000;  // 0.5, given as a double
mov.f32    %f5, 0.0;
mov.b32    %f6, 0x7F800000;          // +inf
mov.f32    %f7, -0.0;
setp.lt.u32 %p1, %r1, 64;
@%p1 mov.f32 %f5, 3.0;
setp.ne.b32 %p0, %r0, 0;
fence.proxy.async.shared::cta;
wgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16
    {{%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}}, %rd0, %rd1, %p0, 1, -1, 0, 1;
wgmma.commit_group.sync.aligned;
wgmma.wait_group.sync.aligned 0;
"""


@pytest.mark.parametrize("flag", [0, 7])
def test_full_wgmma_snippet_equals_mma_async(flag):
    smem = smem_image(20)
    m = ptx.run(WGMMA_SNIPPET.format(desc_a=DESC_A, desc_b=DESC_B, flag=flag), smem=smem)
    c = np.array([1.0, -2.5, 0.1, 1e-3, 0.5, 0.0, np.inf, -0.0], np.float32)
    c = np.tile(c, (128, 1))
    c[:64, 5] = 3.0
    exp = wgmma.mma_async("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                          "{%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, %rd0, %rd1, %p0, 1, -1, 0, 1;",
                          c.view(np.uint32), a_desc=DESC_A, b_desc=DESC_B, smem=smem, scale_d=bool(flag))
    np.testing.assert_array_equal(gather(m, names("%f", 8)), exp)
    assert m["%p0"].all() == bool(flag)


WMMA_SNIPPET = """\
.reg .b64 %rd<2>;
.reg .b32 %r<8>, %s<8>, %c<8>, %d<8>;
mov.u64 %rd0, {base};
wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {{%r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7}}, [%rd0];
wmma.load.b.sync.aligned.col.m16n16k16.global.f16 {{%s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7}}, [%rd0];
wmma.load.c.sync.aligned.row.m16n16k16.global.f32 {{%c0, %c1, %c2, %c3, %c4, %c5, %c6, %c7}}, [%rd0+1024];
wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {{%d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7}},
    {{%r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7}}, {{%s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7}},
    {{%c0, %c1, %c2, %c3, %c4, %c5, %c6, %c7}};
wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd0+4096], {{%d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7}}, 32;
"""


def test_wmma_snippet_equals_the_wmma_path():
    """The README's fastmma.wmma example, written as PTX."""
    rng = np.random.default_rng(21)
    mem = np.zeros(8192, np.uint8)
    mem[:512] = rng.standard_normal(256).astype(np.float16).view(np.uint8)
    mem[1024:2048] = rng.standard_normal(256).astype(np.float32).view(np.uint8)
    m = ptx.run(WMMA_SNIPPET.format(base=0), global_mem=mem)
    a = wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.global.f16", mem, 0)
    b = wmma.load("wmma.load.b.sync.aligned.col.m16n16k16.global.f16", mem, 0)
    c = wmma.load("wmma.load.c.sync.aligned.row.m16n16k16.global.f32", mem, 1024)
    d = wmma.mma("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", a, b, c)
    exp = mem.copy()
    wmma.store("wmma.store.d.sync.aligned.row.m16n16k16.global.f32", exp, 4096, d, 32)
    np.testing.assert_array_equal(fragment(m, names("%d", 8)), d)
    np.testing.assert_array_equal(m.global_mem, exp)


def test_wmma_runs_per_warp():
    """64 threads are two warps; each loads from its own address (uniform within the warp)."""
    mem = global_image(22)
    ptr = np.repeat(np.array([1024, 3072], np.uint64), 32)
    m = ptx.run(".reg .b32 x<4>;\nwmma.load.a.sync.aligned.m16n16k16.row.bf16 {x0,x1,x2,x3}, [ptr+512];\n",
                {"ptr": ptr}, global_mem=mem)
    assert m.threads == 64
    got = fragment(m, names("x", 4))
    for w, base in enumerate((1024, 3072)):
        np.testing.assert_array_equal(got[32 * w:32 * w + 32],
                                      wmma.load("wmma.load.a.sync.aligned.m16n16k16.row.bf16", mem, base + 512))


# ---------------------------------------------------------------------- the H100 recordings


def _declarations(ptx_lines: list[str]) -> list[str]:
    """``.reg`` lines for the compiler's registers (%r, %f, %rd, %fd), as nvcc declares them."""
    text = "\n".join(ptx_lines)
    out = []
    for prefix, t in (("%rd", "b64"), ("%fd", "f64"), ("%r", "b32"), ("%f", "f32")):
        used = [int(i) for i in re.findall(re.escape(prefix) + r"(\d+)\b", text)]
        if used:
            out.append(f".reg .{t} {prefix}<{max(used) + 1}>;")
    return out


@pytest.mark.parametrize("path", golden_files("wgmma"), ids=lambda p: p.stem)
def test_recorded_wgmma_ptx_replays_bit_exact(path):
    """The PTX nvcc emitted (setp, then the mma_async chain) between fence and commit/wait."""
    arrays, meta = load_recording(path)
    i = zlib.crc32(path.stem.encode()) % len(arrays["smem"])
    insts = [parse(t) for t in meta["ptx"] if t.startswith("wgmma")]
    setp = next(t for t in meta["ptx"] if t.startswith("setp"))
    regs = {setp.split(",")[1].strip(): np.uint32(arrays["scale_d"][i])}
    d = insts[0].operands[0].regs
    regs.update(columns(list(d), arrays["c_regs"][i]))
    if insts[0].a_source == "reg":
        regs.update(columns(list(insts[0].operands[1].regs), arrays["a_regs"][i]))
    a_desc, b_desc = arrays["a_desc"][i].reshape(-1), arrays["b_desc"][i].reshape(-1)
    for j, inst in enumerate(insts):
        if inst.a_source == "desc":
            regs[inst.operands[1].name] = np.uint64(a_desc[j])
        regs[inst.operands[2].name] = np.uint64(b_desc[j])
    source = "\n".join(_declarations(meta["ptx"]) + [".reg .pred p;", "wgmma.fence.sync.aligned;"]
                       + meta["ptx"]) + "\n" + COMPLETE
    m = ptx.run(source, regs, smem=arrays["smem"][i])
    np.testing.assert_array_equal(gather(m, list(d)), arrays["d_regs"][i])


@pytest.mark.parametrize("path", golden_files("wmma"), ids=lambda p: p.stem)
def test_recorded_wmma_ptx_replays_bit_exact(path):
    """load a, b, c; mma; store d, as nvcc emitted them, on a global image holding the recorded
    memory; the D registers and the stored bytes (0xA5 where the store writes nothing)."""
    arrays, meta = load_recording(path)
    i = zlib.crc32(path.stem.encode()) % len(arrays["a_mem"])
    load_a, load_b, load_c, mma, store = (parse(t) for t in meta["ptx"])
    mem = np.zeros(4 * 8192, np.uint8)
    regs = {}
    for k, (key, inst, addr) in enumerate((("a", load_a, 1), ("b", load_b, 1), ("c", load_c, 1), ("d", store, 0))):
        data = arrays[f"{key}_mem"][i]
        mem[8192 * k:8192 * k + data.size] = data if key != "d" else 0xA5
        regs[inst.operands[addr].name] = np.uint64(8192 * k)
        regs[inst.operands[2].name] = np.int32(arrays[f"ld{key}"][i])
    m = ptx.run("\n".join(_declarations(meta["ptx"]) + meta["ptx"]), regs, global_mem=mem)
    np.testing.assert_array_equal(fragment(m, list(mma.operands[0].regs)), arrays["d_frag"][i])
    d_mem = arrays["d_mem"][i]
    np.testing.assert_array_equal(m.global_mem[3 * 8192:3 * 8192 + d_mem.size], d_mem)


# ---------------------------------------------------------------------- hazards


HAZARD_PREFIX = """\
.reg .f32 d<4>;
.reg .b32 r;
.reg .b64 descA, descB;
wgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, descA, descB, 1, 1, 1, 0, 0;
wgmma.commit_group.sync.aligned;
"""


def test_reading_an_accumulator_before_wait_group_is_a_hazard():
    regs = {"descA": DESC_A, "descB": DESC_B}
    with pytest.raises(HazardError) as e:
        ptx.run(HAZARD_PREFIX + "mov.b32 r, d2;\nwgmma.wait_group.sync.aligned 0;\n", regs, smem=smem_image(30))
    check_error(e, HazardError, 7, 1)
    assert "d2" in str(e.value) and "wait_group" in str(e.value)
    assert e.value.machine.warpgroup.pending_groups == 1
    # after the wait the same read is fine and sees the result
    smem = smem_image(30)
    m = ptx.run(HAZARD_PREFIX + "wgmma.wait_group.sync.aligned 0;\nmov.b32 r, d2;\n", regs, smem=smem)
    exp = wgmma.mma_async("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", np.zeros((128, 4), np.uint32),
                          a_desc=DESC_A, b_desc=DESC_B, smem=smem)
    np.testing.assert_array_equal(m.read("r"), exp[:, 2])


def test_non_strict_mode_reads_the_old_value():
    m = ptx.run(HAZARD_PREFIX + "mov.b32 r, d2;\n", {"descA": DESC_A, "descB": DESC_B, "d2": 2.0},
                smem=smem_image(31), strict=False)
    np.testing.assert_array_equal(m["r"], np.float32(2.0).view(np.uint32))


def test_wgmma_without_fence_is_a_hazard_and_changes_nothing():
    src = HAZARD_PREFIX.replace("wgmma.fence.sync.aligned;\n", "mov.f32 d0, 1.0;\n")
    with pytest.raises(HazardError) as e:
        ptx.run(src, {"descA": DESC_A, "descB": DESC_B}, smem=smem_image(32))
    check_error(e, HazardError, 5, 1)
    assert not e.value.machine.warpgroup.in_flight


SHARED_STORE = """\
.shared .align 1024 .b8 tile[4096];
.reg .b32 x<4>;
.reg .f32 d<4>;
.reg .b64 descB;
wmma.store.d.sync.aligned.m16n16k16.shared.row.s32 [tile], {{x0, x1, x2, x3, x0, x1, x2, x3}};
{fence}
wgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{d0, d1, d2, d3}}, {{x0, x1, x2, x3}}, descB, 1, 1, 1, 0;
wgmma.commit_group.sync.aligned;
wgmma.wait_group.sync.aligned 0;
"""


def test_shared_memory_written_by_wmma_needs_fence_proxy_async():
    rng = np.random.default_rng(33)
    x = tame_words(rng, 4)
    regs = {**columns(names("x", 4), x), "descB": MatrixDescriptor(0, 128, 256).encode()}
    smem = smem_image(33)
    with pytest.raises(HazardError) as e:
        ptx.run(SHARED_STORE.format(fence=""), regs, smem=smem)
    check_error(e, HazardError, 8, 1)
    assert "fence.proxy.async" in str(e.value)
    m = ptx.run(SHARED_STORE.format(fence="fence.proxy.async;"), regs, smem=smem)
    image = smem.copy()                          # every warp stores its lanes' fragment, in warp order
    for w in range(4):
        wmma.store("wmma.store.d.sync.aligned.m16n16k16.shared.row.s32", image, 0,
                   np.concatenate([x, x], axis=1)[32 * w:32 * w + 32])
    np.testing.assert_array_equal(m.smem, image)
    exp = wgmma.mma_async("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, "
                          "{x0, x1, x2, x3}, descB, 1, 1, 1, 0;", np.zeros((128, 4), np.uint32), a_regs=x,
                          b_desc=regs["descB"], smem=image)
    np.testing.assert_array_equal(gather(m, names("d", 4)), exp)


def test_wmma_address_that_differs_between_lanes():
    src = ".reg .b32 x<4>;\nwmma.load.a.sync.aligned.m16n16k16.row.bf16 {x0,x1,x2,x3}, [ptr];\n"
    ptr = np.full(32, 1024, np.uint64)
    ptr[5] = 2048
    mem = global_image(34)
    with pytest.raises(HazardError) as e:
        ptx.run(src, {"ptr": ptr}, global_mem=mem)
    check_error(e, HazardError, 2, 1)
    assert "lane 5" in str(e.value)
    m = ptx.run(src, {"ptr": ptr}, global_mem=mem, strict=False)      # lane 0's address
    np.testing.assert_array_equal(fragment(m, names("x", 4)),
                                  wmma.load("wmma.load.a.sync.aligned.m16n16k16.row.bf16", mem, 1024))


def test_guards_on_aligned_instructions_must_be_uniform():
    p = np.arange(128) < 64
    with pytest.raises(HazardError) as e:
        ptx.run(".reg .pred p;\n@p wgmma.fence.sync.aligned;\n", {"p": p})
    check_error(e, HazardError, 2, 4)                   # errors point at the opcode
    m = ptx.run(".reg .pred p;\n@!p wgmma.commit_group.sync.aligned;\n", {"p": True})
    assert m.warpgroup.pending_groups == 0                # guard false everywhere: skipped
    m = ptx.run(".reg .pred p;\n@p wgmma.commit_group.sync.aligned;\n", {"p": True})
    assert m.warpgroup.pending_groups == 1


# ---------------------------------------------------------------------- mov, setp, guards, addresses


def bits32(value) -> np.uint32:
    return np.float32(value).view(np.uint32)


@pytest.mark.parametrize("statement,expected", [
    ("mov.f32 r, 0.1;", bits32(0.1)),
    ("mov.f32 r, 0f3F800000;", 0x3F800000),
    ("mov.f32 r, -0f3F800000;", 0xBF800000),
    ("mov.f32 r, 1e40;", 0x7F800000),
    ("mov.f32 r, 0d3FB999999999999A;", bits32(0.1)),
    ("mov.b32 r, 1.5;", bits32(1.5)),
    ("mov.b32 r, -1;", 0xFFFFFFFF),
    ("mov.s32 r, -2147483648;", 0x80000000),
    ("mov.u32 r, 0xDEADBEEF;", 0xDEADBEEF),
    ("mov.u32 r, 017;", 15),
    ("mov.u32 r, 0b101U;", 5),
    ("mov.u32 r, WARP_SZ;", 32),
])
def test_mov_literals(statement, expected):
    m = ptx.run(".reg .b32 r;\n" + statement)
    np.testing.assert_array_equal(m.read("r"), np.full(32, expected, np.uint32))


def test_mov_64_and_16_bit_and_pack_unpack():
    m = ptx.run("""
        .reg .b64 w; .reg .f64 d; .reg .b16 h<2>; .reg .b32 lo, hi, packed;
        mov.b64 w, 0xFFFFFFFFFFFFFFFF;
        mov.f64 d, 0.1;
        mov.b16 h0, 0x1234;
        mov.b16 h1, 0xABCD;
        mov.b32 packed, {h0, h1};
        mov.b64 {lo, hi}, w;
    """)
    assert m.read("w")[0] == 0xFFFFFFFFFFFFFFFF and m["d"][0] == 0.1
    assert m.read("packed")[0] == 0xABCD1234 and m["h0"].dtype == np.uint16
    assert m.read("lo")[0] == m.read("hi")[0] == 0xFFFFFFFF


def test_variable_addresses_and_sinks():
    m = ptx.run("""
        .global .align 16 .f32 pad[3], A[8];
        .shared .align 128 .b16 S[4];
        .reg .u64 p, q, r; .reg .u32 s; .reg .b32 lo; .reg .pred x; .reg .s32 a;
        mov.u64 p, A+20;
        mov.u64 q, A[5];
        mov.u64 r, A;
        mov.u32 s, S[3];
        mov.b64 {lo, _}, p;
        mov.s32 a, 3;
        setp.lt.s32 _|x, a, 5;
    """, global_address=0x1000, smem_address=0x400, threads=32)
    assert m.symbol_offset("A") == 16 and m.symbol_offset("S") == 0
    assert (m["r"][0], m["p"][0], m["q"][0]) == (0x1010, 0x1024, 0x1024)
    assert m["s"][0] == 0x406 and m["lo"][0] == 0x1024 and not m["x"].any()


def test_special_registers_and_guards():
    m = ptx.run("""
        .reg .u32 t, lane, warp, n;
        .reg .pred odd;
        .reg .s32 v;
        mov.u32 t, %tid.x;
        mov.u32 lane, %laneid;
        mov.u32 warp, %warpid;
        mov.u32 n, %ntid.x;
        mov.s32 v, -7;
        setp.hs.u32 odd, lane, 16;
        @odd mov.s32 v, 9;
    """, threads=64)
    t = np.arange(64)
    np.testing.assert_array_equal(m["t"], t)
    np.testing.assert_array_equal(m["lane"], t % 32)
    np.testing.assert_array_equal(m["warp"], t // 32)
    np.testing.assert_array_equal(m["n"], 64)
    np.testing.assert_array_equal(m["v"], np.where(t % 32 >= 16, 9, -7))


SETP_INT_CASES = [("s32", "lt", np.less), ("s32", "ge", np.greater_equal), ("u32", "lo", np.less),
                  ("u32", "hs", np.greater_equal), ("u32", "lt", np.less), ("b32", "ne", np.not_equal),
                  ("s64", "le", np.less_equal), ("u16", "hi", np.greater), ("s16", "eq", np.equal)]


@pytest.mark.parametrize("t,cmp,op", SETP_INT_CASES)
def test_setp_integer_comparisons(t, cmp, op):
    rng = np.random.default_rng(40)
    view = {"s": np.int64, "u": np.uint64, "b": np.uint64}[t[0]]
    bits = int(t[1:])
    a = rng.integers(0, 1 << bits, 32, dtype=np.uint64)
    b = np.where(rng.random(32) < 0.3, a, rng.integers(0, 1 << bits, 32, dtype=np.uint64))
    a, b = (x.astype(f"uint{bits}") for x in (a, b))
    m = ptx.run(f".reg .{t} a, b;\n.reg .pred p, q;\nsetp.{cmp}.{t} p|q, a, b;\n", {"a": a, "b": b})
    signed = t[0] == "s"
    av, bv = (x.view(f"int{bits}") if signed else x for x in (a, b))
    exp = op(av.astype(view), bv.astype(view))
    np.testing.assert_array_equal(m["p"], exp)
    np.testing.assert_array_equal(m["q"], ~exp)


FLOAT_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
             "ge": np.greater_equal}


@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu",
                                 "num", "nan"])
def test_setp_float_comparisons_order_nan(cmp):
    a = np.array([1.0, np.nan, -0.0, 2.0, np.inf, np.nan] * 6, np.float32)[:32]
    b = np.array([1.0, 1.0, 0.0, -3.0, np.inf, np.nan] * 6, np.float32)[:32]
    m = ptx.run(f".reg .f32 a, b;\n.reg .pred p;\nsetp.{cmp}.f32 p, a, b;\n", {"a": a, "b": b})
    nan = np.isnan(a) | np.isnan(b)
    if cmp in ("num", "nan"):
        exp = ~nan if cmp == "num" else nan
    else:
        with np.errstate(invalid="ignore"):
            exp = FLOAT_CMP[cmp[:2]](a, b)
        exp = exp | nan if len(cmp) == 3 else exp & ~nan
    np.testing.assert_array_equal(m["p"], exp)


def test_setp_bool_op_and_ftz():
    a = np.array([1e-40, -1e-40, 1.0, 0.0] * 8, np.float32)       # subnormals, flushed by .ftz
    c = np.array([True, False] * 16)
    m = ptx.run(""".reg .f32 a; .reg .pred c, p, q, r;
        setp.eq.and.ftz.f32 p|q, a, 0f00000000, !c;
        setp.eq.xor.f32 r, a, 0.0, c;""", {"a": a, "c": c})
    zero_ftz = np.abs(a) < np.finfo(np.float32).tiny
    np.testing.assert_array_equal(m["p"], zero_ftz & ~c)
    np.testing.assert_array_equal(m["q"], ~zero_ftz & ~c)
    np.testing.assert_array_equal(m["r"], (a == 0) ^ c)


def test_generic_shared_and_variable_addresses():
    smem = smem_image(41)
    f = "wmma.load.a.sync.aligned.m16n16k16.row.bf16"
    exp = wmma.load(f, smem, 1024 + 64)
    base = ptx.GENERIC_SHARED_BASE
    for src, regs in [
        (".reg .b32 x<4>;\n" + f + " {x0,x1,x2,x3}, [p+64];\n", {"p": np.uint64(base + 1024)}),   # generic
        (".reg .b32 x<4>;\n" + f.replace("row", "row.shared") + " {x0,x1,x2,x3}, [p];\n",
         {"p": np.uint32(1024 + 64)}),                                                             # .shared
        (".shared .align 1024 .b8 pad[1024], t[512];\n.reg .b32 x<4>;\n" + f + " {x0,x1,x2,x3}, [t+64];\n",
         {}),                                                                                      # variable
        (".reg .b32 x<4>;\n" + f.replace("row", "row.shared::cta") + " {x0,x1,x2,x3}, [1088];\n", {}),
        (".shared .align 1024 .b8 pad[1024], t[512];\n.reg .b32 x<4>;\n.reg .u64 p;\nmov.u64 p, t;\n"
         + f.replace("row", "row.shared") + " {x0,x1,x2,x3}, [p+64];\n", {}),                       # mov of &t
    ]:
        m = ptx.run(src, regs, smem=smem)
        np.testing.assert_array_equal(fragment(m, names("x", 4)), exp, err_msg=src)


def test_machine_run_continues_on_the_same_state():
    m = ptx.run(".reg .b32 r;\nmov.b32 r, 5;\n")
    m.run(".reg .b32 s;\nmov.b32 s, r;\n")
    np.testing.assert_array_equal(m.read("s"), 5)
    assert m.registers == {"r": "b32", "s": "b32"}


def test_block_scopes():
    m = ptx.run("""
        .reg .b32 r;
        { .reg .pred p; setp.ne.b32 p, 1, 0; @p mov.b32 r, 1; }
        { .reg .pred p; setp.eq.b32 p, 1, 0; @p mov.b32 r, 2; }
    """)
    np.testing.assert_array_equal(m.read("r"), 1)
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run("{ .reg .pred p; }\nsetp.ne.b32 p, 1, 0;\n")
    check_error(e, PTXSyntaxError, 2, 13)


# ---------------------------------------------------------------------- caller values


def test_register_values_from_the_caller():
    m = ptx.run(".reg .f32 f; .reg .s32 s; .reg .f16 h; .reg .b64 w;\n",
                {"f": 0.1, "s": np.arange(32) - 5, "h": 1.5, "w": -1, "u": np.uint64(7), "q": True})
    assert m["f"][0] == np.float32(0.1) and m["s"][0] == -5 and m["h"][3] == np.float16(1.5)
    assert m.read("w")[0] == 0xFFFFFFFFFFFFFFFF and m.registers["u"] == "u64" and m.registers["q"] == "pred"


@pytest.mark.parametrize("regs,match", [
    ({"x": 5}, "declare it"),
    ({"f": np.zeros(7, np.float32)}, "shape"),
    ({"r": 1 << 40}, r"must lie in \[-2147483648, 4294967295\] \(32 bits"),
    ({"r": 1 << 80}, r"must lie in \[-2147483648, 4294967295\] \(32 bits"),
    ({"r": 1.5j}, "takes integers .*, got complex128"),
    ({"bad name": np.uint32(1)}, "not a register name"),
])
def test_bad_register_values(regs, match):
    with pytest.raises(OperandError, match=match):
        ptx.run(".reg .b32 r;\n.reg .f32 f;\n", regs, threads=32)


# ---------------------------------------------------------------------- errors: class, line, column

UNSUPPORTED = [
    ("div.s32 r, r, 1;", 1, 1),
    (".reg .b32 r;\n  ld.global.nc.b32 r, [r];", 2, 3),
    ("call.uni DONE;", 1, 1),
    ("DONE: ret;", 1, 7),                                       # the label is fine, ret is not
    (".version 8.0", 1, 1),
    (".entry kernel(.param .u64 p) { }", 1, 1),
    (".visible .entry k() {}", 1, 1),
    (".reg .b32 r;\nfence.sc.cta;", 2, 1),
    (".reg .b128 q;", 1, 6),
    (".reg .v4 .f32 v;", 1, 6),
    (".local .b32 scratch;", 1, 1),
    (".global .b32 g = 5;", 1, 16),
    (".reg .b32 r<100000>;", 1, 11),
    (".reg .b32 r;\n{ .reg .b32 r; }", 2, 13),                 # shadowing
    (".reg .b32 r;\nmov.b128 r, r;", 2, 1),
]


@pytest.mark.parametrize("source,line,column", UNSUPPORTED)
def test_unsupported_statements(source, line, column):
    with pytest.raises(UnsupportedInstructionError) as e:
        ptx.run(source)
    check_error(e, UnsupportedInstructionError, line, column)


SYNTAX = [
    (".reg .b32 r\nmov.b32 r, 1;", 2, 1, "expected ',' or ';'"),
    (".reg .b32 r;\nmov.b32 r, 1", 2, 13, "expected ',' or ';'"),
    (".reg .b32 r;\nmov.b32 r, ...;", 2, 12, "'...'"),
    ("/* never closed\nmov.b32 r, 1;", 1, 1, "unterminated"),
    (".reg .b32 r;\nmov.b32 r, #1;", 2, 12, "unexpected character"),
    (".reg .f32 f;\nmov.f32 f, 0f3F80;", 2, 12, "malformed number"),
    (".reg .b32 r;\nmov.b32 r, 09;", 2, 12, "octal"),
    ("}", 1, 1, "closes no block"),
    ("{\n.reg .b32 r;", 1, 1, "never closed"),
    (".reg .b32 r;\n.reg .f32 r;", 2, 11, "already declared"),
    (".reg .b32 x<8>;\n.reg .b32 x7;", 2, 11, "already declared"),
    (".reg .b32 r;\nmov.b32 r, s;", 2, 12, "s is not declared"),
    (".reg .b32 r;\n@q mov.b32 r, 1;", 2, 2, "q is not declared"),
    (".reg .b32 r;\nmov.b32 r, ;", 2, 12, "expected an operand"),
    (".reg .foo r;", 1, 6, "type"),
    (".reg .b32 1r;", 1, 11, "malformed number"),
    (".reg .b32 .r;", 1, 11, "expected a name"),
    (".frobnicate;", 1, 1, "unknown directive"),
    ("mov.b32 r, 99999999999999999999999;", 1, 12, "64 bits"),
]


@pytest.mark.parametrize("source,line,column,match", SYNTAX)
def test_syntax_errors(source, line, column, match):
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(source)
    check_error(e, PTXSyntaxError, line, column)
    assert match in str(e.value)


INVALID = [
    (".reg .f32 f;\nmov.f32 f, 1;", 2, 12, "floating-point literal"),
    (".reg .f32 f, g;\nmov.u32 f, g;", 2, 9, "does not agree"),
    (".reg .b32 r;\n.reg .f64 d;\nmov.b32 r, d;", 3, 12, "does not agree"),
    (".reg .b32 r;\nmov.u32 r, 0x100000000;", 2, 12, "does not fit"),
    (".reg .u32 r;\nmov.u32 r, 1.5;", 2, 12, "floating-point literal"),
    (".reg .b32 r;\nmov.b32.rn r, 1;", 2, 1, "one type qualifier"),
    (".reg .b32 r;\nmov.b8 r, 1;", 2, 1, "type qualifier"),
    (".reg .b32 r;\nmov.b32 r, 1, 2;", 2, 1, "2 operands"),
    (".reg .b32 r;\nmov.b32 %tid.x, r;", 2, 9, "read-only"),
    (".reg .pred p;\n.reg .s32 a;\nsetp.lo.s32 p, a, 1;", 3, 1, "CmpOp"),
    (".reg .pred p;\n.reg .b32 a;\nsetp.lt.b32 p, a, 1;", 3, 1, "CmpOp"),
    (".reg .b32 p, a;\nsetp.eq.b32 p, a, 1;", 2, 13, "does not agree"),
    (".reg .b32 r;\n@r mov.b32 r, 1;", 2, 2, ".pred"),
    ("wgmma.fence.sync.aligned 0;", 1, 1, "no operands"),
    ("wgmma.wait_group.sync.aligned;", 1, 1, "wait_group"),
    (".reg .f32 d<4>; .reg .b64 a, b;\nwgmma.mma_async.sync.aligned.m64n9k16.f32.f16.f16 {d0, d1, d2, d3}, a, b, 1, 1, 1, 0, 0;",
     2, 1, "shape"),
    (".reg .f32 d<4>; .reg .b64 a, b;\nwgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {d0, d1, d2, d3}, a, b, 1, 1, 1, 0, 0;",
     2, 52, "vector of 8 registers"),
    (".reg .f32 d<4>; .reg .b32 a, b;\nwgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, a, b, 1, 1, 1, 0, 0;",
     2, 69, "64-bit"),
    (".reg .f32 d<4>; .reg .b64 a, b; .reg .b32 s;\n"
     "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, a, b, s, 1, 1, 0, 0;", 2, 75, ".pred"),
    (".reg .f32 d<4>; .reg .b64 a, b;\nwgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, a, b, 1, 2, 1, 0, 0;",
     2, 1, "imm-scale-a"),
    (".reg .b32 x<8>; .reg .b64 p;\nwmma.load.a.sync.aligned.m16n16k16.row.f16 {x0, x1}, [p];", 2, 44,
     "vector of 8 registers"),
    (".reg .b32 x<8>; .reg .f32 p;\nwmma.load.a.sync.aligned.m16n16k16.row.f16 {x0, x1, x2, x3, x4, x5, x6, x7}, [p];",
     2, 78, "address register"),
    (".global .b8 g[64]; .reg .b32 x<8>;\n"
     "wmma.load.a.sync.aligned.m16n16k16.shared.row.f16 {x0, x1, x2, x3, x4, x5, x6, x7}, [g];", 2, 85, ".global variable"),
    (".reg .b32 x<8>;\nwmma.load.a.sync.aligned.m16n16k16.row.f16 {x0, x1, x2, x3, x4, x5, x6, x7}, [0], 1.5;", 2, 83,
     "integer immediates"),
    (".reg .b32 x<8>;\nwmma.load.a.sync.aligned.m16n16k16.row.f99 {x0, x1, x2, x3, x4, x5, x6, x7}, [0];", 2, 1,
     "f99"),
]


@pytest.mark.parametrize("source,line,column,match", INVALID)
def test_invalid_instructions(source, line, column, match):
    with pytest.raises(InvalidInstructionError) as e:
        ptx.run(source, threads=128)
    check_error(e, InvalidInstructionError, line, column)
    assert match in str(e.value)


def test_errors_come_in_source_order_and_nothing_runs_before():
    source = ".reg .b32 r;\nmov.b32 r, 1;\nmov.b32 r, undeclared;\nmov.b32 r, #;\n"
    with pytest.raises(PTXSyntaxError) as e:
        ptx.run(source)
    check_error(e, PTXSyntaxError, 3, 12)           # not the lexical error on line 4
    m = ptx.run(".reg .b32 r;\nmov.b32 r, 1;\n")
    with pytest.raises(UnsupportedInstructionError) as e:
        m.run("mov.b32 r, 2;\ndiv.s32 r, r, r;\n")
    check_error(e, UnsupportedInstructionError, 2, 1)
    np.testing.assert_array_equal(m.read("r"), 1)       # the mov before it did not run


def test_runtime_errors_carry_the_statement_position():
    src = ".reg .b32 x<4>;\n\n  wmma.load.a.sync.aligned.m16n16k16.row.bf16 {x0,x1,x2,x3}, [ptr];\n"
    with pytest.raises(MemoryBoundsError) as e:
        ptx.run(src, {"ptr": np.uint64(1 << 20)})      # past the default 1 MiB global image
    check_error(e, MemoryBoundsError, 3, 3)
    with pytest.raises(AlignmentError) as e:
        ptx.run(src, {"ptr": np.uint64(8)})
    check_error(e, AlignmentError, 3, 3)
    assert "wmma.load" in e.value.statement
    with pytest.raises(MemoryBoundsError) as e:
        ptx.run(".shared .b8 big[300000];", threads=128)
    check_error(e, MemoryBoundsError, 1, 13)


def test_wgmma_needs_a_warpgroup():
    with pytest.raises(UnsupportedInstructionError) as e:
        ptx.run("wgmma.fence.sync.aligned;", threads=32)
    check_error(e, UnsupportedInstructionError, 1, 1)
    with pytest.raises(OperandError):
        ptx.run("wgmma.fence.sync.aligned;", threads=100)


_VOCABULARY = ["mov.b32", "mov.f32", "setp.eq.s32", "wgmma.fence.sync.aligned", "wgmma.mma_async.sync.aligned",
               "wmma.load.a.sync.aligned.row.m16n16k16.f16", ".reg", ".b32", ".f32", ".pred", ".global", ".shared",
               ".align", "r", "x<4>", "x0", "p", "@p", "@!p", "!", "{", "}", "[", "]", "+", "-", ",", ";", "|",
               "0x10", "1.5", "0f3F800000", "0d", "...", "//c\n", "/*", "*/", "\n", "%tid.x", "WARP_SZ", "<", ">",
               "16", "-1", "[r+4]", "{x0, x1}", ".m64n8k16", "wgmma.commit_group.sync.aligned",
               "wgmma.wait_group.sync.aligned", "fence.proxy.async", "A[4]", "ld", "\u00e9", "\t", "\x00"]


def test_random_text_never_crashes():
    """Token soup and random characters: a result or a FastmmaError, nothing else."""
    rng = np.random.default_rng(50)
    outcomes = set()
    for i in range(1500):
        if i % 3:
            source = " ".join(rng.choice(_VOCABULARY, rng.integers(1, 25)))
        else:
            source = "".join(chr(c) for c in rng.integers(9, 127, rng.integers(1, 60)))
        try:
            ptx.run(source, {"r": np.uint32(3), "descA": np.uint64(DESC_A)}, threads=128)
            outcomes.add("ran")
        except FastmmaError as err:
            outcomes.add(type(err).__name__)
            if isinstance(err, (PTXSyntaxError, InvalidInstructionError, UnsupportedInstructionError)):
                assert err.line is not None and err.column is not None, (source, err)
    assert {"ran", "PTXSyntaxError", "UnsupportedInstructionError"} <= outcomes
