"""Triton's ``tl.dot`` with the H100's numbers, on the CPU, under Triton's interpreter.

::

    import os
    os.environ["TRITON_INTERPRET"] = "1"      # before triton is imported
    import fastmma.triton

    with fastmma.triton.emulate():            # or emulate(family="wgmma" | "mma")
        kernel[grid](a_cpu, b_cpu, c_cpu, ...)

Inside :func:`emulate`, every ``tl.dot`` that Triton's interpreter runs (its
``InterpreterBuilder.create_dot``, by default ``np.matmul(a, b) + acc``) computes what the
kernel that Triton 3.6 compiles for ``sm_90a`` computes on an H100: a k-loop of the matrix
instruction Triton emits for that dot, through :func:`fastmma.matmul`, or the FMA chain of an
``input_precision="ieee"`` fp32 dot.  Which instruction, and in what order, is the data of
:data:`RULES`, read off the PTX of the kernels recorded in ``tests/golden/triton`` (their
``meta.ptx_matrix_instructions`` and ``meta.ptx_op_counts``; ``tools/record/triton_kernels.py``).

**What the PTX shows** (Triton 3.6.0, H100, 2026-12-07; the rules as data in :data:`RULES`):

- 4 or 8 warps and a block of whole 64-row tiles (N a multiple of 8, K at least one
  instruction): each dot is one commit group of ``wgmma.mma_async`` m64nNk16 (f16, bf16),
  k8 (tf32: the fp32 bits go to the instruction as they are, no ``cvt``) or k32 (e4m3/e5m2 any
  pair, s8 without ``.satfinite``), N the block's N up to 256, in increasing k; a ``tl.zeros``
  accumulator is scale-d false.  fp8 into fp32 with ``max_num_imprecise_acc`` <= BLOCK_K
  sums groups of ceil(max/32) instructions on their own and adds each with ``add.f32``;
  below 32 the dot takes mma.sync.
- Otherwise ``mma.sync``: m16n8k16 f16/bf16, m16n8k8 tf32 (no ``cvt``), m16n8k32 s8
  ``.satfinite``, f64 m16n8k16 (always, also with 4 warps); fp8 is converted to f16
  (``cvt.rn.f16x2.e4m3x2``/``e5m2x2``) and runs m16n8k16 f16, its k in the fp8 layout's slots
  (:data:`K_SLOTS`).
- ``"ieee"`` fp32: ``fma.rn.f32`` in increasing k, one chain per element (:func:`fma_chain`).
- ``"tf32x3"``: :data:`TF32X3_ORDER`, with ``cvt.rna.tf32.f32``, ``sub.f32`` and ``add.f32``.

**TRITON_INTERPRET** must be set (to 1) before triton is first imported: Triton decides at
each ``@triton.jit`` decoration, its own ``tl.zeros`` and friends included, whether a function
is compiled or interpreted.  :func:`emulate` raises :class:`TritonEmulationError` on entry when
``TRITON_INTERPRET`` is not set or triton.language was imported without it, and a kernel
decorated while it was unset (a compiled ``JITFunction``) raises the same error when it is
launched inside :func:`emulate`: setting the variable later does not turn an existing kernel
into an interpreted one, so fastmma does not set it for you.

**What the interpreter cannot see.** ``num_warps`` is read from the launch (``kernel[grid](...,
num_warps=8)``; Triton's default is 4); ``emulate(family=...)`` overrides the choice between
wgmma and mma.sync for every tensor-core dot.  A zero accumulator made by ``tl.zeros`` or
``tl.full(..., 0)`` (or a ``tl.dot`` with no ``acc``) is taken for Triton's constant zero
accumulator, which wgmma skips (scale-d false); a zero accumulator computed by the kernel is
read as data.  ``acc += tl.dot(a, b)`` is fused into ``tl.dot(a, b, acc)`` where Triton's
``CombineDotAdd`` pattern fuses it (every dot except fp8 on sm_90, whose default
``max_num_imprecise_acc`` is not 0).

Anything the H100 cannot run (``tl.dot_scaled``, AMD's fp8 variants, dtype pairs Triton
does not lower for sm_90a) raises :class:`UnsupportedDotError`, naming the pair and what is
supported; nothing falls back to numpy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from typing import NamedTuple

import numpy as np

from .errors import FastmmaError, UnsupportedInstructionError


class TritonEmulationError(FastmmaError, RuntimeError):
    """Triton is not in interpreter mode, so :func:`emulate` cannot reach its ``tl.dot``."""


class UnsupportedDotError(UnsupportedInstructionError):
    """A ``tl.dot`` (or ``tl.dot_scaled``) that Triton cannot compile for an H100."""


#: Triton's dtype names -> fastmma's type names, for the dtypes an H100 dot takes.
DTYPES = {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp8e4nv": "e4m3", "fp8e5": "e5m2", "int8": "s8",
          "fp64": "f64"}
FP8 = ("e4m3", "e5m2")
ACCUMULATORS = {"fp32": "f32", "fp16": "f16", "int32": "s32", "fp64": "f64"}


class DotRule(NamedTuple):
    """How one class of ``tl.dot`` runs on sm_90a (Triton 3.6), as its recorded PTX shows.

    ``instruction`` is the PTX instruction of the dot's k-loop, for :func:`fastmma.matmul`,
    with ``{n}`` (the wgmma's N: the block's N up to 256, which does not change the numbers),
    ``{d}`` (the accumulator type) and ``{a}``/``{b}`` (the operand types) to fill in; None
    for the FMA path.  ``k`` is its K, the step of the loop over the dot's K, in increasing k.
    ``convert``: the type the operands are converted to first (exactly) where Triton does
    so.  ``recorded`` names the files of ``tests/golden/triton`` whose PTX
    (``meta.ptx_matrix_instructions``, ``meta.ptx_op_counts``) shows the rule and whose output
    bits test it."""

    instruction: str | None
    k: int
    recorded: tuple[str, ...]
    convert: str | None = None


_WGMMA = "wgmma.mma_async.sync.aligned.m64n{n}"
_MMA = "mma.sync.aligned.m16n8"

#: (family, operand class) -> rule.  Operand classes: the fastmma type of both operands, "fp8"
#: for any pair of e4m3/e5m2, "tf32" and "tf32x3" for fp32 with that input_precision, "ieee"
#: for fp32 with input_precision "ieee" (FMA units, whatever the family).  f64 dots take
#: mma.sync whatever the block (the "f64" recording has 4 warps and a 64-row block).
RULES = {
    ("wgmma", "f16"): DotRule(_WGMMA + "k16.{d}.f16.f16", 16,
                              ("f16.f32", "f16.f32.zero_init", "f16.f32.acc_add", "f16.f16", "f16.long_k",
                               "f16.w8.bm128.bn256")),
    ("wgmma", "bf16"): DotRule(_WGMMA + "k16.f32.bf16.bf16", 16, ("bf16.f32",)),
    ("wgmma", "tf32"): DotRule(_WGMMA + "k8.f32.tf32.tf32", 8, ("tf32", "tf32.w8.bm128.bn128")),
    ("wgmma", "tf32x3"): DotRule(_WGMMA + "k8.f32.tf32.tf32", 8, ("tf32x3",)),
    ("wgmma", "fp8"): DotRule(_WGMMA + "k32.{d}.{a}.{b}", 32,
                              ("e4m3.e4m3", "e5m2.e5m2", "e4m3.e5m2", "e5m2.e4m3", "e4m3.imprecise32",
                               "e4m3.imprecise64.bk128", "e4m3.acc_add", "e4m3.f16", "e4m3.long_k")),
    ("wgmma", "s8"): DotRule(_WGMMA + "k32.s32.s8.s8", 32, ("s8",)),
    ("mma", "f16"): DotRule(_MMA + "k16.row.col.{d}.f16.f16.{d}", 16,
                            ("mma.f16.f32", "mma.f16.f16", "mma.f16.f32.zero_init", "mma.w4.bm16")),
    ("mma", "bf16"): DotRule(_MMA + "k16.row.col.f32.bf16.bf16.f32", 16, ("mma.bf16.f32",)),
    ("mma", "tf32"): DotRule(_MMA + "k8.row.col.f32.tf32.tf32.f32", 8, ("mma.tf32",)),
    ("mma", "tf32x3"): DotRule(_MMA + "k8.row.col.f32.tf32.tf32.f32", 8, ("mma.tf32x3",)),
    # cvt.rn.f16x2.e4m3x2 / .e5m2x2 (exact), then the f16 mma.sync
    ("mma", "fp8"): DotRule(_MMA + "k16.row.col.{d}.f16.f16.{d}", 16, ("mma.e4m3.e4m3", "mma.e5m2.e4m3",
                                                                       "mma.e4m3.f16"), convert="f16"),
    ("mma", "s8"): DotRule(_MMA + "k32.row.col.satfinite.s32.s8.s8.s32", 32, ("mma.s8",)),
    ("mma", "f64"): DotRule(_MMA + "k16.row.col.f64.f64.f64.f64", 16, ("f64",)),
    ("fma", "ieee"): DotRule(None, 1, ("ieee", "mma.ieee")),
}

#: Triton's ``"tf32x3"`` (its F32DotTC pass, as the recorded TTGIR shows): with
#: ``big = cvt.rna.tf32.f32(x)`` and ``small = x - big`` (``sub.f32``) for A and B,
#: ``d = dot(a_small, b_big, 0)``, ``d = dot(a_big, b_small, d)``, NaNs of d set to +0,
#: ``d = dot(a_big, b_big, d)``, and the result is ``d + acc`` (``add.f32``).
TF32X3_ORDER = (("small", "big"), ("big", "small"), ("big", "big"))

def canonical_nan(x: np.ndarray) -> np.ndarray:
    """``x`` (fp32 or f16) with its NaNs replaced by the canonical NaN (0x7fffffff, 0x7fff)
    that the H100's arithmetic gives."""
    nan = np.isnan(x)
    if not nan.any():
        return x
    bits = np.array(x).view(f"u{x.itemsize}")
    bits[nan] = (1 << (8 * x.itemsize - 1)) - 1
    return bits.view(x.dtype)


def fadd32(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``add.f32`` (round to nearest even, subnormals kept, canonical NaN)."""
    with np.errstate(all="ignore"):
        return canonical_nan(np.add(x, y, dtype=np.float32))


def fsub32(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``sub.f32`` (round to nearest even, subnormals kept, canonical NaN)."""
    with np.errstate(all="ignore"):
        return canonical_nan(np.subtract(x, y, dtype=np.float32))


def rna_tf32(x: np.ndarray) -> np.ndarray:
    """``cvt.rna.tf32.f32``: a finite fp32 rounded to 10 fraction bits, to nearest, ties away
    from zero (the low 13 bits cleared; a carry may reach the exponent, up to infinity); an
    infinity or NaN has its low 13 bits cleared, so a NaN whose payload lies in them becomes an
    infinity of its sign (recorded: ``mma.tf32x3`` case 2, B[21, 12] = 0xff800b3c gave -inf)."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    rounded = np.where(np.isfinite(x), bits + np.uint32(0x1000), bits).astype(np.uint32)
    return (rounded & np.uint32(0xFFFFE000)).view(np.float32)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``fma.rn.f32(a, b, c)``, elementwise: one rounding of the exact ``a*b + c``.

    The product is exact in float64; the sum is rounded to odd in float64 (its error found
    by TwoSum) and then to float32, which rounds correctly since 53 >= 2*24 + 2."""
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c64 = c.astype(np.float64)
        s = p + c64
        t = s - p
        err = (p - (s - t)) + (c64 - t)
        bits = s.view(np.int64)
        sticky = (err != 0) & ((bits & 1) == 0) & np.isfinite(s)
        bits = np.where(sticky, bits + np.where((err > 0) == (s > 0), 1, -1), bits)
        return canonical_nan(bits.view(np.float64).astype(np.float32))


def fma_chain(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """An ``input_precision="ieee"`` fp32 dot: for k = 0, 1, ..., K-1 in turn, every element's
    accumulator becomes ``fma.rn.f32(a[m, k], b[k, n], acc)``, starting from ``c``."""
    acc = np.array(c, np.float32)
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    for k in range(a.shape[-1]):
        acc = fma32(a[..., :, k:k + 1], b[..., k:k + 1, :], acc)
    return acc


class Dot(NamedTuple):
    """One ``tl.dot`` as fastmma computes it: operands as numpy arrays of their fastmma types
    (raw bits for bf16 and fp8), the accumulator ``c`` (None: Triton's constant zero), the
    fastmma type names, and Triton's ``input_precision`` and ``max_num_imprecise_acc``."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray | None
    atype: str
    btype: str
    dtype: str
    precision: str = "tf32"
    max_num_imprecise_acc: int = 2 ** 30


def operand_class(atype: str, btype: str, precision: str) -> str:
    """The key of :data:`RULES` for a dtype pair; :class:`UnsupportedDotError` for a pair that
    Triton does not lower for sm_90a."""
    if atype in FP8 and btype in FP8:
        return "fp8"
    if atype == btype == "f32":
        return precision
    if atype == btype and atype in ("f16", "bf16", "s8", "f64"):
        return atype
    raise UnsupportedDotError(
        f"tl.dot of {atype} x {btype}: sm_90a runs f16 x f16, bf16 x bf16, fp32 x fp32 (tf32, tf32x3 or "
        f"ieee), int8 x int8, f64 x f64 and any pair of e4m3/e5m2 (float8e4nv/float8e5)")


def choose_family(dot: Dot, num_warps: int = 4, family: str | None = None) -> str:
    """``"wgmma"``, ``"mma"`` or ``"fma"``: Triton's choice for this dot (its AccelerateMatmul
    pass: MMAv3 where the block is a whole number of 64 x 8 tiles of 4 warps, K covers one
    instruction, the dot is 2-D and an fp8 dot accumulating in fp32 may run 32 products
    imprecisely; MMAv2 otherwise); ``family`` overrides it for tensor-core dots."""
    cls = operand_class(dot.atype, dot.btype, dot.precision)
    if cls == "ieee":
        return "fma"
    if cls == "f64":
        return "mma"
    if family is not None:
        return family
    m, k = dot.a.shape[-2:]
    n = dot.b.shape[-1]
    bits = {"e4m3": 8, "e5m2": 8, "s8": 8, "f16": 16, "bf16": 16, "f32": 32}[dot.atype]
    fp8_precise = cls == "fp8" and dot.dtype == "f32" and dot.max_num_imprecise_acc < 32
    ok = dot.a.ndim == 2 and num_warps % 4 == 0 and m % 64 == 0 and n % 8 == 0 and k >= 256 // bits
    return "wgmma" if ok and not fp8_precise else "mma"


def _instruction_n(n: int) -> int:
    """The N of the wgmma Triton picks for a block N (the largest multiple of 8 up to 256 that
    divides it); the numbers do not depend on it."""
    return next(w for w in range(min(256, n - n % 8), 7, -8) if n % w == 0) if n >= 8 else 8


def compute(dot: Dot, family: str) -> np.ndarray:
    """D of ``dot`` as the H100 computes it on ``family``'s path (:data:`RULES`)."""
    from .gemm import matmul
    cls = operand_class(dot.atype, dot.btype, dot.precision)
    shape = dot.a.shape[:-1] + dot.b.shape[-1:]
    if family == "fma" or cls == "ieee":
        return fma_chain(dot.a, dot.b, np.zeros(shape, np.float32) if dot.c is None else dot.c)
    rule = RULES[family, cls]
    inst = rule.instruction.format(n=_instruction_n(dot.b.shape[-1]), d=dot.dtype, a=dot.atype, b=dot.btype)
    a, b = (_converted(dot.a, dot.atype, rule.convert), _converted(dot.b, dot.btype, rule.convert))
    if rule.convert:
        a, b = _k_slots(a, b)
    # mma.sync has no scale-d: Triton's constant zero accumulator is registers of zeros there.
    c = dot.c if dot.c is not None or family == "wgmma" else np.zeros(shape, _STORAGE[dot.dtype])
    if cls == "tf32x3":
        return _tf32x3(a, b, dot.c if dot.c is not None else np.zeros(shape, np.float32), inst, family)
    if family == "wgmma" and cls == "fp8" and dot.dtype == "f32" and dot.max_num_imprecise_acc <= a.shape[-1]:
        return _partial_sums(a, b, c, inst, rule.k * max(1, -(-dot.max_num_imprecise_acc // rule.k)))
    return matmul(a, b, c, instruction=inst)


#: Where the fp8 dots that mma.sync runs in f16 put each k: their operands keep the fp8
#: layout (kWidth 4), so the two m16n8k16 of each block of 32 k share its k out: slot s of
#: instruction i (``K_SLOTS[16 i + s]``) takes k ``16 (s // 8) + 4 q + 2 i + s % 2``, q = (s % 8) // 2.
K_SLOTS = np.array([16 * (s // 8) + 4 * ((s % 8) // 2) + 2 * i + s % 2 for i in range(2) for s in range(16)])


def _k_slots(a, b):
    """A and B with K (zero-padded to blocks of 32) reordered into :data:`K_SLOTS` order."""
    k = a.shape[-1]
    pad = -k % 32
    if pad:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (pad,), a.dtype)], axis=-1)
        b = np.concatenate([b, np.zeros(b.shape[:-2] + (pad, b.shape[-1]), b.dtype)], axis=-2)
    order = (np.arange(0, k + pad, 32)[:, None] + K_SLOTS[None, :]).reshape(-1)
    return np.ascontiguousarray(a[..., order]), np.ascontiguousarray(b[..., order, :])


def _converted(x, name, to):
    if to is None:
        return x
    import ml_dtypes
    return x.view(getattr(ml_dtypes, {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[name])).astype(np.float16)


_STORAGE = {"f32": np.float32, "f16": np.float16, "s32": np.int32, "f64": np.float64}


def _partial_sums(a, b, c, inst: str, step: int):
    """wgmma fp8 into fp32 with ``max_num_imprecise_acc`` <= the dot's K: Triton's MMAv3
    lowering runs the k-loop in groups of ``ceil(max_num_imprecise_acc / 32)`` instructions
    (``step`` elements of K), each group on a fresh accumulator (scale-d false), and adds each
    group's sum to the dot's accumulator with ``add.f32``; a constant zero C takes the first
    group's sum as it is."""
    from .gemm import matmul
    d = c
    for k0 in range(0, a.shape[-1], step):
        part = matmul(a[..., k0:k0 + step], b[..., k0:k0 + step, :], None, instruction=inst)
        d = part if d is None else fadd32(d, part)
    return d


def _tf32x3(a, b, acc, inst: str, family: str):
    """Triton's three tf32 dots on the split operands (:data:`TF32X3_ORDER`), then ``+ acc``."""
    from .gemm import matmul
    a_big, b_big = rna_tf32(a), rna_tf32(b)
    parts = {"big": (a_big, b_big), "small": (fsub32(a, a_big), fsub32(b, b_big))}
    d = None if family == "wgmma" else np.zeros(acc.shape, np.float32)  # the first dot's constant zero
    for step, (left, right) in enumerate(TF32X3_ORDER):
        if step == 2:
            d = np.where(np.isnan(d), np.float32(0), d)
        d = matmul(parts[left][0], parts[right][1], d, instruction=inst)
    return fadd32(d, acc)


# ---------------------------------------------------------------------------------------------
# The interpreter's side: what emulate() patches, and restores.

class _State(threading.local):
    num_warps = 4


_LAUNCH = _State()
_LOCK = threading.RLock()
_FAMILIES: list = []  # one entry per open emulate(), innermost last
_SAVED: list = []     # (object, attribute, original) of the patches in force
ZERO_TAG = "fastmma_constant_zero"
PENDING_TAG = "fastmma_fusable_dot"
DOT_TAG = "fastmma_dot_result"
FAMILIES = ("wgmma", "mma")


def _interpret_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


@contextlib.contextmanager
def emulate(family: str | None = None):
    """Run every ``tl.dot`` of Triton's interpreter with the H100's numbers (module docstring).

    ``family``: None (Triton's choice from the block shape, dtypes and the launch's
    ``num_warps``), ``"wgmma"`` or ``"mma"`` (every tensor-core dot on that path; fp32
    ``"ieee"`` dots stay on the FMA path, f64 dots on mma.sync).  Restores Triton's own
    functions on exit, also after an exception; nested uses stack, the innermost ``family``
    in force.
    """
    if family is not None and family not in FAMILIES:
        raise UnsupportedDotError(f"emulate(family={family!r}): family must be None, 'wgmma' or 'mma'")
    if not _interpret_requested():
        raise TritonEmulationError(
            "fastmma.triton.emulate() runs tl.dot inside Triton's interpreter: set TRITON_INTERPRET=1 "
            "before the @triton.jit kernels are defined (TRITON_INTERPRET is "
            f"{os.environ.get('TRITON_INTERPRET')!r})")
    _check_language()
    with _LOCK:
        if not _FAMILIES:
            _install()
        _FAMILIES.append(family)
    try:
        yield
    finally:
        with _LOCK:
            _FAMILIES.pop()
            if not _FAMILIES:
                _uninstall()


_MISSING = object()


def _check_language():
    """triton.language's own @jit functions (``tl.zeros``...) are interpreted only if
    TRITON_INTERPRET was set when triton was first imported."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    if not isinstance(tl.zeros, InterpretedFunction):
        raise TritonEmulationError(
            "triton was imported before TRITON_INTERPRET=1 was set, so triton.language's functions (tl.zeros...) "
            "are compiled ones that the interpreter cannot call: set TRITON_INTERPRET=1 before importing triton")


def _set(obj, name, value):
    _SAVED.append((obj, name, getattr(obj, name, _MISSING)))
    setattr(obj, name, value)


def _install():
    import triton.runtime.interpreter as interp
    from triton.runtime.jit import JITFunction
    builder_cls = interp.InterpreterBuilder
    originals = {name: getattr(builder_cls, name) for name in ("create_splat", "create_fadd", "create_add")}
    _set(builder_cls, "create_dot", _create_dot)
    _set(builder_cls, "create_dot_scaled", _create_dot_scaled)
    _set(builder_cls, "create_splat", lambda self, ret_ty, arg: _tag_zero(originals["create_splat"](self, ret_ty, arg)))
    _set(builder_cls, "create_fadd", lambda self, x, y: _fused_add(originals["create_fadd"], self, x, y))
    _set(builder_cls, "create_add", lambda self, x, y: _fused_add(originals["create_add"], self, x, y))
    builder = interp.interpreter_builder
    # sm_90's default (Triton's CUDA backend), so an fp8 dot without the argument is told apart
    # from one that passes max_num_imprecise_acc=0.
    _set(builder, "options", dataclasses.replace(builder.options, max_num_imprecise_acc_default=2 ** 30))
    grid_call = interp.GridExecutor.__call__
    _set(interp.GridExecutor, "__call__", lambda self, *args, **kwargs: _launch(grid_call, self, args, kwargs))
    patch_tensor = interp._patch_lang_tensor
    _set(interp, "_patch_lang_tensor", lambda tensor, scope: _patch_index(patch_tensor, tensor, scope))
    _set(JITFunction, "run", _compiled_kernel)


def _uninstall():
    while _SAVED:
        obj, name, original = _SAVED.pop()
        if original is _MISSING:  # Triton 3.6's interpreter has no create_dot_scaled
            delattr(obj, name)
        else:
            setattr(obj, name, original)


def _launch(call, executor, args, kwargs):
    previous = _LAUNCH.num_warps
    _LAUNCH.num_warps = kwargs.get("num_warps") or 4
    try:
        return call(executor, *args, **kwargs)
    finally:
        _LAUNCH.num_warps = previous


def _patch_index(patch_tensor, tensor, scope):
    """Triton's own patches, then a ``__index__`` that numpy >= 2.4 accepts (Triton 3.6 calls
    ``int()`` on a one-element array, which such numpy refuses, so ``range(0, K, BK)`` with a
    run-time K fails in the interpreter)."""
    patch_tensor(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))


def _compiled_kernel(self, *args, **kwargs):
    raise TritonEmulationError(
        f"kernel {getattr(self, '__name__', self)!r} was compiled for a GPU, not interpreted: set TRITON_INTERPRET=1 "
        "before its @triton.jit decorator runs, so that fastmma.triton.emulate() can run its tl.dot")


def _tag_zero(handle):
    data = np.asarray(handle.data)
    if data.dtype.kind in "fiu" and data.size and not np.any(data.view(np.uint8)):
        handle.set_attr(ZERO_TAG, True)
    return handle


def _fused_add(add, builder, x, y):
    """``acc + tl.dot(a, b)`` as Triton's CombineDotAdd pattern computes it: ``tl.dot(a, b, acc)``;
    where Triton keeps the add (fp8), an ``add.f32``/``add.f16``, whose NaN is the canonical one."""
    for dot_handle, acc in ((y, x), (x, y)):
        fuse = getattr(dot_handle, "attr", {}).get(PENDING_TAG)
        if fuse is not None and np.shape(acc.data) == np.shape(dot_handle.data):
            return fuse(acc)
    if not any(getattr(h, "attr", {}).get(DOT_TAG) for h in (x, y)):
        return add(builder, x, y)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is a NaN here, as on the GPU
        total = add(builder, x, y)
    if total.data.dtype.kind == "f":
        total.data = canonical_nan(total.data)
    return total



def _type_name(tl_dtype) -> str:
    name = getattr(tl_dtype, "name", str(tl_dtype))
    return DTYPES.get(name, name)


def _create_dot_scaled(self, *args, **kwargs):
    raise UnsupportedDotError(
        "tl.dot_scaled (microscaled mxfp4/mxfp8 operands) has no sm_90a instruction that fastmma models: the H100 "
        "runs tl.dot of f16, bf16, fp32 (tf32, tf32x3, ieee), f64, int8 and e4m3/e5m2 operands")


def _create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    from triton.runtime.interpreter import TensorHandle
    atype, btype = _type_name(a.dtype), _type_name(b.dtype)
    operand_class(atype, btype, "tf32")  # an error for a pair sm_90a has no dot for
    out = d.dtype.scalar
    zero = bool(getattr(d, "attr", {}).get(ZERO_TAG))
    dot = Dot(np.asarray(a.data), np.asarray(b.data), None if zero else np.asarray(d.data), atype, btype,
              ACCUMULATORS[out.name], getattr(input_precision, "name", str(input_precision)).lower(),
              int(max_num_imprecise_acc))
    family = choose_family(dot, _LAUNCH.num_warps, _FAMILIES[-1] if _FAMILIES else None)
    result = TensorHandle(np.asarray(compute(dot, family)).astype(d.data.dtype, copy=False), out)
    result.set_attr(DOT_TAG, True)
    if zero and (dot.dtype == "s32" or dot.max_num_imprecise_acc == 0):
        result.set_attr(PENDING_TAG, lambda acc: _create_dot(self, a, b, acc, input_precision, max_num_imprecise_acc))
    return result
