"""Integer and single-bit instructions against a plain numpy model (hypothesis)."""

import numpy as np
from hypothesis import given, settings, strategies as st

import fastmma

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
RANGES = {"s8": (-128, 127), "u8": (0, 255), "s4": (-8, 7), "u4": (0, 15)}
DTYPES = {"s8": np.int8, "u8": np.uint8, "s4": np.int8, "u4": np.uint8}


def model_int(a, b, c, satfinite):
    """C + A @ B in exact integers, then s32 wrap or clamp."""
    exact = a.astype(object) @ b.astype(object) + (0 if c is None else c.astype(object))
    exact = np.array(exact, dtype=object)
    if satfinite:
        out = np.clip(exact, INT32_MIN, INT32_MAX)
    else:
        out = (exact + 2**31) % 2**32 - 2**31
    return out.astype(np.int64)


def operands(draw, m, n, k, atype, btype, extreme_c):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    lo, hi = RANGES[atype]
    a = rng.integers(lo, hi + 1, (m, k)).astype(DTYPES[atype])
    lo, hi = RANGES[btype]
    b = rng.integers(lo, hi + 1, (k, n)).astype(DTYPES[btype])
    if extreme_c:
        c = rng.choice(np.array([INT32_MIN, INT32_MIN + 7, -1, 0, 1, INT32_MAX - 9, INT32_MAX], np.int64), (m, n))
    else:
        c = rng.integers(INT32_MIN, INT32_MAX + 1, (m, n), dtype=np.int64)
    return a, b, c.astype(np.int32)


WGMMA_INT_N = [8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.sampled_from(WGMMA_INT_N), atype=st.sampled_from(["s8", "u8"]),
       btype=st.sampled_from(["s8", "u8"]), satfinite=st.booleans(), extreme=st.booleans())
def test_wgmma_integer_matches_exact_model(data, n, atype, btype, satfinite, extreme):
    a, b, c = operands(data.draw, 64, n, 32, atype, btype, extreme)
    sat = ".satfinite" if satfinite else ""
    d = fastmma.mma(f"wgmma.mma_async.sync.aligned.m64n{n}k32.s32.{atype}.{btype}{sat}", a, b, c)
    assert d.dtype == np.int32
    assert np.array_equal(d.astype(np.int64), model_int(a, b, c, satfinite))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=st.sampled_from(["m16n16k16", "m8n32k16", "m32n8k16"]),
       ab=st.sampled_from(["s8", "u8"]), satfinite=st.booleans(), extreme=st.booleans(),
       layouts=st.sampled_from(["row.col", "row.row", "col.col", "col.row"]))
def test_wmma_8bit_matches_exact_model(data, shape, ab, satfinite, extreme, layouts):
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    a, b, c = operands(data.draw, m, n, k, ab, ab, extreme)
    sat = ".satfinite" if satfinite else ""
    d = fastmma.mma(f"wmma.mma.sync.aligned.{layouts}.{shape}.s32.{ab}.{ab}.s32{sat}", a, b, c)
    assert np.array_equal(d.astype(np.int64), model_int(a, b, c, satfinite))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), ab=st.sampled_from(["s4", "u4"]), satfinite=st.booleans(), extreme=st.booleans())
def test_wmma_4bit_matches_exact_model(data, ab, satfinite, extreme):
    a, b, c = operands(data.draw, 8, 8, 32, ab, ab, extreme)
    sat = ".satfinite" if satfinite else ""
    d = fastmma.mma(f"wmma.mma.sync.aligned.row.col.m8n8k32.s32.{ab}.{ab}.s32{sat}", a, b, c)
    assert np.array_equal(d.astype(np.int64), model_int(a, b, c, satfinite))


def model_popc(a, b, c, op):
    a = a.astype(np.int64)[:, :, None]
    b = b.astype(np.int64)[None, :, :]
    bits = (a ^ b) if op == "xor" else (a & b)
    exact = bits.sum(axis=1) + c.astype(np.int64)
    return (exact + 2**31) % 2**32 - 2**31


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), op=st.sampled_from(["and", "xor"]), density=st.floats(0, 1),
       extreme=st.booleans())
def test_wmma_b1_matches_popc_model(seed, op, density, extreme):
    rng = np.random.default_rng(seed)
    a = rng.random((8, 128)) < density
    b = rng.random((128, 8)) < density
    c = (rng.choice(np.array([INT32_MAX - 60, INT32_MAX, INT32_MIN]), (8, 8)) if extreme
         else rng.integers(INT32_MIN, INT32_MAX + 1, (8, 8))).astype(np.int32)
    d = fastmma.mma(f"wmma.mma.{op}.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32", a, b, c)
    assert np.array_equal(d.astype(np.int64), model_popc(a, b, c, op))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([8, 16, 24, 32, 48, 96, 240, 256]))
def test_wgmma_b1_and_popc_matches_model(seed, n):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, (64, 256)).astype(np.uint8)
    b = rng.integers(0, 2, (256, n)).astype(np.uint8)
    c = rng.integers(INT32_MIN, INT32_MAX + 1, (64, n)).astype(np.int32)
    d = fastmma.mma(f"wgmma.mma_async.sync.aligned.m64n{n}k256.s32.b1.b1.and.popc", a, b, c)
    assert np.array_equal(d.astype(np.int64), model_popc(a, b, c, "and"))


def test_scale_d_false_ignores_c():
    a = np.ones((64, 32), np.int8)
    b = np.ones((32, 8), np.int8)
    c = np.full((64, 8), 1000, np.int32)
    text = "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8"
    assert np.all(fastmma.mma(text, a, b, c, scale_d=False) == 32)
    assert np.all(fastmma.mma(text, a, b, c) == 1032)
    assert np.all(fastmma.mma(text, a, b) == 32)
