"""How each instruction combines numbers on sm_90a, as data the kernels read.

The PTX ISA leaves the order, rounding and subnormal handling of the tensor-core sums
unspecified ("Precision and rounding" under wgmma.mma_async and wmma.mma); the H100
recordings in tests/golden decide.  A rule names the mechanism (one kernel module each in
``fastmma.kernels``) and its parameters; the mechanism itself lives in the kernels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class FusedDotRule:
    """Aligned-and-truncated fused sum of ``group`` products plus C (``kernels.fused_dot``).

    ``frac_bits`` fraction bits are kept below the largest exponent of a group; zero terms
    count with exponent ``e_zero``; each group's exact sum is rounded once, toward zero
    (``"rz"``, to an f32 with ``out_man_bits`` fraction bits) or to nearest even (``"rne"``,
    to f16).  ``accumulator`` is the mode the sum runs in: ``"f32"`` (C enters as an f32
    value, an f16 C converted exactly) or ``"f16"`` (C and D both f16).  ``output="f16"``:
    the f32 result is then converted to f16, to nearest even.  The fused rounding gives +0
    for any zero; the conversion to f16 keeps the sign of a non-zero f32.
    """

    group: int
    frac_bits: int
    e_zero: int
    out_man_bits: int
    rounding: str
    accumulator: str = "f32"
    output: str | None = None

    def describe(self) -> str:
        """The rule in one line of words, as ``fastmma explain`` prints it."""
        rnd = ("toward zero to f32" if self.rounding == "rz" else "to nearest even to f16")
        then = ", then converted to f16 (nearest even)" if self.output == "f16" else ""
        return (
            f"exact products; C (as {self.accumulator}) plus {self.group} products summed at once, each term "
            f"truncated to {self.frac_bits} fraction bits below the largest exponent of the group (zero terms "
            f"count as 2^{self.e_zero}); the sum rounded {rnd} with {self.out_man_bits} fraction bits{then}; "
            f"NaN results canonical; a zero sum or one rounded to zero gives +0"
        )


@dataclass(frozen=True)
class IntDotRule:
    """Exact integer dot product plus C, wrapped to s32 or clamped (``.satfinite``) once per
    ``group`` terms (``kernels.int_dot``)."""

    group: int
    satfinite: bool

    def describe(self) -> str:
        """The rule in one line of words, as ``fastmma explain`` prints it."""
        end = "clamped to [-2^31, 2^31-1]" if self.satfinite else "wrapped modulo 2^32"
        return f"exact integer sum of C and {self.group} products, {end}"


@dataclass(frozen=True)
class PopcRule:
    """C plus the population count of ``a op b`` over k, wrapped modulo 2^32."""

    op: str
    group: int

    def describe(self) -> str:
        """The rule in one line of words, as ``fastmma explain`` prints it."""
        return f"C + popc(a {self.op.upper()} b) over k = {self.group}, wrapped modulo 2^32"


@dataclass(frozen=True)
class FmaChainRule:
    """A chain of f64 fused multiply-adds over k = 0..K-1 starting from C, each rounded
    ``rounding`` (``kernels.fma64``)."""

    rounding: str

    def describe(self) -> str:
        """The rule in one line of words, as ``fastmma explain`` prints it."""
        return f"fma chain over k in increasing order starting from C, each step rounded .{self.rounding}"


_FP8 = ("e4m3", "e5m2")


def float_rule(atype: str, ctype: str, dtype: str, group: int) -> FusedDotRule:
    """The Hopper tensor core's rule for float inputs (recorded on the H100).

    fp8 inputs keep 13 fraction bits per term, others 25; an f32 result keeps 13 fraction
    bits for fp8 inputs.  The sum runs in the f16 mode (zero terms at 2^-21) only when both
    C and D are f16, rounded once to nearest even f16; otherwise in the f32 mode (2^-133, an
    f16 C converted to f32 first), rounded toward zero to f32 and, where D is f16, converted
    to f16 after that (recorded: a double rounding).
    """
    frac_bits = 13 if atype in _FP8 else 25
    if ctype == "f16" and dtype == "f16":
        return FusedDotRule(group, frac_bits, -21, 10, "rne", "f16")
    out_man_bits = 13 if atype in _FP8 else 23
    return FusedDotRule(group, frac_bits, -133, out_man_bits, "rz", "f32", "f16" if dtype == "f16" else None)


# The rules are frozen and each instruction asks for its own at every call (``inst.rule``),
# so each is built once per set of qualifiers, not in every call of a single wgmma.
@functools.lru_cache(maxsize=None)
def wgmma_rule(atype: str, dtype: str, k: int, satfinite: bool, op: str | None):
    """The numerics rule of a ``wgmma.mma_async`` of A type ``atype``, D type ``dtype`` and
    shape k ``k``: all k terms fused in one step for the floats, exact sums for integers
    and b1 (recordings in tests/golden/wgmma)."""
    if atype == "b1":
        return PopcRule(op or "and", k)
    if atype in ("s8", "u8"):
        return IntDotRule(k, satfinite)
    return float_rule(atype, dtype, dtype, k)


@functools.lru_cache(maxsize=None)
def wgmma_sp_rule(atype: str, dtype: str, k: int, satfinite: bool):
    """The rule of one ``wgmma.mma_async.sp`` (PTX ISA 9.7.15.6; the recordings in
    tests/golden/probes/q16_wgmma_sp), applied to each row's ``k / 2`` kept products: the dense
    ``wgmma.mma_async`` rule of a K of ``k / 2`` (one fused sum for floats, fp8 included; the
    exact dot for integers).  The elements the metadata leaves out take no part."""
    return wgmma_rule(atype, dtype, k // 2, satfinite, None)


def _exact_rule(atype: str, k: int, satfinite: bool, op: str | None, rounding: str | None):
    """The rule of a warp-level mma (``wmma`` or ``mma.sync``) whose sums are exact before one
    final step: the f64 fma chain, the b1 popc and the integer dot; None for float inputs."""
    if atype == "f64":
        return FmaChainRule(rounding or "rn")
    if atype == "b1":
        return PopcRule(op, k)
    if atype in ("s8", "u8", "s4", "u4"):
        return IntDotRule(k, satfinite)
    return None


@functools.lru_cache(maxsize=None)
def wmma_rule(atype: str, ctype: str, dtype: str, k: int, satfinite: bool, op: str | None,
              rounding: str | None):
    """The numerics rule of a ``wmma.mma``: as :func:`wgmma_rule`, but tf32 ``m16n16k8`` runs
    as two groups of 4 and f64 as an FMA chain rounded ``rounding`` (recordings in
    tests/golden/wmma)."""
    exact = _exact_rule(atype, k, satfinite, op, rounding)
    if exact is not None:
        return exact
    # wmma tf32 m16n16k8 runs as two fused steps of k = 4 (recorded)
    group = 4 if atype == "tf32" else k
    return float_rule(atype, ctype, dtype, group)


@dataclass(frozen=True)
class ConvertedF16Rule:
    """fp8 ``mma.sync`` on sm_90a, as ptxas expands it (its SASS: ``F2FP.F16.E4M3.UNPACK_B``,
    two ``HMMA`` with f16 inputs, then ``FADD`` or ``HADD2``; tests/golden/probes/q10_mma_sync
    holds the recordings).

    Each instruction's A and B are converted to f16 (exactly: every e4m3 and e5m2 value is an
    f16).  ``inner``, the f16 tensor core's rule in D's type with ``group = k / 2``, sums the
    k terms in two fused steps from +0: first the terms whose k % 4 is 0 or 1, then the rest
    (:meth:`k_order`).  C is then added to that sum by one IEEE addition in D's type, rounded
    to nearest even (a NaN result canonical).  A k-loop repeats this per instruction, with the
    accumulator as the next instruction's C.
    """

    inner: FusedDotRule
    k: int

    @property
    def group(self) -> int:
        """The k terms of one instruction: K must be a multiple of it."""
        return self.k

    def k_order(self) -> tuple[int, ...]:
        """The instruction's k indices in the order the two f16 steps take them."""
        return tuple(i for i in range(self.k) if i % 4 < 2) + tuple(i for i in range(self.k) if i % 4 >= 2)

    def describe(self) -> str:
        """The rule in one line of words, as ``fastmma explain`` prints it."""
        return (f"A and B converted to f16; {self.k // 2} products with k % 4 in {{0, 1}}, then the other "
                f"{self.k // 2}, each half by the f16 rule ({self.inner.describe()}), from +0; then C added "
                f"with one addition rounded to nearest even, NaN canonical")


@dataclass(frozen=True)
class SparseConvertedF16Rule(ConvertedF16Rule):
    """fp8 ``mma.sp`` on sm_90a, as ptxas (CUDA 13.0) expands it: its SASS converts A and B to
    f16 (``F2FP.F16.E4M3.UNPACK_B``), re-packs the metadata, and issues two sparse f16
    ``HMMA.SP.16832.F32``, the first from zero and the second onto the first's result, then adds
    C with ``FADD`` (tests/golden/probes/q15_mma_sp holds the recordings).

    The rule runs on a row's ``k`` kept products (half the instruction's K), in compressed
    order (element ``c`` of the compressed row lies in the 4-wide chunk ``c // 2``): the first
    step takes the kept products of the even chunks, the second those of the odd chunks; each
    step is the f16 tensor core's fused sum of ``k / 2`` terms (``inner``).
    """

    #: how many of the rule's ``k`` columns one 4-wide chunk of the dense row holds, and what
    #: they are
    per_chunk = 2
    columns = "kept products"

    def k_order(self) -> tuple[int, ...]:
        """The rule's columns in the order the two f16 steps take them: the even chunks', then
        the odd chunks'."""
        odd = [(i // self.per_chunk) % 2 for i in range(self.k)]
        return tuple(i for i in range(self.k) if not odd[i]) + tuple(i for i in range(self.k) if odd[i])

    def describe(self) -> str:
        """The rule in one line of words, as ``fastmma explain`` prints it."""
        return (f"A and B converted to f16; of the {self.k} {self.columns}, those of the even 4-wide chunks, then "
                f"those of the odd ones, each half by the f16 rule ({self.inner.describe()}), the first from +0 "
                f"and the second onto it; then C added with one addition rounded to nearest even, NaN canonical")


@dataclass(frozen=True)
class SpreadConvertedF16Rule(SparseConvertedF16Rule):
    """:class:`SparseConvertedF16Rule` on a sparse A spread to its dense columns (zeros where
    a row keeps nothing; ``fastmma.matmul_sp``): one instruction is ``k`` dense columns, the
    first f16 step takes the columns of the even 4-wide chunks and the second those of the
    odd ones, each a fused sum of ``k / 2`` terms (``inner``) of which half can be non-zero.
    The same bits as the sparse rule wherever B holds no infinity or NaN: a zero term adds
    nothing to a fused sum and does not move its largest exponent."""

    per_chunk = 4
    columns = "dense columns (half of them zero)"


@dataclass(frozen=True)
class FfmaExpansionRule:
    """``mma.sync.m8n8k4`` with f16 inputs on sm_90a, as ptxas (CUDA 13.0) expands it: sm_90 has
    no tensor-core form of it, and the SASS converts each f16 element to f32 (``HADD2.F32``)
    and sums with single-precision ``FFMA``, ``FMUL`` and ``FADD``, each rounded to nearest
    even, subnormals kept, a NaN canonical (tests/golden/probes/q14_mma_m8n8k4 holds the
    recordings).  ``order`` is the SASS's order of the 4 k terms:

    * ``chain`` (an f32 D): ``s = fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, +0))))``,
      then ``D = C + s``;
    * ``pairs`` (an f16 D): ``p01 = fma(a1, b1, a0 * b0)``, ``p23 = fma(a3, b3, a2 * b2)``,
      then ``(C + p01) + p23`` in f32, converted to f16 to nearest even.

    An f16 C is converted to f32 exactly.  A k-loop repeats this per instruction, with the
    accumulator (rounded to D's type) as the next instruction's C.
    """

    order: str
    k: int = 4

    @property
    def group(self) -> int:
        """The k terms of one instruction: K must be a multiple of it."""
        return self.k

    def describe(self) -> str:
        """The rule in one line of words, as ``fastmma explain`` prints it."""
        if self.order == "chain":
            return ("f16 converted to f32; s = fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, +0)))), then C + s, "
                    "each step one f32 operation rounded to nearest even (subnormals kept, NaN canonical)")
        return ("f16 converted to f32; (C + fma(a1, b1, a0 * b0)) + fma(a3, b3, a2 * b2), each step one f32 "
                "operation rounded to nearest even (subnormals kept, NaN canonical), then to f16 to nearest even")


@functools.lru_cache(maxsize=None)
def mma_rule(atype: str, ctype: str, dtype: str, k: int, satfinite: bool, op: str | None,
             rounding: str | None, quad_pairs: bool = False):
    """The rule of one ``mma.sync`` form on sm_90a (PTX ISA 9.7.14.5; the recordings in
    tests/golden/probes/q10_mma_sync): an f64 fma chain, a b1 popc, an exact integer dot, the
    fused float sum of all k terms at once (f16, bf16 and tf32: unlike ``wmma``'s m16n16k8,
    ``mma``'s tf32 m16n8k8 is one fused step of 8), for fp8 :class:`ConvertedF16Rule`, and
    for the ``quad_pairs`` form (m8n8k4 with f16 inputs) :class:`FfmaExpansionRule`."""
    exact = _exact_rule(atype, k, satfinite, op, rounding)
    if exact is not None:
        return exact
    if atype in _FP8:
        return ConvertedF16Rule(float_rule("f16", dtype, dtype, k // 2), k)
    if quad_pairs:
        return FfmaExpansionRule("pairs" if dtype == "f16" else "chain")
    return float_rule(atype, ctype, dtype, k)


@functools.lru_cache(maxsize=None)
def mma_sp_rule(atype: str, ctype: str, dtype: str, k: int, satfinite: bool):
    """The rule of one ``mma.sp`` form on sm_90a (PTX ISA 9.7.14.6; the recordings in
    tests/golden/probes/q15_mma_sp), applied to each row's ``k / 2`` kept products: the
    elements the metadata leaves out take no part (an infinity or NaN of B facing one does
    not reach D).  Float inputs: one fused sum of the kept products plus C, as the dense
    ``mma`` of the same types sums its k terms; integers: the exact dot, wrapped or clamped
    once; fp8: :class:`SparseConvertedF16Rule`."""
    kept = k // 2
    exact = _exact_rule(atype, kept, satfinite, None, None)
    if exact is not None:
        return exact
    if atype in _FP8:
        return SparseConvertedF16Rule(float_rule("f16", dtype, dtype, kept // 2), kept)
    return float_rule(atype, ctype, dtype, kept)
