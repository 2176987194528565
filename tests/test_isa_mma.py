"""The ISA layer's mma.sync (PTX ISA 9.7.14.5): the forms ptxas -arch=sm_90a accepts, the
ones it rejects, fragment register counts, operands and numerics rules.

The accepted set below is written out from the ptxas sm_90a results (CUDA 13.0), not read
from ``fastmma.isa.tables``, so that a wrong table fails here.
"""

import itertools

import pytest

from fastmma.errors import InvalidInstructionError, UnsupportedInstructionError
from fastmma.isa import (ConvertedF16Rule, FfmaExpansionRule, FmaChainRule, FusedDotRule, IntDotRule, MmaSync, PopcRule,
                         Shape, WmmaMma, parse)

_FP8 = ("e4m3", "e5m2")
_I8 = ("s8", "u8")
_I4 = ("s4", "u4")


def _accepted() -> dict[str, tuple]:
    """Every qualifier string ptxas -arch=sm_90a accepted, -> (shape, d, a, b, c, satfinite,
    rounding, op, alayout, blayout) as the parsed instruction must report them."""
    out = {}

    def add(shape, d, a, b, c, mod="", satfinite=False, rounding=None, op=None, layouts=("row", "col")):
        text = f"mma.sync.aligned.{shape}.{layouts[0]}.{layouts[1]}{mod}.{d}.{a}.{b}.{c}"
        out[text] = (shape, d, a, b, c, satfinite, rounding, op) + tuple(layouts)

    for shape, dc in itertools.product(("m16n8k8", "m16n8k16"), ("f16", "f32")):
        add(shape, dc, "f16", "f16", dc)
    # m8n8k4 .f16: any layout pair; D .f16 needs C .f16 (".dtype must be '.f32' when .ctype is '.f32'")
    for layouts, (d, c) in itertools.product(itertools.product(("row", "col"), repeat=2),
                                            (("f16", "f16"), ("f32", "f16"), ("f32", "f32"))):
        add("m8n8k4", d, "f16", "f16", c, layouts=layouts)
    for shape in ("m16n8k8", "m16n8k16"):
        add(shape, "f32", "bf16", "bf16", "f32")
    for shape in ("m16n8k4", "m16n8k8"):
        add(shape, "f32", "tf32", "tf32", "f32")
    for shape, a, b, dc in itertools.product(("m16n8k16", "m16n8k32"), _FP8, _FP8, ("f16", "f32")):
        add(shape, dc, a, b, dc)
    for shape in ("m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16"):
        add(shape, "f64", "f64", "f64", "f64", rounding="rn")
        add(shape, "f64", "f64", "f64", "f64", ".rn", rounding="rn")
    for shapes, types in ((("m8n8k16", "m16n8k16", "m16n8k32"), _I8), (("m8n8k32", "m16n8k32", "m16n8k64"), _I4)):
        for shape, a, b in itertools.product(shapes, types, types):
            add(shape, "s32", a, b, "s32")
            add(shape, "s32", a, b, "s32", ".satfinite", satfinite=True)
    for shape, op in itertools.product(("m8n8k128", "m16n8k128", "m16n8k256"), ("xor", "and")):
        add(shape, "s32", "b1", "b1", "s32", f".{op}.popc", op=op)
    return out


ACCEPTED = _accepted()


def test_the_accepted_list_is_complete():
    # 4 f16 + 12 f16 m8n8k4 + 2 bf16 + 2 tf32 + 16 fp8 + 8 f64 + 24 s8/u8 + 24 s4/u4 + 6 b1
    assert len(ACCEPTED) == 98
    assert "mma.sync.aligned.m8n8k4.col.row.f32.f16.f16.f16" in ACCEPTED
    assert "mma.sync.aligned.m8n8k4.row.row.f16.f16.f16.f32" not in ACCEPTED
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ACCEPTED
    assert "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32" in ACCEPTED
    assert "mma.sync.aligned.m16n8k256.row.col.and.popc.s32.b1.b1.s32" in ACCEPTED
    assert "mma.sync.aligned.m16n8k16.row.col.rn.f64.f64.f64.f64" in ACCEPTED
    assert "mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e5m2.f16" in ACCEPTED


@pytest.mark.parametrize("text", sorted(ACCEPTED))
def test_every_form_ptxas_accepts_parses_to_its_qualifiers(text):
    shape, d, a, b, c, satfinite, rounding, op, alayout, blayout = ACCEPTED[text]
    inst = parse(text)
    assert isinstance(inst, MmaSync) and inst.family == "mma" and inst.opcode == "mma"
    assert str(inst.shape) == shape
    assert (inst.alayout, inst.blayout) == (alayout, blayout)
    assert inst.quad_pairs == (shape == "m8n8k4" and a == "f16")
    assert (inst.dtype, inst.atype, inst.btype, inst.ctype) == (d, a, b, c)
    assert (inst.satfinite, inst.rounding, inst.op) == (satfinite, rounding, op)
    assert parse(text.replace("mma.sync.aligned.", "mma.")) == inst  # .sync.aligned optional


def _candidates():
    """Qualifier strings around the accepted set: every shape, type quadruple over the
    accumulator and input types, and modifier."""
    shapes = ("m8n8k4", "m8n8k16", "m8n8k32", "m8n8k128", "m16n8k4", "m16n8k8", "m16n8k16", "m16n8k32",
              "m16n8k64", "m16n8k128", "m16n8k256", "m16n16k16")
    inputs = ("f16", "bf16", "tf32", "e4m3", "e5m2", "f64", "s8", "u8", "s4", "u4", "b1", "f32")
    accs = ("f16", "f32", "f64", "s32")
    mods = ("", ".satfinite", ".rn", ".rz", ".and.popc", ".xor.popc", ".and")
    for shape, a, b, d, c, mod in itertools.product(shapes, inputs, inputs, accs, accs, mods):
        if a == b or {a, b} <= set(_FP8) | set(_I8) | set(_I4) | {"f16", "bf16"}:
            yield shape, a, f"mma.sync.aligned.{shape}.row.col{mod}.{d}.{a}.{b}.{c}"
    for layouts, a, d, c, mod in itertools.product(("row.row", "col.row", "col.col"), inputs, accs, accs, mods):
        yield "m8n8k4", a, f"mma.sync.aligned.m8n8k4.{layouts}{mod}.{d}.{a}.{a}.{c}"


def test_nothing_outside_the_accepted_list_parses():
    """About 90,000 near misses: each one not on the list raises InvalidInstructionError."""
    seen = 0
    for shape, atype, text in _candidates():
        if text in ACCEPTED:
            assert isinstance(parse(text), MmaSync)
            seen += 1
            continue
        with pytest.raises(InvalidInstructionError):
            parse(text)
    assert seen == len(ACCEPTED)


@pytest.mark.parametrize("layouts", [".col.row", ".row.row", ".col.col"])
def test_every_accepted_form_rejects_other_layouts(layouts):
    for text in ACCEPTED:
        if ACCEPTED[text][0] == "m8n8k4" and ACCEPTED[text][2] == "f16":  # any layout pair
            assert text.replace(".row.col", layouts) in ACCEPTED or ".row.col" not in text
            continue
        with pytest.raises(InvalidInstructionError, match=r"\.alayout in \.row and \.blayout in \.col"):
            parse(text.replace(".row.col", layouts))


@pytest.mark.parametrize("text,regs", [
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", (4, 2, 4, 4)),
    ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", (4, 2, 2, 2)),
    ("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32", (2, 1, 4, 4)),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", (4, 2, 4, 4)),
    ("mma.sync.aligned.m16n8k16.row.col.f16.e4m3.e5m2.f16", (2, 1, 2, 2)),
    ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", (4, 2, 4, 4)),
    ("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", (2, 1, 4, 4)),
    ("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64", (8, 4, 4, 4)),
    ("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64", (1, 1, 2, 2)),
    # four quad-pair products: A and B two .f16x2 registers, C and D four .f16x2 or eight .f32
    ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32", (2, 2, 8, 8)),
    ("mma.sync.aligned.m8n8k4.col.row.f16.f16.f16.f16", (2, 2, 4, 4)),
    ("mma.sync.aligned.m8n8k4.row.row.f32.f16.f16.f16", (2, 2, 4, 8)),
    ("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32", (1, 1, 2, 2)),
    ("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32", (4, 2, 4, 4)),
    ("mma.sync.aligned.m8n8k32.row.col.s32.s4.u4.s32", (1, 1, 2, 2)),
    ("mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32", (4, 2, 4, 4)),
    ("mma.sync.aligned.m8n8k128.row.col.xor.popc.s32.b1.b1.s32", (1, 1, 2, 2)),
    ("mma.sync.aligned.m16n8k256.row.col.and.popc.s32.b1.b1.s32", (4, 2, 4, 4)),
])
def test_fragment_register_counts(text, regs):
    inst = parse(text)
    assert tuple(inst.fragment_regs(m) for m in "abcd") == regs
    words = tuple(r * (2 if inst.atype == "f64" else 1) for r in regs)
    assert tuple(inst.fragment_words(m) for m in "abcd") == words


def test_f64_words_are_twice_the_registers():
    inst = parse("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64")
    assert [inst.fragment_regs(m) for m in "abcd"] == [4, 2, 4, 4]
    assert [inst.fragment_words(m) for m in "abcd"] == [8, 4, 8, 8]


_F16_STMT = ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, "
             "{%r5,%r6}, {%f5,%f6,%f7,%f8};")


def test_full_statement_with_operands():
    inst = parse(_F16_STMT)
    assert isinstance(inst, MmaSync) and inst.shape == Shape(16, 8, 16)
    assert [op.kind for op in inst.operands] == ["vector"] * 4
    assert inst.operands[1].regs == ("%r1", "%r2", "%r3", "%r4") and inst.operands[2].regs == ("%r5", "%r6")
    assert inst == parse("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")  # operands do not compare
    f64 = parse("mma.sync.aligned.m8n8k4.row.col.rn.f64.f64.f64.f64 {%fd1,%fd2}, {%fd3}, {%fd4}, {%fd5,%fd6};")
    assert f64.rounding == "rn" and len(f64.operands) == 4
    s8 = parse("mma.m8n8k16.row.col.satfinite.s32.s8.u8.s32 {d0,d1}, {a0}, {b0}, {c0,c1}")
    assert s8.satfinite and (s8.atype, s8.btype) == ("s8", "u8")


@pytest.mark.parametrize("operands,needles", [
    ("{%f1,%f2,%f3}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f5,%f6,%f7,%f8}", ["operand d", "4 registers"]),
    ("{%f1,%f2,%f3,%f4}, {%r1,%r2}, {%r5,%r6}, {%f5,%f6,%f7,%f8}", ["operand a", "4 registers"]),
    ("{%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6,%r7,%r8}, {%f5,%f6,%f7,%f8}", ["operand b", "2 registers"]),
    ("{%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f5,%f6}", ["operand c", "4 registers"]),
    ("{%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, %r5, {%f5,%f6,%f7,%f8}", ["operand b", "vector of 2"]),
    ("{%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6}", ["4 operands", "got 3"]),
])
def test_wrong_operands_name_the_operand_and_the_count(operands, needles):
    with pytest.raises(InvalidInstructionError) as info:
        parse(f"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {operands};")
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


@pytest.mark.parametrize("text,needles", [
    ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f32", [".dtype .f16", ".ctype .f32", ".f16, .f32"]),
    ("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f16", [".dtype .f32", ".ctype .f16"]),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f16", [".dtype .f32", ".ctype .f16", "FP8"]),
    ("mma.sync.aligned.m16n8k16.row.col.f16.e5m2.e5m2.f32", [".dtype .f16", ".ctype .f32"]),
    ("mma.sync.aligned.m16n8k16.col.row.f32.f16.f16.f32", [".col.row", ".alayout in .row", ".blayout in .col"]),
    ("mma.sync.aligned.m16n8k16.row.row.f32.f16.f16.f32", [".row.row", ".blayout in .col"]),
    ("mma.sync.aligned.m16n8k16.f32.f16.f16.f32", [".alayout.blayout", "none"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.tf32.tf32.f32", [".m16n8k16", ".tf32", ".m16n8k4, .m16n8k8"]),
    ("mma.sync.aligned.m16n8k16.row.col.f16.bf16.bf16.f32", [".dtype .f16", ".bf16", "allowed: .f32"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f16", [".ctype .f16", ".bf16", "allowed: .f32"]),
    ("mma.sync.aligned.m16n8k16.row.col.satfinite.f32.f16.f16.f32", [".satfinite", ".f16", ".s8, .u8, .s4, .u4"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32.satfinite", [".satfinite", "FP8"]),
    ("mma.sync.aligned.m16n8k16.row.col.rn.f32.f16.f16.f32", [".rn", ".f16", "on .f64 only"]),
    ("mma.sync.aligned.m16n8k16.row.col.rz.f64.f64.f64.f64", [".rz", ".f64", "allowed: .rn"]),
    ("mma.sync.aligned.m16n8k16.row.col.rn.s32.s8.s8.s32", [".rn", "integer"]),
    ("mma.sync.aligned.m16n8k256.row.col.and.s32.b1.b1.s32", [".popc", "got .and and no .popc", ".and, .xor"]),
    ("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32", [".op.popc", "no .op", ".and, .xor"]),
    ("mma.sync.aligned.m16n8k16.row.col.and.popc.s32.s8.s8.s32", [".and", "single-bit"]),
    ("mma.sync.aligned.m16n8k16.row.col.s32.s4.s4.s32", [".m16n8k16", "sub-byte", ".m8n8k32, .m16n8k32, .m16n8k64"]),
    ("mma.sync.aligned.m16n8k32.row.col.s32.s8.s4.s32", [".atype .s8", ".btype .s4", "s4|u4 with s4|u4"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.bf16.f32", [".atype .f16", ".btype .bf16"]),
    ("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f32", [".ctype .f32", "allowed: .f64"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16", ["four type qualifiers", ".f32, .f16, .f16"]),
    ("mma.sync.aligned.m16n16k16.row.col.f32.f16.f16.f32", [".m16n16k16", "not an mma.sync shape", ".m16n8k16"]),
    ("mma.sync.aligned.row.col.f32.f16.f16.f32", ["shape", ".m16n8k16"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.foo", [".foo", ".popc"]),
])
def test_rejected_forms_name_the_qualifier_and_the_choices(text, needles):
    _assert_refused(InvalidInstructionError, text, needles)


def _assert_refused(error, text, needles):
    """``parse(text)`` raises ``error`` whose message holds every one of ``needles``."""
    with pytest.raises(error) as info:
        parse(text)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


@pytest.mark.parametrize("text,needles", [
    ("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.kind::f8f6f4.f32.e3m2.e2m1.f32", [".kind", "sm_90a"]),
    ("mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e3m2.f32", [".kind", "sm_90a"]),
    ("mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0",
     [".kind", "sm_90a"]),
    ("mma.sync.aligned.m16n8k32.row.col.block_scale.f32.e4m3.e4m3.f32.ue8m0", [".block_scale", "sm_90a"]),
])
def test_valid_forms_fastmma_does_not_model_are_unsupported(text, needles):
    _assert_refused(UnsupportedInstructionError, text, needles)


def test_qualifier_order_is_free_except_the_types():
    base = parse("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32")
    assert parse("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32.satfinite") == base
    assert parse("mma.sync.aligned.row.col.m16n8k32.satfinite.s32.s8.u8.s32") == base
    b1 = parse("mma.sync.aligned.m16n8k256.row.col.and.popc.s32.b1.b1.s32")
    assert parse("mma.sync.aligned.and.popc.m16n8k256.row.col.s32.b1.b1.s32") == b1
    swapped = parse("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.u8.s8.s32")
    assert (base.atype, base.btype) == ("s8", "u8") and (swapped.atype, swapped.btype) == ("u8", "s8")
    assert swapped != base


def test_wmma_is_not_mistaken_for_mma():
    w = parse("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32")
    assert isinstance(w, WmmaMma) and not isinstance(w, MmaSync) and w.family == "wmma"
    with pytest.raises(InvalidInstructionError, match="not a wmma shape"):
        parse("wmma.mma.sync.aligned.row.col.m16n8k16.f32.f16.f16.f32")
    m = parse("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    assert isinstance(m, MmaSync) and not isinstance(m, WmmaMma)


@pytest.mark.parametrize("text,expected_rule", [
    ("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64", FmaChainRule("rn")),
    ("mma.sync.aligned.m8n8k4.row.col.rn.f64.f64.f64.f64", FmaChainRule("rn")),
    ("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32", IntDotRule(32, True)),
    ("mma.sync.aligned.m8n8k32.row.col.s32.s4.s4.s32", IntDotRule(32, False)),
    ("mma.sync.aligned.m16n8k128.row.col.xor.popc.s32.b1.b1.s32", PopcRule("xor", 128)),
    ("mma.sync.aligned.m16n8k256.row.col.and.popc.s32.b1.b1.s32", PopcRule("and", 256)),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", FusedDotRule(16, 25, -133, 23, "rz", "f32")),
    ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", FusedDotRule(16, 25, -21, 10, "rne", "f16")),
    # one fused step of 8 (recorded; wmma's m16n16k8 takes two of 4)
    ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", FusedDotRule(8, 25, -133, 23, "rz", "f32")),
    # fp8 through f16 (recorded, and ptxas's SASS): two f16 steps of k / 2, then C added
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32",
     ConvertedF16Rule(FusedDotRule(16, 25, -133, 23, "rz", "f32"), 32)),
    ("mma.sync.aligned.m16n8k16.row.col.f16.e5m2.e5m2.f16",
     ConvertedF16Rule(FusedDotRule(8, 25, -21, 10, "rne", "f16"), 16)),
    # m8n8k4 .f16 through single-precision FFMA (recorded, and ptxas's SASS): a chain for an f32 D,
    # two pairs added to C for an f16 D
    ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32", FfmaExpansionRule("chain")),
    ("mma.sync.aligned.m8n8k4.col.col.f32.f16.f16.f16", FfmaExpansionRule("chain")),
    ("mma.sync.aligned.m8n8k4.row.row.f16.f16.f16.f16", FfmaExpansionRule("pairs")),
])
def test_numerics_rules(text, expected_rule):
    rule = parse(text).rule
    assert rule == expected_rule
    assert rule.describe()
