"""Every recorded H100 case, replayed through the public API, bit for bit."""

import io
import json

import numpy as np
import pytest

from fastmma import conform
from fastmma.errors import ConformanceError
from conftest import GOLDEN, golden_files

WMMA = golden_files("wmma")
WGMMA = golden_files("wgmma")


def test_recordings_are_present():
    assert len(WMMA) >= 100 and len(WGMMA) >= 250


def assert_conforms(path):
    """Every case of the recording at ``path`` replays bit for bit."""
    res = conform.check_file(path)
    assert res.error is None, res.error
    assert res.cases > 0
    assert res.ok, "\n".join(map(str, res.mismatches))


@pytest.mark.parametrize("path", WMMA, ids=lambda p: p.stem)
def test_wmma_recording(path):
    assert_conforms(path)


@pytest.mark.parametrize("path", WGMMA, ids=lambda p: p.stem)
def test_wgmma_recording(path):
    assert_conforms(path)


@pytest.mark.parametrize("path", WMMA[::5] + WGMMA[::5], ids=lambda p: p.stem)
def test_recording_through_the_fast_kernels(path, monkeypatch):
    """The smallest instructions normally run on the per-element kernels; the GEMM kernels
    must reproduce the hardware for them too."""
    from fastmma import kernels

    monkeypatch.setattr(kernels, "FAST_KERNEL_MIN_MACS", 0)
    monkeypatch.setattr(kernels, "SMALL_KERNEL_MACS", -1)
    assert_conforms(path)


@pytest.mark.parametrize("path", WGMMA, ids=lambda p: p.stem)
def test_recording_through_the_reference_kernels(path, monkeypatch):
    """Most wgmma shapes normally run on the GEMM kernels; the per-element kernels, the
    oracle those are tested against, must reproduce the hardware for every one of them."""
    from fastmma import kernels

    monkeypatch.setattr(kernels, "FAST_KERNEL_MIN_MACS", 1 << 62)
    monkeypatch.setattr(kernels, "SMALL_KERNEL_MACS", -1)
    assert_conforms(path)


@pytest.mark.parametrize("path", WGMMA[::3] + WMMA[::3], ids=lambda p: p.stem)
def test_recording_through_the_small_kernel(path, monkeypatch):
    """The one-thread kernel of small float tiles (:mod:`fastmma.kernels.small_gemm`) takes
    every float instruction here, the wide wgmma shapes included, and must reproduce the
    hardware for each (integer and f64 recordings run as usual)."""
    from fastmma import kernels

    monkeypatch.setattr(kernels, "SMALL_KERNEL_MACS", 1 << 62)
    assert_conforms(path)


def test_runner_reports_a_flipped_bit(tmp_path):
    src = WMMA[0]
    with np.load(src) as data:
        arrays = {k: data[k].copy() for k in data.files}
    arrays["d_frag"][3, 5, 1] ^= 1
    bad = tmp_path / src.name
    np.savez_compressed(bad, **arrays)
    out = io.StringIO()
    passed, failed = conform.run([bad], out=out)
    text = out.getvalue()
    assert failed == 1 and passed == arrays["mode"].size - 1
    assert f"FAIL {bad.name}" in text
    assert "case 3: d_frag[5, 1]" in text
    assert text.strip().endswith(f"{passed} passed, 1 failed")


def test_runner_counts_an_unreadable_file_as_failed(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a recording")
    out = io.StringIO()
    passed, failed = conform.run([junk], out=out)
    assert (passed, failed) == (0, 1)
    assert "cannot run" in out.getvalue()


def test_a_directory_without_recordings_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("no recordings here")
    with pytest.raises(ConformanceError, match="no recordings"):
        conform.run([tmp_path], out=io.StringIO())


def test_runner_counts_an_unknown_family_as_failed(tmp_path):
    src = WMMA[0]
    with np.load(src) as data:
        arrays = {k: data[k].copy() for k in data.files}
    meta = bytes(arrays["meta"]).decode().replace('"family": "wmma"', '"family": "tcgen05"')
    arrays["meta"] = np.frombuffer(meta.encode(), dtype=np.uint8)
    path = tmp_path / "other.npz"
    np.savez_compressed(path, **arrays)
    out = io.StringIO()
    passed, failed = conform.run([path], out=out)
    assert passed == 0 and failed == arrays["mode"].size
    assert "tcgen05" in out.getvalue()


def _damaged(tmp_path, src, edit):
    with np.load(src) as data:
        arrays = {k: data[k].copy() for k in data.files}
    meta = json.loads(bytes(arrays.pop("meta")).decode())
    edit(arrays, meta)
    path = tmp_path / "damaged.npz"
    np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
    return path


@pytest.mark.parametrize("family,edit,needle", [
    ("wmma", lambda a, m: a.pop("lda"), "'lda' is missing"),
    ("wmma", lambda a, m: a.__setitem__("ldb", a["ldb"].astype(float)), "'ldb' must be integer"),
    ("wmma", lambda a, m: m["ptx"].pop(), "5 lines"),
    ("wmma", lambda a, m: m["ptx"].__setitem__(3, "wgmma.fence.sync.aligned;"), "a wmma.mma"),
    ("wmma", lambda a, m: m["qualifiers"].__setitem__("chain", "x"), "chain must be a positive integer"),
    ("wmma", lambda a, m: a.__setitem__("mode", a["mode"][:0]), "no cases"),
    ("wgmma", lambda a, m: a.__setitem__("c_regs", a["c_regs"][:1]),
     "'c_regs' holds 1 cases along its first axis, but array 'mode' holds 8"),
    ("wgmma", lambda a, m: m.pop("qualifiers"), "meta.qualifiers must be an object"),
    ("wgmma", lambda a, m: m.__setitem__("smem_base_observed", ["1024"]), "smem_base_observed must be a list"),
    ("wgmma", lambda a, m: m.__setitem__("family", ["wgmma"]), "is not one fastmma replays"),
])
def test_a_damaged_recording_fails_with_the_key_named(tmp_path, family, edit, needle):
    """A file that does not hold what FORMAT.md says fails as a file error naming the key at
    fault (before, several of these raised KeyError, ValueError or AttributeError out of
    check_file and stopped the whole run)."""
    res = conform.check_file(_damaged(tmp_path, (WMMA if family == "wmma" else WGMMA)[0], edit))
    assert not res.ok and res.error and needle in res.error, res.error


SPARSE_CHAINS = {
    "mma_sp": GOLDEN / "probes/q17_mma_sp_k_loop/mma.sp_ordered.chain16.m16n8k32.row.col.f32.f16.f16.f32.sel0.npz",
    "wgmma_sp": GOLDEN / "probes/q18_wgmma_sp_k_loop/wgmma_sp.chain8.m64n64k64.s32.u8.s8.adesc.sel0.npz",
}


@pytest.mark.parametrize("family,edit,needle", [
    ("mma_sp", lambda a, m: a.__setitem__("e_regs", a["e_regs"][:, 0]), "'e_regs' must have 4 dimensions, a chain"),
    ("mma_sp", lambda a, m: a.__setitem__("b_regs", a["b_regs"][:, :3]), "'b_regs' must have 4 dimensions, a chain"),
    ("wgmma_sp", lambda a, m: a.__setitem__("e_regs", a["e_regs"][:, :7]), "'e_regs' must have 4 dimensions, a chain"),
    ("wgmma_sp", lambda a, m: a.__setitem__("a_desc", a["a_desc"][:, :2]), "'a_desc' must have shape"),
    ("wgmma_sp", lambda a, m: m["ptx"].pop(), "holds 7 wgmma.mma_async.sp instructions, chain says 8"),
])
def test_a_damaged_sparse_chain_fails_with_the_key_named(tmp_path, family, edit, needle):
    """The recorded sparse k-loops (q17, q18) hold one register file a step: a file whose step
    axis is missing or of another length, or whose meta.ptx lacks a step, is a file error."""
    assert conform.check_file(SPARSE_CHAINS[family]).ok
    res = conform.check_file(_damaged(tmp_path, SPARSE_CHAINS[family], edit))
    assert not res.ok and res.error and needle in res.error, res.error
