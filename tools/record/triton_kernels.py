"""Record Triton GEMM kernels on the GPU: inputs, output bits, kernel source and PTX instructions.

Run on an H100 with torch and triton (3.6.0): ``python tools/record/triton_kernels.py OUTDIR``.
Writes one ``<variant>.npz`` per case (tests/golden/FORMAT.md, "triton files") and the full
PTX of each kernel as ``ptx/<variant>.ptx``.  The kernel, its cases and their launch are
fastmma/verify_triton.py's (``fastmma verify`` runs the same), loaded by path: numpy, torch and
triton only, no numba.
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


def _package_file():
    """fastmma/verify_triton.py, loaded by path: the kernel and its cases have one definition,
    there, and this script needs no numba (nor the rest of fastmma)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fastmma", "verify_triton.py")
    spec = importlib.util.spec_from_file_location("verify_triton", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


vt = _package_file()
KERNEL_SOURCE, Case, CASES, CHECK_CASES = vt.KERNEL_SOURCE, vt.Case, vt.CASES, vt.CHECK_CASES
gemm = vt.load_kernel()

# name: (total bits, exponent bits, mantissa bits, has inf)
FLOATS = {
    "f16": (16, 5, 10, True), "bf16": (16, 8, 7, True), "f32": (32, 8, 23, True),
    "e4m3": (8, 4, 3, False), "e5m2": (8, 5, 2, True), "f64": (64, 11, 52, True),
}
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}

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
        arrays = {"a": a[None], "b": b[None], **({"c": c[None]} if c is not None else {})}
        launched = []
        (d1,) = vt.run_cases(gemm, case, arrays, DEVICE, launched)["d"]
        (d2,) = vt.run_cases(gemm, case, arrays, DEVICE)["d"]
        compiled = launched[0]
        assert (d2 == d1).all(), f"{case.name}: two runs differ"
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
        "format_version": 1, "variant": case.name, **vt.case_meta(case),
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
