"""Question 16: the sparse warpgroup ``wgmma.mma_async.sp`` (PTX ISA 9.7.15.6) on sm_90a.

The ISA draws the metadata's bit positions only as figures, and says nothing of how a
descriptor lays out a B whose K extent (64 bytes for every type) is wider than a 32-byte
swizzle row.  Three kinds of jobs settle them and the numbers:

* **Metadata cases** (mode 6): every thread's metadata register holds random valid indices, B
  selects one k per column (``B[k, j] = 1`` for ``k = 8 s + j``), C is zero, and the compressed
  A (64 x K/2, in registers or through a descriptor) holds one base-7 digit of each element's
  own index ``r * K/2 + c`` (values 1..7, exact in every type).  ``D[i, j]`` is then the dense
  A's element ``(i, 8 s + j)``: over the ``K/8`` selections and four digits of a draw the whole
  dense A reads off, and with it which compressed element each metadata index put where.
* **B address cases** (mode 6): every element slot of the image holds a digit of its own
  element address; A keeps one element a row (``c = i mod K/2``) under one metadata nibble in
  every thread, so ``D[i, j]`` is the digit of the address B's element ``(k_i, j)`` was read
  from, for each swizzle and major-ness.
* **Number cases** (modes 0-2, 4, 5): random data, descriptors and valid metadata.

Compressed A is placed as a dense 64 x K/2 operand (registers by the dense A fragment map,
the image by the descriptor layout rule), B as an N x K operand; the recording holds the
image, descriptors and registers, so it stays valid whatever the maps turn out to be.
"""

from __future__ import annotations

import numpy as np

from fastmma.layout.descriptor import MatrixDescriptor
from fastmma.layout.wgmma_fragments import pack_a, pack_d

from probes import (BITS, Image, _canonical_desc, _chunks, _q8_cancel, place, q8_step_descriptor, wgmma_job,
                    wgmma_variant)
from samplers import sample, storage
from sparse_probes import ANY_PAIR, ORDERED, TF32_PAIRS, _dense_uniform, _ones, _small

Q16 = ("Q16: wgmma.mma_async.sp (PTX ISA 9.7.15.6) on sm_90a: which bits of which thread's metadata "
       "place each compressed A element, where a descriptor finds B's 64 bytes of K, and how the sparse "
       "products sum")

_INT8 = ("s8", "u8")
_FP8 = ("e4m3", "e5m2")
K_OF = {"f16": 32, "bf16": 32, "tf32": 16, "e4m3": 64, "e5m2": 64, "s8": 64, "u8": 64}
SELECTORS = {"f16": (0, 1), "bf16": (0, 1), "tf32": (0, 1)}


def sp_variant(n, dtype, atype, btype, a_source="desc", ta=0, tb=0, sa=1, sb=1, satfinite=False, selector=0,
               tag=""):
    k = K_OF[atype]
    var = wgmma_variant(n, k, dtype, atype, btype, a_source, ta, tb, sa, sb, satfinite)
    var["inst"] = var["inst"].replace("wgmma.mma_async.", "wgmma.mma_async.sp.", 1)
    var["name"] = var["name"].replace("wgmma.", "wgmma_sp.", 1) + f".sel{selector}{tag}"
    var["sparse"] = True
    var["selector"] = selector
    var["qualifiers"] = dict(var["qualifiers"], sparse="sp", selector=selector)
    var["ptx_template"] = [f"{var['inst']} {{D}}, A, B, E, {selector}, p{var['imm_text']};"]
    return var


def _nibbles(atype, unordered=False):
    if atype == "tf32":
        return TF32_PAIRS
    return ANY_PAIR if unordered else ORDERED


def _metadata(rng, atype, unordered=False):
    vals = np.array(_nibbles(atype, unordered), np.uint32)
    nib = vals[rng.integers(0, len(vals), size=(128, 8))]
    return (nib << (4 * np.arange(8, dtype=np.uint32))).sum(axis=-1, dtype=np.uint32)


def _uniform(v):
    return np.full(128, sum(v << (4 * i) for i in range(8)), np.uint32)


def _a_regs_of(A, atype):
    return pack_a(np.ascontiguousarray(A).astype(storage(atype)), atype)


def _desc_for(im, mn, k, t, major, swizzle, rng, base_offset=None):
    """A descriptor for an mn x k operand in a fresh region of the image; K-major swizzled
    operands wider than the swizzle row get their second atom column at LBO (the hypothesis
    the B address cases test)."""
    _, foot = _canonical_desc(mn, k, BITS[t], major, swizzle, 0)
    W = {"none": 16, "32B": 32, "64B": 64, "128B": 128}[swizzle]
    cols = max(1, k * BITS[t] // (8 * W)) if (major == "K" and swizzle != "none") else 1
    pad = int(rng.choice([0, 128, 256, 384])) if rng is not None else 0
    gap = int(rng.choice([0, 256, 1024])) if (rng is not None and cols > 1) else 0  # LBO beyond the footprint
    start = im.region(foot * cols + gap * (cols - 1) + pad + 256) + pad
    desc, _ = _canonical_desc(mn, k, BITS[t], major, swizzle, start, rng, 0)
    d = MatrixDescriptor.decode(desc)
    if major == "K" and swizzle != "none":
        lbo = foot + gap if cols > 1 else 16 * int(rng.integers(1, 64)) if rng is not None else 16
        bo = int(rng.integers(0, 8)) if (rng is not None and base_offset is None) else (base_offset or 0)
        d = MatrixDescriptor(d.start_address, lbo, d.stride_byte_offset, bo, swizzle)
    elif swizzle != "none":
        bo = int(rng.integers(0, 8)) if (rng is not None and base_offset is None) else (base_offset or 0)
        d = MatrixDescriptor(d.start_address, d.leading_byte_offset, d.stride_byte_offset, bo, swizzle)
    return d.encode()


def _case(var, A=None, B=None, C=None, e=None, scale_d=1, swz=("none", "none"), rng=None, mode=0,
          fill_image=None):
    """(img, a_desc, b_desc, a_regs, c_regs, scale_d, e_regs) for logical compressed A (64 x K/2),
    B (K x N) and C (64 x N) raw bits; None: random samples of ``mode`` over what is read."""
    q = var["qualifiers"]
    n, k, at, bt, dt = q["n"], q["k"], q["atype"], q["btype"], q["dtype"]
    im = Image()
    a_desc = 0
    if q["a_source"] == "desc":
        a_desc = _desc_for(im, 64, k // 2, at, "MN" if q["imm_trans_a"] else "K", swz[0], rng)
    b_desc = _desc_for(im, n, k, bt, "MN" if q["imm_trans_b"] else "K", swz[1], rng)
    img = np.zeros(im.top + 1024, np.uint8)
    if fill_image is not None:
        img[:] = fill_image(img.size)
    for x, desc, mn, kk, t, trans, mat in (("a", a_desc, 64, k // 2, at, q["imm_trans_a"], A),
                                           ("b", b_desc, n, k, bt, q["imm_trans_b"], B)):
        if x == "a" and q["a_source"] != "desc":
            continue
        major = "MN" if trans else "K"
        if fill_image is not None:  # the image's own fill is the operand
            continue
        if mat is None:
            chunks = _chunks(desc, mn, kk, BITS[t], major, [0])
            vals = sample(rng, t, (len(chunks) * (128 // BITS[t]),), mode, "ab", dt)
            img.reshape(-1, 16)[chunks] = vals.view(np.uint8).reshape(-1, 16)
        else:
            place(img, desc, np.ascontiguousarray(mat if x == "a" else mat.T), t, major)
    if q["a_source"] == "reg":
        if A is None:
            A = sample(rng, at, (64, k // 2), mode, "ab", dt)
        a_regs = _a_regs_of(A, at)
    else:
        a_regs = np.zeros((128, 4), np.uint32)
    if C is None:
        C = sample(rng, dt, (64, n), mode, "c", dt)
    c_regs = pack_d(np.asarray(C).astype(storage(dt)), dt)
    return img, a_desc, b_desc, a_regs, c_regs, scale_d, e


def sp_job(var, cases, out, labels, modes, question=Q16):
    """A wgmma job (:func:`probes.wgmma_job`) of kind ``wgmma_sp``, each case's metadata in ``e_regs``
    (a chain's: one register file a step along the second axis)."""
    job = wgmma_job(var, [c[:6] for c in cases], out, question, labels=labels, modes=modes)
    job["arrays"]["e_regs"] = np.stack([c[6] for c in cases]).astype(np.uint32)[..., None]
    job["kind"] = "wgmma_sp"
    return job


def metadata_job(var, rng, swizzles=("none",), unordered=False, draws=1):
    q = var["qualifiers"]
    n, k, at, bt = q["n"], q["k"], q["atype"], q["btype"]
    kc = k // 2
    index = np.arange(64 * kc).reshape(64, kc)
    cases, labels = [], []
    for draw in range(draws):
        e = _metadata(rng, at, unordered)
        swz = swizzles[draw % len(swizzles)]
        for s in range(k // 8):
            B = np.zeros((k, n), np.int64)
            B[8 * s + np.arange(8), np.arange(8)] = _ones(bt)
            for digit in range(4):
                vals = (index // 7 ** digit) % 7 + 1
                A = np.vectorize(lambda v: _small(at, int(v)))(vals)
                cases.append(_case(var, A.astype(storage(at)), B.astype(storage(bt)), np.zeros((64, n), np.int64),
                                   e, 1, (swz, "none"), rng))
                labels.append(f"draw {draw} (A swizzle {swz}): B selects k = {8 * s}..{8 * s + 7} in columns 0..7; "
                              f"A holds digit {digit} (base 7, plus 1) of its element's index r * {kc} + c")
    return sp_job(var, cases, f"q16_wgmma_sp/metadata/{var['name']}.npz", labels, [6] * len(cases))


def _address_digits(t, digit):
    """A fill of the image whose every element slot of type ``t`` holds digit ``digit`` of its
    element address (f16 and tf32: base 1024, plus 1; 8-bit: base 256)."""
    bits = BITS[t]
    nb = bits // 8
    base = 256 if nb == 1 else 1024

    def fill(size):
        addr = np.arange(size // nb)
        v = (addr // base ** digit) % base + (0 if nb == 1 else 1)
        if t == "f16":
            w = np.asarray(v, np.float32).astype(np.float16).view(np.uint16)
        elif t == "tf32":
            w = np.asarray(v, np.float32).view(np.uint32)
        else:
            w = v.astype(np.uint8)
        return w.view(np.uint8)
    return fill


def b_address_job(var, rng, swizzles):
    q = var["qualifiers"]
    n, k, at, bt = q["n"], q["k"], q["atype"], q["btype"]
    kc = k // 2
    A = np.zeros((64, kc), np.int64)
    A[np.arange(64), np.arange(64) % kc] = _ones(at)
    nibbles = (0x4, 0xE)
    cases, labels = [], []
    for swz in swizzles:
        for v in nibbles:
            for digit in (0, 1):
                cases.append(_case(var, A.astype(storage(at)), None, np.zeros((64, n), np.int64), _uniform(v), 1,
                                   ("none", swz), rng, fill_image=_address_digits(bt, digit)))
                labels.append(f"B swizzle {swz}; every metadata nibble 0x{v:X}; row i keeps compressed element "
                              f"i mod {kc}; every image slot holds digit {digit} of its element address")
    return sp_job(var, cases, f"q16_wgmma_sp/b_address/{var['name']}.npz", labels, [6] * len(cases))


def number_job(var, rng, modes, per_mode, unordered=False):
    cases, mode_list = [], []
    at = var["qualifiers"]["atype"]
    for mode in modes:
        for _ in range(per_mode):
            swz = tuple(str(rng.choice(["none", "32B", "64B", "128B"])) for _ in range(2))
            sd = int(rng.random() < 0.85)
            cases.append(_case(var, e=_metadata(rng, at, unordered), scale_d=sd, swz=swz, rng=rng, mode=mode))
            mode_list.append(mode)
    return sp_job(var, cases, f"q16_wgmma_sp/{var['name']}.npz", [""] * len(cases), mode_list)


SWIZZLES = ("none", "32B", "64B", "128B")


def q16_jobs(rng):
    jobs = []
    # metadata map: every selector, A from registers and through descriptors of each swizzle
    for at, d in (("f16", "f32"), ("bf16", "f32"), ("tf32", "f32"), ("e4m3", "f32"), ("s8", "s32")):
        for sel in SELECTORS.get(at, (0,)):
            for src in ("reg", "desc"):
                var = sp_variant(8, d, at, at, src, selector=sel)
                jobs.append(metadata_job(var, rng, SWIZZLES if src == "desc" else ("none",),
                                         draws=4 if src == "desc" else 1))
    for at, d in (("f16", "f32"), ("e4m3", "f32"), ("s8", "s32")):  # indices in either order
        jobs.append(metadata_job(sp_variant(8, d, at, at, "reg", tag=".unordered"), rng, unordered=True))
    jobs.append(metadata_job(sp_variant(8, "f32", "f16", "f16", "desc", ta=1, tag=".mnA"), rng, SWIZZLES, draws=4))
    # B's 64 bytes of K under each swizzle, K-major and (16-bit types) MN-major
    for at, d, tb in (("f16", "f32", 0), ("f16", "f32", 1), ("tf32", "f32", 0), ("u8", "s32", 0)):
        jobs.append(b_address_job(sp_variant(16, d, at, at, "reg", tb=tb, tag=".baddr"), rng, SWIZZLES))
    # numbers
    forms = [("f16", "f16", "f32"), ("f16", "f16", "f16"), ("bf16", "bf16", "f32"), ("tf32", "tf32", "f32")]
    forms += [(a, b, d) for a in _FP8 for b in _FP8 for d in ("f32", "f16")]
    for a, b, d in forms:
        for sel in SELECTORS.get(a, (0,)):
            n = int(rng.choice([8, 16, 24, 32, 64, 128, 256]))
            src = str(rng.choice(["reg", "desc"]))
            is16 = a in ("f16", "bf16")
            ta = int(rng.integers(0, 2)) if (is16 and src == "desc") else 0
            tb = int(rng.integers(0, 2)) if is16 else 0
            sa, sb = (int(rng.choice([1, -1])) for _ in range(2))
            jobs.append(number_job(sp_variant(n, d, a, b, src, ta, tb, sa, sb, selector=sel), rng, (0, 1, 2, 4, 5), 3))
    for a in _INT8:
        for b in _INT8:
            for sat in (False, True):
                n = int(rng.choice([8, 16, 24, 32, 48, 64, 128, 224]))
                src = str(rng.choice(["reg", "desc"]))
                jobs.append(number_job(sp_variant(n, "s32", a, b, src, satfinite=sat), rng, (0, 5), 6))
    for a, d in (("f16", "f32"), ("e4m3", "f32"), ("s8", "s32")):
        jobs.append(number_job(sp_variant(32, d, a, a, "desc", tag=".unordered"), rng, (0, 1), 3, unordered=True))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 18: a warpgroup's k-loop of wgmma.mma_async.sp
# ----------------------------------------------------------------------------------------------

Q18_CHAIN = 8
Q18 = (f"Q18: a sparse GEMM's k-loop: {Q18_CHAIN} wgmma.mma_async.sp in one commit group accumulating into "
       "the same registers, stepping along K through a compressed A (64 x K/2) and B (K x N) as a kernel "
       "does, each step with its own metadata: fastmma.matmul_sp must give the recorded D")
#: (dtype, atype, btype, satfinite) of the recorded k-loops, all m64n64, A from descriptors
Q18_FORMS = (("f32", "f16", "f16", False), ("f16", "f16", "f16", False), ("f32", "bf16", "bf16", False),
             ("f32", "tf32", "tf32", False), ("f32", "e4m3", "e5m2", False), ("f16", "e5m2", "e4m3", False),
             ("s32", "s8", "u8", True), ("s32", "u8", "s8", False))


def q18_variant(dtype, atype, btype, satfinite):
    var = sp_variant(64, dtype, atype, btype, "desc", satfinite=satfinite)
    var["name"] = var["name"].replace("wgmma_sp.", f"wgmma_sp.chain{Q18_CHAIN}.", 1)
    var["qualifiers"] = dict(var["qualifiers"], chain=Q18_CHAIN)
    return var


def q18_case(var, rng, mode, scale_d):
    """A compressed A (64 x chain*K/2) and B (chain*K x 64) in 128B-swizzled K-blocks, step ``j``
    reading 32 bytes of each A row and 64 of each B row from ``j`` steps in
    (:func:`probes.q8_step_descriptor`), and a metadata register file a step.  Mode 3 gives every
    nibble the same index pair, so that C can be drawn close to -(A.B)."""
    q = var["qualifiers"]
    n, k, at, bt, dt = q["n"], q["k"], q["atype"], q["btype"], q["dtype"]
    K = k * Q18_CHAIN
    A = sample(rng, at, (64, K // 2), mode, "ab", dt)
    Bt = sample(rng, bt, (n, K), mode, "ab", dt)
    a_bytes = 64 * K // 2 * BITS[at] // 8
    img = np.zeros(a_bytes + n * K * BITS[bt] // 8, np.uint8)
    a_desc, b_desc = [], []
    for j in range(Q18_CHAIN):
        a_desc.append(q8_step_descriptor(0, 64, j))
        b_desc.append(q8_step_descriptor(a_bytes, n, j, step_bytes=64))
        place(img, a_desc[-1], A[:, j * k // 2:(j + 1) * k // 2], at, "K")
        place(img, b_desc[-1], Bt[:, j * k:(j + 1) * k], bt, "K")
    C = sample(rng, dt, (64, n), mode, "c", dt)
    if mode == 3 and at not in _INT8:
        v = int(rng.choice(_nibbles(at)))
        e = np.repeat(_uniform(v)[None], Q18_CHAIN, axis=0)
        C = _q8_cancel(_dense_uniform(A, v, at, K), Bt, at, bt, dt, rng)
    else:
        e = np.stack([_metadata(rng, at) for _ in range(Q18_CHAIN)])
    return img, a_desc, b_desc, np.zeros((128, 4), np.uint32), pack_d(np.asarray(C).astype(storage(dt)), dt), \
        scale_d, e


def q18_jobs(rng):
    jobs = []
    for form in Q18_FORMS:
        var = q18_variant(*form)
        ints = var["qualifiers"]["atype"] in _INT8
        runs = [(0, 1), (0, 1), (5, 1), (5, 1), (0, 0)] if ints else \
            [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (0, 0)]
        cases = [q18_case(var, rng, mode, sd) for mode, sd in runs]
        labels = [f"k-loop of {Q18_CHAIN}, random mode {mode}, scale-d {sd}" for mode, sd in runs]
        jobs.append(sp_job(var, cases, f"q18_wgmma_sp_k_loop/{var['name']}.npz", labels, [m for m, _ in runs],
                           Q18))
    return jobs
