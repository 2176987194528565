"""Question 10: the warp-level ``mma.sync`` (PTX ISA 9.7.14.5) on sm_90a, every form ptxas takes.

Each job is one variant: random logical A, B and C for the FORMAT modes, placed in each lane's
registers by the ISA's fragment maps (``fastmma.layout.mma_fragments``), one warp a case.  The
kernel loads the registers, issues the one ``mma.sync`` and writes D's registers out; what the
hardware computed from those registers is the recording (FORMAT.md, "mma files").
"""

from __future__ import annotations

import numpy as np

from fastmma.formats import from_bits
from fastmma.layout.mma_fragments import QUAD_PAIRS, fragment_layout, quad_pair_layout
from fastmma.layout.wmma_fragments import pack_fragment

from probes import _cid, _heldout
from samplers import sample, storage

Q10 = ("Q10: mma.sync (warp-level mma, PTX ISA 9.7.14.5) on sm_90a: the accumulation of every "
       "shape and type, against the ISA's fragment maps")

_FP8 = ("e4m3", "e5m2")
_INT8 = ("s8", "u8")
_INT4 = ("s4", "u4")


def mma_forms():
    """(shape, dtype, atype, btype, ctype, extra) of every form ptxas (CUDA 13.0) takes for
    sm_90a, less ``m8n8k4`` .f16 (four quad-pair products) and the sparse forms."""
    forms = [(s, d, "f16", "f16", d, "") for s in ("m16n8k8", "m16n8k16") for d in ("f16", "f32")]
    forms += [(s, "f32", "bf16", "bf16", "f32", "") for s in ("m16n8k8", "m16n8k16")]
    forms += [(s, "f32", "tf32", "tf32", "f32", "") for s in ("m16n8k4", "m16n8k8")]
    forms += [(s, d, a, b, d, "") for s in ("m16n8k16", "m16n8k32") for d in ("f32", "f16")
              for a in _FP8 for b in _FP8]
    forms += [(s, "f64", "f64", "f64", "f64", "rn") for s in ("m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16")]
    for shapes, types in ((("m8n8k16", "m16n8k16", "m16n8k32"), _INT8), (("m8n8k32", "m16n8k32", "m16n8k64"), _INT4)):
        forms += [(s, "s32", a, b, "s32", sat) for s in shapes for a in types for b in types
                  for sat in ("", "satfinite")]
    forms += [(s, "s32", "b1", "b1", "s32", op) for s in ("m8n8k128", "m16n8k128", "m16n8k256")
              for op in ("xor", "and")]
    return forms


def mma_variant(shape, dtype, atype, btype, ctype, extra="", chain=1):
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    op = extra if extra in ("and", "xor") else None
    inst = f"mma.sync.aligned.{shape}.row.col"
    inst += ".rn" if extra == "rn" else ""
    inst += ".satfinite" if extra == "satfinite" else ""
    inst += f".{dtype}.{atype}.{btype}.{ctype}"
    inst += f".{op}.popc" if op else ""
    name = f"mma{f'.chain{chain}' if chain > 1 else ''}.{shape}.row.col.{dtype}.{atype}.{btype}.{ctype}"
    name += f".{extra}" if extra else ""
    name += ".popc" if op else ""
    types = {"a": atype, "b": btype, "c": ctype, "d": dtype}
    layouts = {x: fragment_layout(x, shape, t) for x, t in types.items()}
    words = {x: lay.words for x, lay in layouts.items()}
    regs = {x: w // (2 if types[x] == "f64" else 1) for x, w in words.items()}
    q = {"alayout": "row", "atype": atype, "blayout": "col", "btype": btype, "ctype": ctype, "dtype": dtype,
         "k": k, "m": m, "n": n, "op": op, "rounding": "rn" if extra == "rn" else None,
         "satfinite": extra == "satfinite", "shape": shape, "chain": chain}
    return {"name": name, "qualifiers": q, "inst": inst, "regs": regs, "words": words, "types": types,
            "shape": shape, "ptx_template": [f"{inst} D, A, B, C;"]}


def _matrices(var, rng, mode, chain=1):
    q, T = var["qualifiers"], var["types"]
    m, n, k = q["m"], q["n"], q["k"] * chain
    A = sample(rng, T["a"], (m, k), mode, "ab", T["d"])
    B = sample(rng, T["b"], (k, n), mode, "ab", T["d"])
    C = sample(rng, T["c"], (m, n), mode, "c", T["d"])
    if mode == 3 and T["a"] not in _INT8 + _INT4 + ("b1",):
        C = _cancel_c(A, B, T, rng)
    return A, B, C


def _cancel_c(A, B, T, rng):
    """C close to -(A.B): the negated float64 sum, exact or a few ulps off in half the places."""
    af = from_bits(A.astype(storage(T["a"])), T["a"]).astype(np.float64)
    bf = from_bits(B.astype(storage(T["b"])), T["b"]).astype(np.float64)
    dt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[T["c"]]
    ut = {"f16": np.uint16, "f32": np.uint32, "f64": np.uint64}[T["c"]]
    with np.errstate(over="ignore", invalid="ignore"):
        c = (-(af @ bf)).astype(dt)
    bits = c.view(ut).astype(np.int64)
    bits = bits + np.where(rng.random(bits.shape) < 0.5, rng.integers(-3, 4, size=bits.shape), 0)
    return bits.astype(ut)


def mma_job(var, rng, modes, per_mode, out, question=Q10):
    """A chain (``qualifiers.chain`` > 1, a warp's k-loop) draws A (M x chain*k) and B
    (chain*k x N) whole and gives step ``j`` columns (rows) ``j*k`` on of them:
    ``a_regs[i, j]`` and ``b_regs[i, j]``."""
    T, chain = var["types"], var["qualifiers"]["chain"]
    regs = {x: [] for x in "abc"}
    mode_list = []
    for mode in modes:
        for _ in range(per_mode):
            mats = _matrices(var, rng, mode, chain)
            for x, mat in zip("abc", mats):
                lay = fragment_layout(x, var["shape"], T[x])
                bits = np.asarray(mat).astype(storage(T[x]))
                if x == "c" or chain == 1:
                    regs[x].append(pack_fragment(bits, lay))
                else:
                    k = var["qualifiers"]["k"]
                    steps = [bits[:, j * k:(j + 1) * k] if x == "a" else bits[j * k:(j + 1) * k] for j in range(chain)]
                    regs[x].append(np.stack([pack_fragment(np.ascontiguousarray(t), lay) for t in steps]))
            mode_list.append(mode)
    return _register_job(var, regs, mode_list, out, question, _heldout("mma", var["name"]), var)


def _register_job(var, regs, mode_list, out, question, heldout, gen):
    """The job of an mma variant from its cases' A, B and C registers and modes."""
    n = len(mode_list)
    arrays = {f"{x}_regs": np.stack(regs[x]).astype(np.uint32) for x in "abc"}
    arrays["mode"] = np.array(mode_list, np.uint8)
    meta = {
        "variant": var["name"], "qualifiers": var["qualifiers"], "ptx_template": var["ptx_template"],
        "split": "probe", "heldout_only_variant": heldout,
        "case_index": list(range(n)), "n_cases": n, "target": "sm_90a",
        "fragment_regs": var["regs"], "fragment_words": var["words"],
        "probe_question": question, "case_labels": [""] * n,
    }
    return {"kind": "mma", "kernel": _cid(var["name"]), "out": out, "meta": meta, "gen": gen,
            "arrays": arrays}


def q10_jobs(rng):
    jobs = []
    for form in mma_forms():
        var = mma_variant(*form)
        a = var["types"]["a"]
        if a in _INT8 + _INT4:
            modes, per = (0, 5), 8
        elif a == "b1":
            modes, per = (0,), 16
        else:
            modes, per = (0, 1, 2, 3, 4, 5), 4
        jobs.append(mma_job(var, rng, modes, per, f"q10_mma_sync/{var['name']}.npz"))
    return jobs


Q11 = ("Q11: a warp's k-loop of 16 mma.sync on one accumulator (each step's D the next one's C): "
       "does a loop of the instruction compute what one instruction after another computes?")

#: the k-loops of q11: (shape, dtype, atype, btype, ctype, extra)
Q11_FORMS = (
    ("m16n8k16", "f32", "f16", "f16", "f32", ""),
    ("m16n8k16", "f16", "f16", "f16", "f16", ""),
    ("m16n8k16", "f32", "bf16", "bf16", "f32", ""),
    ("m16n8k8", "f32", "tf32", "tf32", "f32", ""),
    ("m16n8k32", "f32", "e4m3", "e4m3", "f32", ""),
    ("m16n8k32", "f16", "e5m2", "e4m3", "f16", ""),
    ("m16n8k16", "f32", "e4m3", "e5m2", "f32", ""),
    ("m16n8k16", "f64", "f64", "f64", "f64", "rn"),
    ("m16n8k32", "s32", "s8", "s8", "s32", "satfinite"),
)


def q11_jobs(rng):
    jobs = []
    for form in Q11_FORMS:
        var = mma_variant(*form, chain=16)
        modes = (0, 5) if var["types"]["a"] == "s8" else (0, 1, 2, 3, 4, 5)
        jobs.append(mma_job(var, rng, modes, 2, f"q11_mma_sync_k_loop/{var['name']}.npz", Q11))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 12: ldmatrix / stmatrix
# ----------------------------------------------------------------------------------------------

Q12 = ("Q12: ldmatrix / stmatrix .m8n8 .b16 (PTX ISA 9.7.14.5.15-16) on sm_90a: which lane's address "
       "names which row, and which register of which lane holds which elements, plain and .trans")

SMEM_BYTES = 2048


def matrix_move_variant(op, num, trans, space=".shared"):
    inst = f"{op}.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}{space}.b16"
    name = f"{op}.m8n8.x{num}{'.trans' if trans else ''}{'' if space else '.generic'}.b16"
    q = {"shape": "m8n8", "num": num, "trans": trans, "state_space": space.lstrip(".") or None, "type": "b16",
         "chain": 1}
    tmpl = f"{inst} {{R}}, [P];" if op == "ldmatrix" else f"{inst} [P], {{R}};"
    return {"name": name, "op": op, "num": num, "inst": inst, "generic": not space, "qualifiers": q,
            "ptx_template": [tmpl]}


def matrix_move_job(var, rng, cases=8):
    n, num = cases, var["num"]
    smem = rng.integers(0, 256, size=(n, SMEM_BYTES), dtype=np.uint8)
    addresses = np.empty((n, 32), np.int32)
    for i in range(n):  # distinct rows for the lanes that give one; the others any row
        rows = rng.permutation(SMEM_BYTES // 16)
        addresses[i] = 16 * np.concatenate([rows[:8 * num], rng.integers(0, SMEM_BYTES // 16, 32 - 8 * num)])
    arrays = {"smem": smem, "addresses": addresses, "mode": np.full(n, 0, np.uint8)}
    if var["op"] == "stmatrix":
        arrays["regs"] = rng.integers(0, 1 << 32, size=(n, 32, num), dtype=np.uint64).astype(np.uint32)
    meta = {
        "variant": var["name"], "qualifiers": var["qualifiers"], "ptx_template": var["ptx_template"],
        "split": "probe", "heldout_only_variant": True, "case_index": list(range(n)), "n_cases": n,
        "target": "sm_90a", "probe_question": Q12, "case_labels": [""] * n,
    }
    return {"kind": var["op"], "kernel": _cid(var["name"]), "out": f"q12_ldmatrix_stmatrix/{var['name']}.npz",
            "meta": meta, "gen": var, "arrays": arrays}


def q12_jobs(rng):
    jobs = [matrix_move_job(matrix_move_variant(op, num, trans), rng)
            for op in ("ldmatrix", "stmatrix") for num in (1, 2, 4) for trans in (False, True)]
    jobs.append(matrix_move_job(matrix_move_variant("ldmatrix", 4, True, space=""), rng))
    return jobs


# ----------------------------------------------------------------------------------------------
# Question 13: movmatrix
# ----------------------------------------------------------------------------------------------

Q13 = ("Q13: movmatrix.sync.aligned.m8n8.trans.b16 (PTX ISA 9.7.14.5.17) on sm_90a: which element of the "
       "source fragment each lane's destination register receives")


def movmatrix_job(rng, cases=16):
    """Random words in every lane's source register; case 0 holds each element's own index
    (row 8 r + column c as the 16-bit value), so the map reads off the words directly."""
    name = "movmatrix.m8n8.trans.b16"
    inst = "movmatrix.sync.aligned.m8n8.trans.b16"
    a = rng.integers(0, 1 << 32, size=(cases, 32, 1), dtype=np.uint64).astype(np.uint32)
    lane = np.arange(32)
    a[0, :, 0] = (8 * (lane // 4) + 2 * (lane % 4)) | (8 * (lane // 4) + 2 * (lane % 4) + 1) << 16
    labels = ["each element holds its own index 8 * row + column"] + [""] * (cases - 1)
    mode = np.zeros(cases, np.uint8)
    mode[0] = 6
    meta = {
        "variant": name, "qualifiers": {"shape": "m8n8", "trans": True, "type": "b16", "chain": 1},
        "ptx_template": [f"{inst} D, A;"], "split": "probe", "heldout_only_variant": True,
        "case_index": list(range(cases)), "n_cases": cases, "target": "sm_90a", "probe_question": Q13,
        "case_labels": labels,
    }
    return {"kind": "movmatrix", "kernel": _cid(name), "out": f"q13_movmatrix/{name}.npz", "meta": meta,
            "gen": {"inst": inst}, "arrays": {"a_regs": a, "mode": mode}}


def q13_jobs(rng):
    return [movmatrix_job(rng)]


# ----------------------------------------------------------------------------------------------
# Question 14: mma.sync.m8n8k4 with .f16 inputs (four quad-pair products)
# ----------------------------------------------------------------------------------------------

Q14 = ("Q14: mma.sync.m8n8k4 with .f16 inputs (PTX ISA 9.7.14.5.1) on sm_90a: four independent 8x8x4 "
       "products, one per quad pair, every layout pair and f16/f32 C and D ptxas takes: how each sums")


def quad_pair_forms():
    """(alayout, blayout, dtype, ctype) of every m8n8k4 .f16 form ptxas (CUDA 13.0) takes for
    sm_90a: D .f16 needs C .f16 (".dtype must be '.f32' when .ctype is '.f32'")."""
    return [(al, bl, d, c) for al in ("row", "col") for bl in ("row", "col")
            for d, c in (("f16", "f16"), ("f32", "f16"), ("f32", "f32"))]


def quad_pair_variant(al, bl, dtype, ctype):
    inst = f"mma.sync.aligned.m8n8k4.{al}.{bl}.{dtype}.f16.f16.{ctype}"
    name = f"mma.m8n8k4.{al}.{bl}.{dtype}.f16.f16.{ctype}"
    types = {"a": "f16", "b": "f16", "c": ctype, "d": dtype}
    layouts = {x: quad_pair_layout(x, t, {"a": al, "b": bl}.get(x)) for x, t in types.items()}
    words = {x: lay.words for x, lay in layouts.items()}
    q = {"alayout": al, "atype": "f16", "blayout": bl, "btype": "f16", "ctype": ctype, "dtype": dtype,
         "k": 4, "m": 8, "n": 8, "op": None, "rounding": None, "satfinite": False, "shape": "m8n8k4", "chain": 1}
    return {"name": name, "qualifiers": q, "inst": inst, "regs": dict(words), "words": words, "types": types,
            "shape": "m8n8k4", "layouts": layouts, "ptx_template": [f"{inst} D, A, B, C;"]}


def quad_pair_job(var, rng, modes=(0, 1, 2, 3, 4, 5), per_mode=2):
    """Each case: four products' A (8 x 4), B (4 x 8) and C (8 x 8) drawn for the mode (C close
    to -(A.B) in mode 3), stacked as ``quad_pair_layout`` has them and placed in the registers."""
    T, L = var["types"], var["layouts"]
    regs = {x: [] for x in "abc"}
    mode_list = []
    for mode in modes:
        for _ in range(per_mode):
            mats = [_quad_pair_matrices(var, rng, mode) for _ in range(QUAD_PAIRS)]
            A = np.concatenate([m[0] for m in mats], axis=0)
            B = np.concatenate([m[1] for m in mats], axis=1)
            C = np.concatenate([m[2] for m in mats], axis=0)
            for x, mat in zip("abc", (A, B, C)):
                regs[x].append(pack_fragment(np.ascontiguousarray(mat).astype(storage(T[x])), L[x]))
            mode_list.append(mode)
    gen = {k: v for k, v in var.items() if k != "layouts"}
    return _register_job(var, regs, mode_list, f"q14_mma_m8n8k4/{var['name']}.npz", Q14, True, gen)


def _quad_pair_matrices(var, rng, mode):
    """One product's A, B and C for the mode; C's sizes are its own type's where it is the
    narrower (an f16 C of an f32 D: mode 5 puts C near f16's largest)."""
    T = var["types"]
    A = sample(rng, "f16", (8, 4), mode, "ab", T["d"])
    B = sample(rng, "f16", (4, 8), mode, "ab", T["d"])
    C = sample(rng, T["c"], (8, 8), mode, "c", T["c"])
    if mode == 3:
        C = _cancel_c(A, B, T, rng)
    return A, B, C


def q14_jobs(rng):
    return [quad_pair_job(quad_pair_variant(*form), rng) for form in quad_pair_forms()]
