"""fastmma.wgmma.mma_async (registers + descriptors + shared memory) against fastmma.mma.

The shared-memory images are built here by hand from the PTX ISA's canonical layouts, not with
fastmma.layout, so a wrong address map in the library would make these tests fail.
"""

import ml_dtypes
import numpy as np
import pytest
from conftest import seed

import fastmma
from fastmma import wgmma
from fastmma.errors import InvalidInstructionError, OperandError, SharedMemoryBoundsError
from fastmma.layout.wgmma_fragments import pack_a, pack_d, unpack_d

SWIZZLE_CODE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
SWIZZLE_BYTES = {"none": 16, "128B": 128, "64B": 64, "32B": 32}


def descriptor(start, lbo, sbo, swizzle):
    return (start >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (SWIZZLE_CODE[swizzle] << 62)


def k_major_image(mat, elem_bytes, swizzle, start, sbo, lbo=0):
    """Write an mn x k matrix K-major: row i of a core matrix group at (i%8)*W, groups of 8 rows
    SBO apart; without swizzle 16-byte chunks of K are LBO apart.  Then XOR address bits 4-6 with
    bits 7-9 (as far as the swizzle width goes)."""
    mn, k = mat.shape
    raw = np.ascontiguousarray(mat).view(np.uint8).reshape(mn, k * elem_bytes)
    image = np.zeros(1 << 16, np.uint8)
    width = SWIZZLE_BYTES[swizzle]
    for i in range(mn):
        for byte in range(k * elem_bytes):
            if swizzle == "none":
                addr = start + (i % 8) * 16 + (i // 8) * sbo + (byte // 16) * lbo + byte % 16
            else:
                addr = start + (i % 8) * width + (i // 8) * sbo + byte
                chunks = width // 16
                addr ^= ((addr >> 7) % chunks) << 4
            image[addr] = raw[i, byte]
    return image


def values(rng, fmt, shape):
    v = rng.standard_normal(shape)
    return v.astype({"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32,
                     "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fmt])


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
@pytest.mark.parametrize("dtype,atype,k,n", [("f32", "f16", 16, 16), ("f16", "f16", 16, 8),
                                             ("f32", "bf16", 16, 24), ("f32", "tf32", 8, 8),
                                             ("f32", "e4m3", 32, 16), ("f16", "e5m2", 32, 8)])
def test_register_level_equals_matrix_level(swizzle, dtype, atype, k, n):
    rng = np.random.default_rng(seed(swizzle, atype, dtype, n))
    A, B = values(rng, atype, (64, k)), values(rng, atype, (k, n))
    C = rng.standard_normal((64, n)).astype(np.float16 if dtype == "f16" else np.float32)
    eb = A.dtype.itemsize
    width = SWIZZLE_BYTES[swizzle]
    if swizzle != "none" and k * eb > width:
        pytest.skip("K row wider than the swizzle atom")
    sbo = 8 * width if swizzle != "none" else 256
    lbo = 128
    a_img = k_major_image(A, eb, swizzle, 0, sbo, lbo)
    b_img = k_major_image(np.ascontiguousarray(B.T), eb, swizzle, 16384, sbo, lbo)
    smem = np.maximum(a_img, b_img)  # disjoint regions
    text = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{dtype}.{atype}.{atype}"
    d_regs = pack_d(C, dtype)
    got = wgmma.mma_async(text, d_regs, a_desc=descriptor(0, lbo, sbo, swizzle),
                          b_desc=descriptor(16384, lbo, sbo, swizzle), smem=smem)
    expected = fastmma.mma(text, A, B, C)
    assert np.array_equal(unpack_d(got, dtype, n), expected.view(f"u{expected.itemsize}"))
    # A from registers gives the same bits
    got_reg = wgmma.mma_async(text, d_regs, a_regs=pack_a(A, atype), b_desc=descriptor(16384, lbo, sbo, swizzle),
                              smem=smem)
    assert np.array_equal(got_reg, got)


def test_scale_d_false_ignores_the_accumulator():
    rng = np.random.default_rng(4)
    A, B = values(rng, "f16", (64, 16)), values(rng, "f16", (16, 8))
    smem = np.maximum(k_major_image(A, 2, "128B", 0, 1024), k_major_image(np.ascontiguousarray(B.T), 2, "128B", 8192, 1024))
    text = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"
    nan_regs = np.full((128, 4), 0x7FC00000, np.uint32)
    got = wgmma.mma_async(text, nan_regs, a_desc=descriptor(0, 0, 1024, "128B"), b_desc=descriptor(8192, 0, 1024, "128B"),
                          smem=smem, scale_d=False)
    expected = fastmma.mma(text, A, B)
    assert np.array_equal(unpack_d(got, "f32", 8), expected.view(np.uint32))


@pytest.mark.parametrize("kwargs,error,needle", [
    (dict(d_regs=np.zeros((128, 3), np.uint32)), OperandError, r"\(128, 4\)"),
    (dict(d_regs=np.zeros((128, 4), np.float64)), OperandError, "uint32"),
    (dict(b_desc=None), OperandError, "b_desc"),
    (dict(a_regs=np.zeros((128, 4), np.uint32)), OperandError, "exactly one"),
    (dict(smem=np.zeros(100, np.uint8)), SharedMemoryBoundsError, "image holds 100 bytes"),
    (dict(smem=np.zeros((64, 64), np.uint8)), OperandError, "1-D"),
    (dict(b_desc=descriptor(1 << 14, 0, 1024, "128B") | (0x3FFF << 16)), SharedMemoryBoundsError, "descriptor"),
])
def test_bad_operands_raise_before_computing(kwargs, error, needle):
    args = dict(d_regs=np.zeros((128, 4), np.uint32), a_desc=descriptor(0, 0, 1024, "128B"),
                b_desc=descriptor(8192, 0, 1024, "128B"), smem=np.zeros(16384, np.uint8))
    args.update(kwargs)
    d = args.pop("d_regs")
    with pytest.raises(error, match=needle):
        wgmma.mma_async("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", d, **args)


def test_transpose_is_only_for_16_bit_types():
    with pytest.raises(InvalidInstructionError):
        fastmma.parse("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {a,b,c,d}, x, y, p, 1, 1, 1, 0;")
