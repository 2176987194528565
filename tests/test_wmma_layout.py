"""wmma memory images and fragment registers against the H100 recordings in tests/golden/wmma.

The expected values are the recordings themselves (memory images and raw registers as the
GPU held them) or literals written out by hand; none is computed by the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastmma.errors import AlignmentError, MemoryBoundsError, OperandError
from fastmma.layout.wmma_fragments import fragment_layout, pack_fragment, unpack_fragment
from fastmma.layout.wmma_memory import (
    default_stride,
    load_matrix,
    load_wmma_matrix,
    store_matrix,
    store_wmma_matrix,
)

GOLDEN = Path(__file__).parent / "golden" / "wmma"
FILES = sorted(GOLDEN.glob("*.npz"))
TYPE_KEY = {"a": "atype", "b": "btype", "c": "ctype", "d": "dtype"}
LAYOUT_KEY = {"a": "alayout", "b": "blayout", "c": "clayout", "d": "dlayout"}


def _open(path: Path):
    data = np.load(path)
    qual = json.loads(bytes(data["meta"]).decode())["qualifiers"]
    return data, qual


def test_recordings_present():
    assert len(FILES) >= 100, f"expected the wmma recordings in {GOLDEN}"


# --------------------------------------------------------------------------------------------
# Every recording: memory -> logical matrix -> registers, and registers -> memory.


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_loaded_matrices_match_recorded_fragments(path):
    data, q = _open(path)
    for m in "abc":
        etype, mlayout = q[TYPE_KEY[m]], q[LAYOUT_KEY[m]]
        frag_layout = fragment_layout(m, q["shape"], etype, mlayout)
        recorded = data[f"{m}_frag"]
        logical = np.stack([
            load_wmma_matrix(data[f"{m}_mem"][i], 0, m, q["shape"], etype, mlayout,
                             int(data[f"ld{m}"][i]))
            for i in range(recorded.shape[0])
        ])
        for i in range(recorded.shape[0]):
            assert np.array_equal(unpack_fragment(recorded[i], frag_layout), logical[i]), (
                f"{path.stem}: matrix {m}, case {i}: unpack({m}_frag) != {m} read from {m}_mem")
            packed = pack_fragment(logical[i], frag_layout)
            assert packed.dtype == np.uint32
            assert np.array_equal(packed, recorded[i]), (
                f"{path.stem}: matrix {m}, case {i}: pack({m} from {m}_mem) != {m}_frag")
        # the batched forms agree with the recordings as well
        assert np.array_equal(pack_fragment(logical, frag_layout), recorded)
        assert np.array_equal(unpack_fragment(recorded, frag_layout), logical)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_stored_d_matches_recorded_memory(path):
    data, q = _open(path)
    frag_layout = fragment_layout("d", q["shape"], q["dtype"], q["dlayout"])
    for i in range(data["d_frag"].shape[0]):
        d = unpack_fragment(data["d_frag"][i], frag_layout)
        buf = np.full(data["d_mem"].shape[1], 0xA5, dtype=np.uint8)
        store_wmma_matrix(buf, 0, d, q["shape"], q["dtype"], q["dlayout"], int(data["ldd"][i]))
        assert np.array_equal(buf, data["d_mem"][i]), f"{path.stem}: case {i}: d_mem differs"


# --------------------------------------------------------------------------------------------
# Hand-built memory images.


def test_load_row_f16_little_endian_with_stride():
    mem = np.arange(64, dtype=np.uint8)
    got = load_matrix(mem, 16, 2, 3, "row", 4, "f16")
    assert got.dtype == np.uint16
    assert np.array_equal(got, [[0x1110, 0x1312, 0x1514], [0x1918, 0x1B1A, 0x1D1C]])


def test_load_col_u8():
    mem = np.arange(16, dtype=np.uint8)
    assert np.array_equal(load_matrix(mem, 0, 2, 3, "col", 2, "u8"), [[0, 2, 4], [1, 3, 5]])
    assert np.array_equal(load_matrix(mem, 0, 2, 3, "col", 4, "u8"), [[0, 4, 8], [1, 5, 9]])


def test_load_f64_little_endian():
    mem = np.arange(1, 17, dtype=np.uint8)
    got = load_matrix(mem, 0, 1, 2, "row", 2, "f64")
    assert got.dtype == np.uint64
    assert got.tolist() == [[0x0807060504030201, 0x100F0E0D0C0B0A09]]


def test_load_s4_low_nibble_first():
    mem = np.array([0x21, 0x43, 0x65, 0x87], dtype=np.uint8)
    assert load_matrix(mem, 0, 1, 8, "row", 8, "s4").tolist() == [[1, 2, 3, 4, 5, 6, 7, 8]]
    assert load_matrix(mem, 0, 4, 2, "col", 4, "u4").tolist() == [[1, 5], [2, 6], [3, 7], [4, 8]]


def test_load_b1_lsb_first():
    mem = np.array([0b00000101, 0x80], dtype=np.uint8)
    assert load_matrix(mem, 0, 1, 16, "row", 16, "b1").tolist() == [
        [1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]]


def test_store_col_f16_leaves_padding():
    buf = np.full(12, 0xA5, dtype=np.uint8)
    bits = np.array([[0x0102, 0x0506], [0x0304, 0x0708]], np.uint16)
    store_matrix(buf, 0, bits, "col", 3, "f16")
    assert buf.tolist() == [0x02, 0x01, 0x04, 0x03, 0xA5, 0xA5, 0x06, 0x05, 0x08, 0x07, 0xA5, 0xA5]


def test_store_s4_keeps_other_nibble():
    buf = np.full(4, 0xA5, dtype=np.uint8)
    store_matrix(buf, 0, np.array([[3, 7, 9]], np.uint8), "row", 4, "s4")
    assert buf.tolist() == [0x73, 0xA9, 0xA5, 0xA5]


def test_store_b1_keeps_other_bits():
    buf = np.full(3, 0xA5, dtype=np.uint8)
    store_matrix(buf, 1, np.array([[0, 1, 0]], np.uint8), "row", 8, "b1")
    assert buf.tolist() == [0xA5, 0xA2, 0xA5]


def test_default_strides():
    assert default_stride("a", "m8n32k16", "row") == 16
    assert default_stride("a", "m8n32k16", "col") == 8
    assert default_stride("b", "m32n8k16", "row") == 8
    assert default_stride("b", "m32n8k16", "col") == 16
    assert default_stride("c", "m32n8k16", "col") == 32
    assert default_stride("a", "m8n8k128", "row") == 128
    assert default_stride("b", "m8n8k4", "col") == 4
    assert default_stride("a", "m16n16k8", "row") == 8


# --------------------------------------------------------------------------------------------
# Hand-picked fragment slots (read off the recordings), and the duplicate copies.


@pytest.mark.parametrize("matrix,shape,etype,lane,expected", [
    ("a", "m16n16k16", "f16", 5,
     [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)] * 2),
    ("b", "m16n16k16", "s8", 1, [(4, 0), (5, 0), (6, 0), (7, 0), (4, 8), (5, 8), (6, 8), (7, 8)]),
    ("c", "m8n32k16", "f32", 1,
     [(2, 0), (3, 0), (2, 8), (3, 8), (2, 16), (3, 16), (2, 24), (3, 24)]),
    ("a", "m16n16k8", "tf32", 4, [(1, 0), (9, 0), (1, 4), (9, 4)]),
    ("b", "m8n8k4", "f64", 5, [(1, 1)]),
    ("d", "m8n8k32", "s32", 31, [(7, 6), (7, 7)]),
])
def test_fragment_slots(matrix, shape, etype, lane, expected):
    lay = fragment_layout(matrix, shape, etype, "row")
    got = [(int(e) // lay.cols, int(e) % lay.cols) for e in lay.index[lane]]
    assert got == expected


def test_unpack_reads_first_copy():
    lay = fragment_layout("a", "m16n16k16", "f16", "row")
    assert lay.copies == 2
    bits = np.arange(256, dtype=np.uint16).reshape(16, 16) + 0x3C00
    words = pack_fragment(bits, lay)
    assert np.array_equal(words[:, 4:], words[:, :4])
    second_spoiled = words.copy()
    second_spoiled[:, 4:] = 0
    assert np.array_equal(unpack_fragment(second_spoiled, lay), bits)
    first_spoiled = words.copy()
    first_spoiled[:, :4] = 0
    assert not np.array_equal(unpack_fragment(first_spoiled, lay), bits)


@pytest.mark.parametrize("matrix,shape,etype", [("a", "m16n16k16", "f16"), ("b", "m8n8k32", "s4"),
                                                 ("a", "m8n8k128", "b1"), ("c", "m8n8k4", "f64")])
def test_empty_stacks_of_fragments(matrix, shape, etype):
    """A stack of no matrices packs into a stack of no fragments and back, with the shapes of
    a longer stack (a reshape with -1 had failed on no elements)."""
    lay = fragment_layout(matrix, shape, etype, "row")
    storage = {"f16": np.uint16, "f64": np.uint64}.get(etype, np.uint8)
    assert pack_fragment(np.zeros((0, lay.rows, lay.cols), storage), lay).shape == (0, 32, lay.words)
    assert unpack_fragment(np.zeros((3, 0, 32, lay.words), np.uint32), lay).shape == (3, 0, lay.rows, lay.cols)


def test_fragment_errors():
    with pytest.raises(OperandError, match="element type"):
        fragment_layout("a", "m8n8k4", "f16", "row")
    with pytest.raises(OperandError, match="shape"):
        fragment_layout("a", "m16n8k16", "f16", "row")
    with pytest.raises(OperandError, match="layout"):
        fragment_layout("a", "m16n16k16", "f16", "diag")
    lay = fragment_layout("c", "m16n16k16", "f32", "row")
    with pytest.raises(OperandError, match="words"):
        unpack_fragment(np.zeros((32, 4), np.uint32), lay)
    with pytest.raises(OperandError, match="bits"):
        pack_fragment(np.zeros((16, 16), np.float32), lay)


# --------------------------------------------------------------------------------------------
# Errors: address and stride alignment, stride too small, out of bounds.

BIG = 1 << 14


@pytest.mark.parametrize("matrix,shape,etype,layout,bad,good", [
    ("a", "m16n16k16", "f16", "row", 16, 32),
    ("a", "m16n16k16", "s8", "row", 4, 8),
    ("a", "m8n32k16", "u8", "col", 2, 4),
    ("c", "m16n16k16", "f32", "row", 16, 32),
    ("c", "m32n8k16", "f16", "col", 8, 16),
    ("b", "m16n16k8", "tf32", "col", 8, 16),
    ("a", "m8n8k4", "f64", "row", 4, 8),
    ("c", "m8n8k4", "f64", "col", 8, 16),
    ("a", "m8n8k32", "s4", "row", 2, 4),
    ("b", "m8n8k128", "b1", "col", 2, 4),
    ("c", "m8n8k128", "s32", "row", 4, 8),
])
def test_address_alignment(matrix, shape, etype, layout, bad, good):
    mem = np.zeros(BIG, np.uint8)
    with pytest.raises(AlignmentError, match="offset"):
        load_wmma_matrix(mem, bad, matrix, shape, etype, layout)
    load_wmma_matrix(mem, good, matrix, shape, etype, layout)


@pytest.mark.parametrize("matrix,shape,etype,layout,bad,good", [
    ("a", "m16n16k16", "f16", "row", 20, 24),
    ("a", "m16n16k16", "s8", "row", 20, 24),
    ("b", "m8n32k16", "bf16", "row", 36, 40),
    ("c", "m16n16k16", "f32", "row", 18, 20),
    ("c", "m16n16k16", "s32", "col", 17, 20),
    ("b", "m16n16k8", "tf32", "col", 10, 12),
    ("c", "m8n8k4", "f64", "row", 9, 10),
    ("a", "m8n8k32", "s4", "row", 36, 40),
    ("b", "m8n8k32", "u4", "col", 33, 40),
    ("b", "m8n8k128", "b1", "col", 136, 160),
])
def test_stride_alignment(matrix, shape, etype, layout, bad, good):
    mem = np.zeros(BIG, np.uint8)
    with pytest.raises(AlignmentError, match="ld"):
        load_wmma_matrix(mem, 0, matrix, shape, etype, layout, bad)
    load_wmma_matrix(mem, 0, matrix, shape, etype, layout, good)


def test_isa_strict_alignment():
    mem = np.zeros(BIG, np.uint8)
    # 32-byte fragment: the address must be 32-byte aligned (the ISA's rule, in both modes);
    # the ISA's literal rule wants 32-byte lines too, where the H100 needs 16
    load_wmma_matrix(mem, 32, "a", "m16n16k16", "f16", "row", 24)
    with pytest.raises(AlignmentError, match="offset"):
        load_wmma_matrix(mem, 16, "a", "m16n16k16", "f16", "row", 24)
    with pytest.raises(AlignmentError, match="offset"):
        load_wmma_matrix(mem, 16, "a", "m16n16k16", "f16", "row", 16, isa_strict=True)
    with pytest.raises(AlignmentError, match="ld"):
        load_wmma_matrix(mem, 0, "a", "m16n16k16", "f16", "row", 24, isa_strict=True)
    load_wmma_matrix(mem, 32, "a", "m16n16k16", "f16", "row", 32, isa_strict=True)
    # the literal rule rejects even the default stride here (8 x .f16 = 16 bytes)
    with pytest.raises(AlignmentError, match="ld"):
        load_wmma_matrix(mem, 0, "a", "m8n32k16", "f16", "col", isa_strict=True)


@pytest.mark.parametrize("matrix,shape,etype,layout", [
    ("a", "m16n16k16", "f16", "row"),
    ("b", "m32n8k16", "s8", "col"),
    ("c", "m8n32k16", "f32", "col"),
    ("a", "m8n8k4", "f64", "col"),
    ("a", "m8n8k32", "s4", "row"),
    ("b", "m8n8k128", "b1", "col"),
])
def test_stride_below_default(matrix, shape, etype, layout):
    mem = np.zeros(BIG, np.uint8)
    ld = default_stride(matrix, shape, layout)
    load_wmma_matrix(mem, 0, matrix, shape, etype, layout, ld)
    for bad in (ld - 1, 0, -ld):
        with pytest.raises(OperandError, match="ld"):
            load_wmma_matrix(mem, 0, matrix, shape, etype, layout, bad)


@pytest.mark.parametrize("matrix,shape,etype,layout,ld,span", [
    ("a", "m16n16k16", "f16", "row", 16, 512),
    ("a", "m16n16k16", "f16", "col", 24, 15 * 48 + 32),
    ("c", "m8n32k16", "f32", "row", 40, 7 * 160 + 128),
    ("a", "m8n8k32", "s4", "row", 64, 7 * 32 + 16),
    ("b", "m8n8k128", "b1", "col", 256, 7 * 32 + 16),
    ("c", "m8n8k4", "f64", "col", 10, 7 * 80 + 64),
])
def test_bounds(matrix, shape, etype, layout, ld, span):
    load_wmma_matrix(np.zeros(span, np.uint8), 0, matrix, shape, etype, layout, ld)
    with pytest.raises(MemoryBoundsError, match=str(span)):
        load_wmma_matrix(np.zeros(span - 1, np.uint8), 0, matrix, shape, etype, layout, ld)
    with pytest.raises(MemoryBoundsError, match="offset"):
        load_wmma_matrix(np.zeros(BIG, np.uint8), -32, matrix, shape, etype, layout, ld)
    with pytest.raises(MemoryBoundsError):
        load_wmma_matrix(np.zeros(span + 16, np.uint8), 32, matrix, shape, etype, layout, ld)


def test_failed_store_leaves_memory_untouched():
    d = np.ones((16, 16), np.uint32)
    for kwargs, exc in [
        (dict(offset=8, ld=16), AlignmentError),
        (dict(offset=0, ld=18), AlignmentError),
        (dict(offset=0, ld=15), OperandError),
        (dict(offset=64, ld=16), MemoryBoundsError),
    ]:
        buf = np.full(1024, 0xA5, np.uint8)
        with pytest.raises(exc):
            store_wmma_matrix(buf, kwargs["offset"], d, "m16n16k16", "f32", "row", kwargs["ld"])
        assert (buf == 0xA5).all(), kwargs


def test_operand_errors():
    mem = np.zeros(BIG, np.uint8)
    with pytest.raises(OperandError, match="layout"):
        load_matrix(mem, 0, 16, 16, "diag", 16, "f16")
    with pytest.raises(OperandError, match="mem"):
        load_matrix(mem.view(np.uint16), 0, 16, 16, "row", 16, "f16")
    with pytest.raises(OperandError, match="bits"):
        store_matrix(mem, 0, np.zeros((4, 4), np.uint32), "row", 4, "f16")
    with pytest.raises(OperandError, match="bits"):
        store_matrix(mem, 0, np.full((1, 2), 16, np.uint8), "row", 2, "u4")
    with pytest.raises(OperandError, match="shape"):
        store_wmma_matrix(mem, 0, np.zeros((8, 8), np.uint32), "m16n16k16", "f32", "row")
    with pytest.raises(OperandError, match="element type"):
        load_wmma_matrix(mem, 0, "a", "m16n16k16", "tf32", "row")
