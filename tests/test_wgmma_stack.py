"""fastmma.wgmma.mma_async_stack: a stack of warpgroups in one call.

Each warpgroup's D must be bit for bit what the H100 recorded (every wgmma recording,
replayed a file at a time as one stack per instruction of its chains) and what one
``wgmma.mma_async`` call per warpgroup gives (random images, descriptors that differ in
their layouts as well as their start addresses, image addresses, mixed scale-d).
"""

import numpy as np
import pytest

from conftest import GOLDEN, recordings
from fastmma import parse, wgmma
from fastmma.conform import chain_length, image_bases, load_recording
from fastmma.errors import AlignmentError, OperandError, SharedMemoryBoundsError
from fastmma.layout.descriptor import MatrixDescriptor

WGMMA_RECORDINGS = recordings("wgmma")


def test_the_wgmma_recordings_are_found():
    assert len(WGMMA_RECORDINGS) >= 274


@pytest.mark.parametrize("path", WGMMA_RECORDINGS, ids=lambda p: str(p.relative_to(GOLDEN)))
def test_a_recording_replayed_as_one_stack(path):
    """Every case of the file at once, one stacked call per instruction of the chain: its
    own image, descriptors, image address and scale-d for each warpgroup."""
    arrays, meta = load_recording(path)
    insts = [parse(t) for t in meta["ptx"] if t.startswith("wgmma")]
    n = len(arrays["mode"])
    assert len(insts) == chain_length(meta)
    a_desc, b_desc = arrays["a_desc"].reshape(n, -1), arrays["b_desc"].reshape(n, -1)
    regs = arrays["c_regs"]
    for j, inst in enumerate(insts):
        source = {"a_regs": arrays["a_regs"]} if inst.a_source == "reg" else {"a_desc": a_desc[:, j]}
        regs = wgmma.mma_async_stack(inst, regs, b_desc=b_desc[:, j], smem=arrays["smem"],
                                     scale_d=arrays["scale_d"].astype(bool) if j == 0 else True,
                                     image_address=np.array(image_bases(meta, n)), **source)
    assert regs.shape == arrays["d_regs"].shape
    mismatched = np.flatnonzero((regs != arrays["d_regs"]).any(axis=(1, 2)))
    assert mismatched.size == 0, f"cases {mismatched.tolist()} differ from the H100's bits"


SWIZZLES = ("none", "32B", "64B", "128B")
#: instruction, whether A comes from registers, and its immediates (imm-scale-a, imm-scale-b,
#: then imm-trans-a and imm-trans-b where A comes from a descriptor, else imm-trans-b), if any
CASES = [
    ("m64n32k16.f32.f16.f16", False, None),
    ("m64n24k16.f16.f16.f16", False, None),
    ("m64n16k16.f32.bf16.bf16", False, (-1, 1, 1, 1)),
    ("m64n16k16.f32.f16.f16", True, (1, -1, 1)),
    ("m64n8k8.f32.tf32.tf32", True, None),
    ("m64n40k32.f16.e4m3.e5m2", False, None),
    ("m64n32k32.s32.s8.u8.satfinite", False, None),
    ("m64n16k32.s32.u8.s8", True, None),
    ("m64n24k256.s32.b1.b1.and.popc", False, None),
]


def _text(short, a_in_registers, immediates):
    """The instruction's PTX text, with its operands where it has immediates."""
    text = "wgmma.mma_async.sync.aligned." + short
    if immediates is None:
        return text
    regs = parse(text).d_regs
    d = "{" + ", ".join(f"%r{i}" for i in range(regs)) + "}"
    a = "{%a0, %a1, %a2, %a3}" if a_in_registers else "%rd0"
    return f"{text} {d}, {a}, %rd1, p, {', '.join(map(str, immediates))};"


def _descriptors(rng, count, bits, k, trans):
    """Random descriptors of operands that fit a 32 KiB image: each its own swizzle, start
    address and (for the swizzled modes) base offset."""
    out = []
    for _ in range(count):
        swizzle = SWIZZLES[rng.integers(4)]
        if not trans and swizzle != "none" and k * bits > 8 * {"32B": 32, "64B": 64, "128B": 128}[swizzle]:
            swizzle = "none"
        width = {"none": 16, "32B": 32, "64B": 64, "128B": 128}[swizzle]
        sbo = 8 * width if swizzle != "none" else int(rng.choice([128, 256]))
        lbo = int(rng.choice([128, 256, 1024])) if swizzle == "none" or trans else 16
        start = 16 * int(rng.integers(0, 512))
        out.append(MatrixDescriptor(start, lbo, sbo, int(rng.integers(0, 8)) if swizzle != "none" else 0,
                                    swizzle).encode())
    return np.array(out, np.uint64)


@pytest.mark.parametrize("short,a_in_registers,immediates", CASES,
                         ids=[f"{c[0]}-{'areg' if c[1] else 'adesc'}" for c in CASES])
def test_a_stack_gives_each_warpgroup_what_one_call_gives(short, a_in_registers, immediates):
    rng = np.random.default_rng(sum(map(ord, short)))
    inst = parse(_text(short, a_in_registers, immediates))
    count = 7
    smem = rng.integers(0, 256, (count, 32768), dtype=np.uint8)  # random bits: NaNs, infinities, subnormals
    d_regs = rng.integers(0, 2**32, (count, 128, inst.d_regs), dtype=np.uint32)
    bits = {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "s8": 8, "u8": 8, "b1": 1}[inst.atype]
    b_desc = _descriptors(rng, count, bits, inst.shape.k, inst.imm_trans_b)
    address = 16 * rng.integers(0, 256, count)
    scale_d = rng.integers(0, 2, count).astype(bool)
    scale_d[0] = True
    if a_in_registers:
        a = {"a_regs": rng.integers(0, 2**32, (count, 128, 4), dtype=np.uint32)}
    else:
        a = {"a_desc": _descriptors(rng, count, bits, inst.shape.k, inst.imm_trans_a)}
    got = wgmma.mma_async_stack(inst, d_regs, b_desc=b_desc, smem=smem, scale_d=scale_d, image_address=address, **a)
    for s in range(count):
        one = {name: (int(v[s]) if name == "a_desc" else v[s]) for name, v in a.items()}
        expected = wgmma.mma_async(inst, d_regs[s], b_desc=int(b_desc[s]), smem=smem[s], scale_d=bool(scale_d[s]),
                                   image_address=int(address[s]), **one)
        assert np.array_equal(got[s], expected), f"warpgroup {s}"


def test_one_image_and_descriptor_broadcast_over_the_stack():
    rng = np.random.default_rng(7)
    inst = parse("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16")
    smem = rng.integers(0, 256, 16384, dtype=np.uint8)
    a_desc = MatrixDescriptor(0, 16, 1024, 0, "128B")
    b_desc = MatrixDescriptor(8192, 16, 1024, 0, "128B").encode()
    d_regs = rng.integers(0, 2**32, (2, 3, 128, inst.d_regs), dtype=np.uint32)
    scale_d = np.array([True, False, True])
    got = wgmma.mma_async_stack(inst, d_regs, a_desc=a_desc, b_desc=b_desc, smem=smem, scale_d=scale_d)
    assert got.shape == (2, 3, 128, inst.d_regs)
    for i in range(2):
        for j in range(3):
            expected = wgmma.mma_async(inst, d_regs[i, j], a_desc=a_desc, b_desc=b_desc, smem=smem,
                                       scale_d=bool(scale_d[j]))
            assert np.array_equal(got[i, j], expected)


def test_an_empty_stack_gives_no_registers():
    inst = parse("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16")
    got = wgmma.mma_async_stack(inst, np.zeros((0, 128, 4), np.uint32), a_desc=np.zeros(0, np.uint64),
                                b_desc=0, smem=np.zeros(4096, np.uint8))
    assert got.shape == (0, 128, 4) and got.dtype == np.uint32


TEXT = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"
A_DESC = MatrixDescriptor(0, 16, 1024, 0, "128B").encode()
B_DESC = MatrixDescriptor(8192, 16, 1024, 0, "128B").encode()


@pytest.mark.parametrize("kwargs,error,needle", [
    (dict(b_desc=np.array([B_DESC] * 2, np.uint64)), OperandError, r"broadcast together, got d_regs \(3,\)"),
    (dict(d_regs=np.zeros((3, 128, 5), np.uint32)), OperandError, r"\(\.\.\., 128, 4\)"),
    (dict(b_desc=np.array([B_DESC, B_DESC, B_DESC | 0x3FFF], np.uint64)), SharedMemoryBoundsError,
     "b_desc of warpgroup 2 reads outside"),
    (dict(b_desc=np.array([1.5, 2.5, 3.5])), OperandError, "dtype float64"),
    (dict(a_desc=np.array([-1, 0, 0])), OperandError, "negative"),
    (dict(image_address=np.array([0, 8, 0])), AlignmentError, "16-byte aligned, got 8"),
    (dict(scale_d=np.array([0, 2, 1])), OperandError, "scale_d"),
    (dict(scale_d="false"), OperandError, "scale_d"),
    (dict(smem=np.zeros(16384, np.int16)), OperandError, "uint8"),
    (dict(a_regs=np.zeros((3, 128, 4), np.uint32)), OperandError, "exactly one"),
])
def test_bad_stacks_raise_before_computing(kwargs, error, needle):
    args = dict(d_regs=np.zeros((3, 128, 4), np.uint32), a_desc=A_DESC, b_desc=B_DESC, smem=np.zeros(16384, np.uint8))
    args.update(kwargs)
    d = args.pop("d_regs")
    with pytest.raises(error, match=needle):
        wgmma.mma_async_stack(TEXT, d, **args)
