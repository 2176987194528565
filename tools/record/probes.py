"""The probes: which variants run, on which inputs (local side; uses numpy, ml_dtypes, fastmma's
layout helpers to place matrices).  ``build_jobs()`` returns the list of jobs that gen.py turns
into kernels and a bundle for the device.

Each job is a dict:
    kind     "wgmma" | "wmma" | "dup"
    kernel   C identifier of its kernel
    out      path of the output file, relative to tests/golden/probes
    meta     FORMAT v1 meta known before the run (variant, qualifiers, ptx_template, ...)
    gen      what gen.py needs to write the kernel
    arrays   the inputs (FORMAT v1 names)
    img_off  (wgmma) byte offset of the image inside dynamic shared memory
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from fastmma.layout.descriptor import MatrixDescriptor, element_addresses
from fastmma.layout.wgmma_fragments import pack_a, pack_d
from fastmma.layout.wmma_memory import fragment_registers

from common import chain_of
from samplers import TYPES, sample, storage, value

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden"
BITS = {t: v[0] for t, v in TYPES.items()}


def _cid(name: str) -> str:
    return "k_" + re.sub(r"[^0-9A-Za-z]", "_", name).replace("-", "m")


def _heldout(family: str, variant: str) -> bool:
    return not (GOLDEN / family / f"{variant}.npz").exists()


# ----------------------------------------------------------------------------------------------
# wgmma
# ----------------------------------------------------------------------------------------------

def wgmma_variant(n, k, dtype, atype, btype, a_source="desc", ta=0, tb=0, sa=1, sb=1,
                  satfinite=False):
    is16 = atype in ("f16", "bf16")
    isfloat = atype in ("f16", "bf16", "tf32", "e4m3", "e5m2")
    op = "and" if atype == "b1" else None
    inst = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{dtype}.{atype}.{btype}"
    inst += ".satfinite" if satfinite else ""
    inst += ".and.popc" if op else ""
    name = f"wgmma.m64n{n}k{k}.{dtype}.{atype}.{btype}" + (".satfinite" if satfinite else "")
    name += ".and.popc" if op else ""
    name += ".adesc" if a_source == "desc" else ".areg"
    imms = []
    if is16:
        if a_source == "desc":
            name += f".ta{ta}"
        name += f".tb{tb}"
    if isfloat:
        name += f".sa{sa}.sb{sb}"
        imms = [sa, sb]
        if is16:
            imms += [ta, tb] if a_source == "desc" else [tb]
    q = {
        "a_source": a_source, "atype": atype, "btype": btype, "chain": 1, "ctype": dtype,
        "dtype": dtype, "imm_scale_a": sa if isfloat else None, "imm_scale_b": sb if isfloat else None,
        "imm_trans_a": (ta if a_source == "desc" else None) if is16 else None,
        "imm_trans_b": tb if is16 else None, "k": k, "layouts": None, "m": 64, "n": n, "op": op,
        "rounding": None, "satfinite": bool(satfinite),
    }
    imm_text = "".join(f", {x}" for x in imms)
    nd = n // 2 if dtype in ("f32", "s32") else n // 4
    return {
        "name": name, "qualifiers": q, "inst": inst, "imm_text": imm_text, "nd": nd,
        "ptx_template": [f"{inst} {{D}}, A, B, p{imm_text};"],
    }


class Image:
    """A shared-memory image under construction; regions are handed out 1024-aligned."""

    def __init__(self, image_address=0):
        self.top = 0
        self.image_address = image_address
        self.fills = []  # (start, stop, type) byte ranges to fill with samples

    def region(self, nbytes):
        start = self.top
        self.top = (start + nbytes + 1023) // 1024 * 1024
        return start


def _canonical_desc(mn, k, bits, major, swizzle, start, rng=None, base_offset=0):
    """A descriptor laying out mn x k densely from ``start``; returns (desc, footprint bytes)."""
    rowbytes = k * bits // 8  # 32 bytes of K per row for every wgmma type
    W = {"none": 16, "32B": 32, "64B": 64, "128B": 128}[swizzle]
    if major == "K":
        if swizzle == "none":
            chunks = rowbytes // 16
            if rng is not None and rng.random() < 0.5:  # chunk-major: all row groups of chunk 0 first
                lbo, sbo = 128 * (mn // 8), 128
            else:
                lbo, sbo = 128, 128 * chunks
            foot = 128 * chunks * (mn // 8)
        else:
            lbo, sbo = 16, 8 * W
            foot = 8 * W * (mn // 8)
    else:  # MN-major, 16-bit types only
        t = 128 // bits
        kgroups = k // 8
        if swizzle == "none":
            mgroups = mn // t
            if rng is not None and rng.random() < 0.5:
                sbo, lbo = 128, 128 * mgroups
            else:
                sbo, lbo = 128 * kgroups, 128
            foot = 128 * mgroups * kgroups
        else:
            per = (W // 16) * t  # MN elements per W-byte row
            mgroups = -(-mn // per)
            sbo = 8 * W
            lbo = 8 * W * kgroups
            foot = lbo * mgroups
    d = MatrixDescriptor(start, lbo, sbo, base_offset, swizzle)
    return d.encode(), foot


def _chunks(desc, mn, k, bits, major, image_addresses):
    """16-byte chunks of the image that the operand reads, under each image-address model."""
    out = []
    for ia in image_addresses:
        byte, _ = element_addresses(desc, mn, k, bits, major, image_address=ia)
        out.append(np.unique(byte // 16))
    return np.unique(np.concatenate(out))


def place(img: np.ndarray, desc, mat_bits: np.ndarray, t: str, major: str, image_address=0):
    """Write the logical mn x k matrix (raw bits) into the image where ``desc`` says."""
    mn, k = mat_bits.shape
    bits = BITS[t]
    byte, bit = element_addresses(desc, mn, k, bits, major, image_address=image_address)
    if bits == 1:
        for i, j in np.ndindex(mn, k):
            b, s = byte[i, j], bit[i, j]
            img[b] = (img[b] & ~np.uint8(1 << s)) | np.uint8((int(mat_bits[i, j]) & 1) << s)
        return
    nb = bits // 8
    v = mat_bits.astype(np.uint64)
    for q in range(nb):
        img[byte + q] = ((v >> np.uint64(8 * q)) & np.uint64(0xFF)).astype(np.uint8)


def crafted_wgmma_case(var, A, B, C, atype, btype, dtype):
    """Image, descriptors and registers for logical A (64xK), B (KxN), C (64xN) raw bits.

    Canonical no-swizzle K-major layouts at a 1024-aligned image (A at 0, B at 2048 or so).
    """
    q = var["qualifiers"]
    n, k = q["n"], q["k"]
    img = np.zeros(4096 + 1024 * ((n * 32 + 1023) // 1024), np.uint8)
    a_desc = 0
    if q["a_source"] == "desc":
        a_desc, foot = _canonical_desc(64, k, BITS[atype], "K", "none", 0)
        place(img, a_desc, A, atype, "K")
        a_regs = np.zeros((128, 4), np.uint32)
    else:
        a_regs = pack_a(A.astype(storage(atype)), atype)
    b_desc, foot = _canonical_desc(n, k, BITS[btype], "K", "none", 2048)
    place(img, b_desc, np.ascontiguousarray(B.T), btype, "K")
    c_regs = pack_d(C.astype(storage(dtype)), dtype)
    return img, a_desc, b_desc, a_regs, c_regs


def random_wgmma_case(var, rng, mode, image_address=0, swizzle=None, base_offset=None):
    """A random case: descriptors with random layouts, touched 128-byte blocks filled with
    samples of the mode, random C (and A registers)."""
    q = var["qualifiers"]
    n, k, atype, btype, dtype = q["n"], q["k"], q["atype"], q["btype"], q["dtype"]
    im = Image(image_address)
    parts = []
    for which, mn, t, trans in (("a", 64, atype, q["imm_trans_a"]), ("b", n, btype, q["imm_trans_b"])):
        if which == "a" and q["a_source"] == "reg":
            parts.append(None)
            continue
        major = "MN" if trans else "K"
        sw = str(swizzle or rng.choice(["none", "32B", "64B", "128B"]))
        start_pad = int(rng.choice([0, 0, 128, 256, 384, 16 * int(rng.integers(1, 8))]))
        bo = base_offset if base_offset is not None else int(rng.integers(0, 8))
        # size first, then place
        _, foot = _canonical_desc(mn, k, BITS[t], major, sw, 0, None, 0)
        start = im.region(foot + start_pad + 256) + start_pad
        desc, _ = _canonical_desc(mn, k, BITS[t], major, sw, start, rng, bo if sw != "none" else 0)
        parts.append((desc, mn, t, major))
    S = im.top + 1024
    img = np.zeros(S, np.uint8)
    for p in parts:
        if p is None:
            continue
        desc, mn, t, major = p
        # fill what the operand reads if the swizzle XOR acts on absolute address bits (fastmma's
        # model) and what it reads if it acted on image-relative bits (the same when aligned)
        chunks = _chunks(desc, mn, k, BITS[t], major, sorted({image_address, 0}))
        assert chunks.max() * 16 + 16 <= S
        nel = 128 // BITS[t]
        vals = sample(rng, t, (len(chunks) * nel,), mode, "ab", dtype)
        if BITS[t] == 1:
            vals = np.packbits(vals, bitorder="little")
        img.reshape(-1, 16)[chunks] = vals.view(np.uint8).reshape(-1, 16)
    a_desc = parts[0][0] if parts[0] is not None else 0
    b_desc = parts[1][0]
    if q["a_source"] == "reg":
        e = 32 // BITS[atype]
        vals = sample(rng, atype, (128, 4 * e), mode, "ab", dtype)
        if BITS[atype] == 1:
            a_regs = rng.integers(0, 1 << 32, size=(128, 4), dtype=np.uint64).astype(np.uint32)
        elif BITS[atype] == 32:
            a_regs = vals.astype(np.uint32)
        else:
            v = vals.astype(np.uint32).reshape(128, 4, e)
            a_regs = np.bitwise_or.reduce(v << (np.arange(e, dtype=np.uint32) * BITS[atype]), axis=-1)
    else:
        a_regs = np.zeros((128, 4), np.uint32)
    nd = var["nd"]
    if dtype == "f16":
        h = sample(rng, "f16", (128, nd, 2), mode, "c", dtype).astype(np.uint32)
        c_regs = h[..., 0] | (h[..., 1] << 16)
    else:
        c_regs = sample(rng, dtype, (128, nd), mode, "c", dtype).astype(np.uint32)
    if mode == 3 and atype not in ("s8", "u8", "b1"):
        c_regs = _cancel_c(var, img, a_desc, a_regs, b_desc, image_address, rng)
    return img, a_desc, b_desc, a_regs, c_regs


def _add_random_cases(cases, labels, modes, var, rng, mode_list, scale_ds, label):
    """Append one random wgmma case per mode (with its scale-d) to a job's case, label and
    mode lists; ``label`` is formatted with ``mode`` and ``sd``."""
    for mode, sd in zip(mode_list, scale_ds):
        img, ad, bd, ar, cr = random_wgmma_case(var, rng, mode)
        cases.append((img, ad, bd, ar, cr, sd))
        labels.append(label.format(mode=mode, sd=sd))
        modes.append(mode)


def _cancel_c(var, img, a_desc, a_regs, b_desc, image_address, rng):
    """C close to -(A.B): exact negation of the f64 product sum, a few ulps off in half."""
    from fastmma.formats import from_bits
    from fastmma.wgmma import gather_operands
    from fastmma.isa import parse

    q = var["qualifiers"]
    text = _concrete_text(var)
    a, b = gather_operands(parse(text), img, a_desc=a_desc if q["a_source"] == "desc" else None,
                           a_regs=a_regs if q["a_source"] == "reg" else None, b_desc=b_desc,
                           image_address=image_address)
    af = from_bits(a, q["atype"]).astype(np.float64)
    bf = from_bits(b, q["btype"]).astype(np.float64)
    af = np.where(np.isfinite(af), af, 0)
    bf = np.where(np.isfinite(bf), bf, 0)
    sa = q["imm_scale_a"] or 1
    sb = q["imm_scale_b"] or 1
    prod = (sa * af) @ (sb * bf)
    dt = np.float16 if q["dtype"] == "f16" else np.float32
    with np.errstate(over="ignore"):
        c = (-prod).astype(dt)
    bits = c.view(np.uint16 if dt == np.float16 else np.uint32).astype(np.int64)
    bits = bits + np.where(rng.random(bits.shape) < 0.5, rng.integers(-3, 4, size=bits.shape), 0)
    bits = bits.astype(np.uint16 if dt == np.float16 else np.uint32)
    return pack_d(bits, q["dtype"])


def _concrete_text(var):
    """A parseable instruction text for the variant (register names made up)."""
    q = var["qualifiers"]
    nd = var["nd"]
    reg = "%f" if q["dtype"] == "f32" else "%r"
    d = "{" + ", ".join(f"{reg}{i + 1}" for i in range(nd)) + "}"
    a = "%rd1" if q["a_source"] == "desc" else "{%r201, %r202, %r203, %r204}"
    return f"{var['inst']} {d}, {a}, %rd2, p{var['imm_text']};"


def wgmma_job(var, cases, out, question, img_off=0, labels=None, modes=None):
    """cases: list of (img, a_desc, b_desc, a_regs, c_regs, scale_d)."""
    n = len(cases)
    S = max(c[0].size for c in cases)
    S = (S + 1023) // 1024 * 1024
    smem = np.zeros((n, S), np.uint8)
    for i, c in enumerate(cases):
        smem[i, :c[0].size] = c[0]
    arrays = {
        "smem": smem,
        "a_desc": np.array([c[1] for c in cases], np.uint64),
        "b_desc": np.array([c[2] for c in cases], np.uint64),
        "c_regs": np.stack([c[4] for c in cases]).astype(np.uint32),
        "scale_d": np.array([c[5] for c in cases], np.uint8),
        "mode": np.array(modes if modes is not None else [6] * n, np.uint8),
    }
    if var["qualifiers"]["a_source"] == "reg":
        arrays["a_regs"] = np.stack([c[3] for c in cases]).astype(np.uint32)
    meta = {
        "variant": var["name"], "qualifiers": var["qualifiers"], "ptx_template": var["ptx_template"],
        "split": "probe", "heldout_only_variant": _heldout("wgmma", var["name"]),
        "case_index": list(range(n)), "n_cases": n, "target": "sm_90a",
        "probe_question": question, "case_labels": labels or [""] * n,
        "image_offset_in_dynamic_smem": int(img_off),
    }
    return {"kind": "wgmma", "kernel": _cid(var["name"]), "out": out, "meta": meta,
            "gen": var, "arrays": arrays, "img_off": int(img_off)}


# ----------------------------------------------------------------------------------------------
# wmma
# ----------------------------------------------------------------------------------------------

SHAPE_MNK = {"m16n16k16": (16, 16, 16), "m8n32k16": (8, 32, 16), "m32n8k16": (32, 8, 16),
             "m16n16k8": (16, 16, 8), "m8n8k4": (8, 8, 4), "m8n8k32": (8, 8, 32), "m8n8k128": (8, 8, 128)}


def wmma_variant(shape, al, bl, cl, dl, dtype, ctype, atype, rounding=None, satfinite=False, op=None):
    btype = atype
    if atype == "f16":
        mma = f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.{dtype}.{ctype}"
    elif atype in ("bf16", "tf32"):
        mma = f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.f32.{atype}.{btype}.f32"
    elif atype == "f64":
        mma = f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.{rounding}.f64.f64.f64.f64"
    elif atype == "b1":
        mma = f"wmma.mma.{op}.popc.sync.aligned.{al}.{bl}.{shape}.s32.b1.b1.s32"
    else:
        mma = f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.s32.{atype}.{btype}.s32" + (".satfinite" if satfinite else "")
    texts = [
        f"wmma.load.a.sync.aligned.{al}.{shape}.global.{atype}",
        f"wmma.load.b.sync.aligned.{bl}.{shape}.global.{btype}",
        f"wmma.load.c.sync.aligned.{cl}.{shape}.global.{ctype}",
        mma,
        f"wmma.store.d.sync.aligned.{dl}.{shape}.global.{dtype}",
    ]
    name = f"wmma.{shape}.{al}.{bl}.{dtype}.{ctype}.{atype}"
    name += f".{rounding}" if rounding else ""
    name += ".satfinite" if satfinite else ""
    name += f".{op}.popc" if op else ""
    name += f".c{cl}.d{dl}"
    m, n, k = SHAPE_MNK[shape]
    regs = {x: fragment_registers(x, shape, t) for x, t in (("a", atype), ("b", btype), ("c", ctype), ("d", dtype))}
    words = {x: r * (2 if t == "f64" else 1) for (x, r), t in zip(regs.items(), (atype, btype, ctype, dtype))}
    q = {"a_source": None, "alayout": al, "atype": atype, "blayout": bl, "btype": btype, "clayout": cl,
         "ctype": ctype, "dlayout": dl, "dtype": dtype, "imm_scale_a": None, "imm_scale_b": None,
         "imm_trans_a": None, "imm_trans_b": None, "k": k, "m": m, "n": n, "op": op,
         "rounding": rounding, "satfinite": bool(satfinite), "shape": shape}
    return {"name": name, "qualifiers": q, "texts": texts, "regs": regs, "words": words,
            "shape": shape, "types": {"a": atype, "b": btype, "c": ctype, "d": dtype},
            "layouts": {"a": al, "b": bl, "c": cl, "d": dl}}


def _mem_bytes(mat_bits: np.ndarray, t: str, layout: str, ld: int, rng) -> np.ndarray:
    """Memory image of a logical matrix (FORMAT.md 'How the memory images were written')."""
    rows, cols = mat_bits.shape
    outer, inner = (rows, cols) if layout == "row" else (cols, rows)
    nelem = (outer - 1) * ld + inner
    bits = BITS[t]
    assert bits >= 8
    # filler between lines: random values of the same kind
    flat = sample(rng, t, (nelem,), 0)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    e = r * ld + c if layout == "row" else c * ld + r
    flat[e] = mat_bits.astype(flat.dtype)
    return flat.view(np.uint8)


def wmma_case(var, A, B, C, rng, lds=None):
    """Memory images for logical A (MxK), B (KxN), C (MxN) raw bits; default (smallest) strides."""
    m, n, k = SHAPE_MNK[var["shape"]]
    k *= chain_of(var)  # a k-loop's A and B hold every step's K
    L = var["layouts"]
    T = var["types"]
    dims = {"a": (m, k), "b": (k, n), "c": (m, n), "d": (m, n)}
    lds = dict(lds or {})
    out = {}
    for x, mat in (("a", A), ("b", B), ("c", C)):
        rows, cols = dims[x]
        ld = lds.get(x, cols if L[x] == "row" else rows)
        out[x] = (_mem_bytes(np.asarray(mat), T[x], L[x], ld, rng), ld)
    rows, cols = dims["d"]
    ldd = lds.get("d", cols if L["d"] == "row" else rows)
    outer, inner = (rows, cols) if L["d"] == "row" else (cols, rows)
    dspan = ((outer - 1) * ldd + inner) * BITS[T["d"]] // 8
    return out, ldd, dspan


def random_wmma_matrices(var, rng, mode):
    m, n, k = SHAPE_MNK[var["shape"]]
    T = var["types"]
    A = sample(rng, T["a"], (m, k), mode, "ab", T["d"])
    B = sample(rng, T["b"], (k, n), mode, "ab", T["d"])
    C = sample(rng, T["c"], (m, n), mode, "c", T["d"])
    return A, B, C


def wmma_job(var, mats, out, question, rng, labels=None, modes=None, lds=None):
    """mats: list of (A, B, C) raw-bit logical matrices."""
    n = len(mats)
    cases = [wmma_case(var, A, B, C, rng, (lds[i] if lds else None)) for i, (A, B, C) in enumerate(mats)]
    arrays = {}
    for x in "abc":
        width = max(c[0][x][0].size for c in cases)
        width = (width + 255) // 256 * 256
        mem = np.zeros((n, width), np.uint8)
        for i, c in enumerate(cases):
            mem[i, :c[0][x][0].size] = c[0][x][0]
        arrays[f"{x}_mem"] = mem
        arrays[f"ld{x}"] = np.array([c[0][x][1] for c in cases], np.int32)
    arrays["ldd"] = np.array([c[1] for c in cases], np.int32)
    dwidth = (max(c[2] for c in cases) + 255) // 256 * 256
    arrays["mode"] = np.array(modes if modes is not None else [6] * n, np.uint8)
    meta = {
        "variant": var["name"], "qualifiers": var["qualifiers"], "ptx_template": var["texts"],
        "split": "probe", "heldout_only_variant": _heldout("wmma", var["name"]),
        "case_index": list(range(n)), "n_cases": n, "target": "sm_90a",
        "fragment_regs": var["regs"], "fragment_words": var["words"],
        "probe_question": question, "case_labels": labels or [""] * n,
    }
    return {"kind": "wmma", "kernel": _cid(var["name"]), "out": out, "meta": meta, "gen": var,
            "arrays": arrays, "d_width": int(dwidth)}


# ----------------------------------------------------------------------------------------------
# Question 1: sign of an f32 result that underflows
# ----------------------------------------------------------------------------------------------

Q1 = ("Q1: sign of an f32 wgmma result when a non-zero exact sum rounds (toward zero) to zero; "
      "+0 for an exact zero sum; where the zero terms' exponent (2^-133) truncates tiny products")


def _q1_cases(t, k, n, rng):
    v = lambda x: value(t, x)
    cases = []  # (label, A, B, C, scale_d)
    zA = np.zeros((64, k), np.uint32)
    zB = np.zeros((k, n), np.uint32)
    zC = np.zeros((64, n), np.uint32)

    def one(a00, b00, c=0, scale=1, label=""):
        A, B, C = zA.copy(), zB.copy(), zC.copy()
        A[0, 0], B[0, 0] = v(a00), v(b00)
        C[:] = c
        cases.append((label, A, B, C, scale))

    one(2.0**-75, -2.0**-75, 0, 1, "A[0,0]=2^-75, B[0,0]=-2^-75 (product -2^-150), rest 0, C=+0, scale-d 1")
    one(2.0**-75, -2.0**-75, 0x80000000, 1, "same, C=-0 everywhere")
    one(2.0**-75, -2.0**-75, 0x3F800000, 0, "same, scale-d 0 (C=1.0 ignored)")
    one(2.0**-75, 2.0**-75, 0, 1, "A[0,0]=2^-75, B[0,0]=+2^-75 (product +2^-150), C=+0")
    one(2.0**-74, -2.0**-76, 0x80000000, 1, "A[0,0]=2^-74, B[0,0]=-2^-76, C=-0")
    one(-2.0**-75, -2.0**-75, 0x80000000, 1, "A[0,0]=-2^-75, B[0,0]=-2^-75 (product +2^-150), C=-0")
    # table: D[r, j] = LA[r] * LB[j] + C[r, j]
    LB = [-2.0**-75, 2.0**-75, -2.0**-76, -1.5 * 2.0**-75, -2.0**-80, -2.0**-70, 2.0**-80, -1.75 * 2.0**-85]
    LB = (LB * 8)[:n]
    LA = [2.0**-e for e in range(52, 104)] + [1.5 * 2.0**-75, 1.25 * 2.0**-76, 1.75 * 2.0**-74, -2.0**-75,
                                              -2.0**-80, -2.0**-82, 1.5 * 2.0**-82, 2.0**-126, 1.5 * 2.0**-126,
                                              -1.5 * 2.0**-100, 2.0**-60, 2.0**-58]
    LA = LA[:64]
    A, B = zA.copy(), zB.copy()
    A[:, 0] = [v(x) for x in LA]
    B[0, :] = [v(x) for x in LB]
    labels_t = ("table: A[r,0] = 2^-52..2^-103 and mantissa variants, B[0,j] = "
                "[-2^-75, 2^-75, -2^-76, -1.5*2^-75, -2^-80, -2^-70, 2^-80, -1.75*2^-85], products 2^-122..2^-188")
    cases.append((labels_t + ", C=+0", A, B, zC.copy(), 1))
    C = zC.copy()
    C[:] = 0x80000000
    cases.append((labels_t + ", C=-0", A, B, C, 1))
    C = np.array(rng.choice([0, 0x80000000, 1, 0x80000001, 3, 0x80000003, value("f32", 2.0**-140),
                             value("f32", -2.0**-140)],
                            size=(64, n)), np.uint32)
    cases.append((labels_t + ", C = random of +-0, +-2^-149, +-3*2^-149, +-2^-140", A, B, C, 1))
    # near-cancellation: A[r,0]*B[0,j] + A[r,1]*B[1,j] leaves m * 2^-150 * 2^(2-j)
    A, B = zA.copy(), zB.copy()
    for r in range(64):
        s = -1.0 if r % 2 else 1.0
        m = (r // 2) % 8 + 1
        A[r, 0] = v(s * 2.0**-71)
        A[r, 1] = v(-s * (1 - m * 2.0**-8) * 2.0**-71)
    for j in range(n):
        B[0, j] = v(2.0**-(69 + j % 8))
        B[1, j] = v(2.0**-(69 + j % 8))
    cases.append(("near-cancellation: A[r,0]=s*2^-71, A[r,1]=-s*(1-m*2^-8)*2^-71 (s=+-1 by r%2, m=r//2%8+1), "
                  "B[0,j]=B[1,j]=2^-(69+j%8): D = s*m*2^-148 * 2^-(j%8), C=+0", A, B, zC.copy(), 1))
    # exact cancellation of non-zero products, C = -0 / +0
    A, B = zA.copy(), zB.copy()
    for r in range(64):
        A[r, 0] = v(2.0**-(60 + r % 16))
        A[r, 1] = v(-(2.0**-(60 + r % 16)))
    B[0, :] = [v(2.0**-(70 + j)) for j in range(n)]
    B[1, :] = B[0, :]
    C = zC.copy()
    C[32:] = 0x80000000
    cases.append(("exact cancellation: A[r,0]=-A[r,1]=2^-(60+r%16), B[0,j]=B[1,j]: sum exactly 0; "
                  "C=+0 rows 0-31, C=-0 rows 32-63", A, B, C, 1))
    # random subnormal-heavy / specials
    return cases


def q1_jobs(rng):
    jobs = []
    specs = [("bf16", 16, "desc", 1, 1), ("bf16", 16, "desc", -1, 1), ("bf16", 16, "reg", 1, 1),
             ("tf32", 8, "desc", 1, 1), ("tf32", 8, "reg", 1, -1)]
    for t, k, src, sa, sb in specs:
        var = wgmma_variant(8, k, "f32", t, t, src, 0, 0, sa, sb)
        cases, labels, modes = [], [], []
        for label, A, B, C, sd in _q1_cases(t, k, 8, rng):
            img, ad, bd, ar, cr = crafted_wgmma_case(var, A, B, C, t, t, "f32")
            cases.append((img, ad, bd, ar, cr, sd))
            labels.append(label)
            modes.append(6)
        _add_random_cases(cases, labels, modes, var, rng, (2, 2, 4), (1, 1, 1), "random, mode {mode}")
        jobs.append(wgmma_job(var, cases, f"q1_f32_underflow_sign/{var['name']}.npz", Q1, 0, labels, modes))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 2: wmma with f16 C and f32 D (and f16 D with f32 C): which zero-term exponent
# ----------------------------------------------------------------------------------------------

Q2 = ("Q2: wmma .f16 inputs with C and D of different types: does the sum run in the f32 mode "
      "(zero terms at 2^-133) or the f16 mode (2^-21)?")


def _q2_cases(var, rng):
    m, n, k = SHAPE_MNK[var["shape"]]
    ct = var["types"]["c"]
    f = lambda x: value("f16", x)
    c = lambda x: value(ct, x)
    zA, zB = np.zeros((m, k), np.uint16), np.zeros((k, n), np.uint16)
    cst = storage(ct)
    zC = np.zeros((m, n), cst)
    out = []
    A, B = zA.copy(), zB.copy()
    A[0, 0], B[0, 0] = f(2.0**-24), f(2.0**-24)
    out.append(("A[0,0]=B[0,0]=2^-24 (product 2^-48), rest 0, C=+0", A, B, zC.copy()))
    # table
    LA = [2.0**-24, 3 * 2.0**-24, 2.0**-23, 2.0**-20, 2.0**-16, 2.0**-14, 2.0**-12, 2.0**-10,
          -2.0**-24, 5 * 2.0**-24, 2.0**-22, 2.0**-18, 1.5 * 2.0**-14, 2.0**-8, 2.0**-6, 1.0]
    LB = [2.0**-24, 2.0**-22, 2.0**-20, 2.0**-16, 2.0**-14, -2.0**-24, 3 * 2.0**-24, 2.0**-12]
    A, B = zA.copy(), zB.copy()
    A[:, 0] = [f(LA[r % len(LA)]) for r in range(m)]
    B[0, :] = [f(LB[j % len(LB)]) for j in range(n)]
    out.append(("table: A[r,0] in {2^-24..1}, B[0,j] in {2^-24..2^-12} (products 2^-48..2^-12), C=+0",
                A, B, zC.copy()))
    # tie for an f16 D: 2^-25 (half the smallest subnormal) + 2^-48
    A, B = zA.copy(), zB.copy()
    for r in range(m):
        s = -1.0 if (r // 2) % 2 else 1.0
        A[r, 0] = f(s * 2.0**-12)
        A[r, 1] = f(s * 2.0**-24) if r % 2 == 0 else 0
    for j in range(n):
        B[0, j] = f(2.0**-13 if j % 2 == 0 else 3 * 2.0**-14)
        B[1, j] = f(2.0**-24)
    out.append(("tie: A[r,0]*B[0,j] = +-2^-25 (j even) or +-0.75*2^-24 (j odd), plus A[r,1]*B[1,j] = +-2^-48 "
                "on even rows (0 on odd rows); C=+0", A, B, zC.copy()))
    # C tiny plus a tiny product
    A, B = zA.copy(), zB.copy()
    A[:, 0] = f(2.0**-24)
    B[0, :] = f(2.0**-24)
    C = zC.copy()
    C[:] = c(2.0**-24)
    C[1::2, :] = c(-(2.0**-24))
    out.append(("C = +2^-24 (even rows) / -2^-24 (odd rows), A[r,0]*B[0,j] = 2^-48: "
                "f32 mode gives C + 2^-48 exactly", A, B, C))
    return out


def q2_jobs(rng):
    jobs = []
    combos = []
    for shape in ("m16n16k16", "m8n32k16", "m32n8k16"):
        combos.append((shape, "row", "col", "f32", "f16", "row", "row"))
        combos.append((shape, "col", "row", "f16", "f32", "col", "col"))
    combos.append(("m16n16k16", "row", "col", "f32", "f32", "row", "row"))
    combos.append(("m16n16k16", "row", "col", "f16", "f16", "row", "row"))
    combos.append(("m16n16k16", "col", "col", "f32", "f16", "col", "row"))
    for shape, al, bl, dt, ct, cl, dl in combos:
        var = wmma_variant(shape, al, bl, cl, dl, dt, ct, "f16")
        mats, labels, modes = [], [], []
        for label, A, B, C in _q2_cases(var, rng):
            mats.append((A, B, C))
            labels.append(label)
            modes.append(6)
        for mode in (2, 2, 4, 0):
            mats.append(random_wmma_matrices(var, rng, mode))
            labels.append(f"random, mode {mode}")
            modes.append(mode)
        jobs.append(wmma_job(var, mats, f"q2_wmma_mixed_cd_zero_exponent/{var['name']}.npz", Q2, rng,
                             labels, modes))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 4: f64 NaN priority and signed zeros
# ----------------------------------------------------------------------------------------------

Q4 = ("Q4: wmma m8n8k4 .f64: which NaN payload survives (B vs accumulator vs A, quiet vs "
      "signalling, across the k chain), and the sign of an exact zero under .rn/.rz/.rm/.rp")

F64_EXP = 0x7FF0000000000000
QUIET = 0x0008000000000000
SIGN = 0x8000000000000000


def qnan(payload, neg=False):
    return (SIGN if neg else 0) | F64_EXP | QUIET | payload


def snan(payload, neg=False):
    return (SIGN if neg else 0) | F64_EXP | payload


def _f(x):
    return int(np.float64(x).view(np.uint64))


def _q4_cases(rng):
    out = []
    kindsA = [_f(1.0), qnan(0xA1), snan(0xA2), qnan(0xA3, True), _f(np.inf), _f(0.0), snan(0xA7, True), _f(2.0)]
    kindsB = [_f(1.0), qnan(0xB1), snan(0xB2), qnan(0xB3, True), _f(np.inf), _f(0.0), snan(0xB7, True), _f(-3.0)]

    def table(cvals, label):
        A = np.zeros((8, 4), np.uint64)
        B = np.zeros((4, 8), np.uint64)
        A[:, 0] = kindsA
        B[0, :] = kindsB
        C = np.array(cvals, np.uint64).reshape(8, 8) if np.size(cvals) == 64 else np.full((8, 8), cvals, np.uint64)
        out.append((label, A, B, C))

    desc = ("k=0 table: A[r,0] = [1, qNaN:A1, sNaN:A2, -qNaN:A3, +inf, +0, -sNaN:A7, 2], "
            "B[0,c] = [1, qNaN:B1, sNaN:B2, -qNaN:B3, +inf, +0, -sNaN:B7, -3], k=1..3 A=B=+0")
    table(qnan(0xC0C), desc + "; C = qNaN:C0C")
    table(snan(0xC0D), desc + "; C = sNaN:C0D")
    table(snan(0xC0E, True), desc + "; C = -sNaN:C0E")
    table(_f(1.0), desc + "; C = 1.0")
    table(_f(-np.inf), desc + "; C = -inf")
    table([qnan(0xC00 + i) if i % 3 == 0 else snan(0xC00 + i) if i % 3 == 1 else _f(-0.0) for i in range(64)],
          desc + "; C[r,c] = qNaN:C(8r+c) / sNaN / -0 by (8r+c)%3")
    # chain order: NaNs at different k
    A = np.full((8, 4), _f(1.0), np.uint64)
    B = np.full((4, 8), _f(0.5), np.uint64)
    for r in range(8):
        A[r, r % 4] = snan(0xA00 + r) if r < 4 else qnan(0xA00 + r)
    for c in range(8):
        B[c % 4, c] = qnan(0xB00 + c) if c < 4 else snan(0xB00 + c)
    C = np.full((8, 8), _f(1.0), np.uint64)
    out.append(("chain order: A[r, r%4] = sNaN:A0r (r<4) / qNaN:A0r (r>=4), B[c%4, c] = qNaN:B0c (c<4) / "
                "sNaN:B0c (c>=4), other A=1, B=0.5, C=1", A, B, C))
    A2, B2 = A.copy(), B.copy()
    C2 = np.array([[qnan(0xC00 + 8 * r + c) if (r + c) % 2 else snan(0xC00 + 8 * r + c) for c in range(8)]
                   for r in range(8)], np.uint64)
    out.append(("chain order with NaN C: as above, C[r,c] = qNaN:C(8r+c) if (r+c) odd else sNaN:C(8r+c)",
                A2, B2, C2))
    # C NaN, then A NaN at a later k only (no B NaN)
    A3 = np.full((8, 4), _f(1.0), np.uint64)
    B3 = np.full((4, 8), _f(0.5), np.uint64)
    for r in range(8):
        A3[r, r % 4] = qnan(0xA30 + r) if r % 2 else snan(0xA30 + r)
    C3 = np.array([[snan(0xC30 + c) if c % 2 else qnan(0xC30 + c) for c in range(8)] for r in range(8)], np.uint64)
    C3[:, 6:] = _f(2.0)
    out.append(("accumulator vs A: A[r, r%4] = NaN (sNaN r even, qNaN r odd), B=0.5, "
                "C[r,c] = qNaN (c even) / sNaN (c odd) for c<6, C=2 for c>=6", A3, B3, C3))
    # signed zeros: exact cancellation at k=3 after +0 products at k=0..2
    A = np.zeros((8, 4), np.uint64)
    B = np.zeros((4, 8), np.uint64)
    C = np.zeros((8, 8), np.uint64)
    a3 = [1.5, -1.5, 0.75, -3.0, 1.0 + 2.0**-52, 5.0, -7.0, 2.0**-1000]
    b3 = [2.0, -2.0, 4.0, 0.5, -1.0 - 2.0**-52, 2.0**900, 3.0, -0.25]
    for r in range(8):
        A[r, 3] = _f(a3[r])
    for c in range(8):
        B[3, c] = _f(b3[c])
    for r in range(8):
        for c in range(8):
            C[r, c] = _f(-(a3[r] * b3[c]))
    # a3[4]*b3[4] is not exact in f64: c = -round(a*b), the fma leaves the rounding residue
    out.append(("signed zero: k=0..2 A=B=+0, k=3 a*b with C = -(a*b) (exact cancellation of a non-zero "
                "product; row 4 x col 4 not exact: fma leaves the residue)", A, B, C))
    # cancellation at k=0, then +0 / -0 products at k=1..3
    A = np.zeros((8, 4), np.uint64)
    B = np.zeros((4, 8), np.uint64)
    C = np.zeros((8, 8), np.uint64)
    A[:, 0] = _f(1.5)
    B[0, :] = _f(2.0)
    C[:, :] = _f(-3.0)
    for r in range(8):  # rows: which zero products follow
        for kk in range(1, 4):
            A[r, kk] = _f(-0.0) if (r >> (kk - 1)) & 1 else _f(0.0)
    for c in range(8):
        if c >= 4:
            B[0, c] = _f(-2.0)
            C[:, c] = _f(3.0)
        for kk in range(1, 4):
            B[kk, c] = _f(-0.0) if c % 2 else _f(0.0)
    out.append(("signed zero: k=0 exact cancellation (1.5*2-3 for c<4, 1.5*-2+3 for c>=4), then k=1..3 "
                "products +-0 (A[r,k] = -0 where bit k-1 of r is set; B[k,c] = -0 for odd c)", A, B, C))
    # pure zero sums: C = +-0 and products +-0
    A = np.zeros((8, 4), np.uint64)
    B = np.zeros((4, 8), np.uint64)
    C = np.zeros((8, 8), np.uint64)
    for r in range(8):
        for kk in range(4):
            A[r, kk] = _f(-0.0) if (r >> (kk % 3)) & 1 else _f(0.0)
    for c in range(8):
        B[:, c] = _f(-0.0) if c % 2 else _f(0.0)
        C[:, c] = _f(-0.0) if (c // 2) % 2 else _f(0.0)
    out.append(("zeros only: A[r,k] = -0 where bit (k%3) of r is set, B[.,c] = -0 for odd c, "
                "C = -0 for c in {2,3,6,7}", A, B, C))
    # two-product cancellation with C = 0
    A = np.zeros((8, 4), np.uint64)
    B = np.zeros((4, 8), np.uint64)
    C = np.zeros((8, 8), np.uint64)
    for r in range(8):
        x = 1.0 + r / 8
        A[r, 0] = _f(x)
        A[r, 1] = _f(-x)
    for c in range(8):
        y = 2.0 ** (c - 3)
        B[0, c] = _f(y)
        B[1, c] = _f(y)
        C[:, c] = _f(-0.0) if c % 2 else _f(0.0)
    out.append(("two products cancel: A[r,0]=-A[r,1]=1+r/8, B[0,c]=B[1,c]=2^(c-3), C=+0 (even c) / -0 (odd c), "
                "k=2,3 A=B=+0", A, B, C))
    return out


def q4_jobs(rng):
    jobs = []
    for rnd in ("rn", "rz", "rm", "rp"):
        var = wmma_variant("m8n8k4", "row", "col", "row", "row", "f64", "f64", "f64", rounding=rnd)
        mats, labels, modes = [], [], []
        for label, A, B, C in _q4_cases(rng):
            mats.append((A, B, C))
            labels.append(label)
            modes.append(6)
        for mode in (4, 4, 3):
            if mode == 3:
                A = sample(rng, "f64", (8, 4), 0)
                B = sample(rng, "f64", (4, 8), 0)
                prod = A.view(np.float64) @ B.view(np.float64)
                C = (-prod).view(np.uint64)
                C = (C.astype(np.int64) + np.where(rng.random((8, 8)) < 0.5, rng.integers(-2, 3, size=(8, 8)), 0)
                     ).astype(np.uint64)
            else:
                A, B, C = random_wmma_matrices(var, rng, mode)
            mats.append((A, B, C))
            labels.append(f"random, mode {mode}")
            modes.append(mode)
        jobs.append(wmma_job(var, mats, f"q4_f64_nan_signed_zero/{var['name']}.npz", Q4, rng, labels, modes))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 5: wgmma images that are not 1024-byte aligned
# ----------------------------------------------------------------------------------------------

Q5 = ("Q5: wgmma with the shared-memory image at smem_base + 128 / + 512 (not 1024-byte aligned): "
      "does the swizzle XOR act on absolute address bits?  (offset 0 is the control)")


def q5_jobs(rng):
    jobs = []
    for ta, tb in ((0, 0), (1, 1)):
        var = wgmma_variant(8, 16, "f32", "f16", "f16", "desc", ta, tb, 1, 1)
        for off in (0, 128, 512):
            addr = 1024 + off  # dynamic shared memory starts at 1024 on the H100 (recordings)
            cases, labels, modes = [], [], []
            plan = [("128B", 0), ("128B", "match"), ("128B", None), ("128B", None), ("64B", 0),
                    ("64B", "match"), ("64B", None), ("32B", 0), ("32B", None), ("none", 0)]
            for sw, bo in plan:
                if bo == "match":
                    bo_v = (addr >> 7) & 7
                elif bo is None:
                    bo_v = int(rng.integers(0, 8))
                else:
                    bo_v = bo
                mode = int(rng.choice([0, 0, 1]))
                img, ad, bd, ar, cr = random_wgmma_case(var, rng, mode, image_address=addr % 1024,
                                                        swizzle=sw, base_offset=bo_v)
                cases.append((img, ad, bd, ar, cr, 1))
                labels.append(f"swizzle {sw}, base_offset {bo_v}, random mode {mode}")
                modes.append(mode)
            jobs.append(wgmma_job(var, cases, f"q5_smem_base_{addr}/{var['name']}.npz", Q5, off, labels, modes))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 6: variants absent from the recordings, random cases
# ----------------------------------------------------------------------------------------------

Q6 = "Q6: variants absent from the recordings (held out), random cases of the FORMAT modes"


def q6_jobs(rng):
    jobs = []
    for al, bl, cl, dl, sat in (("row", "col", "row", "row", False), ("col", "row", "col", "col", True)):
        var = wmma_variant("m32n8k16", al, bl, cl, dl, "s32", "s32", "u8", satfinite=sat)
        mats, labels, modes = [], [], []
        for mode in (0, 5, 0, 5, 0, 5):
            mats.append(random_wmma_matrices(var, rng, mode))
            labels.append(f"random, mode {mode}")
            modes.append(mode)
        jobs.append(wmma_job(var, mats, f"q6_heldout_random/{var['name']}.npz", Q6, rng, labels, modes))
    specs = [
        (wgmma_variant(40, 16, "f32", "f16", "f16", "desc", 0, 0, 1, 1), (0, 1, 2, 3, 4, 5)),
        (wgmma_variant(40, 16, "f32", "f16", "f16", "desc", 1, 1, -1, 1), (0, 3, 4)),
        (wgmma_variant(40, 16, "f32", "f16", "f16", "reg", 0, 1, 1, -1), (0, 2, 4)),
        (wgmma_variant(200, 32, "f16", "e4m3", "e5m2", "desc", 0, 0, 1, -1), (0, 2, 4, 5)),
        (wgmma_variant(144, 32, "s32", "s8", "u8", "desc", satfinite=True), (0, 5)),
        (wgmma_variant(144, 32, "s32", "s8", "u8", "reg", satfinite=True), (5, 0)),
        (wgmma_variant(240, 256, "s32", "b1", "b1", "desc"), (0, 5)),
    ]
    for var, ms in specs:
        cases, labels, modes = [], [], []
        scale_ds = (1,) * (len(ms) - 1) + (0,)  # the last case drops C
        _add_random_cases(cases, labels, modes, var, rng, ms, scale_ds, "random, mode {mode}, scale-d {sd}")
        jobs.append(wgmma_job(var, cases, f"q6_heldout_random/{var['name']}.npz", Q6, 0, labels, modes))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 3: which copy of a duplicated f16 fragment register wmma.mma reads
# ----------------------------------------------------------------------------------------------

Q3 = ("Q3: f16 A/B wmma fragments hold each element 2 or 4 times; after wmma.load, registers are "
      "overwritten one at a time (runtime mask) and the mma's D shows which registers it read")

ONE_ONE = 0x3C003C00  # f16x2 (1.0, 1.0)


def q3_jobs(rng):
    """One kernel per (shape, layouts, dtype/ctype); one warp per experiment."""
    jobs = []
    combos = [("m16n16k16", "row", "col", "f32", "f32"), ("m16n16k16", "col", "row", "f32", "f32"),
              ("m16n16k16", "row", "col", "f16", "f16"), ("m32n8k16", "row", "col", "f32", "f32"),
              ("m32n8k16", "row", "col", "f16", "f16"), ("m8n32k16", "row", "col", "f32", "f32"),
              ("m8n32k16", "row", "col", "f16", "f16")]
    for shape, al, bl, dt, ct in combos:
        var = wmma_variant(shape, al, bl, "row", "row", dt, ct, "f16")
        m, n, k = SHAPE_MNK[shape]
        # operands: f16 integers 2..5 (A) and 1..4 (B): every sum exact, any change visible
        A = np.array([[value("f16", float(x)) for x in row] for row in rng.integers(2, 6, size=(m, k))], np.uint16)
        B = np.array([[value("f16", float(x)) for x in row] for row in rng.integers(1, 5, size=(k, n))], np.uint16)
        C = np.zeros((m, n), storage(ct))
        exps = [("baseline", 0, 0, 0, 0)]
        for x in "ab":
            for i in range(8):
                exps.append((f"{x} register {i} := 0", (1 << i) if x == "a" else 0, 0,
                             (1 << i) if x == "b" else 0, 0))
            exps.append((f"{x} registers 4-7 := 0x3C003C00", 0xF0 if x == "a" else 0, ONE_ONE,
                         0xF0 if x == "b" else 0, ONE_ONE))
            exps.append((f"{x} registers 0-3 := 0x3C003C00", 0x0F if x == "a" else 0, ONE_ONE,
                         0x0F if x == "b" else 0, ONE_ONE))
            exps.append((f"{x} odd registers := 0", 0xAA if x == "a" else 0, 0, 0xAA if x == "b" else 0, 0))
            exps.append((f"{x} even registers := 0", 0x55 if x == "a" else 0, 0, 0x55 if x == "b" else 0, 0))
        nexp = len(exps)
        case, ldd, dspan = wmma_case(var, A, B, C, rng)
        arrays = {
            "A": A, "B": B, "C": C,
            "a_mem": case["a"][0], "b_mem": case["b"][0], "c_mem": case["c"][0],
            "lda": np.int32(case["a"][1]), "ldb": np.int32(case["b"][1]), "ldc": np.int32(case["c"][1]),
            "ldd": np.int32(ldd),
            "a_mask": np.array([e[1] for e in exps], np.uint32),
            "a_repl": np.array([e[2] for e in exps], np.uint32),
            "b_mask": np.array([e[3] for e in exps], np.uint32),
            "b_repl": np.array([e[4] for e in exps], np.uint32),
        }
        meta = {"variant": var["name"], "qualifiers": var["qualifiers"], "ptx_template": var["texts"],
                "experiments": [e[0] for e in exps], "probe_question": Q3,
                "fragment_regs": var["regs"], "fragment_words": var["words"]}
        jobs.append({"kind": "dup", "kernel": _cid("dup." + var["name"]), "out": "q3_fragment_copies",
                     "meta": meta, "gen": var, "arrays": arrays, "n_exp": nexp, "d_span": int(dspan)})
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 7 (follow-up of Q1/Q2): how an f16 result is rounded, and the sign of zero results
# ----------------------------------------------------------------------------------------------

Q7 = ("Q7 (follow-up of Q1/Q2): is an f16 D rounded once (to nearest even from the fused sum) or "
      "twice (toward zero to f32, then to nearest f16)?  Sign of zero results in the f16 mode and "
      "of underflowing f32 results of wmma")

# rows: (x, t, s): A[r,0]*B[0,c] = x (or C = x), A[r,1]*B[1,c] = t (half an f16 ulp of x),
# A[r,2]*B[2,c] = s * m_c  (m_c below): ties broken only by bits beyond f32 precision
_Q7_ROWS = [(1.0, 2.0**-11, 2.0**-12), (1.0 + 2.0**-10, 2.0**-11, 2.0**-12), (-1.0, -2.0**-11, -2.0**-12),
            (2.0**-4, 2.0**-15, 2.0**-16), (1.5, 2.0**-11, 2.0**-12), (-(1.0 + 2.0**-10), -2.0**-11, -2.0**-12),
            (2.0, 2.0**-10, 2.0**-11), (1.0, 2.0**-11, -2.0**-12)]
_Q7_COLS = [0.0, 2.0**-12, 2.0**-13, 1.5 * 2.0**-13, 2.0**-11, 2.0**-18, 2.0**-8, -2.0**-12]


def _q7_rounding(m, n, k, ct, through_c: bool):
    """Logical A (f16), B (f16), C (ct) bits: D[r,c] = x_r + t_r + s_r*m_c (+0 elsewhere)."""
    f = lambda x: value("f16", x)
    A = np.zeros((m, k), np.uint16)
    B = np.zeros((k, n), np.uint16)
    C = np.zeros((m, n), storage(ct))
    for r in range(m):
        x, t, s = _Q7_ROWS[r % 8]
        if through_c:
            C[r, :] = value(ct, x)
        else:
            A[r, 0] = f(x)
        A[r, 1] = f(t)
        A[r, 2] = f(s)
    for c in range(n):
        B[0, c] = f(1.0)
        B[1, c] = f(1.0)
        B[2, c] = f(_Q7_COLS[c % 8])
    return A, B, C


def _q7_zero_sign(m, n, k, ct):
    """C = +-2^-24 (by row parity), plus a product that leaves a sum below half of 2^-24, an
    exact tie, or an exact cancellation."""
    f = lambda x: value("f16", x)
    A = np.zeros((m, k), np.uint16)
    B = np.zeros((k, n), np.uint16)
    C = np.zeros((m, n), storage(ct))
    bs = [2.0**-13, 1.5 * 2.0**-13, 2.0**-14, 2.0**-12, 1.75 * 2.0**-13, 2.0**-20, 0.0, 1.25 * 2.0**-12]
    for r in range(m):
        sgn = -1.0 if r % 2 else 1.0
        C[r, :] = value(ct, sgn * 2.0**-24)
        A[r, 0] = f(-sgn * 2.0**-12)
    for c in range(n):
        B[0, c] = f(bs[c % 8])
    return A, B, C


def q7_jobs(rng):
    jobs = []
    lab_r = ("rounding: D[r,c] = x_r + t_r + s_r*m_c with x+t an exact f16 tie and s*m in "
             "{0, 2^-24, 2^-25, 1.5*2^-25, 2^-23, 2^-30, 2^-20, -2^-24} relative to x=1 (tools/record/probes.py _Q7_ROWS/_Q7_COLS)")
    lab_z = ("zero sign: C = +2^-24 (even rows) / -2^-24 (odd rows), A[r,0]*B[0,c] = -+2^-12 * "
             "{2^-13, 1.5*2^-13, 2^-14, 2^-12, 1.75*2^-13, 2^-20, 0, 1.25*2^-12}")
    for dt, ct in (("f16", "f32"), ("f16", "f16"), ("f32", "f32"), ("f32", "f16")):
        var = wmma_variant("m16n16k16", "row", "col", "row", "row", dt, ct, "f16")
        mats = [_q7_rounding(16, 16, 16, ct, False), _q7_rounding(16, 16, 16, ct, True),
                _q7_zero_sign(16, 16, 16, ct)]
        labels = [lab_r + ", x as a product", lab_r + ", x as C", lab_z]
        jobs.append(wmma_job(var, mats, f"q7_f16_rounding_zero_sign/{var['name']}.npz", Q7, rng, labels,
                             [6, 6, 6]))
    for dt in ("f16", "f32"):
        var = wgmma_variant(8, 16, dt, "f16", "f16", "desc", 0, 0, 1, 1)
        cases, labels = [], []
        for (A, B, C), lab in ((_q7_rounding(64, 8, 16, dt, False), lab_r + ", x as a product"),
                               (_q7_rounding(64, 8, 16, dt, True), lab_r + ", x as C"),
                               (_q7_zero_sign(64, 8, 16, dt), lab_z)):
            img, ad, bd, ar, cr = crafted_wgmma_case(var, A, B, C, "f16", "f16", dt)
            cases.append((img, ad, bd, ar, cr, 1))
            labels.append(lab)
        jobs.append(wgmma_job(var, cases, f"q7_f16_rounding_zero_sign/{var['name']}.npz", Q7, 0, labels,
                              [6] * len(cases)))
    # f32 underflow sign in wmma (bf16, tf32): products -+2^-150 and friends
    for atype, shape in (("bf16", "m16n16k16"), ("tf32", "m16n16k8")):
        var = wmma_variant(shape, "row", "col", "row", "row", "f32", "f32", atype)
        m, n, k = SHAPE_MNK[shape]
        st = storage(atype)
        LA = [2.0**-75, 2.0**-74, 2.0**-76, -2.0**-75, 1.5 * 2.0**-75, 2.0**-70, 2.0**-80, 2.0**-60,
              2.0**-66, 2.0**-84, -2.0**-72, 1.25 * 2.0**-74, 2.0**-90, 2.0**-64, -2.0**-77, 2.0**-75]
        LB = [-2.0**-75, 2.0**-75, -2.0**-76, -1.5 * 2.0**-75, -2.0**-80, -2.0**-70, 2.0**-80, -1.75 * 2.0**-85,
              -2.0**-74, -2.0**-95, -2.0**-99, 2.0**-90, -2.0**-60, -2.0**-66, -2.0**-88, -2.0**-75]
        mats, labels = [], []
        A = np.zeros((m, k), st)
        B = np.zeros((k, n), st)
        A[0, 0], B[0, 0] = value(atype, 2.0**-75), value(atype, -2.0**-75)
        mats.append((A, B, np.zeros((m, n), np.uint32)))
        labels.append("A[0,0]=2^-75, B[0,0]=-2^-75 (product -2^-150), rest 0, C=+0")
        A = np.zeros((m, k), st)
        B = np.zeros((k, n), st)
        A[:, 0] = [value(atype, x) for x in LA]
        B[0, :] = [value(atype, x) for x in LB]
        for cval, lab in ((0, "C=+0"), (0x80000000, "C=-0")):
            mats.append((A, B, np.full((m, n), cval, np.uint32)))
            labels.append("table A[r,0]*B[0,c], products 2^-120..2^-189, " + lab)
        jobs.append(wmma_job(var, mats, f"q7_f16_rounding_zero_sign/{var['name']}.npz", Q7, rng, labels,
                             [6] * len(mats)))
    return jobs


# ----------------------------------------------------------------------------------------------
# q8: a GEMM's k-loop, as fastmma.matmul computes it
# ----------------------------------------------------------------------------------------------

Q8_CHAIN = 16
Q8 = (f"a GEMM's k-loop: {Q8_CHAIN} wgmma.mma_async in one commit group accumulating into the same "
      "registers, stepping along K through A (64 x K) and B (K x N) as a kernel does; "
      "fastmma.matmul must give the recorded D")
#: (k, dtype, atype, btype, satfinite) of the recorded k-loops, all m64n64, A from descriptors
Q8_VARIANTS = [(16, "f32", "f16", "f16", False), (16, "f16", "f16", "f16", False),
               (16, "f32", "bf16", "bf16", False), (8, "f32", "tf32", "tf32", False),
               (32, "f32", "e4m3", "e4m3", False), (32, "f16", "e5m2", "e4m3", False),
               (32, "s32", "s8", "s8", False), (32, "s32", "s8", "s8", True), (32, "s32", "u8", "s8", False)]
Q8_ATOM = 128  # bytes of K per row of a 128B-swizzled K-block


def q8_variant(k, dtype, atype, btype, satfinite):
    var = wgmma_variant(64, k, dtype, atype, btype, "desc", satfinite=satfinite)
    var["name"] = var["name"].replace("wgmma.", f"wgmma.chain{Q8_CHAIN}.", 1)
    var["qualifiers"] = dict(var["qualifiers"], chain=Q8_CHAIN)
    return var


def q8_step_descriptor(region, rows, step, step_bytes=32):
    """The descriptor of k-step ``step`` of an operand of ``rows`` K-major rows: K-blocks of
    128 bytes per row, 128B swizzle, each block ``rows * 128`` bytes from ``region``; a step
    reads ``step_bytes`` of each row (32 for every dense type; 64 for a sparse B), so its start
    address moves that far inside the block, as CUTLASS's k-loop advances its descriptors."""
    kbyte = step_bytes * step
    start = region + (kbyte // Q8_ATOM) * rows * Q8_ATOM + kbyte % Q8_ATOM
    return MatrixDescriptor(start, 16, 8 * Q8_ATOM, 0, "128B").encode()


def q8_case(var, rng, mode, scale_d):
    q = var["qualifiers"]
    n, k, atype, btype, dtype = q["n"], q["k"], q["atype"], q["btype"], q["dtype"]
    K = k * Q8_CHAIN
    A = sample(rng, atype, (64, K), mode, "ab", dtype)
    Bt = sample(rng, btype, (n, K), mode, "ab", dtype)
    a_bytes = 64 * K * BITS[atype] // 8
    img = np.zeros(a_bytes + n * K * BITS[btype] // 8, np.uint8)
    a_desc, b_desc = [], []
    for j in range(Q8_CHAIN):
        a_desc.append(q8_step_descriptor(0, 64, j))
        b_desc.append(q8_step_descriptor(a_bytes, n, j))
        place(img, a_desc[-1], A[:, j * k:(j + 1) * k], atype, "K")
        place(img, b_desc[-1], Bt[:, j * k:(j + 1) * k], btype, "K")
    C = sample(rng, dtype, (64, n), mode, "c", dtype)
    if mode == 3 and atype not in ("s8", "u8"):
        C = _q8_cancel(A, Bt, atype, btype, dtype, rng)
    return img, a_desc, b_desc, np.zeros((128, 4), np.uint32), pack_d(C, dtype), scale_d


def _q8_cancel(A, Bt, atype, btype, dtype, rng):
    """C close to -(A.B) over the whole K: the f64 sum negated, a few ulps off in half (B
    given transposed, ``Bt``)."""
    from fastmma.formats import from_bits

    af = np.nan_to_num(from_bits(A, atype).astype(np.float64), nan=0, posinf=0, neginf=0)
    bf = np.nan_to_num(from_bits(Bt, btype).astype(np.float64), nan=0, posinf=0, neginf=0)
    dt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]
    with np.errstate(over="ignore"):
        bits = (-(af @ bf.T)).astype(dt).view(f"u{np.dtype(dt).itemsize}").astype(np.int64)
    bits = bits + np.where(rng.random(bits.shape) < 0.5, rng.integers(-3, 4, size=bits.shape), 0)
    return bits.astype(f"u{np.dtype(dt).itemsize}")


def q8_jobs(rng):
    jobs = []
    for spec in Q8_VARIANTS:
        var = q8_variant(*spec)
        atype = var["qualifiers"]["atype"]
        runs = [(0, 1), (0, 1), (5, 1), (5, 1), (0, 0)] if atype in ("s8", "u8") else \
            [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (0, 0)]
        cases, labels, modes = [], [], []
        for mode, sd in runs:
            cases.append(q8_case(var, rng, mode, sd))
            labels.append(f"k-loop of {Q8_CHAIN}, random mode {mode}, scale-d {sd}")
            modes.append(mode)
        jobs.append(wgmma_job(var, cases, f"q8_gemm_k_loop/{var['name']}.npz", Q8, 0, labels, modes))
    return jobs


# ----------------------------------------------------------------------------------------------
# q9: a wmma k-loop, as fastmma.matmul computes it
# ----------------------------------------------------------------------------------------------

Q9_CHAIN = 16
Q9 = (f"a wmma k-loop: {Q9_CHAIN} wmma.load.a/b and wmma.mma on one accumulator (C loaded once), "
      "stepping along K through a row-major A (M x K) and a column-major B (K x N); "
      "fastmma.matmul must give the stored D")
#: (shape, dtype = ctype, atype, rounding, satfinite) of the recorded k-loops
Q9_VARIANTS = [("m16n16k16", "f32", "f16", None, False), ("m16n16k16", "f16", "f16", None, False),
               ("m32n8k16", "f32", "f16", None, False), ("m16n16k16", "f32", "bf16", None, False),
               ("m16n16k8", "f32", "tf32", None, False)] + \
              [("m8n8k4", "f64", "f64", r, False) for r in ("rn", "rz", "rm", "rp")] + \
              [("m16n16k16", "s32", "s8", None, False), ("m16n16k16", "s32", "s8", None, True),
               ("m16n16k16", "s32", "u8", None, False)]


def q9_variant(shape, dtype, atype, rounding, satfinite):
    var = wmma_variant(shape, "row", "col", "row", "row", dtype, dtype, atype, rounding, satfinite)
    var["name"] = var["name"].replace("wmma.", f"wmma.chain{Q9_CHAIN}.", 1)
    var["qualifiers"] = dict(var["qualifiers"], chain=Q9_CHAIN)
    return var


def q9_jobs(rng):
    jobs = []
    for spec in Q9_VARIANTS:
        var = q9_variant(*spec)
        m, n, k = SHAPE_MNK[var["shape"]]
        T = var["types"]
        ints = T["a"] in ("s8", "u8")
        runs = [0, 0, 5, 5] if ints else [0, 1, 2, 3, 4, 5]
        mats = []
        for mode in runs:
            A = sample(rng, T["a"], (m, k * Q9_CHAIN), mode, "ab", T["d"])
            B = sample(rng, T["b"], (k * Q9_CHAIN, n), mode, "ab", T["d"])
            C = sample(rng, T["c"], (m, n), mode, "c", T["d"])
            if mode == 3 and not ints:
                C = _q8_cancel(A, B.T, T["a"], T["b"], T["c"], rng)
            mats.append((A, B, C))
        labels = [f"k-loop of {Q9_CHAIN}, random mode {mode}" for mode in runs]
        jobs.append(wmma_job(var, mats, f"q9_wmma_k_loop/{var['name']}.npz", Q9, rng, labels, runs))
    return jobs


def build_jobs(seed=20261122, only=None):
    """All jobs (``only``: keep those whose output path starts with one of these prefixes)."""
    rng = np.random.default_rng(seed)
    jobs = []
    jobs += q1_jobs(rng)
    jobs += q2_jobs(rng)
    jobs += q3_jobs(rng)
    jobs += q4_jobs(rng)
    jobs += q5_jobs(rng)
    jobs += q6_jobs(rng)
    jobs += q7_jobs(rng)
    jobs += q8_jobs(rng)
    jobs += q9_jobs(rng)
    from mma_probes import q10_jobs, q11_jobs, q12_jobs, q13_jobs, q14_jobs  # imports this module's helpers

    jobs += q10_jobs(rng)
    jobs += q11_jobs(rng)
    jobs += q12_jobs(rng)
    jobs += q13_jobs(rng)
    jobs += q14_jobs(rng)
    from sparse_probes import q15_jobs

    jobs += q15_jobs(rng)
    from wgmma_sp_probes import q16_jobs

    jobs += q16_jobs(rng)
    from sparse_probes import q17_jobs

    jobs += q17_jobs(rng)
    from wgmma_sp_probes import q18_jobs

    jobs += q18_jobs(rng)
    if only:
        jobs = [j for j in jobs if j["out"].startswith(tuple(only))]
    seen = {}
    for j in jobs:  # jobs may share a kernel (q5: same variant, image offset is a run-time value)
        assert seen.setdefault(j["kernel"], j["meta"]["variant"]) == j["meta"]["variant"]
    return jobs
