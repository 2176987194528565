"""``mma.sync`` (fastmma.mma_sync): the ISA's fragment maps, the sm_90 recordings of every form
(tests/golden/probes/q10_mma_sync) through each entry point, and the rules they settled,
written out as literal checks on hand-made operands."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fastmma
from fastmma import mma_sync
from fastmma.errors import InvalidInstructionError, OperandError
from fastmma.isa import MmaSync, parse
from fastmma.kernels.converted_sum import add_nearest, to_f16
from fastmma.layout.mma_fragments import fragment_layout
from fastmma.layout.wmma_fragments import pack_fragment, unpack_fragment

Q10 = Path(__file__).parent / "golden" / "probes" / "q10_mma_sync"
FILES = sorted(Q10.glob("*.npz"))
Q11 = Path(__file__).parent / "golden" / "probes" / "q11_mma_sync_k_loop"


def _load(path):
    with np.load(path) as d:
        arrays = {k: d[k] for k in d.files}
    return arrays, json.loads(bytes(arrays.pop("meta")).decode())


def test_every_form_was_recorded():
    assert len(FILES) == 82
    forms = {_load(p)[1]["qualifiers"]["atype"] for p in FILES}
    assert forms == {"f16", "bf16", "tf32", "e4m3", "e5m2", "f64", "s8", "u8", "s4", "u4", "b1"}


# ---------------------------------------------------------------- fragment maps, from the ISA's text

def _lanes():
    lane = np.arange(32)
    return lane >> 2, lane % 4


def _isa_m16n8k16_f16(matrix):
    """PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", as written there."""
    g, t = _lanes()
    out = []
    if matrix == "a":  # a0..a7
        for i in range(8):
            row = g if i in (0, 1, 4, 5) else g + 8
            col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
            out.append(row * 16 + col)
    elif matrix == "b":  # b0..b3
        for i in range(4):
            out.append((t * 2 + (i & 1) + (8 if i >= 2 else 0)) * 8 + g)
    else:  # c0..c3
        for i in range(4):
            out.append((g if i < 2 else g + 8) * 8 + t * 2 + (i & 1))
    return np.stack(out, axis=1)


def _isa_m16n8k8_tf32_a():
    g, t = _lanes()
    rows = [g, g + 8, g, g + 8]
    cols = [t, t, t + 4, t + 4]
    return np.stack([r * 8 + c for r, c in zip(rows, cols)], axis=1)


def _isa_m16n8k32_s8_a():
    g, t = _lanes()
    out = []
    for i in range(16):
        row = g if i < 4 or 8 <= i < 12 else g + 8
        col = t * 4 + (i & 3) + (16 if i >= 8 else 0)
        out.append(row * 32 + col)
    return np.stack(out, axis=1)


def _isa_m16n8k256_b1_a():
    g, t = _lanes()
    out = []
    for i in range(128):
        row = g if i < 32 or 64 <= i < 96 else g + 8
        col = t * 32 + (i & 31) + (128 if i >= 64 else 0)
        out.append(row * 256 + col)
    return np.stack(out, axis=1)


def _isa_m8n8k4_f64(matrix):
    g, t = _lanes()
    if matrix == "a":
        return (g * 4 + t)[:, None]
    if matrix == "b":
        return (t * 8 + g)[:, None]
    return np.stack([g * 8 + 2 * t, g * 8 + 2 * t + 1], axis=1)


@pytest.mark.parametrize("matrix, shape, elem, expected", [
    ("a", "m16n8k16", "f16", _isa_m16n8k16_f16("a")),
    ("b", "m16n8k16", "f16", _isa_m16n8k16_f16("b")),
    ("c", "m16n8k16", "f32", _isa_m16n8k16_f16("c")),
    ("d", "m16n8k16", "f16", _isa_m16n8k16_f16("c")),
    ("a", "m16n8k8", "tf32", _isa_m16n8k8_tf32_a()),
    ("a", "m16n8k32", "s8", _isa_m16n8k32_s8_a()),
    ("a", "m16n8k32", "e4m3", _isa_m16n8k32_s8_a()),
    ("a", "m16n8k256", "b1", _isa_m16n8k256_b1_a()),
    ("a", "m8n8k4", "f64", _isa_m8n8k4_f64("a")),
    ("b", "m8n8k4", "f64", _isa_m8n8k4_f64("b")),
    ("c", "m8n8k4", "f64", _isa_m8n8k4_f64("c")),
])
def test_fragment_map_is_the_isas(matrix, shape, elem, expected):
    np.testing.assert_array_equal(fragment_layout(matrix, shape, elem).index, expected)


def test_every_fragment_holds_each_element_once():
    for path in FILES:
        q = _load(path)[1]["qualifiers"]
        for x, t in (("a", q["atype"]), ("b", q["btype"]), ("c", q["ctype"]), ("d", q["dtype"])):
            lay = fragment_layout(x, q["shape"], t)
            assert np.array_equal(np.sort(lay.index.ravel()), np.arange(lay.rows * lay.cols)), (path.name, x)
            assert lay.words == parse(_text(q)).fragment_words(x)


def _text(q) -> str:
    extra = {"rn": ".rn"}.get(q["rounding"], "") + (".satfinite" if q["satfinite"] else "")
    popc = f".{q['op']}.popc" if q["op"] else ""
    return f"mma.sync.aligned.{q['shape']}.row.col{extra}.{q['dtype']}.{q['atype']}.{q['btype']}.{q['ctype']}{popc}"


def test_fragment_layout_errors_name_what_is_allowed():
    with pytest.raises(OperandError, match="m16n8k16"):
        fragment_layout("a", "m16n16k16", "f16")
    with pytest.raises(OperandError, match=r"\.f16, \.bf16"):
        fragment_layout("a", "m16n8k16", "s4")
    with pytest.raises(OperandError, match="matrix"):
        fragment_layout("e", "m16n8k16", "f16")


# ---------------------------------------------------------------- the recordings, every entry point

@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_recording_as_one_stack(path):
    """The whole file as one stack of warps through mma_stack, and its first case through the
    logical-matrix API, against the registers the GPU wrote."""
    arrays, meta = _load(path)
    inst = parse(meta["ptx"][0])
    d = mma_sync.mma_stack(inst, arrays["a_regs"], arrays["b_regs"], arrays["c_regs"])
    np.testing.assert_array_equal(d, arrays["d_regs"])
    q = meta["qualifiers"]
    mats = {x: unpack_fragment(arrays[f"{x}_regs"][0], fragment_layout(x, q["shape"], t))
            for x, t in (("a", q["atype"]), ("b", q["btype"]), ("c", q["ctype"]))}
    logical = {x: fastmma.formats.from_bits(m, t) for (x, m), t in zip(mats.items(), (q["atype"], q["btype"], q["ctype"]))}
    got = fastmma.mma(inst, logical["a"], logical["b"], logical["c"])
    want = unpack_fragment(arrays["d_regs"][0], fragment_layout("d", q["shape"], q["dtype"]))
    np.testing.assert_array_equal(fastmma.formats.to_bits(np.asarray(got), fastmma.formats.get_format(q["dtype"])),
                                  want)


@pytest.mark.parametrize("path", sorted(Q10.glob("*.e[45]m[23].*.npz")), ids=lambda p: p.stem)
def test_fp8_recording_through_the_reference_kernels(path, monkeypatch):
    from fastmma import conform, kernels

    monkeypatch.setattr(kernels, "FAST_KERNEL_MIN_MACS", 1 << 62)
    monkeypatch.setattr(kernels, "SMALL_KERNEL_MACS", -1)
    res = conform.check_file(path)
    assert res.error is None and res.ok, res.error or "\n".join(map(str, res.mismatches))


@pytest.mark.parametrize("path", sorted(Q11.glob("*.npz")), ids=lambda p: p.stem)
def test_q11_matmul_equals_the_recorded_k_loop(path):
    """q11: a warp's k-loop of 16 ``mma.sync`` on one accumulator.  ``fastmma.matmul`` of the
    whole A (16 x 16k) and B (16k x 8) the steps' registers hold, with the instruction's
    short form, gives the D the GPU's loop ended with."""
    arrays, meta = _load(path)
    q = meta["qualifiers"]
    assert q["chain"] == 16
    layout = {x: fragment_layout(x, q["shape"], q[f"{x}type"]) for x in "abcd"}
    short = f"{q['shape']}.{q['dtype']}.{q['atype']}.{q['btype']}.{q['ctype']}"
    from_bits, to_bits = fastmma.formats.from_bits, fastmma.formats.to_bits
    for i in range(len(arrays["mode"])):
        A = np.concatenate([unpack_fragment(r, layout["a"]) for r in arrays["a_regs"][i]], axis=1)
        B = np.concatenate([unpack_fragment(r, layout["b"]) for r in arrays["b_regs"][i]], axis=0)
        C = unpack_fragment(arrays["c_regs"][i], layout["c"])
        D = fastmma.matmul(from_bits(A, q["atype"]), from_bits(B, q["btype"]), from_bits(C, q["ctype"]),
                           instruction=short + (".satfinite" if q["satfinite"] else ""))
        want = unpack_fragment(arrays["d_regs"][i], layout["d"])
        np.testing.assert_array_equal(to_bits(D, q["dtype"]), want, err_msg=f"case {i}")


# ---------------------------------------------------------------- the rules, on hand-made operands

def _one_warp(inst_text, A, B, C):
    inst = parse(inst_text)
    s = str(inst.shape)
    regs = [pack_fragment(x, fragment_layout(m, s, t))
            for x, m, t in ((A, "a", inst.atype), (B, "b", inst.btype), (C, "c", inst.ctype))]
    d = mma_sync.mma(inst, *regs)
    return unpack_fragment(d, fragment_layout("d", s, inst.dtype))


def _bits(values, dtype, storage):
    return np.asarray(values, dtype=dtype).view(storage)


def test_tf32_m16n8k8_is_one_fused_step_of_eight():
    """1 + 2^-24 (k = 1) + 2^-24 (k = 4): one fused sum of 8 keeps both small terms, 1 + 2^-23;
    wmma's m16n16k8 (two steps of 4, each rounded toward zero) gives 1.0 for the same terms."""
    A = np.zeros((16, 8), np.float32)
    B = np.zeros((8, 8), np.float32)
    A[0, [0, 1, 4]] = [1.0, 2.0 ** -12, 2.0 ** -12]
    B[[0, 1, 4], 0] = [1.0, 2.0 ** -12, 2.0 ** -12]
    C = np.zeros((16, 8), np.float32)
    d = _one_warp("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", A.view(np.uint32), B.view(np.uint32),
                  C.view(np.uint32))
    assert d.view(np.float32)[0, 0] == np.float32(1 + 2.0 ** -23)
    wmma_d = fastmma.mma("wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32",
                         np.pad(A, ((0, 0), (0, 0))), np.pad(B, ((0, 0), (0, 8))), np.zeros((16, 16), np.float32))
    assert wmma_d[0, 0] == np.float32(1.0)


def test_fp8_adds_c_rounding_to_nearest():
    """fp8: the products' sum is formed from +0, and C is added after it with one addition to
    nearest: 256 + 3 * 2^-17 (three quarters of an ulp of 256) gives 256 + 2^-15 where the
    fused sum of C and the product (wgmma's rule) truncates to 256."""
    e4m3 = ml_dtypes.float8_e4m3fn
    A = np.zeros((16, 32), e4m3)
    B = np.zeros((32, 8), e4m3)
    A[0, 0], B[0, 0] = 3 * 2.0 ** -9, 2.0 ** -8
    C = np.full((16, 8), 256.0, np.float32)
    d = _one_warp("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", A.view(np.uint8), B.view(np.uint8),
                  C.view(np.uint32)).view(np.float32)
    assert d[0, 0] == np.float32(256 + 2.0 ** -15)
    assert d[0, 1] == np.float32(256.0)
    wgmma = fastmma.mma("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3", np.pad(A, ((0, 48), (0, 0))), B,
                        np.pad(C, ((0, 48), (0, 0))))
    assert wgmma[0, 0] == np.float32(256.0)


def test_fp8_sums_k_mod_4_below_2_first():
    """fp8 m16n8k16, f16 D: the terms whose k % 4 is 0 or 1 make one fused f16 sum, rounded to
    f16 before the others join it.  1 (k = 0) and 2^-11 (k = 1) round, a tie, to 1.0; another
    2^-11 at k = 2 then ties to 1.0 again.  At k = 5 instead it joins the first sum, which is
    1 + 2^-10 exactly.  One sum of all 16 terms, or halves k < 8 and k >= 8, would give
    1 + 2^-10 both times."""
    e4m3 = ml_dtypes.float8_e4m3fn
    text = "mma.sync.aligned.m16n8k16.row.col.f16.e4m3.e4m3.f16"
    C = np.zeros((16, 8), np.float16)

    def d00(pairs):
        A = np.zeros((16, 16), e4m3)
        B = np.zeros((16, 8), e4m3)
        for k, (x, y) in pairs.items():
            A[0, k], B[k, 0] = x, y
        return _one_warp(text, A.view(np.uint8), B.view(np.uint8), C.view(np.uint16)).view(np.float16)[0, 0]

    small = (2.0 ** -5, 2.0 ** -6)
    assert d00({0: (1.0, 1.0), 1: small, 2: small}) == np.float16(1.0)
    assert d00({0: (1.0, 1.0), 1: small, 5: small}) == np.float16(1 + 2.0 ** -10)


def test_to_f16_is_exact():
    for fmt, dt in (("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)):
        codes = np.arange(256, dtype=np.uint8)
        values = codes.view(dt).astype(np.float64)
        back = to_f16(codes, fmt).view(np.float16).astype(np.float64)
        finite = np.isfinite(values)
        np.testing.assert_array_equal(back[finite], values[finite])
        assert np.array_equal(np.isnan(back), np.isnan(values))


def test_add_nearest_is_ieee_addition():
    rng = np.random.default_rng(7)
    for dtype, storage, ftype, nan in (("f32", np.uint32, np.float32, 0x7FFFFFFF), ("f16", np.uint16, np.float16, 0x7FFF)):
        bits = rng.integers(0, np.iinfo(storage).max, size=(2, 20000), dtype=np.uint64).astype(storage)
        bits[:, :2000] &= storage(0x807FFFFF if dtype == "f32" else 0x83FF)  # subnormals and zeros
        bits[1, 2000:4000] = bits[0, 2000:4000] ^ storage(1 << (31 if dtype == "f32" else 15))  # x + -x
        if dtype == "f16":  # the edges of rounding: to the largest half or over it, into the normals, signed zeros
            edges = np.array([[65504, 16], [65504, 15.99], [-65504, -16], [2.0 ** -14 - 2.0 ** -24, 2.0 ** -24],
                              [1, 2.0 ** -11], [1 + 2.0 ** -10, 2.0 ** -11], [-0.0, -0.0], [-0.0, 0.0],
                              [np.inf, -np.inf], [-np.inf, 3], [2048, 1], [2049, 1]], np.float16).view(storage)
            bits[:, 4000:4000 + len(edges)] = edges.T
        x, y = bits
        with np.errstate(all="ignore"):
            want = (x.view(ftype) + y.view(ftype)).view(storage).copy()
        want[np.isnan(want.view(ftype))] = nan
        x_before = x.copy()
        np.testing.assert_array_equal(add_nearest(x, y, dtype), want)
        assert np.array_equal(x, x_before), "add_nearest wrote over its operand"
        np.testing.assert_array_equal(add_nearest(x, y, dtype, in_place=True), want)
        np.testing.assert_array_equal(x, want)  # the sum written over p (converted_sum's own arrays)


def test_matmul_is_the_k_loop_of_single_instructions():
    rng = np.random.default_rng(3)
    e4m3, e5m2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
    for short, at, bt, ct, k in (("m16n8k32.f32.e4m3.e5m2.f32", e4m3, e5m2, np.float32, 32),
                                 ("m16n8k16.f16.e5m2.e5m2.f16", e5m2, e5m2, np.float16, 16),
                                 ("m16n8k8.f32.tf32.tf32.f32", np.float32, np.float32, np.float32, 8),
                                 ("m16n8k16.f32.bf16.bf16.f32", ml_dtypes.bfloat16, ml_dtypes.bfloat16, np.float32, 16)):
        A = rng.standard_normal((16, 3 * k)).astype(at)
        B = rng.standard_normal((3 * k, 8)).astype(bt)
        C = rng.standard_normal((16, 8)).astype(ct)
        d = fastmma.matmul(A, B, C, instruction=short)
        inst = fastmma.gemm.resolve_instruction(short)
        assert isinstance(inst, MmaSync)
        step = C
        for s in range(3):
            step = fastmma.mma(inst, A[:, s * k:(s + 1) * k], B[s * k:(s + 1) * k], step)
        np.testing.assert_array_equal(np.asarray(d).view(np.uint8), np.asarray(step).view(np.uint8), err_msg=short)


def test_stack_equals_one_call_per_warp():
    rng = np.random.default_rng(5)
    for text in ("mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16",
                 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                 "mma.sync.aligned.m16n8k16.row.col.rn.f64.f64.f64.f64",
                 "mma.sync.aligned.m16n8k64.row.col.satfinite.s32.s4.u4.s32"):
        inst = parse(text)
        words = {x: inst.fragment_words(x) for x in "abc"}
        regs = {x: rng.integers(0, 1 << 32, size=(6, 32, w), dtype=np.uint64).astype(np.uint32) for x, w in words.items()}
        regs["b"] = regs["b"][:1]  # one B for every warp: broadcast
        d = mma_sync.mma_stack(inst, regs["a"], regs["b"], regs["c"])
        for s in range(6):
            np.testing.assert_array_equal(d[s], mma_sync.mma(inst, regs["a"][s], regs["b"][0], regs["c"][s]))


def test_bad_calls_name_what_is_wrong():
    inst = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    a = np.zeros((32, 4), np.uint32)
    b = np.zeros((32, 2), np.uint32)
    c = np.zeros((32, 4), np.uint32)
    with pytest.raises(OperandError, match=r"b must have shape \(32, 2\)"):
        mma_sync.mma(inst, a, np.zeros((32, 4), np.uint32), c)
    with pytest.raises(InvalidInstructionError, match="MmaSync"):
        mma_sync.mma("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", a, b, c)
    with pytest.raises(OperandError, match=r"c must have shape \(32, 8\)"):
        mma_sync.mma("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32", a[:, :2], b, c)
    with pytest.raises(OperandError, match="32-bit registers"):
        mma_sync.mma(inst, a.astype(np.float64), b, c)


# ---------------------------------------------------------------- in the PTX interpreter

def _ptx_inputs(inst, warps, rng):
    """Random registers of ``warps`` warps as the interpreter takes them (name -> one value per
    thread), and the same as stacks of fragments."""
    regs, frags = {}, {}
    for x in "abc":
        words = inst.fragment_words(x)
        frags[x] = rng.integers(0, 1 << 32, size=(warps, 32, words), dtype=np.uint64).astype(np.uint32)
        flat = frags[x].reshape(warps * 32, words)
        if inst.atype == "f64":
            for r in range(words // 2):
                regs[f"{x}{r}"] = flat[:, 2 * r].astype(np.uint64) | (flat[:, 2 * r + 1].astype(np.uint64) << 32)
        else:
            for r in range(words):
                regs[f"{x}{r}"] = flat[:, r]
    return regs, frags


@pytest.mark.parametrize("text", ["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                                  "mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e4m3.f16",
                                  "mma.sync.aligned.m16n8k8.row.col.rn.f64.f64.f64.f64",
                                  "mma.sync.aligned.m16n8k256.row.col.xor.popc.s32.b1.b1.s32"])
def test_ptx_interpreter_runs_mma_sync(text):
    """Two warps, each its own registers; the second guarded off in a second run."""
    from fastmma import ptx

    inst = parse(text)
    rng = np.random.default_rng(9)
    regs, frags = _ptx_inputs(inst, 2, rng)
    rtype = ".b64" if inst.atype == "f64" else ".b32"
    decl = "\n".join(f".reg {rtype} {x}<{inst.fragment_regs(x)}>;" for x in "abcd")
    vec = {x: "{" + ", ".join(f"{x}{r}" for r in range(inst.fragment_regs(x))) + "}" for x in "abcd"}
    body = f"{text} {vec['d']}, {vec['a']}, {vec['b']}, {vec['c']};"
    m = ptx.run(f"{decl}\n{body}", regs, threads=64)
    want = mma_sync.mma_stack(inst, frags["a"], frags["b"], frags["c"]).reshape(64, -1)
    for r in range(inst.fragment_regs("d")):
        got = np.asarray(m[f"d{r}"]).view(np.uint64 if inst.atype == "f64" else np.uint32)
        if inst.atype == "f64":
            expect = want[:, 2 * r].astype(np.uint64) | (want[:, 2 * r + 1].astype(np.uint64) << 32)
        else:
            expect = want[:, r]
        np.testing.assert_array_equal(got, expect, err_msg=f"d{r}")
    guarded = ptx.run(f"{decl}\n.reg .pred p;\n.reg .b32 w;\nmov.u32 w, %warpid;\nsetp.eq.u32 p, w, 0;\n@p {body}",
                      regs, threads=64)
    d0 = np.asarray(guarded["d0"]).view(np.uint64 if inst.atype == "f64" else np.uint32)
    np.testing.assert_array_equal(d0[32:], 0)
    np.testing.assert_array_equal(d0[:32], np.asarray(m["d0"]).view(d0.dtype)[:32])


def test_ptx_interpreter_checks_mma_sync_operands():
    from fastmma import ptx
    from fastmma.errors import InvalidInstructionError

    with pytest.raises(InvalidInstructionError) as err:
        ptx.run(".reg .b32 a<4>, b<1>, c<4>, d<4>;\n"
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d0, d1, d2, d3}, {a0, a1, a2, a3}, {b0}, "
                "{c0, c1, c2, c3};")
    assert err.value.line == 2 and "b" in str(err.value)


def test_add_nearest_ignores_a_callers_flush_to_zero():
    """A calling thread may have set flush-to-zero and denormals-are-zero (a library built
    with fast-math does): the addition of C still keeps subnormal operands and results."""
    from numba import njit

    from fastmma.kernels.fp_env import HAS_MXCSR, MXCSR_NEAREST, write_mxcsr

    if not HAS_MXCSR:
        pytest.skip("x86 only")

    @njit
    def set_mxcsr(x):
        write_mxcsr(np.int32(x))

    x = np.array([2.0 ** -140, 2.0 ** -126, -2.0 ** -149, 1.0], np.float32)
    y = np.array([2.0 ** -141, -2.0 ** -127, 0.0, 2.0 ** -149], np.float32)
    want = (x.astype(np.float64) + y.astype(np.float64)).astype(np.float32).view(np.uint32)
    set_mxcsr(MXCSR_NEAREST | 0x8040)  # flush-to-zero (bit 15) and denormals-are-zero (bit 6)
    try:
        got = add_nearest(x.view(np.uint32), y.view(np.uint32), "f32")
    finally:
        set_mxcsr(MXCSR_NEAREST)
    np.testing.assert_array_equal(got, want)
    assert got[0] != 0 and got[2] == 0x80000001
