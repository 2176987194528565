"""Record Triton GEMM kernels on the GPU: inputs, output bits, kernel source and PTX instructions.

Run on an H100 with torch and triton (3.6.0): ``python tools/record/triton_kernels.py OUTDIR``.
Writes one ``<variant>.npz`` per case (tests/golden/FORMAT.md, "triton files") and the full
PTX of each kernel as ``ptx/<variant>.ptx``.  Standalone: numpy, torch and triton only.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import zlib

import numpy as np
import torch
import triton
import triton.language as tl

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

def _load_kernel():
    """The kernel from KERNEL_SOURCE, kept verbatim in each file's meta (triton.jit needs a file)."""
    import importlib.util
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "triton_kernels_gemm.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n" + KERNEL_SOURCE)
    spec = importlib.util.spec_from_file_location("triton_kernels_gemm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gemm


gemm = _load_kernel()

# name: (total bits, exponent bits, mantissa bits, has inf)
FLOATS = {
    "f16": (16, 5, 10, True), "bf16": (16, 8, 7, True), "f32": (32, 8, 23, True),
    "e4m3": (8, 4, 3, False), "e5m2": (8, 5, 2, True), "f64": (64, 11, 52, True),
}
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
         "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "s8": torch.int8, "s32": torch.int32}
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
TL_OUT = {"f32": tl.float32, "f16": tl.float16, "s32": tl.int32, "f64": tl.float64}


class Case:
    def __init__(self, name, atype, btype, out="f32", prec="tf32", imprecise=None, load_c=True, pass_acc=True,
                 bm=64, bn=32, bk=32, warps=4, mnk=(70, 40, 100), modes=(1, 2, 4)):
        self.__dict__.update(locals())
        del self.__dict__["self"]


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

MODE_LEGEND = {0: "narrow: exponents within +-3 binades of 1", 1: "wide: exponents over ~+-10 binades (fp8: all)",
               2: "subnormal-heavy: half the elements subnormal, the rest small normals; C tiny",
               4: "specials: wide, with +-0, +-inf, NaNs and max-finite sprinkled into A, B and C",
               5: "integers: extreme operands, C near INT32_MAX/MIN"}


def float_bits(rng, name, shape, mode):
    """Random bit patterns of float format ``name`` for ``mode``."""
    bits, e, m, has_inf = FLOATS[name]
    bias = (1 << (e - 1)) - 1
    emax = (1 << e) - 1 if not has_inf else (1 << e) - 2  # largest exponent field of finite numbers
    sign = rng.integers(0, 2, shape).astype(np.uint64)
    mant = rng.integers(0, 1 << m, shape, dtype=np.uint64)
    if mode == 0:
        exp = rng.integers(bias - 3, bias + 4, shape)
    elif mode in (1, 4):
        w = min(bias - 1, 10)
        exp = rng.integers(bias - w, bias + w + 1, shape)
    elif mode == 2:
        exp = np.where(rng.random(shape) < 0.5, 0, rng.integers(1, min(emax, 5) + 1, shape))
    else:
        raise ValueError(mode)
    exp = np.clip(exp, 0, emax).astype(np.uint64)
    word = (sign << np.uint64(bits - 1)) | (exp << np.uint64(m)) | mant
    if not has_inf:  # e4m3: exponent 15 with mantissa 7 is NaN, keep it for mode 4 only
        word = np.where((exp == emax) & (mant == (1 << m) - 1), word - np.uint64(1), word)
    if mode == 4:
        pick = rng.random(shape)
        top = np.uint64(1 << (bits - 1))
        nan = ((np.uint64(emax + (1 if has_inf else 0)) << np.uint64(m))
               | rng.integers(1 if has_inf else (1 << m) - 1, 1 << m, shape, dtype=np.uint64))
        inf = np.uint64(((1 << e) - 1) << m) if has_inf else np.uint64(((1 << e) - 1) << m | ((1 << m) - 1))
        maxf = np.uint64(emax << m | ((1 << m) - 1) - (0 if has_inf else 1))
        specials = [(0.02, sign * top), (0.01, sign * top | inf), (0.01, sign * top | nan), (0.01, sign * top | maxf),
                    (0.01, sign * top | np.uint64(1))]
        lo = 0.0
        for p, val in specials:
            word = np.where((pick >= lo) & (pick < lo + p), val, word)
            lo += p
    return word.astype(UINT[bits])


def int_values(rng, name, shape, mode):
    if name == "s8":
        if mode == 5:
            return rng.choice(np.array([-128, -127, 127, 126], np.int8), shape)
        return rng.integers(-128, 128, shape).astype(np.int8)
    if mode == 5:
        return (rng.choice(np.array([2**31 - 1, -2**31], np.int64), shape)
                - rng.integers(-2**20, 2**20, shape)).astype(np.int64).astype(np.int32)
    return rng.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32)


def operand(rng, name, shape, mode):
    if name in FLOATS:
        return float_bits(rng, name, shape, 0 if mode == 5 else mode)
    return int_values(rng, name, shape, mode)


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run under TRITON_INTERPRET=1
SIGNED = {np.dtype(np.uint16): np.int16, np.dtype(np.uint32): np.int32, np.dtype(np.uint64): np.int64}


def to_torch(arr, name):
    arr = np.ascontiguousarray(arr)
    t = torch.from_numpy(arr.view(SIGNED.get(arr.dtype, arr.dtype))).to(DEVICE)
    return t if name in ("s8", "s32") else t.view(TORCH[name])


def from_torch(t, name):
    if name == "s32":
        return t.cpu().numpy()
    bits = FLOATS[name][0]
    raw = t.contiguous().view({8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]).cpu().numpy()
    return raw.view(UINT[bits])


PTX_OPS = re.compile(r"^\s*(?:@%p\d+\s+)?((?:wgmma|mma|fma|cvt|add|sub|mul|ld\.shared|ldmatrix|neg)[\w.:]*)\s")
MATRIX_LINE = re.compile(r"(wgmma\.mma_async|mma\.sync)")


def ptx_summary(ptx):
    """Opcode counts of the arithmetic and matrix instructions, and the distinct matrix instructions."""
    counts, matrix, lines = {}, [], []
    for line in ptx.splitlines():
        m = PTX_OPS.match(line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        if MATRIX_LINE.search(line):
            op = line.strip().split()[0] if not line.strip().startswith("@") else line.strip().split()[1]
            if op not in matrix:
                matrix.append(op)
            if len(lines) < 6:
                lines.append(line.strip())
    return counts, matrix, lines


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def run_case(case, outdir, when):
    m, n, k = case.mnk
    ctype = case.out
    seed = zlib.crc32(case.name.encode())
    rng = np.random.default_rng(seed)
    rows = {"a": [], "b": [], "c": [], "d": [], "mode": []}
    compiled = None
    for mode in case.modes:
        a = operand(rng, case.atype, (m, k), mode)
        b = operand(rng, case.btype, (k, n), mode)
        c = operand(rng, ctype, (m, n), mode) if case.load_c else None
        at, bt = to_torch(a, case.atype), to_torch(b, case.btype)
        ct = to_torch(c, ctype) if c is not None else torch.empty((m, n), dtype=TORCH[ctype], device=DEVICE)
        dt = torch.full((m, n), 0, dtype=TORCH[ctype], device=DEVICE)
        grid = (triton.cdiv(m, case.bm), triton.cdiv(n, case.bn))
        compiled = gemm[grid](at, bt, ct, dt, m, n, k, at.stride(0), at.stride(1), bt.stride(0), bt.stride(1),
                              ct.stride(0), ct.stride(1), dt.stride(0), dt.stride(1),
                              BM=case.bm, BN=case.bn, BK=case.bk, LOAD_C=case.load_c, PASS_ACC=case.pass_acc,
                              PREC=case.prec, OUT=TL_OUT[case.out], IMPRECISE=case.imprecise,
                              num_warps=case.warps, num_stages=2)
        sync()
        d1 = from_torch(dt, ctype)
        dt.zero_()
        gemm[grid](at, bt, ct, dt, m, n, k, at.stride(0), at.stride(1), bt.stride(0), bt.stride(1),
                   ct.stride(0), ct.stride(1), dt.stride(0), dt.stride(1),
                   BM=case.bm, BN=case.bn, BK=case.bk, LOAD_C=case.load_c, PASS_ACC=case.pass_acc,
                   PREC=case.prec, OUT=TL_OUT[case.out], IMPRECISE=case.imprecise,
                   num_warps=case.warps, num_stages=2)
        sync()
        assert (from_torch(dt, ctype) == d1).all(), f"{case.name}: two runs differ"
        rows["a"].append(a)
        rows["b"].append(b)
        rows["c"].append(c if c is not None else np.zeros((m, n), d1.dtype))
        rows["d"].append(d1)
        rows["mode"].append(mode)
    ptx = compiled.asm["ptx"] if DEVICE == "cuda" else ""
    os.makedirs(os.path.join(outdir, "ptx"), exist_ok=True)
    with open(os.path.join(outdir, "ptx", case.name + ".ptx"), "w") as f:
        f.write(ptx)
    with open(os.path.join(outdir, "ptx", case.name + ".ttgir"), "w") as f:
        f.write(compiled.asm.get("ttgir", "") if DEVICE == "cuda" else "")
    counts, matrix, lines = ptx_summary(ptx)
    gpu = ("cpu dry run", "", "")
    if DEVICE == "cuda":
        props = torch.cuda.get_device_properties(0)
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
        gpu = (props.name, f"{props.major}.{props.minor}", driver)
    meta = {
        "format_version": 1, "family": "triton", "variant": case.name,
        "kernel_source": KERNEL_SOURCE, "kernel_name": "gemm",
        "constexprs": {"BM": case.bm, "BN": case.bn, "BK": case.bk, "LOAD_C": case.load_c,
                       "PASS_ACC": case.pass_acc, "PREC": case.prec, "OUT": case.out,
                       "IMPRECISE": case.imprecise},
        "num_warps": case.warps, "num_stages": 2, "m": m, "n": n, "k": k,
        "atype": case.atype, "btype": case.btype, "ctype": ctype, "c_loaded": case.load_c,
        "layout": "A (M, K), B (K, N), C and D (M, N), all row-major and contiguous",
        "ptx_matrix_instructions": matrix, "ptx_matrix_lines": lines, "ptx_op_counts": counts,
        "gpu": gpu[0], "compute_capability": gpu[1], "target": "sm_90a",
        "triton": triton.__version__, "torch": torch.__version__, "cuda_runtime_version": torch.version.cuda,
        "driver_version": gpu[2],
        "date_utc": when, "mode_legend": {str(k_): v for k_, v in MODE_LEGEND.items() if k_ in case.modes},
        "seed": seed, "n_cases": len(case.modes),
    }
    arrays = {key: np.stack(v) for key, v in rows.items() if key != "c" or case.load_c}
    arrays["mode"] = np.array(rows["mode"], np.uint8)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez_compressed(os.path.join(outdir, case.name + ".npz"), **arrays)
    print(f"{case.name}: {matrix} {counts}", flush=True)


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    only = set(sys.argv[2:]) - {"--check"}
    failed = []
    for case in CHECK_CASES if "--check" in sys.argv else CASES:
        if only and case.name not in only:
            continue
        try:
            run_case(case, outdir, when)
        except Exception as exc:  # noqa: BLE001 - one case's failure must not lose the others
            failed.append(case.name)
            print(f"{case.name}: FAILED {type(exc).__name__}: {exc}", flush=True)
    print("failed:", failed)


if __name__ == "__main__":
    main(sys.argv[1])
