"""Question 15: the sparse warp-level ``mma.sp`` / ``mma.sp::ordered_metadata`` (PTX ISA 9.7.14.6)
on sm_90a.

The ISA gives the metadata's bit positions only as figures.  Two kinds of jobs settle them and
the numbers:

* **Layout cases** (mode 6): every lane's metadata register holds random valid indices, B
  selects one k per column (``B[k, j] = 1`` for ``k = 8 s + j``, case ``s`` of the selection),
  C is zero, and the compressed A holds one base-7 digit of each element's own index ``r *
  K/2 + c`` (values 1..7, exact in every type).  ``D[i, j]`` is then the dense A's element
  ``(i, 8 s + j)``: over the ``K/8`` selections and four digits of one draw the whole dense A
  reads off, and with it which compressed element each metadata index put where.  Every
  sparsity selector the ISA allows has its own variant.
* **Number cases** (modes 0-5): random compressed A, B and C for the mode and random valid
  metadata in every lane.  Mode 3 (C close to -(A.B)) gives every nibble of every lane the
  same index pair, so that the dense A is known without the metadata map.

The compressed A and the B are placed by the ``mma`` fragment formula (compressed A as an
M x K/2 matrix, B as K x N); the recording holds the registers, so it stays valid whatever the
map.
"""

from __future__ import annotations

import numpy as np

from fastmma.layout.mma_fragments import _build

from probes import _cid
from samplers import sample, storage
from mma_probes import _cancel_c

Q15 = ("Q15: mma.sp / mma.sp::ordered_metadata (PTX ISA 9.7.14.6) on sm_90a: which bits of which lane's "
       "metadata place each compressed A element, and how the sparse products sum")

_INT8 = ("s8", "u8")
_INT4 = ("s4", "u4")
_FP8 = ("e4m3", "e5m2")
ORDERED = (0x4, 0x8, 0x9, 0xC, 0xD, 0xE)  #: idx0 < idx1 (low two bits idx0)
ANY_PAIR = tuple(v for v in range(16) if v & 3 != v >> 2)
TF32_PAIRS = (0x4, 0xE)


def sparse_variant(shape, dtype, atype, btype, ctype, extra="", selector=0, spvariant="sp::ordered_metadata",
                   tag="", chain=1):
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    inst = f"mma.{spvariant}.sync.aligned.{shape}.row.col"
    inst += ".satfinite" if extra == "satfinite" else ""
    inst += f".{dtype}.{atype}.{btype}.{ctype}"
    sp = "sp_ordered" if spvariant.endswith("ordered_metadata") else "sp"
    name = f"mma.{sp}{f'.chain{chain}' if chain > 1 else ''}.{shape}.row.col.{dtype}.{atype}.{btype}.{ctype}"
    name += f".{extra}" if extra else ""
    name += f".sel{selector}{tag}"
    types = {"a": atype, "b": btype, "c": ctype, "d": dtype}
    layouts = {x: _build(x, shape, t, True) for x, t in types.items()}
    words = {x: lay.words for x, lay in layouts.items()}
    q = {"alayout": "row", "atype": atype, "blayout": "col", "btype": btype, "ctype": ctype, "dtype": dtype,
         "k": k, "m": m, "n": n, "op": None, "rounding": None, "satfinite": extra == "satfinite", "shape": shape,
         "chain": chain, "sparse": spvariant, "selector": selector}
    return {"name": name, "qualifiers": q, "inst": inst, "regs": dict(words), "words": words, "types": types,
            "shape": shape, "selector": selector, "layouts": layouts,
            "ptx_template": [f"{inst} D, A, B, C, E, {selector};"]}


def _nibble_values(var, unordered=False):
    if var["types"]["a"] == "tf32":
        return TF32_PAIRS
    return ANY_PAIR if unordered else ORDERED


def _metadata(rng, var, cases, unordered=False):
    vals = np.array(_nibble_values(var, unordered), np.uint32)
    nib = vals[rng.integers(0, len(vals), size=(cases, 32, 8))]
    return (nib << (4 * np.arange(8, dtype=np.uint32))).sum(axis=-1, dtype=np.uint32)[..., None]


def _uniform_metadata(rng, var):
    vals = _nibble_values(var)
    v = np.uint32(vals[rng.integers(0, len(vals))])
    word = np.uint32(sum(int(v) << (4 * i) for i in range(8)))
    return np.full((32, 1), word, np.uint32), int(v)


def _dense_uniform(Ac, v, atype, k):
    """The dense A of a compressed A whose every nibble is ``v`` (4:8 pairs for 4-bit types,
    1:2 for tf32)."""
    m = Ac.shape[0]
    dense = np.zeros((m, k), Ac.dtype)
    if atype == "tf32":
        pos = 0 if v == 0x4 else 1
        dense[:, pos::2] = Ac
        return dense
    i0, i1 = v & 3, v >> 2
    if atype in _INT4:
        for q in range(k // 8):
            dense[:, 8 * q + 2 * i0:8 * q + 2 * i0 + 2] = Ac[:, 4 * q:4 * q + 2]
            dense[:, 8 * q + 2 * i1:8 * q + 2 * i1 + 2] = Ac[:, 4 * q + 2:4 * q + 4]
        return dense
    dense[:, i0::4] = Ac[:, 0::2]
    dense[:, i1::4] = Ac[:, 1::2]
    return dense


def _pack(bits, lay):
    from fastmma.layout.wmma_fragments import pack_fragment

    return pack_fragment(np.ascontiguousarray(bits), lay)


def _job(var, regs, e, mode_list, labels, out, question=None):
    n = len(mode_list)
    arrays = {f"{x}_regs": np.stack(regs[x]).astype(np.uint32) for x in "abc"}
    arrays["e_regs"] = np.stack(e).astype(np.uint32)
    arrays["mode"] = np.array(mode_list, np.uint8)
    meta = {
        "variant": var["name"], "qualifiers": var["qualifiers"], "ptx_template": var["ptx_template"],
        "split": "probe", "heldout_only_variant": True, "case_index": list(range(n)), "n_cases": n,
        "target": "sm_90a", "fragment_regs": var["regs"], "fragment_words": var["words"],
        "probe_question": question or Q15, "case_labels": labels,
    }
    gen = {k: v for k, v in var.items() if k != "layouts"}
    return {"kind": "mma_sp", "kernel": _cid(var["name"]), "out": out, "meta": meta, "gen": gen, "arrays": arrays}


def _ones(t):
    """The bits of 1 in type ``t``."""
    return {"f16": 0x3C00, "bf16": 0x3F80, "tf32": 0x3F800000, "e4m3": 0x38, "e5m2": 0x3C}.get(t, 1)


def _small(t, v):
    """The bits of the small integer ``v`` (1..7) in type ``t``."""
    if t in _INT8 + _INT4:
        return v
    f = np.float32(v)
    if t == "f16":
        return int(np.float16(f).view(np.uint16))
    if t in ("bf16",):
        return int(f.view(np.uint32)) >> 16
    if t == "tf32":
        return int(f.view(np.uint32))
    import ml_dtypes

    return int(np.array(f, dtype={"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[t]).view(np.uint8))


def layout_job(var, rng, draws=2, unordered=False):
    """Layout cases (module docstring): per draw, ``K/8`` selections x 4 base-7 digits."""
    q, T, L = var["qualifiers"], var["types"], var["layouts"]
    m, n, k = q["m"], q["n"], q["k"]
    kc = k // 2
    index = np.arange(m * kc).reshape(m, kc)
    st = {x: storage(T[x]) for x in "abc"}
    regs, e, modes, labels = {x: [] for x in "abc"}, [], [], []
    zero_c = np.zeros((m, n), st["c"])
    for draw in range(draws):
        meta = _metadata(rng, var, 1, unordered)[0]
        for s in range(k // 8):
            B = np.zeros((k, n), np.int64)
            B[8 * s + np.arange(n), np.arange(n)] = _ones(T["b"])
            for digit in range(4):
                vals = (index // 7 ** digit) % 7 + 1
                A = np.vectorize(lambda v: _small(T["a"], int(v)))(vals)
                regs["a"].append(_pack(A.astype(st["a"]), L["a"]))
                regs["b"].append(_pack(B.astype(st["b"]), L["b"]))
                regs["c"].append(_pack(zero_c, L["c"]))
                e.append(meta)
                modes.append(6)
                labels.append(f"draw {draw}: B selects k = {8 * s}..{8 * s + n - 1}; A holds digit {digit} "
                              f"(base 7, plus 1) of its element's index r * {kc} + c")
    return _job(var, regs, e, modes, labels, f"q15_mma_sp/layout/{var['name']}.npz")


def number_job(var, rng, modes, per_mode, unordered=False):
    q, T, L = var["qualifiers"], var["types"], var["layouts"]
    m, n, k = q["m"], q["n"], q["k"]
    regs, e, mode_list = {x: [] for x in "abc"}, [], []
    for mode in modes:
        for _ in range(per_mode):
            A = sample(rng, T["a"], (m, k // 2), mode, "ab", T["d"])
            B = sample(rng, T["b"], (k, n), mode, "ab", T["d"])
            C = sample(rng, T["c"], (m, n), mode, "c", T["d"])
            if mode == 3 and T["a"] not in _INT8 + _INT4:
                meta, v = _uniform_metadata(rng, var)
                C = _cancel_c(_dense_uniform(A, v, T["a"], k), B, T, rng)
            else:
                meta = _metadata(rng, var, 1, unordered)[0]
            for x, mat in zip("abc", (A, B, C)):
                regs[x].append(_pack(np.asarray(mat).astype(storage(T[x])), L[x]))
            e.append(meta)
            mode_list.append(mode)
    return _job(var, regs, e, mode_list, [""] * len(mode_list), f"q15_mma_sp/{var['name']}.npz")


def sparse_forms():
    """(shape, dtype, atype, btype, ctype, extra) of every mma.sp form ptxas (CUDA 13.0) takes
    for sm_90a: f16 with D and C both f16 or both f32; fp8 with an f32 D only."""
    forms = [(s, d, "f16", "f16", d, "") for s in ("m16n8k16", "m16n8k32") for d in ("f32", "f16")]
    forms += [(s, "f32", "bf16", "bf16", "f32", "") for s in ("m16n8k16", "m16n8k32")]
    forms += [(s, "f32", "tf32", "tf32", "f32", "") for s in ("m16n8k8", "m16n8k16")]
    forms += [("m16n8k64", "f32", a, b, "f32", "") for a in _FP8 for b in _FP8]
    for shapes, types in ((("m16n8k32", "m16n8k64"), _INT8), (("m16n8k64", "m16n8k128"), _INT4)):
        forms += [(s, "s32", a, b, "s32", sat) for s in shapes for a in types for b in types
                  for sat in ("", "satfinite")]
    return forms


#: (shape, atype, selectors) of the layout cases: every selector the ISA allows
LAYOUT_FORMS = (
    ("m16n8k16", "f16", (0, 1, 2, 3)), ("m16n8k32", "f16", (0, 1)), ("m16n8k32", "bf16", (0,)),
    ("m16n8k8", "tf32", (0, 1, 2, 3)), ("m16n8k16", "tf32", (0, 1)),
    ("m16n8k32", "s8", (0, 1)), ("m16n8k64", "s8", (0,)),
    ("m16n8k64", "s4", (0, 1)), ("m16n8k128", "s4", (0,)), ("m16n8k64", "e4m3", (0,)),
)


def q15_jobs(rng):
    jobs = []
    for shape, a, sels in LAYOUT_FORMS:
        d = "s32" if a in _INT8 + _INT4 else "f32"
        for sel in sels:
            jobs.append(layout_job(sparse_variant(shape, d, a, a, d, selector=sel), rng))
    # plain .sp with indices in either order
    for shape, a in (("m16n8k32", "f16"), ("m16n8k64", "s4")):
        d = "s32" if a in _INT4 else "f32"
        jobs.append(layout_job(sparse_variant(shape, d, a, a, d, spvariant="sp", tag=".unordered"), rng,
                               unordered=True))
    for form in sparse_forms():
        var = sparse_variant(*form)
        a = var["types"]["a"]
        modes, per = ((0, 5), 8) if a in _INT8 + _INT4 else ((0, 1, 2, 3, 4, 5), 4)
        jobs.append(number_job(var, rng, modes, per))
    for form in (("m16n8k32", "f32", "f16", "f16", "f32", ""), ("m16n8k16", "f32", "tf32", "tf32", "f32", ""),
                 ("m16n8k32", "s32", "s8", "u8", "s32", "satfinite")):
        var = sparse_variant(*form, spvariant="sp", tag=".unordered")
        a = var["types"]["a"]
        modes, per = ((0, 5), 8) if a in _INT8 else ((0, 1, 2, 4, 5), 4)
        jobs.append(number_job(var, rng, modes, per, unordered=True))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 17: a warp's k-loop of mma.sp
# ----------------------------------------------------------------------------------------------

Q17 = ("Q17: a warp's k-loop of 16 mma.sp (each step's D the next one's C, each step its own "
       "metadata): does a loop of the sparse instruction compute what one instruction after another "
       "computes, as a structured-sparse GEMM's k-loop would issue it?")
Q17_CHAIN = 16

#: the k-loops of q17: (shape, dtype, atype, btype, ctype, extra, spvariant)
Q17_FORMS = (
    ("m16n8k32", "f32", "f16", "f16", "f32", "", "sp::ordered_metadata"),
    ("m16n8k32", "f16", "f16", "f16", "f16", "", "sp::ordered_metadata"),
    ("m16n8k16", "f32", "bf16", "bf16", "f32", "", "sp::ordered_metadata"),
    ("m16n8k16", "f32", "tf32", "tf32", "f32", "", "sp::ordered_metadata"),
    ("m16n8k64", "f32", "e4m3", "e5m2", "f32", "", "sp::ordered_metadata"),
    ("m16n8k32", "f32", "f16", "f16", "f32", "", "sp"),
    ("m16n8k64", "s32", "s8", "u8", "s32", "satfinite", "sp::ordered_metadata"),
    ("m16n8k32", "s32", "u8", "s8", "s32", "", "sp::ordered_metadata"),
    ("m16n8k128", "s32", "s4", "u4", "s32", "satfinite", "sp::ordered_metadata"),
)


def chain_job(var, rng, modes, per_mode, unordered=False):
    """Number cases of a k-loop: the compressed A (M x chain*K/2) and B (chain*K x N) drawn
    whole, step ``j`` taking the columns (rows) from ``j*K/2`` (``j*K``) on and metadata of its
    own: ``a_regs[i, j]``, ``b_regs[i, j]``, ``e_regs[i, j]``.  Mode 3 gives every nibble of
    every step the same index pair, so that C can be drawn close to -(A.B)."""
    q, T, L = var["qualifiers"], var["types"], var["layouts"]
    m, n, k, chain = q["m"], q["n"], q["k"], q["chain"]
    regs, e, mode_list = {x: [] for x in "abc"}, [], []
    for mode in modes:
        for _ in range(per_mode):
            A = sample(rng, T["a"], (m, chain * k // 2), mode, "ab", T["d"])
            B = sample(rng, T["b"], (chain * k, n), mode, "ab", T["d"])
            C = sample(rng, T["c"], (m, n), mode, "c", T["d"])
            if mode == 3 and T["a"] not in _INT8 + _INT4:
                word, v = _uniform_metadata(rng, var)
                meta = np.repeat(word[None], chain, axis=0)
                C = _cancel_c(_dense_uniform(A, v, T["a"], chain * k), B, T, rng)
            else:
                meta = _metadata(rng, var, chain, unordered)
            steps = {"a": [A[:, j * k // 2:(j + 1) * k // 2] for j in range(chain)],
                     "b": [B[j * k:(j + 1) * k] for j in range(chain)]}
            for x in "ab":
                regs[x].append(np.stack([_pack(np.asarray(t).astype(storage(T[x])), L[x]) for t in steps[x]]))
            regs["c"].append(_pack(np.asarray(C).astype(storage(T["c"])), L["c"]))
            e.append(meta)
            mode_list.append(mode)
    labels = [f"k-loop of {chain}, random mode {mode}" for mode in mode_list]
    return _job(var, regs, e, mode_list, labels, f"q17_mma_sp_k_loop/{var['name']}.npz", Q17)


def q17_jobs(rng):
    jobs = []
    for *form, spvariant in Q17_FORMS:
        unordered = spvariant == "sp"
        var = sparse_variant(*form, spvariant=spvariant, tag=".unordered" if unordered else "", chain=Q17_CHAIN)
        a = var["types"]["a"]
        modes, per = ((0, 5), 4) if a in _INT8 + _INT4 else ((0, 1, 2, 3, 4, 5), 2)
        jobs.append(chain_job(var, rng, modes, per, unordered))
    return jobs
