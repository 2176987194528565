"""``fastmma verify``: fastmma against the user's own Hopper GPU, every bit compared.

A *battery* is a list of sections (:class:`Section`).  Each section names what it needs
(:meth:`Section.missing`) and the forms it covers at a level (``quick``/``full``); for a form it
makes one device job a data style (the inputs as seeded recipes and a launch plan,
:mod:`fastmma.verify_device`), computes the job's inputs with fastmma
(:meth:`Section.reference`) and :func:`report` compares every output word;
:func:`write_failures` writes the failing cases in the recordings' format
(tests/golden/FORMAT.md), so that ``fastmma conform`` replays them.

The instruction section (:class:`InstructionSection`) issues single ``wgmma.mma_async``,
``mma.sync`` and ``wmma`` instructions from CUDA C kernels with the instruction as inline PTX,
generated per form and built with ``nvcc`` for sm_90a (as tools/record/gen.py builds the
recordings' probes), launched through the CUDA driver API.  The Triton section
(:class:`TritonSection`) runs the whole GEMM kernels of tests/golden/triton
(:mod:`fastmma.verify_triton`) compiled on the GPU and, for fastmma, in Triton's interpreter
under :func:`fastmma.triton.emulate` in worker processes.  docs/verify.md describes the battery
and its runs.

Data styles (``meta.mode`` of a failure file, legend in its ``meta.mode_legend``): random bit
patterns (NaN, inf and subnormals included), normal values with exponents spread over many
binades, and cancellation (C the negated product, a unit in the last place off in half).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import queue
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import mma_sync, verify_triton, wgmma, wmma
from .errors import FastmmaError, OperandError
from .formats import get_format
from .isa import parse
from .layout.descriptor import MatrixDescriptor
from .layout.mma_fragments import fragment_layout as mma_fragment_layout
from .layout.wmma_memory import fragment_registers
from .verify_device import device_info, find_nvcc, run_jobs
from .verify_device import elements as device_elements

#: style -> (FORMAT ``mode`` label, legend)
STYLES = {
    "bits": (7, "verify: uniformly random bit patterns of every operand (NaN, inf, subnormals included)"),
    "spread": (1, "wide: normal values, exponents spread over +-10 binades (C +-20); integers: extreme values"),
    "cancel": (3, "cancellation: C is the negated product A.B (exactly, or a unit in the last place off)"),
}
#: level -> (cases per style and form, every form or a spread of them)
LEVELS = {"quick": (8, False), "full": (64, True)}
WMMA_PREFILL = 0xA5


@dataclass(frozen=True)
class Form:
    """One instruction form of the battery: ``family`` (``mma``/``wgmma``/``wmma``), its
    variant name (the recordings' file naming) and what the kernel and replay need."""
    family: str
    name: str
    spec: dict = field(hash=False, compare=False)


# ---------------------------------------------------------------- element data


def format_fields(t: str) -> dict:
    """The fields of a type that :func:`fastmma.verify_device.elements` draws by."""
    f = get_format(t)
    return {"name": t, "bits": f.bits, "kind": f.kind, "exp_bits": f.exp_bits, "man_bits": f.man_bits, "bias": f.bias,
            "ieee_specials": f.ieee_specials, "ignored_low_bits": f.ignored_low_bits, "storage": f.storage.str}


def elements(rng, t: str, count: int, style: str, role: str = "ab") -> np.ndarray:
    """``count`` elements of type ``t`` in a data style, as raw bytes (:func:`fastmma.verify_device.elements`)."""
    return device_elements(rng, format_fields(t), count, style, role)


def drawn(seed: list, t: str, shape: tuple, style: str, role: str = "ab", dtype=np.uint32) -> dict:
    """The recipe of an array ``dtype[shape]`` of elements of ``t`` (:func:`fastmma.verify_device.make_array`)."""
    return {"random": [int(x) for x in seed], "format": format_fields(t), "style": style, "role": role,
            "shape": [int(x) for x in shape], "dtype": np.dtype(dtype).str}


def literal(values, dtype) -> dict:
    return {"value": np.asarray(values).tolist(), "dtype": np.dtype(dtype).str}


def chosen(seed: list, values: list, count: int, dtype) -> dict:
    """The recipe of ``count`` values drawn from ``values``."""
    return {"choice": [int(v) for v in values], "random": [int(x) for x in seed], "shape": [count],
            "dtype": np.dtype(dtype).str}


def cancel_spec(seed: list, t: str, source: str, target: str, zero=(), layouts=None) -> dict:
    spec = {"from": source, "to": target, "zero": list(zero), "format": format_fields(t), "seed": [int(x) for x in seed]}
    if layouts:
        spec["layouts"] = list(layouts)
    return spec


# ---------------------------------------------------------------- mma.sync


_FP8, _INT8, _INT4 = ("e4m3", "e5m2"), ("s8", "u8"), ("s4", "u4")


def mma_forms() -> list[tuple]:
    """(shape, dtype, atype, btype, ctype, extra) of the ``mma.sync`` forms ptxas takes for
    sm_90a (tools/record/mma_probes.py, q10), less ``m8n8k4`` .f16 and the sparse ones."""
    forms = [(s, d, "f16", "f16", d, "") for s in ("m16n8k8", "m16n8k16") for d in ("f16", "f32")]
    forms += [(s, "f32", "bf16", "bf16", "f32", "") for s in ("m16n8k8", "m16n8k16")]
    forms += [(s, "f32", "tf32", "tf32", "f32", "") for s in ("m16n8k4", "m16n8k8")]
    forms += [(s, d, a, b, d, "") for s in ("m16n8k16", "m16n8k32") for d in ("f32", "f16") for a in _FP8 for b in _FP8]
    forms += [(s, "f64", "f64", "f64", "f64", "rn") for s in ("m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16")]
    for shapes, types in ((("m8n8k16", "m16n8k16", "m16n8k32"), _INT8), (("m8n8k32", "m16n8k32", "m16n8k64"), _INT4)):
        forms += [(s, "s32", a, b, "s32", sat) for s in shapes for a in types for b in types for sat in ("", "satfinite")]
    forms += [(s, "s32", "b1", "b1", "s32", op) for s in ("m8n8k128", "m16n8k128", "m16n8k256") for op in ("xor", "and")]
    return forms


def mma_form(shape, dtype, atype, btype, ctype, extra="") -> Form:
    op = extra if extra in ("and", "xor") else None
    inst = (f"mma.sync.aligned.{shape}.row.col" + (".rn" if extra == "rn" else "")
            + (".satfinite" if extra == "satfinite" else "") + f".{dtype}.{atype}.{btype}.{ctype}"
            + (f".{op}.popc" if op else ""))
    name = f"mma.{shape}.row.col.{dtype}.{atype}.{btype}.{ctype}" + (f".{extra}" if extra else "") + (".popc" if op else "")
    types = {"a": atype, "b": btype, "c": ctype, "d": dtype}
    nwords = {x: mma_fragment_layout(x, shape, t).words for x, t in types.items()}
    m, n, k = (int(v) for v in shape[1:].replace("n", " ").replace("k", " ").split())
    q = {"alayout": "row", "atype": atype, "blayout": "col", "btype": btype, "ctype": ctype, "dtype": dtype,
         "k": k, "m": m, "n": n, "op": op, "rounding": "rn" if extra == "rn" else None,
         "satfinite": extra == "satfinite", "shape": shape, "chain": 1}
    return Form("mma", name, {"inst": inst, "types": types, "words": nwords, "qualifiers": q})


def _reg_kind(t):
    """(C type, asm constraint, words a register)"""
    return {"f64": ("double", "d", 2), "f32": ("float", "f", 1)}.get(t, ("u32", "r", 1))


def _vec(first, n):
    return "{" + ", ".join(f"%{first + i}" for i in range(n)) + "}"


def _read_regs(src, names, t):
    if t == "f64":
        return [f"{x} = __longlong_as_double((long long)((u64){src}[{2 * i}] | ((u64){src}[{2 * i + 1}] << 32)));"
                for i, x in enumerate(names)]
    return [f"{x} = {'__uint_as_float(' if t == 'f32' else '('}{src}[{i}]);" for i, x in enumerate(names)]


def _write_regs(dst, names, t):
    if t == "f64":
        return [f"{{ u64 q_ = (u64)__double_as_longlong({x}); {dst}[{2 * i}] = (u32)q_; {dst}[{2 * i + 1}] = (u32)(q_ >> 32); }}"
                for i, x in enumerate(names)]
    return [f"{dst}[{i}] = {'__float_as_uint(' if t == 'f32' else '('}{x});" for i, x in enumerate(names)]


def _regs(form, x):
    t = form.spec["types"][x]
    return [f"{x}{i}" for i in range(form.spec["words"][x] // _reg_kind(t)[2])]


def mma_kernel(kname: str, form: Form) -> str:
    """One warp per case: each lane reads its A, B, C registers, issues the ``mma.sync``, writes D."""
    T, W = form.spec["types"], form.spec["words"]
    names = {x: _regs(form, x) for x in "abcd"}
    nd, na, nb, nc = (len(names[x]) for x in "dabc")
    lines = [f"{_reg_kind(T[x])[0]} {', '.join(names[x])};" for x in "abcd"]
    for x in "abc":
        lines.append(f"const u32* {x}w = {x}r + ((size_t)cs * 32 + lane) * {W[x]};")
        lines += _read_regs(f"{x}w", names[x], T[x])
    outs = ", ".join(f'"={_reg_kind(T["d"])[1]}"({r})' for r in names["d"])
    ins = ", ".join(f'"{_reg_kind(T[x])[1]}"({r})' for x in "abc" for r in names[x])
    lines.append(f'asm volatile("{form.spec["inst"]} {_vec(0, nd)}, {_vec(nd, na)}, {_vec(nd + na, nb)}, '
                 f'{_vec(nd + na + nb, nc)};" : {outs} : {ins});')
    lines.append(f"u32* dw = dr + ((size_t)cs * 32 + lane) * {W['d']};")
    lines += _write_regs("dw", names["d"], T["d"])
    body = "\n  ".join(lines)
    return f"""
extern "C" __global__ void __launch_bounds__(32)
{kname}(const u32* __restrict__ ar, const u32* __restrict__ br, const u32* __restrict__ cr, u32* __restrict__ dr)
{{
  const int cs = blockIdx.x, lane = threadIdx.x;
  {body}
}}
"""


def _concrete(form: Form) -> str:
    """The instruction with made-up register operands, as fastmma.conform parses meta.ptx."""
    names = {x: _regs(form, x) for x in "abcd"}
    prefix = {"f64": "%fd", "f32": "%f"}
    vec = {x: "{" + ", ".join(f"{prefix.get(form.spec['types'][x], '%r')}{100 * i + j + 1}"
                              for j in range(len(names[x]))) + "}" for i, x in enumerate("abcd")}
    return f"{form.spec['inst']} {vec['d']}, {vec['a']}, {vec['b']}, {vec['c']};"


def spread(forms: list[Form], key: tuple, step: int) -> list[Form]:
    """Every ``step``-th form, and the first of each combination of the qualifiers ``key``
    that those miss: the quick battery's share of a family."""
    seen = {tuple(f.spec["qualifiers"][k] for k in key) for f in forms[::step]}
    out = []
    for i, f in enumerate(forms):
        k = tuple(f.spec["qualifiers"][q] for q in key)
        if i % step == 0 or k not in seen:
            out.append(f)
            seen.add(k)
    return out


class MmaFamily:
    outputs = ("d_regs",)

    def forms(self, full: bool) -> list[Form]:
        forms = [mma_form(*f) for f in mma_forms()]
        return forms if full else spread(forms, ("atype", "btype", "dtype"), 5)

    def job(self, form: Form, seed: list, count: int, style: str) -> dict:
        T, W = form.spec["types"], form.spec["words"]
        inputs = {f"{x}_regs": drawn(seed + [i], T[x], (count, 32, W[x]), style, "c" if x == "c" else "ab")
                  for i, x in enumerate("abc")}
        job = {"inputs": inputs, "plan": self.plan(form, count)}
        if style == "cancel" and T["c"] == T["d"]:
            job["cancel"] = cancel_spec(seed + [9], T["d"], "d_regs", "c_regs", zero=["c_regs"])
        return job

    def reference(self, form: Form, arrays: dict) -> dict:
        inst = parse(form.spec["inst"])  # case by case, as fastmma.conform replays a recording
        return {"d_regs": np.stack([mma_sync.mma(inst, a, b, c) for a, b, c in
                                    zip(arrays["a_regs"], arrays["b_regs"], arrays["c_regs"])])}

    def kernel(self, kname: str, form: Form) -> str:
        return mma_kernel(kname, form)

    def plan(self, form: Form, n: int) -> dict:
        return {"kernel": kernel_name(form), "blocks": n, "threads": 32, "shared": 0,
                "args": [{"in": "a_regs"}, {"in": "b_regs"}, {"in": "c_regs"},
                         _out("d_regs", (n, 32, form.spec["words"]["d"]), np.uint32, 0xDEADBEEF)]}

    def finish(self, form: Form, out: dict) -> dict:
        return out

    def meta(self, form: Form) -> dict:
        return {"ptx": [_concrete(form)], "qualifiers": form.spec["qualifiers"],
                "fragment_words": form.spec["words"],
                "sequence": "registers a, b, c loaded from memory; mma.sync; registers d written to memory"}


# ---------------------------------------------------------------- wgmma.mma_async


#: (dtype, atype, btype, k, satfinite, op) of every wgmma type combination (PTX ISA 9.7.15.5)
WGMMA_TYPES = ([("f32", "f16", "f16", 16, False, None), ("f16", "f16", "f16", 16, False, None),
                ("f32", "bf16", "bf16", 16, False, None), ("f32", "tf32", "tf32", 8, False, None)]
               + [(d, a, b, 32, False, None) for d in ("f32", "f16") for a in _FP8 for b in _FP8]
               + [("s32", a, b, 32, sat, None) for a in _INT8 for b in _INT8 for sat in (False, True)]
               + [("s32", "b1", "b1", 256, False, "and")])
#: N of the forms: each type combination takes the next few of these in turn
WGMMA_N = (8, 64, 256, 16, 128, 24, 32, 96, 200, 48, 120, 176, 40, 224)
SWIZZLES = ("none", "32B", "64B", "128B")


def wgmma_form(n, dtype, atype, btype, k, satfinite=False, op=None, a_source="desc", sa=1, sb=1) -> Form:
    isfloat = atype not in ("s8", "u8", "b1")
    is16 = atype in ("f16", "bf16")
    inst = (f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{dtype}.{atype}.{btype}" + (".satfinite" if satfinite else "")
            + (f".{op}.popc" if op else ""))
    imms = ([sa, sb] + ([0, 0] if a_source == "desc" else [0]) if is16 else [sa, sb]) if isfloat else []
    name = (f"wgmma.m64n{n}k{k}.{dtype}.{atype}.{btype}" + (".satfinite" if satfinite else "")
            + (f".{op}.popc" if op else "") + (".adesc" if a_source == "desc" else ".areg")
            + ((".ta0" if a_source == "desc" else "") + ".tb0" if is16 else "") + (f".sa{sa}.sb{sb}" if isfloat else ""))
    nd = n // 2 if dtype in ("f32", "s32") else n // 4
    q = {"a_source": a_source, "atype": atype, "btype": btype, "chain": 1, "ctype": dtype, "dtype": dtype,
         "imm_scale_a": sa if isfloat else None, "imm_scale_b": sb if isfloat else None,
         "imm_trans_a": (0 if a_source == "desc" else None) if is16 else None, "imm_trans_b": 0 if is16 else None,
         "k": k, "layouts": None, "m": 64, "n": n, "op": op, "rounding": None, "satfinite": bool(satfinite)}
    return Form("wgmma", name, {"inst": inst, "imm": "".join(f", {x}" for x in imms), "nd": nd, "qualifiers": q})


def k_major_descriptor(mn: int, swizzle: str, start: int) -> tuple[int, int]:
    """(descriptor, bytes it spans) of an ``mn`` x 32-byte K-major operand at image byte
    ``start`` in the canonical layout of ``swizzle`` (PTX ISA 9.7.15.5.1.2; every dense wgmma
    operand has 32 bytes of K a row)."""
    if swizzle == "none":  # 8x16-byte core matrices: LBO steps along K, SBO along MN
        return MatrixDescriptor(start, 128, 256, 0, "none").encode(), 256 * (mn // 8)
    width = int(swizzle[:-1])
    return MatrixDescriptor(start, 16, 8 * width, 0, swizzle).encode(), 8 * width * (mn // 8)


def wgmma_kernel(kname: str, form: Form) -> str:
    """One CTA of 128 threads per case: the image copied to dynamic shared memory (1024-byte
    aligned), the descriptors moved to it, C loaded, then ``wgmma.fence; mma_async;
    commit_group; wait_group 0`` with the run-time scale-d predicate (tools/record/gen.py)."""
    q, nd = form.spec["qualifiers"], form.spec["nd"]
    isf = q["dtype"] == "f32"
    ctype, cons = ("float", "f") if isf else ("u32", "r")
    d = [f"d{i}" for i in range(nd)]
    outs = ", ".join(f'"+{cons}"({x})' for x in d)
    if q["a_source"] == "reg":
        ins, a_op, nxt = [f'"r"(a{i})' for i in range(4)], _vec(nd, 4), nd + 4
    else:
        ins, a_op, nxt = ['"l"(ad)'], f"%{nd}", nd + 1
    ins += ['"l"(bd)', '"r"(sc)']
    text = (f'"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nxt + 1}, 0;\\n'
            f'{form.spec["inst"]} {_vec(0, nd)}, {a_op}, %{nxt}, p{form.spec["imm"]};\\n}}\\n"')
    load = "\n  ".join(f"{ctype} {x} = {'__uint_as_float' if isf else ''}(cr[{i}]);" for i, x in enumerate(d))
    store = "\n  ".join(f"dr[{i}] = {'__float_as_uint' if isf else ''}({x});" for i, x in enumerate(d))
    return f"""
extern "C" __global__ void __launch_bounds__(128, 1)
{kname}(const u8* __restrict__ img, int S, const u64* __restrict__ adesc, const u64* __restrict__ bdesc,
        const u32* __restrict__ aregs, const u32* __restrict__ cregs, u32* __restrict__ dregs,
        const u8* __restrict__ scale, u32* __restrict__ base_out)
{{
  extern __shared__ __align__(1024) u8 sm[];
  const int cs = blockIdx.x, t = threadIdx.x;
  const u8* src = img + (size_t)cs * S;
  for (int i = t; i < S; i += 128) sm[i] = src[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const u32 base = (u32)__cvta_generic_to_shared(sm);
  if (t == 0) base_out[cs] = base;
  u64 ad = adesc[cs], bd = bdesc[cs];
  ad = (ad & ~0x3FFFull) | ((ad + (base >> 4)) & 0x3FFFull);
  bd = (bd & ~0x3FFFull) | ((bd + (base >> 4)) & 0x3FFFull);
  (void)ad;
  const u32* cr = cregs + ((size_t)cs * 128 + t) * {nd};
  const u32* ar = aregs + ((size_t)cs * 128 + t) * 4;
  const u32 a0 = ar[0], a1 = ar[1], a2 = ar[2], a3 = ar[3];
  (void)a0; (void)a1; (void)a2; (void)a3;
  {load}
  const u32 sc = scale[cs];
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile({text}
               : {outs}
               : {", ".join(ins)}
               : "memory");
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  u32* dr = dregs + ((size_t)cs * 128 + t) * {nd};
  {store}
}}
"""


class WgmmaFamily:
    outputs = ("d_regs",)

    def forms(self, full: bool) -> list[Form]:
        """Every type combination, each at a few N in turn (more at ``full``), A from
        descriptors and from registers, imm-scale-a/b of both signs."""
        forms, turn = [], 0
        per = 3 if full else 1
        for dtype, atype, btype, k, sat, op in WGMMA_TYPES:
            for j in range(per):
                n = WGMMA_N[turn % len(WGMMA_N)]
                turn += 1
                if atype in ("s8", "u8", "b1") and n > 24 and n % 16:  # integer N: 8, 16, 24, then by 16s
                    n += 8
                if atype in ("s8", "u8"):  # fastmma's table stops at 224 for .s8/.u8 (fastmma.isa.tables)
                    n = min(n, 224)
                a_source = "desc" if (turn + j) % 2 else "reg"
                signs = ((1, 1), (-1, 1), (1, -1), (-1, -1))[turn % 4]
                forms.append(wgmma_form(n, dtype, atype, btype, k, sat, op, a_source, *signs))
        return forms

    def job(self, form: Form, seed: list, count: int, style: str) -> dict:
        """The image holds A's region, then B's, each as large as its 128B-swizzled layout
        and filled with elements; each case's descriptors take a swizzle at random."""
        q, nd = form.spec["qualifiers"], form.spec["nd"]
        spans = [k_major_descriptor(mn, "128B", 0)[1] for mn in (64, q["n"])]
        a_descs = [k_major_descriptor(64, sw, 0)[0] for sw in SWIZZLES] if q["a_source"] == "desc" else [0]
        b_descs = [k_major_descriptor(q["n"], sw, spans[0])[0] for sw in SWIZZLES]
        inputs = {"smem": {"concat": [drawn(seed + [1], q["atype"], (count, spans[0]), style, dtype=np.uint8),
                                      drawn(seed + [2], q["btype"], (count, spans[1]), style, dtype=np.uint8)]},
                  "a_desc": chosen(seed + [5], a_descs, count, np.uint64),
                  "b_desc": chosen(seed + [6], b_descs, count, np.uint64),
                  "c_regs": drawn(seed + [3], q["dtype"], (count, 128, nd), style, "c"),
                  "scale_d": chosen(seed + [7], [0] + [1] * 7, count, np.uint8)}
        if q["a_source"] == "reg":
            inputs["a_regs"] = drawn(seed + [4], q["atype"], (count, 128, 4), style)
        job = {"inputs": inputs, "plan": self.plan(form, count, spans[0] + spans[1], q["a_source"] == "reg")}
        if style == "cancel":
            job["cancel"] = cancel_spec(seed + [9], q["dtype"], "d_regs", "c_regs", zero=["c_regs"])
        return job

    def reference(self, form: Form, arrays: dict) -> dict:
        inst = parse(_wgmma_text(form))  # case by case, as fastmma.conform replays a recording
        reg = inst.a_source == "reg"
        return {"d_regs": np.stack([
            wgmma.mma_async(inst, arrays["c_regs"][i], b_desc=int(arrays["b_desc"][i]), smem=arrays["smem"][i],
                            scale_d=bool(arrays["scale_d"][i]), image_address=0,
                            **({"a_regs": arrays["a_regs"][i]} if reg else {"a_desc": int(arrays["a_desc"][i])}))
            for i in range(len(arrays["scale_d"]))])}

    def kernel(self, kname: str, form: Form) -> str:
        return wgmma_kernel(kname, form)

    def plan(self, form: Form, n: int, size: int, a_regs: bool) -> dict:
        a_regs = {"in": "a_regs"} if a_regs else _out("no_a_regs", (n, 128, 4), np.uint32, 0)
        return {"kernel": kernel_name(form), "blocks": n, "threads": 128, "shared": int(size),
                "args": [{"in": "smem"}, {"int": int(size)}, {"in": "a_desc"}, {"in": "b_desc"}, a_regs,
                         {"in": "c_regs"}, _out("d_regs", (n, 128, form.spec["nd"]), np.uint32, 0xDEADBEEF),
                         {"in": "scale_d"}, _out("smem_base", (n,), np.uint32, 0)]}

    def finish(self, form: Form, out: dict) -> dict:
        """The D registers; the image must have sat at a 1024-byte aligned shared address, as
        the replay (image address 0) assumes."""
        if (np.asarray(out["smem_base"]) % 1024).any():
            raise RuntimeError(f"{form.name}: dynamic shared memory not 1024-byte aligned")
        return {"d_regs": out["d_regs"]}

    def meta(self, form: Form) -> dict:
        return {"ptx": ["setp.ne.b32 p, %r1, 0;", _wgmma_text(form)], "qualifiers": form.spec["qualifiers"],
                "smem_base_observed": [1024], "descriptor_convention": "start addresses relative to the image",
                "sequence": "wgmma.fence; wgmma.mma_async x1; wgmma.commit_group; wgmma.wait_group 0"}


def _wgmma_text(form: Form) -> str:
    q, nd = form.spec["qualifiers"], form.spec["nd"]
    reg = "%f" if q["dtype"] == "f32" else "%r"
    a = "%rd1" if q["a_source"] == "desc" else "{%r201, %r202, %r203, %r204}"
    return f"{form.spec['inst']} {{{', '.join(f'{reg}{i + 1}' for i in range(nd))}}}, {a}, %rd2, p{form.spec['imm']};"


# ---------------------------------------------------------------- wmma


WMMA_MNK = {"m16n16k16": (16, 16, 16), "m8n32k16": (8, 32, 16), "m32n8k16": (32, 8, 16), "m16n16k8": (16, 16, 8),
            "m8n8k4": (8, 8, 4), "m8n8k32": (8, 8, 32), "m8n8k128": (8, 8, 128)}


def wmma_forms() -> list[tuple]:
    """(shape, alayout, blayout, dtype, ctype, atype, rounding, satfinite, op): every type and
    shape of wmma on sm_90, the layouts taking turns."""
    lay = ("row", "col")
    forms = [(s, d, c, "f16", None, False, None) for s in ("m16n16k16", "m8n32k16", "m32n8k16")
             for d in ("f16", "f32") for c in ("f16", "f32")]
    forms += [(s, "f32", "f32", "bf16", None, False, None) for s in ("m16n16k16", "m8n32k16", "m32n8k16")]
    forms += [("m16n16k8", "f32", "f32", "tf32", None, False, None)]
    forms += [("m8n8k4", "f64", "f64", "f64", r, False, None) for r in ("rn", "rz", "rm", "rp")]
    forms += [(s, "s32", "s32", a, None, sat, None) for s in ("m16n16k16", "m8n32k16", "m32n8k16")
              for a in _INT8 for sat in (False, True)]
    forms += [("m8n8k32", "s32", "s32", a, None, sat, None) for a in _INT4 for sat in (False, True)]
    forms += [("m8n8k128", "s32", "s32", "b1", None, False, op) for op in ("xor", "and")]
    out = []
    for i, (shape, d, c, a, r, sat, op) in enumerate(forms):
        sub = a in ("s4", "u4", "b1")  # row.col only
        al, bl = ("row", "col") if sub else (lay[(i + i // 4) % 2], lay[(i // 2 + i // 8) % 2])
        out.append((shape, al, bl, lay[(i // 4) % 2], lay[(i // 3) % 2], d, c, a, r, sat, op))
    return out


def wmma_form(shape, al, bl, cl, dl, dtype, ctype, atype, rounding=None, satfinite=False, op=None) -> Form:
    if atype == "f16":
        mma = f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.{dtype}.{ctype}"
    elif atype in ("bf16", "tf32"):
        mma = f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.f32.{atype}.{atype}.f32"
    elif atype == "f64":
        mma = f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.{rounding}.f64.f64.f64.f64"
    elif atype == "b1":
        mma = f"wmma.mma.{op}.popc.sync.aligned.{al}.{bl}.{shape}.s32.b1.b1.s32"
    else:
        mma = f"wmma.mma.sync.aligned.{al}.{bl}.{shape}.s32.{atype}.{atype}.s32" + (".satfinite" if satfinite else "")
    types = {"a": atype, "b": atype, "c": ctype, "d": dtype}
    texts = [f"wmma.load.a.sync.aligned.{al}.{shape}.global.{atype}", f"wmma.load.b.sync.aligned.{bl}.{shape}.global.{atype}",
             f"wmma.load.c.sync.aligned.{cl}.{shape}.global.{ctype}", mma,
             f"wmma.store.d.sync.aligned.{dl}.{shape}.global.{dtype}"]
    name = (f"wmma.{shape}.{al}.{bl}.{dtype}.{ctype}.{atype}" + (f".{rounding}" if rounding else "")
            + (".satfinite" if satfinite else "") + (f".{op}.popc" if op else "") + f".c{cl}.d{dl}")
    m, n, k = WMMA_MNK[shape]
    regs = {x: fragment_registers(x, shape, t) for x, t in types.items()}
    nwords = {x: r * (2 if types[x] == "f64" else 1) for x, r in regs.items()}
    q = {"a_source": None, "alayout": al, "atype": atype, "blayout": bl, "btype": atype, "clayout": cl,
         "ctype": ctype, "dlayout": dl, "dtype": dtype, "imm_scale_a": None, "imm_scale_b": None,
         "imm_trans_a": None, "imm_trans_b": None, "k": k, "m": m, "n": n, "op": op, "rounding": rounding,
         "satfinite": bool(satfinite), "shape": shape}
    dims = {"a": (m, k), "b": (k, n), "c": (m, n), "d": (m, n)}
    layouts = {"a": al, "b": bl, "c": cl, "d": dl}
    lds = {x: dims[x][1] if layouts[x] == "row" else dims[x][0] for x in "abcd"}
    return Form("wmma", name, {"texts": texts, "types": types, "regs": regs, "words": nwords, "qualifiers": q,
                               "dims": dims, "lds": lds})


def _mem_bytes(form: Form, x: str) -> int:
    rows, cols = form.spec["dims"][x]
    return -(-rows * cols * get_format(form.spec["types"][x]).bits // 8 // 256) * 256


def wmma_kernel(kname: str, form: Form) -> str:
    """One warp per case: ``wmma.load.a/b/c`` from global memory, ``wmma.mma``,
    ``wmma.store.d`` into memory prefilled with 0xA5; every fragment written out."""
    T, texts = form.spec["types"], form.spec["texts"]
    names = {x: [f"{x}{i}" for i in range(form.spec["regs"][x])] for x in "abcd"}
    n = {x: len(names[x]) for x in "abcd"}
    lines = [f"{_reg_kind(T[x])[0]} {', '.join(names[x])};" for x in "abcd"]
    for i, x in enumerate("abc"):
        outs = ", ".join(f'"={_reg_kind(T[x])[1]}"({r})' for r in names[x])
        lines.append(f'asm volatile("{texts[i]} {_vec(0, n[x])}, [%{n[x]}], %{n[x] + 1};" : {outs} '
                     f': "l"(gaddr(p{x})), "r"(ld{x}) : "memory");')
    outs = ", ".join(f'"={_reg_kind(T["d"])[1]}"({r})' for r in names["d"])
    ins = ", ".join(f'"{_reg_kind(T[x])[1]}"({r})' for x in "abc" for r in names[x])
    lines.append(f'asm volatile("{texts[3]} {_vec(0, n["d"])}, {_vec(n["d"], n["a"])}, '
                 f'{_vec(n["d"] + n["a"], n["b"])}, {_vec(n["d"] + n["a"] + n["b"], n["c"])};" : {outs} : {ins});')
    ins = ", ".join(['"l"(gaddr(pd))'] + [f'"{_reg_kind(T["d"])[1]}"({r})' for r in names["d"]] + ['"r"(ldd)'])
    lines.append(f'asm volatile("{texts[4]} [%0], {_vec(1, n["d"])}, %{n["d"] + 1};" :: {ins} : "memory");')
    for x in "abcd":
        lines.append(f"{{ u32* w = f{x} + ((size_t)cs * 32 + lane) * {form.spec['words'][x]};")
        lines += _write_regs("w", names[x], T[x]) + ["}"]
    body = "\n  ".join(lines)
    sizes = {x: _mem_bytes(form, x) for x in "abcd"}
    lds = form.spec["lds"]
    return f"""
extern "C" __global__ void __launch_bounds__(32)
{kname}(const u8* __restrict__ am, const u8* __restrict__ bm, const u8* __restrict__ cm, u8* __restrict__ dm,
        u32* __restrict__ fa, u32* __restrict__ fb, u32* __restrict__ fc, u32* __restrict__ fd)
{{
  const int cs = blockIdx.x, lane = threadIdx.x;
  const u8* pa = am + (size_t)cs * {sizes['a']};
  const u8* pb = bm + (size_t)cs * {sizes['b']};
  const u8* pc = cm + (size_t)cs * {sizes['c']};
  u8* pd = dm + (size_t)cs * {sizes['d']};
  const int lda = {lds['a']}, ldb = {lds['b']}, ldc = {lds['c']}, ldd = {lds['d']};
  {body}
}}
"""


class WmmaFamily:
    outputs = ("a_frag", "b_frag", "c_frag", "d_frag", "d_mem")

    def forms(self, full: bool) -> list[Form]:
        forms = [wmma_form(*f) for f in wmma_forms()]
        return forms if full else spread(forms, ("atype", "ctype", "dtype"), 4)

    def job(self, form: Form, seed: list, count: int, style: str) -> dict:
        T, q = form.spec["types"], form.spec["qualifiers"]
        inputs = {f"{x}_mem": drawn(seed + [i], T[x], (count, _mem_bytes(form, x)), style, "c" if x == "c" else "ab",
                                    np.uint8) for i, x in enumerate("abc")}
        inputs.update({f"ld{x}": literal([form.spec["lds"][x]] * count, np.int32) for x in "abcd"})
        job = {"inputs": inputs, "plan": self.plan(form, count)}
        if style == "cancel" and T["c"] == T["d"]:
            layouts = (q["m"], q["n"], get_format(T["d"]).bits, q["dlayout"], q["clayout"])
            job["cancel"] = cancel_spec(seed + [9], T["d"], "d_mem", "c_mem", zero=["c_mem"], layouts=layouts)
        return job

    def reference(self, form: Form, arrays: dict) -> dict:
        load_a, load_b, load_c, mma, store = (parse(t) for t in form.spec["texts"])
        n = len(arrays["lda"])
        out = {k: [] for k in self.outputs}
        for i in range(n):  # case by case, as fastmma.conform replays a recording
            frags = [wmma.load(inst, arrays[f"{x}_mem"][i], 0, int(arrays[f"ld{x}"][i]))
                     for inst, x in ((load_a, "a"), (load_b, "b"), (load_c, "c"))]
            d = wmma.mma(mma, *frags)
            mem = np.full(_mem_bytes(form, "d"), WMMA_PREFILL, np.uint8)
            wmma.store(store, mem, 0, d, int(arrays["ldd"][i]))
            for k, v in zip(self.outputs, frags + [d, mem]):
                out[k].append(v)
        return {k: np.stack(v) for k, v in out.items()}

    def kernel(self, kname: str, form: Form) -> str:
        return wmma_kernel(kname, form)

    def plan(self, form: Form, n: int) -> dict:
        return {"kernel": kernel_name(form), "blocks": n, "threads": 32, "shared": 0,
                "args": [{"in": "a_mem"}, {"in": "b_mem"}, {"in": "c_mem"},
                         _out("d_mem", (n, _mem_bytes(form, "d")), np.uint8, WMMA_PREFILL)]
                + [_out(f"{x}_frag", (n, 32, form.spec["words"][x]), np.uint32, 0xDEADBEEF) for x in "abcd"]}

    def finish(self, form: Form, out: dict) -> dict:
        return out

    def meta(self, form: Form) -> dict:
        return {"ptx": form.spec["texts"], "qualifiers": form.spec["qualifiers"], "d_prefill_byte": "0xA5",
                "fragment_regs": form.spec["regs"], "fragment_words": form.spec["words"],
                "sequence": "wmma.load.a; wmma.load.b; wmma.load.c; wmma.mma; wmma.store.d"}


FAMILIES = {"mma": MmaFamily(), "wgmma": WgmmaFamily(), "wmma": WmmaFamily()}


# ---------------------------------------------------------------- the GPU


def kernel_name(form: Form) -> str:
    return "k_" + "".join(c if c.isalnum() else "_" for c in form.name.replace("-", "m"))


def _out(key, shape, dtype, fill):
    return {"out": key, "shape": list(shape), "dtype": np.dtype(dtype).str, "fill": int(fill)}


# ---------------------------------------------------------------- sections


class Section:
    """A part of the battery.  A subclass gives ``name``, :meth:`missing` (None, or what is
    missing, in a few words), :meth:`forms` at a level, and for each form: :meth:`jobs` (the
    device jobs of each data style: inputs as recipes, a launch plan), :meth:`reference`
    (fastmma's outputs for the inputs), :meth:`finish` (the outputs to compare from what the
    device brought back) and :meth:`meta` (the recordings' meta of a failure file, its keys
    over the common ones).  The instruction section's jobs run through
    :mod:`fastmma.verify_device`; a section that runs otherwise overrides :meth:`device`, one
    whose reference is computed elsewhere :meth:`references`."""
    name = "?"
    replay = "fastmma conform FILE"  # how a failure file is replayed

    def missing(self) -> str | None:
        raise NotImplementedError

    def forms(self, full: bool) -> list[Form]:
        raise NotImplementedError

    def cases_per_style(self, level: str) -> int:
        return LEVELS[level][0]

    def reference_missing(self) -> str | None:
        """What fastmma's side lacks here (``--import`` on another machine): None, or a few words."""
        return None

    def sources(self, forms: list[Form]) -> list[str]:
        """CUDA sources of the forms' kernels, compiled side by side."""
        return []

    def jobs(self, form: Form, seed: int, per_style: int) -> list[dict]:
        base = [int(seed), zlib.crc32(form.name.encode())]
        return [FAMILIES[form.family].job(form, base + [i], per_style, style) for i, style in enumerate(STYLES)]

    def reference(self, form: Form, arrays: dict) -> dict:
        return FAMILIES[form.family].reference(form, arrays)

    def references(self, forms: list[Form], arrays: list[dict], jobs: int = 1, log=None) -> list[tuple[dict, float]]:
        """``(outputs, seconds)`` of :func:`compute` for each form's inputs, in ``jobs``
        processes (numba compiles each kernel the first time, in parallel there)."""
        if jobs > 1 and len(forms) > 1:
            import multiprocessing

            with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                return list(pool.map(compute, [self] * len(forms), forms, arrays))
        return [compute(self, f, a) for f, a in zip(forms, arrays)]

    def finish(self, form: Form, out: dict) -> dict:
        return FAMILIES[form.family].finish(form, out)

    def meta(self, form: Form) -> dict:
        return FAMILIES[form.family].meta(form)

    def device(self, sources: list[str], jobs: list[dict], log) -> list[dict]:
        """Every job's inputs and outputs (``{"inputs", "outputs"}``) from the GPU."""
        return run_jobs(sources, jobs, log)


def gpu_missing() -> str | None:
    """What is missing for a run on an sm_90 GPU through PyTorch: None, or a few words."""
    try:
        import torch
    except ImportError:
        return "PyTorch (import torch failed)"
    if not torch.cuda.is_available():
        return "a CUDA GPU (torch.cuda.is_available() is False)"
    cap = torch.cuda.get_device_capability(0)
    if cap != (9, 0):
        return f"an sm_90 GPU (H100/H200); device 0 is {torch.cuda.get_device_name(0)}, sm_{cap[0]}{cap[1]}"
    return None


class InstructionSection(Section):
    """Single wgmma, mma.sync and wmma instructions, kernels built with nvcc on the spot."""
    name = "instructions"

    def missing(self) -> str | None:
        why = gpu_missing()
        if why is None and find_nvcc() is None:
            return "nvcc (the CUDA compiler: on PATH or in $CUDA_HOME/bin)"
        return why

    def forms(self, full: bool) -> list[Form]:
        return [f for family in FAMILIES.values() for f in family.forms(full)]

    def sources(self, forms, parts: int = 8):
        groups = [forms[i::parts] for i in range(min(parts, len(forms)))]
        return ["".join(FAMILIES[f.family].kernel(kernel_name(f), f) for f in g) for g in groups]


# ---------------------------------------------------------------- whole Triton kernels


#: level -> launches of a Triton form a data style (each a whole GEMM of thousands of outputs)
TRITON_LEVELS = {"quick": 1, "full": 4}
TRITON_CANCEL = ("cancellation: operands within +-3 binades; C the negated D of a first run with C = 0 (a unit in "
                 "the last place off in half), or, where the kernel starts from tl.zeros, B's odd rows its even rows "
                 "and A's odd columns its even columns negated (a unit off in half), so that pairs of products cancel")


def triton_form(case: verify_triton.Case) -> Form:
    return Form("triton", "triton." + case.name, {"case": case})


def triton_job(case: verify_triton.Case, seed: list, count: int, style: str) -> dict:
    """``count`` launches of ``case`` in a data style: A, B and (where the kernel loads it) C
    drawn as :func:`drawn` draws the instructions' operands; cancellation as
    :data:`TRITON_CANCEL` says."""
    m, n, k = case.mnk
    store = verify_triton.STORAGE
    inputs = {"a": drawn(seed + [1], case.atype, (count, m, k), style, dtype=store[case.atype]),
              "b": drawn(seed + [2], case.btype, (count, k, n), style, dtype=store[case.btype])}
    if case.load_c:
        inputs["c"] = drawn(seed + [3], case.out, (count, m, n), style, "c", store[case.out])
    job = {"inputs": inputs, "plan": {"case": case.fields()}}
    if style == "cancel" and case.load_c:
        job["cancel"] = cancel_spec(seed + [9], case.out, "d", "c", zero=["c"])
    elif style == "cancel":
        inputs["a"] = {"paired": inputs["a"], "axis": -1, "negate": format_fields(case.atype), "seed": seed + [8]}
        inputs["b"] = {"paired": inputs["b"], "axis": -2}
    return job


class TritonSection(Section):
    """Whole Triton GEMM kernels (:mod:`fastmma.verify_triton`'s kernel and cases), compiled
    and run on the GPU, and run in Triton's interpreter under :func:`fastmma.triton.emulate` in
    worker processes (:class:`fastmma.verify_triton.Interpreter`): ``interpreter``, one to use
    for every form (the tests share one), else one a process of ``--jobs``."""
    name = "triton"
    replay = "put the file in tests/golden/triton; tests/test_triton.py replays it"

    def __init__(self, interpreter=None):
        self.interpreter = interpreter

    def missing(self) -> str | None:
        why = gpu_missing()
        if why:
            return why
        try:
            import triton  # noqa: F401
        except ImportError:
            return "Triton (import triton failed)"
        if os.environ.get("TRITON_INTERPRET", "0").strip().lower() not in ("", "0", "false", "off", "no"):
            return "a Triton that compiles for the GPU (TRITON_INTERPRET is set in this process: unset it)"
        return None

    def cases_per_style(self, level: str) -> int:
        return TRITON_LEVELS[level]

    def reference_missing(self) -> str | None:
        found = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is not None]
        return None if len(found) == 2 else "PyTorch and Triton here, for Triton's interpreter"

    def forms(self, full: bool) -> list[Form]:
        cases = verify_triton.CASES + verify_triton.CHECK_CASES
        return [triton_form(c) for c in cases if full or c.name in verify_triton.QUICK]

    def jobs(self, form: Form, seed: int, per_style: int) -> list[dict]:
        base = [int(seed), zlib.crc32(form.name.encode())]
        return [triton_job(form.spec["case"], base + [i], per_style, style) for i, style in enumerate(STYLES)]

    def device(self, sources: list[str], jobs: list[dict], log) -> list[dict]:
        return verify_triton.run_jobs(jobs, "cuda", log)

    def reference(self, form: Form, arrays: dict) -> dict:
        return self.references([form], [arrays])[0][0]

    def references(self, forms: list[Form], arrays: list[dict], jobs: int = 1, log=None) -> list[tuple[dict, float]]:
        """Each form in the interpreter, the forms taken in turn by ``jobs`` workers (at most 8:
        each holds torch and triton) or by the shared ``interpreter``."""
        if self.interpreter is not None:
            return self.interpreter.compute([f.spec["case"] for f in forms], arrays)
        todo, out = queue.SimpleQueue(), [None] * len(forms)
        for i in range(len(forms)):
            todo.put(i)

        def drain(_):
            with verify_triton.Interpreter() as worker:
                while True:
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    out[i] = worker.compute([forms[i].spec["case"]], [arrays[i]])[0]

        workers = max(1, min(jobs, len(forms), 8))
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(drain, range(workers)))
        return out

    def finish(self, form: Form, out: dict) -> dict:
        return out

    def meta(self, form: Form) -> dict:
        legend = {str(m): TRITON_CANCEL if style == "cancel" else text for style, (m, text) in STYLES.items()}
        return {**verify_triton.case_meta(form.spec["case"]), "mode_legend": legend}


#: The battery, in order.  A section whose :meth:`Section.missing` names something is
#: skipped (and said so in the report); the run exits 2 only when no section can run.
SECTIONS = [InstructionSection(), TritonSection()]


# ---------------------------------------------------------------- the battery


@dataclass
class FormResult:
    section: str
    form: Form
    arrays: dict  # inputs, every style's cases one after another
    gpu: dict
    cpu: dict
    styles: list  # style of each case
    seconds: float = 0.0

    @property
    def cases(self) -> int:
        return len(self.styles)

    @property
    def error(self) -> str | None:
        return self.cpu.get("error")

    def differ(self) -> dict:
        """output name -> bool[cases, ...] where the GPU and fastmma differ (where fastmma
        refused the form, every output)."""
        if self.error:
            return {k: np.ones(np.shape(v), bool) for k, v in self.gpu.items()}
        out = {}
        for k in self.cpu:
            g, c = np.asarray(self.gpu[k]), np.asarray(self.cpu[k])
            out[k] = np.ones(c.shape, bool) if g.shape != c.shape else g != c
        return out

    def failed_cases(self) -> np.ndarray:
        bad = np.zeros(self.cases, bool)
        for d in self.differ().values():
            bad |= d.reshape(self.cases, -1).any(axis=1)
        return np.nonzero(bad)[0]


def joined(parts: list[dict]) -> dict:
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


def compute(section: Section, form: Form, arrays: dict) -> tuple[dict, float]:
    """fastmma's outputs for a form's inputs (``{"error": text}`` where fastmma refuses them),
    and the seconds they took."""
    t0 = time.perf_counter()
    try:
        out = section.reference(form, arrays)
    except FastmmaError as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"}
    return out, time.perf_counter() - t0


def results(section: Section, forms: list[Form], per_style: int, done: list[dict], jobs: int = 1, log=None) -> list:
    """:class:`FormResult` of each form from its jobs' inputs and outputs (a job a style, in
    order), with fastmma's outputs computed by :meth:`Section.references` in ``jobs`` processes."""
    grouped = [done[i * len(STYLES):(i + 1) * len(STYLES)] for i in range(len(forms))]
    arrays = []
    for form, parts in zip(forms, grouped):
        a = joined([p["inputs"] for p in parts])
        a["mode"] = np.repeat([STYLES[s][0] for s in STYLES], per_style).astype(np.uint8)
        arrays.append(a)
    t0 = time.perf_counter()
    cpu = section.references(forms, arrays, jobs, log)
    if log:
        log(f"{section.name}: fastmma computed {len(forms)} forms in {time.perf_counter() - t0:.1f} s ({jobs} processes)")
    styles = [s for s in STYLES for _ in range(per_style)]
    return [FormResult(section.name, f, a, section.finish(f, joined([p["outputs"] for p in parts])), c, styles, secs)
            for f, a, parts, (c, secs) in zip(forms, arrays, grouped, cpu)]


def chosen_forms(section: Section, level: str, only=None) -> list[Form]:
    return [f for f in section.forms(LEVELS[level][1]) if only is None or any(s in f.name for s in only)]


def all_jobs(section: Section, forms: list[Form], seed: int, level: str) -> list[dict]:
    return [job for f in forms for job in section.jobs(f, seed, section.cases_per_style(level))]


def run_battery(level: str = "quick", seed: int = 0, sections=None, log=None, forms=None, jobs: int = 1) -> dict:
    """Run every section that can run: ``{"ran": [FormResult], "skipped": {section: missing}}``."""
    log = log or (lambda text: None)
    ran, skipped = [], {}
    for section in SECTIONS if sections is None else sections:
        why = section.missing()
        if why:
            skipped[section.name] = why
            log(f"{section.name}: skipped, missing {why}")
            continue
        chosen = chosen_forms(section, level, forms)
        done = section.device(section.sources(chosen), all_jobs(section, chosen, seed, level), log)
        ran += results(section, chosen, section.cases_per_style(level), done, jobs, log)
    return {"ran": ran, "skipped": skipped}


#: sections that ``--export`` writes, and the prefix of their result files
EXPORTED = {"instructions": "results", "triton": "triton-results"}


def exported_sections() -> list[Section]:
    return [InstructionSection(), TritonSection()]


def export(folder: Path, level: str, seed: int, forms=None) -> int:
    """The battery as jobs for a GPU machine without numba: ``python3
    fastmma/verify_device.py FOLDER FOLDER`` runs them there, ``fastmma verify --import
    FOLDER`` computes them with fastmma and reports.  ``jobs.json`` holds the instruction
    section's forms, CUDA sources and jobs at its top level and the Triton section's forms and
    jobs under ``"triton"``."""
    spec, count = {"level": level, "seed": seed}, 0
    for section in exported_sections():
        chosen = chosen_forms(section, level, forms)
        part = {"forms": [f.name for f in chosen], "sources": section.sources(chosen),
                "jobs": all_jobs(section, chosen, seed, level)}
        if section.name == "instructions":
            spec.update(part)
        else:
            spec[section.name] = part
        count += len(chosen)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "jobs.json").write_text(json.dumps(spec))
    return count


def load_done(folder: Path, prefix: str, count: int) -> list[dict] | None:
    """The inputs and outputs of ``count`` jobs from ``{prefix}.*.npz``; None where there are none."""
    shards = sorted(folder.glob(f"{prefix}.*.npz"))
    if not shards:
        return None
    done = [{"inputs": {}, "outputs": {}} for _ in range(count)]
    for path in shards:
        with np.load(path) as data:
            for key in data.files:
                i, part, name = key.split(".", 2)
                done[int(i)][part][name] = data[key]
    return done


def import_results(folder: Path, jobs: int = 1, log=None) -> tuple[dict, dict, str, int]:
    """``(battery result, device environment, level, seed)`` of an exported battery that the
    device half has run (``results.*.npz``, ``triton-results.*.npz`` and ``device.json`` in
    ``folder``); a section whose results are absent is skipped, with the device half's reason."""
    if not (folder / "jobs.json").exists() or not (folder / "device.json").exists():
        raise OperandError(f"--import {folder}: needs jobs.json (fastmma verify --export) and results.*.npz and "
                           f"device.json (python3 fastmma/verify_device.py {folder} {folder} on the GPU machine)")
    spec, env = json.loads((folder / "jobs.json").read_text()), json.loads((folder / "device.json").read_text())
    ran, skipped = [], {}
    for section in exported_sections():
        part = spec if section.name == "instructions" else spec.get(section.name, {"forms": [], "jobs": []})
        if not part["forms"]:
            continue
        by_name = {f.name: f for f in section.forms(True) + section.forms(False)}
        unknown = [name for name in part["forms"] if name not in by_name]
        if unknown:
            raise OperandError(f"--import {folder}: forms this fastmma does not have ({', '.join(unknown[:3])}); "
                               "export and import with the same fastmma")
        done = load_done(folder, EXPORTED[section.name], len(part["jobs"]))
        why = (env.get(f"{section.name}_skipped", f"its results ({EXPORTED[section.name]}.*.npz)") if done is None
               else section.reference_missing())
        if why:
            skipped[section.name] = why
            continue
        forms = [by_name[name] for name in part["forms"]]
        ran += results(section, forms, section.cases_per_style(spec["level"]), done, jobs, log)
    if not ran:
        raise OperandError(f"--import {folder}: nothing to compare: " + "; ".join(
            f"{name}: missing {why}" for name, why in skipped.items()) + f" (python3 fastmma/verify_device.py {folder} "
            f"{folder} on the GPU machine writes the results)")
    return {"ran": ran, "skipped": skipped}, env, spec["level"], spec["seed"]


# ---------------------------------------------------------------- report and failure files


EXAMPLES = 3  # failing cases shown per form
SHOWN_WORDS = 8  # input words and differing outputs shown per case


def _hex_words(x: np.ndarray, most: int = SHOWN_WORDS) -> str:
    flat = np.asarray(x).reshape(-1)
    flat = flat.view(f"u{flat.dtype.itemsize}") if flat.dtype.kind == "i" else flat  # an s32's bits, not its value
    width = flat.dtype.itemsize * 2
    text = " ".join(f"{int(v):0{width}x}" for v in flat[:most])
    return text + (f" ... ({flat.size} in all)" if flat.size > most else "")


def form_entry(res: FormResult, failure_file: str | None, replay: str = Section.replay) -> dict:
    differ = res.differ()
    entry = {"section": res.section, "form": res.form.name, "family": res.form.family, "cases": res.cases,
             "outputs": int(sum(np.asarray(v).size for v in res.gpu.values())),
             "mismatches": int(sum(int(d.sum()) for d in differ.values())),
             "failed_cases": len(res.failed_cases()), "cpu_seconds": round(res.seconds, 3)}
    examples = []
    for case in res.failed_cases()[:EXAMPLES]:
        ex = {"case": int(case), "style": res.styles[case],
              "inputs": {k: _hex_words(v[case]) for k, v in res.arrays.items() if k != "mode"}, "outputs": []}
        for k, d in differ.items():
            for idx in np.argwhere(d[case])[:0 if res.error else SHOWN_WORDS]:
                idx = tuple(int(i) for i in idx)
                g, c = (_hex_words(np.asarray(v[k])[case][idx]) for v in (res.gpu, res.cpu))
                ex["outputs"].append({"output": k, "index": list(idx), "gpu": g, "fastmma": c})
        examples.append(ex)
    entry["examples"] = examples
    if res.error:
        entry["fastmma_error"] = res.error
    if failure_file:
        entry["failure_file"], entry["replay"] = failure_file, replay
    return entry


def write_failures(res: FormResult, section: Section, folder: Path, env: dict) -> Path:
    """The form's failing cases with the GPU's outputs, as a recording (FORMAT v1; the
    section's meta over the common keys)."""
    sel = res.failed_cases()
    arrays = {k: np.asarray(v)[sel] for k, v in res.arrays.items()}
    arrays.update({k: np.asarray(v)[sel] for k, v in res.gpu.items()})
    meta = {"format_version": 1, "family": res.form.family, "variant": res.form.name, "target": "sm_90a",
            "split": "verify", "case_index": [int(i) for i in sel], "n_cases": int(len(sel)),
            "mode_legend": {str(m): text for m, text in STYLES.values()}, **{f"device_{k}": v for k, v in env.items()},
            "gpu": env.get("gpu"), "driver_version": env.get("driver"), "date_utc": env.get("date_utc"),
            **section.meta(res.form)}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{res.form.name}.npz"
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8).copy()
    np.savez_compressed(path, **arrays)
    return path


def report(result: dict, env: dict, level: str, seed: int, failures: Path | None, sections=None) -> dict:
    by_name = {s.name: s for s in (SECTIONS if sections is None else sections)}
    forms = []
    for res in result["ran"]:
        path = None
        if failures is not None and len(res.failed_cases()):
            path = str(write_failures(res, by_name[res.section], failures, env))
        forms.append(form_entry(res, path, by_name[res.section].replay))
    totals = {k: sum(f[k] for f in forms) for k in ("cases", "outputs", "mismatches", "failed_cases")}
    totals["forms"], totals["forms_failed"] = len(forms), sum(1 for f in forms if f["failed_cases"])
    return {"environment": env, "level": level, "seed": seed, "skipped": result["skipped"], "totals": totals,
            "forms": forms, "failures": str(failures) if failures and totals["failed_cases"] else None}


def render(rep: dict) -> str:
    env = rep["environment"]
    lines = ["fastmma verify: " + ", ".join(f"{k} {v}" for k, v in env.items() if v is not None),
             f"level {rep['level']}, seed {rep['seed']}"]
    lines += [f"skipped section {name}: missing {why}" for name, why in rep["skipped"].items()]
    lines.append(f"{'form':<64} {'cases':>6} {'outputs':>9} {'mismatches':>10}")
    for f in rep["forms"]:
        lines.append(f"{f['form']:<64} {f['cases']:>6} {f['outputs']:>9} {f['mismatches']:>10}"
                     + ("  FAIL" if f["failed_cases"] else ""))
        if f.get("fastmma_error"):
            lines.append(f"    fastmma refused the form: {f['fastmma_error']}")
        for ex in f["examples"]:
            lines.append(f"    case {ex['case']} ({ex['style']}):")
            lines += [f"      {k}: {v}" for k, v in ex["inputs"].items()]
            lines += [f"      {o['output']}[{', '.join(map(str, o['index']))}]: gpu {o['gpu']} fastmma {o['fastmma']}"
                      for o in ex["outputs"]]
        if f.get("failure_file"):
            lines.append(f"    failing cases written to {f['failure_file']} (replay: {f['replay']})")
    t = rep["totals"]
    lines.append(f"total: {t['forms']} forms, {t['cases']} cases, {t['outputs']} outputs, {t['mismatches']} mismatches "
                 f"in {t['failed_cases']} cases of {t['forms_failed']} forms")
    return "\n".join(lines)


def main(args, sections=None, out=None) -> int:
    """``fastmma verify``: 0 when every output matches, 1 on any mismatch, 2 when no section can run."""
    from . import __version__

    out = out or sys.stdout
    sections = SECTIONS if sections is None else sections
    level = "full" if args.full else "quick"
    t0 = time.perf_counter()
    log = (lambda text: print(f"[{time.perf_counter() - t0:6.1f}s] {text}", file=sys.stderr, flush=True))
    if args.export:
        count = export(Path(args.export), level, args.seed, args.only)
        print(f"{count} forms exported to {args.export}; on the GPU machine: python3 fastmma/verify_device.py "
              f"{args.export} {args.export}; then here: fastmma verify --import {args.export}", file=out)
        return 0
    if args.import_:
        result, env, level, seed = import_results(Path(args.import_), args.jobs, log)
        env["host_of_fastmma"] = platform.node() or "?"
    else:
        missing = {s.name: s.missing() for s in sections}
        if all(missing.values()):
            print("fastmma verify: cannot run: missing " + "; ".join(f"{why} ({name})" for name, why in missing.items()),
                  file=sys.stderr)
            return 2
        env, seed = device_info(), args.seed
        result = run_battery(level, seed, sections, log, forms=args.only, jobs=args.jobs)
    env = dict(env, fastmma=__version__, date_utc=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    failures = Path(args.failures or str(Path(args.report or "fastmma-verify").with_suffix("")) + "-failures")
    rep = report(result, env, level, seed, failures, sections)
    rep["seconds"] = round(time.perf_counter() - t0, 1)
    text = render(rep) + f"\n({rep['seconds']} s)"
    print(text, file=out)
    if args.report:
        Path(args.report).with_suffix(".json").write_text(json.dumps(rep, indent=1))
        Path(args.report).with_suffix(".txt").write_text(text + "\n")
    return 1 if rep["totals"]["failed_cases"] else 0


def add_parser(sub) -> None:
    """The ``verify`` subcommand of :mod:`fastmma.cli`."""
    p = sub.add_parser("verify", help="run single instructions and Triton kernels on this machine's sm_90 GPU and compare "
                       "every bit")
    level = p.add_mutually_exclusive_group()
    level.add_argument("--quick", action="store_true", help="a spread of the forms, 8 cases a data style (default)")
    level.add_argument("--full", action="store_true", help="every form, 64 cases a data style")
    p.add_argument("--seed", type=int, default=0, help="seed of the random cases (default 0)")
    p.add_argument("--report", metavar="FILE", help="also write the report to FILE.txt and FILE.json")
    p.add_argument("--failures", metavar="DIR", help="folder for the failing cases (default: next to the report)")
    p.add_argument("--only", nargs="+", metavar="TEXT", help="only the forms whose name contains one of these")
    p.add_argument("--export", metavar="DIR", help="write the battery's jobs and kernels' sources to DIR, for a GPU "
                   "machine without numba (python3 fastmma/verify_device.py DIR DIR runs them there)")
    p.add_argument("--import", dest="import_", metavar="DIR", help="report on DIR, exported and run by the device half")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes that draw the cases and compute them with fastmma (default: one a core)")
    p.set_defaults(func=main)
