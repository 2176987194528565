"""Short forms (``fastmma.isa.short_form``): an instruction named by shape and types, read the
same way by ``fastmma.mma``, ``fastmma.mma_sp``, ``fastmma.matmul`` and ``fastmma.matmul_sp``;
checked against the ISA's full text and against recordings of the GPU."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import fastmma
from fastmma.conform import load_recording
from fastmma.errors import InvalidInstructionError
from fastmma.formats import from_bits, to_bits
from fastmma.gemm import resolve_instruction
from fastmma.isa import parse
from fastmma.layout.mma_fragments import fragment_layout, sparse_fragment_layout
from fastmma.layout.sparse_metadata import kept_columns
from fastmma.layout.wmma_fragments import unpack_fragment
from fastmma.sparse_gemm import resolve_sparse_instruction

PROBES = Path(__file__).parent / "golden" / "probes"
Q10 = sorted((PROBES / "q10_mma_sync").glob("*.npz"))
Q15 = sorted((PROBES / "q15_mma_sp").glob("*.npz"))


@pytest.mark.parametrize("short,full", [
    ("m64n256k16.f32.f16.f16", "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"),
    (".m64n8k32.s32.s8.u8.satfinite", "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8.satfinite"),
    ("m16n16k16.f32.f32", "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32"),
    ("m16n16k8.f32.tf32.tf32.f32", "wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32"),
    ("m8n8k4.f64.f64.f64.f64", "wmma.mma.sync.aligned.row.col.m8n8k4.f64.f64.f64.f64"),
    ("m16n8k16.f32.f16.f16.f32", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
    ("m16n8k32.f16.e4m3.e5m2.f16", "mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e5m2.f16"),
])
def test_a_dense_short_form_is_the_first_kind_it_parses_as(short, full):
    assert resolve_instruction(short) == parse(full)


@pytest.mark.parametrize("short,full", [
    ("m64n256k32.f32.f16.f16", "wgmma.mma_async.sp.sync.aligned.m64n256k32.f32.f16.f16"),
    ("m16n8k32.f32.f16.f16.f32", "mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"),
    ("m16n8k64.satfinite.s32.s8.s8.s32", "mma.sp.sync.aligned.m16n8k64.row.col.satfinite.s32.s8.s8.s32"),
])
def test_a_sparse_short_form_is_the_first_kind_it_parses_as(short, full):
    assert resolve_sparse_instruction(short) == parse(full)


def _short(ptx: str) -> str:
    """The short form of a recorded instruction's text: its qualifiers after ``.aligned``,
    without the layouts (which ``mma`` and ``mma.sp`` must be ``.row.col``)."""
    return re.sub(r"^.*?\.aligned\.", "", ptx.split()[0]).replace(".row.col", "")


@pytest.mark.parametrize("path", Q10, ids=lambda p: p.stem)
def test_fastmma_mma_takes_the_short_form_of_each_recorded_mma_sync(path):
    z, meta = load_recording(path)
    inst = parse(meta["ptx"][0])
    s = str(inst.shape)
    types = dict(a=inst.atype, b=inst.btype, c=inst.ctype, d=inst.dtype)
    mats = {x: unpack_fragment(z[f"{x}_regs"][0], fragment_layout(x, s, t)) for x, t in types.items()}
    D = fastmma.mma(_short(meta["ptx"][0]), *(from_bits(mats[x], types[x]) for x in "abc"))
    np.testing.assert_array_equal(to_bits(D, inst.dtype), mats["d"])


@pytest.mark.parametrize("path", [p for p in Q15 if p.is_file()][::3], ids=lambda p: p.stem)
def test_fastmma_mma_sp_takes_the_short_form_of_each_recorded_mma_sp(path):
    """The short form reads as ``mma.sp``, whose metadata may name a chunk's two places in
    either order, so the recorded ``::ordered_metadata`` columns are valid for it too."""
    z, meta = load_recording(path)
    inst = parse(meta["ptx"][0])
    s = str(inst.shape)
    types = dict(a=inst.atype, b=inst.btype, c=inst.ctype, d=inst.dtype)
    mats = {x: unpack_fragment(z[f"{x}_regs"][0], sparse_fragment_layout(x, s, t)) for x, t in types.items()}
    cols = kept_columns(z["e_regs"][0, :, 0], inst.atype, s, inst.selector, inst.spvariant)
    D = fastmma.mma_sp(_short(meta["ptx"][0]), from_bits(mats["a"], inst.atype), cols,
                       from_bits(mats["b"], inst.btype), from_bits(mats["c"], inst.ctype))
    np.testing.assert_array_equal(to_bits(D, inst.dtype), mats["d"])


def test_fastmma_mma_short_form_on_a_warpgroup():
    A, B = np.ones((64, 16), np.float16), np.full((16, 8), 2.0, np.float16)
    C = np.full((64, 8), 0.5, np.float32)
    assert (fastmma.mma("m64n8k16.f32.f16.f16", A, B, C) == 32.5).all()
    assert (fastmma.mma("m64n8k16.f32.f16.f16", A, B, C, scale_d=False) == 32.0).all()


@pytest.mark.parametrize("call,needle", [
    (lambda: fastmma.mma("m64n8k32.f32.f16.f16", np.ones((64, 32), np.float16), np.ones((32, 8), np.float16)),
     r"fastmma.mma needs a dense mma instruction .*fastmma.mma_sp takes .*; short form m64n8k32.f32.f16.f16 reads "
     r"as wgmma.mma_async.sp"),
    (lambda: fastmma.mma("m64n8k33.f32.f16.f16", np.ones((64, 33), np.float16), np.ones((33, 8), np.float16)),
     "'m64n8k33.f32.f16.f16' is not a valid short form"),
    (lambda: fastmma.mma("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16", None, None),
     r"fastmma.mma needs a dense mma instruction .*fastmma.mma_sp takes mma.sp"),
    (lambda: fastmma.mma(parse("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"), None, None),
     r"fastmma.mma needs a dense mma instruction .*, got mma.sp"),
    (lambda: fastmma.mma_sp("m64n8k16.f32.f16.f16", None, None, None),
     r"fastmma.mma_sp needs a sparse instruction .*; short form m64n8k16.f32.f16.f16 reads as wgmma.mma_async"),
    (lambda: fastmma.mma_sp("m64n8k17.f32.f16.f16", None, None, None),
     r"'m64n8k17.f32.f16.f16' is not a valid short form \(as wgmma.mma_async.sp: "),
    (lambda: fastmma.mma_sp("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", None, None, None),
     r"fastmma.mma_sp needs a sparse instruction .*; fastmma.mma takes the dense ones, got wmma.mma"),
    (lambda: fastmma.mma(16, None, None), "instruction must be PTX text, a short form such as 'm64n256k16"),
    (lambda: fastmma.matmul(None, None, instruction="ldmatrix.sync.aligned.m8n8.x1.shared.b16"),
     "matmul needs a dense mma instruction"),
])
def test_a_wrong_instruction_is_refused_by_name(call, needle):
    with pytest.raises(InvalidInstructionError, match=needle):
        call()
