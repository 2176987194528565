"""The fused-dot rule (``fused_dot``) for whole GEMMs, at near-BLAS speed.

Same numbers as :func:`fastmma.kernels.fused_dot.fused_dot_mma`, bit for bit, computed
another way.  For each output element and each group of ``G`` k-terms:

* pass 1: ``e_max = max(e_zero, e_c, max_k(e_a + e_b))`` over the format exponents
  (subnormals at the smallest normal exponent, zeros at -2^20 so they never win), and the
  scale ``S = 2^(frac_bits - e_max)``;
* pass 2: ``T = sum_k trunc(a_k * b_k * S)``.  Each term is below ``2^(frac_bits+2)``, so
  when the products and scalings are exact the truncating float-to-int conversion is the
  rule's truncation, and the integer sum is exact;
* the C (accumulator) term ``trunc(c * S)`` is added in int64, ``(T + t_c) * 2^(e_max -
  frac_bits)`` is exact in float64 and is rounded to the accumulator by masking bits
  (toward zero) or by adding and subtracting a power-of-two constant (nearest even), or both
  in turn (toward zero to f32, then to nearest even f16); the fused rounding gives +0 for a
  zero, the conversion to f16 keeps a non-zero f32's sign; overflow gives inf.  The float32
  path rounds toward zero to f32 in 16 int32 lanes instead.  On x86 the kernel sets the
  CPU's rounding mode to toward zero (:mod:`.fp_env`), and the int32-to-float32
  conversion and ``ldexp`` do the truncation (:func:`_finish_row_rz_fenv`; where every
  non-zero result is a normal float32, the conversion and an exact multiply,
  :func:`_finish_row_rz_normal`); elsewhere the integer sum's low bits are cleared below
  its leading ``out_man_bits + 1`` (count leading zeros) and ``ldexp`` puts it in place
  (:func:`_finish_row_rz32`).

Pass 2 by fused multiply-adds (fp8 operands, x86 with AVX-512: :func:`_rows_fma`).  A
group's fp8 terms are below ``2^15`` grid units, so 32 of them (64 in a sparse A spread to its
dense columns) fit the window of a float32 "magic" accumulator ``1.5 * 2^23 * g`` whose last
bit is the grid ``g``: a fused multiply-add rounding toward zero then rounds each exact
product down onto the grid, one vector operation per 16 products where the conversion pass
takes four (product, scale, truncating conversion, integer add).  Rounding down is
truncation for all but the negative terms that are not whole on the grid; those are counted
in uint8 lanes from the exponents of the last set bits of the operands' significands
(:class:`LowCodes`) and added back.  Both loops keep their running values in registers
(:mod:`.register_blocks`).  f16, bf16 and tf32 terms (25 fraction bits, up to 2^27 grid
units) do not fit a float32 window.

Two lane widths.  The float32 path keeps exponents in int8 (64 lanes) where each operand's
data span at most about 42 binades (any f16 or fp8 data; :func:`exponent_lanes`), else in
int16 (32 lanes), products and scales in float32 (16 lanes) and sums each group in int32
(``G * 2^(frac_bits+2) <= 2^31``); A is decoded pre-multiplied by a power of two ``2^sh``
so that every product and scale is a normal float32 (``sh`` is chosen from an exponent
range, :func:`prescale`).  For f16 and fp8 inputs one ``sh`` and the int8 lanes fit every
value of the formats (:func:`whole_format_lanes`), so their data are not scanned at all:
decoding A reports its rows with infinities or NaNs, the kernel whether B has any, and only
then are B's columns scanned.  bf16/tf32 data are scanned for their range
(:func:`scan_operands`) and take the float32 path unless they span more binades than
float32 holds.  A GEMM of few rows (:data:`NARROW_ROWS`) scans A and a sample of B's rows
only: B's exponents get a window that fits the float32 path and int8 lanes beside A's
range (:func:`b_window`), its decoding flags an element outside it as it flags an inf or
NaN, and only where B holds one is the GEMM run again with B scanned (for such a GEMM,
scanning B cost as much as decoding it).  The float64 path (8 lanes) handles every range.
Each path decodes its operands in its own lanes: the float32 path A from bits moved to the
top of an int32 (:func:`_decode_f32`, 16 lanes, no run-time shift wider than 32 bits) and
B, unscaled, as the IEEE half or float32 that each of its formats is a narrower field of
(:func:`_decode_b_run`: a half conversion or a bit move per value, a GEMV's main cost), the
float64 path in int64 (:func:`_decode_value`).  Decoding sets the thread's MXCSR to its
defaults, as the rows do: a caller's flush-to-zero would otherwise turn bf16/tf32
subnormals to zeros in the float32 lanes.

Infinities and NaNs in A, B or C are not handled by the fast paths: the rows, columns and
elements they touch are recomputed with the reference kernel afterwards.  An accumulator
that overflows to infinity from finite inputs stays infinite (finite products cannot cancel
it).

Blocking: for each N-block of ``NB`` columns and K-block of ``KB``, a decoded B panel is
shared by the threads, which take blocks of ``MB`` rows of A (64, or fewer where M would
leave a thread without a block: :func:`_block_sizes`).  A is decoded once, already
packed block by block and group by group (:func:`decode_packed`'s layout: a group's A values
for all rows of a block are contiguous; each group's runs of a block of rows are gathered and
decoded as one array, :func:`_decode_packed_block`), by the task that computes the block
(:func:`_gemm_body`), because packing it per N-block would read all of A from memory
once per N-block.  For each group the
``G x NB`` slice of the panel stays in cache while the rows stream past it.  ``G`` is a compile-time constant
(a variant per group size, :mod:`.variants`), so LLVM unrolls the k-terms and vectorises over columns.
The K-blocks are long (2048 by default): each one costs a round trip of the accumulator
tile, which costs more than a panel that no longer fits the L2 cache.  Every scratch
array starts on a cache line (:func:`_aligned_empty`, :func:`carve`): a 16-lane vector that
straddles two lines costs two loads.  A
decoded and B's panels are carved from one buffer of the scratch pool (:mod:`.scratch`),
which keeps it mapped for the next call, where memory from the C allocator afresh may come
as fresh pages, each a fault.

Indexing.  An index that numba cannot prove non-negative (``b[kb + k, jb + j]``) gets a
wrap-around test per element, which turns a loop over a row into gathers or stops it
vectorising; the loops index a row view (``b[kb + k, jb:jb + nb]``) by the loop variable
instead.
"""

from __future__ import annotations

from .decode import (NEG_EXP, ZERO_EXP8, _AS_F16, _GENERAL, _I32, _VIA_F16, _VIA_F32, _decode_b_run, _decode_f32,
                     _decode_packed_row, _decode_value, _low_code, b_decoder, decode_packed, decodes_by_blocks,
                     f32_decoder)
from .drive import FMA_KERNELS, KERNELS, _accumulator, fused_gemm, fused_gemm_stack
from .passes import _aligned_empty, _finish_row_rz_normal, _group_row64, _may_wrap, _normal_bound, _pass2, _scale_normal
from .plan import (B_SAMPLE_ROWS, INT16_LANES, NARROW_CHUNK, NARROW_ROWS, _block_sizes, _int8_width, _packed_empty,
                   _pad_rows, b_window, bounded_lanes, column_chunks, exponent_lanes, low_codes, prescale,
                   whole_format_lanes)
from .rounding import (ELEMENT_CHUNK, _c_exponent, _d_bits, _f16_bits_of, _finish_row, _finish_row_rne16,
                       _finish_row_rz32, _finish_row_rz_fenv, bits_sum, f16_bits_of_f32)
from .scan import _NO_LOW, scan_columns, scan_columns_by, scan_operands, scan_rows, scan_rows_by
from .specials import fix_specials, fixup_specials
