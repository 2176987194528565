"""One test per validation rule: bad input is refused before any kernel runs, with a fastmma
error whose message names the argument, what was expected and what was given."""

import importlib

import ml_dtypes
import numpy as np
import pytest

import fastmma
from fastmma import Warpgroup, ptx, wgmma, wmma
from fastmma.errors import (AlignmentError, FastmmaError, HazardError, InvalidInstructionError, OperandError,
                            PTXSyntaxError, SharedMemoryBoundsError)

F16_WGMMA = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"
MMA16 = "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32"


def raises(error, *needles):
    """pytest.raises that also checks every needle appears in the message."""
    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(error)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            out = self.ctx.__exit__(*exc)
            message = str(self.info.value)
            for needle in needles:
                assert needle in message, (needle, message)
            assert isinstance(self.info.value, FastmmaError)
            return out
    return _Check()


# ---------------------------------------------------------------- dtypes


def test_dtype_of_a_float_operand():
    with raises(OperandError, "A", "float16", "float32"):
        fastmma.mma(F16_WGMMA, np.zeros((64, 16), np.float32), np.zeros((16, 8), np.float16))


def test_dtype_of_a_bf16_operand_names_ml_dtypes():
    with raises(OperandError, "B", "bfloat16", "float16"):
        fastmma.matmul(np.zeros((4, 16), ml_dtypes.bfloat16), np.zeros((16, 4), np.float16),
                       instruction="m64n8k16.f32.bf16.bf16")


def test_dtype_of_the_accumulator():
    with raises(OperandError, "C", "f32", "int32"):
        fastmma.mma(F16_WGMMA, np.zeros((64, 16), np.float16), np.zeros((16, 8), np.float16),
                    np.zeros((64, 8), np.int32))


def test_range_of_sub_byte_integers():
    with raises(OperandError, "s4", "[-8, 7]", "[9, 9]"):
        fastmma.mma("wmma.mma.sync.aligned.row.col.m8n8k32.s32.s4.s4.s32", np.full((8, 32), 9, np.int8),
                    np.zeros((32, 8), np.int8), np.zeros((8, 8), np.int32))


def test_object_arrays_are_refused():
    with raises(OperandError, "A", "object"):
        fastmma.matmul(np.empty((4, 16), object), np.zeros((16, 4), np.float16), instruction="m64n8k16.f32.f16.f16")


@pytest.mark.parametrize("call, needle", [
    (lambda t: fastmma.mma(F16_WGMMA, t((64, 16), "float16"), np.zeros((16, 8), np.float16)), "A"),
    (lambda t: Warpgroup(smem=t((1024,), "uint8")), "smem"),
    (lambda t: Warpgroup().write("r0", t((128,), "int32"), bits=32), "values"),
    (lambda t: wmma.mma(MMA16, *(t((32, 8), "int32") for _ in range(3))), "a"),
], ids=["mma operand", "smem image", "register values", "wmma fragment"])
def test_torch_tensors_without_data_are_refused(call, needle):
    torch = pytest.importorskip("torch")

    def meta(shape, dtype):  # a tensor with a shape and a dtype but no data
        return torch.zeros(shape, dtype=getattr(torch, dtype), device="meta")
    with raises(OperandError, needle, "dense tensor with data", "meta"):
        call(meta)


@pytest.mark.parametrize("scale_d", ["false", 2, np.array([True]), 0.0])
@pytest.mark.parametrize("api", ["mma", "matmul", "dask", "mma_async"])
def test_scale_d_is_a_bool(api, scale_d):
    A, B, C = np.ones((64, 16), np.float16), np.ones((16, 8), np.float16), np.ones((64, 8), np.float32)
    if api == "dask":
        pytest.importorskip("dask.array")
    calls = {
        "mma": lambda: fastmma.mma(F16_WGMMA, A, B, C, scale_d=scale_d),
        "matmul": lambda: fastmma.matmul(A, B, C, instruction=F16_WGMMA, scale_d=scale_d),
        "dask": lambda: importlib.import_module("fastmma.dask").matmul(A, B, C, instruction=F16_WGMMA,
                                                                      scale_d=scale_d),
        "mma_async": lambda: wgmma.mma_async(F16_WGMMA, np.zeros((128, 4), np.uint32), b_desc=0,
                                             smem=np.zeros(1024, np.uint8), a_regs=np.zeros((128, 4), np.uint32),
                                             scale_d=scale_d),
    }
    with raises(OperandError, "scale_d", "bool", repr(scale_d)):
        calls[api]()


@pytest.mark.parametrize("progress", [3, "bar", True])
@pytest.mark.parametrize("api", ["matmul", "cluster"])
def test_progress_is_a_callable(api, progress):
    """Checked before any work (for a cluster, before connecting), not a TypeError at the
    first block."""
    A, B = np.ones((64, 16), np.float16), np.ones((16, 8), np.float16)
    if api == "cluster":
        pytest.importorskip("distributed")
    calls = {
        "matmul": lambda: fastmma.matmul(A, B, instruction=F16_WGMMA, progress=progress),
        "cluster": lambda: importlib.import_module("fastmma.dask").run_gemm_on_cluster(
            A, B, instruction=F16_WGMMA, scheduler="tcp://127.0.0.1:9", progress=progress, timeout=0.1),
    }
    with raises(OperandError, "progress", "callable", repr(progress)):
        calls[api]()

@pytest.mark.parametrize("scale_d", ["false", 2, np.array([True]), 0.0])
@pytest.mark.parametrize("api", ["mma", "matmul", "dask"])
def test_scale_d_is_checked_without_c(api, scale_d):
    """With no C the predicate changes nothing, but a bad one is still an error, not ignored."""
    A, B = np.ones((64, 16), np.float16), np.ones((16, 8), np.float16)
    if api == "dask":
        pytest.importorskip("dask.array")
    calls = {
        "mma": lambda: fastmma.mma(F16_WGMMA, A, B, scale_d=scale_d),
        "matmul": lambda: fastmma.matmul(A, B, instruction=F16_WGMMA, scale_d=scale_d),
        "dask": lambda: importlib.import_module("fastmma.dask").matmul(A, B, instruction=F16_WGMMA, scale_d=scale_d),
    }
    with raises(OperandError, "scale_d", "bool", repr(scale_d)):
        calls[api]()


@pytest.mark.parametrize("scale_d", [2, -1, np.int64(3), np.array([True]), 0.0, [1]])
def test_warpgroup_scale_d_is_a_bool_or_a_register(scale_d):
    """The Warpgroup also takes a predicate register's name; any other value is a bool or 0/1,
    as everywhere else (2 used to read as true)."""
    wg = Warpgroup(16384)
    d = [f"%f{i}" for i in range(4)]
    wg.write(d, np.zeros((128, 4), np.uint32))
    wg.fence()
    with raises(OperandError, "scale_d", "bool", "predicate register", repr(scale_d)):
        wg.mma_async(F16_WGMMA, d=d, a=0, b_desc=8192 >> 4, scale_d=scale_d)


# ---------------------------------------------------------------- shapes


def test_shape_of_an_instruction_operand():
    with raises(OperandError, "A", "(64, 16)", "(64, 15)"):
        fastmma.mma(F16_WGMMA, np.zeros((64, 15), np.float16), np.zeros((16, 8), np.float16))


def test_inner_dimensions_of_a_gemm():
    with raises(OperandError, "K must agree", "4x16", "8x4"):
        fastmma.matmul(np.zeros((4, 16), np.float16), np.zeros((8, 4), np.float16), instruction="m64n8k16.f32.f16.f16")


def test_gemm_operands_are_matrices():
    with raises(OperandError, "2-D", "(16,)"):
        fastmma.matmul(np.zeros(16, np.float16), np.zeros((16, 4), np.float16), instruction="m64n8k16.f32.f16.f16")


# ---------------------------------------------------------------- contiguity and strides


def test_any_strides_are_accepted_and_give_the_same_bits():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 32)).astype(np.float16)
    B = rng.standard_normal((16, 16)).astype(np.float16)
    strided = fastmma.mma(F16_WGMMA, A[:, ::2], B[:, ::2])
    dense = fastmma.mma(F16_WGMMA, np.ascontiguousarray(A[:, ::2]), np.ascontiguousarray(B[:, ::2]))
    assert np.array_equal(strided.view(np.uint32), dense.view(np.uint32))
    assert np.array_equal(fastmma.mma(F16_WGMMA, np.asfortranarray(A[:, :16]), B[:, :8]).view(np.uint32),
                          fastmma.mma(F16_WGMMA, A[:, :16].copy(), B[:, :8].copy()).view(np.uint32))


def test_arrays_in_the_other_byte_order_are_read_by_value():
    """A big-endian array (on a little-endian host) holds the same values as its native copy
    and gives the same bits; before, its dtype was refused as not being f16."""
    rng = np.random.default_rng(1)
    A = rng.standard_normal((64, 16)).astype(np.float16)
    B = rng.standard_normal((16, 8)).astype(np.float16)
    C = rng.standard_normal((64, 8)).astype(np.float32)
    swapped = [x.astype(x.dtype.newbyteorder("S")) for x in (A, B, C)]
    assert not any(x.dtype.isnative for x in swapped)
    assert np.array_equal(fastmma.mma(F16_WGMMA, *swapped).view(np.uint32),
                          fastmma.mma(F16_WGMMA, A, B, C).view(np.uint32))
    a8 = rng.integers(-128, 128, (20, 40)).astype(np.int8)
    b8 = rng.integers(-128, 128, (40, 12)).astype(np.int8)
    c32 = rng.integers(-2**31, 2**31, (20, 12)).astype(np.int32)
    s8 = "m64n16k32.s32.s8.s8"
    assert np.array_equal(fastmma.matmul(a8, b8, c32.astype(">i4"), instruction=s8),
                          fastmma.matmul(a8, b8, c32, instruction=s8))
    frags = [rng.integers(0, 2**32, (32, n), dtype=np.uint32) for n in (8, 8, 8)]
    assert np.array_equal(wmma.mma(MMA16, *(f.astype(">u4") for f in frags)), wmma.mma(MMA16, *frags))
    regs = fastmma.layout.wgmma_fragments.pack_a(A.astype(">f2"), "f16")
    assert np.array_equal(regs, fastmma.layout.wgmma_fragments.pack_a(A, "f16"))


def test_bits_of_any_layout_come_out_c_contiguous():
    """``to_bits`` gives C-contiguous bits whatever the operand's layout (the kernels read
    rows): transposed b1 (bool) and s4 operands, which it converts, and f16 ones, which it
    only views, hold the same bits as their contiguous copies."""
    from fastmma.formats import to_bits

    rng = np.random.default_rng(4)
    b1 = rng.integers(0, 2, (40, 24)).astype(bool).T
    s4 = rng.integers(-8, 8, (40, 24)).astype(np.int8).T
    f16 = rng.standard_normal((40, 24)).astype(np.float16)[:, ::3]
    for values, fmt in ((b1, "b1"), (s4, "s4"), (f16, "f16")):
        assert not values.flags.c_contiguous
        bits = to_bits(values, fmt)
        assert bits.flags.c_contiguous
        assert np.array_equal(bits, to_bits(np.ascontiguousarray(values), fmt))


# ---------------------------------------------------------------- register counts


def test_accumulator_register_count():
    with raises(OperandError, "d_regs", "(128, 4)", "(128, 8)"):
        wgmma.mma_async(F16_WGMMA, np.zeros((128, 8), np.uint32), a_desc=0, b_desc=0, smem=np.zeros(8192, np.uint8))


def test_a_register_count():
    with raises(OperandError, "a_regs", "(128, 4)", "(128, 3)"):
        wgmma.mma_async(F16_WGMMA, np.zeros((128, 4), np.uint32), a_regs=np.zeros((128, 3), np.uint32), b_desc=0,
                        smem=np.zeros(8192, np.uint8))


def test_wmma_fragment_register_count():
    a = np.zeros((32, 8), np.uint32)
    with raises(OperandError, "c", "(32, 8)", "(32, 4)"):
        wmma.mma(MMA16, a, a, a[:, :4])


def test_register_vector_length_in_text():
    with raises(InvalidInstructionError, "d", "4 registers"):
        fastmma.parse(F16_WGMMA + " {a,b}, x, y, p, 1, 1, 0, 0;")


# ---------------------------------------------------------------- descriptor address ranges


@pytest.mark.parametrize("size", [0, -1, (1 << 32) + 1, 10**13])
def test_shared_memory_size(size):
    with raises(OperandError, "shared-memory size", "2^32", str(size)):
        Warpgroup(smem=size)


def test_descriptor_reaching_past_the_image():
    a_desc = 4096 >> 4  # start address 4096, past a 512-byte image
    with raises(SharedMemoryBoundsError, "a_desc", "image holds 512 bytes", "start_address"):
        wgmma.mma_async(F16_WGMMA, np.zeros((128, 4), np.uint32), a_desc=a_desc, b_desc=0,
                        smem=np.zeros(512, np.uint8))


def test_descriptor_value_out_of_64_bits():
    with raises(OperandError, "b_desc", "64-bit"):
        wgmma.mma_async(F16_WGMMA, np.zeros((128, 4), np.uint32), a_desc=0, b_desc=1 << 64,
                        smem=np.zeros(8192, np.uint8))


def test_image_address_alignment():
    with raises(AlignmentError, "image_address", "16-byte"):
        wgmma.mma_async(F16_WGMMA, np.zeros((128, 4), np.uint32), a_desc=0, b_desc=0,
                        smem=np.zeros(8192, np.uint8), image_address=8)


# ---------------------------------------------------------------- wmma pointer and stride alignment


def test_wmma_pointer_alignment():
    with raises(AlignmentError, "offset", "32 bytes", "16"):
        wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", np.zeros(4096, np.uint8), 16)


def test_wmma_stride_alignment():
    with raises(AlignmentError, "ld", "16 bytes", "20"):
        wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", np.zeros(4096, np.uint8), 0, 20)


def test_wmma_stride_below_the_leading_dimension():
    with raises(OperandError, "ld", "leading dimension 16"):
        wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", np.zeros(4096, np.uint8), 0, 8)


def test_wmma_bounds():
    with raises(fastmma.errors.MemoryBoundsError, "mem holds bytes [0, 100)"):
        wmma.load("wmma.load.a.sync.aligned.row.m16n16k16.f16", np.zeros(100, np.uint8), 0)


# ---------------------------------------------------------------- wait_group N


def test_wait_group_n_in_text():
    with raises(InvalidInstructionError, "N", "non-negative", "-1"):
        fastmma.parse("wgmma.wait_group.sync.aligned -1;")


def test_wait_group_n_at_run_time():
    wg = Warpgroup(1024)
    with raises(OperandError, "N", "non-negative", "-2"):
        wg.wait_group(-2)
    with raises(OperandError, "N", "1.5"):
        wg.wait_group(1.5)


@pytest.mark.parametrize("names, needle", [(5, "sequence of names"), ([], "no register names"),
                                           (["%r1", 7], "7"), ("1x", "'1x'")])
def test_register_names(names, needle):
    with raises(OperandError, needle):
        Warpgroup(1024).write(names, 0, bits=32)


# ---------------------------------------------------------------- immediates


def test_imm_scale_range():
    with raises(InvalidInstructionError, "imm-scale-a", "-1 or 1", "0"):
        fastmma.parse(F16_WGMMA + " {a,b,c,d}, x, y, p, 0, 1, 0, 0;")


def test_imm_trans_range():
    with raises(InvalidInstructionError, "imm-trans-b", "0 or 1", "2"):
        fastmma.parse(F16_WGMMA + " {a,b,c,d}, x, y, p, 1, 1, 0, 2;")


def test_imm_trans_only_where_the_isa_allows_it():
    with raises(InvalidInstructionError, ".tf32", "6 operands"):
        fastmma.parse("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {a,b,c,d}, x, y, p, 1, 1, 1, 0;")
    with raises(InvalidInstructionError, "imm-trans", ".f16/.bf16", ".e4m3"):
        fastmma.parse("wgmma.mma_async.m64n8k32.f32.e4m3.e4m3").with_operands(imm_trans_b=1)
    with raises(InvalidInstructionError, "imm-scale", "floating-point", ".s8"):
        fastmma.parse("wgmma.mma_async.m64n8k32.s32.s8.s8").with_operands(imm_scale_a=-1)


def test_imm_trans_a_with_a_in_registers():
    with raises(InvalidInstructionError, "imm-trans-a", "registers"):
        fastmma.parse(F16_WGMMA).with_operands(a_source="reg", imm_trans_a=1)


# ---------------------------------------------------------------- hazards are errors too


def test_mma_async_without_fence():
    wg = Warpgroup(16384)
    d = [f"%f{i}" for i in range(4)]
    wg.write(d, np.zeros((128, 4), np.uint32))
    with raises(HazardError, "fence"):
        wg.mma_async(F16_WGMMA, d=d, a=0, b_desc=8192 >> 4, scale_d=False)


def test_syntax_error_names_the_problem():
    with raises(PTXSyntaxError, "brace"):
        fastmma.parse(F16_WGMMA + " {a,b,c,d, x, y, p;")


@pytest.mark.parametrize("literal", ["18446744073709551616", "0x10000000000000000", "9" * 5000])
def test_integer_literal_past_64_bits(literal):
    """PTX integers are 64-bit; one of thousands of digits (which Python's int() refuses to
    read) gets the same error."""
    with raises(PTXSyntaxError, "does not fit in 64 bits"):
        fastmma.parse(F16_WGMMA + " {f0, f1, f2, f3}, a, b, p, " + literal + ", 1, 0, 0;")
    with raises(PTXSyntaxError, "does not fit in 64 bits"):
        ptx.run("mov.u64 %rd1, " + literal + ";")


# ---------------------------------------------------------------- memory images


IMAGE_OWNERS = {
    "Warpgroup smem": lambda image: Warpgroup(smem=image).smem,
    "ptx smem": lambda image: ptx.run("", smem=image).smem,
    "ptx global_mem": lambda image: ptx.run("", global_mem=image).global_mem,
}


@pytest.mark.parametrize("owner", list(IMAGE_OWNERS))
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview, lambda d: np.frombuffer(d, np.uint8)],
                         ids=["bytes", "bytearray", "memoryview", "uint8 array"])
def test_memory_image_is_a_private_copy_of_its_bytes(owner, kind):
    data = bytes(range(256)) * 4
    source = bytearray(data)
    got = IMAGE_OWNERS[owner](kind(source))
    source[:] = bytes(len(source))  # the caller's buffer changes afterwards
    assert got.dtype == np.uint8 and bytes(got) == data


@pytest.mark.parametrize("owner", list(IMAGE_OWNERS))
@pytest.mark.parametrize("image", [np.zeros((2, 512), np.uint8), np.zeros(0, np.uint8), np.zeros(256, np.int32)],
                         ids=["2-D", "empty", "int32"])
def test_memory_image_must_be_1d_uint8(owner, image):
    name = owner.split()[-1]
    with raises(OperandError, f"{name} must be a non-empty 1-D uint8 image", str(image.dtype)):
        IMAGE_OWNERS[owner](image)
