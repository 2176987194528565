"""``wgmma.mma_async.sp`` (PTX ISA 9.7.15.6) against the q16 recordings of an H200
(tests/golden/probes/q16_wgmma_sp) and the ISA's text: the register level, the logical-matrix
level, the Warpgroup's asynchronous machine and the PTX interpreter."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fastmma
from fastmma import Warpgroup, ptx, wgmma
from fastmma.errors import HazardError, InvalidInstructionError, OperandError
from fastmma.conform import load_recording
from fastmma.isa import FusedDotRule, IntDotRule, WgmmaMmaAsync, WgmmaMmaAsyncSp, parse
from fastmma.layout.descriptor import MatrixDescriptor, element_addresses
from fastmma.layout.sparse_metadata import encode_warpgroup_metadata, kept_columns, warpgroup_kept_columns
from fastmma.layout.wgmma_fragments import pack_a, pack_d, unpack_d

Q16 = Path(__file__).parent / "golden" / "probes" / "q16_wgmma_sp"
NUMBER_FILES = sorted(Q16.glob("*.npz"))
METADATA_FILES = sorted((Q16 / "metadata").glob("*.npz"))
B_ADDRESS_FILES = sorted((Q16 / "b_address").glob("*.npz"))


def _source(inst, z, i=slice(None)):
    return {"a_regs": z["a_regs"][i]} if inst.a_source == "reg" else {"a_desc": z["a_desc"][i]}


def test_the_recordings_are_there():
    assert len(NUMBER_FILES) == 27 and len(METADATA_FILES) == 20 and len(B_ADDRESS_FILES) == 4


@pytest.mark.parametrize("path", NUMBER_FILES[::5] + METADATA_FILES[::7], ids=lambda p: p.stem)
def test_recorded_cases_warpgroup_by_warpgroup(path):
    """The one-instruction call (the stack call replays every file: tests/test_probes.py)."""
    z, meta = load_recording(path)
    inst = parse(meta["ptx"][1])
    for i in range(0, len(z["mode"]), 4):
        src = {k: (int(v) if k == "a_desc" else v) for k, v in _source(inst, z, i).items()}
        d = wgmma.mma_async_sp(inst, z["c_regs"][i], e_regs=z["e_regs"][i], b_desc=int(z["b_desc"][i]),
                               smem=z["smem"][i], scale_d=bool(z["scale_d"][i]), **src)
        np.testing.assert_array_equal(d, z["d_regs"][i], err_msg=f"case {i}")


# ------------------------------------------------------------------------- where the metadata lives


def _uniform_metadata(nibble):
    return np.full(128, sum(nibble << (4 * s) for s in range(8)), np.uint32)


def test_each_warp_holds_its_16_rows_as_one_mma_sp():
    """Row 35 is row 3 of warp 2; f16 m64nNk32 with selector 1 keeps its chunk 5 in thread
    64 + 4*3 + 2 + 1 = 79, nibble 1 (the map of mma.sp .m16n8k32, recorded for wgmma too)."""
    e = _uniform_metadata(0x4)  # every chunk keeps places 0 and 1
    e[79] = (e[79] & ~np.uint32(0xF0)) | np.uint32(0xE0)  # chunk 5 of row 35: places 2 and 3
    e[76] = 0  # not a selected thread under selector 1: never read
    cols = warpgroup_kept_columns(e, "f16", "m16n8k32", 1)
    expected = np.array([[4 * q, 4 * q + 1] for q in range(8)]).reshape(16)
    for row in range(64):
        want = expected.copy()
        if row == 35:
            want[10:12] = (22, 23)
        np.testing.assert_array_equal(cols[row], want, err_msg=f"row {row}")
    # the same words, read as four warps of mma.sp
    np.testing.assert_array_equal(cols, kept_columns(e.reshape(4, 32), "f16", "m16n8k32", 1, "sp").reshape(64, 16))


@pytest.mark.parametrize("atype,shape,selector", [("f16", "m16n8k32", 0), ("f16", "m16n8k32", 1),
                                                   ("tf32", "m16n8k16", 1), ("e4m3", "m16n8k64", 0),
                                                   ("s8", "m16n8k64", 0)])
def test_encode_warpgroup_metadata_round_trips(atype, shape, selector):
    rng = np.random.default_rng(7)
    k = int(shape.split("k")[1])
    chunk = 2 if atype == "tf32" else 4
    per = chunk // 2
    places = np.stack([np.sort(rng.permutation(chunk)[:per]) for _ in range(64 * k // chunk)])
    cols = (places + chunk * (np.arange(64 * k // chunk) % (k // chunk))[:, None]).reshape(64, k // 2)
    e = encode_warpgroup_metadata(cols, atype, shape, selector)
    np.testing.assert_array_equal(warpgroup_kept_columns(e, atype, shape, selector), cols)


@pytest.mark.parametrize("path", METADATA_FILES, ids=lambda p: p.stem)
def test_metadata_cases_read_the_dense_a_off_the_hardware(path):
    """Each metadata case's B picks k = 8 s + j for column j and A holds base-7 digits of its
    compressed index: D spells out, for every row, which compressed element sat at which dense
    column, and that must be where the metadata (read by the recorded map) put it."""
    z, meta = load_recording(path)
    q = meta["qualifiers"]
    k, kc = q["k"], q["k"] // 2
    inst = parse(meta["ptx"][1])
    per_draw = (k // 8) * 4
    for d0 in range(0, len(z["mode"]), per_draw):
        index = np.zeros((64, k), np.int64)
        for c in range(d0, d0 + per_draw):
            label = meta["case_labels"][c]
            s = int(label.split("k = ")[1].split("..")[0]) // 8
            digit = int(label.split("digit ")[1][0])
            D = unpack_d(z["d_regs"][c], q["dtype"], q["n"])[:, :8]
            v = D.view(np.float32).astype(np.int64) if q["dtype"] == "f32" else D.view(np.int32).astype(np.int64)
            index[:, 8 * s:8 * s + 8] += np.where(v > 0, v - 1, -(10 ** 6)) * 7 ** digit
        cols = warpgroup_kept_columns(z["e_regs"][d0][:, 0], q["atype"], inst.metadata_shape, inst.selector)
        expected = np.full((64, k), -1)
        expected[np.arange(64)[:, None], cols] = np.arange(64 * kc).reshape(64, kc)
        np.testing.assert_array_equal(np.where(index < 0, -1, index), expected, err_msg=f"draw at case {d0}")


def test_b_address_cases_find_the_second_32_bytes_of_k_at_lbo():
    """Every image slot holds digits of its own element address; row i of A keeps one element,
    so D[i, j] names the address the hardware read B(k_i, j) from (32B swizzle: LBO beyond the
    footprint in some cases)."""
    checked = 0
    for path in B_ADDRESS_FILES:
        z, meta = load_recording(path)
        q = meta["qualifiers"]
        k, n, bt = q["k"], q["n"], q["btype"]
        width = {"f16": 2, "tf32": 4, "u8": 1}[bt]
        base, off = (256, 0) if width == 1 else (1024, 1)
        major = "MN" if q["imm_trans_b"] else "K"
        for c, label in enumerate(meta["case_labels"]):
            nibble = 0x4 if "0x4" in label else 0xE
            digit = int(label.split("digit ")[1][0])
            byte, _ = element_addresses(MatrixDescriptor.decode(int(z["b_desc"][c])), n, k, 8 * width, major)
            D = unpack_d(z["d_regs"][c], q["dtype"], n)
            got = (D.view(np.float32) if q["dtype"] == "f32" else D.view(np.int32)).astype(np.int64) - off
            comp = np.arange(64) % (k // 2)
            if bt == "tf32":
                k_of_row = 2 * comp + (nibble == 0xE)
            else:
                k_of_row = 4 * (comp // 2) + np.where(comp % 2 == 0, nibble & 3, nibble >> 2)
            want = (byte.T[k_of_row] // width // base ** digit) % base
            np.testing.assert_array_equal(got, want, err_msg=f"{path.stem} case {c}")
            checked += 1
    assert checked == 64


def test_undefined_metadata_is_refused_by_name():
    e = _uniform_metadata(0x4)
    e[37] = (e[37] & ~np.uint32(0xF00)) | np.uint32(0x500)  # 0b0101: both indices 1
    with pytest.raises(OperandError, match=r"wgmma.mma_async.sp metadata.*warp \(1,\).*0b0101"):
        warpgroup_kept_columns(e, "f16", "m16n8k32", 0)
    with pytest.raises(OperandError, match="0b1111"):
        warpgroup_kept_columns(_uniform_metadata(0xF), "s8", "m16n8k64", 0)
    with pytest.raises(OperandError, match="0b0100, 0b1110"):  # .tf32 keeps one of two
        warpgroup_kept_columns(_uniform_metadata(0x8), "tf32", "m16n8k16", 0)


def test_fp8_takes_indices_in_either_order():
    """Recorded (metadata/...e4m3...unordered): wgmma.mma_async.sp's fp8 honours a pair given
    high index first, which mma.sp's fp8 form leaves undefined."""
    cols = warpgroup_kept_columns(_uniform_metadata(0x1 | (0x0 << 2)), "e4m3", "m16n8k64", 0)
    np.testing.assert_array_equal(cols[0, :4], [1, 0, 5, 4])
    with pytest.raises(OperandError):
        kept_columns(_uniform_metadata(0x1).reshape(4, 32), "e4m3", "m16n8k64", 0, "sp")


# ------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("text,rule", [
    ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16", FusedDotRule(16, 25, -133, 23, "rz")),
    ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f16.f16.f16", FusedDotRule(16, 25, -21, 10, "rne", "f16")),
    ("wgmma.mma_async.sp.sync.aligned.m64n8k16.f32.tf32.tf32", FusedDotRule(8, 25, -133, 23, "rz")),
    ("wgmma.mma_async.sp.sync.aligned.m64n8k64.f16.e5m2.e4m3", FusedDotRule(32, 13, -21, 10, "rne", "f16")),
    ("wgmma.mma_async.sp.sync.aligned.m64n8k64.s32.u8.s8.satfinite", IntDotRule(32, True)),
])
def test_rules_are_the_dense_ones_of_half_the_k(text, rule):
    assert parse(text).rule == rule


def _dense(A_kept, cols, k):
    dense = np.zeros(A_kept.shape[:-1] + (k,), np.float64)
    np.put_along_axis(dense, cols, A_kept.astype(np.float64), axis=-1)
    return dense


def _random_columns(rng, rows, k, chunk=4):
    per = chunk // 2
    places = np.stack([np.sort(rng.permutation(chunk)[:per]) for _ in range(rows * k // chunk)])
    return (places + chunk * (np.arange(rows * k // chunk) % (k // chunk))[:, None]).reshape(rows, k // 2)


def test_logical_matrices_integers_against_numpy():
    """s8 x u8: D is the exact dot of the kept products (wrapped), an independent numpy sum."""
    rng = np.random.default_rng(3)
    inst = "wgmma.mma_async.sp.sync.aligned.m64n24k64.s32.s8.u8"
    A = rng.integers(-128, 128, (64, 32)).astype(np.int8)
    B = rng.integers(0, 256, (64, 24)).astype(np.uint8)
    C = rng.integers(-2 ** 31, 2 ** 31, (64, 24)).astype(np.int32)
    cols = _random_columns(rng, 64, 64)
    D = fastmma.mma_sp(inst, A, cols, B, C)
    exact = (_dense(A, cols, 64).astype(np.int64) @ B.astype(np.int64)) + C
    np.testing.assert_array_equal(D, ((exact + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))
    with pytest.raises(OperandError, match="two different places"):
        fastmma.mma_sp(inst, A, np.zeros((64, 32), int), B, C)


def test_logical_and_register_levels_agree_with_numpy_on_exact_data():
    """f16 small integers (every sum exact in f32): the logical call, the register call (A
    and B placed through descriptors, 128B swizzle for B) and numpy's product agree; imm-scale-a
    -1 negates, and scale-d false drops C."""
    rng = np.random.default_rng(5)
    text = "wgmma.mma_async.sp.sync.aligned.m64n16k32.f32.f16.f16"
    A = rng.integers(-8, 9, (64, 16)).astype(np.float16)
    B = rng.integers(-8, 9, (32, 16)).astype(np.float16)
    C = rng.integers(-100, 100, (64, 16)).astype(np.float32)
    cols = _random_columns(rng, 64, 32)
    want = _dense(A, cols, 32) @ B.astype(np.float64) + C
    np.testing.assert_array_equal(fastmma.mma_sp(text, A, cols, B, C), want.astype(np.float32))
    smem = np.zeros(8192, np.uint8)
    a_desc = MatrixDescriptor(0, 128, 256)  # K-major, no swizzle: 64 x 16 f16
    b_desc = MatrixDescriptor(4096, 16, 1024, 0, "128B")  # N x K, 64 bytes of K a row
    for desc, mat in ((a_desc, A), (b_desc, B.T)):
        byte, _ = element_addresses(desc, *mat.shape, 16, "K")
        bits = np.ascontiguousarray(mat).view(np.uint16)
        smem[byte] = bits & 0xFF
        smem[byte + 1] = bits >> 8
    e = encode_warpgroup_metadata(cols, "f16", "m16n8k32", 0)
    inst = parse(text + " {" + ", ".join(f"%f{i}" for i in range(8)) + "}, %rd1, %rd2, %r1, 0, p, -1, 1, 0, 0;")
    d = wgmma.mma_async_sp(inst, pack_d(C, "f32"), e_regs=e, a_desc=a_desc, b_desc=b_desc, smem=smem)
    np.testing.assert_array_equal(unpack_d(d, "f32", 16).view(np.float32), (C - (want - C)).astype(np.float32))
    d = wgmma.mma_async_sp(inst, pack_d(C, "f32"), e_regs=e[:, None], a_regs=None, a_desc=a_desc.encode(),
                           b_desc=b_desc, smem=smem, scale_d=False)
    np.testing.assert_array_equal(unpack_d(d, "f32", 16).view(np.float32), (-(want - C)).astype(np.float32))
    # A from registers: the compressed A in the dense A fragment map of K/2
    reg = parse(text + " {" + ", ".join(f"%f{i}" for i in range(8)) + "}, {%r1, %r2, %r3, %r4}, %rd2, %r5, 0, p, "
                "1, 1, 0;")
    d = wgmma.mma_async_sp(reg, pack_d(C, "f32"), e_regs=e, a_regs=pack_a(A, "f16"), b_desc=b_desc, smem=smem)
    np.testing.assert_array_equal(unpack_d(d, "f32", 16).view(np.float32), want.astype(np.float32))


def test_pruned_elements_take_no_part():
    """An infinity of B facing an element the metadata leaves out does not reach D."""
    A = np.ones((64, 16), ml_dtypes.bfloat16)
    B = np.ones((32, 8), ml_dtypes.bfloat16)
    B[2] = np.inf  # dense column 2: never kept below
    cols = np.tile(np.array([[4 * q, 4 * q + 1] for q in range(8)]).reshape(16), (64, 1))
    D = fastmma.mma_sp("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.bf16.bf16", A, cols, B)
    np.testing.assert_array_equal(D, np.full((64, 8), 16, np.float32))


@pytest.mark.parametrize("chunk", [None, 1])
def test_stacks_broadcast(chunk, monkeypatch):
    """A 2 x 2 stack, whole and (``STACK_CHUNK_BYTES`` = 1) one warpgroup a part."""
    if chunk is not None:
        monkeypatch.setattr(wgmma, "STACK_CHUNK_BYTES", chunk)
    z, meta = load_recording(NUMBER_FILES[0])
    inst = parse(meta["ptx"][1])
    d = wgmma.mma_async_sp_stack(inst, z["c_regs"][:4].reshape(2, 2, 128, -1), e_regs=z["e_regs"][:4, :, 0].reshape(
        2, 2, 128), b_desc=z["b_desc"][:4].reshape(2, 2), smem=z["smem"][:4].reshape(2, 2, -1),
        scale_d=z["scale_d"][:4].reshape(2, 2).astype(bool), **{k: v[:4].reshape((2, 2) + v.shape[1:])
                                                              for k, v in _source(inst, z).items()})
    np.testing.assert_array_equal(d.reshape(z["d_regs"][:4].shape), z["d_regs"][:4])


# ------------------------------------------------------------------------- the ISA's syntax


def test_parser_takes_every_sparse_row_and_refuses_the_rest():
    ok = {"f16": "m64n256k32.f16.f16.f16", "bf16": "m64n8k32.f32.bf16.bf16", "tf32": "m64n128k16.f32.tf32.tf32",
          "fp8": "m64n64k64.f16.e5m2.e4m3", "int": "m64n224k64.s32.u8.u8.satfinite"}
    for form in ok.values():
        inst = parse(f"wgmma.mma_async.sp.sync.aligned.{form}")
        assert isinstance(inst, WgmmaMmaAsyncSp) and not isinstance(inst, WgmmaMmaAsync)
    for text, needle in [
        ("wgmma.mma_async.sp.sync.aligned.m64n8k512.s32.b1.b1", "valid .atype/.btype pairs"),
        ("wgmma.mma_async.sp.sync.aligned.m64n40k64.s32.s8.s8", "N in"),
        ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f16.bf16.bf16", ".dtype .f16 is not valid"),
        ("wgmma.mma_async.sp.sync.aligned.m64n8k64.f32.e4m3.e4m3.satfinite", ".satfinite"),
        ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {a, b, c, d}, x, y, e, 2, p, 1, 1, 0, 0;",
         "sp-sel must be an integer constant in 0, 1"),
        ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {a, b, c, d}, x, y, 5, 0, p, 1, 1, 0, 0;",
         "sp-meta"),
        ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {a, b, c, d}, x, y, e, 0, p, 1, 1;",
         "sp-meta, sp-sel, scale-d"),
        ("wgmma.mma_async.sp.sync.aligned.m64n8k16.f32.tf32.tf32 {a, b, c, d}, {q, r, s, t}, y, e, 0, p, 1, 1, 0;",
         "takes 8 operands (d, a, b-desc, sp-meta, sp-sel, scale-d, imm-scale-a, imm-scale-b), got 9"),
    ]:
        with pytest.raises(InvalidInstructionError) as info:
            parse(text)
        assert needle in str(info.value), (text, str(info.value))
    inst = parse("wgmma.mma_async.sp.sync.aligned.m64n8k16.f32.tf32.tf32 {a, b, c, d}, {q, r, s, t}, y, e, 1, p, 1, -1;")
    assert inst.selector == 1 and inst.a_source == "reg" and inst.imm_scale_b == -1 and inst.metadata_shape == "m16n8k16"


def test_register_call_checks_its_operands():
    z, meta = load_recording(NUMBER_FILES[0])
    inst = parse(meta["ptx"][1])
    kw = dict(b_desc=int(z["b_desc"][0]), smem=z["smem"][0], **{k: (int(v) if k == "a_desc" else v) for k, v in
                                                                 _source(inst, z, 0).items()})
    with pytest.raises(OperandError, match="disagrees"):
        wgmma.mma_async_sp(inst, z["c_regs"][0], e_regs=z["e_regs"][0], selector=1 - inst.selector, **kw)
    with pytest.raises(OperandError, match="e_regs"):
        wgmma.mma_async_sp(inst, z["c_regs"][0], e_regs=z["e_regs"][0][:64], **kw)
    bare = parse(meta["ptx"][1].split(" {")[0])
    with pytest.raises(OperandError, match="needs its sparsity selector"):
        wgmma.mma_async_sp(bare, z["c_regs"][0], e_regs=z["e_regs"][0], **kw)
    with pytest.raises(InvalidInstructionError, match="fastmma.wgmma.mma_async_sp"):
        wgmma.mma_async(inst, z["c_regs"][0], **kw)


# ------------------------------------------------------------------------- the Warpgroup and PTX


def _first_accumulating(z):
    return int(np.flatnonzero(z["scale_d"])[0])


def _a_desc_file():
    return next(p for p in NUMBER_FILES if ".adesc." in p.name and "m64n8k" in p.name)


def test_warpgroup_runs_a_recorded_case_and_reads_sp_meta_at_issue():
    z, meta = load_recording(_a_desc_file())
    i = _first_accumulating(z)
    inst = parse(meta["ptx"][1])
    ops = inst.operands
    wg = Warpgroup(z["smem"][i])
    d_names = list(ops[0].regs)
    wg.write(d_names, z["c_regs"][i])
    wg.write(ops[1].name, np.full(128, z["a_desc"][i], np.uint64))
    wg.write(ops[2].name, np.full(128, z["b_desc"][i], np.uint64))
    wg.write(ops[3].name, z["e_regs"][i][:, 0])
    wg.write("p", np.ones(128, bool))
    wg.fence()
    wg.execute(inst)
    wg.write(ops[3].name, np.zeros(128, np.uint32))  # sp-meta is not an in-flight operand (9.7.15.7.1)
    wg.commit_group()
    with pytest.raises(HazardError):
        wg.read(d_names)
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(d_names), z["d_regs"][i])


def test_warpgroup_sparse_chain_and_its_hazards():
    """Two same-shape .sp in one group chain their accumulators; the A fragment of an
    in-flight .sp may not be written, and registers written since the last fence may not be
    read by an issue."""
    rng = np.random.default_rng(11)
    A = [rng.integers(-4, 5, (64, 16)).astype(np.float16) for _ in range(2)]
    B = rng.integers(-4, 5, (32, 8)).astype(np.float16)
    cols = [_random_columns(rng, 64, 32) for _ in range(2)]
    smem = np.zeros(4096, np.uint8)
    byte, _ = element_addresses(MatrixDescriptor(0, 128, 256), 8, 32, 16, "K")
    bits = np.ascontiguousarray(B.T).view(np.uint16)
    smem[byte], smem[byte + 1] = bits & 0xFF, bits >> 8
    wg = Warpgroup(smem)
    d = ["d0", "d1", "d2", "d3"]
    wg.write(d, np.zeros((128, 4), np.uint32))
    wg.write("bd", np.full(128, MatrixDescriptor(0, 128, 256).encode(), np.uint64))
    texts = []
    for step, a in enumerate(("a", "b")):
        wg.write([f"{a}{r}" for r in range(4)], pack_a(A[step], "f16"))
        wg.write(f"e{step}", encode_warpgroup_metadata(cols[step], "f16", "m16n8k32", 0))
        texts.append(f"wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {{d0, d1, d2, d3}}, "
                     f"{{{a}0, {a}1, {a}2, {a}3}}, bd, e{step}, 0, 1, 1, 1, 0;")
    with pytest.raises(HazardError, match="no prior wgmma.fence"):
        wg.execute(texts[0])
    wg.fence()
    wg.execute(texts[0])
    with pytest.raises(HazardError, match="A fragment"):
        wg.write("a0", np.zeros(128, np.uint32))
    wg.write("b0", wg.read("b0"))  # a thread touches b0 after the fence: the next issue needs another
    with pytest.raises(HazardError, match="after the last wgmma.fence"):
        wg.execute(texts[1])
    wg.fence()
    wg.execute(texts[1])
    wg.commit_group()
    wg.wait_group(0)
    want = sum(_dense(a, c, 32) @ B.astype(np.float64) for a, c in zip(A, cols))
    np.testing.assert_array_equal(wg.read(d).view(np.uint32), pack_d(want.astype(np.float32), "f32"))


def test_ptx_interpreter_runs_wgmma_sp():
    z, meta = load_recording(_a_desc_file())
    i = _first_accumulating(z)
    text = meta["ptx"][1]
    inst = parse(text)
    ops = inst.operands
    nd = inst.d_regs
    body = text.replace(ops[0].text, "{" + ", ".join(f"d{r}" for r in range(nd)) + "}", 1)
    body = body.replace(f"{ops[1].text}, {ops[2].text}, {ops[3].text},", "da, db, e,", 1)
    regs = {f"d{r}": z["c_regs"][i][:, r] for r in range(nd)}
    regs.update(da=np.full(128, z["a_desc"][i], np.uint64), db=np.full(128, z["b_desc"][i], np.uint64),
                e=z["e_regs"][i][:, 0])
    program = (f".reg .b32 d<{nd}>;\n.reg .b64 da, db;\n.reg .b32 e;\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               f"wgmma.fence.sync.aligned;\n{body}\nwgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;")
    m = ptx.run(program, regs, smem=z["smem"][i])
    got = np.stack([np.asarray(m[f"d{r}"]).view(np.uint32) for r in range(nd)], axis=1)
    np.testing.assert_array_equal(got, z["d_regs"][i])
    with pytest.raises(InvalidInstructionError, match="operand sp-meta: e is .b64; it must be 32-bit"):
        ptx.run(program.replace(".reg .b32 e;", ".reg .b64 e;"), {**regs, "e": regs["e"].astype(np.uint64)},
                smem=z["smem"][i])


def test_explain_names_the_metadata(capsys):
    from fastmma.cli import main

    assert main(["explain", "wgmma.mma_async.sp.sync.aligned.m64n8k64.f32.e4m3.e4m3"]) == 0
    out = capsys.readouterr().out
    assert "A 64x32 (compressed" in out and "mma.sp .m16n8k64" in out and "32 kept products" in out
