"""wgmma operand placement checked against the H100 recordings in tests/golden/wgmma.

Every file is reproduced from its inputs through the code under test (descriptors ->
``gather_operand``, A registers -> ``unpack_a``, C registers -> ``unpack_d``) and a plain
numpy reference of the arithmetic written here:

* integer files (s8/u8, b1 .and.popc): exactly, D = C*scale_d + A.B wrapped to int32
  (or clamped after each instruction with .satfinite), compared register for register
  through ``pack_d``;
* float files (f16, bf16, tf32, e4m3/e5m2): approximately, in float64 with imm-scale-a/b
  applied and tf32's low 13 bits dropped.  A right address map leaves errors of the
  output's rounding size relative to sum|a*b| + |c|; a wrong one leaves errors of order 1.
  Elements touching NaN or infinity are skipped in this approximate check only.
"""

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fastmma.errors import SharedMemoryBoundsError
from fastmma.layout.descriptor import MatrixDescriptor, gather_operand
from fastmma.layout.wgmma_fragments import (
    a_fragment_map,
    d_fragment_map,
    d_regs,
    pack_a,
    pack_d,
    unpack_a,
    unpack_d,
)

GOLDEN = Path(__file__).parent / "golden" / "wgmma"
FILES = sorted(GOLDEN.glob("*.npz"))


def _q(path):
    with np.load(path) as z:
        return json.loads(bytes(z["meta"]).decode())["qualifiers"]


INT_FILES = [f for f in FILES if _q(f)["dtype"] == "s32"]
FLOAT_FILES = [f for f in FILES if _q(f)["dtype"] != "s32"]


def load(path):
    with np.load(path) as z:
        rec = {k: z[k] for k in z.files}
    rec["meta"] = json.loads(bytes(rec["meta"]).decode())
    return rec


def cases(rec):
    return range(rec["mode"].shape[0])


def descriptors(rec, c, name):
    return [int(x) for x in np.asarray(rec[name][c]).reshape(-1)]


def operands(rec, c, step, rewrite=lambda d, major: d):
    """(A bits [64, K], B bits [N, K]) of instruction ``step`` of case ``c``."""
    q = rec["meta"]["qualifiers"]
    smem = rec["smem"][c]
    major_a = "MN" if q["imm_trans_a"] else "K"
    major_b = "MN" if q["imm_trans_b"] else "K"
    if q["a_source"] == "reg":
        a = unpack_a(rec["a_regs"][c], q["atype"])
    else:
        a_desc = rewrite(MatrixDescriptor.decode(descriptors(rec, c, "a_desc")[step]), major_a)
        a = gather_operand(smem, a_desc, 64, q["k"], q["atype"], major_a, name="a_desc")
    b_desc = rewrite(MatrixDescriptor.decode(descriptors(rec, c, "b_desc")[step]), major_b)
    b = gather_operand(smem, b_desc, q["n"], q["k"], q["btype"], major_b, name="b_desc")
    return a, b


# ---- integer reference -------------------------------------------------------------------

def int_values(bits, typ):
    v = bits.astype(np.int64)
    return np.where(v >= 128, v - 256, v) if typ == "s8" else v


def int_reference(rec, c, rewrite=lambda d, major: d, a_override=None):
    q = rec["meta"]["qualifiers"]
    acc = unpack_d(rec["c_regs"][c], "s32", q["n"]).view(np.int32).astype(np.int64)
    if not rec["scale_d"][c]:
        acc = np.zeros_like(acc)
    for step in range(q["chain"]):
        a, b = operands(rec, c, step, rewrite)
        if a_override is not None:
            a = a_override
        a, b = int_values(a, q["atype"]), int_values(b, q["btype"])
        acc = acc + a @ b.T  # b1 .and.popc: popcount of a AND b is the 0/1 dot product
        if q["satfinite"]:
            acc = np.clip(acc, -(2**31), 2**31 - 1)
        else:
            acc = (acc + 2**31) % 2**32 - 2**31
    return acc


def test_golden_files_present():
    assert len(INT_FILES) >= 80 and len(FLOAT_FILES) >= 180


@pytest.mark.parametrize("path", INT_FILES, ids=lambda p: p.stem)
def test_integer_file_exact(path):
    rec = load(path)
    q = rec["meta"]["qualifiers"]
    for c in cases(rec):
        acc = int_reference(rec, c)
        regs = pack_d(acc.astype(np.int32), "s32")
        bad = np.argwhere(regs != rec["d_regs"][c])
        assert bad.size == 0, f"case {c}: {len(bad)} registers differ, first (thread, reg) {bad[0]}"
        assert np.array_equal(unpack_d(rec["d_regs"][c], "s32", q["n"]).view(np.int32), acc)


# ---- float reference ---------------------------------------------------------------------

def float_values(bits, typ):
    if typ == "f16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if typ == "bf16":
        return bits.astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    if typ == "e4m3":
        return bits.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    if typ == "e5m2":
        return bits.astype(np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float64)
    if typ == "tf32":
        return (bits.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    raise AssertionError(typ)


def acc_values(regs, dtype, n):
    bits = unpack_d(regs, dtype, n)
    return bits.view(np.float32 if dtype == "f32" else np.float16).astype(np.float64)


def tolerance(q):
    """(rtol, atol): f32 accumulation of f16/bf16/tf32 products is near exact; fp8 products
    are accumulated with fewer bits, and an f16 output rounds to 11 bits."""
    wide = q["dtype"] == "f32" and q["atype"] in ("f16", "bf16", "tf32")
    rtol = 2.0**-16 if wide else 2.0**-7
    atol = 2.0**-126 if q["dtype"] == "f32" else 2.0**-24
    return rtol, atol


def float_error(rec, c, rewrite=lambda d, major: d):
    """(max of |ref - D| / (rtol * magnitude + atol) over finite elements, elements checked)."""
    q = rec["meta"]["qualifiers"]
    n, sa, sb = q["n"], q["imm_scale_a"] or 1, q["imm_scale_b"] or 1
    with np.errstate(all="ignore"):
        acc = acc_values(rec["c_regs"][c], q["dtype"], n)
        if not rec["scale_d"][c]:
            acc = np.zeros_like(acc)
        mag = np.abs(acc)
        for step in range(q["chain"]):
            a, b = operands(rec, c, step, rewrite)
            a, b = float_values(a, q["atype"]), float_values(b, q["btype"])
            acc = acc + (sa * a) @ (sb * b).T
            mag = mag + np.abs(a) @ np.abs(b).T
        got = acc_values(rec["d_regs"][c], q["dtype"], n)
        ok = np.isfinite(acc) & np.isfinite(got) & np.isfinite(mag)
        rtol, atol = tolerance(q)
        ratio = np.abs(acc - got)[ok] / (rtol * mag[ok] + atol)
    return (float(ratio.max()) if ratio.size else 0.0), int(ok.sum())


@pytest.mark.parametrize("path", FLOAT_FILES, ids=lambda p: p.stem)
def test_float_file_approximate(path):
    rec = load(path)
    checked = 0
    for c in cases(rec):
        err, n_ok = float_error(rec, c)
        assert err <= 1.0, f"case {c} (mode {rec['mode'][c]}): error {err:.3g} x tolerance"
        checked += n_ok
    assert checked > 0


# ---- the checks can fail -------------------------------------------------------------------

def _without_base_offset(d, major):
    return MatrixDescriptor(d.start_address, d.leading_byte_offset, d.stride_byte_offset, 0, d.swizzle)


def _uses_base_offset(rec, c):
    names = ["b_desc"] + (["a_desc"] if rec["meta"]["qualifiers"]["a_source"] == "desc" else [])
    return any(
        MatrixDescriptor.decode(v).base_offset and MatrixDescriptor.decode(v).swizzle != "none"
        for name in names for v in descriptors(rec, c, name)
    )


def test_ignoring_base_offset_breaks_integer_reproduction():
    tried = broken = 0
    for path in INT_FILES:
        rec = load(path)
        for c in cases(rec):
            if _uses_base_offset(rec, c):
                tried += 1
                expect = unpack_d(rec["d_regs"][c], "s32", rec["meta"]["qualifiers"]["n"]).view(np.int32)
                broken += not np.array_equal(int_reference(rec, c, _without_base_offset), expect)
    assert tried >= 10 and broken >= tried // 2, (tried, broken)


def test_swapping_lbo_and_sbo_breaks_mn_major_no_swizzle():
    """MN-major without swizzle: SBO steps along M/N and LBO along K, not the other way."""
    def swap(d, major):
        if major != "MN" or d.swizzle != "none":
            return d
        return MatrixDescriptor(d.start_address, d.stride_byte_offset, d.leading_byte_offset, 0, "none")

    def affected(rec, c):
        q = rec["meta"]["qualifiers"]
        names = [n for n, t in (("a_desc", q["imm_trans_a"]), ("b_desc", q["imm_trans_b"]))
                 if t and not (n == "a_desc" and q["a_source"] == "reg")]
        return any(
            (d := MatrixDescriptor.decode(v)).swizzle == "none" and d.leading_byte_offset != d.stride_byte_offset
            for n in names for v in descriptors(rec, c, n)
        )

    tried = broken = 0
    for path in FLOAT_FILES:
        q = _q(path)
        if not (q["imm_trans_a"] or q["imm_trans_b"]):
            continue
        rec = load(path)
        for c in cases(rec):
            if not affected(rec, c) or float_error(rec, c)[1] < 64:
                continue
            tried += 1
            try:
                broken += float_error(rec, c, swap)[0] > 1.0
            except SharedMemoryBoundsError:
                broken += 1
    assert tried >= 20 and broken == tried, (tried, broken)


def test_reversed_b1_register_bit_order_breaks_areg():
    path = GOLDEN / "wgmma.m64n8k256.s32.b1.b1.and.popc.areg.npz"
    rec = load(path)
    expect = [unpack_d(rec["d_regs"][c], "s32", 8).view(np.int32) for c in cases(rec)]
    assert all(np.array_equal(int_reference(rec, c), expect[c]) for c in cases(rec))
    reversed_regs = np.zeros_like(rec["a_regs"])
    for bit in range(32):
        reversed_regs |= ((rec["a_regs"] >> np.uint32(bit)) & np.uint32(1)) << np.uint32(31 - bit)
    wrong = [unpack_a(reversed_regs[c], "b1") for c in cases(rec)]
    broken = [not np.array_equal(int_reference(rec, c, a_override=wrong[c]), expect[c]) for c in cases(rec)]
    assert sum(broken) >= len(broken) // 2, broken


# ---- fragment maps by hand -------------------------------------------------------------------

def test_d_fragment_hand_entries():
    row, col = d_fragment_map(64, "f32")
    assert row.shape == (128, 32, 1)
    # thread 37: warp 1, lane 5 -> groupID 1, thread-in-group 1
    assert (row[37, 5, 0], col[37, 5, 0]) == (17, 11)   # r=5: n-block 1, col 8+2+1, row 16+1
    assert (row[37, 2, 0], col[37, 2, 0]) == (25, 2)    # r=2: row +8, col 2
    assert (row[0, 0, 0], col[0, 0, 0]) == (0, 0)
    assert (row[127, 31, 0], col[127, 31, 0]) == (63, 63)  # warp 3 g 7 q 3, r 31: 48+7+8, 56+6+1
    row, col = d_fragment_map(16, "f16")
    assert row.shape == (128, 4, 2)
    assert (row[37, 1, 0], col[37, 1, 0]) == (25, 2)    # f16 reg 1 low = f32 value 2
    assert (row[37, 2, 1], col[37, 2, 1]) == (17, 11)   # f16 reg 2 high = f32 value 5


def test_a_fragment_hand_entries():
    # thread 37: warp 1, g 1, q 1
    row, col, shift = a_fragment_map("f16")
    assert (row[37, 3, 1], col[37, 3, 1], shift[37, 3, 1]) == (25, 11, 16)  # a7: row g+8, col 2q+8+1
    row, col, shift = a_fragment_map("tf32")
    assert row.shape == (128, 4, 1) and (row[37, 2, 0], col[37, 2, 0]) == (17, 5)  # a2: col q+4
    row, col, shift = a_fragment_map("e4m3")
    assert (row[37, 1, 3], col[37, 1, 3], shift[37, 1, 3]) == (25, 7, 24)  # reg 1 byte 3: col 4q+3
    assert (row[37, 2, 0], col[37, 2, 0]) == (17, 20)  # reg 2: col 4q+16
    row, col, shift = a_fragment_map("b1")
    assert (row[37, 3, 31], col[37, 3, 31], shift[37, 3, 31]) == (25, 191, 31)  # 32q+31+128


@pytest.mark.parametrize("atype,k", [("f16", 16), ("bf16", 16), ("tf32", 8), ("e4m3", 32),
                                     ("e5m2", 32), ("s8", 32), ("u8", 32), ("b1", 256)])
def test_a_pack_unpack_round_trip(atype, k):
    rng = np.random.default_rng(1)
    bits = {"f16": 16, "bf16": 16, "tf32": 32, "b1": 1}.get(atype, 8)
    dtype = {16: np.uint16, 32: np.uint32}.get(bits, np.uint8)
    x = rng.integers(0, 1 << bits, size=(3, 64, k), dtype=np.uint64).astype(dtype)
    regs = pack_a(x, atype)
    assert regs.shape == (3, 128, 4) and regs.dtype == np.uint32
    assert np.array_equal(unpack_a(regs, atype), x)
    r = rng.integers(0, 1 << 32, size=(128, 4), dtype=np.uint64).astype(np.uint32)
    assert np.array_equal(pack_a(unpack_a(r, atype), atype), r)


@pytest.mark.parametrize("dtype", ["f32", "s32", "f16"])
@pytest.mark.parametrize("n", [8, 24, 112, 256])
def test_d_pack_unpack_round_trip(dtype, n):
    rng = np.random.default_rng(n)
    nd = d_regs(n, dtype)
    assert nd == (n // 4 if dtype == "f16" else n // 2)
    r = rng.integers(0, 1 << 32, size=(2, 128, nd), dtype=np.uint64).astype(np.uint32)
    assert np.array_equal(pack_d(unpack_d(r, dtype, n), dtype), r)


@pytest.mark.parametrize("atype,k,regs", [("f16", 16, 4), ("tf32", 8, 4), ("e4m3", 32, 4), ("b1", 256, 4)])
def test_empty_stacks_of_fragments(atype, k, regs):
    """A stack of no matrices packs into a stack of no register files and back, with the
    shapes of a longer stack (a reshape with -1 had failed on no elements)."""
    dtype = {"f16": np.uint16, "tf32": np.uint32}.get(atype, np.uint8)
    assert pack_a(np.zeros((0, 64, k), dtype), atype).shape == (0, 128, regs)
    assert unpack_a(np.zeros((2, 0, 128, regs), np.uint32), atype).shape == (2, 0, 64, k)
    assert pack_d(np.zeros((0, 64, 24), np.float32), "f32").shape == (0, 128, d_regs(24, "f32"))
    assert unpack_d(np.zeros((0, 128, d_regs(24, "f16")), np.uint32), "f16", 24).shape == (0, 64, 24)


@pytest.mark.parametrize("count", [2, 11])
@pytest.mark.parametrize("dtype,n", [("f32", 8), ("s32", 136), ("f16", 256), ("f16", 24)])
def test_d_registers_follow_the_fragment_map(dtype, n, count):
    """Every accumulator element lands where :func:`d_fragment_map` (the ISA figure's
    formula) puts it: register ``r`` of thread ``t``, half ``e`` for .f16; and unpacking
    reads each one from there."""
    rng = np.random.default_rng(n)
    bits = 16 if dtype == "f16" else 32
    x = rng.integers(0, 1 << bits, size=(count, 64, n), dtype=np.uint64).astype(np.uint16 if bits == 16 else np.uint32)
    regs = pack_d(x, dtype)
    row, col = d_fragment_map(n, dtype)
    t, r, e = np.indices(row.shape)
    held = (regs[:, t, r] >> (16 * e).astype(np.uint32)) & np.uint32((1 << bits) - 1)
    assert np.array_equal(held, x[:, row, col])
    other = rng.integers(0, 1 << 32, size=regs.shape, dtype=np.uint64).astype(np.uint32)
    got = unpack_d(other, dtype, n)
    held = (other[:, t, r] >> (16 * e).astype(np.uint32)) & np.uint32((1 << bits) - 1)
    assert np.array_equal(got[:, row, col], held)


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("atype", ["f16", "tf32", "e4m3", "b1"])
def test_a_registers_follow_the_fragment_map(atype, count):
    """Every A element sits at the bits :func:`a_fragment_map` gives it, and unpacking
    reads it from there."""
    rng = np.random.default_rng(7)
    bits = {"f16": 16, "tf32": 32, "b1": 1}.get(atype, 8)
    k = 256 // bits
    dtype = {16: np.uint16, 32: np.uint32}.get(bits, np.uint8)
    x = rng.integers(0, 1 << bits, size=(count, 64, k), dtype=np.uint64).astype(dtype)
    regs = pack_a(x, atype).astype(np.uint64)
    row, col, shift = a_fragment_map(atype)
    t, r, _ = np.indices(row.shape)
    held = (regs[:, t, r] >> shift.astype(np.uint64)) & np.uint64((1 << bits) - 1)
    assert np.array_equal(held, x[:, row, col])
    other = rng.integers(0, 1 << 32, size=regs.shape, dtype=np.uint64)
    held = (other[:, t, r] >> shift.astype(np.uint64)) & np.uint64((1 << bits) - 1)
    assert np.array_equal(unpack_a(other.astype(np.uint32), atype)[:, row, col], held.astype(dtype))


def test_f16_accumulator_halves():
    d = np.zeros((64, 8), np.uint16)
    d[17, 3] = 0x1234  # thread 37 (g 1, q 1): f32 value 1 -> row 17, col 3 -> f16 reg 0 high half
    d[17, 2] = 0xABCD  # value 0 -> reg 0 low half
    regs = pack_d(d, "f16")
    assert regs[37, 0] == 0x1234ABCD and np.count_nonzero(regs) == 1


@pytest.mark.parametrize("path", FILES[::9], ids=lambda p: p.stem)
def test_golden_accumulators_round_trip(path):
    rec = load(path)
    q = rec["meta"]["qualifiers"]
    for key in ("c_regs", "d_regs"):
        assert np.array_equal(pack_d(unpack_d(rec[key], q["dtype"], q["n"]), q["dtype"]), rec[key])
