"""wmma.load / mma / store as a warp executes them, against the matrix-level fastmma.mma."""

import itertools

import ml_dtypes
import numpy as np
import pytest
from conftest import seed

import fastmma
from fastmma import wmma
from fastmma.errors import AlignmentError, InvalidInstructionError, MemoryBoundsError, OperandError

SHAPES16 = ["m16n16k16", "m8n32k16", "m32n8k16"]


def dims(shape):
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def write(mem, offset, values, layout, ld, bits):
    """Place a logical matrix in memory, element (r, c) at index r*ld+c (row) or c*ld+r (col)."""
    rows, cols = values.shape
    for r, c in itertools.product(range(rows), range(cols)):
        e = r * ld + c if layout == "row" else c * ld + r
        v = int(np.asarray(values[r, c]).view(f"u{max(bits // 8, 1)}") if bits >= 8 else values[r, c]) & ((1 << bits) - 1)
        if bits >= 8:
            mem[offset + e * bits // 8: offset + (e + 1) * bits // 8] = np.frombuffer(
                v.to_bytes(bits // 8, "little"), np.uint8)
        else:
            byte, shift = offset + e * bits // 8, (e * bits) % 8
            mem[byte] = (int(mem[byte]) & ~(((1 << bits) - 1) << shift)) | (v << shift)


def read(mem, offset, rows, cols, layout, ld, dtype):
    bits = np.dtype(dtype).itemsize * 8
    out = np.empty((rows, cols), dtype)
    for r, c in itertools.product(range(rows), range(cols)):
        e = r * ld + c if layout == "row" else c * ld + r
        out[r, c] = np.frombuffer(mem[offset + e * bits // 8: offset + (e + 1) * bits // 8].tobytes(), dtype)[0]
    return out


def random_values(rng, typ, shape):
    if typ in ("f16", "bf16", "tf32", "f32", "f64"):
        v = rng.standard_normal(shape) * 4
        return v.astype({"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32,
                         "f32": np.float32, "f64": np.float64}[typ])
    lo, hi, dt = {"s8": (-128, 127, np.int8), "u8": (0, 255, np.uint8), "s4": (-8, 7, np.int8),
                  "u4": (0, 15, np.uint8), "b1": (0, 1, np.uint8), "s32": (-(2**31), 2**31 - 1, np.int64)}[typ]
    return rng.integers(lo, hi + 1, shape).astype(dt if typ != "s32" else np.int32)


BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "f64": 64, "s8": 8, "u8": 8, "s4": 4, "u4": 4, "b1": 1, "s32": 32}

VARIANTS = (
    [(s, al, bl, "f16", d, c, "") for s in SHAPES16 for al in ("row", "col") for bl in ("row", "col")
     for d, c in (("f32", "f32"), ("f16", "f16"), ("f16", "f32"), ("f32", "f16"))]
    + [(s, "row", "col", "bf16", "f32", "f32", "") for s in SHAPES16]
    + [("m16n16k8", al, bl, "tf32", "f32", "f32", "") for al in ("row", "col") for bl in ("row", "col")]
    + [(s, "col", "row", t, "s32", "s32", sat) for s in SHAPES16 for t in ("s8", "u8") for sat in ("", ".satfinite")]
    + [("m8n8k32", "row", "col", t, "s32", "s32", "") for t in ("s4", "u4")]
    + [("m8n8k128", "row", "col", "b1", "s32", "s32", op) for op in (".and", ".xor")]
    + [("m8n8k4", al, "col", "f64", "f64", "f64", rnd) for al in ("row", "col") for rnd in (".rn", ".rm")]
)


def mma_text(shape, al, bl, t, d, c, extra):
    if t == "f16":
        return f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.{d}.{c}"
    if t == "b1":
        return f"wmma.mma{extra}.popc.sync.aligned.{al}.{bl}.{shape}.s32.b1.b1.s32"
    if t == "f64":
        return f"wmma.mma.sync.aligned.{al}.{bl}.{shape}{extra}.f64.f64.f64.f64"
    return f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.{d}.{t}.{t}.{c}{extra}"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ".".join(x.strip(".") for x in v if x))
def test_load_mma_store_equals_matrix_level_mma(variant):
    shape, al, bl, t, d, c, extra = variant
    m, n, k = dims(shape)
    rng = np.random.default_rng(seed(variant))
    A, B, C = random_values(rng, t, (m, k)), random_values(rng, t, (k, n)), random_values(rng, c, (m, n))
    cl, dl = ("col", "row") if m != n else ("row", "col")
    lda = (k if al == "row" else m) + 128 // BITS[t]  # one 16-byte pad per line
    ldb = (n if bl == "row" else k) + 128 // BITS[t]
    ldc = (n if cl == "row" else m) + 128 // BITS[c]
    ldd = (n if dl == "row" else m)
    mem = np.zeros(1 << 16, np.uint8)
    offs = {"a": 0, "b": 8192, "c": 16384, "d": 32768}
    write(mem, offs["a"], A, al, lda, BITS[t])
    write(mem, offs["b"], B, bl, ldb, BITS[t])
    write(mem, offs["c"], C, cl, ldc, BITS[c])
    fa = wmma.load(f"wmma.load.a.sync.aligned.{al}.{shape}.{t}", mem, offs["a"], lda)
    fb = wmma.load(f"wmma.load.b.sync.aligned.{bl}.{shape}.{t}", mem, offs["b"], ldb)
    fc = wmma.load(f"wmma.load.c.sync.aligned.{cl}.{shape}.{c}", mem, offs["c"], ldc)
    fd = wmma.mma(mma_text(shape, al, bl, t, d, c, extra), fa, fb, fc)
    wmma.store(f"wmma.store.d.sync.aligned.{dl}.{shape}.{d}", mem, offs["d"], fd)
    expected = fastmma.mma(mma_text(shape, al, bl, t, d, c, extra), A, B, C)
    got = read(mem, offs["d"], m, n, dl, ldd, expected.dtype)
    assert np.array_equal(got.view(f"u{expected.itemsize}"), expected.view(f"u{expected.itemsize}"))


def test_default_stride_is_the_leading_dimension():
    rng = np.random.default_rng(5)
    A = random_values(rng, "f16", (16, 16))
    mem = np.zeros(4096, np.uint8)
    write(mem, 0, A, "col", 16, 16)
    text = "wmma.load.a.sync.aligned.col.m16n16k16.global.f16"
    assert np.array_equal(wmma.load(text, mem, 0), wmma.load(text, mem, 0, 16))


def test_store_leaves_other_bytes_alone():
    mem = np.full(4096, 0xA5, np.uint8)
    d = np.zeros((32, 2), np.uint32)
    wmma.store("wmma.store.d.sync.aligned.row.m8n8k32.s32", mem, 0, d, 16)
    # 8 rows of 8 s32 (32 bytes) every 64 bytes: the gaps keep their value
    for r in range(8):
        assert np.all(mem[64 * r: 64 * r + 32] == 0) and np.all(mem[64 * r + 32: 64 * r + 64] == 0xA5)


@pytest.mark.parametrize("call,error,needle", [
    (lambda m: wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", m, 8), AlignmentError, "offset"),
    (lambda m: wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", m, 0, 20), AlignmentError, "ld"),
    (lambda m: wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", m, 0, 8), OperandError, "leading dimension"),
    (lambda m: wmma.load("wmma.load.c.sync.aligned.row.m16n16k16.f32", m, 4096 - 64), MemoryBoundsError, "mem holds"),
    (lambda m: wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", m.astype(np.int8), 0), OperandError, "uint8"),
    (lambda m: wmma.load("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", m, 0), InvalidInstructionError, "WmmaLoad"),
    (lambda m: wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", m, 0, 16.0), OperandError, "stride"),
])
def test_bad_loads_raise_before_reading(call, error, needle):
    with pytest.raises(error, match=needle):
        call(np.zeros(4096, np.uint8))


def test_bad_fragments_are_refused():
    text = "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32"
    a = np.zeros((32, 8), np.uint32)
    with pytest.raises(OperandError, match=r"\(32, 8\)"):
        wmma.mma(text, a[:, :4], a, a)
    with pytest.raises(OperandError, match="uint32"):
        wmma.mma(text, a.astype(np.float64), a, a)


def test_matrix_level_shape_and_dtype_errors():
    text = "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32"
    good = np.zeros((16, 16), np.float16)
    with pytest.raises(OperandError, match=r"A must have shape \(16, 16\)"):
        fastmma.mma(text, good[:8], good, np.zeros((16, 16), np.float32))
    with pytest.raises(OperandError, match="float16"):
        fastmma.mma(text, good.astype(np.float32), good, np.zeros((16, 16), np.float32))
    with pytest.raises(OperandError, match="C must hold f32"):
        fastmma.mma(text, good, good, np.zeros((16, 16), np.float64))
