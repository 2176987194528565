"""fastmma.torch.emulate: PyTorch models whose CPU matmuls take fastmma.matmul's numbers.

Each emulated operator's output is checked against ``fastmma.matmul`` on the operands the
operator received, with the epilogue (alpha, beta, C, one rounding) computed here in numpy.
"""

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fastmma  # noqa: E402
import fastmma.torch as ft  # noqa: E402
from fastmma.errors import FastmmaError, InvalidInstructionError  # noqa: E402
from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: E402

NUMPY = {torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16, torch.float32: np.float32,
         torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn, torch.float8_e5m2: ml_dtypes.float8_e5m2}
RAW = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def values(t):
    """A tensor's values as numpy (bf16 / fp8 through ml_dtypes)."""
    t = t.detach().contiguous()
    return t.view(RAW[t.element_size()]).numpy().view(NUMPY[t.dtype])


def bits(t):
    return t.detach().contiguous().view(RAW[t.element_size()]).numpy()


def rounded(acc, dtype):
    """float32 -> dtype, to nearest even; fp8 saturating (cvt ... .satfinite)."""
    target = NUMPY[dtype]
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        big = float(ml_dtypes.finfo(target).max)
        acc = np.clip(acc, -big, big)
    return acc.astype(target)


def expected(call):
    """What the emulated ``call`` must give: fastmma.matmul on its operands, then
    f32(alpha) * acc + f32(beta) * C in float32 steps, then one rounding."""
    args = call.args
    alpha, beta = call.kwargs.get("alpha", 1), call.kwargs.get("beta", 1)
    if call.op in ("mm", "bmm"):
        a, b, c = args[0], args[1], None
    else:
        assert call.op in ("addmm", "baddbmm"), call.op
        c, a, b = args[:3]
    acc = fastmma.matmul(values(a), values(b), instruction=call.instruction).astype(np.float32)
    if alpha != 1:
        acc = np.float32(alpha) * acc
    if c is not None and beta != 0:
        cc = values(c).astype(np.float32)
        acc = acc + (cc if beta == 1 else np.float32(beta) * cc)
    return rounded(acc, a.dtype)


def recorder():
    calls = []

    def hook(call):  # operands copied now: the model may overwrite them later (in-place ops)
        copy = lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x  # noqa: E731
        calls.append(call._replace(args=tuple(copy(a) for a in call.args), output=call.output.detach().clone()))
    return calls, hook


def check_calls(calls):
    assert calls
    for call in calls:
        want = expected(call)
        assert bits(call.output).tobytes() == want.view(bits(call.output).dtype).tobytes(), call.op


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention (whose products are bmm) and an MLP."""

    def __init__(self, width=32, heads=2):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(),
                                       torch.nn.Linear(2 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=True)[0]  # need_weights: bmm, not the fused kernel
        return x + self.mlp(self.norm2(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mlp_forward_backward(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).to(dtype)
    x = torch.randn(8, 32, dtype=dtype, requires_grad=True)
    calls, hook = recorder()
    with ft.emulate(hook=hook) as mode:
        y = model(x)
        y.float().square().sum().backward()
    report = mode.report()
    # forward: 2 addmm; backward: grad of x and of each weight (4 mm; layer 1's grad of x too)
    assert report.emulated == len(calls) == 2 + 4 and report.passed == 0
    assert {c.op for c in calls} == {"addmm", "mm"}
    check_calls(calls)
    assert x.grad is not None and x.grad.dtype == dtype and torch.isfinite(x.grad).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_transformer_block_forward_backward():
    torch.manual_seed(1)
    dtype = torch.bfloat16
    block = Block().to(dtype)
    x = torch.randn(2, 6, 32, dtype=dtype, requires_grad=True)
    calls, hook = recorder()
    with ft.emulate(hook=hook) as mode:
        block(x).float().sum().backward()
    report = mode.report()
    assert report.emulated == len(calls) and report.passed == 0
    assert {"bmm", "mm", "addmm"} <= {c.op for c in calls}
    assert any(c.op == "bmm" and c.output.ndim == 3 for c in calls)
    check_calls(calls)
    assert torch.isfinite(x.grad).all()
    assert all(p.grad is not None for p in block.parameters())


def test_fused_attention_passes_through_with_its_reason():
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).to(torch.bfloat16)
    x = torch.randn(2, 5, 16, dtype=torch.bfloat16, requires_grad=True)
    calls, hook = recorder()
    with ft.emulate(hook=hook) as mode:
        layer(x).float().sum().backward()
    report = mode.report()
    fused = {k: n for k, n in report.passed_by_reason.items() if "fused attention" in k}
    assert sum(fused.values()) == 2 and report.passed == 2  # forward and backward kernels
    check_calls(calls)
    assert torch.isfinite(x.grad).all()


def test_alpha_beta_epilogue_order():
    torch.manual_seed(3)
    a, b = torch.randn(5, 24).half(), torch.randn(24, 7).half()
    c = torch.randn(5, 7).half()
    calls, hook = recorder()
    with ft.emulate(hook=hook):
        out = torch.addmm(c, a, b, beta=0.3, alpha=-1.7)
        row = torch.addmm(c[0], a, b, beta=2.0)  # C broadcast along M
        torch.baddbmm(c.expand(3, 5, 7), a.expand(3, 5, 24), b.expand(3, 24, 7), alpha=0.5)
    check_calls(calls)
    acc = fastmma.matmul(a.numpy(), b.numpy(), instruction="m64n256k16.f32.f16.f16")
    want = (np.float32(-1.7) * acc + np.float32(0.3) * c.numpy().astype(np.float32)).astype(np.float16)
    assert np.array_equal(out.numpy().view(np.int16), want.view(np.int16))
    assert row.shape == (5, 7)


def test_alpha_beta_epilogue_in_float32_steps():
    """With a float32 output (tf32) no final rounding hides the epilogue's last bits."""
    torch.manual_seed(8)
    a, b, c = torch.randn(32, 24), torch.randn(24, 40), torch.randn(32, 40)
    calls, hook = recorder()
    with ft.emulate(tf32=True, hook=hook):
        out = torch.addmm(c, a, b, beta=0.3, alpha=-1.7)
    check_calls(calls)
    acc = fastmma.matmul(a.numpy(), b.numpy(), instruction="m64n256k8.f32.tf32.tf32")
    scaled = np.float32(-1.7) * acc
    want = scaled + np.float32(0.3) * c.numpy()
    assert np.array_equal(out.numpy().view(np.uint32), want.view(np.uint32))
    in_double = (scaled.astype(np.float64) + 0.3 * c.numpy().astype(np.float64)).astype(np.float32)
    assert not np.array_equal(want, in_double)  # the case tells the two orders apart


def test_beta_zero_ignores_c_and_nan_is_canonical():
    a = torch.ones(2, 16, dtype=torch.bfloat16)
    b = torch.ones(16, 3, dtype=torch.bfloat16)
    c = torch.full((2, 3), float("nan"), dtype=torch.bfloat16)
    with ft.emulate():
        clean = torch.addmm(c, a, b, beta=0)
        a[0, 0] = float("nan")
        dirty = torch.mm(a, b)
    assert torch.equal(clean, torch.full((2, 3), 16.0, dtype=torch.bfloat16))
    assert (bits(dirty)[0] == 0x7FFF).all()  # the GPU's canonical NaN, whatever the input NaN's bits
    assert np.array_equal(bits(dirty)[1], bits(torch.full((3,), 16.0, dtype=torch.bfloat16)))


@pytest.mark.parametrize("dtype, big", [(torch.float8_e4m3fn, 448.0), (torch.float8_e5m2, 57344.0)])
def test_fp8_rounds_once_with_satfinite(dtype, big):
    torch.manual_seed(4)
    a = torch.randn(4, 64).to(dtype)
    b = torch.randn(64, 8).to(dtype)
    a[0] = 240.0 if dtype == torch.float8_e4m3fn else 40960.0  # row 0 overflows: saturates
    calls, hook = recorder()
    with ft.emulate(hook=hook) as mode:
        d = a @ b
    assert mode.report().emulated == 1 and d.dtype == dtype
    check_calls(calls)
    assert d[0].float().abs().max() == big


def test_mv_dot_addbmm_and_out_variants():
    torch.manual_seed(5)
    a, b = torch.randn(6, 40).half(), torch.randn(40, 10).half()
    inst = "m64n256k16.f32.f16.f16"
    acc = fastmma.matmul(a.numpy(), b.numpy(), instruction=inst)
    with ft.emulate() as mode:
        v = a @ b[:, 3]
        d = a[1] @ b[:, 2]
        o = torch.empty(6, 10, dtype=torch.float16)
        torch.mm(a, b, out=o)
        s = torch.addbmm(torch.zeros(6, 10).half(), a.reshape(6, 2, 20).transpose(0, 1), b.reshape(2, 20, 10))
        i = torch.zeros(6, 10).half().addmm_(a, b)
    assert mode.report().emulated == 5 and mode.report().passed == 0
    assert np.array_equal(v.numpy(), acc[:, 3].astype(np.float16))
    assert d.shape == () and d.item() == float(np.float16(acc[1, 2]))
    assert np.array_equal(o.numpy(), acc.astype(np.float16))
    assert np.array_equal(i.numpy(), acc.astype(np.float16))  # + 0 changes nothing but -0
    # addbmm is one k-loop over the batch's K ranges in turn: the GEMM of the whole K here
    assert np.array_equal(s.numpy(), (acc + np.float32(0)).astype(np.float16))


def test_float32_only_with_tf32():
    torch.manual_seed(6)
    a, b = torch.randn(5, 20), torch.randn(20, 9)
    with ft.emulate() as off:
        plain = a @ b
    assert off.report().emulated == 0 and off.report().passed_by_reason == {"mm: dtype float32 (tf32=False)": 1}
    assert torch.equal(plain, torch.mm(a, b))
    with ft.emulate(tf32=True) as on:
        d = a @ b
    assert on.report().emulated == 1
    want = fastmma.matmul(a.numpy(), b.numpy(), instruction="m64n256k8.f32.tf32.tf32")
    assert np.array_equal(d.numpy().view(np.uint32), want.view(np.uint32))


def test_other_devices_and_dtypes_untouched():
    with ft.emulate(tf32=True) as mode:
        meta = torch.mm(torch.empty(3, 4, device="meta", dtype=torch.float16),
                        torch.empty(4, 5, device="meta", dtype=torch.float16))
        f64 = torch.randn(3, 4, dtype=torch.float64) @ torch.randn(4, 2, dtype=torch.float64)
        ints = torch.ones(2, 2, dtype=torch.int64) @ torch.ones(2, 2, dtype=torch.int64)
        torch.relu(torch.randn(3).half())
    assert meta.device.type == "meta" and meta.shape == (3, 5)
    assert f64.dtype == torch.float64 and torch.equal(ints, torch.full((2, 2), 2))
    assert mode.report().emulated == 0
    assert mode.report().passed_by_reason == {"mm: device meta": 1, "mm: dtype float64": 1, "mm: dtype int64": 1}


def test_instruction_override_and_validation():
    torch.manual_seed(7)
    a, b = torch.randn(16, 48).half(), torch.randn(48, 8).half()
    inst = "m16n8k16.f32.f16.f16.f32"
    calls, hook = recorder()
    with ft.emulate(instruction=inst, hook=hook):
        a @ b
        (a.bfloat16() @ b.bfloat16())  # bf16 keeps its default
    assert [str(c.output.dtype) for c in calls] == ["torch.float16", "torch.bfloat16"]
    assert type(calls[0].instruction).__name__ == "MmaSync" and type(calls[1].instruction).__name__ == "WgmmaMmaAsync"
    check_calls(calls)
    with pytest.raises(FastmmaError, match="f16.*tf32 needs tf32=True"):
        ft.emulate(instruction="m64n256k8.f32.tf32.tf32")
    with pytest.raises(FastmmaError, match="one type among bf16, e4m3, e5m2, f16"):
        ft.emulate(instruction="m64n224k32.s32.s8.s8")
    with pytest.raises(FastmmaError, match="A e4m3, B e5m2"):
        ft.emulate(instruction="m64n256k32.f32.e4m3.e5m2")
    with pytest.raises(InvalidInstructionError):
        ft.emulate(instruction="m64n256k16.f32.f16")


def test_nesting_and_exceptions_restore_the_mode():
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    with pytest.raises(RuntimeError, match="boom"):
        with ft.emulate():
            raise RuntimeError("boom")
    assert _get_current_dispatch_mode() is None
    with ft.emulate(tf32=True) as outer:
        with ft.emulate() as inner:
            a @ b  # the inner mode passes float32 through; the outer reads it as tf32
            a.half() @ b.half()  # the inner one computes it; the outer never sees it
        assert _get_current_dispatch_mode() is outer
    assert _get_current_dispatch_mode() is None
    assert inner.report()[:2] == (1, 1) and outer.report()[:2] == (1, 0)
    assert outer.report().emulated_by_op == {"mm float32": 1}


def test_math_attention_backend_is_emulated():
    """SDPA's math backend, kept in bf16, issues bmm: forward and backward products emulated."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(9)
    q = torch.randn(2, 2, 5, 8, dtype=torch.bfloat16, requires_grad=True)
    allowed = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    calls, hook = recorder()
    try:
        with sdpa_kernel(SDPBackend.MATH), ft.emulate(hook=hook) as mode:
            torch.nn.functional.scaled_dot_product_attention(q, q, q).float().sum().backward()
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(allowed)
    assert mode.report().passed == 0 and mode.report().emulated_by_op == {"bmm bfloat16": 6}
    check_calls(calls)
    assert torch.isfinite(q.grad).all()


def test_out_dtype_float32_is_the_unrounded_accumulator():
    torch.manual_seed(10)
    a, b = torch.randn(6, 40).half(), torch.randn(40, 5).half()
    with ft.emulate():
        d = torch.mm(a, b, out_dtype=torch.float32)
    want = fastmma.matmul(a.numpy(), b.numpy(), instruction="m64n256k16.f32.f16.f16")
    assert d.dtype == torch.float32 and np.array_equal(d.numpy().view(np.uint32), want.view(np.uint32))
