"""The GPU half of ``fastmma verify``: build CUDA sources with nvcc and run launch plans.

It needs numpy, PyTorch (buffers, and the CUDA context) and the CUDA driver (ctypes), not
numba nor the rest of fastmma, so that it also runs as a script on a GPU machine without
them: ``python3 verify_device.py BUNDLE OUT`` runs a bundle that ``fastmma verify --export``
wrote and writes the outputs for ``fastmma verify --import``.

A launch plan is a dict: ``kernel``, ``blocks``, ``threads``, ``shared`` (dynamic shared
memory bytes) and ``args``, each ``{"in": key}`` (an input array, copied in), ``{"out": key,
"shape", "dtype", "fill"}`` (an array made, copied in and back) or ``{"int": value}``.
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


def run_plans(sources: list[str], plans: list[dict], arrays: list[dict], log=print) -> list[dict]:
    """Build the sources and run every plan on its arrays; the outputs, plan by plan."""
    with tempfile.TemporaryDirectory(prefix="fastmma-verify-") as work:
        t0 = time.perf_counter()
        cubins = build(sources, Path(work), find_nvcc())
        log(f"built {len(sources)} CUDA sources ({len(plans)} kernels) with nvcc in {time.perf_counter() - t0:.1f} s")
        gpu = CudaDriver(cubins)
        t0 = time.perf_counter()
        outs = [gpu.run(plan, a) for plan, a in zip(plans, arrays)]
        log(f"ran {len(plans)} kernels in {time.perf_counter() - t0:.1f} s")
        return outs


def main(bundle: str, out: str) -> int:
    """Run an exported bundle (``plans.json``, ``inputs.npz``) and write ``outputs.npz`` and
    ``device.json`` to ``out``."""
    bundle, out = Path(bundle), Path(out)
    spec = json.loads((bundle / "plans.json").read_text())
    with np.load(bundle / "inputs.npz") as data:
        flat = {k: data[k] for k in data.files}
    arrays = [{k.split(".", 1)[1]: v for k, v in flat.items() if k.split(".", 1)[0] == str(i)}
              for i in range(len(spec["plans"]))]
    outs = run_plans(spec["sources"], spec["plans"], arrays, log=lambda text: print(text, flush=True))
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "outputs.npz", **{f"{i}.{k}": v for i, o in enumerate(outs) for k, v in o.items()})
    (out / "device.json").write_text(json.dumps(device_info(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
