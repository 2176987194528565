"""``fastmma verify``'s Triton section without a GPU: the cases it draws, the comparison, the
report and the failure files, with the GPU replaced by the kernels run in this process's
interpreter under fastmma.triton.emulate(), by the same with a bit flipped, and by numpy's
float64 GEMM.  fastmma's side runs as in a real run, in a worker process (one for the module)."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: the stand-in GPU interprets the kernels

import argparse
import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import OfflineSection

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

import fastmma.triton as ft  # noqa: E402
from fastmma import cli, verify, verify_device  # noqa: E402
from fastmma import verify_triton as vt  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "triton"

#: small cases of both paths, a loaded and a tl.zeros accumulator, FMA and integer dots
#: (their numba kernels are those tests/test_triton.py compiles)
CASES = [vt.Case("f16.f32", "f16", "f16", mnk=(40, 24, 48)),
         vt.Case("mma.f16.f16.zero_init", "f16", "f16", out="f16", load_c=False, bm=32, bn=32, warps=2, mnk=(20, 24, 48)),
         vt.Case("mma.ieee", "f32", "f32", prec="ieee", bm=32, bn=32, bk=16, warps=2, mnk=(20, 24, 40)),
         vt.Case("s8", "s8", "s8", out="s32", bk=64, mnk=(40, 24, 100))]
FORMS = [verify.triton_form(c) for c in CASES]
PER_STYLE = verify.TRITON_LEVELS["quick"]
VALUES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
          "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


@pytest.fixture(scope="module")
def worker():
    with vt.Interpreter() as interpreter:
        yield interpreter


class FakeSection(OfflineSection, verify.TritonSection):
    """The Triton section with ``gpu(jobs)`` for the GPU and the shared worker for fastmma."""
    FORMS = FORMS

    def __init__(self, gpu, interpreter):
        super().__init__(interpreter)
        self.gpu = gpu

    def device(self, sources, jobs, log):
        return self.gpu(jobs)


def interpreted(jobs):
    with ft.emulate():
        return vt.run_jobs(jobs, "cpu", log=lambda text: None)


def flipped(jobs):
    """The interpreter's outputs with the lowest bit of D[0, 0] flipped in every spread case."""
    done = interpreted(jobs)
    for i, job in enumerate(done):
        if i % len(verify.STYLES) == list(verify.STYLES).index("spread"):
            job["outputs"]["d"][:, 0, 0] ^= job["outputs"]["d"].dtype.type(1)
    return done


def numpy_gemm(jobs):
    """D = A B + C in float64, rounded once to D's type (integers: wrapped to 32 bits)."""
    def launch(plan, arrays):
        case = vt.Case.of(plan["case"])
        with np.errstate(all="ignore"):  # NaN and inf are data here
            a, b = [arrays[x].view(VALUES.get(t, arrays[x].dtype)).astype(np.float64 if t in VALUES else np.int64)
                    for x, t in (("a", case.atype), ("b", case.btype))]
            c = arrays["c"].view(VALUES.get(case.out, np.int32)) if case.load_c else 0
            d = (a @ b + c).astype(VALUES.get(case.out, np.int64))
        return {"d": d.astype(np.int32) if case.out == "s32" else d.view(vt.STORAGE[case.out])}
    return [verify_device.run_job(job, launch) for job in jobs]


def args(tmp_path, **kw):
    return argparse.Namespace(quick=True, full=False, seed=kw.get("seed", 5), report=str(tmp_path / "rep"),
                              failures=None, only=None, jobs=1, export=None, import_=None)


def drawn(case, style, seed=7):
    (job,) = [j for j, s in zip(verify.TritonSection().jobs(verify.triton_form(case), seed, 2), verify.STYLES)
              if s == style]
    return job, {k: verify_device.make_array(r) for k, r in job["inputs"].items()}


# ---------------------------------------------------------------- the battery, no kernel run


def test_case_table_is_the_recorded_one():
    """Every recording of tests/golden/triton is a case of the full battery, launched as recorded."""
    by_name = {f.spec["case"].name: f.spec["case"] for f in verify.TritonSection().forms(True)}
    for path in sorted(GOLDEN.glob("*.npz")):
        meta = json.loads(bytes(np.load(path)["meta"]).decode())
        mine = vt.case_meta(by_name.pop(meta["variant"]))
        assert {k: meta[k] for k in mine} == mine, path.stem
    assert all(name.startswith("check.") for name in by_name)  # the held-out cases, kept apart from tests/golden


def test_quick_covers_every_dot_class_accumulator_and_path():
    quick = [f.spec["case"] for f in verify.TritonSection().forms(False)]
    classes = {(c.atype if c.atype != "f32" else c.prec) for c in quick}
    assert classes >= {"f16", "bf16", "tf32", "tf32x3", "ieee", "e4m3", "e5m2", "s8", "f64"}
    assert {c.out for c in quick} == {"f32", "f16", "s32", "f64"}
    assert {c.bm % 64 == 0 and c.warps % 4 == 0 for c in quick} == {True, False}  # wgmma- and mma.sync-shaped
    assert {c.load_c for c in quick} == {True, False} and {c.pass_acc for c in quick} == {True, False}
    assert any(c.imprecise for c in quick)


def test_bit_style_reaches_specials_and_subnormals():
    job, arrays = drawn(vt.Case("x", "f16", "f16", mnk=(64, 64, 64)), "bits")
    a = arrays["a"].view(np.float16)
    assert np.isnan(a).any() and np.isinf(a).any() and ((np.abs(a) < 2 ** -14) & (a != 0)).any()
    assert "cancel" not in job


def test_spread_style_is_normal_numbers_over_many_binades():
    _, arrays = drawn(vt.Case("x", "bf16", "bf16", mnk=(64, 64, 64)), "spread")
    e = np.frexp(arrays["b"].view(ml_dtypes.bfloat16).astype(np.float32))[1]
    assert np.isfinite(arrays["b"].view(ml_dtypes.bfloat16).astype(np.float32)).all() and np.ptp(e) >= 18
    c = arrays["c"].view(np.float32)
    assert (c != 0).all() and np.ptp(np.frexp(c)[1]) >= 36


def test_cancellation_of_a_loaded_c_runs_the_kernel_twice():
    job, _ = drawn(vt.Case("x", "f16", "f16"), "cancel")
    assert job["cancel"]["from"] == "d" and job["cancel"]["to"] == "c" and job["cancel"]["zero"] == ["c"]


def test_cancellation_without_c_pairs_the_k_terms():
    """A tl.zeros kernel cannot take C = -AB: A's odd columns are its even ones negated (a unit
    in the last place off in about half), B's odd rows its even ones, so products cancel in pairs."""
    _, arrays = drawn(vt.Case("x", "f16", "f16", load_c=False, mnk=(16, 16, 33)), "cancel")
    a, b = arrays["a"], arrays["b"]
    assert (b[:, 1::2] == b[:, 0:32:2]).all() and (b[:, 32] != b[:, 30]).any()
    diff = a[:, :, 1::2] ^ a[:, :, 0:32:2]
    assert ((diff & 0x7FFE) == 0).all() and (diff & 0x8000).all() and 0.3 < (diff & 1).mean() < 0.7


def test_missing_says_what(monkeypatch):
    monkeypatch.setattr(verify, "gpu_missing", lambda: None)
    assert "TRITON_INTERPRET" in verify.TritonSection().missing()  # this module set it
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert verify.TritonSection().missing() is None
    monkeypatch.setattr(verify, "gpu_missing", lambda: "a CUDA GPU")
    assert verify.TritonSection().missing() == "a CUDA GPU"


# ---------------------------------------------------------------- the battery, with stand-ins for the GPU


def test_every_output_matches_when_the_gpu_is_fastmma(tmp_path, capsys, worker):
    assert verify.main(args(tmp_path), sections=[FakeSection(interpreted, worker)]) == 0
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert [f["form"] for f in rep["forms"]] == [f.name for f in FORMS]
    for f, case in zip(rep["forms"], CASES):
        assert f["cases"] == 3 * PER_STYLE and f["mismatches"] == 0 and f.get("fastmma_error") is None
        assert f["outputs"] == 3 * PER_STYLE * case.mnk[0] * case.mnk[1]
    assert rep["totals"]["mismatches"] == 0 and rep["failures"] is None and not (tmp_path / "rep-failures").exists()


def test_cancellation_leaves_small_results():
    """The kernel's C = -D of a first run: the second D is far below C in nine elements of ten."""
    case = CASES[0]
    job, _ = drawn(case, "cancel")
    (done,) = interpreted([job])
    c, d = done["inputs"]["c"].view(np.float32), done["outputs"]["d"].view(np.float32)
    assert np.isfinite(c).all() and (np.abs(d) <= np.abs(c) * 2.0 ** -10).mean() > 0.9


def test_a_flipped_bit_is_caught_and_its_cases_replay(tmp_path, capsys, worker):
    """One bit of D in each spread launch: caught to the element; the failure file is a triton
    recording that tests/test_triton.py replays: it fails at that element, and passes with the
    bit set back."""
    assert verify.main(args(tmp_path), sections=[FakeSection(flipped, worker)]) == 1
    rep = json.loads((tmp_path / "rep.json").read_text())
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import test_triton
    finally:
        sys.path.pop(0)
    for f in rep["forms"]:
        assert f["mismatches"] == PER_STYLE and f["failed_cases"] == PER_STYLE
        (ex,) = f["examples"]
        assert ex["style"] == "spread" and set(ex["inputs"]) >= {"a", "b"}
        (out,) = ex["outputs"]
        assert out["index"] == [0, 0] and int(out["gpu"], 16) ^ int(out["fastmma"], 16) == 1
        assert "tests/golden/triton" in f["replay"]
        with pytest.raises(AssertionError, match=r"case 0 \(mode 1\): 1 of \d+ elements differ, "
                           r"first at \((np.int64\()?0\)?, (np.int64\()?0\)?\)"):
            test_triton.test_recorded_kernel(Path(f["failure_file"]), None)
        rec = dict(np.load(f["failure_file"]))
        assert set(rec) == {"a", "b", "d", "mode", "meta"} | ({"c"} if "c" in rec else set())
        rec["d"][:, 0, 0] ^= rec["d"].dtype.type(1)
        np.savez(tmp_path / "fixed.npz", **rec)
        test_triton.test_recorded_kernel(tmp_path / "fixed.npz", None)
    assert "FAIL" in (tmp_path / "rep.txt").read_text()


def test_numpy_gemm_is_caught_but_exact_integers_match(tmp_path, capsys, worker):
    """A float64 GEMM rounded once is not the H100's: every float form differs; the s8 wgmma
    GEMM, exact arithmetic wrapped to 32 bits, matches."""
    assert verify.main(args(tmp_path), sections=[FakeSection(numpy_gemm, worker)]) == 1
    rep = {f["form"]: f for f in json.loads((tmp_path / "rep.json").read_text())["forms"]}
    assert rep["triton.s8"]["mismatches"] == 0
    assert all(f["mismatches"] > 0 and f["failed_cases"] >= 2 for name, f in rep.items() if name != "triton.s8")


def test_export_run_elsewhere_and_import(tmp_path, capsys, worker, monkeypatch):
    """--export writes the Triton jobs beside the instructions'; the device half's main runs
    them (by a stand-in GPU) into triton-results.*.npz, --import computes and compares them."""
    folder = tmp_path / "battery"
    assert cli.main(["verify", "--export", str(folder), "--only", "triton.mma.ieee", "--seed", "3"]) == 0
    spec = json.loads((folder / "jobs.json").read_text())
    assert spec["forms"] == [] and spec["triton"]["forms"] == ["triton.mma.ieee"]
    assert len(spec["triton"]["jobs"]) == len(verify.STYLES)
    monkeypatch.setattr(verify_device, "_triton_half", lambda: argparse.Namespace(
        run_jobs=lambda jobs, device, log: flipped(jobs)))
    monkeypatch.setattr(verify_device, "device_info", lambda: {"gpu": "fake"})
    assert verify_device.main(str(folder), str(folder)) == 0
    monkeypatch.setattr(verify, "exported_sections", lambda: [verify.InstructionSection(), verify.TritonSection(worker)])
    report = tmp_path / "imported"
    assert cli.main(["verify", "--import", str(folder), "--report", str(report), "--jobs", "1"]) == 1
    rep = json.loads(report.with_suffix(".json").read_text())
    assert rep["environment"]["gpu"] == "fake" and [f["form"] for f in rep["forms"]] == ["triton.mma.ieee"]
    assert rep["forms"][0]["mismatches"] == PER_STYLE


def test_import_says_why_the_device_half_skipped_triton(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "battery"
    assert cli.main(["verify", "--export", str(folder), "--only", "triton.s8"]) == 0

    def no_triton():
        raise ImportError("No module named 'triton'")

    monkeypatch.setattr(verify_device, "_triton_half", no_triton)
    monkeypatch.setattr(verify_device, "device_info", lambda: {"gpu": "fake"})
    assert verify_device.main(str(folder), str(folder)) == 0
    assert not list(folder.glob("triton-results.*.npz"))
    assert cli.main(["verify", "--import", str(folder)]) == 2
    assert "triton: missing Triton on the GPU machine" in capsys.readouterr().err
