"""Numba kernels: how numbers combine, exactly as the hardware does.

Kernels know nothing of registers, descriptors or instructions' text: they see whole arrays
of operand bits and return accumulator bits.  :func:`execute` is the one place that maps a
numerics rule (``fastmma.isa.numerics``) onto its kernel.
"""

from __future__ import annotations

import threading

import numpy as np

from ..formats import get_format
from ..isa.numerics import FmaChainRule, FusedDotRule, IntDotRule, PopcRule
from .decode import float_params

_ROUNDING_CODES = {"rn": 0, "rz": 1, "rm": 2, "rp": 3}

#: Held while a parallel kernel runs.  Each kernel already uses every core, and numba's
#: fallback threading layer ("workqueue") must not be entered from two Python threads at once,
#: so concurrent callers take turns; results never depend on it.
launch_lock = threading.RLock()


def _params(name: str) -> tuple:
    return tuple(np.int64(x) for x in float_params(get_format(name)))


def execute(rule, a, b, c, atype: str, btype: str, ctype: str, dtype: str, *,
            use_c: bool = True, neg_a: bool = False, neg_b: bool = False) -> np.ndarray:
    """D bits (M, N) = C + A (M, K) · B (K, N) under ``rule``.

    ``a``, ``b``, ``c`` are contiguous arrays of raw element bits in the storage dtype of
    their formats (sub-byte elements one per byte).  ``use_c=False`` ignores C entirely
    (scale-d = 0); ``neg_a``/``neg_b`` negate A/B (imm-scale = -1).  K must be a multiple
    of the rule's group size.
    """
    with launch_lock:
        return _execute(rule, a, b, c, atype, btype, ctype, dtype, use_c, neg_a, neg_b)


def _execute(rule, a, b, c, atype, btype, ctype, dtype, use_c, neg_a, neg_b):
    m, n = a.shape[0], b.shape[1]
    out = np.empty((m, n), dtype=get_format(dtype).storage)
    if isinstance(rule, FusedDotRule):
        from .fused_dot import ROUND_RNE, ROUND_RZ, fused_dot_mma

        rounding = ROUND_RNE if rule.rounding == "rne" else ROUND_RZ
        fused_dot_mma(a, b, c, out, _params(atype), _params(btype), _params(ctype), _params(dtype),
                      rule.group, rule.frac_bits, rule.e_zero, rule.out_man_bits, rounding,
                      use_c, int(neg_a), int(neg_b))
    elif isinstance(rule, IntDotRule):
        from .int_dot import int_dot_mma

        fa, fb = get_format(atype), get_format(btype)
        int_dot_mma(a, b, c.view(np.int32), out.view(np.int32), fa.bits, fa.kind == "int",
                    fb.bits, fb.kind == "int", rule.group, rule.satfinite, use_c)
    elif isinstance(rule, PopcRule):
        from .int_dot import popc_mma

        popc_mma(a, b, c.view(np.int32), out.view(np.int32), rule.op == "xor", use_c)
    elif isinstance(rule, FmaChainRule):
        from .fma64 import mma_f64

        if not use_c:
            c = np.zeros_like(c)
        out[...] = mma_f64(a, b, c, _ROUNDING_CODES[rule.rounding])
    else:
        raise TypeError(f"no kernel for rule {rule!r}")
    return out
