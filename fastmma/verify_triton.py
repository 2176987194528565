"""Whole Triton GEMM kernels for ``fastmma verify`` and tools/record: the kernel, its cases, its launch.

One kernel source (:data:`KERNEL_SOURCE`, a k-loop GEMM with constexpr switches) and a table of
cases (:data:`CASES`, :data:`CHECK_CASES`: dtype pair, accumulator, input precision, block
shape, warps) cover the dtype, accumulator and path matrix of tests/golden/triton:
tools/record/triton_kernels.py recorded them on an H100, and the Triton section of ``fastmma
verify`` (:class:`fastmma.verify.TritonSection`) runs them with fresh data.

This file needs numpy only (torch and triton where a kernel runs), not the rest of fastmma, so
that it also loads by path on a GPU machine without numba (tools/record, ``python3
fastmma/verify_device.py``).  The reference side is :func:`worker`: run with
``TRITON_INTERPRET=1`` (:class:`Interpreter` starts it so), it computes the kernels in Triton's
interpreter under :func:`fastmma.triton.emulate`, which a process that has imported triton
without the interpreter cannot do.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

KERNEL_SOURCE = '''
@triton.jit
def gemm(a_ptr, b_ptr, c_ptr, d_ptr, M, N, K,
         s_am, s_ak, s_bk, s_bn, s_cm, s_cn, s_dm, s_dn,
         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
         LOAD_C: tl.constexpr, PASS_ACC: tl.constexpr, PREC: tl.constexpr,
         OUT: tl.constexpr, IMPRECISE: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    if LOAD_C:
        acc = tl.load(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, mask=out_mask, other=0.0)
    else:
        acc = tl.zeros((BM, BN), dtype=OUT)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if PASS_ACC:
            acc = tl.dot(a, b, acc, input_precision=PREC, out_dtype=OUT, max_num_imprecise_acc=IMPRECISE)
        else:
            acc += tl.dot(a, b, input_precision=PREC, out_dtype=OUT, max_num_imprecise_acc=IMPRECISE)
    tl.store(d_ptr + rm[:, None] * s_dm + rn[None, :] * s_dn, acc, mask=out_mask)
'''
KERNEL_NAME = "gemm"
NUM_STAGES = 2
LAYOUT = "A (M, K), B (K, N), C and D (M, N), all row-major and contiguous"


@dataclasses.dataclass(frozen=True)
class Case:
    """One launch configuration of :data:`KERNEL_SOURCE`: operand types (fastmma's names), the
    accumulator ``out``, ``input_precision``, ``max_num_imprecise_acc``, whether C is loaded
    (else ``tl.zeros``) and passed to ``tl.dot`` (else ``acc += tl.dot``), the block, warps,
    the problem's (M, N, K) and the recorder's data modes."""
    name: str
    atype: str
    btype: str
    out: str = "f32"
    prec: str = "tf32"
    imprecise: int | None = None
    load_c: bool = True
    pass_acc: bool = True
    bm: int = 64
    bn: int = 32
    bk: int = 32
    warps: int = 4
    mnk: tuple = (70, 40, 100)
    modes: tuple = (1, 2, 4)

    def fields(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, fields: dict) -> "Case":
        return cls(**{k: tuple(v) if k in ("mnk", "modes") else v for k, v in fields.items()})

    def constexprs(self) -> dict:
        """The kernel's constexprs, ``OUT`` by its fastmma name (:func:`launch` makes it a tl type)."""
        return {"BM": self.bm, "BN": self.bn, "BK": self.bk, "LOAD_C": self.load_c, "PASS_ACC": self.pass_acc,
                "PREC": self.prec, "OUT": self.out, "IMPRECISE": self.imprecise}


CASES = [
    # wgmma path: num_warps 4, BLOCK_M 64
    Case("f16.f32", "f16", "f16"),
    Case("f16.f32.zero_init", "f16", "f16", load_c=False, modes=(2, 4)),
    Case("f16.f32.acc_add", "f16", "f16", pass_acc=False, modes=(1, 4)),
    Case("f16.f16", "f16", "f16", out="f16", modes=(0, 2, 4)),
    Case("bf16.f32", "bf16", "bf16"),
    Case("tf32", "f32", "f32", prec="tf32"),
    Case("tf32x3", "f32", "f32", prec="tf32x3"),
    Case("ieee", "f32", "f32", prec="ieee", bk=16),
    Case("e4m3.e4m3", "e4m3", "e4m3", bk=64),
    Case("e5m2.e5m2", "e5m2", "e5m2", bk=64),
    Case("e4m3.e5m2", "e4m3", "e5m2", bk=64),
    Case("e5m2.e4m3", "e5m2", "e4m3", bk=64),
    Case("e4m3.imprecise32", "e4m3", "e4m3", bk=64, imprecise=32),
    Case("e4m3.imprecise64.bk128", "e4m3", "e4m3", bk=128, imprecise=64, mnk=(70, 40, 300)),
    Case("e4m3.acc_add", "e4m3", "e4m3", bk=64, pass_acc=False, modes=(1, 4)),
    Case("e4m3.f16", "e4m3", "e4m3", out="f16", bk=64, modes=(0, 2, 4)),
    Case("s8", "s8", "s8", out="s32", bk=64, modes=(0, 5)),
    Case("f64", "f64", "f64", out="f64", bk=16, mnk=(70, 40, 40), modes=(4,)),
    Case("f16.long_k", "f16", "f16", bk=64, mnk=(9, 8, 8192), modes=(1,)),
    Case("e4m3.long_k", "e4m3", "e4m3", bk=128, mnk=(9, 8, 8192), modes=(1,)),
    Case("f16.w8.bm128.bn256", "f16", "f16", bm=128, bn=256, bk=64, warps=8, mnk=(130, 260, 70), modes=(1,)),
    Case("tf32.w8.bm128.bn128", "f32", "f32", prec="tf32", bm=128, bn=128, bk=32, warps=8, mnk=(130, 130, 40),
         modes=(1,)),
    # small tiles / two warps: the mma.sync path
    Case("mma.f16.f32", "f16", "f16", bm=32, bn=32, warps=2),
    Case("mma.f16.f16", "f16", "f16", out="f16", bm=32, bn=32, warps=2, modes=(0, 2, 4)),
    Case("mma.bf16.f32", "bf16", "bf16", bm=32, bn=32, warps=2),
    Case("mma.tf32", "f32", "f32", prec="tf32", bm=32, bn=32, warps=2),
    Case("mma.tf32x3", "f32", "f32", prec="tf32x3", bm=32, bn=32, warps=2),
    Case("mma.ieee", "f32", "f32", prec="ieee", bm=32, bn=32, bk=16, warps=2),
    Case("mma.e4m3.e4m3", "e4m3", "e4m3", bm=32, bn=32, bk=64, warps=2),
    Case("mma.e5m2.e4m3", "e5m2", "e4m3", bm=32, bn=32, bk=64, warps=2),
    Case("mma.e4m3.f16", "e4m3", "e4m3", out="f16", bm=32, bn=32, bk=64, warps=2, modes=(0, 2, 4)),
    Case("mma.s8", "s8", "s8", out="s32", bm=32, bn=32, bk=64, warps=2, modes=(0, 5)),
    Case("mma.f16.f32.zero_init", "f16", "f16", load_c=False, bm=32, bn=32, warps=2, modes=(2, 4)),
    Case("mma.w4.bm16", "f16", "f16", bm=16, bn=64, warps=4, modes=(1,)),
]

# A second set, recorded after fastmma.triton's rules were written from the first: new seeds
# (the names), other block shapes and forms, to check that the rules were not fitted to CASES.
CHECK_CASES = [
    Case("check.f16.f32.bk128.w8", "f16", "f16", bm=64, bn=64, bk=128, warps=8, mnk=(70, 72, 300), modes=(1, 4)),
    Case("check.e4m3.e4m3.mnk", "e4m3", "e4m3", bk=32, mnk=(65, 33, 80), modes=(1, 4)),
    Case("check.ieee.acc_add", "f32", "f32", prec="ieee", bk=32, pass_acc=False, modes=(1, 4)),
    Case("check.ieee.zero_init", "f32", "f32", prec="ieee", bk=16, load_c=False, modes=(2,)),
    Case("check.tf32x3.acc_add", "f32", "f32", prec="tf32x3", pass_acc=False, modes=(1, 4)),
    Case("check.tf32x3.zero_init", "f32", "f32", prec="tf32x3", load_c=False, modes=(2, 4)),
    Case("check.s8.acc_add", "s8", "s8", out="s32", bk=64, pass_acc=False, modes=(0, 5)),
    Case("check.e5m2.imprecise32.zero_init", "e5m2", "e5m2", bk=64, imprecise=32, load_c=False, modes=(1, 4)),
    Case("check.mma.e4m3.e5m2.bk32", "e4m3", "e5m2", bm=32, bn=32, bk=32, warps=2, modes=(1, 4)),
    Case("check.mma.e5m2.e5m2.bk128", "e5m2", "e5m2", bm=32, bn=32, bk=128, warps=2, mnk=(40, 40, 256),
         modes=(1, 4)),
    Case("check.mma.e4m3.imprecise0", "e4m3", "e4m3", bk=64, imprecise=0, modes=(1,)),
    Case("check.mma.bf16.zero_init.w1", "bf16", "bf16", load_c=False, bm=16, bn=16, bk=32, warps=1, mnk=(20, 20, 70),
         modes=(2, 4)),
    Case("check.mma.tf32.acc_add", "f32", "f32", prec="tf32", pass_acc=False, bm=32, bn=32, warps=2, modes=(1, 4)),
    Case("check.mma.f16.long_k", "f16", "f16", bm=16, bn=16, bk=64, warps=1, mnk=(9, 8, 8192), modes=(1,)),
]

#: ``fastmma verify --quick``'s share of the cases: every operand class (f16, bf16, tf32,
#: tf32x3, ieee, fp8, int8, f64) and accumulator (f32, f16, s32, f64), on both paths, with
#: a tl.zeros accumulator, ``acc += tl.dot`` and fp8's imprecise accumulation among them.
QUICK = ("f16.f32.acc_add", "bf16.f32", "tf32", "e4m3.e5m2", "e4m3.imprecise32", "e4m3.f16", "s8", "f64",
         "mma.f16.f32.zero_init", "mma.f16.f16", "mma.tf32x3", "mma.ieee", "mma.e5m2.e4m3", "mma.s8")

#: fastmma type -> (bits of an element, numpy dtype of the arrays that hold them)
STORAGE = {"f16": "<u2", "bf16": "<u2", "f32": "<u4", "f64": "<u8", "e4m3": "|u1", "e5m2": "|u1", "s8": "|i1",
           "s32": "<i4"}


def case_meta(case: Case) -> dict:
    """The launch part of a triton file's meta (tests/golden/FORMAT.md, "triton files")."""
    m, n, k = case.mnk
    return {"family": "triton", "kernel_source": KERNEL_SOURCE, "kernel_name": KERNEL_NAME,
            "constexprs": case.constexprs(), "num_warps": case.warps, "num_stages": NUM_STAGES,
            "m": m, "n": n, "k": k, "atype": case.atype, "btype": case.btype, "ctype": case.out,
            "c_loaded": case.load_c, "layout": LAYOUT}


# ---------------------------------------------------------------- running a kernel


@functools.cache
def load_kernel():
    """The kernel from :data:`KERNEL_SOURCE`, compiled or interpreted as TRITON_INTERPRET says
    when it is first called (triton.jit reads its source from a file, so it is written to one)."""
    path = os.path.join(tempfile.mkdtemp(prefix="fastmma-triton-"), "triton_kernels_gemm.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n" + KERNEL_SOURCE)
    spec = importlib.util.spec_from_file_location("triton_kernels_gemm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, KERNEL_NAME)


def torch_dtype(name: str):
    import torch
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
            "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "s8": torch.int8, "s32": torch.int32}[name]


def to_torch(bits: np.ndarray, name: str, device: str):
    """A tensor of type ``name`` on ``device`` with the elements' bits ``bits``."""
    import torch
    arr = np.ascontiguousarray(bits)
    signed = {2: np.int16, 4: np.int32, 8: np.int64}.get(arr.itemsize, arr.dtype)  # torch has no uint16...uint64 views
    return torch.from_numpy(arr.view(signed)).to(device).view(torch_dtype(name))


def from_torch(t, name: str) -> np.ndarray:
    """The elements' bits of a tensor of type ``name``, as :data:`STORAGE` holds them."""
    import torch
    size = np.dtype(STORAGE[name]).itemsize
    raw = t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]).cpu().numpy()
    return raw.view(STORAGE[name])


def launch(kernel, case: Case, a, b, c, d):
    """``kernel`` on tensors A (M, K), B (K, N), C and D (M, N), on a grid of whole blocks;
    the compiled kernel where triton compiles."""
    import triton
    import triton.language as tl
    (m, k), n = a.shape, b.shape[1]
    cx = case.constexprs()
    cx["OUT"] = {"f32": tl.float32, "f16": tl.float16, "s32": tl.int32, "f64": tl.float64}[case.out]
    grid = (triton.cdiv(m, case.bm), triton.cdiv(n, case.bn))
    return kernel[grid](a, b, c, d, m, n, k, *a.stride(), *b.stride(), *c.stride(), *d.stride(), **cx,
                        num_warps=case.warps, num_stages=NUM_STAGES)


def run_cases(kernel, case: Case, arrays: dict, device: str, launched: list | None = None) -> dict:
    """``{"d": bits[cases, M, N]}``: one launch a case of ``arrays`` (``a``, ``b`` and, where the
    kernel loads it, ``c``, their first axis the case); ``launched`` collects what each launch
    returns (the compiled kernel, with its PTX)."""
    import torch
    m, n = arrays["a"].shape[1], arrays["b"].shape[2]
    out = []
    for i in range(len(arrays["a"])):
        a, b = (to_torch(arrays[x][i], t, device) for x, t in (("a", case.atype), ("b", case.btype)))
        c = (to_torch(arrays["c"][i], case.out, device) if case.load_c
             else torch.empty((m, n), dtype=torch_dtype(case.out), device=device))
        d = torch.zeros((m, n), dtype=torch_dtype(case.out), device=device)
        compiled = launch(kernel, case, a, b, c, d)
        if launched is not None:
            launched.append(compiled)
        out.append(from_torch(d, case.out))
    return {"d": np.stack(out)}


def _device_half():
    """fastmma.verify_device, imported within the package or, in a script, from this file's folder."""
    if __package__:
        from . import verify_device
        return verify_device
    spec = importlib.util.spec_from_file_location("verify_device", Path(__file__).with_name("verify_device.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run_jobs(jobs: list[dict], device: str = "cuda", log=print) -> list[dict]:
    """Every job's inputs and outputs, the kernel run on ``device`` (compiled for the GPU, or
    interpreted where TRITON_INTERPRET is set, as the tests run it): each job's ``plan`` is
    ``{"case": Case.fields()}``, its inputs drawn and its cancellation run by
    :func:`fastmma.verify_device.run_job`."""
    vd = _device_half()
    kernel = load_kernel()
    t0 = time.perf_counter()
    done = [vd.run_job(job, lambda plan, arrays: run_cases(kernel, Case.of(plan["case"]), arrays, device))
            for job in jobs]
    log(f"ran {len(jobs)} Triton jobs on {device} in {time.perf_counter() - t0:.1f} s (kernels compiled on first use)")
    return done


# ---------------------------------------------------------------- the reference: Triton's interpreter


def reference(case: Case, arrays: dict) -> dict:
    """D of every case of ``arrays`` as fastmma computes it: the kernel in Triton's interpreter
    under :func:`fastmma.triton.emulate` (this process must have TRITON_INTERPRET=1 set before
    triton was imported)."""
    from fastmma import triton as fastmma_triton
    with fastmma_triton.emulate():
        return run_cases(load_kernel(), case, arrays, "cpu")


def worker(requests=sys.stdin, answers=sys.stdout) -> None:
    """Answer requests, one JSON line each, until the input ends: ``{"cases": [Case.fields()],
    "inputs": npz, "outputs": npz}`` computes :func:`reference` of form ``i`` from the arrays
    ``{i}.a``, ``{i}.b``, ``{i}.c`` of ``inputs`` into ``{i}.d`` of ``outputs``; the answer
    is ``{"seconds": [...], "errors": {i: text}}`` (a form fastmma refuses or fails on)."""
    for line in requests:
        req = json.loads(line)
        out, seconds, errors = {}, [], {}
        with np.load(req["inputs"]) as data:
            for i, fields in enumerate(req["cases"]):
                t0 = time.perf_counter()
                arrays = {x: data[f"{i}.{x}"] for x in "abc" if f"{i}.{x}" in data.files}
                try:
                    out[f"{i}.d"] = reference(Case.of(fields), arrays)["d"]
                except Exception as exc:  # noqa: BLE001 - reported as the form's failure, the others go on
                    errors[str(i)] = f"{type(exc).__name__}: {exc}"
                    print(traceback.format_exc(), file=sys.stderr, flush=True)
                seconds.append(time.perf_counter() - t0)
        np.savez(req["outputs"], **out)
        answers.write(json.dumps({"seconds": seconds, "errors": errors}) + "\n")
        answers.flush()


class Interpreter:
    """A :func:`worker` process (``TRITON_INTERPRET=1``, this fastmma first on its path), kept
    for several :meth:`compute` calls; a context manager that ends it."""

    def __init__(self):
        env = dict(os.environ, TRITON_INTERPRET="1",
                   PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent)]
                                              + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        self.proc = subprocess.Popen([sys.executable, "-m", "fastmma.verify_triton", "--worker"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.work = tempfile.TemporaryDirectory(prefix="fastmma-verify-triton-")
        self.calls = 0

    def compute(self, cases: list[Case], arrays: list[dict]) -> list[tuple[dict, float]]:
        """``(outputs or {"error": text}, seconds)`` of each case's arrays, in the worker."""
        self.calls += 1
        inputs, outputs = (Path(self.work.name) / f"{self.calls}.{x}.npz" for x in ("in", "out"))
        np.savez(inputs, **{f"{i}.{k}": v for i, a in enumerate(arrays) for k, v in a.items() if k in ("a", "b", "c")})
        self.proc.stdin.write(json.dumps({"cases": [c.fields() for c in cases], "inputs": str(inputs),
                                          "outputs": str(outputs)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Triton interpreter's worker ended (exit status {self.proc.wait()}); "
                               "its error is above")
        answer = json.loads(line)
        with np.load(outputs) as data:
            return [({"error": answer["errors"][str(i)]} if str(i) in answer["errors"] else {"d": data[f"{i}.d"]},
                     secs) for i, secs in enumerate(answer["seconds"])]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()
        self.work.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        answers, sys.stdout = sys.stdout, sys.stderr  # the protocol's lines alone on the real stdout
        worker(sys.stdin, answers)
