"""``movmatrix`` (fastmma.ldmatrix.movmatrix): the ISA's element map written out here, the sm_90
recording (tests/golden/probes/q13_movmatrix), its link to ldmatrix's .trans, stacks, the
parser's table, errors and the PTX interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastmma import ldmatrix as lm
from fastmma import ptx
from fastmma.conform import check_file
from fastmma.errors import InvalidInstructionError, OperandError
from fastmma.isa import Movmatrix, parse

Q13 = Path(__file__).parent / "golden" / "probes" / "q13_movmatrix" / "movmatrix.m8n8.trans.b16.npz"
TEXT = "movmatrix.sync.aligned.m8n8.trans.b16"


def _isa_transpose(regs):
    """PTX ISA 9.7.14.5.17 lane by lane: lane l's source register holds elements (l // 4, 2 (l % 4))
    and (l // 4, 2 (l % 4) + 1) of the matrix, lower column in the lower half; its destination
    holds the same positions of the transposed matrix."""
    matrix = np.zeros((8, 8), np.uint32)
    for lane in range(32):
        row, col = lane // 4, 2 * (lane % 4)
        matrix[row, col] = regs[lane, 0] & 0xFFFF
        matrix[row, col + 1] = regs[lane, 0] >> 16
    out = np.zeros((32, 1), np.uint32)
    for lane in range(32):
        row, col = lane // 4, 2 * (lane % 4)
        out[lane, 0] = matrix[col, row] | matrix[col + 1, row] << 16
    return out


def _recording():
    with np.load(Q13) as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads(bytes(arrays.pop("meta")).decode())


def test_movmatrix_is_the_isas_map():
    rng = np.random.default_rng(5)
    for _ in range(8):
        regs = rng.integers(0, 1 << 32, (32, 1), dtype=np.uint64).astype(np.uint32)
        np.testing.assert_array_equal(lm.movmatrix(TEXT, regs), _isa_transpose(regs))


def test_recorded_index_case_is_the_transpose():
    """Case 0 of the recording holds each element's index 8 * row + column: on the H200 lane l's
    destination got indices 8 (2 (l % 4)) + l // 4 and 8 (2 (l % 4) + 1) + l // 4."""
    arrays, meta = _recording()
    assert meta["case_labels"][0].startswith("each element holds its own index")
    lane = np.arange(32)
    low, high = 8 * (2 * (lane % 4)) + lane // 4, 8 * (2 * (lane % 4) + 1) + lane // 4
    np.testing.assert_array_equal(arrays["d_regs"][0, :, 0], low | high << 16)
    np.testing.assert_array_equal(lm.movmatrix(TEXT, arrays["a_regs"][0]), arrays["d_regs"][0])


def test_every_recorded_case_as_one_stack():
    arrays, meta = _recording()
    assert meta["ptx"] == ["movmatrix.sync.aligned.m8n8.trans.b16 %r1, %r2;"]
    np.testing.assert_array_equal(lm.movmatrix(meta["ptx"][0], arrays["a_regs"]), arrays["d_regs"])
    assert arrays["d_regs"].shape == (16, 32, 1)


def test_conform_replays_the_recording():
    result = check_file(Q13)
    assert result.ok and result.family == "movmatrix" and result.passed == 16


def test_movmatrix_twice_is_the_identity():
    regs = np.random.default_rng(1).integers(0, 1 << 32, (3, 32, 1), dtype=np.uint64).astype(np.uint32)
    once = lm.movmatrix(TEXT, regs)
    assert not np.array_equal(once, regs)
    np.testing.assert_array_equal(lm.movmatrix(TEXT, once), regs)


def test_movmatrix_of_ldmatrix_is_ldmatrix_trans():
    """The same 8 rows loaded plain then moved, and loaded with .trans, give the same registers."""
    rng = np.random.default_rng(3)
    smem = rng.integers(0, 256, 1024, dtype=np.uint8)
    addresses = 16 * np.concatenate([rng.permutation(64)[:8], np.zeros(24, np.int64)])
    plain = lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x1.shared.b16", smem, addresses)
    trans = lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", smem, addresses)
    np.testing.assert_array_equal(lm.movmatrix(TEXT, plain), trans)


def test_stack_of_warps_each_on_its_own():
    regs = np.random.default_rng(2).integers(0, 1 << 32, (2, 3, 32, 1), dtype=np.uint64).astype(np.uint32)
    got = lm.movmatrix(TEXT, regs)
    assert got.shape == (2, 3, 32, 1) and got.dtype == np.uint32
    for i in np.ndindex(2, 3):
        np.testing.assert_array_equal(got[i], _isa_transpose(regs[i]))


def test_signed_and_float_registers_are_taken_as_their_bits():
    regs = np.random.default_rng(4).integers(0, 1 << 32, (32, 1), dtype=np.uint64).astype(np.uint32)
    np.testing.assert_array_equal(lm.movmatrix(TEXT, regs.view(np.int32)), _isa_transpose(regs))


@pytest.mark.parametrize("regs, match", [
    (np.zeros((32,), np.uint32), r"\(\.\.\., 32, 1\)"),
    (np.zeros((16, 1), np.uint32), r"\(\.\.\., 32, 1\)"),
    (np.zeros((32, 2), np.uint32), r"\(\.\.\., 32, 1\)"),
    (np.zeros((32, 1), np.uint16), "32-bit registers"),
])
def test_bad_registers_are_refused(regs, match):
    with pytest.raises(OperandError, match=match):
        lm.movmatrix(TEXT, regs)


def test_other_instructions_are_refused():
    with pytest.raises(InvalidInstructionError, match="Movmatrix"):
        lm.movmatrix("ldmatrix.sync.aligned.m8n8.x1.b16", np.zeros((32, 1), np.uint32))


def test_parser_takes_the_one_form():
    inst = parse("movmatrix.sync.aligned.m8n8.trans.b16 %r1, %r2;")
    assert isinstance(inst, Movmatrix) and inst.family == "movmatrix"
    assert (inst.shape, inst.type) == ("m8n8", "b16")
    assert [o.name for o in inst.operands] == ["%r1", "%r2"]
    assert parse("movmatrix.m8n8.trans.b16") == parse(TEXT)


@pytest.mark.parametrize("text, words", [
    ("movmatrix.sync.aligned.m8n8.b16 d, a;", [".trans"]),
    ("movmatrix.sync.aligned.m16n16.trans.b16 d, a;", [".m8n8", ".m16n16"]),
    ("movmatrix.sync.aligned.trans.b16 d, a;", [".m8n8", "none"]),
    ("movmatrix.sync.aligned.m8n8.trans.b8 d, a;", [".b16", ".b8"]),
    ("movmatrix.sync.aligned.m8n8.trans d, a;", [".b16", "none"]),
    ("movmatrix.sync.aligned.m8n8.x1.trans.b16 d, a;", [".x1", "movmatrix"]),
    ("movmatrix.sync.aligned.m8n8.trans.b16.shared d, a;", [".shared"]),
    ("movmatrix.sync.aligned.m8n8.trans.b16 {d}, a;", ["d, a", "{d}"]),
    ("movmatrix.sync.aligned.m8n8.trans.b16 d, a, b;", ["d, a"]),
    ("movmatrix.sync.aligned.m8n8.trans.b16 d, [a];", ["d, a"]),
])
def test_parser_refuses_other_forms(text, words):
    with pytest.raises(InvalidInstructionError) as err:
        parse(text)
    for word in words:
        assert word in str(err.value)


# ---------------------------------------------------------------- in the PTX interpreter

def test_ptx_movmatrix_transposes_each_warp():
    """Two warps: each lane's source is built from %laneid and %warpid, moved by movmatrix."""
    m = ptx.run("""
        .reg .b32 a, d, lane, warp, hi;
        mov.u32 lane, %laneid;
        mov.u32 warp, %warpid;
        shl.b32 warp, warp, 8;
        add.u32 a, lane, warp;
        shl.b32 hi, a, 16;
        or.b32 a, a, hi;
        xor.b32 a, a, 0x80000000;
        movmatrix.sync.aligned.m8n8.trans.b16 d, a;
    """, threads=64)
    a = np.asarray(m["a"]).astype(np.uint32).reshape(2, 32, 1)
    lane, warp = np.arange(32), np.arange(2)[:, None]
    np.testing.assert_array_equal(a[..., 0], ((lane + 256 * warp) * 0x10001) ^ 0x80000000)
    np.testing.assert_array_equal(np.asarray(m["d"]).astype(np.uint32).reshape(2, 32, 1),
                                  np.stack([_isa_transpose(a[w]) for w in range(2)]))


def test_ptx_movmatrix_needs_32_bit_registers():
    with pytest.raises(InvalidInstructionError, match="32-bit"):
        ptx.run(".reg .b64 a, d;\nmovmatrix.sync.aligned.m8n8.trans.b16 d, a;")
