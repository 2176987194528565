"""fastmma.triton: recorded Triton kernels rerun in Triton's interpreter under emulate(), every bit.

Each file of tests/golden/triton holds a kernel's source, its launch (constexprs, num_warps,
grid from its block shape) and the H100's output bits for a few inputs
(tools/record/triton_kernels.py).  Triton decides at each @triton.jit decoration whether to
interpret, from TRITON_INTERPRET, so every test defines its kernel after setting it.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: its own @jit functions are interpreted then

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")
tl = pytest.importorskip("triton.language")

import fastmma.triton as ft  # noqa: E402
from fastmma.errors import FastmmaError  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "triton"
FILES = sorted(GOLDEN.glob("*.npz"))
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "e4m3": torch.float8_e4m3fn,
         "e5m2": torch.float8_e5m2, "s8": torch.int8, "s32": torch.int32, "f64": torch.float64}
SIGNED = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
TL_OUT = {"f32": tl.float32, "f16": tl.float16, "s32": tl.int32, "f64": tl.float64}


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _kernel(meta):
    scope = {"triton": triton, "tl": tl}
    exec(compile(meta["kernel_source"], f"<{meta['variant']}>", "exec"), scope)
    return scope[meta["kernel_name"]]


def _tensor(bits, name):
    if name in ("s8", "s32"):
        return torch.from_numpy(np.ascontiguousarray(bits).view(f"i{bits.itemsize}"))
    t = torch.from_numpy(np.ascontiguousarray(bits).view(np.dtype(f"i{bits.itemsize}") if bits.itemsize > 1 else
                                                         np.uint8))
    return t.view(TORCH[name])


def _bits(t):
    return t.contiguous().view(SIGNED[t.element_size()]).numpy().view(np.dtype(f"u{t.element_size()}"))


def _launch(meta, kernel, a, b, c):
    m, n, k = meta["m"], meta["n"], meta["k"]
    cx = dict(meta["constexprs"])
    d = torch.zeros((m, n), dtype=TORCH[meta["ctype"]])
    c = c if c is not None else torch.empty((m, n), dtype=TORCH[meta["ctype"]])
    grid = (math.ceil(m / cx["BM"]), math.ceil(n / cx["BN"]))
    cx["OUT"] = TL_OUT[cx["OUT"]]
    kernel[grid](a, b, c, d, m, n, k, *a.stride(), *b.stride(), *c.stride(), *d.stride(), **cx,
                 num_warps=meta["num_warps"])
    return d


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_kernel(path, interpret):
    """The recorded kernel, interpreted under emulate(), gives the H100's D bit for bit."""
    rec = np.load(path)
    meta = json.loads(bytes(rec["meta"]).decode())
    kernel = _kernel(meta)
    for i in range(meta["n_cases"]):
        a, b = _tensor(rec["a"][i], meta["atype"]), _tensor(rec["b"][i], meta["btype"])
        c = _tensor(rec["c"][i], meta["ctype"]) if meta["c_loaded"] else None
        with ft.emulate():
            d = _launch(meta, kernel, a, b, c)
        got, want = _bits(d), rec["d"][i].view(f"u{rec['d'].itemsize}")
        bad = np.argwhere(got != want)
        assert not len(bad), (f"{meta['variant']} case {i} (mode {rec['mode'][i]}): {len(bad)} of {got.size} "
                              f"elements differ, first at {tuple(bad[0])}: {got[tuple(bad[0])]:#x} != "
                              f"{want[tuple(bad[0])]:#x}")


def test_files_cover_the_issue():
    """Every dot class the rules name has a recording (tf32x3, ieee, fp8 pairs, int8, mma.sync...)."""
    names = {p.stem for p in FILES}
    for rule in ft.RULES.values():
        assert set(rule.recorded) <= names, rule


SMALL = '''
@triton.jit
def small(a_ptr, b_ptr, d_ptr, PREC: tl.constexpr):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
    tl.store(d_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b, input_precision=PREC))
'''


def _small(dtype=torch.float16):
    scope = {"triton": triton, "tl": tl}
    exec(compile(SMALL, "<small>", "exec"), scope)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=g).to(dtype)
    b = torch.randn(16, 16, generator=g).to(dtype)
    return scope["small"], a, b


def test_emulate_restores_triton(interpret):
    """Triton's own create_dot is back after the block, after an exception, and after nesting;
    inside, the dot is fastmma's mma.sync k-loop (16 rows, so not wgmma)."""
    import triton.runtime.interpreter as interp
    original = interp.InterpreterBuilder.create_dot
    kernel, a, b = _small()
    d = torch.empty(16, 16)
    with ft.emulate():
        with ft.emulate(family="wgmma"):
            assert interp.InterpreterBuilder.create_dot is not original
        kernel[(1,)](a, b, d, PREC="tf32")
    assert interp.InterpreterBuilder.create_dot is original
    import fastmma
    want = fastmma.matmul(a.numpy(), b.numpy(), np.zeros((16, 16), np.float32), instruction="m16n8k16.f32.f16.f16.f32")
    assert (d.numpy().view(np.uint32) == want.view(np.uint32)).all()
    with pytest.raises(RuntimeError), ft.emulate():
        raise RuntimeError("inside")
    assert interp.InterpreterBuilder.create_dot is original


SCALED = '''
@triton.jit
def scaled(a_ptr, b_ptr, d_ptr):
    r = tl.arange(0, 32)
    a = tl.load(a_ptr + r[:, None] * 32 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 32 + r[None, :])
    fmt = tl.constexpr("e4m3")
    tl.store(d_ptr + r[:, None] * 32 + r[None, :], tl.dot_scaled(a, None, fmt, b, None, fmt))
'''


FP8 = '''
@triton.jit
def fp8(a_ptr, b_ptr, d_ptr):
    r = tl.arange(0, 32)
    a = tl.load(a_ptr + r[:, None] * 32 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 32 + r[None, :])
    tl.store(d_ptr + r[:, None] * 32 + r[None, :], tl.dot(a, b))
'''


def test_family_override(interpret):
    """emulate(family=...) picks the path of every tensor-core dot, the innermost one in force:
    an fp8 dot is a wgmma k32 loop on one, f16 mma.sync of the converted operands on the other
    (whose numbers differ on wide data)."""
    import ml_dtypes
    scope = {"triton": triton, "tl": tl}
    exec(compile(FP8, "<fp8>", "exec"), scope)
    rng = np.random.default_rng(3)
    a, b = ((rng.standard_normal((32, 32)) * np.exp2(rng.integers(-6, 6, (32, 32)))).astype(ml_dtypes.float8_e4m3fn)
            for _ in range(2))
    ta, tb = (torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn) for x in (a, b))
    import fastmma
    wgmma = fastmma.matmul(a, b, instruction="m64n32k32.f32.e4m3.e4m3").view(np.uint32)
    k = ft.K_SLOTS
    mma = fastmma.matmul(a[:, k].astype(np.float16), b[k].astype(np.float16), np.zeros((32, 32), np.float32),
                         instruction="m16n8k16.f32.f16.f16.f32").view(np.uint32)
    assert (wgmma != mma).any()
    d = torch.empty(32, 32)
    with ft.emulate(family="wgmma"):
        with ft.emulate(family="mma"):
            scope["fp8"][(1,)](ta, tb, d)
            assert (d.numpy().view(np.uint32) == mma).all()
        scope["fp8"][(1,)](ta, tb, d)
        assert (d.numpy().view(np.uint32) == wgmma).all()
    with ft.emulate():  # 32 rows: Triton's choice is mma.sync
        scope["fp8"][(1,)](ta, tb, d)
        assert (d.numpy().view(np.uint32) == mma).all()


def test_unsupported_dots(interpret):
    """tl.dot_scaled and pairs sm_90a has no dot for are refused, naming what is supported."""
    scope = {"triton": triton, "tl": tl}
    exec(compile(SCALED, "<scaled>", "exec"), scope)
    a = torch.zeros(32, 32).to(torch.float8_e4m3fn)
    with pytest.raises(Exception) as err, ft.emulate():
        scope["scaled"][(1,)](a, a, torch.empty(32, 32))
    assert "tl.dot_scaled" in str(err.value) and "e4m3/e5m2" in str(err.value)
    for pair in (("f16", "bf16"), ("e4m3", "f16"), ("s8", "f16")):
        with pytest.raises(ft.UnsupportedDotError, match=f"{pair[0]} x {pair[1]}.*e4m3/e5m2"):
            ft.operand_class(*pair, "tf32")
    with pytest.raises(ft.UnsupportedDotError, match="family"):
        with ft.emulate(family="wmma"):
            pass


def test_needs_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ft.TritonEmulationError, match="TRITON_INTERPRET"), ft.emulate():
        pass
    assert issubclass(ft.TritonEmulationError, FastmmaError)


def test_fma32_is_one_rounding():
    """fma32 against exact rational arithmetic, on values whose products and sums round."""
    rng = np.random.default_rng(5)
    a, b, c = (np.ldexp(rng.random(2000) + 0.5, rng.integers(-140, 60, 2000)).astype(np.float32)
               * rng.choice([-1, 1], 2000).astype(np.float32) for _ in range(3))
    got = ft.fma32(a, b, c)
    for x, y, z, g in zip(a, b, c, got):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        below = np.float32(float(exact))  # a neighbour of the exact value; then the nearest of it and the next
        cands = [np.nextafter(below, np.float32(-np.inf)), below, np.nextafter(below, np.float32(np.inf))]
        best = min(cands, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.float32(v).view(np.uint32)) & 1))
        assert g == best or (g == 0 and best == 0), (x, y, z, g, best)
