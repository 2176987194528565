"""``ldmatrix`` / ``stmatrix`` (fastmma.ldmatrix): the ISA's lane and register maps written out
here, the sm_90 recordings (tests/golden/probes/q12_ldmatrix_stmatrix), the mma.sync fragments
they feed, stacks, errors and the PTX interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastmma import ldmatrix as lm
from fastmma import mma_sync, ptx
from fastmma.errors import AlignmentError, InvalidInstructionError, MemoryBoundsError, OperandError
from fastmma.isa import parse
from fastmma.layout.mma_fragments import fragment_layout
from fastmma.layout.wmma_fragments import pack_fragment

Q12 = Path(__file__).parent / "golden" / "probes" / "q12_ldmatrix_stmatrix"
FORMS = [(num, trans) for num in (1, 2, 4) for trans in (False, True)]


def _text(op, num, trans, space=".shared"):
    return f"{op}.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}{space}.b16"


def _isa_registers(smem, addresses, num, trans):
    """PTX ISA 9.7.14.5.15 lane by lane: lane 8i + r addresses row r of matrix i; lane l gets
    elements (l // 4, 2 (l % 4)) and (l // 4, 2 (l % 4) + 1) of each matrix, transposed with .trans."""
    halves = smem.view(np.uint16)
    regs = np.zeros((32, num), np.uint32)
    for i in range(num):
        matrix = np.stack([halves[addresses[8 * i + r] // 2:addresses[8 * i + r] // 2 + 8] for r in range(8)])
        if trans:
            matrix = matrix.T
        for lane in range(32):
            row, col = lane // 4, 2 * (lane % 4)
            regs[lane, i] = int(matrix[row, col]) | int(matrix[row, col + 1]) << 16
    return regs


def _case(rng, num, size=4096):
    smem = rng.integers(0, 256, size, dtype=np.uint8)
    rows = rng.permutation(size // 16)
    return smem, 16 * np.concatenate([rows[:8 * num], rng.integers(0, size // 16, 32 - 8 * num)])


@pytest.mark.parametrize("num, trans", FORMS)
def test_ldmatrix_is_the_isas_map(num, trans):
    rng = np.random.default_rng(num + 10 * trans)
    for _ in range(4):
        smem, addresses = _case(rng, num)
        got = lm.ldmatrix(_text("ldmatrix", num, trans), smem, addresses)
        np.testing.assert_array_equal(got, _isa_registers(smem, addresses, num, trans))


@pytest.mark.parametrize("num, trans", FORMS)
def test_stmatrix_writes_what_ldmatrix_reads(num, trans):
    rng = np.random.default_rng(7 * num + trans)
    smem, addresses = _case(rng, num)
    regs = rng.integers(0, 1 << 32, (32, num), dtype=np.uint64).astype(np.uint32)
    before = smem.copy()
    lm.stmatrix(_text("stmatrix", num, trans), smem, addresses, regs)
    np.testing.assert_array_equal(lm.ldmatrix(_text("ldmatrix", num, trans), smem, addresses), regs)
    untouched = np.ones(smem.size, bool)
    for a in addresses[:8 * num]:
        untouched[a:a + 16] = False
    np.testing.assert_array_equal(smem[untouched], before[untouched])  # the other bytes, and unused lanes' rows


def test_recordings_are_present():
    files = sorted(Q12.glob("*.npz"))
    assert len(files) == 13
    families = {json.loads(bytes(np.load(p)["meta"]).decode())["family"] for p in files}
    assert families == {"ldmatrix", "stmatrix"}


def _tiles(seed, size):
    """A random f16 A (16 x 16) and B (16 x 8), and a shared-memory image of ``size`` bytes
    holding A row-major at byte 0 and B's transpose (8 rows of 16) at byte 512."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 8)).astype(np.float16)
    smem = np.zeros(size, np.uint8)
    smem[:512] = A.view(np.uint8).ravel()
    smem[512:768] = np.ascontiguousarray(B.T).view(np.uint8).ravel()
    return A, B, smem


def test_ldmatrix_x4_gives_mma_sync_fragments():
    """The classic use: a row-major 16x16 f16 A in shared memory, lane l addressing row l % 16
    at column 8 * (l // 16), and ``ldmatrix.x4`` hands each lane its m16n8k16 A registers; B
    stored as its transpose (8 rows of 16) and ``.x2`` gives B's."""
    A, B, smem = _tiles(1, 1024)
    lanes = np.arange(32)
    a = lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x4.shared.b16", smem, (lanes % 16) * 32 + (lanes // 16) * 16)
    b = lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x2.shared.b16", smem, 512 + (lanes % 8) * 32 + (lanes // 8 % 2) * 16)
    np.testing.assert_array_equal(a, pack_fragment(A.view(np.uint16), fragment_layout("a", "m16n8k16", "f16")))
    np.testing.assert_array_equal(b, pack_fragment(B.view(np.uint16), fragment_layout("b", "m16n8k16", "f16")))
    d = mma_sync.mma("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", a, b, np.zeros((32, 4), np.uint32))
    assert d.shape == (32, 4)


def test_stacks_broadcast_and_store_in_order():
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (5, 2048), dtype=np.uint8)
    addresses = np.stack([_case(rng, 4, 2048)[1] for _ in range(5)])
    got = lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", images, addresses)
    assert got.shape == (5, 32, 4)
    for s in range(5):
        np.testing.assert_array_equal(got[s], lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                                                          images[s], addresses[s]))
    # one image for every warp: the same row stored by warps 0 and 1, then lanes 0 and 8 of warp 1
    smem = np.zeros(256, np.uint8)
    regs = rng.integers(0, 1 << 32, (2, 32, 2), dtype=np.uint64).astype(np.uint32)
    addr = np.tile(np.arange(32) % 8 * 16, (2, 1))
    addr[1, 8] = 0  # warp 1: matrix 1's row 0 lands on matrix 0's row 0
    lm.stmatrix("stmatrix.sync.aligned.m8n8.x2.shared.b16", smem, addr, regs)
    ordered = np.zeros(256, np.uint8)
    for s in range(2):
        for lane in range(16):
            ordered[addr[s, lane]:addr[s, lane] + 16] = _row(regs[s], lane)
    np.testing.assert_array_equal(smem, ordered)


def _row(regs, lane):
    """The 16 bytes stmatrix (no .trans) writes at lane ``lane``'s address: row lane % 8 of
    matrix lane // 8, from the registers of lanes 4 * row .. 4 * row + 3."""
    row, matrix = lane % 8, lane // 8
    return regs[4 * row:4 * row + 4, matrix].astype("<u4").view(np.uint8)


def test_bad_addresses_name_the_lane_and_touch_nothing():
    smem = np.zeros(1024, np.uint8)
    addresses = np.arange(32) * 16
    bad = addresses.copy()
    bad[5] = 24
    with pytest.raises(AlignmentError, match="lane 5 gives address 24"):
        lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x1.shared.b16", smem, bad)
    bad[5] = 1016
    with pytest.raises(MemoryBoundsError, match="lane 5 gives address 1016"):
        lm.stmatrix("stmatrix.sync.aligned.m8n8.x1.shared.b16", smem, bad, np.ones((32, 1), np.uint32))
    assert not smem.any()
    far = np.arange(32, dtype=np.uint64) * 16
    far[9] = 2**64 - 16
    with pytest.raises(MemoryBoundsError, match="lane 9"):
        lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x2.shared.b16", smem, far)
    unused = np.arange(32) * 16
    unused[20] = 3  # lanes from 8 * num on give no address: not read, not checked
    lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x2.shared.b16", smem, unused)
    with pytest.raises(OperandError, match="one per lane"):
        lm.ldmatrix("ldmatrix.sync.aligned.m8n8.x2.shared.b16", smem, np.arange(16) * 16)
    with pytest.raises(InvalidInstructionError, match="m8n8"):
        lm.ldmatrix("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8", smem, addresses)
    with pytest.raises(InvalidInstructionError, match="Ldmatrix"):
        lm.ldmatrix("stmatrix.sync.aligned.m8n8.x1.shared.b16", smem, addresses)


def test_parse_checks_operands():
    inst = parse("ldmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16 {%r1, %r2}, [%r3+16];")
    assert (inst.num, inst.trans, inst.state_space) == (2, True, "shared::cta")
    with pytest.raises(InvalidInstructionError, match="vector of 4"):
        parse("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r3], {%r1, %r2};")
    with pytest.raises(InvalidInstructionError, match=r"\.x1, \.x2, \.x4"):
        parse("ldmatrix.sync.aligned.m8n8.shared.b16 {%r1}, [%r3];")


# ---------------------------------------------------------------- in the PTX interpreter

def test_ptx_ldmatrix_then_mma_then_stmatrix():
    """A warp loads A and B with ldmatrix from a .shared variable, multiplies with mma.sync,
    and stores nothing but its inputs back transposed with stmatrix: every step against the
    module functions."""
    A, B, smem = _tiles(11, 2048)
    m = ptx.run("""
        .reg .b32 a<4>, b<2>, d<4>, lane, rowa, cola, rowb, cola2, pa, pb, pc;
        mov.u32 lane, %laneid;
        and.b32 rowa, lane, 15;
        shr.u32 cola, lane, 4;
        shl.b32 rowa, rowa, 5;
        shl.b32 cola, cola, 4;
        add.u32 pa, rowa, cola;
        and.b32 rowb, lane, 7;
        shr.u32 cola2, lane, 3;
        and.b32 cola2, cola2, 1;
        shl.b32 rowb, rowb, 5;
        shl.b32 cola2, cola2, 4;
        add.u32 pb, rowb, cola2;
        add.u32 pb, pb, 512;
        ldmatrix.sync.aligned.m8n8.x4.shared.b16 {a0, a1, a2, a3}, [pa];
        ldmatrix.sync.aligned.m8n8.x2.shared.b16 {b0, b1}, [pb];
        mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d0, d1, d2, d3}, {a0, a1, a2, a3}, {b0, b1}, {d0, d1, d2, d3};
        add.u32 pc, pa, 1024;
        stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [pc], {a0, a1, a2, a3};
    """, smem=smem)
    lanes = np.arange(32)
    a = pack_fragment(A.view(np.uint16), fragment_layout("a", "m16n8k16", "f16"))
    b = pack_fragment(B.view(np.uint16), fragment_layout("b", "m16n8k16", "f16"))
    np.testing.assert_array_equal(np.stack([np.asarray(m[f"a{i}"]) for i in range(4)], axis=1).view(np.uint32), a)
    d = mma_sync.mma("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", a, b, np.zeros((32, 4), np.uint32))
    np.testing.assert_array_equal(np.stack([np.asarray(m[f"d{i}"]) for i in range(4)], axis=1).view(np.uint32), d)
    want = smem.copy()
    lm.stmatrix("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", want, 1024 + (lanes % 16) * 32 + (lanes // 16) * 16, a)
    np.testing.assert_array_equal(m.smem, want)


def test_ptx_ldmatrix_outside_shared_memory_is_an_error():
    with pytest.raises(MemoryBoundsError, match="not in shared memory"):
        ptx.run(".reg .b64 p;\n.reg .b32 r;\nmov.u64 p, 16;\nldmatrix.sync.aligned.m8n8.x1.b16 {r}, [p];",
                smem=np.zeros(1024, np.uint8))
