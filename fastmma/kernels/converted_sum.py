"""fp8 operands run through the f16 tensor core (:class:`~fastmma.isa.numerics.ConvertedF16Rule`).

Two steps, each on whole arrays: the fp8 bits become f16 bits through a 256-entry table
(every e4m3 and e5m2 value is exactly an f16); the k terms of each instruction, reordered
as the rule says, go through the f16 rule's fused kernels from +0, and C (the instruction
before's D) is added to that sum by one IEEE addition rounded to nearest even in D's type,
which the blocked kernels do as they write D (their ``addend``) and :func:`add_nearest`
after the others.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from numba import njit, prange

from .fp_env import MXCSR_NEAREST, read_mxcsr, write_mxcsr
from .fused_gemm import ELEMENT_CHUNK, bits_sum

_FP8_DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}

F32_NAN = np.uint32(0x7FFFFFFF)


@functools.lru_cache(maxsize=None)
def f16_table(fmt: str) -> np.ndarray:
    """f16 bits of each of the 256 codes of ``fmt`` ("e4m3" or "e5m2"), exact."""
    table = np.arange(256, dtype=np.uint8).view(_FP8_DTYPES[fmt]).astype(np.float16).view(np.uint16)
    table.setflags(write=False)
    return table


def to_f16(bits: np.ndarray, fmt: str) -> np.ndarray:
    """The f16 bits of fp8 ``bits`` (uint8, any shape)."""
    return f16_table(fmt)[bits]


@njit(cache=True, parallel=True)
def _add_bits(p, c, out, f16):
    """``out = p + c`` for D's bits (1-D; f16's where ``f16``, else f32's): :func:`bits_sum`."""
    for ch in prange((p.size + ELEMENT_CHUNK - 1) // ELEMENT_CHUNK):
        saved = read_mxcsr()
        write_mxcsr(np.int32(MXCSR_NEAREST))  # no flush to zero, whatever the caller set
        for i in range(ch * ELEMENT_CHUNK, min(p.size, (ch + 1) * ELEMENT_CHUNK)):
            out[i] = bits_sum(p[i], c[i], f16)
        write_mxcsr(saved)


def add_nearest(p: np.ndarray, c: np.ndarray, dtype: str, *, in_place: bool = False) -> np.ndarray:
    """Bits of ``p + c`` in ``dtype`` ("f32" or "f16") for bit arrays of that type, one IEEE
    addition rounded to nearest even, as the GPU's ``FADD`` and ``HADD2`` compute it:
    subnormals kept, a NaN result canonical (0x7FFFFFFF, 0x7FFF).  ``in_place``: the sum is
    written over ``p`` (over its contiguous copy where it is not contiguous), which spares
    the faults of a new array's pages."""
    bits = np.uint32 if dtype == "f32" else np.uint16
    x = np.ascontiguousarray(p).view(bits).ravel()
    y = np.ascontiguousarray(c).view(bits).ravel()
    s = x if in_place else np.empty_like(x)
    _add_bits(x, y, s, dtype != "f32")
    return s.view(p.dtype).reshape(p.shape)


def converted_sum(rule, a, b, c, atype: str, btype: str, dtype: str, *, use_c: bool, neg_a: bool, neg_b: bool,
                  inner):
    """D bits = C + A · B under ``rule`` (a ``ConvertedF16Rule``), one instruction of ``rule.k``
    terms after another along K; A (..., M, K) and B (..., K, N) fp8 bits, C (..., M, N)
    in ``dtype``.  ``inner(rule, a, b, c, atype, btype, ctype, dtype, **kw)`` runs the f16
    rule (``execute``, ``execute_stack``, ``execute_rows``, ``execute_spread`` or
    ``reference``), and adds its ``addend`` keyword, the D before, to each step's sum."""
    a16, b16 = to_f16(a, atype), to_f16(b, btype)
    order = np.array(rule.k_order())
    # Each step's sum starts from +0: run without C, which the fused rule sums exactly as a C
    # of +0 (a zero term moves no exponent and adds nothing), and spares the kernels copying
    # and scanning a C of zeros for every instruction.
    no_c = np.zeros(a.shape[:-1] + b.shape[-1:], c.dtype)
    d = c
    for k0 in range(0, a.shape[-1], rule.k):
        step = k0 + order
        d = inner(rule.inner, np.ascontiguousarray(a16[..., step]), np.ascontiguousarray(b16[..., step, :]),
                  no_c, "f16", "f16", dtype, dtype, use_c=False, neg_a=neg_a, neg_b=neg_b,
                  addend=np.ascontiguousarray(d) if use_c or k0 else None)
    return d
