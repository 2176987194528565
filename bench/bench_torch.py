"""The overhead of ``fastmma.torch.emulate`` per matmul, beside ``fastmma.matmul`` called directly.

    python -m pytest bench/bench_torch.py --benchmark-columns=min,mean

Each case times a PyTorch call under the mode with pytest-benchmark and, before each of its
rounds (pytest-benchmark's ``setup``), ``fastmma.matmul`` on the same GEMM's numpy operands,
and records ``best time under the mode / best direct time``.  What the mode adds: the
dispatch, the tensors' conversion to numpy (a transposed weight's copy), the f32 epilogue
and its rounding, and the result's tensor.  A second row per case times that alone
(:func:`overhead_alone`: the same calls with the GEMMs' outputs looked up, not computed), as a
fraction of the direct GEMM time: on a machine shared with other work the GEMM's own time
varies by more than the whole overhead, and the first ratio then mostly measures the noise.
``FASTMMA_BENCH_SIZES`` sets the sizes.
"""

import os
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fastmma  # noqa: E402
import fastmma.torch as ft  # noqa: E402

SIZES = [int(s) for s in os.environ.get("FASTMMA_BENCH_SIZES", "512,1024").split(",")]
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def numpy_of(t):
    return ft._numpy(t)


class Direct:
    """``fastmma.matmul`` on each of ``gemms`` (A, B, instruction), timed; the best round kept."""

    def __init__(self, gemms):
        self.gemms, self.best = gemms, float("inf")
        self()  # compile or load the cached kernels

    def __call__(self):
        start = time.perf_counter()
        for a, b, inst in self.gemms:
            fastmma.matmul(a, b, instruction=inst)
        self.best = min(self.best, time.perf_counter() - start)


def overhead_alone(monkeypatch, run, gemms, rounds=30) -> float:
    """The best time of ``run`` with the mode's GEMMs answered from a table (copies of the
    same outputs, computed once; the copy is counted against the mode): what the mode adds
    to each GEMM, measured apart from the GEMM's own time, which on a loaded machine varies
    by more than the whole overhead."""
    outputs = {(a.shape[0], b.shape[1]): fastmma.matmul(a, b, instruction=inst) for a, b, inst in gemms}
    best = float("inf")
    with monkeypatch.context() as patch:
        patch.setattr(ft, "matmul", lambda a, b, instruction: outputs[(a.shape[-2], b.shape[-1])].copy())
        for _ in range(rounds):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
    return best


def _beside_direct(benchmark, record_ratio, monkeypatch, case, label, run, gemms, rounds):
    direct = Direct(gemms)
    run()  # the mode's first call
    benchmark.pedantic(run, setup=direct, rounds=rounds, iterations=1, warmup_rounds=1)
    ratio = benchmark.stats.stats.min / direct.best
    alone = overhead_alone(monkeypatch, run, gemms)
    benchmark.extra_info.update(direct_seconds=direct.best, ratio=ratio, gemms=len(gemms), overhead_seconds=alone,
                                overhead_ratio=alone / direct.best)
    record_ratio(case, label, benchmark.stats.stats.min, "fastmma.matmul direct", direct.best)
    record_ratio(f"{case}: the mode's own time", label, alone, "fastmma.matmul direct", direct.best)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["mm", "linear"])
def bench_torch_op(benchmark, record_ratio, monkeypatch, op, dtype, size):
    """``a @ b`` (mm) or ``F.linear(x, W, bias)`` (addmm of W's transpose, bias in the
    epilogue) under the mode, beside ``fastmma.matmul(a, b)`` on C-contiguous numpy operands
    (for linear ``W.T`` copied: the mode's copy of the transposed weight counts as overhead)."""
    torch.manual_seed(0)
    t = DTYPES[dtype]
    inst = ft.DEFAULTS[dtype]
    x, w = torch.randn(size, size).to(t), torch.randn(size, size).to(t)
    bias = torch.randn(size).to(t)
    if op == "mm":
        call, gemm = (lambda: x @ w), (numpy_of(x), numpy_of(w), inst)
    else:
        call, gemm = (lambda: torch.nn.functional.linear(x, w, bias)), (numpy_of(x), np.ascontiguousarray(numpy_of(w).T), inst)

    def run():
        with ft.emulate():
            call()
    _beside_direct(benchmark, record_ratio, monkeypatch, f"torch mode {op} {dtype}", f"{size}^3", run, [gemm],
                   rounds=7 if size <= 512 else 3)


@pytest.mark.parametrize("size", SIZES[:1])
def bench_torch_mlp(benchmark, record_ratio, monkeypatch, size):
    """A two-layer bf16 MLP's forward and backward under the mode (6 GEMMs of ``size``^3 and
    the model's other operators), beside ``fastmma.matmul`` on the 6 GEMMs' operands."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(size, size), torch.nn.ReLU(),
                                torch.nn.Linear(size, size)).to(torch.bfloat16)
    x = torch.randn(size, size, dtype=torch.bfloat16, requires_grad=True)
    gemms = []

    def capture(call):
        a, b = (call.args[1], call.args[2]) if call.op == "addmm" else call.args[:2]
        gemms.append((numpy_of(a), numpy_of(b), call.instruction))

    def step(hook=None):
        with ft.emulate(hook=hook):
            model(x).float().sum().backward()
    step(capture)
    assert len(gemms) == 6
    _beside_direct(benchmark, record_ratio, monkeypatch, "torch mode MLP fwd+bwd bf16", f"6 x {size}^3", step, gemms,
                   rounds=5)
