"""fastmma.wmma.mma_stack: one wmma.mma for a stack of warps in one call.

Each warp's D fragment must be bit for bit what the H100 recorded (every single-instruction
wmma recording, its cases replayed as one stack from their recorded A, B and C fragments)
and what one ``wmma.mma`` call per warp gives (random fragments of every type, specials
included).
"""

import numpy as np
import pytest

from conftest import GOLDEN, recordings, seed
from fastmma import parse, wmma
from fastmma.conform import chain_length, load_recording
from fastmma.errors import InvalidInstructionError, OperandError
from fastmma.formats import to_bits
from fastmma.layout.wmma_fragments import fragment_layout, pack_fragment
from test_wmma_api import random_values


#: The wmma recordings of one instruction per case (the k-loop probes chain 16).
WMMA_RECORDINGS = recordings("wmma", lambda meta: chain_length(meta) == 1)


def test_the_wmma_recordings_are_found():
    assert len(WMMA_RECORDINGS) >= 126


@pytest.mark.parametrize("path", WMMA_RECORDINGS, ids=lambda p: str(p.relative_to(GOLDEN)))
def test_a_recording_replayed_as_one_stack(path):
    """Every case of the file at once, from the fragments the H100 loaded."""
    arrays, meta = load_recording(path)
    text = next(t for t in meta["ptx"] if t.startswith("wmma.mma"))
    d = wmma.mma_stack(text, arrays["a_frag"], arrays["b_frag"], arrays["c_frag"])
    assert d.shape == arrays["d_frag"].shape
    mismatched = np.flatnonzero((d != arrays["d_frag"]).any(axis=(1, 2)))
    assert mismatched.size == 0, f"cases {mismatched.tolist()} differ from the H100's bits"


#: (instruction, A/B type, C type): every numerics rule of wmma.mma
CASES = [
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", "f16", "f32"),
    ("wmma.mma.sync.aligned.col.row.m32n8k16.f16.f16", "f16", "f16"),
    ("wmma.mma.sync.aligned.row.row.m8n32k16.f16.f32", "f16", "f32"),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.bf16.bf16.f32", "bf16", "f32"),
    ("wmma.mma.sync.aligned.col.col.m16n16k8.f32.tf32.tf32.f32", "tf32", "f32"),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.s32.s8.s8.s32.satfinite", "s8", "s32"),
    ("wmma.mma.sync.aligned.row.col.m32n8k16.s32.u8.u8.s32", "u8", "s32"),
    ("wmma.mma.sync.aligned.row.col.m8n8k32.s32.s4.s4.s32", "s4", "s32"),
    ("wmma.mma.sync.aligned.row.col.m8n8k32.s32.u4.u4.s32.satfinite", "u4", "s32"),
    ("wmma.mma.xor.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32", "b1", "s32"),
    ("wmma.mma.and.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32", "b1", "s32"),
    ("wmma.mma.sync.aligned.row.col.m8n8k4.rn.f64.f64.f64.f64", "f64", "f64"),
    ("wmma.mma.sync.aligned.col.col.m8n8k4.rm.f64.f64.f64.f64", "f64", "f64"),
]

SPECIALS = {"f16": np.float16, "bf16": None, "tf32": np.float32, "f32": np.float32, "f64": np.float64}


def _matrix(rng, typ, shape):
    """Random values of ``typ``, floats with infs, NaNs, zeros and subnormals sprinkled in."""
    values = random_values(rng, typ, shape)
    if typ in ("f16", "bf16", "tf32", "f32", "f64"):
        where = rng.random(shape) < 0.03
        specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40], np.float64)
        values[where] = rng.choice(specials, where.sum()).astype(values.dtype)
    return values


def _fragments(rng, inst, typ, ctype, count):
    """A, B and C fragments of ``count`` warps, each from matrices of its own."""
    shape = str(inst.shape)
    m, n, k = inst.shape.m, inst.shape.n, inst.shape.k
    frags = []
    for name, elem, dims in (("a", typ, (m, k)), ("b", typ, (k, n)), ("c", ctype, (m, n))):
        layout = fragment_layout(name, shape, elem)
        frags.append(np.stack([pack_fragment(to_bits(_matrix(rng, elem, dims), elem), layout)
                               for _ in range(count)]))
    return frags


@pytest.mark.parametrize("text,typ,ctype", CASES, ids=[c[0].split("aligned.")[1] for c in CASES])
def test_a_stack_gives_each_warp_what_one_call_gives(text, typ, ctype):
    inst = parse(text)
    rng = np.random.default_rng(seed(text))
    a, b, c = _fragments(rng, inst, typ, ctype, 9)
    d = wmma.mma_stack(text, a, b, c)
    assert d.shape == (9, 32, fragment_layout("d", str(inst.shape), inst.dtype).words) and d.dtype == np.uint32
    for w in range(9):
        assert np.array_equal(d[w], wmma.mma(text, a[w], b[w], c[w])), f"warp {w}"


def test_stack_dimensions_broadcast():
    """One B fragment for a (2, 3) stack of A, C one per column of the stack."""
    text, typ, ctype = CASES[0]
    inst = parse(text)
    rng = np.random.default_rng(3)
    a, b, c = _fragments(rng, inst, typ, ctype, 6)
    a = a.reshape((2, 3) + a.shape[1:])
    d = wmma.mma_stack(text, a, b[0], c[:3])
    assert d.shape == (2, 3, 32, 8)  # f32 D: eight registers
    for i in range(2):
        for j in range(3):
            assert np.array_equal(d[i, j], wmma.mma(text, a[i, j], b[0], c[j]))
    assert wmma.mma_stack(text, a[0, 0], b[0], c[0]).shape == (32, 8)  # no stack: one warp


def test_an_empty_stack():
    text = CASES[0][0]
    a = np.zeros((0, 32, 8), np.uint32)
    assert wmma.mma_stack(text, a, a, a).shape == (0, 32, 8)


@pytest.mark.parametrize("args,error,needle", [
    (((2, 32, 8), (3, 32, 8), (2, 32, 8)), OperandError, r"stack dimensions .* must broadcast together"),
    (((2, 32, 8), (2, 32, 4), (2, 32, 8)), OperandError, r"b must have shape \(\.\.\., 32, 8\)"),
    (((2, 16, 8), (2, 32, 8), (2, 32, 8)), OperandError, r"a must have shape \(\.\.\., 32, 8\)"),
])
def test_bad_stacks_are_refused(args, error, needle):
    text = CASES[0][0]
    with pytest.raises(error, match=needle):
        wmma.mma_stack(text, *(np.zeros(s, np.uint32) for s in args))


def test_bad_fragment_types_and_instructions_are_refused():
    a = np.zeros((2, 32, 8), np.uint32)
    with pytest.raises(OperandError, match="32-bit registers"):
        wmma.mma_stack(CASES[0][0], a.astype(np.float64), a, a)
    with pytest.raises(InvalidInstructionError, match="WmmaMma"):
        wmma.mma_stack("wmma.load.a.sync.aligned.row.m16n16k16.f16", a, a, a)
