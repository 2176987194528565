"""PyTorch's CPU matmuls with the numbers of a tensor-core k-loop: ``fastmma.torch.emulate``.

::

    import fastmma.torch
    with fastmma.torch.emulate() as mode:
        y = model(x)
        y.sum().backward()
    print(mode.report())

What it is.  :func:`emulate` is a :class:`torch.utils._python_dispatch.TorchDispatchMode`.
A dispatch mode sees ATen operators below autograd, so it sees the products of the forward
pass *and* those autograd's backward pass issues (``grad @ W``, ``x.T @ grad``), and it sees
them after PyTorch has decomposed ``torch.matmul`` / ``@`` and ``torch.nn.functional.linear``
into ``mm``, ``addmm``, ``bmm``, ``mv`` and ``dot``.  The operators it computes are
``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``addbmm``, ``mv``, ``addmv``, ``dot`` (their
``out=``, in-place and ``out_dtype`` forms too).  Each one whose tensors are all dense CPU
tensors of one dtype among float16, bfloat16, float8_e4m3fn, float8_e5m2 (and float32 with
``tf32=True``) is computed by :func:`fastmma.matmul`: a k-loop of one instruction in
increasing k, the accumulator starting at +0 and rounded to the instruction's D type after
every step.  Every other operator, and these on other devices (``cuda``, ``meta``), other
dtypes or tensor subclasses, runs as PyTorch runs it.

The instruction.  By default a wgmma k-loop with an f32 accumulator (:data:`DEFAULTS`):
``m64n256k16.f32.f16.f16``, ``m64n256k16.f32.bf16.bf16``, ``m64n256k32.f32.e4m3.e4m3``,
``m64n256k32.f32.e5m2.e5m2`` and, with ``tf32=True``, ``m64n256k8.f32.tf32.tf32`` for
float32 tensors, whose values the instruction reads as tf32 (their top 19 bits, the ISA's
tf32 operand).  ``instruction=`` replaces the default of the one dtype it takes.

The epilogue, in this order, as a GEMM's epilogue applies it after the k-loop:

1. ``acc``: the k-loop's D, widened to float32 (exact);
2. where ``alpha != 1``: ``acc = f32(alpha) * acc``, one float32 multiplication;
3. where the operator has an input C (``addmm``'s ``self``, broadcast to D's shape) and
   ``beta != 0``: ``acc = acc + f32(beta) * C``, the product (where ``beta != 1``) and the
   sum each one float32 operation; ``beta == 0`` ignores C, NaNs included, as PyTorch does;
4. ``acc`` rounded once to the output dtype (the operator's dtype, or its ``out_dtype``):
   float16 and bfloat16 to nearest even (overflow to infinity, subnormals kept), float8
   to nearest even with ``.satfinite`` (beyond the largest finite value, infinities
   included, the largest finite value of that sign; PTX's ``cvt`` to an fp8 type has only
   the ``.satfinite`` form), float32 as it is.  A NaN becomes the GPU's canonical NaN
   (0x7FFF for 16-bit types, 0x7F for fp8).

alpha and beta are rounded to float32 first; every float32 operation rounds to nearest
even and keeps subnormals (unless the calling thread flushes them: ``torch.set_flush_denormal
(True)``); the two of step 3 are not fused into one FMA (a kernel that fuses
``alpha * acc + beta * C`` differs in the last bit of float32 where ``alpha != 1``).
``addbmm`` (a sum of the batch's products) is one k-loop over the batch's K ranges one after
another: A's matrices side by side, B's stacked, zero padding only after the last.
``mv`` and ``dot`` are the GEMMs of an N = 1 (and M = 1) matrix.

What is claimed, and what is not.  The numbers are those of a single-pass k-loop kernel
with the instruction above, one accumulator carried through the whole K, as a Triton kernel
computes a ``tl.dot`` loop followed by ``acc.to(dtype)``, and as :func:`fastmma.matmul`
computes it bit for bit.  They are NOT claimed to be ``torch.matmul``'s numbers on an H100:
cuBLAS picks among kernels that may split K, reduce partial sums in another order, or use
another instruction; those give other roundings.  Nor are they an fp8 kernel's that adds
partial sums into a second accumulator (Triton's ``max_num_imprecise_acc``, cuBLAS without
fast accumulation): the mode's fp8 k-loop has one.  The fp8 output rounding and its
canonical NaN follow the PTX ISA (``cvt`` with ``.satfinite``); they are not in fastmma's
H100 recordings.

Not computed here, and counted as passed through by :meth:`Emulation.report` with the
reason: PyTorch's fused attention (``torch.nn.functional.scaled_dot_product_attention`` runs
``_scaled_dot_product_flash_attention_for_cpu``, no matmul operator; nn.MultiheadAttention
called with ``need_weights=True`` or the math backend with
``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`` issue ``bmm`` instead),
``_scaled_mm``, ``_int_mm`` and convolutions.

Nesting.  Inside an inner ``emulate()``, an operator the inner one passes through reaches the
outer one (a float32 GEMM under an inner ``tf32=False`` and an outer ``tf32=True`` is
emulated by the outer).  Leaving the ``with`` block, also by an exception, removes the mode.

Needs the ``torch`` extra: ``pip install "fastmma[torch]"``.  ``import fastmma`` never
imports torch; ``import fastmma.torch`` does.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple

import ml_dtypes
import numpy as np

try:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError as exc:  # the walker of fastmma's modules skips an extra that is not installed
    raise ImportError('fastmma.torch needs PyTorch: pip install "fastmma[torch]"') from exc

from .errors import UnsupportedInstructionError
from .gemm import matmul, resolve_instruction

#: fastmma's operand type of each torch dtype the mode computes (float32 only with tf32=True)
PTX_TYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float8_e4m3fn: "e4m3",
             torch.float8_e5m2: "e5m2", torch.float32: "tf32"}

#: the default instruction of each operand type: a wgmma k-loop with an f32 accumulator
DEFAULTS = {"f16": "m64n256k16.f32.f16.f16", "bf16": "m64n256k16.f32.bf16.bf16",
            "e4m3": "m64n256k32.f32.e4m3.e4m3", "e5m2": "m64n256k32.f32.e5m2.e5m2",
            "tf32": "m64n256k8.f32.tf32.tf32"}


class _Type(NamedTuple):
    """How a torch dtype's tensor becomes numpy and back: a same-width integer view."""

    raw: Any  # torch integer dtype of the same width
    value: Any  # numpy / ml_dtypes dtype of the values
    nan: int  # the GPU's canonical NaN, as the raw integer


_TYPES = {
    torch.float16: _Type(torch.int16, np.dtype(np.float16), 0x7FFF),
    torch.bfloat16: _Type(torch.int16, np.dtype(ml_dtypes.bfloat16), 0x7FFF),
    torch.float8_e4m3fn: _Type(torch.uint8, np.dtype(ml_dtypes.float8_e4m3fn), 0x7F),
    torch.float8_e5m2: _Type(torch.uint8, np.dtype(ml_dtypes.float8_e5m2), 0x7F),
    torch.float32: _Type(torch.int32, np.dtype(np.float32), 0x7FFFFFFF),
}


class _Op(NamedTuple):
    """An ATen matmul operator: the names of its A, B and C arguments and its GEMM's form."""

    a: str
    b: str
    c: str | None
    form: str  # "matrix" (M, K) x (K, N); "batch" stacks; "sum" addbmm; "vector" mv; "dot"


#: ndim of A and B for each form
_NDIM = {"matrix": (2, 2), "batch": (3, 3), "sum": (3, 3), "vector": (2, 1), "dot": (1, 1)}

#: D's shape from A's and B's for each form
_D_SHAPE = {"matrix": lambda a, b: (a[0], b[1]), "batch": lambda a, b: (a[0], a[1], b[2]),
            "sum": lambda a, b: (a[1], b[2]), "vector": lambda a, b: (a[0],), "dot": lambda a, b: ()}

_OPS = {
    "mm": _Op("self", "mat2", None, "matrix"),
    "addmm": _Op("mat1", "mat2", "self", "matrix"),
    "bmm": _Op("self", "mat2", None, "batch"),
    "baddbmm": _Op("batch1", "batch2", "self", "batch"),
    "addbmm": _Op("batch1", "batch2", "self", "sum"),
    "mv": _Op("self", "vec", None, "vector"),
    "addmv": _Op("mat", "vec", "self", "vector"),
    "dot": _Op("self", "tensor", None, "dot"),
}

#: operators that multiply matrices inside one kernel the mode does not compute, and why
_FUSED = {
    "_scaled_dot_product_flash_attention_for_cpu": "fused attention kernel (no matmul operator)",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "fused attention kernel (no matmul operator)",
    "_scaled_dot_product_efficient_attention": "fused attention kernel (no matmul operator)",
    "_scaled_dot_product_fused_attention_overrideable": "fused attention kernel (no matmul operator)",
    "_scaled_mm": "scaled fp8 GEMM (_scaled_mm) not emulated",
    "_int_mm": "integer GEMM (_int_mm) not emulated",
    "convolution": "convolution not emulated",
    "convolution_backward": "convolution not emulated",
}


class MatmulCall(NamedTuple):
    """One emulated operator, as given to ``emulate(hook=...)``: the ATen operator's name
    (``"addmm"``, ``"mm"``, ...), its arguments as it received them, the instruction that
    computed it, and its output (the tensor the operator returns)."""

    op: str
    args: tuple
    kwargs: dict
    instruction: Any
    output: Any


class Report(NamedTuple):
    """How many matmul operators an :class:`Emulation` computed and how many it passed
    through: ``emulated`` by ``"op dtype"``, ``passed`` by ``"op: reason"``."""

    emulated: int
    passed: int
    emulated_by_op: dict
    passed_by_reason: dict

    def __str__(self) -> str:
        lines = [f"{self.emulated} matmuls emulated, {self.passed} passed through"]
        lines += [f"  emulated {n} x {key}" for key, n in sorted(self.emulated_by_op.items())]
        lines += [f"  passed {n} x {key}" for key, n in sorted(self.passed_by_reason.items())]
        return "\n".join(lines)


def emulate(instruction=None, tf32: bool = False, hook: Callable[[MatmulCall], None] | None = None) -> Emulation:
    """A dispatch mode under which PyTorch's CPU matmuls take a tensor-core k-loop's numbers.

    ``instruction``: None for :data:`DEFAULTS`, or one instruction (short form, PTX text or
    instruction object) whose A and B are one of the types the mode computes (f16, bf16,
    e4m3, e5m2; tf32 with ``tf32=True``) and whose D is f32 or f16; it replaces the default
    for its type.  ``tf32``: whether float32 GEMMs are computed as tf32 (off: they run as
    PyTorch runs them).  ``hook(call)``, if given, is called with a :class:`MatmulCall`
    after each emulated operator.  See the module's docstring for the epilogue and what is
    claimed.
    """
    return Emulation(instruction, tf32, hook)


def _instructions(instruction, tf32: bool) -> dict:
    """torch dtype -> instruction object the mode uses; ``instruction`` checked."""
    chosen = {t: resolve_instruction(DEFAULTS[t]) for t in DEFAULTS if tf32 or t != "tf32"}
    if instruction is None:
        return {dtype: chosen[t] for dtype, t in PTX_TYPES.items() if t in chosen}
    inst = resolve_instruction(instruction)
    allowed = sorted(chosen)
    if inst.atype != inst.btype or inst.atype not in chosen or inst.dtype not in ("f32", "f16"):
        hint = " (tf32 needs tf32=True)" if inst.atype == "tf32" and not tf32 else ""
        raise UnsupportedInstructionError(
            f"fastmma.torch.emulate computes A and B of one type among {', '.join(allowed)}{hint}, "
            f"with an f32 or f16 accumulator; {instruction!r} has A {inst.atype}, B {inst.btype}, D {inst.dtype}")
    chosen[inst.atype] = inst
    return {dtype: chosen[t] for dtype, t in PTX_TYPES.items() if t in chosen}


class Emulation(TorchDispatchMode):
    """The dispatch mode :func:`emulate` returns; :meth:`report` counts its operators."""

    def __init__(self, instruction=None, tf32: bool = False, hook=None):
        super().__init__()
        self.instructions = _instructions(instruction, bool(tf32))
        self.tf32 = bool(tf32)
        self.hook = hook
        self.emulated = Counter()
        self.passed = Counter()
        aten = torch.ops.aten
        self._ops = {getattr(aten, name): op for name, op in _OPS.items()}
        self._ops.update({getattr(aten, name + "_"): op for name, op in _OPS.items() if hasattr(aten, name + "_")})
        self._fused = {getattr(aten, name): why for name, why in _FUSED.items() if hasattr(aten, name)}

    def report(self) -> Report:
        """The counts so far: emulated operators by op and dtype, passed ones by reason."""
        return Report(sum(self.emulated.values()), sum(self.passed.values()), dict(self.emulated), dict(self.passed))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        op = self._ops.get(packet)
        if op is None:
            if packet in self._fused:
                self.passed[f"{packet.__name__}: {self._fused[packet]}"] += 1
            return func(*args, **kwargs)
        call = _bind(func, args, kwargs)
        in_place = packet.__name__.endswith("_")
        gemm = _Gemm.of(op, call, in_place)
        why = gemm.refusal(self.instructions, self.tf32) if isinstance(gemm, _Gemm) else gemm
        if why:
            self.passed[f"{packet.__name__}: {why}"] += 1
            return func(*args, **kwargs)
        inst = self.instructions[gemm.a.dtype]
        with _one_torch_thread():
            result = gemm.compute(inst)
            output = result if gemm.target is None else _deliver(result, gemm.target)
        self.emulated[f"{packet.__name__} {str(gemm.a.dtype).removeprefix('torch.')}"] += 1
        if self.hook is not None:
            self.hook(MatmulCall(packet.__name__, args, kwargs, inst, output))
        return output


@contextmanager
def _one_torch_thread():
    """torch's own operators of an emulated GEMM (copies, casts) on one thread: numba's threads
    spin a while after each GEMM, and torch's pool woken beside them waits for the cores
    (docs/performance.md).  The setting is the process's; it is restored on leaving."""
    threads = torch.get_num_threads()
    if threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if threads != 1:
            torch.set_num_threads(threads)


def _bind(func, args, kwargs) -> dict:
    """The operator's arguments by name, defaults filled in."""
    bound = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def _deliver(result, target):
    """``result`` copied into the operator's ``out`` (resized as PyTorch resizes it) or, for
    an in-place operator, its ``self``."""
    if target.shape != result.shape:
        target.resize_(result.shape)
    return target.copy_(result)


class _Gemm(NamedTuple):
    """One operator's GEMM: A, B, C tensors, alpha, beta, output dtype and the op's form."""

    a: Any
    b: Any
    c: Any
    alpha: Any
    beta: Any
    out_dtype: Any
    form: str
    target: Any  # the tensor D is written into: ``out``, or an in-place operator's ``self``
    in_place: bool

    @classmethod
    def of(cls, op: _Op, call: dict, in_place: bool):
        """The GEMM of a bound call, or why it is not one this mode computes."""
        a, b = call.get(op.a), call.get(op.b)
        c = call.get(op.c) if op.c else None
        if not all(isinstance(t, torch.Tensor) for t in (a, b)) or (op.c and not isinstance(c, torch.Tensor)):
            return "operands that are not tensors"
        out_dtype = call.get("out_dtype") or a.dtype
        target = call.get("self") if in_place else call.get("out")
        return cls(a, b, c, call.get("alpha", 1), call.get("beta", 1), out_dtype, op.form, target, in_place)

    def refusal(self, instructions: dict, tf32: bool) -> str:
        """Why the mode passes this GEMM through to PyTorch, or "" where it computes it."""
        tensors = [t for t in (self.a, self.b, self.c, self.target) if t is not None]
        for t in tensors:
            if type(t) not in (torch.Tensor, torch.nn.Parameter):
                return f"tensor subclass {type(t).__name__}"
            if t.device.type != "cpu":
                return f"device {t.device.type}"
            if t.layout != torch.strided or t.is_quantized:
                return f"layout {t.layout}" + (" quantized" if t.is_quantized else "")
        dtype = self.a.dtype
        if any(t.dtype != dtype for t in (self.b, self.c) if t is not None):
            return "operands of different dtypes"
        if dtype not in instructions:
            off = " (tf32=False)" if dtype == torch.float32 and not tf32 else ""
            return f"dtype {str(dtype).removeprefix('torch.')}{off}"
        if self.out_dtype not in (dtype, torch.float32) or any(isinstance(s, complex) for s in (self.alpha, self.beta)):
            return f"output dtype {self.out_dtype} or complex scale"
        if self.target is not None and self.target.dtype != self.out_dtype:
            return f"out= or self of dtype {self.target.dtype}"
        if not self._shapes_agree() or (self.in_place and tuple(self.target.shape) != self.d_shape()):
            return "shapes PyTorch rejects"
        return ""

    def _shapes_agree(self) -> bool:
        a, b = self.a.shape, self.b.shape
        if (len(a), len(b)) != _NDIM[self.form] or a[-1] != b[0 if len(b) == 1 else -2]:
            return False
        if self.form in ("batch", "sum") and a[0] != b[0]:
            return False
        shape = self.d_shape()
        try:
            if self.c is not None and np.broadcast_shapes(tuple(self.c.shape), shape) != shape:
                return False
        except ValueError:
            return False
        return True

    def d_shape(self) -> tuple:
        return tuple(_D_SHAPE[self.form](self.a.shape, self.b.shape))

    def compute(self, inst):
        """D as a new CPU tensor of the output dtype: the k-loop, then the epilogue."""
        a, b = _numpy(self.a), _numpy(self.b)
        if self.form == "sum":  # one k-loop over the batch's K ranges in turn
            a = np.moveaxis(a, 0, 1).reshape(a.shape[1], -1)
            b = b.reshape(-1, b.shape[-1])
        elif self.form == "vector":
            b = b[:, None]
        elif self.form == "dot":
            a, b = a[None, :], b[:, None]
        # fastmma.matmul's D is a new array: the epilogue may overwrite it
        acc = np.asarray(matmul(a, b, instruction=inst), dtype=np.float32).reshape(self.d_shape())
        c = None if self.c is None or self.beta == 0 else _numpy(self.c).astype(np.float32)
        return _round(_epilogue(acc, c, self.alpha, self.beta), self.out_dtype)


def _numpy(t) -> np.ndarray:
    """A tensor's values as a C-contiguous numpy array, copied by torch where needed (a
    transposed weight: torch's copy is the faster)."""
    kind = _TYPES[t.dtype]
    return t.detach().resolve_neg().contiguous().view(kind.raw).numpy().view(kind.value)


def _epilogue(acc: np.ndarray, c, alpha, beta) -> np.ndarray:
    """``f32(alpha) * acc + f32(beta) * C`` in float32 operations, each skipped where it is
    the identity (the module's docstring); ``acc``, the GEMM's own new array, is overwritten."""
    if alpha != 1:
        np.multiply(acc, np.float32(alpha), out=acc)
    if c is not None:
        np.add(acc, c if beta == 1 else np.float32(beta) * c, out=acc)
    return acc


def _round(d: np.ndarray, dtype):
    """float32 ``d`` rounded once to ``dtype`` (the module's docstring), as a tensor: torch's
    casts, which round to nearest even and are the faster (docs/performance.md), then NaNs
    and, for float8, overflow set as the GPU's ``cvt`` gives them."""
    kind = _TYPES[dtype]
    acc = torch.from_numpy(np.ascontiguousarray(d).reshape(d.shape))
    if kind.raw == torch.uint8:  # .satfinite; a NaN stays a NaN
        big = float(ml_dtypes.finfo(kind.value).max)
        acc = acc.clamp(-big, big)
    out = acc.to(dtype)
    if d.size and np.isnan(np.max(d)):  # numpy's max carries a NaN, and is cheaper than a mask
        out.view(kind.raw)[torch.isnan(acc)] = kind.nan
    return out
