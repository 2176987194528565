"""Read the probe recordings back (local side): conform summary with mismatches at logical
(row, col) positions, and the Q3 register attribution.

    /work/venv/bin/python tools/record/analyze.py [tests/golden/probes]

wgmma files are replayed with image_address = smem_base_observed % 1024 (Q5).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from fastmma import wgmma, wmma
from fastmma.isa import parse
from fastmma.layout.wgmma_fragments import unpack_d
from fastmma.layout.wmma_fragments import fragment_layout, unpack_fragment

ROOT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "probes"


def load(path):
    with np.load(path) as d:
        arrays = {k: d[k] for k in d.files}
    return arrays, json.loads(bytes(arrays.pop("meta")).decode())


def wgmma_d(arrays, meta, i):
    inst = parse(meta["ptx"][1])
    src = {"a_regs": arrays["a_regs"][i]} if "a_regs" in arrays else {"a_desc": int(arrays["a_desc"][i])}
    base = meta["smem_base_observed"][0] % 1024
    got = wgmma.mma_async(inst, arrays["c_regs"][i], b_desc=int(arrays["b_desc"][i]), smem=arrays["smem"][i],
                          scale_d=bool(arrays["scale_d"][i]), image_address=base, **src)
    q = meta["qualifiers"]
    return unpack_d(arrays["d_regs"][i], q["dtype"], q["n"]), unpack_d(got, q["dtype"], q["n"])


def wmma_d(arrays, meta, i):
    la, lb, lc, mm, _ = (t.split(" {")[0].split(" [")[0] for t in meta["ptx"])
    q = meta["qualifiers"]
    frags = [wmma.load(t, arrays[f"{x}_mem"][i], 0, int(arrays[f"ld{x}"][i])) for t, x in zip((la, lb, lc), "abc")]
    got = wmma.mma(mm, *frags)
    lay = fragment_layout("d", q["shape"], q["dtype"])
    return unpack_fragment(arrays["d_frag"][i], lay), unpack_fragment(got, lay)


def summary(root: Path) -> None:
    for path in sorted(root.rglob("*.npz")):
        arrays, meta = load(path)
        bad = []
        for i in range(len(arrays["mode"])):
            hw, fm = (wgmma_d if meta["family"] == "wgmma" else wmma_d)(arrays, meta, i)
            for r, c in np.argwhere(hw != fm):
                bad.append((i, int(r), int(c), int(hw[r, c]), int(fm[r, c])))
        rel = path.relative_to(root)
        if not bad:
            print(f"pass {rel}: {len(arrays['mode'])} cases")
            continue
        cases = sorted({b[0] for b in bad})
        print(f"FAIL {rel}: {len(cases)} of {len(arrays['mode'])} cases, {len(bad)} elements")
        for i, r, c, h, f in bad[:4]:
            print(f"    case {i} D[{r},{c}] hardware {h:#x} fastmma {f:#x}   ({meta['case_labels'][i][:70]})")


def fragment_copies(root: Path) -> None:
    path = root / "q3_fragment_copies" / "fragment_copies.zip"
    z = np.load(path)
    meta = json.loads(bytes(z["meta"]).decode())
    for v in meta["variants"]:
        p, q = v["prefix"], v["qualifiers"]
        lay = fragment_layout("d", q["shape"], q["dtype"])
        base = unpack_fragment(z[p + "d_frag"][0], lay)
        unread = []
        for e, label in enumerate(v["experiments"]):
            if label.endswith(":= 0") and " register " in label:
                if (unpack_fragment(z[p + "d_frag"][e], lay) == base).all():
                    unread.append(label.split(" := ")[0])
        print(f"{v['variant']}: registers whose overwrite leaves D unchanged: {', '.join(unread) or 'none'}")


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    summary(root)
    fragment_copies(root)
