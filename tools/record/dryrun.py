"""Local check of the pipeline without a GPU: fake every device output with fastmma, write the
files exactly as run_device.py would, and replay them with fastmma.conform (all must pass).

    /work/venv/bin/python tools/record/gen.py --dry-run
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

import common
from fastmma import conform, ldmatrix, mma_sync, wmma
from fastmma.isa import parse

FAKE_DEVICE = {"gpu": "dry run (fastmma)", "compute_capability": "9.0", "driver_version": "-",
               "cuda_version": "-", "cuda_driver_api_version": 0, "cuda_runtime_version": 0,
               "date_utc": "1970-01-01T00:00:00Z"}


def fake_wgmma(job, arrs):
    insts = [parse(x) for x in job["meta"]["ptx"][1:]]
    n = len(arrs["mode"])
    a_desc, b_desc = arrs["a_desc"].reshape(n, -1), arrs["b_desc"].reshape(n, -1)
    d = [conform.wgmma_chain(insts, arrs["c_regs"][i], arrs["smem"][i], a_desc[i], b_desc[i],
                             arrs["a_regs"][i] if "a_regs" in arrs else None, bool(arrs["scale_d"][i]),
                             job["img_off"] % 1024) for i in range(n)]
    return {"d_regs": np.stack(d), "bases": [1024 + job["img_off"]] * n, "dyn_bytes": 0,
            "fills": [0, 0xFF, 0], "keep": [True] * n}


def fake_wgmma_sp(job, arrs):
    n = len(arrs["mode"])
    d = conform.wgmma_sp_chain([parse(x) for x in job["meta"]["ptx"][1:]], arrs, job["img_off"] % 1024)
    return {"d_regs": d, "bases": [1024 + job["img_off"]] * n, "dyn_bytes": 0, "fills": [0, 0xFF, 0],
            "keep": [True] * n}


def fake_wmma(job, arrs, dup=False):
    la, lb, lc, mm, st = job["meta"]["ptx"]
    if dup:
        n = len(arrs["a_mask"])
        mems = [(arrs["a_mem"], arrs["b_mem"], arrs["c_mem"], int(arrs["lda"]), int(arrs["ldb"]),
                 int(arrs["ldc"]), int(arrs["ldd"]))] * n
        width = job["d_span"]
    else:
        n = len(arrs["mode"])
        mems = [(arrs["a_mem"][i], arrs["b_mem"][i], arrs["c_mem"][i], int(arrs["lda"][i]), int(arrs["ldb"][i]),
                 int(arrs["ldc"][i]), int(arrs["ldd"][i])) for i in range(n)]
        width = job["d_width"]
    res = {k: [] for k in ("a_frag", "b_frag", "c_frag", "d_frag", "d_mem")}
    chain = common.chain_of(job["meta"])
    load = {x: parse(text.split(" {")[0]) for x, text in (("a", la), ("b", lb), ("c", lc))}
    mma = parse(mm.split(" {")[0])
    for i, (am, bm, cm, lda, ldb, ldc, ldd) in enumerate(mems):
        a = wmma.load(load["a"], am, 0, lda)
        b = wmma.load(load["b"], bm, 0, ldb)
        c = wmma.load(load["c"], cm, 0, ldc)
        if dup:
            for x, frag in (("a", a), ("b", b)):
                mask, repl = int(arrs[f"{x}_mask"][i]), int(arrs[f"{x}_repl"][i])
                for r in range(frag.shape[1]):
                    if mask >> r & 1:
                        frag[:, r] = repl
        d = conform.wmma_k_loop(mma, load["a"], load["b"], am, bm, lda, ldb, a, b, c, chain)
        mem = np.full(width, common.D_PREFILL, np.uint8)
        wmma.store(st.split(" [")[0], mem, 0, d, ldd)
        for k, v in zip(("a_frag", "b_frag", "c_frag", "d_frag", "d_mem"), (a, b, c, d, mem)):
            res[k].append(v)
    res = {k: np.stack(v) for k, v in res.items()}
    res["keep"] = [True] * n
    return res


def fake_mma(job, arrs):
    inst = parse(job["meta"]["ptx"][0])
    d = mma_sync.mma_stack(inst, arrs["a_regs"], arrs["b_regs"], arrs["c_regs"])
    return {"d_regs": d, "keep": [True] * len(arrs["mode"])}


def fake_mma_sp(job, arrs):
    inst = parse(job["meta"]["ptx"][0])
    chain, d = common.chain_of(job["meta"]), arrs["c_regs"]
    for j in range(chain):  # a chain's steps in turn
        a, b, e = (arrs[f"{x}_regs"][:, j] if chain > 1 else arrs[f"{x}_regs"] for x in "abe")
        d = mma_sync.mma_sp_stack(inst, a, b, d, e)
    return {"d_regs": d, "keep": [True] * len(arrs["mode"])}


def fake_matrix_move(job, arrs):
    """ldmatrix's registers or stmatrix's image after, case by case."""
    inst = parse(job["meta"]["ptx"][0])
    if job["kind"] == "ldmatrix":
        regs = np.stack([ldmatrix.ldmatrix(inst, s, a) for s, a in zip(arrs["smem"], arrs["addresses"])])
        return {"regs": regs, "keep": [True] * len(arrs["mode"])}
    after = arrs["smem"].copy()
    for i in range(len(after)):
        ldmatrix.stmatrix(inst, after[i], arrs["addresses"][i], arrs["regs"][i])
    return {"smem_after": after, "keep": [True] * len(arrs["mode"])}


def fake_movmatrix(job, arrs):
    d = ldmatrix.movmatrix(parse(job["meta"]["ptx"][0]), arrs["a_regs"])
    return {"d_regs": d, "keep": [True] * len(arrs["mode"])}


def run(build: Path) -> None:
    jobs = json.loads((build / "jobs.json").read_text())
    bundle = np.load(build / "jobs.npz")
    out = Path(tempfile.mkdtemp(prefix="probes_dry_"))
    dups = []
    for i, job in enumerate(jobs):
        arrs = common.job_arrays(bundle, i, job)
        if job["kind"] == "wgmma":
            common.write_recording(out, job, arrs, fake_wgmma(job, arrs), FAKE_DEVICE)
        elif job["kind"] == "wgmma_sp":
            common.write_recording(out, job, arrs, fake_wgmma_sp(job, arrs), FAKE_DEVICE)
        elif job["kind"] == "wmma":
            common.write_recording(out, job, arrs, fake_wmma(job, arrs), FAKE_DEVICE)
        elif job["kind"] == "mma":
            common.write_recording(out, job, arrs, fake_mma(job, arrs), FAKE_DEVICE)
        elif job["kind"] == "mma_sp":
            common.write_recording(out, job, arrs, fake_mma_sp(job, arrs), FAKE_DEVICE)
        elif job["kind"] in ("ldmatrix", "stmatrix"):
            common.write_recording(out, job, arrs, fake_matrix_move(job, arrs), FAKE_DEVICE)
        elif job["kind"] == "movmatrix":
            common.write_recording(out, job, arrs, fake_movmatrix(job, arrs), FAKE_DEVICE)
        else:
            dups.append((job, arrs, fake_wmma(job, arrs, dup=True)))
    if dups:
        (out / "q3_fragment_copies").mkdir(exist_ok=True)
        common.write_dup(out / "q3_fragment_copies" / "fragment_copies.zip", dups, FAKE_DEVICE)
    passed, failed = conform.run([out])
    sizes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"dry run in {out}: {passed} passed, {failed} failed; {sizes / 1e6:.2f} MB")
    if failed:
        sys.exit(1)
