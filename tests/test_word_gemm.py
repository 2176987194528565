"""word_gemm, the integer GEMM on dot-product instructions, is bit-identical to int_dot_mma in
every form this CPU runs, and each form's instruction is the one it names."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import seed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llvmlite import binding as llvm
from llvmlite import ir

from fastmma.kernels import int_gemm as int_gemm_module
from fastmma.kernels import word_gemm as wg
from fastmma.kernels.int_dot import int_dot_mma

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
OPERANDS = [(w, sa, w, sb) for w in (8, 4) for sa in (True, False) for sb in (True, False)]

#: The forms this CPU runs: those whose features it has, and the portable quads, which test
#: the mending of A's and B's offsets anywhere.
HOST = set(wg.codegen_features().split(","))
RUNNABLE = [name for name, needs in wg.NEEDS.items() if needs <= HOST] + ["quads-ir"]


def _case(rng, count, m, k, n, aw, bw):
    a = rng.integers(0, 256, (count, m, k), dtype=np.uint8)
    b = rng.integers(0, 256, (count, k, n), dtype=np.uint8)
    base = rng.choice(np.array([I32_MIN, I32_MAX, 0], np.int64), size=(count, m, n))
    c = np.clip(base + rng.integers(-300_000, 300_000, (count, m, n)), I32_MIN, I32_MAX).astype(np.int32)
    return a, b, c


def _check(form, a, b, c, types_, group, satfinite, use_c):
    got = np.full(c.shape, -777, np.int32)
    wg.word_gemm(a, b, c, got, types_, group, satfinite, use_c, form=wg.FORMS[form])
    for s in range(a.shape[0]):
        ref = np.full(c.shape[1:], 12345, np.int32)
        int_dot_mma(a[s], b[s], c[s], ref, *types_, group, satfinite, use_c)
        np.testing.assert_array_equal(got[s], ref, err_msg=f"{form} stack {s}")
    return got


def _cases(forms):
    """(form, satfinite) pairs: the quads take no .satfinite (see word_gemm)."""
    return [(f, sat) for f in forms for sat in (True, False) if not (sat and wg.FORMS[f].per_word == 4)]


@pytest.mark.parametrize("form,satfinite", _cases(RUNNABLE))
@pytest.mark.parametrize("aw,asg,bw,bsg", OPERANDS)
def test_matches_reference(form, aw, asg, bw, bsg, satfinite):
    """Rows and columns that fill no register block, a K of several blocks, C at both ends of
    the int32 range (so that clamps and wraps happen), with and without C."""
    rng = np.random.default_rng(seed(form, aw, asg, bsg, satfinite))
    a, b, c = _case(rng, 2, 70, 640, 300, aw, bw)
    for use_c in (True, False):
        _check(form, a, b, c, (aw, asg, bw, bsg), 32 if aw == 8 else 64, satfinite, use_c)


@pytest.mark.parametrize("form", [f for f, sat in _cases(RUNNABLE) if sat])
def test_clamps_once_per_group(form):
    """Rows climb past INT32_MAX in their first groups, then fall back: only a clamp after
    each group gives the reference's answer, which here is known in closed form."""
    m, n, group = 5, 37, 32
    k = 8 * group
    a = np.full((1, m, k), 127, np.uint8)
    a[..., k // 2:] = 0x80  # -128
    b = np.full((1, k, n), 127, np.uint8)
    c = np.full((1, m, n), I32_MAX - 100_000, np.int32)
    got = _check(form, a, b, c, (8, True, 8, True), group, True, True)
    assert (got == I32_MAX - 4 * 127 * 128 * group).all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(count=st.integers(1, 3), m=st.integers(1, 40), k=st.sampled_from([16, 32, 64, 96, 512]),
       n=st.integers(1, 70), operands=st.sampled_from(OPERANDS), satfinite=st.booleans(), use_c=st.booleans(),
       data=st.randoms(use_true_random=False))
def test_random_shapes(count, m, k, n, operands, satfinite, use_c, data):
    group = 16 if k == 16 else 32
    rng = np.random.default_rng(data.getrandbits(32))
    a, b, c = _case(rng, count, m, k, n, operands[0], operands[2])
    _check(wg.host_form(satfinite).name, a, b, c, operands, group, satfinite, use_c)


def test_quads_refuse_satfinite():
    """Offsets would move a group's sum before its clamp: the quads take no .satfinite."""
    a, b, c = np.zeros((1, 4, 32), np.uint8), np.zeros((1, 32, 8), np.uint8), np.zeros((1, 4, 8), np.int32)
    with pytest.raises(ValueError, match="satfinite"):
        wg.word_gemm(a, b, c, np.empty_like(c), (8, True, 8, True), 32, True, True, form=wg.FORMS["quads-ir"])


def test_int_gemm_takes_the_words_from_its_thresholds(monkeypatch):
    """int_gemm hands GEMMs of at least ``_WORDS_FROM`` products, ``_WORDS_ROWS`` rows and a K of
    ``_WORDS_DEPTH`` to word_gemm, and the others to its float32 blocks."""
    calls = []
    monkeypatch.setattr(wg, "word_gemm", lambda *args, **kw: calls.append(args[0].shape))
    for m, k, n in ((4, 512, 1024), (16, 512, 4096), (64, 32, 4096), (64, 512, 1024)):
        a, b = np.zeros((m, k), np.uint8), np.zeros((k, n), np.uint8)
        c = np.zeros((m, n), np.int32)
        int_gemm_module.int_gemm(a, b, c, np.empty_like(c), 8, True, 8, True, 32, False, True)
    assert 4 * 512 * 1024 < int_gemm_module._WORDS_FROM <= 16 * 512 * 4096
    assert 16 < int_gemm_module._WORDS_ROWS <= 64
    assert 32 < int_gemm_module._WORDS_DEPTH <= 512
    assert calls == [(1, 64, 512)]


def test_host_form_follows_the_features(monkeypatch):
    """The first form of NEEDS whose features the CPU has."""
    for features, name in (("+avx2,+avx512f,+avx512bw,+avx512vnni", "vnni"), ("+avx2,+avx512f,+avx512bw", "pairs-512"),
                           ("+avx2,+fma", "pairs"), ("+neon", "pairs-ir")):
        monkeypatch.setattr(wg, "codegen_features", lambda f=features: f)
        assert wg.host_form().name == name
        assert wg.host_form(satfinite=True).name == ("pairs-512" if name == "vnni" else name)


@pytest.mark.parametrize("form,cpu,instruction", [
    ("vnni", "sapphirerapids", "vpdpbusd"), ("pairs-512", "skylake-avx512", "vpmaddwd"),
    ("pairs-512", "znver4", "vpdpwssd"), ("pairs", "znver3", "vpmaddwd"),
])
def test_each_form_lowers_to_its_instruction(form, cpu, instruction):
    """One step of a form, compiled for a CPU that has its instruction (whether or not this
    one does), is that instruction: a form that fell back to scalar code would be exact but
    slow, and a wrong intrinsic signature would not compile."""
    f = wg.FORMS[form]
    vec = ir.VectorType(ir.IntType(32), f.lanes)
    module = ir.Module()
    module.triple = "x86_64-unknown-linux-gnu"
    fn = ir.Function(module, ir.FunctionType(vec, [vec] * 3), "step")
    builder = ir.IRBuilder(fn.append_basic_block())
    builder.ret(wg._dot(builder, *fn.args, f))
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    parsed = llvm.parse_assembly(str(module))
    machine = llvm.Target.from_triple(module.triple).create_target_machine(cpu=cpu, opt=2)
    assert instruction in machine.emit_assembly(parsed)
