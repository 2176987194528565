"""Shared by the local generator and the device runner: FORMAT v1 containers and meta.

Nothing here imports fastmma (the device machine runs this file with numpy alone).
See tests/golden/FORMAT.md for the format and tools/record/README.md for the probes.
"""

from __future__ import annotations

import json

import numpy as np

MODE_LEGEND = {
    "0": "narrow: exponents within +-3 binades of 1.0 (integers: full-range random operands and C)",
    "1": "wide: exponents spread over ~20 binades around 1.0 (products span ~40), C spread +-20 binades",
    "2": "subnormal-heavy: many subnormal operands, mixed with tiny/huge normals; tiny C (incl. subnormal, +-0)",
    "3": "cancellation: k-pairs of products that (nearly) cancel, C close to -(A*B) (exact or a few ulps off)",
    "4": "specials: +-0, +-inf, NaNs with varied payloads (quiet and signalling), max-finite, min-subnormal sprinkled into A, B and C; some all-zero rows/columns",
    "5": "overflow-prone: magnitudes near the output type's max (integers: extreme operands and C near INT32_MAX/MIN so that roughly half the outputs overflow)",
    "6": "probe: inputs constructed by hand to settle one question (meta.case_labels says what each case holds; tools/record/README.md)",
}

SEQUENCES = {  # meta.sequence by family and whether the case is a chain, {chain} its length
    ("wgmma", False): "wgmma.fence; wgmma.mma_async x1; wgmma.commit_group; wgmma.wait_group 0",
    ("wgmma", True): "wgmma.fence; wgmma.mma_async x{chain}; wgmma.commit_group; wgmma.wait_group 0",
    ("wgmma_sp", False): "wgmma.fence; wgmma.mma_async.sp x1 (the metadata register e of each thread, the "
                         "variant's sparsity selector); wgmma.commit_group; wgmma.wait_group 0",
    ("wgmma_sp", True): "wgmma.fence; wgmma.mma_async.sp x{chain} (each with the metadata register e of its "
                        "step, the variant's sparsity selector); wgmma.commit_group; wgmma.wait_group 0",
    ("wmma", False): "wmma.load.a; wmma.load.b; wmma.load.c; wmma.mma; wmma.store.d",
    ("wmma", True): "wmma.load.c; (wmma.load.a; wmma.load.b; wmma.mma) x{chain}; wmma.store.d",
    ("mma", False): "registers a, b, c loaded from memory; mma.sync; registers d written to memory",
    ("ldmatrix", False): "image copied into shared memory; __syncwarp; ldmatrix; registers written to memory",
    ("stmatrix", False): "image copied into shared memory; __syncwarp; registers read; stmatrix; __syncwarp; "
                         "shared memory copied out",
    ("movmatrix", False): "register a loaded from memory; movmatrix; register d written to memory",
    ("mma_sp", False): "registers a, b, c and the metadata e loaded from memory; mma.sp with the variant's "
                       "sparsity selector; registers d written to memory",
    ("mma", True): "registers c loaded; (registers a, b of the step loaded; mma.sync, the previous D as C) "
                   "x{chain}; registers d written to memory",
    ("mma_sp", True): "registers c loaded; (registers a, b and the metadata e of the step loaded; mma.sp with "
                      "the variant's sparsity selector, the previous D as C) x{chain}; registers d written to memory",
}
D_PREFILL = 0xA5


def meta_array(meta: dict) -> np.ndarray:
    return np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8).copy()


def wgmma_meta(job: dict, device: dict, bases: list, dyn_bytes: int, fills: list) -> dict:
    """The meta of one wgmma probe file (keys as in the recordings, plus probe extras)."""
    aligned = all(b % 1024 == 0 for b in bases)
    meta = dict(job["meta"])
    meta.update(device)
    meta.update({
        "format_version": 1,
        "family": job["kind"],
        "mode_legend": MODE_LEGEND,
        "smem_base_observed": sorted(set(int(b) for b in bases)),
        "smem_base_aligned_1024": bool(aligned),
        "dynamic_smem_bytes": int(dyn_bytes),
        "fill_bytes_beyond_image": [f"0x{f:02X}" for f in fills],
        "fill_check": "every case ran with dynamic shared memory outside the image (before it "
                      "and after it) filled with 0x00 and with 0xFF (and once more with 0x00); "
                      "cases whose d_regs differed would have been dropped (meta.dropped_cases)",
        "scale_d_note": "runtime predicate p = (scale_d != 0) on the first instruction",
        "sequence": sequence(job["kind"], chain_of(job["meta"])),
        "descriptor_convention": (
            "a_desc/b_desc start-address fields are relative to the image (image byte 0 = address 0); "
            "at run time the kernel copied the image to shared-window address smem_base_observed "
            "(dynamic shared memory start + image_offset_in_dynamic_smem) and added that address >> 4 "
            "to bits 0-13 of each descriptor; all other fields as stored"),
        "smem_image_bytes": int(job["arrays"]["smem"].shape[1]),
        "accumulator_regs_per_thread": int(job["arrays"]["c_regs"].shape[2]),
    })
    return meta


def chain_of(meta: dict) -> int:
    """Instructions per case of a job's meta or a variant (``qualifiers.chain``, 1 if absent)."""
    return int(meta["qualifiers"].get("chain") or 1)


def sequence(family: str, chain: int) -> str:
    """meta.sequence: one instruction (wmma: one load each, mma, store), or a chain's (FORMAT.md)."""
    return SEQUENCES[family, chain > 1].format(chain=chain)


def wmma_meta(job: dict, device: dict) -> dict:
    meta = dict(job["meta"])
    meta.update(device)
    meta.update({
        "format_version": 1,
        "family": "wmma",
        "mode_legend": MODE_LEGEND,
        "d_prefill_byte": f"0x{D_PREFILL:02X}",
        "sequence": sequence("wmma", chain_of(job["meta"])),
    })
    return meta


def mma_meta(job: dict, device: dict) -> dict:
    """The meta of an mma, ldmatrix, stmatrix or movmatrix file (the family is the job's kind)."""
    meta = dict(job["meta"])
    meta.update(device)
    meta.update({"format_version": 1, "family": job["kind"], "mode_legend": MODE_LEGEND,
                 "sequence": sequence(job["kind"], chain_of(job["meta"]))})
    return meta


def save_recording(path, arrays: dict, meta: dict) -> None:
    out = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    out["meta"] = meta_array(meta)
    np.savez_compressed(path, **out)


def job_arrays(bundle, index: int, job: dict) -> dict:
    """The input arrays of job ``index`` from the jobs.npz bundle."""
    prefix = f"j{index}."
    return {k[len(prefix):]: bundle[k] for k in bundle.files if k.startswith(prefix)}


def write_recording(outdir, job: dict, arrays: dict, result: dict, device: dict) -> str:
    """Write one FORMAT v1 file from a job, its inputs and the device's outputs.

    result (wgmma): d_regs [n,128,ND], bases [n], dyn_bytes, fills, keep (bool [n])
    result (mma):   d_regs [n,32,WD], keep (bool [n])  (movmatrix: d_regs [n,32,1])
    result (wmma):  a_frag, b_frag, c_frag, d_frag [n,32,w], d_mem [n, width], keep (bool [n])
    Cases with keep False (outputs that differed between runs) are dropped and listed in
    meta.dropped_cases.
    """
    from pathlib import Path

    path = Path(outdir) / job["out"]
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = np.asarray(result["keep"], bool)
    sel = np.nonzero(keep)[0]
    job = dict(job)
    job["meta"] = dict(job["meta"])
    m = job["meta"]
    m["dropped_cases"] = [int(i) for i in np.nonzero(~keep)[0]]
    m["case_labels"] = [m["case_labels"][i] for i in sel]
    m["case_index"] = [int(i) for i in sel]
    m["n_cases"] = int(len(sel))
    if job["kind"] in ("wgmma", "wgmma_sp"):
        names = ("smem", "a_desc", "b_desc", "c_regs", "scale_d", "mode") + (("e_regs",) * (job["kind"] == "wgmma_sp"))
        out = {k: arrays[k][sel] for k in names}
        if "a_regs" in arrays:
            out["a_regs"] = arrays["a_regs"][sel]
        out["d_regs"] = np.asarray(result["d_regs"], np.uint32)[sel]
        job["arrays"] = out
        meta = wgmma_meta(job, device, [int(b) for b in np.asarray(result["bases"])[sel]],
                          result["dyn_bytes"], result["fills"])
    elif job["kind"] == "mma":
        out = {k: arrays[k][sel] for k in ("a_regs", "b_regs", "c_regs", "mode")}
        out["d_regs"] = np.asarray(result["d_regs"], np.uint32)[sel]
        meta = mma_meta(job, device)
    elif job["kind"] == "mma_sp":
        out = {k: arrays[k][sel] for k in ("a_regs", "b_regs", "c_regs", "e_regs", "mode")}
        out["d_regs"] = np.asarray(result["d_regs"], np.uint32)[sel]
        meta = mma_meta(job, device)
    elif job["kind"] == "movmatrix":
        out = {k: arrays[k][sel] for k in ("a_regs", "mode")}
        out["d_regs"] = np.asarray(result["d_regs"], np.uint32)[sel]
        meta = mma_meta(job, device)
    elif job["kind"] in ("ldmatrix", "stmatrix"):
        out = {k: arrays[k][sel] for k in ("smem", "addresses", "mode", "regs") if k in arrays}
        key = "regs" if job["kind"] == "ldmatrix" else "smem_after"
        out[key] = np.asarray(result[key])[sel]
        meta = mma_meta(job, device)
    else:
        out = {k: arrays[k][sel] for k in ("a_mem", "b_mem", "c_mem", "lda", "ldb", "ldc", "ldd", "mode")}
        for k in ("a_frag", "b_frag", "c_frag", "d_frag", "d_mem"):
            out[k] = np.asarray(result[k])[sel]
        meta = wmma_meta(job, device)
    save_recording(path, out, meta)
    return str(path)


def write_dup(path, jobs_and_results, device: dict) -> None:
    """The Q3 file (not FORMAT v1): one group of arrays per probed variant, keys v{i}_{name}."""
    arrays = {}
    index = []
    for i, (job, arrs, res) in enumerate(jobs_and_results):
        for k, v in arrs.items():
            arrays[f"v{i}_{k}"] = np.asarray(v)
        for k in ("a_frag", "b_frag", "c_frag", "d_frag", "d_mem"):
            arrays[f"v{i}_{k}"] = np.asarray(res[k])
        entry = dict(job["meta"])
        entry["prefix"] = f"v{i}_"
        entry["runs_identical"] = bool(res.get("identical", True))
        index.append(entry)
    meta = {"format": "fastmma probe q3 (tools/record/README.md)", "variants": index}
    meta.update(device)
    arrays["meta"] = meta_array(meta)
    with open(path, "wb") as fh:  # a file object: numpy adds no .npz suffix
        np.savez_compressed(fh, **arrays)
