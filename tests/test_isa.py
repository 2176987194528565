"""The ISA layer: tables, parser, instruction objects, error messages."""

import json

import numpy as np
import pytest

from fastmma.errors import InvalidInstructionError, PTXSyntaxError, UnsupportedInstructionError
from fastmma.isa import (FmaChainRule, FusedDotRule, IntDotRule, PopcRule, WgmmaCommitGroup, WgmmaFence,
                         WgmmaMmaAsync, WgmmaWaitGroup, WmmaLoad, WmmaMma, WmmaStore, parse)
from fastmma.isa.parser import parse_int
from conftest import golden_files


def _meta(path):
    with np.load(path) as d:
        return json.loads(bytes(d["meta"]).decode())


@pytest.mark.parametrize("path", golden_files("wmma"), ids=lambda p: p.stem)
def test_recorded_wmma_text_parses_to_the_recorded_qualifiers(path):
    meta = _meta(path)
    q = meta["qualifiers"]
    load_a, load_b, load_c, mma, store = (parse(t) for t in meta["ptx"])
    assert isinstance(mma, WmmaMma) and isinstance(store, WmmaStore)
    assert (load_a.matrix, load_a.layout, load_a.type) == ("a", q["alayout"], q["atype"])
    assert (load_b.matrix, load_b.layout, load_b.type) == ("b", q["blayout"], q["btype"])
    assert (load_c.layout, load_c.type, store.layout, store.type) == (q["clayout"], q["ctype"], q["dlayout"], q["dtype"])
    assert (mma.shape.m, mma.shape.n, mma.shape.k) == (q["m"], q["n"], q["k"])
    assert (mma.atype, mma.btype, mma.ctype, mma.dtype) == (q["atype"], q["btype"], q["ctype"], q["dtype"])
    assert (mma.satfinite, mma.op) == (q["satfinite"], q["op"])
    if q["rounding"]:
        assert mma.rounding == q["rounding"]
    for m in "abcd":
        assert mma.fragment_regs(m) == meta["fragment_regs"][m]
        assert mma.fragment_words(m) == meta["fragment_words"][m]
    assert [load_a.regs, load_b.regs, load_c.regs, store.regs] == [meta["fragment_regs"][m] for m in "abcd"]
    assert load_a.state_space == "global"


@pytest.mark.parametrize("path", golden_files("wgmma"), ids=lambda p: p.stem)
def test_recorded_wgmma_text_parses_to_the_recorded_qualifiers(path):
    meta = _meta(path)
    q = meta["qualifiers"]
    for text in meta["ptx"][1:]:
        inst = parse(text)
        assert isinstance(inst, WgmmaMmaAsync)
        assert (inst.shape.m, inst.shape.n, inst.shape.k) == (q["m"], q["n"], q["k"])
        assert (inst.dtype, inst.atype, inst.btype) == (q["dtype"], q["atype"], q["btype"])
        assert (inst.satfinite, inst.op, inst.a_source) == (q["satfinite"], q["op"], q["a_source"])
        assert inst.d_regs == meta["accumulator_regs_per_thread"]
        for name in ("imm_scale_a", "imm_scale_b", "imm_trans_a", "imm_trans_b"):
            if q[name] is not None:
                assert getattr(inst, name) == q[name], name


def test_sync_aligned_operands_and_semicolon_are_optional():
    full = parse("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f1,%f2,%f3,%f4,%f5,%f6,%f7,%f8}, "
                 "%rd1, %rd2, p, -1, 1, 1, 0;")
    bare = parse("wgmma.mma_async.m64n16k16.f32.bf16.bf16")
    assert full.shape == bare.shape and (full.dtype, full.atype) == (bare.dtype, bare.atype)
    assert full.operands is not None and bare.operands is None
    assert (full.imm_scale_a, full.imm_scale_b, full.imm_trans_a, full.imm_trans_b) == (-1, 1, 1, 0)
    assert full.a_source == "desc" and full.scale_d.name == "p"
    assert (bare.imm_scale_a, bare.imm_trans_b, bare.a_source) == (1, 0, None)


def test_qualifier_order_as_nvcc_and_the_isa_examples_write_it():
    # nvcc writes .satfinite last; the ISA's examples write the shape before the layout
    assert parse("wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8.satfinite").satfinite
    assert parse("wgmma.mma_async.sync.aligned.m64n8k32.satfinite.s32.s8.u8").satfinite
    inst = parse("wmma.load.b.sync.aligned.m16n16k16.row.f16 {x0,x1,x2,x3,x4,x5,x,x7}, [ptr];")
    assert isinstance(inst, WmmaLoad) and inst.layout == "row" and inst.regs == 8
    assert inst.operands[1].kind == "address" and inst.operands[1].name == "ptr"


def test_async_control_instructions():
    assert isinstance(parse("wgmma.fence.sync.aligned;"), WgmmaFence)
    assert isinstance(parse("wgmma.commit_group.sync.aligned"), WgmmaCommitGroup)
    w = parse("wgmma.wait_group.sync.aligned 3;")
    assert isinstance(w, WgmmaWaitGroup) and w.n == 3


@pytest.mark.parametrize("text,expected_rule", [
    ("wgmma.mma_async.m64n8k16.f32.f16.f16", FusedDotRule(16, 25, -133, 23, "rz", "f32")),
    ("wgmma.mma_async.m64n8k16.f16.f16.f16", FusedDotRule(16, 25, -21, 10, "rne", "f16")),
    ("wgmma.mma_async.m64n8k32.f32.e4m3.e5m2", FusedDotRule(32, 13, -133, 13, "rz")),
    ("wgmma.mma_async.m64n8k8.f32.tf32.tf32", FusedDotRule(8, 25, -133, 23, "rz")),
    ("wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32", FusedDotRule(4, 25, -133, 23, "rz")),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f16.f32", FusedDotRule(16, 25, -133, 23, "rz", "f32", "f16")),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f16", FusedDotRule(16, 25, -133, 23, "rz", "f32")),
    ("wgmma.mma_async.m64n8k32.s32.u8.s8.satfinite", IntDotRule(32, True)),
    ("wgmma.mma_async.m64n8k256.s32.b1.b1.and.popc", PopcRule("and", 256)),
    ("wmma.mma.xor.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32", PopcRule("xor", 128)),
    ("wmma.mma.sync.aligned.row.col.m8n8k4.rm.f64.f64.f64.f64", FmaChainRule("rm")),
    ("wmma.mma.sync.aligned.row.col.m8n8k4.f64.f64.f64.f64", FmaChainRule("rn")),
])
def test_numerics_rules(text, expected_rule):
    rule = parse(text).rule
    assert rule == expected_rule
    assert rule.describe()


@pytest.mark.parametrize("text,error,needles", [
    ("wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8", InvalidInstructionError,
     [".m64n256k32", "integer", "224"]),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32.satfinite", InvalidInstructionError, ["6.5", ".satfinite"]),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.tf32.tf32.f32", InvalidInstructionError, [".m16n16k8"]),
    ("wmma.load.a.sync.aligned.row.m16n16k16.tf32", InvalidInstructionError, [".tf32", ".f16, .bf16, .s8, .u8"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.f16", InvalidInstructionError, [".bf16", ".f16", "bf16 with bf16"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f16.bf16.bf16", InvalidInstructionError, [".dtype .f16", ".f32"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16.rn", InvalidInstructionError, [".rn", "wgmma.mma_async"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16.foo", InvalidInstructionError, [".foo"]),
    ("wgmma.mma_async.sync.aligned.m64n8k8.f32.f16.f16", InvalidInstructionError, ["k16"]),
    ("wgmma.mma_async.sync.aligned.m64n12k16.f32.f16.f16", InvalidInstructionError, ["N in 8..256 by 8"]),
    ("wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1", InvalidInstructionError, [".op.popc", ".and"]),
    ("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3.satfinite", InvalidInstructionError, ["integer"]),
    ("wmma.mma.sync.aligned.col.col.m8n8k32.s32.s4.s4.s32", InvalidInstructionError, [".row", ".col"]),
    ("wmma.mma.and.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32.satfinite", InvalidInstructionError, [".satfinite"]),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32.rn", InvalidInstructionError, [".f64"]),
    ("wmma.load.d.sync.aligned.row.m16n16k16.f32", InvalidInstructionError, [".a, .b, .c"]),
    ("wmma.store.d.sync.aligned.row.m16n16k16.bf16", InvalidInstructionError, [".f16, .f32, .s32"]),
    ("wmma.load.a.sync.aligned.col.m8n8k32.s4", InvalidInstructionError, [".row"]),
    ("cvt.rn.f16x2.f32 h, a, b;", UnsupportedInstructionError,
     ["'cvt'", "wgmma.{mma_async,", "mma", "ldmatrix", "movmatrix"]),
    ("wgmma.mma_async.sp.sync.aligned.m64n8k16.f32.f16.f16", InvalidInstructionError, [".m64nNk32", "sp"]),
    ("wgmma.mma_async.sp.sync.aligned.m64n8k64.s32.s8.s8 {r0, r1, r2, r3}, rd0, rd1, r5, 1, p;",
     InvalidInstructionError, ["sp-sel", "0"]),
    ("wgmma.wait_group.sync.aligned;", InvalidInstructionError, ["N"]),
    ("wgmma.wait_group.sync.aligned -1;", InvalidInstructionError, ["non-negative"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {a,b,c,d}, x, y, p, 1, 2, 0, 0;",
     InvalidInstructionError, ["imm-scale-b", "-1 or 1", "2"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {a,b,c,d}, {r0,r1,r2,r3}, y, p, 1, 1, 1, 0;",
     InvalidInstructionError, ["7 operands"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {a,b,c}, x, y, p, 1, 1, 0, 0;",
     InvalidInstructionError, ["4 registers"]),
    ("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {a,b,c,d}, x, y, p, 1, 1, 0, 0;",
     InvalidInstructionError, ["6 operands"]),
    ("wmma.load.a.sync.aligned.row.m16n16k16.f16 {x0,x1}, [p];", InvalidInstructionError, ["8 registers"]),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {a,b,c,d, x, y;", PTXSyntaxError, ["brace"]),
    ("", PTXSyntaxError, ["empty"]),
    ("wgmma.fence.sync.aligned; wgmma.commit_group.sync.aligned;", PTXSyntaxError, ["one instruction"]),
])
def test_invalid_text_names_the_fault_and_the_choices(text, error, needles):
    with pytest.raises(error) as info:
        parse(text)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


def test_errors_are_valueerrors_too():
    with pytest.raises(ValueError):
        parse("wgmma.mma_async.m64n8k16.f32.f16.u8")


@pytest.mark.parametrize("text,value", [
    ("0x1F", 31), ("0XdeadBEEF", 0xDEADBEEF), ("017", 15), ("0", 0), ("00", 0), ("0b101", 5), ("42U", 42),
    ("-8", -8), ("+8", 8), ("18446744073709551615", 2**64 - 1), ("0xFFFFFFFFFFFFFFFFu", 2**64 - 1),
])
def test_integer_literals(text, value):
    """PTX ISA, "Integer constants": hex, octal (a leading 0), binary and decimal, an optional U."""
    assert parse_int(text) == value


@pytest.mark.parametrize("text,needle", [
    ("09", "not an integer literal"), ("0x", "not an integer literal"), ("1.5", "not an integer literal"),
    ("18446744073709551616", "does not fit in 64 bits"), ("0x1" + "0" * 16, "does not fit in 64 bits"),
    ("1" * 5000, "does not fit in 64 bits"),
])
def test_integer_literal_errors(text, needle):
    with pytest.raises(PTXSyntaxError, match=needle):
        parse_int(text)
