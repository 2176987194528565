"""Prepared instructions (fastmma.wgmma.prepare, fastmma.mma_sync.prepare, fastmma.wmma.prepare)
against the unprepared API, bit for bit, and against the H100 recordings.

The unprepared calls read their operands through the layout rules each time; the prepared ones
through index maps built once.  Operands here are random values of each format with
infinities, NaNs, signed zeros, subnormals and the largest finite values mixed in, so that the
path of the kernels that recomputes an output reached by a special value runs too.
"""

import numpy as np
import pytest
from conftest import GOLDEN, golden_files, seed

import fastmma
from fastmma import conform
from fastmma.errors import (AlignmentError, InvalidInstructionError, OperandError, PTXSyntaxError,
                            SharedMemoryBoundsError)
from fastmma.formats import get_format
from fastmma.layout.descriptor import MatrixDescriptor

SPECIALS = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 65504.0, -65504.0, 6e-8, -3e-39, 3.0e38], np.float32)


def element_bits(rng, fmt_name, shape, special_rate=0.04):
    """Random bits of ``fmt_name`` elements: normal values of a few binades, or random
    integers; for floats a share of them SPECIALS (each as the format rounds it)."""
    fmt = get_format(fmt_name)
    if not fmt.is_float:
        return rng.integers(0, 1 << min(fmt.bits, 32), size=shape, dtype=np.uint64).astype(fmt.storage)
    values = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 7, size=shape)
    special = rng.random(shape) < special_rate
    values[special] = rng.choice(SPECIALS, size=int(special.sum()))
    dtype = np.float32 if fmt.bits == 32 else fmt.value_dtype
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(values.astype(np.float32).astype(dtype)).view(fmt.storage)


def register_words(rng, fmt_name, threads, words):
    """A register file ``uint32[threads, words]`` of random ``fmt_name`` elements."""
    fmt = get_format(fmt_name)
    if fmt.bits < 8:
        return rng.integers(0, 1 << 32, size=(threads, words), dtype=np.uint64).astype(np.uint32)
    return element_bits(rng, fmt_name, (threads, words * 32 // fmt.bits)).view(np.uint32)


def image(rng, fmt_name, size=1 << 16):
    """A shared-memory image ``uint8[size]`` of random ``fmt_name`` elements."""
    fmt = get_format(fmt_name)
    if fmt.bits < 8:
        return rng.integers(0, 256, size, dtype=np.uint8)
    return element_bits(rng, fmt_name, size * 8 // fmt.bits).view(np.uint8)


def desc(start, lbo, sbo, swizzle):
    return MatrixDescriptor(start_address=start, leading_byte_offset=lbo, stride_byte_offset=sbo,
                            swizzle=swizzle).encode()


#: wgmma forms: (text or (text, immediates), A source, A's descriptor, B's descriptor, image address)
WGMMA_FORMS = [
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", "desc", desc(0, 16, 1024, "128B"),
     desc(8192, 16, 1024, "128B"), 0),
    ("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "reg", None, desc(1024, 16, 512, "64B"), 0),
    (("wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16", dict(imm_scale_a=-1, imm_trans_b=1)), "desc",
     desc(256, 128, 256, "none"), desc(16384, 2048, 1024, "128B"), 1152),
    (("wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16", dict(imm_trans_a=1, imm_scale_b=-1)), "desc",
     desc(2048, 2048, 512, "32B"), desc(24576, 256, 128, "none"), 512),
    ("wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32", "desc", desc(0, 16, 256, "32B"),
     desc(32768, 128, 256, "none"), 0),
    ("wgmma.mma_async.sync.aligned.m64n16k32.f16.e4m3.e5m2", "desc", desc(4096, 16, 1024, "128B"),
     desc(12288, 16, 512, "64B"), 384),
    ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e4m3", "reg", None, desc(0, 16, 1024, "128B"), 0),
    ("wgmma.mma_async.sync.aligned.m64n24k32.s32.s8.u8.satfinite", "reg", None, desc(640, 16, 256, "32B"), 0),
    ("wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.u8", "desc", desc(0, 16, 1024, "128B"),
     desc(8192, 16, 1024, "128B"), 0),
    ("wgmma.mma_async.sync.aligned.m64n24k256.s32.b1.b1.and.popc", "desc", desc(0, 16, 1024, "128B"),
     desc(8192, 16, 256, "32B"), 0),
]


def wgmma_instruction(form):
    text, immediates = form if isinstance(form, tuple) else (form, {})
    inst = fastmma.parse(text)
    return inst.with_operands(**immediates) if immediates else inst


@pytest.mark.parametrize("form", WGMMA_FORMS, ids=lambda f: str(f[0] if isinstance(f[0], str) else f[0][0])[29:])
def test_wgmma_matches_the_unprepared_call(form):
    text, source, a_desc, b_desc, address = form
    inst = wgmma_instruction(text)
    op = fastmma.wgmma.prepare(inst)
    rng = np.random.default_rng(seed("wgmma", str(inst)))
    smem = image(rng, inst.atype)
    if inst.btype != inst.atype:  # B's half of the image holds B's format
        smem[smem.size // 2:] = image(rng, inst.btype, smem.size // 2)
    for step in range(4):  # a k-loop: each D the next C, the descriptors moving along K
        d = register_words(rng, inst.dtype, 128, inst.d_regs) if step == 0 else d
        a = register_words(rng, inst.atype, 128, 4) if source == "reg" else a_desc + 2 * step
        b = b_desc + 2 * step
        scale_d = step != 1
        kw = dict(a_regs=a) if source == "reg" else dict(a_desc=a)
        want = fastmma.wgmma.mma_async(inst, d, b_desc=b, smem=smem, scale_d=scale_d, image_address=address, **kw)
        got = op(d, a, b, smem, scale_d=scale_d, image_address=address)
        assert got.dtype == np.uint32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        d = got


def test_wgmma_reads_a_matrix_descriptor_object_and_a_numpy_integer():
    text = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"
    rng = np.random.default_rng(seed("objects"))
    smem, d = image(rng, "f16"), register_words(rng, "f32", 128, 4)
    a, b = MatrixDescriptor(0, 16, 1024, 0, "128B"), MatrixDescriptor(8192, 16, 1024, 0, "128B")
    want = fastmma.wgmma.mma_async(text, d, a_desc=a, b_desc=b, smem=smem)
    op = fastmma.wgmma.prepare(text)
    np.testing.assert_array_equal(op(d, a, np.uint64(b.encode()), smem), want)
    np.testing.assert_array_equal(op(d.view(np.int32), a.encode(), b, list(smem)), want)  # converted as unprepared


#: (text, A, B, C element types or None for the text's) of mma.sync and wmma forms
WARP_FORMS = [
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
    "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32",
    "mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32.satfinite",
    "mma.sync.aligned.m16n8k64.row.col.s32.s4.u4.s32",
    "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.xor.popc",
    "mma.sync.aligned.m8n8k4.row.col.rn.f64.f64.f64.f64",
    "mma.sync.aligned.m8n8k4.col.row.f32.f16.f16.f32",
    "mma.sync.aligned.m8n8k4.row.col.f16.f16.f16.f16",
    "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32",
    "wmma.mma.sync.aligned.row.col.m32n8k16.f16.f32",
    "wmma.mma.sync.aligned.row.col.m8n32k16.f32.bf16.bf16.f32",
    "wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32",
    "wmma.mma.sync.aligned.row.col.m16n16k16.s32.u8.s8.s32",
    "wmma.mma.sync.aligned.row.col.m8n8k32.s32.s4.s4.s32",
    "wmma.mma.sync.aligned.row.col.m8n8k4.rn.f64.f64.f64.f64",
]


@pytest.mark.parametrize("text", WARP_FORMS, ids=lambda t: t.split(".aligned.")[1])
def test_warp_mma_matches_the_unprepared_call(text):
    inst = fastmma.parse(text)
    module = fastmma.wmma if text.startswith("wmma") else fastmma.mma_sync
    op = module.prepare(text)
    rng = np.random.default_rng(seed("warp", text))
    words = {x: inst.fragment_words(x) for x in "abc"}
    d = register_words(rng, inst.ctype, 32, words["c"])
    for _ in range(4):  # a k-loop: each D the next C
        a = register_words(rng, inst.atype, 32, words["a"])
        b = register_words(rng, inst.btype, 32, words["b"])
        want = module.mma(inst, a, b, d)
        got = op(a, b, d)
        assert got.dtype == np.uint32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        if inst.ctype == inst.dtype:
            d = got


def test_prepared_operands_are_left_as_they_were():
    text = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    rng = np.random.default_rng(seed("untouched"))
    a, b, c = (register_words(rng, t, 32, w) for t, w in (("f16", 4), ("f16", 2), ("f32", 4)))
    copies = [x.copy() for x in (a, b, c)]
    d = fastmma.mma_sync.prepare(text)(a, b, c)
    assert all(np.array_equal(x, y) and x.flags.writeable for x, y in zip((a, b, c), copies))
    assert not np.shares_memory(d, c)


# ------------------------------------------------------------------ recordings

WGMMA_FILES = golden_files("wgmma")[::3] + sorted((GOLDEN / "probes").glob("q5_smem_base_*/*.npz"))
MMA_FILES = (sorted((GOLDEN / "probes").glob("q10_mma*/*.npz"))[::2]
             + sorted((GOLDEN / "probes").glob("q1[14]_mma*/*.npz")))
#: cases of a chain file replayed (a chain of 16 steps is 16 instructions a case)
CHAIN_CASES = 2
WMMA_FILES = golden_files("wmma")[::4]


def prepared(cache, module, text):
    if text not in cache:
        cache[text] = module.prepare(text)
    return cache[text]


@pytest.mark.parametrize("path", WGMMA_FILES, ids=lambda p: p.stem)
def test_wgmma_recording_through_the_prepared_form(path):
    """Each case's chain as :func:`fastmma.conform.replay_wgmma` issues it, through prepared
    instructions: the run-time scale-d on the first, 1 on the others, D of one the C of the
    next, each case's image at its recorded base address."""
    arrays, meta = conform.load_recording(path)
    texts = [t for t in meta["ptx"] if t.startswith("wgmma")]
    ops = [fastmma.wgmma.prepare(t) for t in texts]
    n = len(arrays["mode"])
    a_desc, b_desc = arrays["a_desc"].reshape(n, -1), arrays["b_desc"].reshape(n, -1)
    bases = conform.image_bases(meta, n)
    for i in range(n):
        regs = arrays["c_regs"][i]
        for j, op in enumerate(ops):
            a = arrays["a_regs"][i] if op.instruction.a_source == "reg" else int(a_desc[i, j])
            regs = op(regs, a, int(b_desc[i, j]), arrays["smem"][i], scale_d=bool(arrays["scale_d"][i]) or j > 0,
                      image_address=bases[i])
        np.testing.assert_array_equal(regs, arrays["d_regs"][i], err_msg=f"case {i}")


@pytest.mark.parametrize("path", MMA_FILES, ids=lambda p: f"{p.parent.name[:3]}-{p.stem}")
def test_mma_sync_recording_through_the_prepared_form(path):
    """Each case's ``mma.sync`` (a chain's steps in turn, each D the next C; the first
    :data:`CHAIN_CASES` cases of a chain) on the recorded registers, through one prepared
    instruction."""
    arrays, meta = conform.load_recording(path)
    op = fastmma.mma_sync.prepare(meta["ptx"][0])
    chain = conform.chain_length(meta)
    for i in range(len(arrays["mode"]) if chain == 1 else CHAIN_CASES):
        d = arrays["c_regs"][i]
        steps = zip(arrays["a_regs"][i], arrays["b_regs"][i]) if chain > 1 else [(arrays["a_regs"][i],
                                                                                  arrays["b_regs"][i])]
        for a, b in steps:
            d = op(a, b, d)
        np.testing.assert_array_equal(d, arrays["d_regs"][i], err_msg=f"case {i}")


@pytest.mark.parametrize("path", WMMA_FILES, ids=lambda p: p.stem)
def test_wmma_recording_through_the_prepared_form(path):
    """Each case's ``wmma.mma`` on the recorded A, B and C fragments, against the recorded D
    fragment (a chain's first step's fragments are recorded, not its later ones: single
    instructions only)."""
    arrays, meta = conform.load_recording(path)
    if conform.chain_length(meta) > 1:
        pytest.skip("a chain records only its first step's A and B fragments")
    op = fastmma.wmma.prepare(meta["ptx"][3])
    for i in range(len(arrays["mode"])):
        d = op(arrays["a_frag"][i], arrays["b_frag"][i], arrays["c_frag"][i])
        np.testing.assert_array_equal(d, arrays["d_frag"][i], err_msg=f"case {i}")


# ------------------------------------------------------------------ bad input

WG = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"
A_DESC, B_DESC = desc(0, 16, 1024, "128B"), desc(8192, 16, 1024, "128B")


@pytest.fixture(scope="module")
def wg_args():
    rng = np.random.default_rng(seed("bad"))
    return register_words(rng, "f32", 128, 4), image(rng, "f16")


@pytest.mark.parametrize("edit, error, needle", [
    (dict(d_regs=np.zeros((128, 8), np.uint32)), OperandError, "must have shape (128, 4)"),
    (dict(d_regs=np.zeros((128, 4), np.float64)), OperandError, "must be 32-bit registers"),
    (dict(a=np.zeros((128, 2), np.uint32)), OperandError, "a_regs must have shape (128, 4)"),
    (dict(a="0x40"), OperandError, "a_regs must be 32-bit registers"),
    (dict(b_desc=None), OperandError, "b_desc is required"),
    (dict(b_desc="0x40"), OperandError, "b_desc must be a matrix descriptor (a MatrixDescriptor or its 64-bit"),
    (dict(b_desc=1 << 64), OperandError, "b_desc must be a 64-bit descriptor value"),
    (dict(b_desc=desc(65536 - 512, 16, 1024, "128B")), SharedMemoryBoundsError, "b_desc reads outside"),
    (dict(a=desc(32, 16, 1024, "none") | 0x3FF0), SharedMemoryBoundsError, "a_desc reads outside"),
    (dict(smem=np.zeros(1 << 16, np.int16)), OperandError, "smem must be a 1-D uint8 image"),
    (dict(smem=None), OperandError, "smem (the shared-memory image, uint8[S]) is required"),
    (dict(image_address=8), AlignmentError, "image_address must be 16-byte aligned"),
    (dict(image_address=-16), OperandError, "non-negative"),
    (dict(image_address=16.0), OperandError, "image_address must be an integer"),
    (dict(scale_d="false"), OperandError, "scale_d must be a bool (or 0 / 1)"),
])
def test_wgmma_bad_operand(wg_args, edit, error, needle):
    d, smem = wg_args
    args = dict(d_regs=d, a=A_DESC, b_desc=B_DESC, smem=smem) | {k: v for k, v in edit.items() if k in
                                                                  ("d_regs", "a", "b_desc", "smem")}
    op = fastmma.wgmma.prepare(WG)
    with pytest.raises(error) as info:
        op(*args.values(), **{k: v for k, v in edit.items() if k in ("scale_d", "image_address")})
    assert needle in str(info.value)


def test_wgmma_a_source_named_by_the_text(wg_args):
    d, smem = wg_args
    with_regs = fastmma.wgmma.prepare(WG + " {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, %rd1, p, 1, 1, 1;")
    with pytest.raises(OperandError, match="reads A from registers"):
        with_regs(d, A_DESC, B_DESC, smem)
    with_desc = fastmma.wgmma.prepare(WG + " {%f1, %f2, %f3, %f4}, %rd0, %rd1, p, 1, 1, 0, 0;")
    with pytest.raises(OperandError, match="reads A from a descriptor"):
        with_desc(d, np.zeros((128, 4), np.uint32), B_DESC, smem)
    trans_a = fastmma.wgmma.prepare(fastmma.parse(WG).with_operands(imm_trans_a=1))
    with pytest.raises(InvalidInstructionError, match="imm-trans-a does not exist when A comes from registers"):
        trans_a(d, np.zeros((128, 4), np.uint32), B_DESC, smem)


@pytest.mark.parametrize("module, text, error, needle", [
    ("wgmma", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", InvalidInstructionError,
     "expected a WgmmaMmaAsync instruction"),
    ("wgmma", "wgmma.mma_async.sync.aligned.m64n8k32.f32.f16.f16", InvalidInstructionError, ""),
    ("wgmma", "wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16", InvalidInstructionError,
     "fastmma.wgmma.mma_async_sp on registers"),
    ("mma_sync", "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", InvalidInstructionError,
     "expected a MmaSync instruction"),
    ("mma_sync", "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32", InvalidInstructionError,
     "fastmma.mma_sync.mma_sp on registers"),
    ("wmma", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", InvalidInstructionError,
     "expected a WmmaMma instruction"),
    ("wmma", "wmma.mma.sync.aligned.row.col.m16n16k16.f32", InvalidInstructionError, "wmma.mma needs .dtype.ctype"),
    ("wmma", "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 ({", PTXSyntaxError, "unclosed brace"),
])
def test_prepare_rejects_other_instructions(module, text, error, needle):
    with pytest.raises(error) as info:
        getattr(fastmma, module).prepare(text)
    assert needle in str(info.value)


@pytest.mark.parametrize("which, value, needle", [
    (0, np.zeros((32, 2), np.uint32), "a must have shape (32, 4)"),
    (1, np.zeros((32, 2, 1), np.uint32), "b must have shape (32, 2)"),
    (2, np.zeros((32, 4), np.uint16), "c must be 32-bit registers"),
    (2, "registers", "c must be 32-bit registers"),
])
def test_warp_mma_bad_fragment(which, value, needle):
    op = fastmma.mma_sync.prepare("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    frags = [np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.uint32)]
    frags[which] = value
    with pytest.raises(OperandError) as info:
        op(*frags)
    assert needle in str(info.value)


WMMA = "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32"


def test_prepared_ops_name_their_instruction():
    text = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    assert repr(fastmma.mma_sync.prepare(text)) == f"fastmma.mma_sync.prepare({text!r})"
    assert repr(fastmma.wmma.prepare(WMMA)) == f"fastmma.wmma.prepare({WMMA!r})"
    assert fastmma.wgmma.prepare(WG).instruction == fastmma.parse(WG)
