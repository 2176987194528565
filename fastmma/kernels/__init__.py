"""Numba kernels: how numbers combine, exactly as the hardware does.

Kernels know nothing of registers, descriptors or instructions' text: they see whole arrays
of operand bits and return accumulator bits.  :func:`execute` is the one place that maps a
numerics rule (``fastmma.isa.numerics``) onto its kernel, for one instruction or a whole
k-loop alike; :func:`reference` runs the same rules through the simple per-element kernels,
the oracle the fast ones are tested against.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from ..formats import get_format
from ..isa.numerics import ConvertedF16Rule, FfmaExpansionRule, FmaChainRule, FusedDotRule, IntDotRule, PopcRule
from .decode import float_params
from .operands import read_only, widened

ROUNDING_CODES = {"rn": 0, "rz": 1, "rm": 2, "rp": 3}

#: Held while a parallel kernel runs.  Each kernel already uses every core, and numba's
#: fallback threading layer ("workqueue") must not be entered from two Python threads at once,
#: so concurrent callers take turns; results never depend on it.
launch_lock = threading.RLock()


@functools.lru_cache(maxsize=None)
def format_params(name: str) -> tuple:
    """The float format parameters a kernel takes (``decode.float_params``), as int64s
    (built once per format: a small GEMM's call should not pay for it each time)."""
    return tuple(np.int64(x) for x in float_params(get_format(name)))


#: Problems below this many multiply-adds run on the per-element kernels, whose start-up is
#: cheaper; both give the same bits (tests/test_fused_gemm.py, tests/test_int_gemm.py, and
#: the recordings replayed through each in tests/test_conformance.py); the timings that set
#: it are in docs/performance.md ("Thresholds of the kernel choice").
FAST_KERNEL_MIN_MACS = 1 << 14

#: Float (fused-dot) problems of at most this many multiply-adds run on the one-thread kernel
#: of :mod:`.small_gemm`, ahead of both of the above: a single instruction's tile costs it
#: less than the blocked kernels' start (two threads, panels, scratch) and far less than the
#: per-element kernel (timings: docs/performance.md, "Thresholds of the kernel choice").
SMALL_KERNEL_MACS = 1 << 17


def execute(rule, a, b, c, atype: str, btype: str, ctype: str, dtype: str, *,
            use_c: bool = True, neg_a: bool = False, neg_b: bool = False, addend=None) -> np.ndarray:
    """D bits (M, N) = C + A (M, K) · B (K, N) under ``rule``, k-group after k-group.

    ``a``, ``b``, ``c`` are contiguous arrays of raw element bits in the storage dtype of
    their formats (sub-byte elements one per byte).  ``use_c=False`` ignores C entirely
    (scale-d = 0); ``neg_a``/``neg_b`` negate A/B (imm-scale = -1).  K must be a multiple
    of the rule's group size.  C is read in ``ctype`` for the first group and the
    accumulator in ``dtype`` after it.  Small float problems go to :mod:`.small_gemm`, other
    small ones to :func:`reference`.  ``addend`` (a :class:`FusedDotRule`'s, without C): D's
    bits (M, N), added to the sum by one IEEE addition rounded to nearest, the step of
    :class:`ConvertedF16Rule` that adds C (the blocked kernels add it as they write D;
    :func:`_plus_addend` after the others).
    """
    macs = a.shape[0] * a.shape[1] * b.shape[1]
    kw = dict(use_c=use_c, neg_a=neg_a, neg_b=neg_b)
    _check_addend_rule(rule, addend)
    if isinstance(rule, ConvertedF16Rule):
        return _module("converted_sum").converted_sum(rule, a, b, c, atype, btype, dtype, **kw, inner=execute)
    if isinstance(rule, FfmaExpansionRule):
        return _ffma_expansion(rule, a, b, c, atype, btype, ctype, dtype, **kw)
    if macs <= SMALL_KERNEL_MACS and isinstance(rule, FusedDotRule):
        d = _fused(_module("small_gemm").small_gemm, rule, a, b, c, atype, btype, ctype, dtype, **kw)
        return _plus_addend(d, addend, dtype)
    if macs < FAST_KERNEL_MIN_MACS and not isinstance(rule, FmaChainRule):
        return reference(rule, a, b, c, atype, btype, ctype, dtype, **kw, addend=addend)
    if isinstance(rule, FusedDotRule):
        return _fused(_module("fused_gemm").fused_gemm, rule, a, b, c, atype, btype, ctype, dtype, **kw,
                      addend=addend)
    with launch_lock:
        return _exact_sum(rule, a, b, c, atype, btype, dtype, use_c, fast=True)


def _check_addend_rule(rule, addend):
    """An ``addend`` goes with a :class:`FusedDotRule`'s sum only (ValueError otherwise)."""
    if addend is not None and not isinstance(rule, FusedDotRule):
        raise ValueError(f"an addend is for a FusedDotRule's sum, not {rule!r}")


def _plus_addend(d, addend, dtype):
    """D bits ``d`` plus ``addend`` (D's bits) where one is given, one IEEE addition rounded
    to nearest (:func:`.converted_sum.add_nearest`), written over ``d``."""
    return d if addend is None else _module("converted_sum").add_nearest(d, addend, dtype, in_place=True)


@functools.lru_cache(maxsize=None)
def _module(name: str):
    """The kernel module ``name``, imported on first use (importing the kernel modules
    defines their numba functions, which ``import fastmma`` does not wait for) and kept, so
    that a small GEMM's call pays for no import statement."""
    import importlib

    return importlib.import_module(f".{name}", __name__)


@functools.lru_cache(maxsize=256)
def _fused_formats(atype: str, btype: str, ctype: str, dtype: str) -> tuple:
    """The format parameters of A, B, C and D as the fused-dot kernels take them, and C's and
    D's smallest normal exponents."""
    return (tuple(format_params(t) for t in (atype, btype, ctype, dtype)),
            get_format(ctype).min_exponent, get_format(dtype).min_exponent)


def _fused(kernel, rule, a, b, c, atype, btype, ctype, dtype, *, use_c, neg_a, neg_b, **extra):
    """``kernel`` (``fused_gemm``, ``fused_gemm_stack`` or ``small_gemm``) on the operands as
    the fused-dot kernels take them: C as the sum reads it (:func:`c_as_accumulator`), each
    format's parameters, C's and D's smallest normal exponents (and ``extra``'s keywords);
    under :data:`launch_lock` (``small_gemm`` runs on the calling thread, but its pass over
    infinities and NaNs on every core)."""
    with launch_lock:
        c, ctype = c_as_accumulator(rule, c, ctype)
        params, c_emin, d_emin = _fused_formats(atype, btype, ctype, dtype)
        return kernel(rule, a, b, c, *params, c_emin=c_emin, d_emin=d_emin, use_c=use_c, neg_a=neg_a, neg_b=neg_b,
                      **extra)


#: A stack of GEMMs of fewer multiply-adds each than this runs through the stack kernels
#: (:func:`.fused_gemm.fused_gemm_stack`), the threads sharing its GEMMs; larger ones run one
#: after another, each shared among the threads (below 2^24, a 256^3 GEMM, a call's fixed
#: cost is a tenth or more of its time).
STACK_MAX_MACS = 1 << 24

#: The stack kernels take a stack in calls of at most this many operand elements (A, B and C
#: of its GEMMs together; a larger GEMM by itself), which bounds the memory of A decoded for
#: them.
STACK_ELEMENTS = 1 << 22


def stack_run(m: int, kk: int, n: int) -> int:
    """How many GEMMs of M x K by K x N one call of the stack kernels takes (at least one)."""
    return max(1, STACK_ELEMENTS // max(1, m * kk + kk * n + m * n))


def execute_stack(rule, a, b, c, atype: str, btype: str, ctype: str, dtype: str, *,
                  use_c: bool = True, neg_a: bool = False, neg_b: bool = False, addend=None) -> np.ndarray:
    """D bits (S, M, N) of a stack of S GEMMs, ``a`` (S, M, K), ``b`` (S, K, N) and ``c``
    (S, M, N): each ``[s]`` exactly :func:`execute` of ``a[s]``, ``b[s]``, ``c[s]`` (and
    ``addend[s]``, where an ``addend`` (S, M, N) is given).  Small
    float GEMMs go through the stack kernels, :func:`stack_run` of them to a call, integer
    and b1 stacks through the integer kernels in one call, small f64 GEMMs through the f64
    stack kernel; anything else is a loop of :func:`execute`."""
    count, m, kk = a.shape
    n = b.shape[2]
    _check_addend_rule(rule, addend)
    if isinstance(rule, ConvertedF16Rule):
        return _module("converted_sum").converted_sum(rule, a, b, c, atype, btype, dtype, use_c=use_c, neg_a=neg_a,
                                                      neg_b=neg_b, inner=execute_stack)
    if isinstance(rule, FfmaExpansionRule):
        return _ffma_expansion(rule, a, b, c, atype, btype, ctype, dtype, use_c=use_c, neg_a=neg_a, neg_b=neg_b)
    integers = isinstance(rule, (IntDotRule, PopcRule)) and count * m * kk * n >= FAST_KERNEL_MIN_MACS
    small_f64 = isinstance(rule, FmaChainRule) and count > 1 and m * kk * n < _module("fma64").HOST_FMA_MIN_WORK
    if integers or small_f64:
        with launch_lock:  # these kernels take a whole stack at once
            return _exact_sum(rule, a, b, c, atype, btype, dtype, use_c, fast=True)
    stacked = (isinstance(rule, FusedDotRule) and m * kk * n < STACK_MAX_MACS
               and count * m * kk * n >= FAST_KERNEL_MIN_MACS)
    run = stack_run(m, kk, n) if stacked else 1
    kw = dict(use_c=use_c, neg_a=neg_a, neg_b=neg_b)
    if run >= count > 1:
        return _fused_stack(rule, a, b, c, atype, btype, ctype, dtype, **kw, addend=addend)
    out = np.empty((count, m, n), get_format(dtype).storage)
    for s0 in range(0, count, run):
        s1 = min(count, s0 + run)
        part = None if addend is None else addend[s0:s1]
        if s1 - s0 > 1:  # the kernels write D into out's part
            _fused_stack(rule, a[s0:s1], b[s0:s1], c[s0:s1], atype, btype, ctype, dtype, into=out[s0:s1], **kw,
                         addend=part)
        else:
            out[s0] = execute(rule, a[s0], b[s0], c[s0], atype, btype, ctype, dtype, **kw,
                              addend=None if part is None else part[0])
    return out


#: :func:`execute_rows` runs stacks of float GEMVs of at most this many columns through the
#: per-element kernel (:func:`.fused_dot.fused_dot_mma`), which pads nothing: the blocked
#: kernels pad a GEMV's columns to whole vectors, so that one column costs them as much as 256
#: (timings: docs/performance.md, "Thresholds of the kernel choice").
ROWS_REFERENCE_COLUMNS = 8


def execute_rows(rule, a, b, c, atype: str, btype: str, ctype: str, dtype: str, *, use_c: bool = True,
                 neg_a: bool = False, neg_b: bool = False, addend=None) -> np.ndarray:
    """:func:`execute_stack` for a stack of many tiny GEMMs (``mma.sp``'s rows, each a GEMV
    with a B of its own): the stack kernels take it in one call whatever its size, where
    :func:`execute_stack` would loop over GEMMs below :data:`FAST_KERNEL_MIN_MACS` (one call
    starts the threads once), and float GEMVs of at most :data:`ROWS_REFERENCE_COLUMNS`
    columns go to the per-element kernel.  fp8's :class:`ConvertedF16Rule` runs its f16 steps through it as
    well, each with an ``addend`` (:func:`execute`'s) after the first."""
    kw = dict(use_c=use_c, neg_a=neg_a, neg_b=neg_b)
    if isinstance(rule, ConvertedF16Rule):
        return _module("converted_sum").converted_sum(rule, a, b, c, atype, btype, dtype, **kw, inner=execute_rows)
    if isinstance(rule, FusedDotRule) and a.shape[0] > 1:
        if b.shape[-1] <= ROWS_REFERENCE_COLUMNS:
            with launch_lock:
                d = _fused_reference(rule, a, b, c, atype, btype, ctype, dtype, use_c, neg_a, neg_b)
            return _plus_addend(d, addend, dtype)
        return _fused_stack(rule, a, b, c, atype, btype, ctype, dtype, **kw, addend=addend)
    if isinstance(rule, IntDotRule) and not (neg_a or neg_b) and addend is None:
        with launch_lock:
            return _exact_sum(rule, a, b, c, atype, btype, dtype, use_c, fast=True)
    return execute_stack(rule, a, b, c, atype, btype, ctype, dtype, use_c=use_c, neg_a=neg_a, neg_b=neg_b,
                         addend=addend)


#: The group sizes of the blocked float kernels (``fused_gemm.KERNELS``), which a spread sparse
#: A's group (the instruction's whole k) must be one of.
SPREAD_GROUPS = (4, 8, 16, 32, 64)


def execute_spread(rule, a, b, c, atype: str, btype: str, ctype: str, dtype: str, *, terms: int,
                   use_c: bool = True, neg_a: bool = False, neg_b: bool = False, addend=None) -> np.ndarray:
    """D bits (M, N) of a sparse A spread to its dense columns (zeros where a row keeps
    nothing) under ``rule``, a dense rule whose group is the sparse instruction's whole k, of
    which ``terms`` (k / 2) can be non-zero: :func:`execute` of the blocked kernels, told how
    many of a group's terms can be non-zero (the float kernels' int32 sums hold 16 below
    2^27; :data:`.fused_gemm.WRAPPING_GROUP`); fp8 ``mma.sp``'s
    :class:`~fastmma.isa.numerics.SpreadConvertedF16Rule` runs its two f16 steps so, each a
    group of half the instruction's dense columns and half its terms.  Exact for B without
    infinities or NaN: a zero term adds nothing and does not move the group's ``e_max``,
    which starts at ``e_zero`` (:mod:`.fused_dot`); an infinity or NaN of B facing a spread
    zero would make a NaN.  ``addend``: :func:`execute`'s."""
    kw = dict(use_c=use_c, neg_a=neg_a, neg_b=neg_b)
    if isinstance(rule, ConvertedF16Rule):  # its f16 steps each hold half the instruction's terms
        inner = functools.partial(execute_spread, terms=terms // 2)
        return _module("converted_sum").converted_sum(rule, a, b, c, atype, btype, dtype, **kw, inner=inner)
    if isinstance(rule, FusedDotRule):
        return _fused(_module("fused_gemm").fused_gemm, rule, a, b, c, atype, btype, ctype, dtype, **kw, terms=terms,
                      addend=addend)
    _check_addend_rule(rule, addend)
    with launch_lock:
        return _exact_sum(rule, a, b, c, atype, btype, dtype, use_c, fast=True)


def fix_spread_specials(rule, a, cols, chunk, b, b_chain, b_index, c, d, atype: str, btype: str, ctype: str,
                        dtype: str, *, columns, use_c: bool = True, neg_a: bool = False, neg_b: bool = False) -> None:
    """Where B holds infinities or NaN, :func:`execute_spread`'s D (``d`` (R, N), run on
    ``b_chain``, B with each of them zeroed) made right in place: each element whose row of
    the sparse ``a`` (R, K/2, kept at the dense places ``cols``; ``chunk``: ``(places, kept)``
    of the sparsity's chunks) keeps a place where its column of ``b[b_index[r]]`` (``b``
    (S, K, N); ``columns`` (S, N), the columns that hold them) holds one is decided by its
    special terms (:func:`.special_chains.fixup_spread_specials`).  ``rule``: the spread
    FusedDotRule."""
    _fused(_module("special_chains").fix_spread_specials, rule, a, b, c, atype, btype, ctype, dtype, use_c=use_c,
           neg_a=neg_a, neg_b=neg_b, d=d, cols=cols, chunk=chunk, b_chain=b_chain, b_index=b_index, columns=columns)


def _ffma_expansion(rule, a, b, c, atype, btype, ctype, dtype, **kw):
    """:class:`FfmaExpansionRule` through :mod:`.ffma_expansion` (one GEMM or a stack)."""
    with launch_lock:
        return _module("ffma_expansion").ffma_expansion(rule, a, b, c, atype, btype, ctype, dtype, **kw)


def _fused_stack(rule, a, b, c, atype, btype, ctype, dtype, **kw):
    """One call of the stack kernels (:func:`.fused_gemm.fused_gemm_stack`; ``into``, where
    given, receives D's bits; ``addend``, where given, is added)."""
    return _fused(_module("fused_gemm").fused_gemm_stack, rule, a, b, c, atype, btype, ctype, dtype, **kw)


def _exact_sum(rule, a, b, c, atype, btype, dtype, use_c, *, fast):
    """The rules whose sums are exact before one final step (integer, b1, f64 FMA chain).
    Where ``fast``, stacks (``a`` (S, M, K) ...) as well: the blocked integer and b1 kernels
    take them, and f64 stacks go to the integer FMA chains' stack kernel (for small GEMMs).

    ``fast`` picks the blocked kernels of ``int_gemm`` over the per-element ones of
    ``int_dot``, and the f64 chains on the CPU's FMAs over the integer ones (``fma64``); each
    pair gives the same bits.
    """
    out = np.empty(a.shape[:-1] + b.shape[-1:], dtype=get_format(dtype).storage)
    a, b, c = read_only(a), read_only(b), read_only(c)
    if isinstance(rule, IntDotRule):
        from .int_dot import int_dot_mma
        from .int_gemm import int_gemm

        fa, fb = get_format(atype), get_format(btype)
        (int_gemm if fast else int_dot_mma)(a, b, c.view(np.int32), out.view(np.int32), fa.bits,
                                            fa.kind == "int", fb.bits, fb.kind == "int", rule.group,
                                            rule.satfinite, use_c)
    elif isinstance(rule, PopcRule):
        from .int_dot import popc_mma
        from .int_gemm import popc_gemm

        (popc_gemm if fast else popc_mma)(a, b, c.view(np.int32), out.view(np.int32), rule.op == "xor", use_c)
    elif isinstance(rule, FmaChainRule):
        from .fma64 import mma_f64, mma_f64_stack

        c, rounding = c if use_c else np.zeros_like(c), ROUNDING_CODES[rule.rounding]
        out[...] = (mma_f64_stack(a, b, c, rounding) if a.ndim == 3
                    else mma_f64(a, b, c, rounding, host_fma=None if fast else False))
    else:
        raise TypeError(f"no kernel for rule {rule!r}")
    return out


def c_as_accumulator(rule, c, ctype):
    """C as the sum sees it: the f32 mode converts an f16 C to f32 first (exactly)."""
    if rule.accumulator == "f32" and ctype == "f16":
        return np.ascontiguousarray(c).view(np.float16).astype(np.float32).view(np.uint32), "f32"
    return c, ctype


def reference(rule, a, b, c, atype: str, btype: str, ctype: str, dtype: str, *,
              use_c: bool = True, neg_a: bool = False, neg_b: bool = False, addend=None) -> np.ndarray:
    """The same as :func:`execute`, through the per-element reference kernels (``addend``
    added after them)."""
    if isinstance(rule, ConvertedF16Rule):
        return _module("converted_sum").converted_sum(rule, a, b, c, atype, btype, dtype, use_c=use_c, neg_a=neg_a,
                                                      neg_b=neg_b, inner=reference)
    if isinstance(rule, FfmaExpansionRule):  # one kernel: each step is one IEEE operation, nothing to simplify
        return _ffma_expansion(rule, a, b, c, atype, btype, ctype, dtype, use_c=use_c, neg_a=neg_a, neg_b=neg_b)
    _check_addend_rule(rule, addend)
    with launch_lock:
        if not isinstance(rule, FusedDotRule):
            return _exact_sum(rule, a, b, c, atype, btype, dtype, use_c, fast=False)
        # the oracle takes A's and B's bits widened (one compile for every width); execute_rows'
        # GEMVs, a hot path, take them as they come
        d = _fused_reference(rule, widened(a), widened(b), c, atype, btype, ctype, dtype, use_c, neg_a, neg_b)
    return _plus_addend(d, addend, dtype)


def _fused_reference(rule, a, b, c, atype, btype, ctype, dtype, use_c, neg_a, neg_b):
    """D bits of a :class:`FusedDotRule` by the per-element kernel
    (:func:`.fused_dot.fused_dot_mma`), for one GEMM or a stack of them."""
    fused_dot = _module("fused_dot")
    one = a.ndim == 2
    if one:
        a, b, c = a[None], b[None], c[None]
    out = np.empty(a.shape[:-1] + b.shape[-1:], dtype=get_format(dtype).storage)
    c, ctype = c_as_accumulator(rule, c, ctype)
    a, b, c = read_only(a), read_only(b), read_only(c)
    fused_dot.fused_dot_mma(a, b, c, out, *(format_params(t) for t in (atype, btype, ctype, dtype)),
                            rule.group, rule.frac_bits, rule.e_zero, rule.out_man_bits,
                            fused_dot.rounding_code(rule), use_c, int(neg_a), int(neg_b))
    return out[0] if one else out
