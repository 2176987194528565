"""The GPU half of ``fastmma verify``: build CUDA sources with nvcc and run launch plans.

It needs numpy, PyTorch (buffers, and the CUDA context) and the CUDA driver (ctypes), not
numba nor the rest of fastmma, so that it also runs as a script on a GPU machine without
them: ``python3 verify_device.py BUNDLE OUT`` runs a bundle that ``fastmma verify --export``
wrote and writes the outputs for ``fastmma verify --import``.

A job is a dict: ``inputs`` (key -> recipe: :func:`make_array`), a launch ``plan`` and
optionally ``cancel``.  A plan is ``kernel``, ``blocks``, ``threads``, ``shared`` (dynamic shared
memory bytes) and ``args``, each ``{"in": key}`` (an input array, copied in), ``{"out": key,
"shape", "dtype", "fill"}`` (an array made, copied in and back) or ``{"int": value}``.  The
inputs are drawn here from their recipes, so that a job travels as a few numbers, and the same
code draws them where fastmma runs on the same machine.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ARCH = "-gencode=arch=compute_90a,code=sm_90a"
PRELUDE = """
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;
__device__ __forceinline__ u64 gaddr(const void* p) { return (u64)__cvta_generic_to_global(p); }
"""
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


# ---------------------------------------------------------------- data


def elements(rng, fmt: dict, count: int, style: str, role: str = "ab") -> np.ndarray:
    """``count`` elements of a type (``fmt``: the fields of :class:`fastmma.formats.Format`) in
    a data style, as raw bytes: "bits" uniformly random bit patterns, 5% of the floats
    replaced by specials (zeros, infinities, NaNs, extremes); "spread" normal numbers with
    exponents over +-10 binades (C, ``role`` "c": +-20), integers at their extremes; "cancel"
    normal numbers within +-3 binades (the job then sets C to the negated product).
    Sub-byte types are random bits in every style."""
    nbytes = -(-count * fmt["bits"] // 8)
    if fmt["bits"] < 8 or style == "bits":
        raw = rng.integers(0, 256, nbytes, dtype=np.uint8)
        if fmt["kind"] == "float" and style == "bits":  # uniform bits seldom hit an infinity or a zero
            x = raw.view(fmt["storage"])
            pick = rng.random(count) < 0.05
            x[pick] = rng.choice(specials(fmt), int(pick.sum()))
        return raw
    if fmt["kind"] in ("int", "uint"):
        return _integers(rng, fmt, count, style, role).view(np.uint8)
    return _floats(rng, fmt, count, style, role).view(np.uint8)


def specials(fmt: dict) -> np.ndarray:
    """Zeros, infinities, NaNs, the largest finite and the smallest subnormal (both signs)."""
    low, man, top = fmt["ignored_low_bits"], fmt["man_bits"], fmt["exp_bits"] + fmt["man_bits"]
    exp_ones, man_ones = ((1 << fmt["exp_bits"]) - 1) << man, (1 << man) - 1
    pats = [0, exp_ones, exp_ones | (1 << (man - 1)), exp_ones | 1, 1, exp_ones - (1 << man) | man_ones]
    if not fmt["ieee_specials"]:  # e4m3: all ones is NaN, one below it the largest finite
        pats = [0, exp_ones | man_ones, exp_ones | (man_ones - 1), 1]
    pats = [p << low for p in pats]
    return np.array(pats + [p | (1 << (top + low)) for p in pats], np.uint64).astype(fmt["storage"])


def _integers(rng, fmt, count, style, role):
    bits = fmt["bits"]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if fmt["kind"] == "int" else (0, (1 << bits) - 1)
    if style == "spread" and role == "c":
        base = rng.choice([lo, hi], count)
        v = base - np.sign(base) * rng.integers(0, 1 << 20, count)
    elif style == "spread":
        v = rng.choice([lo, hi, lo + 1, hi - 1, 0], count)
    else:
        v = rng.integers(lo, hi + 1, count)
    return (np.asarray(v, np.int64) & ((1 << bits) - 1)).astype(fmt["storage"])


def _floats(rng, fmt, count, style, role):
    width = 3 if style == "cancel" else (20 if role == "c" else 10)
    eb, man, bias, low = fmt["exp_bits"], fmt["man_bits"], fmt["bias"], fmt["ignored_low_bits"]
    emax = (1 << eb) - 1 - bias - (1 if fmt["ieee_specials"] else 0)
    e = rng.integers(max(-width, 1 - bias), min(width, emax) + 1, count)
    m = rng.integers(0, 1 << man, count, dtype=np.uint64)
    if not fmt["ieee_specials"]:  # e4m3: exponent field and mantissa all ones is NaN
        m = np.where(e == emax, np.minimum(m, (1 << man) - 2), m).astype(np.uint64)
    s = rng.integers(0, 2, count).astype(np.uint64)
    word = ((s << np.uint64(eb + man)) | ((e + bias).astype(np.uint64) << np.uint64(man)) | m) << np.uint64(low)
    if low:  # tf32: the ignored low bits random
        word |= rng.integers(0, 1 << low, count, dtype=np.uint64)
    return word.astype(fmt["storage"])


def make_array(recipe: dict) -> np.ndarray:
    """An input array from its recipe: ``{"value", "dtype"}`` (literal), ``{"choice": values,
    "random": seed, "shape", "dtype"}`` (values drawn at random), ``{"random": seed,
    "format", "style", "role", "shape", "dtype"}`` (elements of the format in the style, as
    many as fill the shape), ``{"concat": [recipes]}`` (joined along the last axis) or
    ``{"paired": recipe, "axis"}`` (the odd slices along ``axis`` set to the even ones before
    them, :func:`negated` where ``"negate"`` gives the format and ``"seed"``)."""
    if "paired" in recipe:
        return paired(make_array(recipe["paired"]), recipe["axis"], recipe.get("negate"), recipe.get("seed"))
    if "value" in recipe:
        return np.array(recipe["value"], recipe["dtype"])
    if "choice" in recipe:
        rng = np.random.default_rng(recipe["random"])
        return np.array(recipe["choice"], recipe["dtype"])[rng.integers(0, len(recipe["choice"]), recipe["shape"])]
    if "concat" in recipe:
        return np.concatenate([make_array(r) for r in recipe["concat"]], axis=-1)
    fmt, shape, dtype = recipe["format"], tuple(recipe["shape"]), np.dtype(recipe["dtype"])
    count = int(np.prod(shape)) * dtype.itemsize * 8 // fmt["bits"]
    raw = elements(np.random.default_rng(recipe["random"]), fmt, count, recipe["style"], recipe["role"])
    return raw.view(dtype).reshape(shape)


def negated(x: np.ndarray, fmt: dict, seed) -> np.ndarray:
    """``-x`` element by element (``fmt``: the accumulator's type, ``x`` any array of its
    elements' bytes), about half the elements a unit in the last place off (integers: up to 2)."""
    rng = np.random.default_rng(seed)
    e = np.ascontiguousarray(x).view(fmt["storage"])
    if fmt["kind"] == "int":
        off = (rng.random(e.shape) < 0.5) * rng.integers(-2, 3, e.shape)
        out = (-(e.view(np.int32).astype(np.int64)) + off).astype(np.uint32)
    else:
        flip = (rng.random(e.shape) < 0.5).astype(e.dtype)
        out = e ^ e.dtype.type(1 << (fmt["bits"] - 1)) ^ flip
    return out.view(x.dtype).reshape(x.shape)


def paired(x: np.ndarray, axis: int, negate: dict | None = None, seed=None) -> np.ndarray:
    """``x`` with slice ``2j + 1`` along ``axis`` a copy of slice ``2j`` (negated, a unit in
    the last place off in half, where ``negate`` gives the format): pairs of k-terms of a
    product whose sum cancels.  A last odd slice stays as drawn."""
    x = np.array(x)
    ax = axis % x.ndim
    even = x[(slice(None),) * ax + (slice(0, x.shape[ax] // 2 * 2, 2),)]
    x[(slice(None),) * ax + (slice(1, None, 2),)] = even if negate is None else negated(even, negate, seed)
    return x


def relaid(mem: np.ndarray, rows: int, cols: int, bits: int, src: str, dst: str) -> np.ndarray:
    """Memory images ``[cases, bytes]`` of rows x cols matrices of ``bits``-bit elements at the
    smallest stride, from layout ``src`` ("row"/"col") to ``dst``."""
    n = mem.shape[0]
    el = np.ascontiguousarray(mem).view(np.dtype(f"<u{bits // 8}"))[:, :rows * cols]
    mat = el.reshape(n, rows, cols) if src == "row" else el.reshape(n, cols, rows).transpose(0, 2, 1)
    flat = (mat if dst == "row" else mat.transpose(0, 2, 1)).reshape(n, -1)
    out = np.zeros_like(np.ascontiguousarray(mem))
    out.view(flat.dtype)[:, :rows * cols] = flat
    return out


def run_job(job: dict, launch) -> dict:
    """A job's inputs drawn and its plan run by ``launch(plan, arrays) -> outputs``: the inputs
    and outputs together.  A cancellation job (``cancel``) runs twice: first with its ``zero``
    input zeroed (or its ``scale_d`` 0), then with ``to`` set to the negated ``from`` output of
    the first run (relaid from ``layouts`` where given) and ``scale_d`` 1."""
    arrays = {k: make_array(r) for k, r in job["inputs"].items()}
    cancel = job.get("cancel")
    if cancel:
        first = dict(arrays)
        for key in cancel.get("zero", []):
            first[key] = np.zeros_like(arrays[key])
        d = launch(job["plan"], first)[cancel["from"]]
        if "layouts" in cancel:
            d = relaid(d, *cancel["layouts"])
        arrays[cancel["to"]] = negated(d, cancel["format"], cancel["seed"])
        if "scale_d" in arrays:
            arrays["scale_d"] = np.ones_like(arrays["scale_d"])
    return {"inputs": arrays, "outputs": launch(job["plan"], arrays)}


# ---------------------------------------------------------------- the GPU


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    found = shutil.which("nvcc")
    return found or (str(Path(home) / "bin" / "nvcc") if (Path(home) / "bin" / "nvcc").exists() else None)


def build(sources: list[str], workdir: Path, nvcc: str) -> list[Path]:
    """Each source (kernels, without the prelude) compiled for sm_90a into a cubin, the nvcc
    runs side by side, as the recordings were built (``nvcc -cubin ... -O2``)."""
    def one(i):
        cu, cubin = workdir / f"verify{i}.cu", workdir / f"verify{i}.cubin"
        cu.write_text(PRELUDE + sources[i])
        res = subprocess.run([nvcc, "-cubin", ARCH, "-O2", str(cu), "-o", str(cubin)], capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"nvcc failed on {cu}:\n{res.stderr[-4000:]}")
        return cubin

    with ThreadPoolExecutor(max(1, len(sources))) as pool:
        return list(pool.map(one, range(len(sources))))


class CudaDriver:
    """Cubins loaded and kernels launched through the CUDA driver API (ctypes), buffers
    through PyTorch (which makes the device's primary context current)."""

    def __init__(self, cubins):
        import torch

        self.torch = torch
        torch.zeros(1, device="cuda")
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.modules, self.functions = [], {}
        for path in cubins:
            module = ctypes.c_void_p()
            self._check(self.cu.cuModuleLoadData(ctypes.byref(module), Path(path).read_bytes()), f"load {path}")
            self.modules.append(module)

    def _check(self, code, what):
        if code:
            raise RuntimeError(f"CUDA driver error {code} ({what})")

    def function(self, kname):
        if kname not in self.functions:
            fn = ctypes.c_void_p()
            if not any(self.cu.cuModuleGetFunction(ctypes.byref(fn), m, kname.encode()) == 0 for m in self.modules):
                raise RuntimeError(f"kernel {kname} is in no cubin")
            self.functions[kname] = fn
        return self.functions[kname]

    def run(self, plan: dict, arrays: dict) -> dict:
        """The outputs (name -> array) of one launch plan on ``arrays`` (its inputs)."""
        torch = self.torch
        fn = self.function(plan["kernel"])
        if plan["shared"]:
            self._check(self.cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   ctypes.c_int(plan["shared"])), "max dynamic shared memory")
        args, keep, back = [], [], []
        for arg in plan["args"]:
            if "int" in arg:
                args.append(ctypes.c_int32(arg["int"]))
                continue
            x = arrays[arg["in"]] if "in" in arg else np.full(arg["shape"], arg["fill"], arg["dtype"])
            t = torch.from_numpy(np.ascontiguousarray(x).view(np.uint8).reshape(-1).copy()).cuda()
            keep.append(t)
            args.append(ctypes.c_uint64(t.data_ptr()))
            if "out" in arg:
                back.append((arg["out"], t, x))
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
        self._check(self.cu.cuLaunchKernel(self.function(plan["kernel"]), plan["blocks"], 1, 1, plan["threads"], 1, 1,
                                           plan["shared"], None, params, None), plan["kernel"])
        self._check(self.cu.cuCtxSynchronize(), f"{plan['kernel']} (run)")
        return {name: t.cpu().numpy().view(x.dtype).reshape(x.shape) for name, t, x in back}


def device_info() -> dict:
    """GPU name, driver, CUDA, torch, triton and nvcc versions (those that are there)."""
    info = {"python": platform.python_version(), "numpy": np.__version__}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda_runtime_torch"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"], info["compute_capability"] = props.name, f"{props.major}.{props.minor}"
    except ImportError:
        pass
    try:
        from importlib.metadata import version

        info["triton"] = version("triton")
    except Exception:  # noqa: BLE001 - not installed
        info["triton"] = None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        info["driver"] = out[0] if out else None
        api = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(api))
        info["cuda_driver_api"] = f"{api.value // 1000}.{api.value % 1000 // 10}"
    except Exception:  # noqa: BLE001 - no driver
        pass
    nvcc = find_nvcc()
    if nvcc:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip()
        info["nvcc"] = text.splitlines()[-1] if text else None
    return info


def run_jobs(sources: list[str], jobs: list[dict], log=print) -> list[dict]:
    """Build the sources and run every job (:func:`run_job`) on the GPU."""
    with tempfile.TemporaryDirectory(prefix="fastmma-verify-") as work:
        t0 = time.perf_counter()
        cubins = build(sources, Path(work), find_nvcc())
        log(f"built {len(sources)} CUDA sources with nvcc in {time.perf_counter() - t0:.1f} s")
        gpu = CudaDriver(cubins)
        t0 = time.perf_counter()
        done = [run_job(job, gpu.run) for job in jobs]
        log(f"ran {len(jobs)} jobs on the GPU in {time.perf_counter() - t0:.1f} s")
        return done


def main(folder: str, out: str) -> int:
    """Run an exported battery (``jobs.json`` in ``folder``) and write every job's inputs and
    outputs and the machine's versions to ``out`` (:func:`write_results`)."""
    spec = json.loads((Path(folder) / "jobs.json").read_text())
    log = lambda text: print(text, flush=True)  # noqa: E731
    done = run_jobs(spec["sources"], spec["jobs"], log) if spec["jobs"] else []
    info = device_info()
    triton_done = None
    if spec.get("triton", {}).get("jobs"):
        try:
            triton_done = _triton_half().run_jobs(spec["triton"]["jobs"], "cuda", log)
        except ImportError as exc:  # no triton here: the instructions are reported alone
            info["triton_skipped"] = f"Triton on the GPU machine ({exc})"
            log(f"Triton jobs skipped: {exc}")
    if out != "-":  # "-": a timing run, nothing kept
        write_results(Path(out), done, info)
        if triton_done is not None:
            write_results(Path(out), triton_done, info, prefix="triton-results")
    return 0


def _triton_half():
    """fastmma/verify_triton.py, loaded from this file's folder (it needs numpy, torch and triton only)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("verify_triton", Path(__file__).with_name("verify_triton.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def write_results(out: Path, done: list[dict], info: dict, shards: int = 6, prefix: str = "results") -> None:
    """Every job's inputs and outputs in ``{prefix}.{s}.npz`` (``shards`` files of consecutive
    jobs, so that no file grows too large to move) and ``device.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    size = max(1, -(-len(done) // shards))
    for s in range(shards):
        np.savez_compressed(out / f"{prefix}.{s}.npz", **{f"{i}.{part}.{k}": v for i, d in enumerate(done)
                                                         if i // size == s for part in ("inputs", "outputs")
                                                         for k, v in d[part].items()})
    (out / "device.json").write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
