"""A drop-in for MMA-Sim's Hopper ``WGMMA`` and ``MMA`` classes, on fastmma's kernels.

MMA-Sim (arXiv:2511.10909; PyPI ``mmasim``, version 2.1) is a torch-based, bit-accurate
simulator of tensor-core arithmetic.  This module offers its two Hopper classes under the
same names, constructor arguments and call signatures::

    from fastmma.compat.mmasim import WGMMA, MMA      # instead of: from mmasim.nv_ptx import ...

    op = WGMMA("Hopper", "m64n8k16.f32.f16.f16")      # wgmma.mma_async: m64nNk{8,16,32}
    op = MMA("Hopper", "m16n8k16.f32.f16.f16.f32")    # mma.sync: {shape}.{d}.{a}.{b}.{c}
    D = op(A, B, C)     # A (M, K), B (K, N), C (M, N) -> D (M, N); any M, N and K >= 1
    d = op.dpa(a, b, c) # a, b (..., K), c (...) -> d (...): one dot product per vector

Inputs are torch tensors (where torch is installed; the result is then a torch tensor on
C's device) or numpy arrays (the result is numpy), of MMA-Sim's dtypes: ``float16``,
``bfloat16``, ``float32`` for tf32, ``float8_e4m3fn`` / ``float8_e5m2`` (ml_dtypes in numpy),
``float64``; C in the accumulator type.  D is ``float32``, ``float16`` or ``float64``.  The
results are bit-identical to MMA-Sim's for every Hopper shape and type MMA-Sim models
(``HOPPER_WGMMA_SHAPE_AND_TYPE``, ``HOPPER_MMA_SHAPE_AND_TYPE``), and computed by fastmma's
numba kernels instead of torch.

The mapping
-----------
MMA-Sim's Hopper model is the aligned-and-truncated fused dot product that fastmma's
:class:`~fastmma.isa.numerics.FusedDotRule` describes; :func:`hopper_rule` builds it with
fastmma's :func:`~fastmma.isa.numerics.float_rule` and MMA-Sim's group length, giving:

=================  =======  ========  ========  ==================================
inputs -> D        group L  F (bits)  e_zero    rounding of each group's sum
=================  =======  ========  ========  ==================================
f16, bf16 -> f32   16       25        -133      toward zero to f32
f16 -> f16         16       25        -21       to nearest even to f16
tf32 -> f32        8        25        -133      toward zero to f32
e4m3/e5m2 -> f32   32       13        -133      toward zero to 13 fraction bits
e4m3/e5m2 -> f16   32       13        -21       to nearest even to f16
f64 (mma only)     -        -         -         a chain of IEEE fma (.rn) over k
=================  =======  ========  ========  ==================================

``L`` is 32 bytes over the input element size, whatever the instruction's k; C has D's type
in every Hopper form MMA-Sim models.  A call with ``K > L`` runs ``ceil(K / L)`` groups in
increasing k, each rounded to D and read back as the next group's C; a last, shorter group
equals one zero-padded to ``L``, because every group holds C, so its largest exponent is
never below ``e_zero`` (fastmma pads).  A zero result is +0.  The float rule runs on
fastmma's kernels (``__call__``: :func:`fastmma.kernels.execute`) and on
:func:`fastmma.kernels.fused_dot.fused_group` (``dpa``); f64 runs fastmma's bit-exact
integer FMA (:func:`fastmma.kernels.fma64.fma_bits`) in a chain over k.

MMA-Sim's model beside the H100 recordings
------------------------------------------
MMA-Sim's own code, run on the inputs of every floating-point H100 recording (tests/golden
and the probes in tests/golden/probes), agrees with the hardware on all 1292 wgmma
executions (every type, f32 underflows to +0 included), on all 592 wmma executions whose
C and D types agree, and on all 192 f16, bf16 and tf32 ``mma.sync`` executions of the
probes (``q10_mma_sync``); it differs on the following, where the drop-in follows MMA-Sim
and ``fastmma.mma`` / ``fastmma.matmul`` follow the hardware:

1. **tf32 grouping in wmma.**  MMA-Sim sums tf32 in groups of 8 (L = 8).  The H100 runs
   ``wmma.mma`` m16n16k8 tf32 as two groups of 4: all 64 recorded executions differ from
   MMA-Sim's answer.  ``mma.sync.m16n8k8`` tf32 is one group of 8 on sm_90 (recorded), as
   MMA-Sim models it, and so is wgmma tf32 (k = 8).
2. **C and D of different types** (wmma ``.f16.f32`` / ``.f32.f16``; in no Hopper form of
   MMA-Sim's tables, so the drop-in never meets it).  MMA-Sim keys ``e_zero`` on D alone,
   reads an f16 C with f16's subnormal exponent and turns every zero into +0.  On the H100
   the sum runs in the f32 mode (``e_zero`` = -133, an f16 C converted to f32 first) unless
   C and D are both f16, and an f16 result of the f32 mode keeps the sign of a non-zero
   sum that rounds to zero: 25 of 440 recorded executions differ from MMA-Sim's answer.
3. **Long K.**  MMA-Sim groups by ``L`` and not by the instruction's k: ``MMA(... m16n8k8
   .f16 ...)`` on K = 32 rounds after every 16 terms, where a k-loop of that instruction
   (``fastmma.matmul``) rounds after every 8.  For wgmma k = L, and both agree.
4. **NaN payloads of f64.**  MMA-Sim computes f64 with the host's ``std::fma``: on x86-64
   a NaN result carries the first NaN operand in the order (A, B, accumulator), quietened,
   and invalid operations give ``0xfff8000000000000``.  The H100's f64 tensor core
   (``fastmma.kernels.fma64``, recorded) prefers B, then the accumulator, then A.  The
   drop-in follows x86-64 (MMA-Sim on another host CPU, or on a GPU, may pick another
   payload); 14 of the 96 recorded f64 ``mma.sync`` executions differ from MMA-Sim's
   answer.  Numbers, zeros and infinities are IEEE fma in both.

Whatever fastmma's kernels return for the sign of a zero, the drop-in returns +0, as
MMA-Sim does (its ``+ 0.0`` after every group).  Tensors on a GPU are computed on the CPU
and the result is moved back to their device.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..errors import OperandError, UnsupportedInstructionError
from ..formats import as_numpy, from_bits, get_format, to_bits
from ..isa.numerics import FmaChainRule, FusedDotRule, float_rule
from ..kernels import execute, format_params, launch_lock
from ..kernels.fma64 import fma_bits
from ..kernels.fused_dot import fused_group, rounding_code
from ..validate import decoded, public, quote, require_memory, working_set

__all__ = ["WGMMA", "MMA", "UnsupportedOperationError", "hopper_rule", "HOPPER_WGMMA_SHAPE_AND_TYPE",
           "HOPPER_MMA_SHAPE_AND_TYPE", "ARCHITECTURES"]

ARCHITECTURES = ("Hopper",)
MMASIM_ARCHITECTURES = ("Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell", "RTX Blackwell")

_FP8 = ("e5m2", "e4m3")
_WGMMA_N = tuple(range(8, 257, 8))
_WGMMA_TYPES = (("k8", "f32", "tf32", "tf32"), ("k16", "f32", "f16", "f16"), ("k16", "f16", "f16", "f16"),
                ("k16", "f32", "bf16", "bf16")) + tuple(
    ("k32", d, a, b) for d in ("f32", "f16") for a in _FP8 for b in _FP8)
HOPPER_WGMMA_SHAPE_AND_TYPE: tuple[str, ...] = tuple(
    f"m64n{n}{k}.{d}.{a}.{b}" for k, d, a, b in _WGMMA_TYPES for n in _WGMMA_N)
HOPPER_MMA_SHAPE_AND_TYPE: tuple[str, ...] = (
    "m16n8k16.f64.f64.f64.f64", "m16n8k8.f64.f64.f64.f64", "m16n8k4.f64.f64.f64.f64",
    "m8n8k4.f64.f64.f64.f64",
    "m16n8k8.f32.tf32.tf32.f32", "m16n8k4.f32.tf32.tf32.f32",
    "m16n8k16.f32.f16.f16.f32", "m16n8k16.f16.f16.f16.f16",
    "m16n8k16.f32.bf16.bf16.f32", "m16n8k8.f32.bf16.bf16.f32",
    "m16n8k8.f32.f16.f16.f32", "m16n8k8.f16.f16.f16.f16",
)

_ELEMENT_BYTES = {"f64": 8, "tf32": 4, "f16": 2, "bf16": 2, "e4m3": 1, "e5m2": 1}
_TORCH_DTYPES = {"f64": "float64", "f32": "float32", "tf32": "float32", "f16": "float16", "bf16": "bfloat16",
                 "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


class UnsupportedOperationError(UnsupportedInstructionError, AssertionError):
    """An architecture or ``shape_and_type`` outside MMA-Sim's Hopper tables.

    Also an ``AssertionError``, which is what MMA-Sim raises, so that callers' existing
    ``except AssertionError`` still catches it."""


def hopper_rule(a_type: str, d_type: str) -> FusedDotRule | FmaChainRule:
    """MMA-Sim's Hopper rule for inputs ``a_type`` and result (and C) ``d_type`` (PTX names):
    fastmma's float rule over groups of 32 bytes of inputs, or the f64 fma chain."""
    if a_type == "f64":
        return FmaChainRule("rn")
    return float_rule(a_type, d_type, d_type, 32 // _ELEMENT_BYTES[a_type])


# ---------------------------------------------------------------- construction


def _wgmma_table_summary() -> str:
    return ("m64n{N}k8.f32.tf32.tf32, m64n{N}k16.{f32,f16}.f16.f16, m64n{N}k16.f32.bf16.bf16, "
            "m64n{N}k32.{f32,f16}.{e5m2,e4m3}.{e5m2,e4m3}, N in 8, 16, ..., 256")


def _mma_table_summary() -> str:
    return ("m16n8k{16,8,4}.f64.f64.f64.f64, m8n8k4.f64.f64.f64.f64, m16n8k{8,4}.f32.tf32.tf32.f32, "
            "m16n8k{16,8}.{f32.f16.f16.f32,f16.f16.f16.f16,f32.bf16.bf16.f32}")


def _check_arch(arch, what: str) -> None:
    known = isinstance(arch, str)  # an array or list compared with a name has no single truth value
    if known and arch in ARCHITECTURES:
        return
    note = " (an MMA-Sim architecture that fastmma does not model)" if known and arch in MMASIM_ARCHITECTURES else ""
    raise UnsupportedOperationError(
        f"unsupported architecture {quote(arch)} for {what}{note}; supported: {', '.join(map(repr, ARCHITECTURES))}")


def _check_shape_and_type(shape_and_type, table, what: str, summary: str) -> None:
    if isinstance(shape_and_type, str) and shape_and_type in table:
        return
    raise UnsupportedOperationError(
        f"unsupported shape_and_type {quote(shape_and_type)} for {what} on Hopper; supported: {summary}")


def _mnk(shape: str) -> tuple[int, int, int]:
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def _dtype_of(ptx_type: str):
    """The dtype MMA-Sim uses for ``ptx_type``: torch's where torch is installed, else numpy's."""
    try:
        import torch
    except ImportError:
        torch = None
    return getattr(torch, _TORCH_DTYPES[ptx_type], None) or get_format(ptx_type).value_dtype


class _HopperOperation:
    """Shared body of :class:`WGMMA` and :class:`MMA`."""

    _what = ""
    _table: tuple[str, ...] = ()

    @public
    def __init__(self, arch: str, shape_and_type: str):
        _check_arch(arch, self._what)
        _check_shape_and_type(shape_and_type, self._table, self._what, self._summary())
        fields = shape_and_type.split(".")
        shape, d, a, b = fields[:4]
        c = fields[4] if len(fields) > 4 else d
        self.arch, self.shape_and_type = arch, shape_and_type
        self.m, self.n, self.k = _mnk(shape)
        self.a_type_ptx, self.b_type_ptx, self.c_type_ptx, self.d_type_ptx = a, b, c, d
        self.a_type, self.b_type, self.c_type, self.d_type = (_dtype_of(t) for t in (a, b, c, d))
        self.rule = hopper_rule(a, d)

    @classmethod
    def _summary(cls) -> str:
        return ", ".join(cls._table)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.arch!r}, {self.shape_and_type!r})"

    @public
    def __call__(self, A, B, C):
        """D (M, N) = the k-loop of groups of ``rule.group`` terms on A (M, K), B (K, N), C (M, N)."""
        like = _torch_like(A, B, C)
        arrays = {"A": as_numpy(A, "A"), "B": as_numpy(B, "B"), "C": as_numpy(C, "C")}
        self._decoding(arrays)
        a, b, c = (self._bits(arrays[n], t, n, 2) for t, n in ((self.a_type_ptx, "A"), (self.b_type_ptx, "B"),
                                                                (self.c_type_ptx, "C")))
        _check_gemm_shapes(a.shape, b.shape, c.shape)
        return _wrap(from_bits(self._gemm(a, b, c), self.d_type_ptx), like)

    @public
    def dpa(self, a, b, c):
        """d (...) = the dot products of the vectors a (..., K) and b (..., K), plus c (...)."""
        like = _torch_like(a, b, c)
        av, bv, cv = (self._bits(x, t, n, None) for x, t, n in ((a, self.a_type_ptx, "a"),
                                                                 (b, self.b_type_ptx, "b"),
                                                                 (c, self.c_type_ptx, "c")))
        av, bv = _broadcast_vectors(av, bv, cv.shape)
        rows = self._rows(av.reshape(-1, av.shape[-1]), bv.reshape(-1, bv.shape[-1]), cv.reshape(-1))
        return _wrap(from_bits(rows, self.d_type_ptx).reshape(cv.shape), like)

    # ------------------------------------------------------------ internals

    def _decoding(self, arrays: dict) -> None:
        """Refuse, before anything is allocated, a product whose bits (8 bytes an element for
        f64, else 4: A, B, C and D) would not fit beside the copies of strided operands."""
        A, B = arrays["A"], arrays["B"]
        if A.ndim == 2 and B.ndim == 2:
            (m, k), n = A.shape, B.shape[1]
            width = 8 if self.a_type_ptx == "f64" else 4
            working_set(arrays, width * (m * k + k * n + 2 * m * n), m, k, n)

    def _bits(self, x, ptx_type: str, name: str, ndim: int | None) -> np.ndarray:
        arr = as_numpy(x, name)
        if ndim is not None and arr.ndim != ndim:
            raise OperandError(f"{name} must be a {ndim}-D matrix, got shape {tuple(arr.shape)}")
        decoded(arr, name, get_format(ptx_type).storage.itemsize)
        try:
            bits = to_bits(arr, get_format(ptx_type), name)
        except OperandError as exc:
            raise OperandError(f"{self.shape_and_type}: {exc} (MMA-Sim dtype: "
                               f"{_TORCH_DTYPES[ptx_type]})") from None
        return np.ascontiguousarray(bits).reshape(arr.shape)  # 0-d stays 0-d

    @property
    def _types(self) -> tuple[str, str, str, str]:
        return self.a_type_ptx, self.b_type_ptx, self.c_type_ptx, self.d_type_ptx

    def _gemm(self, a, b, c) -> np.ndarray:
        """D bits: fastmma's k-loop kernels (C read in its type for the first group)."""
        if isinstance(self.rule, FmaChainRule):
            with launch_lock:
                return _fma_chain_gemm(a, b, c)
        a, b = _pad_k(a, b, self.rule.group)
        return _positive_zeros(execute(self.rule, a, b, c, *self._types, use_c=True), self.d_type_ptx)

    def _rows(self, a, b, c) -> np.ndarray:
        """d bits of one dot product per row of a and b (P, K)."""
        if isinstance(self.rule, FmaChainRule):
            with launch_lock:
                return _fma_chain_rows(a, b, c)
        a, bt = _pad_k(a, b.T, self.rule.group)
        rule, out = self.rule, np.empty(c.shape, get_format(self.d_type_ptx).storage)
        with launch_lock:
            _fused_rows(a, bt, c, out, *(format_params(t) for t in self._types), rule.group, rule.frac_bits,
                        rule.e_zero, rule.out_man_bits, rounding_code(rule))
        return _positive_zeros(out, self.d_type_ptx)


class WGMMA(_HopperOperation):
    """``wgmma.mma_async`` as MMA-Sim's ``WGMMA(arch, shape_and_type)`` models it.

    ``arch`` must be ``"Hopper"``; ``shape_and_type`` is ``m64n{N}k{K}.{d}.{a}.{b}`` from
    :data:`HOPPER_WGMMA_SHAPE_AND_TYPE` (f16, bf16, tf32 and fp8 inputs; f32 or f16 D).
    """

    _what = "wgmma"
    _table = HOPPER_WGMMA_SHAPE_AND_TYPE

    @classmethod
    def _summary(cls) -> str:
        return _wgmma_table_summary()


class MMA(_HopperOperation):
    """``mma.sync`` as MMA-Sim's ``MMA(arch, shape_and_type)`` models it on Hopper.

    ``arch`` must be ``"Hopper"``; ``shape_and_type`` is ``{shape}.{d}.{a}.{b}.{c}`` from
    :data:`HOPPER_MMA_SHAPE_AND_TYPE` (f16, bf16, tf32 and f64 inputs).
    """

    _what = "mma"
    _table = HOPPER_MMA_SHAPE_AND_TYPE

    @classmethod
    def _summary(cls) -> str:
        return _mma_table_summary()

    def __init__(self, arch: str, shape_and_type: str):
        super().__init__(arch, shape_and_type)
        self.kind = None


# ---------------------------------------------------------------- operands


def _is_tensor(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _torch_like(*xs):
    """The tensor whose device the result goes to (C's, else the first tensor's), or None."""
    tensors = [x for x in xs if _is_tensor(x)]
    return (xs[-1] if _is_tensor(xs[-1]) else tensors[0]) if tensors else None


def _wrap(d: np.ndarray, like):
    if like is None:
        return d
    import torch

    return torch.from_numpy(np.ascontiguousarray(d).reshape(d.shape)).to(like.device)


def _check_gemm_shapes(a, b, c) -> None:
    if a[1] != b[0]:
        raise OperandError(f"A is {a[0]}x{a[1]} and B is {b[0]}x{b[1]}: their K must agree")
    if c != (a[0], b[1]):
        raise OperandError(f"C must have shape ({a[0]}, {b[1]}) to match A {a} and B {b}, got {c}")
    if a[1] == 0:
        raise OperandError("K must be at least 1 (A has no columns)")


def _broadcast_vectors(a, b, batch):
    """a and b broadcast to ``batch + (K,)``, as MMA-Sim's ``dpa`` reads them."""
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-1]:
        raise OperandError(f"a and b must be vectors (..., K) of one length K, got shapes "
                           f"{tuple(a.shape)} and {tuple(b.shape)}")
    k = a.shape[-1]
    if k == 0:
        raise OperandError("K must be at least 1 (a and b are empty vectors)")
    try:
        if np.broadcast_shapes(a.shape[:-1], b.shape[:-1], batch) != batch:
            raise ValueError
    except ValueError:
        raise OperandError(f"a {tuple(a.shape)} and b {tuple(b.shape)} must broadcast to c's shape "
                           f"{tuple(batch)} plus K") from None
    count = math.prod(batch) * k
    require_memory(count * (a.itemsize + b.itemsize), "a and b", f"broadcasting them to c's shape plus K "
                   f"({count} elements each)", "pass smaller vectors, or a c of fewer elements")
    return (np.ascontiguousarray(np.broadcast_to(x, batch + (k,))) for x in (a, b))


def _pad_k(a, b, group: int):
    """a (M, K), b (K, N) zero-padded along K to a multiple of ``group``."""
    pad = -a.shape[1] % group
    if pad:
        a = np.concatenate([a, np.zeros((a.shape[0], pad), a.dtype)], axis=1)
        b = np.concatenate([b, np.zeros((pad, b.shape[1]), b.dtype)], axis=0)
    return np.ascontiguousarray(a), np.ascontiguousarray(b)


def _positive_zeros(d: np.ndarray, d_type: str) -> np.ndarray:
    """-0 results turned into +0, as MMA-Sim's ``+ 0.0`` does."""
    fmt = get_format(d_type)
    d[d == fmt.storage.type(1 << (fmt.bits - 1))] = 0
    return d


# ---------------------------------------------------------------- kernels


@njit(parallel=True, cache=True)
def _fused_rows(a, bt, c, out, af, bf, cf, df, group, frac, e_zero, omb, rnd):
    """out[p] = c[p] + a[p, :] . bt[:, p], group after group (fastmma's fused step)."""
    for p in prange(a.shape[0]):
        acc = np.uint64(c[p])
        fmt = cf
        for k0 in range(0, a.shape[1], group):
            acc = fused_group(a, bt, p, p, k0, group, af, bf, acc, fmt, True, 0, 0, frac, e_zero, df, omb, rnd)
            fmt = df
        out[p] = acc


_ABS = np.uint64(0x7FFFFFFFFFFFFFFF)
_INF = np.uint64(0x7FF0000000000000)
_QUIET = np.uint64(0x0008000000000000)


@njit(cache=True, inline="always")
def _host_fma(a, b, c):
    """fma(a, b, c) rounded to nearest, with x86-64's NaN choice: the first NaN of a, b, c."""
    for x in (a, b, c):
        if (x & _ABS) > _INF:
            return x | _QUIET
    return fma_bits(a, b, c, 0)


@njit(parallel=True, cache=True)
def _fma_chain_gemm(a, b, c):
    """D[i, j] = fma(A[i, K-1], B[K-1, j], ... fma(A[i, 0], B[0, j], C[i, j]))."""
    m, kk = a.shape
    n = b.shape[1]
    d = np.empty((m, n), np.uint64)
    for i in prange(m):
        for j in range(n):
            d[i, j] = c[i, j]
        for k in range(kk):
            for j in range(n):
                d[i, j] = _host_fma(a[i, k], b[k, j], d[i, j])
    return d


@njit(parallel=True, cache=True)
def _fma_chain_rows(a, b, c):
    """d[p] = the fma chain of a[p, :] and b[p, :] from c[p]."""
    d = np.empty(c.shape, np.uint64)
    for p in prange(a.shape[0]):
        x = c[p]
        for k in range(a.shape[1]):
            x = _host_fma(a[p, k], b[p, k], x)
        d[p] = x
    return d
