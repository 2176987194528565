"""Run every probe job on the GPU and write the recordings (runs on the device machine).

    python3 tools/record/run_device.py tools/record/build "$OUT"

Needs numpy and CuPy, and the build/ folder made by gen.py (probes.cubin, jobs.json, jobs.npz).
Writes $OUT/probes.tar (the FORMAT v1 files and the Q3 file, paths relative to
tests/golden/probes), $OUT/log.txt, and $OUT/sass_dup.txt (SASS of the Q3 kernels).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

import cupy as cp  # noqa: E402

LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.append(s)


def device_info(date):
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except Exception as exc:  # noqa: BLE001
        drv = f"unknown ({exc})"
    api = cp.cuda.runtime.driverGetVersion()
    return {"gpu": name, "compute_capability": f"{props['major']}.{props['minor']}", "driver_version": drv,
            "cuda_version": f"{api // 1000}.{(api % 1000) // 10}", "cuda_driver_api_version": int(api),
            "cuda_runtime_version": int(cp.cuda.runtime.runtimeGetVersion()), "date_utc": date}


def run_wgmma(fn, job, arrs):
    smem = arrs["smem"]
    n, S = smem.shape
    nd = arrs["c_regs"].shape[2]
    off = int(job["img_off"])
    dyn = (off + S + 2048 + 1023) // 1024 * 1024
    if dyn > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = dyn
    a_regs = arrs.get("a_regs", np.zeros((n, 128, 4), np.uint32))
    g = {k: cp.asarray(np.ascontiguousarray(v)) for k, v in
         (("img", smem), ("ad", arrs["a_desc"]), ("bd", arrs["b_desc"]), ("ar", a_regs),
          ("cr", arrs["c_regs"]), ("sc", arrs["scale_d"]))}
    extra = (cp.asarray(np.ascontiguousarray(arrs["e_regs"])),) if job["kind"] == "wgmma_sp" else ()
    outs, bases = [], None
    fills = [0x00, 0xFF, 0x00]
    for fill in fills:
        d = cp.full((n, 128, nd), 0xDEADBEEF, dtype=cp.uint32)
        base = cp.zeros(n, dtype=cp.uint32)
        fn((n,), (128,), (g["img"], np.int32(S), g["ad"], g["bd"], g["ar"], g["cr"], d, g["sc"],
                          np.int32(off), np.int32(dyn), np.int32(fill), base, *extra), shared_mem=dyn)
        cp.cuda.runtime.deviceSynchronize()
        outs.append(cp.asnumpy(d))
        bases = cp.asnumpy(base)
    keep = ((outs[0] == outs[1]).all(axis=(1, 2)) & (outs[0] == outs[2]).all(axis=(1, 2)))
    return {"d_regs": outs[0], "bases": bases, "dyn_bytes": dyn, "fills": fills, "keep": keep}


def run_wmma(fn, job, arrs):
    n = len(arrs["mode"])
    W = job["meta"]["fragment_words"]
    DS = int(job["d_width"])
    lds = np.stack([arrs["lda"], arrs["ldb"], arrs["ldc"], arrs["ldd"]], axis=1).astype(np.int32)
    g = {k: cp.asarray(np.ascontiguousarray(arrs[k])) for k in ("a_mem", "b_mem", "c_mem")}
    runs = []
    for _ in range(2):
        dmem = cp.full((n, DS), common.D_PREFILL, dtype=cp.uint8)
        fr = {x: cp.full((n, 32, W[x]), 0xDEADBEEF, dtype=cp.uint32) for x in "abcd"}
        fn((n,), (32,), (g["a_mem"], np.int32(g["a_mem"].shape[1]), g["b_mem"], np.int32(g["b_mem"].shape[1]),
                         g["c_mem"], np.int32(g["c_mem"].shape[1]), dmem, np.int32(DS), cp.asarray(lds),
                         fr["a"], fr["b"], fr["c"], fr["d"]))
        cp.cuda.runtime.deviceSynchronize()
        res = {f"{x}_frag": cp.asnumpy(fr[x]) for x in "abcd"}
        res["d_mem"] = cp.asnumpy(dmem)
        runs.append(res)
    keep = np.ones(n, bool)
    for k in runs[0]:
        keep &= (runs[0][k] == runs[1][k]).reshape(n, -1).all(axis=1)
    runs[0]["keep"] = keep
    return runs[0]


def run_mma(fn, job, arrs):
    """Twice, with the same bits required: each lane's D registers after the one mma.sync (or
    mma.sp, which takes the metadata registers after C's)."""
    n = len(arrs["mode"])
    wd = job["meta"]["fragment_words"]["d"]
    names = "abce" if job["kind"] == "mma_sp" else "abc"
    g = [cp.asarray(np.ascontiguousarray(arrs[f"{x}_regs"])) for x in names]
    outs = []
    for _ in range(2):
        d = cp.full((n, 32, wd), 0xDEADBEEF, dtype=cp.uint32)
        fn((n,), (32,), (*g, d))
        cp.cuda.runtime.deviceSynchronize()
        outs.append(cp.asnumpy(d))
    keep = (outs[0] == outs[1]).reshape(n, -1).all(axis=1)
    return {"d_regs": outs[0], "keep": keep}


def run_movmatrix(fn, job, arrs):
    """Twice, with the same bits required: each lane's destination register."""
    a = cp.asarray(np.ascontiguousarray(arrs["a_regs"]))
    n = a.shape[0]
    outs = []
    for _ in range(2):
        d = cp.full((n, 32, 1), 0xDEADBEEF, dtype=cp.uint32)
        fn((n,), (32,), (a, d))
        cp.cuda.runtime.deviceSynchronize()
        outs.append(cp.asnumpy(d))
    keep = (outs[0] == outs[1]).reshape(n, -1).all(axis=1)
    return {"d_regs": outs[0], "keep": keep}


def run_matrix_move(fn, job, arrs):
    """Twice, with the same bits required: ldmatrix's registers, or stmatrix's image after."""
    smem, addresses = arrs["smem"], arrs["addresses"]
    n, S = smem.shape
    num = job["meta"]["qualifiers"]["num"]
    regs_in = arrs.get("regs", np.zeros((n, 32, num), np.uint32))
    g = {k: cp.asarray(np.ascontiguousarray(v)) for k, v in (("img", smem), ("addr", addresses), ("in", regs_in))}
    runs = []
    for _ in range(2):
        out = cp.full((n, 32, num), 0xDEADBEEF, dtype=cp.uint32)
        image_out = cp.zeros((n, S), dtype=cp.uint8)
        fn((n,), (32,), (g["img"], np.int32(S), g["addr"], g["in"], out, image_out), shared_mem=S)
        cp.cuda.runtime.deviceSynchronize()
        runs.append({"regs": cp.asnumpy(out), "smem_after": cp.asnumpy(image_out)})
    key = "regs" if job["kind"] == "ldmatrix" else "smem_after"
    keep = (runs[0][key] == runs[1][key]).reshape(n, -1).all(axis=1)
    return {key: runs[0][key], "keep": keep}


def run_dup(fn, job, arrs):
    n = len(arrs["a_mask"])
    W = job["meta"]["fragment_words"]
    DS = (int(job["d_span"]) + 255) // 256 * 256
    g = {k: cp.asarray(np.ascontiguousarray(arrs[k])) for k in
         ("a_mem", "b_mem", "c_mem", "a_mask", "a_repl", "b_mask", "b_repl")}
    runs = []
    for _ in range(2):
        dmem = cp.full((n, DS), common.D_PREFILL, dtype=cp.uint8)
        fr = {x: cp.full((n, 32, W[x]), 0xDEADBEEF, dtype=cp.uint32) for x in "abcd"}
        fn((n,), (32,), (g["a_mem"], g["b_mem"], g["c_mem"], dmem, np.int32(DS),
                         np.int32(arrs["lda"]), np.int32(arrs["ldb"]), np.int32(arrs["ldc"]), np.int32(arrs["ldd"]),
                         g["a_mask"], g["a_repl"], g["b_mask"], g["b_repl"], fr["a"], fr["b"], fr["c"], fr["d"]))
        cp.cuda.runtime.deviceSynchronize()
        res = {f"{x}_frag": cp.asnumpy(fr[x]) for x in "abcd"}
        res["d_mem"] = cp.asnumpy(dmem)[:, :int(job["d_span"])]
        runs.append(res)
    runs[0]["identical"] = all((runs[0][k] == runs[1][k]).all() for k in runs[0])
    return runs[0]


def main():
    build, out = Path(sys.argv[1]), Path(sys.argv[2])
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.time()
    dev = device_info(date)
    log("device:", json.dumps(dev))
    jobs = json.loads((build / "jobs.json").read_text())
    bundle = np.load(build / "jobs.npz")
    mod = cp.RawModule(path=str(build / "probes.cubin"))
    stage = Path(tempfile.mkdtemp(prefix="probes_"))
    dups = []
    for i, job in enumerate(jobs):
        arrs = common.job_arrays(bundle, i, job)
        fn = mod.get_function(job["kernel"])
        t = time.time()
        try:
            if job["kind"] in ("wgmma", "wgmma_sp"):
                res = run_wgmma(fn, job, arrs)
            elif job["kind"] == "wmma":
                res = run_wmma(fn, job, arrs)
            elif job["kind"] in ("mma", "mma_sp"):
                res = run_mma(fn, job, arrs)
            elif job["kind"] in ("ldmatrix", "stmatrix"):
                res = run_matrix_move(fn, job, arrs)
            elif job["kind"] == "movmatrix":
                res = run_movmatrix(fn, job, arrs)
            else:
                res = run_dup(fn, job, arrs)
                dups.append((job, arrs, res))
                log(f"dup   {job['meta']['variant']}: {len(arrs['a_mask'])} experiments, "
                    f"runs identical {res['identical']} ({time.time() - t:.2f}s)")
                continue
        except Exception as exc:  # noqa: BLE001
            log(f"ERROR {job['out']}: {type(exc).__name__}: {exc}")
            continue
        dev_job = dict(dev, nvcc=job["meta"]["nvcc"])
        common.write_recording(stage, job, arrs, res, dev_job)
        extra = f", bases {sorted(set(int(b) for b in res['bases']))}" if "bases" in res else ""
        log(f"{job['kind']:5s} {job['out']}: {int(np.sum(res['keep']))}/{len(res['keep'])} kept{extra} "
            f"({time.time() - t:.2f}s)")
    if dups:
        (stage / "q3_fragment_copies").mkdir(exist_ok=True)
        nv = dups[0][0]["meta"].get("nvcc")
        common.write_dup(stage / "q3_fragment_copies" / "fragment_copies.zip", dups, dict(dev, nvcc=nv))
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / "probes.tar", "w") as tar:
        for p in sorted(stage.rglob("*")):
            if p.is_file():
                tar.add(p, arcname=str(p.relative_to(stage)))
    try:
        names = sorted({j["kernel"] for j in jobs if j["kind"] == "dup"})
        sass = []
        for nm in names:
            r = subprocess.run(["cuobjdump", "-sass", "-fun", nm, str(build / "probes.cubin")],
                               capture_output=True, text=True, timeout=60)
            sass.append(r.stdout + r.stderr)
        (out / "sass_dup.txt").write_text("\n".join(sass))
    except Exception as exc:  # noqa: BLE001
        log("cuobjdump failed:", exc)
    log(f"done in {time.time() - t0:.1f}s")
    (out / "log.txt").write_text("\n".join(LOG) + "\n")


if __name__ == "__main__":
    main()
