"""``mma.sp`` / ``mma.sp::ordered_metadata`` (PTX ISA 9.7.14.6) against the q15 recordings of an
H200 (tests/golden/probes/q15_mma_sp) and the ISA's text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fastmma import mma_sync, ptx
from fastmma.errors import InvalidInstructionError, OperandError, UnsupportedInstructionError
from fastmma.conform import load_recording
from fastmma.isa import IntDotRule, MmaSp, SparseConvertedF16Rule, parse
from fastmma.isa.numerics import float_rule
from fastmma.layout.mma_fragments import fragment_layout, sparse_fragment_layout
from fastmma.layout.sparse_metadata import encode_metadata, kept_columns, metadata_slots
from fastmma.layout.wmma_fragments import pack_fragment, unpack_fragment

Q15 = Path(__file__).parent / "golden" / "probes" / "q15_mma_sp"
NUMBER_FILES = sorted(Q15.glob("*.npz"))
LAYOUT_FILES = sorted((Q15 / "layout").glob("*.npz"))


def test_the_recordings_are_there():
    assert len(NUMBER_FILES) == 47 and len(LAYOUT_FILES) == 22


@pytest.mark.parametrize("path", NUMBER_FILES + LAYOUT_FILES, ids=lambda p: p.stem)
def test_recorded_cases_are_bit_exact_as_one_stack(path):
    z, meta = load_recording(path)
    d = mma_sync.mma_sp_stack(meta["ptx"][0], z["a_regs"], z["b_regs"], z["c_regs"], z["e_regs"])
    bad = np.flatnonzero((d != z["d_regs"]).reshape(len(d), -1).any(axis=1))
    assert bad.size == 0, f"cases {bad.tolist()} (modes {z['mode'][bad].tolist()}) differ"


@pytest.mark.parametrize("path", NUMBER_FILES[::6], ids=lambda p: p.stem)
def test_recorded_cases_warp_by_warp(path):
    z, meta = load_recording(path)
    inst = parse(meta["ptx"][0])
    for i in range(0, len(z["mode"]), 3):
        d = mma_sync.mma_sp(inst, z["a_regs"][i], z["b_regs"][i], z["c_regs"][i], z["e_regs"][i])
        np.testing.assert_array_equal(d, z["d_regs"][i], err_msg=f"case {i}")


# ------------------------------------------------------------------------- where the metadata lives


@pytest.mark.parametrize("atype,shape,selector,row,chunk,lane,nibble", [
    # 16-bit types, one thread of four: rows g and g + 8 in its low and high half
    ("f16", "m16n8k16", 2, 3, 1, 14, 1), ("f16", "m16n8k16", 2, 11, 1, 14, 5),
    ("f16", "m16n8k16", 0, 7, 3, 28, 3), ("tf32", "m16n8k8", 3, 12, 2, 19, 6),
    # a thread pair: chunks 0-3 in the first, 4-7 in the second
    ("f16", "m16n8k32", 1, 0, 5, 3, 1), ("bf16", "m16n8k32", 0, 8, 5, 1, 5), ("tf32", "m16n8k16", 1, 4, 7, 19, 3),
    # 8- and 4-bit types: row g in the first of the pair, g + 8 in the second, eight chunks each
    ("s8", "m16n8k32", 1, 9, 6, 7, 6), ("u4", "m16n8k64", 0, 2, 3, 8, 3),
    # all four threads: chunks 8-15 in threads 2 and 3
    ("s8", "m16n8k64", 0, 8, 9, 3, 1), ("e5m2", "m16n8k64", 0, 2, 15, 10, 7), ("s4", "m16n8k128", 0, 15, 8, 31, 0),
])
def test_metadata_slots_follow_the_recorded_map(atype, shape, selector, row, chunk, lane, nibble):
    lanes, nibbles = metadata_slots(atype, shape, selector)
    assert (int(lanes[row, chunk]), int(nibbles[row, chunk])) == (lane, nibble)


def _dense_index_from_d(z, meta, draw):
    """The layout cases (tools/record/sparse_probes.py): B selects column 8 s + j into D's
    column j and A holds base-7 digits (plus 1) of each compressed element's index r * K/2 + c.
    Returns the dense A's element index at each (row, column), -1 where the row keeps nothing,
    read off the recorded D alone (through mma's C/D map, recorded in q10)."""
    q = meta["qualifiers"]
    k = q["k"]
    d_map = fragment_layout("d", "m16n8k16", q["dtype"])
    per_draw = (k // 8) * 4
    index = np.zeros((16, k), np.int64)
    for s in range(k // 8):
        for digit in range(4):
            case = draw * per_draw + 4 * s + digit
            d = unpack_fragment(z["d_regs"][case], d_map)
            v = {"f32": d.view(np.float32), "s32": d.view(np.int32)}[q["dtype"]].astype(np.int64)
            assert ((v >= 0) & (v <= 7)).all()
            index[:, 8 * s:8 * s + 8] += np.where(v > 0, (v - 1) * 7 ** digit, -(7 ** 4))
    return np.where(index >= 0, index, -1)


@pytest.mark.parametrize("path", LAYOUT_FILES, ids=lambda p: p.stem)
def test_layout_cases_put_each_kept_element_where_the_metadata_says(path):
    z, meta = load_recording(path)
    q = meta["qualifiers"]
    k = q["k"]
    for draw in range(2):
        index = _dense_index_from_d(z, meta, draw)
        e = z["e_regs"][draw * (k // 8) * 4, :, 0]
        cols = kept_columns(e, q["atype"], q["shape"], q["selector"], q["sparse"])
        want = np.full((16, k), -1)
        rows = np.arange(16)[:, None]
        want[rows, cols] = rows * (k // 2) + np.arange(k // 2)
        np.testing.assert_array_equal(index, want, err_msg=f"draw {draw}")


def test_kept_columns_of_each_kind_of_chunk():
    """Nibble 0b1001: the first kept element in place 1, the second in place 2 (pairs of them
    for .s4); .tf32's 0b0100 keeps element 0 of two, 0b1110 element 1."""
    e = np.full(32, 0x99999999, np.uint32)
    cols = kept_columns(e, "f16", "m16n8k16", 0, "sp::ordered_metadata")
    np.testing.assert_array_equal(cols[5], [1, 2, 5, 6, 9, 10, 13, 14])
    cols = kept_columns(e, "s4", "m16n8k64", 0, "sp::ordered_metadata")
    np.testing.assert_array_equal(cols[0][:8], [2, 3, 4, 5, 10, 11, 12, 13])
    e = np.full(32, 0x4E4E4E4E, np.uint32)
    cols = kept_columns(e, "tf32", "m16n8k8", 1, "sp")
    np.testing.assert_array_equal(cols[0], [1, 2, 5, 6])
    np.testing.assert_array_equal(cols[8], [1, 2, 5, 6])


@pytest.mark.parametrize("atype,shape,selector", [
    ("f16", "m16n8k16", 3), ("bf16", "m16n8k32", 1), ("tf32", "m16n8k8", 2), ("tf32", "m16n8k16", 0),
    ("e4m3", "m16n8k64", 0), ("u8", "m16n8k32", 1), ("s8", "m16n8k64", 0), ("s4", "m16n8k64", 1),
    ("u4", "m16n8k128", 0)])
def test_encode_metadata_round_trips(atype, shape, selector):
    rng = np.random.default_rng(5)
    k = int(shape.split("k")[1])
    chunk = {"tf32": 2, "s4": 8, "u4": 8}.get(atype, 4)
    cols = []
    for _ in range(16 * k // chunk):
        if chunk == 2:
            cols.append([rng.integers(2)])
        elif chunk == 8:
            p = np.sort(rng.choice(4, 2, replace=False))
            cols.append([2 * p[0], 2 * p[0] + 1, 2 * p[1], 2 * p[1] + 1])
        else:
            cols.append(np.sort(rng.choice(4, 2, replace=False)))
    cols = np.array(cols).reshape(16, k // chunk, -1) + chunk * np.arange(k // chunk)[:, None]
    cols = cols.reshape(16, k // 2)
    e = encode_metadata(cols, atype, shape, selector)
    np.testing.assert_array_equal(kept_columns(e, atype, shape, selector, "sp::ordered_metadata"), cols)


# ------------------------------------------------------------------------- numbers


def _fragments(inst, A, B, C):
    s = str(inst.shape)
    return [pack_fragment(np.ascontiguousarray(x), sparse_fragment_layout(m, s, t))
            for m, x, t in (("a", A, inst.atype), ("b", B, inst.btype), ("c", C, inst.ctype))]


def _d(inst, d):
    return unpack_fragment(d, sparse_fragment_layout("d", str(inst.shape), inst.dtype))


@pytest.mark.parametrize("nibble,expected", [(0x4, 0x41000000), (0xE, 0x7F800000)])
def test_only_kept_products_count(nibble, expected):
    """B is +inf in places 2 and 3 of every chunk.  Keeping places 0 and 1, D is the sum of
    eight ones (8.0): the infinities meet only left-out elements, and 0 * inf takes no part
    (a dense product with zeros there would give NaN).  Keeping places 2 and 3 gives +inf."""
    inst = parse("mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    A = np.full((16, 8), 0x3C00, np.uint16)
    B = np.full((16, 8), 0x3C00, np.uint16)
    B[np.arange(16) % 4 >= 2] = 0x7C00
    C = np.zeros((16, 8), np.uint32)
    e = np.full((32, 1), nibble * 0x11111111, np.uint32)
    d = mma_sync.mma_sp(inst, *_fragments(inst, A, B, C), e, selector=0)
    np.testing.assert_array_equal(_d(inst, d), np.full((16, 8), expected, np.uint32))


def test_fp8_sums_the_even_chunks_then_the_odd_ones():
    """Row 0 keeps 256 and -256 in chunk 0 and 2^-5 in chunk 1; B's column 0 is 256, 256 and
    2^-5 there.  Even chunks first: 2^16 - 2^16 = +0, then 2^-10 onto it, D = 2^-10
    (0x3A800000).  One fused sum of all kept products would truncate 2^-10 away below 2^16
    (+0), and odd chunks first would add 2^-10 to the pair and lose it the same way."""
    inst = parse("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e4m3.e4m3.f32")
    A = np.zeros((16, 32), np.uint8)
    A[0, :3] = [0x78, 0xF8, 0x10]  # 256, -256 (chunk 0), 2^-5 (chunk 1)
    B = np.zeros((64, 8), np.uint8)
    B[[0, 1, 4], 0] = [0x78, 0x78, 0x10]  # the metadata 0x4 keeps places 0 and 1 of each chunk
    C = np.zeros((16, 8), np.uint32)
    e = np.full((32, 1), 0x44444444, np.uint32)
    d = _d(inst, mma_sync.mma_sp(inst, *_fragments(inst, A, B, C), e, selector=0))
    assert d[0, 0] == 0x3A800000
    assert (d[1:] == 0).all() and (d[0, 1:] == 0).all()


@pytest.mark.parametrize("text,rule", [
    ("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32", float_rule("f16", "f32", "f32", 16)),
    ("mma.sp.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", float_rule("f16", "f16", "f16", 8)),
    ("mma.sp.sync.aligned.m16n8k16.row.col.f32.tf32.tf32.f32", float_rule("tf32", "f32", "f32", 8)),
    ("mma.sp.sync.aligned.m16n8k64.row.col.satfinite.s32.s8.u8.s32", IntDotRule(32, True)),
    ("mma.sp.sync.aligned.m16n8k128.row.col.s32.u4.u4.s32", IntDotRule(64, False)),
    ("mma.sp.sync.aligned.m16n8k64.row.col.f32.e5m2.e4m3.f32",
     SparseConvertedF16Rule(float_rule("f16", "f32", "f32", 16), 32)),
])
def test_rules(text, rule):
    assert parse(text).rule == rule


# ------------------------------------------------------------------------- undefined metadata, selectors


def _zeros(inst):
    return [np.zeros((32, inst.fragment_words(x)), np.uint32) for x in "abc"]


def test_undefined_metadata_in_a_read_lane_is_refused():
    ordered = parse("mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    plain = parse("mma.sp.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    e = np.full((32, 1), 0x44444444, np.uint32)
    e[4, 0] = 0x44444441  # lane 4 (rows 1 and 9), chunk 0 of row 1: indices 1 then 0
    with pytest.raises(OperandError) as err:
        mma_sync.mma_sp(ordered, *_zeros(ordered), e, selector=0)
    for needle in ("row 1, chunk 0", "lane 4", "0b0001", "0b0100"):
        assert needle in str(err.value)
    mma_sync.mma_sp(plain, *_zeros(plain), e, selector=0)  # .sp takes indices in either order
    e[4, 0] = 0x44444455  # two equal indices: undefined in both variants
    for inst in (ordered, plain):
        with pytest.raises(OperandError, match="0b0101"):
            mma_sync.mma_sp(inst, *_zeros(inst), e, selector=0)
    tf32 = parse("mma.sp.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
    with pytest.raises(OperandError, match="0b1000"):
        mma_sync.mma_sp(tf32, *_zeros(tf32), np.full((32, 1), 0x44444448, np.uint32), selector=0)


def test_lanes_the_selector_does_not_name_are_not_read():
    z, meta = load_recording(Q15 / "mma.sp_ordered.m16n8k32.row.col.f32.bf16.bf16.f32.sel0.npz")
    e = z["e_regs"][0].copy()
    e[np.arange(32) % 4 >= 2] = 0xFFFFFFFF  # selector 0: threads 0 and 1 of each four
    d = mma_sync.mma_sp(meta["ptx"][0], z["a_regs"][0], z["b_regs"][0], z["c_regs"][0], e)
    np.testing.assert_array_equal(d, z["d_regs"][0])


def test_selector_comes_from_the_operands_or_the_argument():
    text = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"
    inst = parse(text)
    e = np.full((32, 1), 0x44444444, np.uint32)
    with pytest.raises(OperandError, match="selector"):
        mma_sync.mma_sp(inst, *_zeros(inst), e)
    with pytest.raises(OperandError, match="one of 0, 1"):
        mma_sync.mma_sp(inst, *_zeros(inst), e, selector=2)
    with pytest.raises(OperandError, match="one of 0, 1"):
        mma_sync.mma_sp(inst, *_zeros(inst), e, selector=True)
    full = parse(f"{text} {{d0, d1, d2, d3}}, {{a0, a1, a2, a3}}, {{b0, b1, b2, b3}}, {{c0, c1, c2, c3}}, e, 1;")
    assert full.selector == 1
    with pytest.raises(OperandError, match="disagrees"):
        mma_sync.mma_sp(full, *_zeros(full), e, selector=0)
    np.testing.assert_array_equal(mma_sync.mma_sp(full, *_zeros(full), e),
                                  mma_sync.mma_sp(inst, *_zeros(inst), e, selector=1))


def test_stacks_broadcast_like_numpy():
    z, meta = load_recording(Q15 / "mma.sp_ordered.m16n8k64.row.col.s32.s8.u8.s32.sel0.npz")
    inst = meta["ptx"][0]
    d = mma_sync.mma_sp_stack(inst, z["a_regs"][:3], z["b_regs"][0], z["c_regs"][:3], z["e_regs"][:3])
    for i in range(3):
        np.testing.assert_array_equal(
            d[i], mma_sync.mma_sp(inst, z["a_regs"][i], z["b_regs"][0], z["c_regs"][i], z["e_regs"][i]))
    with pytest.raises(OperandError, match="broadcast"):
        mma_sync.mma_sp_stack(inst, z["a_regs"][:3], z["b_regs"][:2], z["c_regs"][:3], z["e_regs"][:3])
    with pytest.raises(OperandError, match=r"e must have shape \(32, 1\)"):
        mma_sync.mma_sp(inst, z["a_regs"][0], z["b_regs"][0], z["c_regs"][0], z["e_regs"][0, :, 0])


# ------------------------------------------------------------------------- the parser


def _forms():
    fp8, i8, i4 = ("e4m3", "e5m2"), ("s8", "u8"), ("s4", "u4")
    forms = [(s, d, "f16", "f16", d, "") for s in ("m16n8k16", "m16n8k32") for d in ("f32", "f16")]
    forms += [(s, "f32", "bf16", "bf16", "f32", "") for s in ("m16n8k16", "m16n8k32")]
    forms += [(s, "f32", "tf32", "tf32", "f32", "") for s in ("m16n8k8", "m16n8k16")]
    forms += [("m16n8k64", "f32", a, b, "f32", "") for a in fp8 for b in fp8]
    for shapes, types in ((("m16n8k32", "m16n8k64"), i8), (("m16n8k64", "m16n8k128"), i4)):
        forms += [(s, "s32", a, b, "s32", sat) for s in shapes for a in types for b in types for sat in ("", ".satfinite")]
    return forms


@pytest.mark.parametrize("variant", ["sp", "sp::ordered_metadata"])
def test_every_form_ptxas_takes_parses(variant):
    """The 44 forms ptxas 13.0 takes for sm_90a, in both variants (each was compiled)."""
    for shape, d, a, b, c, sat in _forms():
        inst = parse(f"mma.{variant}.sync.aligned.{shape}.row.col{sat}.{d}.{a}.{b}.{c}")
        assert isinstance(inst, MmaSp) and inst.spvariant == variant and inst.satfinite == bool(sat)
    assert len(_forms()) == 44


@pytest.mark.parametrize("text,needle", [
    ("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f16", ".dtype.ctype: .f16.f16, .f32.f32"),
    ("mma.sp.sync.aligned.m16n8k16.row.col.f16.bf16.bf16.f16", ".f32.f32"),
    ("mma.sp.sync.aligned.m16n8k64.row.col.f16.e4m3.e4m3.f16", ".f32.f32"),
    ("mma.sp.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32", "valid shapes: .m16n8k32, .m16n8k64"),
    ("mma.sp.sync.aligned.m16n8k32.col.col.f32.f16.f16.f32", ".row.col"),
    ("mma.sp.sync.aligned.m16n8k32.row.col.satfinite.f32.f16.f16.f32", ".satfinite is not valid"),
    ("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.bf16.f32", "valid .atype/.btype pairs"),
    ("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {d0, d1, d2, d3}, {a0, a1, a2, a3}, {b0, b1, b2, b3}, "
     "{c0, c1, c2, c3}, e;", "6 operands"),
    ("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {d0, d1, d2, d3}, {a0, a1}, {b0, b1, b2, b3}, "
     "{c0, c1, c2, c3}, e, 0;", "operand a must be a vector of 4 registers"),
    ("mma.sp.sync.aligned.m16n8k64.row.col.s32.s8.s8.s32 {d0, d1, d2, d3}, {a0, a1, a2, a3}, {b0, b1, b2, b3}, "
     "{c0, c1, c2, c3}, e, 1;", "integer constant in 0, got '1'"),
    ("mma.sp.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d0, d1, d2, d3}, {a0, a1}, {b0, b1}, "
     "{c0, c1, c2, c3}, e, s;", "integer constant in 0, 1, 2, 3"),
    ("mma.sp.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d0, d1, d2, d3}, {a0, a1}, {b0, b1}, "
     "{c0, c1, c2, c3}, 7, 0;", "operand e (the metadata) must be a 32-bit register"),
])
def test_refused_forms_say_what_is_allowed(text, needle):
    with pytest.raises(InvalidInstructionError) as err:
        parse(text)
    assert needle in str(err.value)


def test_sm_100_kind_forms_are_unsupported():
    with pytest.raises(UnsupportedInstructionError, match="sm_90a"):
        parse("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.kind::f8f6f4.f32.e3m2.e2m1.f32")


# ------------------------------------------------------------------------- the PTX interpreter


def test_ptx_interpreter_runs_mma_sp_per_warp():
    """Two warps with recorded registers, the second guarded off in a second run."""
    z, meta = load_recording(Q15 / "layout" / "mma.sp_ordered.m16n8k32.row.col.f32.f16.f16.f32.sel1.npz")
    text = meta["ptx"][0].split(" {")[0]
    regs = {f"{x}{r}": z[f"{x}_regs"][:2, :, r].reshape(64) for x in "abc" for r in range(4)}
    regs["e"] = z["e_regs"][:2, :, 0].reshape(64)
    decl = "\n".join(f".reg .b32 {x}<4>;" for x in "abcd") + "\n.reg .b32 e;"
    body = f"{text} {{d0, d1, d2, d3}}, {{a0, a1, a2, a3}}, {{b0, b1, b2, b3}}, {{c0, c1, c2, c3}}, e, 1;"
    m = ptx.run(f"{decl}\n{body}", regs, threads=64)
    got = np.stack([np.asarray(m[f"d{r}"]).view(np.uint32) for r in range(4)], axis=1).reshape(2, 32, 4)
    np.testing.assert_array_equal(got, z["d_regs"][:2])
    guarded = ptx.run(f"{decl}\n.reg .pred p;\n.reg .b32 w;\nmov.u32 w, %warpid;\nsetp.eq.u32 p, w, 0;\n@p {body}",
                      regs, threads=64)
    d0 = np.asarray(guarded["d0"]).view(np.uint32)
    np.testing.assert_array_equal(d0[:32], z["d_regs"][0, :, 0])
    np.testing.assert_array_equal(d0[32:], 0)
    with pytest.raises(InvalidInstructionError, match="sparsity selector"):
        ptx.run(f"{decl}\n{body.replace(', e, 1;', ', e, 2;')}", regs, threads=64)


# ------------------------------------------------------------------------- logical matrices


@pytest.mark.parametrize("path", NUMBER_FILES[::4], ids=lambda p: p.stem)
def test_fastmma_mma_sp_on_logical_matrices_matches_the_recordings(path):
    """The recorded registers read back as matrices (the compressed A, B, C, the metadata's
    kept columns), one call for the whole file's stack, against the recorded D."""
    import fastmma
    from fastmma.formats import from_bits

    z, meta = load_recording(path)
    inst = parse(meta["ptx"][0])
    s = str(inst.shape)
    mats = {x: unpack_fragment(z[f"{x}_regs"], sparse_fragment_layout(x, s, t))
            for x, t in zip("abcd", (inst.atype, inst.btype, inst.ctype, inst.dtype))}
    cols = kept_columns(z["e_regs"][..., 0], inst.atype, s, inst.selector, inst.spvariant)
    D = fastmma.mma_sp(inst, from_bits(mats["a"], inst.atype), cols, from_bits(mats["b"], inst.btype),
                       from_bits(mats["c"], inst.ctype))
    np.testing.assert_array_equal(np.asarray(D).view(mats["d"].dtype), mats["d"])


def test_fastmma_mma_sp_checks_the_columns():
    import fastmma

    f16 = "mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    A, B = np.ones((16, 8), np.float16), np.ones((16, 8), np.float16)
    cols = np.tile(np.array([0, 1, 4, 5, 8, 9, 12, 13]), (16, 1))
    assert (fastmma.mma_sp(f16, A, cols, B) == 8).all()
    for bad, needle in ((cols[:, :4], r"shape \(\.\.\., 16, 8\)"), (cols + 16, "0..15"),
                        (np.where(cols == 1, 0, cols), "two different places"),
                        (cols[:, [1, 0, 2, 3, 4, 5, 6, 7]], "0b0001"), (cols.astype(float), "integers")):
        with pytest.raises(OperandError, match=needle):
            fastmma.mma_sp(f16, A, bad, B)
    plain = f16.replace("::ordered_metadata", "")
    assert (fastmma.mma_sp(plain, A, cols[:, [1, 0, 2, 3, 4, 5, 6, 7]], B) == 8).all()
    s4 = "mma.sp.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32"
    pairs = np.tile(np.arange(64).reshape(8, 8)[:, :4].ravel(), (16, 1))
    ones = np.ones((16, 32), np.int8), np.ones((64, 8), np.int8)
    assert (fastmma.mma_sp(s4, ones[0], pairs, ones[1]) == 32).all()
    with pytest.raises(OperandError, match="aligned pairs"):
        fastmma.mma_sp(s4, ones[0], pairs + 1, ones[1])
    with pytest.raises(InvalidInstructionError, match="fastmma.mma_sp needs a sparse instruction"):
        fastmma.mma_sp("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", A, cols, B)
