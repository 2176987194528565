"""H100 probe recordings (tests/golden/probes, made with tools/record): every case replayed bit for
bit, and the rules the probes settled written out as literal checks on hand-made operands.

They settled: an f32 result rounded to zero is +0; an f16 C enters the f32 mode converted to f32;
f16 D from f32 C is rounded twice (toward zero to f32, then to nearest even); an f16-mode zero is
+0; wmma.mma reads the lowest copy of a duplicated f16 fragment register; the f64 NaN order; the
swizzle acts on the absolute shared address.  And q8 (wgmma) and q9 (wmma) recorded GEMM k-loops
that fastmma.matmul must reproduce.  tools/record/README.md describes how they were made.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fastmma
from fastmma import conform, wgmma, wmma
from fastmma.conform import load_recording
from fastmma.formats import get_format
from fastmma.isa import parse
from fastmma.layout.wgmma_fragments import unpack_d

PROBES = Path(__file__).parent / "golden" / "probes"
FILES = sorted(PROBES.rglob("*.npz"))
COPIES = PROBES / "q3_fragment_copies" / "fragment_copies.zip"

def _rel(path: Path) -> str:
    return path.relative_to(PROBES).as_posix()


def test_probe_files_are_present():
    assert len(FILES) >= 60 and COPIES.exists()


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_probe_recording(path):
    res = conform.check_file(path)
    assert res.error is None, res.error
    assert res.cases > 0
    assert res.ok, "\n".join(map(str, res.mismatches))


@pytest.mark.parametrize("path", sorted(PROBES.glob("q5_smem_base_*/*.npz")), ids=_rel)
def test_unaligned_image_replay(path):
    """Q5: the swizzle XOR acts on the absolute shared address: every case of an image placed at
    smem_base + 128 or + 512 replays with image_address = smem_base_observed % 1024."""
    arrays, meta = load_recording(path)
    (base,) = meta["smem_base_observed"]
    inst = parse(meta["ptx"][1])
    for i in range(len(arrays["mode"])):
        d = wgmma.mma_async(inst, arrays["c_regs"][i], a_desc=int(arrays["a_desc"][i]),
                            b_desc=int(arrays["b_desc"][i]), smem=arrays["smem"][i],
                            scale_d=bool(arrays["scale_d"][i]), image_address=base % 1024)
        np.testing.assert_array_equal(d, arrays["d_regs"][i], err_msg=f"case {i}")


def _k_major_128b(smem, desc, rows, row_bytes=32):
    """The ``rows x row_bytes`` bytes a K-major, 128B-swizzled operand descriptor addresses,
    read by the PTX ISA's canonical layout written out here (not with fastmma.layout): row
    ``r`` at ``start + (r // 8) * SBO + (r % 8) * 128``, then address bits 4-6 XORed with
    bits 7-9.  The image sits at a 1024-aligned shared address, so image offsets will do."""
    assert desc >> 62 == 1 and (desc >> 49) & 7 == 0, hex(desc)  # 128B swizzle, base offset 0
    start, sbo = (desc & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
    r = np.arange(rows)[:, None]
    addr = start + (r // 8) * sbo + (r % 8) * 128 + np.arange(row_bytes)
    return smem[addr ^ (((addr >> 7) & 7) << 4)]


@pytest.mark.parametrize("path", sorted(PROBES.glob("q8_gemm_k_loop/*.npz")), ids=_rel)
def test_q8_matmul_equals_the_recorded_k_loop(path):
    """q8: a kernel's k-loop (16 wgmma.mma_async in one commit group, stepping 32 bytes along K
    inside 128B-swizzled K-blocks) gave D = A (64 x K) times B (K x 64) plus C on the H100, and
    fastmma.matmul with the same instruction gives it bit for bit."""
    arrays, meta = load_recording(path)
    q = meta["qualifiers"]
    a_fmt, b_fmt = get_format(q["atype"]), get_format(q["btype"])
    instruction = f"m64n{q['n']}k{q['k']}.{q['dtype']}.{q['atype']}.{q['btype']}"
    instruction += ".satfinite" if q["satfinite"] else ""
    assert q["chain"] == 16 and meta["smem_base_observed"] == [1024]
    for i in range(len(arrays["mode"])):
        smem = arrays["smem"][i]
        A = np.concatenate([_k_major_128b(smem, int(d), 64) for d in arrays["a_desc"][i]], axis=1)
        Bt = np.concatenate([_k_major_128b(smem, int(d), q["n"]) for d in arrays["b_desc"][i]], axis=1)
        A, B = A.view(a_fmt.storage), Bt.view(b_fmt.storage).T
        assert A.shape == B.T.shape == (64, q["k"] * 16)
        C = unpack_d(arrays["c_regs"][i], q["dtype"], q["n"]) if arrays["scale_d"][i] else None
        D = fastmma.matmul(A, B, C, instruction=instruction)
        expected = unpack_d(arrays["d_regs"][i], q["dtype"], q["n"])
        np.testing.assert_array_equal(D.view(expected.dtype), expected, err_msg=f"case {i}")


def _matrix_in_memory(mem, fmt, rows, cols, ld, layout):
    """A logical matrix (raw bits) read from a memory image by FORMAT.md's rule, written out
    here: element (r, c) at element index ``r * ld + c`` (row) or ``c * ld + r`` (col)."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    index = r * ld + c if layout == "row" else c * ld + r
    return mem[: mem.size // (fmt.bits // 8) * (fmt.bits // 8)].view(fmt.storage)[index]


@pytest.mark.parametrize("path", sorted(PROBES.glob("q9_wmma_k_loop/*.npz")), ids=_rel)
def test_q9_matmul_equals_the_recorded_wmma_k_loop(path):
    """q9: a warp's k-loop (C loaded once, then 16 times wmma.load.a/b one step further along
    K and wmma.mma, then wmma.store.d) stored D = A (M x 16k) times B (16k x N) plus C on the
    H100, and fastmma.matmul with the same wmma.mma gives it bit for bit: f16 (f32 and f16
    accumulators), bf16, tf32 (groups of 4), f64 in each rounding, s8 (wrapped and
    .satfinite), u8."""
    arrays, meta = load_recording(path)
    q = meta["qualifiers"]
    m, n, k = q["m"], q["n"], q["k"] * q["chain"]
    assert q["chain"] == 16
    assert (q["alayout"], q["blayout"], q["clayout"], q["dlayout"]) == ("row", "col", "row", "row")
    fa, fb, fc, fd = (get_format(q[t]) for t in ("atype", "btype", "ctype", "dtype"))
    for i in range(len(arrays["mode"])):
        A = _matrix_in_memory(arrays["a_mem"][i], fa, m, k, int(arrays["lda"][i]), "row")
        B = _matrix_in_memory(arrays["b_mem"][i], fb, k, n, int(arrays["ldb"][i]), "col")
        C = _matrix_in_memory(arrays["c_mem"][i], fc, m, n, int(arrays["ldc"][i]), "row")
        expected = _matrix_in_memory(arrays["d_mem"][i], fd, m, n, int(arrays["ldd"][i]), "row")
        D = fastmma.matmul(A, B, C, instruction=meta["ptx_template"][3])
        np.testing.assert_array_equal(D.view(fd.storage), expected, err_msg=f"case {i}")


# ----------------------------------------------------------------------------------------------
# The rules, on hand-made operands (expected bits as the H100 recorded them)
# ----------------------------------------------------------------------------------------------

def _bits(x, dtype):
    return np.asarray(x).view({np.float32: np.uint32, np.float16: np.uint16, np.float64: np.uint64}[dtype])


def test_q1_f32_underflow_is_plus_zero():
    """q1: A[0,0]=2^-75, B[0,0]=-2^-75 (bf16), all else 0, C=0: D[0,0] = +0."""
    A = np.zeros((64, 16), np.uint16)
    B = np.zeros((16, 8), np.uint16)
    A[0, 0], B[0, 0] = 0x1A00, 0x9A00  # bf16 2^-75, -2^-75
    D = fastmma.mma("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", A, B, np.zeros((64, 8), np.float32))
    assert _bits(D, np.float32)[0, 0] == 0x00000000


def test_q2_f16_c_f32_d_sums_in_f32_mode():
    """q2: .f32.f16 (f16 C): A[0,0]=B[0,0]=2^-24, C=0 gives 2^-48 exactly (zero terms at 2^-133)."""
    for shape, (m, n) in (("m16n16k16", (16, 16)), ("m8n32k16", (8, 32)), ("m32n8k16", (32, 8))):
        A = np.zeros((m, 16), np.uint16)
        B = np.zeros((16, n), np.uint16)
        A[0, 0] = B[0, 0] = 0x0001
        D = fastmma.mma(f"wmma.mma.sync.aligned.row.col.{shape}.f32.f16", A, B, np.zeros((m, n), np.uint16))
        assert _bits(D, np.float32)[0, 0] == 0x27800000, shape


def test_q2_subnormal_f16_c_enters_as_f32():
    A = np.zeros((16, 16), np.uint16)
    B = np.zeros((16, 16), np.uint16)
    A[0, 0] = B[0, 0] = 0x0001          # product 2^-48
    C = np.zeros((16, 16), np.uint16)
    C[0, 0] = 0x8001                    # -2^-24 (f16 subnormal)
    D = fastmma.mma("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f16", A, B, C)
    assert _bits(D, np.float32)[0, 0] == 0xB37FFFFF   # -(2^-24 - 2^-48), exact


def test_q7_f16_d_from_f32_c_rounds_twice():
    A = np.zeros((16, 16), np.uint16)
    B = np.zeros((16, 16), np.uint16)
    A[0, :3] = [0x3C00, 0x1000, 0x0C00]   # 1, 2^-11, 2^-12
    B[:3, 0] = [0x3C00, 0x3C00, 0x0C00]   # 1, 1, 2^-12: sum 1 + 2^-11 + 2^-24
    D = fastmma.mma("wmma.mma.sync.aligned.row.col.m16n16k16.f16.f32", A, B, np.zeros((16, 16), np.float32))
    assert _bits(D, np.float16)[0, 0] == 0x3C00


def test_q7_f16_d_from_f32_c_keeps_the_sign_of_a_tiny_f32():
    """The second rounding (f32 -> f16) keeps the sign: C = -2^-149, no products: -0."""
    C = np.zeros((16, 16), np.uint32)
    C[0, 0] = 0x80000001
    z = np.zeros((16, 16), np.uint16)
    D = fastmma.mma("wmma.mma.sync.aligned.row.col.m16n16k16.f16.f32", z, z, C)
    assert _bits(D, np.float16)[0, 0] == 0x8000


def test_q7_f16_mode_zero_is_plus_zero():
    A = np.zeros((16, 16), np.uint16)
    B = np.zeros((16, 16), np.uint16)
    A[0, 0], B[0, 0] = 0x0010, 0x8001   # 2^-20 * -2^-24 = -2^-44, C = +0
    D = fastmma.mma("wmma.mma.sync.aligned.row.col.m16n16k16.f16.f16", A, B, np.zeros((16, 16), np.uint16))
    assert _bits(D, np.float16)[0, 0] == 0x0000


F64 = "wmma.mma.sync.aligned.row.col.m8n8k4.{}.f64.f64.f64.f64"


def _f64_case(a0, b0, c, k=0):
    A = np.zeros((8, 4), np.uint64)
    B = np.zeros((4, 8), np.uint64)
    A[0, k], B[k, 0] = a0, b0
    C = np.zeros((8, 8), np.uint64)
    C[0, 0] = c
    return A, B, C


@pytest.mark.parametrize("rnd", ["rn", "rz", "rm", "rp"])
def test_q4_f64_nan_priority_and_zero_sign(rnd):
    one = 0x3FF0000000000000
    cases = [  # (A[0,k], B[k,0], C[0,0], k) -> D[0,0], as recorded (other A, B elements +0)
        ((one, 0x7FF80000000000B1, 0x7FF0000000000C0D, 0), 0x7FF80000000000B1),  # quiet B beats signalling C
        ((0x7FF80000000000A1, 0x7FF00000000000B2, 0x7FF8000000000C0C, 0), 0x7FF80000000000B2),  # sig. B beats quiet A, C
        ((0x7FF00000000000A2, one, 0x7FF8000000000C0C, 0), 0x7FF8000000000C0C),  # accumulator beats A
        ((0x7FF0000000000000, 0, 0xFFF0000000000C0E, 0), 0xFFF8000000000C0E),    # NaN C beats inf*0
        ((0x7FF0000000000000, one, 0xFFF0000000000000, 0), 0xFFF8000000000000),  # inf - inf
        ((0x3FF8000000000000, 0x4000000000000000, 0xC008000000000000, 3),        # 1.5*2 - 3 = 0
         0x8000000000000000 if rnd == "rm" else 0),
    ]
    for (a, b, c, k), want in cases:
        D = fastmma.mma(F64.format(rnd), *_f64_case(a, b, c, k))
        assert _bits(D, np.float64)[0, 0] == want, (rnd, hex(a), hex(b), hex(c))


# ----------------------------------------------------------------------------------------------
# Q3: which copy of a duplicated f16 fragment register wmma.mma reads
# ----------------------------------------------------------------------------------------------

def _copies():
    z = np.load(COPIES)
    meta = json.loads(bytes(z["meta"]).decode())
    return z, meta["variants"]


def test_q3_every_experiment():
    """Fragments made by hand (wmma.load, then registers overwritten as the kernel did) give the
    D the H100 computed, for every experiment of every probed variant."""
    z, variants = _copies()
    for v in variants:
        p = v["prefix"]
        la, lb, lc, mm, _ = (t.split(" {")[0].split(" [")[0] for t in v["ptx"])
        a = wmma.load(la, z[p + "a_mem"], 0, int(z[p + "lda"]))
        b = wmma.load(lb, z[p + "b_mem"], 0, int(z[p + "ldb"]))
        c = wmma.load(lc, z[p + "c_mem"], 0, int(z[p + "ldc"]))
        for e, label in enumerate(v["experiments"]):
            frags = []
            for x, f in (("a", a), ("b", b)):
                f = f.copy()
                mask, repl = int(z[p + f"{x}_mask"][e]), np.uint32(z[p + f"{x}_repl"][e])
                for r in range(f.shape[1]):
                    if mask >> r & 1:
                        f[:, r] = repl
                np.testing.assert_array_equal(f, z[p + f"{x}_frag"][e])
                frags.append(f)
            d = wmma.mma(mm, frags[0], frags[1], c)
            np.testing.assert_array_equal(d, z[p + "d_frag"][e], err_msg=f"{v['variant']}: {label}")


# D row 0 recorded on the H100 (f32, row.col) for the probe's A and B (integers 2..5 and 1..4):
# overwriting the copies (registers >= U) changes nothing; overwriting the first registers does.
Q3_ROW0 = {
    "m16n16k16": {
        "baseline": [144, 135, 112, 119, 157, 166, 108, 143, 116, 159, 146, 141, 123, 118, 154, 161],
        "a registers 4-7 := 0x3C003C00": [144, 135, 112, 119, 157, 166, 108, 143, 116, 159, 146, 141, 123, 118, 154, 161],
        "a registers 0-3 := 0x3C003C00": [40, 39, 33, 36, 45, 48, 33, 41, 34, 47, 41, 41, 35, 33, 47, 47],
        "b registers 4-7 := 0x3C003C00": [144, 135, 112, 119, 157, 166, 108, 143, 116, 159, 146, 141, 123, 118, 154, 161],
        "b registers 0-3 := 0x3C003C00": [55] * 16,
    },
    "m32n8k16": {
        "baseline": [137, 149, 110, 139, 164, 149, 177, 130],
        "b registers 4-7 := 0x3C003C00": [137, 149, 110, 139, 164, 149, 177, 130],
        "b registers 0-3 := 0x3C003C00": [56] * 8,
    },
    "m8n32k16": {
        "baseline": [131, 143, 114, 120, 130, 138, 132, 115, 142, 120, 152, 139, 133, 159, 155, 183,
                     126, 108, 101, 141, 111, 138, 151, 140, 132, 137, 122, 130, 129, 120, 126, 124],
        "a registers 4-7 := 0x3C003C00": [131, 143, 114, 120, 130, 138, 132, 115, 142, 120, 152, 139, 133, 159,
                                          155, 183, 126, 108, 101, 141, 111, 138, 151, 140, 132, 137, 122, 130,
                                          129, 120, 126, 124],
        "a registers 0-3 := 0x3C003C00": [35, 43, 37, 38, 39, 41, 39, 36, 40, 37, 47, 41, 35, 45, 46, 55,
                                          40, 32, 31, 42, 33, 39, 44, 41, 41, 43, 39, 37, 39, 39, 38, 35],
    },
}


@pytest.mark.parametrize("shape", sorted(Q3_ROW0))
def test_q3_mma_reads_the_lowest_copy(shape):
    """The rule: an f16 A/B fragment register r >= U (U = 4 for m16n16k16 A and B, 2 for m8n32k16 A
    and m32n8k16 B) is never read by wmma.mma; element copies come from register r % U."""
    z, variants = _copies()
    (v,) = [v for v in variants if v["qualifiers"]["shape"] == shape and v["qualifiers"]["dtype"] == "f32"
            and v["qualifiers"]["alayout"] == "row"]
    p = v["prefix"]
    la, lb, lc, mm, _ = (t.split(" {")[0].split(" [")[0] for t in v["ptx"])
    a = wmma.load(la, z[p + "a_mem"], 0, int(z[p + "lda"]))
    b = wmma.load(lb, z[p + "b_mem"], 0, int(z[p + "ldb"]))
    c = wmma.load(lc, z[p + "c_mem"], 0, int(z[p + "ldc"]))
    from fastmma.layout.wmma_fragments import fragment_layout, unpack_fragment

    for label, row0 in Q3_ROW0[shape].items():
        fa, fb = a.copy(), b.copy()
        if label != "baseline":
            regs = slice(4, 8) if "4-7" in label else slice(0, 4)
            (fa if label.startswith("a") else fb)[:, regs] = 0x3C003C00
        d = wmma.mma(mm, fa, fb, c)
        D = unpack_fragment(d, fragment_layout("d", shape, "f32")).view(np.float32)
        assert D[0].tolist() == row0, label
