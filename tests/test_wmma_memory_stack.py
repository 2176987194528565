"""fastmma.wmma.load_stack and store_stack: one wmma.load or wmma.store for a stack of warps.

Each warp's fragment must be bit for bit what the H100 loaded (every single-instruction wmma
recording, its cases as one stack of memory images with their own strides), and what one
``wmma.load`` per warp gives; each stored image what the H100 left in memory and what one
``wmma.store`` per warp, in stack order, leaves.  Bad stacks are refused before memory is
touched, and the message names the warp at fault.
"""

import math
import warnings

import numpy as np
import pytest

from conftest import GOLDEN, recordings, seed
from fastmma import parse, wmma
from fastmma.conform import chain_length, load_recording
from fastmma.errors import AlignmentError, InvalidInstructionError, MemoryBoundsError, OperandError
from fastmma.formats import get_format
from fastmma.layout.wmma_fragments import fragment_layout
from fastmma.layout.wmma_memory import default_stride, matrix_dims, required_alignment

#: The wmma recordings of one instruction per case (the k-loop probes chain 16).
WMMA_RECORDINGS = recordings("wmma", lambda meta: chain_length(meta) == 1)


def _opcode(statement: str) -> str:
    return statement.split(" ")[0]


@pytest.mark.parametrize("path", WMMA_RECORDINGS, ids=lambda p: str(p.relative_to(GOLDEN)))
def test_a_recording_loaded_and_stored_as_one_stack(path):
    """Every case of the file at once: its own image and stride for each load and store."""
    arrays, meta = load_recording(path)
    loads = [_opcode(t) for t in meta["ptx"] if t.startswith("wmma.load")]
    store = next(_opcode(t) for t in meta["ptx"] if t.startswith("wmma.store"))
    for text in loads:
        name = parse(text).matrix
        frags = wmma.load_stack(text, arrays[f"{name}_mem"], 0, arrays[f"ld{name}"])
        mismatched = np.flatnonzero((frags != arrays[f"{name}_frag"]).any(axis=(1, 2)))
        assert mismatched.size == 0, f"{name}: cases {mismatched.tolist()} differ from the H100's registers"
    mem = np.full_like(arrays["d_mem"], int(meta["d_prefill_byte"], 16))
    wmma.store_stack(store, mem, 0, arrays["d_frag"], arrays["ldd"])
    mismatched = np.flatnonzero((mem != arrays["d_mem"]).any(axis=1))
    assert mismatched.size == 0, f"cases {mismatched.tolist()} differ from the H100's memory"


#: loads of every element width and both layouts, each matrix
LOADS = [
    "wmma.load.a.sync.aligned.row.m16n16k16.f16",
    "wmma.load.b.sync.aligned.col.m32n8k16.bf16",
    "wmma.load.a.sync.aligned.col.m16n16k8.tf32",
    "wmma.load.c.sync.aligned.col.m8n32k16.f32",
    "wmma.load.c.sync.aligned.row.m16n16k16.f16",
    "wmma.load.b.sync.aligned.col.m16n16k16.u8",
    "wmma.load.a.sync.aligned.row.m8n8k32.s4",
    "wmma.load.b.sync.aligned.col.m8n8k32.u4",
    "wmma.load.a.sync.aligned.row.m8n8k128.b1",
    "wmma.load.b.sync.aligned.row.m8n8k4.f64",
    "wmma.load.c.sync.aligned.col.m8n8k4.f64",
]

STORES = [
    "wmma.store.d.sync.aligned.row.m16n16k16.f32",
    "wmma.store.d.sync.aligned.col.m32n8k16.f16",
    "wmma.store.d.sync.aligned.col.m8n32k16.s32",
    "wmma.store.d.sync.aligned.row.m8n8k4.f64",
]


def _accesses(rng, text, count, mem_bytes):
    """``count`` valid (offset, stride) pairs for ``text`` in ``mem_bytes`` of memory: strides
    from the leading dimension up, offsets anywhere the matrix fits and is aligned."""
    inst = parse(text)
    name, shape, typ = getattr(inst, "matrix", "d"), str(inst.shape), inst.type
    addr_align, stride_align = required_alignment(name, shape, typ)
    bits = get_format(typ).bits
    step = 8 * stride_align // math.gcd(8 * stride_align, bits)
    lead = default_stride(name, shape, inst.layout)
    rows, cols = matrix_dims(name, shape)
    lines = cols if inst.layout == "col" else rows
    strides = (-(-lead // step) + rng.integers(0, 4, count)) * step
    spans = -(-((lines - 1) * strides + lead) * bits // 8)
    offsets = np.array([rng.integers(0, (mem_bytes - s) // addr_align + 1) * addr_align for s in spans])
    return offsets, strides


@pytest.mark.parametrize("text", LOADS)
def test_a_load_stack_gives_each_warp_what_one_load_gives(text):
    rng = np.random.default_rng(seed(text))
    mem = rng.integers(0, 256, 8192, dtype=np.uint8)
    offsets, strides = _accesses(rng, text, 12, mem.size)
    frags = wmma.load_stack(text, mem, offsets, strides)
    assert frags.shape[:2] == (12, 32) and frags.dtype == np.uint32
    for w in range(12):
        assert np.array_equal(frags[w], wmma.load(text, mem, int(offsets[w]), int(strides[w]))), f"warp {w}"


def test_load_stack_broadcasts_images_offsets_and_strides():
    """A (2, 3) stack: an image per row of it, offsets per warp, one stride for all."""
    text = LOADS[0]
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (2, 1, 4096), dtype=np.uint8)
    offsets = np.array([[0, 512, 1024], [64, 2048, 3072]])
    frags = wmma.load_stack(text, images, offsets, 24)
    assert frags.shape == (2, 3, 32, 8)
    for i in range(2):
        for j in range(3):
            assert np.array_equal(frags[i, j], wmma.load(text, images[i, 0], int(offsets[i, j]), 24))
    one = wmma.load_stack(text, images[0, 0], 512)  # no stack at all: one warp
    assert np.array_equal(one, wmma.load(text, images[0, 0], 512))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stack of one image, its stride broadcast: no view of a broadcast
        assert np.array_equal(wmma.load_stack(text, images[0], [512], 24)[0], wmma.load(text, images[0, 0], 512, 24))


@pytest.mark.parametrize("text", STORES)
def test_a_store_stack_leaves_what_stores_in_stack_order_leave(text):
    """Warps 3 and 7 store at warp 1's address: the last of them wins, as in one store after
    another; the bytes no warp stores keep their value."""
    inst = parse(text)
    rng = np.random.default_rng(seed(text))
    mem = rng.integers(0, 256, 8192, dtype=np.uint8)
    offsets, strides = _accesses(rng, text, 10, mem.size)
    offsets[[3, 7]], strides[[3, 7]] = offsets[1], strides[1]
    words = fragment_layout("d", str(inst.shape), inst.type, inst.layout).words
    d = rng.integers(0, 2**32, (10, 32, words), dtype=np.uint32)
    expected = mem.copy()
    for w in range(10):
        wmma.store(text, expected, int(offsets[w]), d[w], int(strides[w]))
    wmma.store_stack(text, mem, offsets, d, strides)
    assert np.array_equal(mem, expected)


def test_store_stack_into_an_image_per_warp_and_a_broadcast_fragment():
    text = STORES[0]
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (4, 2048), dtype=np.uint8)
    d = rng.integers(0, 2**32, (32, 8), dtype=np.uint32)
    expected = images.copy()
    for w, offset in enumerate((0, 32, 64, 1024)):
        wmma.store(text, expected[w], offset, d)
    wmma.store_stack(text, images, np.array([0, 32, 64, 1024]), d)
    assert np.array_equal(images, expected)


def test_store_stack_writes_through_a_strided_view_of_images():
    """Images that are not one block of memory (every other row of a larger array)."""
    text = STORES[0]
    rng = np.random.default_rng(4)
    backing = rng.integers(0, 256, (6, 1024), dtype=np.uint8)
    expected = backing.copy()
    d = rng.integers(0, 2**32, (3, 32, 8), dtype=np.uint32)
    for w in range(3):
        wmma.store(text, expected[2 * w], 0, d[w])
    wmma.store_stack(text, backing[::2], 0, d)
    assert np.array_equal(backing, expected)


def test_an_empty_stack():
    mem = np.zeros(1024, np.uint8)
    assert wmma.load_stack(LOADS[0], mem, np.zeros(0, np.int64)).shape == (0, 32, 8)
    wmma.store_stack(STORES[0], mem, np.zeros(0, np.int64), np.zeros((0, 32, 8), np.uint32))
    assert not mem.any()


@pytest.mark.parametrize("offsets,strides,error,needle", [
    ([0, 512, 100], 16, AlignmentError, r"offset \(address\) at stack index \(2,\) .* multiple of 32 bytes .*; got 100"),
    ([0, 512, 4096 - 256], [16, 16, 24], MemoryBoundsError, r"at stack index \(2,\) spans bytes \[3840, 4592\)"),
    ([0, 512, 1024], [16, 12, 16], OperandError, r"ld \(stride\) at stack index \(1,\) .* >= its leading dimension 16"),
    ([0, 512, 1024], [16, 16, 20], AlignmentError, r"ld \(stride\) at stack index \(2,\) .* multiple of 8 elements"),
    ([-32, 0, 32], 16, MemoryBoundsError, r"at stack index \(0,\) spans bytes \[-32,"),
    ([0, 2**62], 16, MemoryBoundsError, r"at stack index \(1,\) spans bytes \[4611686018427387904,"),
    ([0.0, 512.0], 16, OperandError, r"offset must be an integer"),
    ([0, 512], [16.0, 16.0], OperandError, r"ld \(stride, in elements\) must be an integer"),
    ([0, 512], [16, 16, 16], OperandError, r"offset \(2,\) and ld \(stride\) \(3,\) must broadcast"),
])
def test_bad_stacks_are_refused_and_name_the_warp(offsets, strides, error, needle):
    mem = np.zeros(4096, np.uint8)
    with pytest.raises(error, match=needle):
        wmma.load_stack(LOADS[0], mem, np.array(offsets), np.array(strides))
    d = np.full((len(offsets), 32, 4), 0xFFFFFFFF, np.uint32)
    text = "wmma.store.d.sync.aligned.row.m16n16k16.f16"  # the same alignments as the load, but 16 bytes
    with pytest.raises((error, OperandError)):
        wmma.store_stack(text, mem, np.array(offsets), d, np.array(strides))
    assert not mem.any(), "a refused stack must not write any warp's matrix"


def test_bad_memory_and_fragments_are_refused():
    mem = np.zeros(4096, np.uint8)
    text = "wmma.store.d.sync.aligned.row.m16n16k16.f32"
    with pytest.raises(OperandError, match=r"the stacks of offsets \(3,\).* images \(2,\)"):
        wmma.load_stack(LOADS[0], np.zeros((2, 4096), np.uint8), np.array([0, 32, 64]))
    with pytest.raises(OperandError, match=r"mem must be an array of dtype uint8 \[\.\.\., bytes\]"):
        wmma.load_stack(LOADS[0], mem.view(np.uint16), 0)
    with pytest.raises(OperandError, match="mem must be writable"):
        mem.flags.writeable = False
        wmma.store_stack(text, mem, 0, np.zeros((32, 8), np.uint32))
    mem = np.zeros(4096, np.uint8)
    with pytest.raises(OperandError, match=r"d must have shape \(\.\.\., 32, 8\)"):
        wmma.store_stack(text, mem, 0, np.zeros((2, 32, 4), np.uint32))
    with pytest.raises(OperandError, match=r"fragments \(2,\) must broadcast"):
        wmma.store_stack(text, mem, np.array([0, 32, 64]), np.zeros((2, 32, 8), np.uint32))
    with pytest.raises(InvalidInstructionError, match="WmmaLoad"):
        wmma.load_stack(text, mem, 0)
    assert not mem.any()
