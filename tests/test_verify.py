"""``fastmma verify`` without a GPU: the cases it draws, the comparison, the report and the
failure files, with the GPU replaced by fastmma itself and by a deliberately wrong one."""

import argparse
import json

import ml_dtypes
import numpy as np
import pytest
from conftest import OfflineSection

from fastmma import cli, conform, verify, verify_device

#: small forms of each family (kernels the conformance tests compile anyway)
FORMS = [verify.mma_form("m16n8k16", "f32", "f16", "f16", "f32"),
         verify.mma_form("m16n8k32", "s32", "s8", "u8", "s32", "satfinite"),
         verify.wgmma_form(8, "f32", "bf16", "bf16", 16, a_source="desc", sa=-1),
         verify.wgmma_form(16, "f16", "f16", "f16", 16, a_source="reg"),
         verify.wmma_form("m16n16k16", "row", "col", "col", "row", "f32", "f32", "f16")]


class FakeSection(OfflineSection, verify.InstructionSection):
    """The instruction section's jobs, run by ``gpu(form, arrays)`` instead of a GPU."""
    name = "fake"
    FORMS = FORMS

    def __init__(self, gpu):
        self.gpu = gpu

    def device(self, sources, jobs, log):
        everything = FORMS + verify.InstructionSection().forms(True) + verify.InstructionSection().forms(False)
        by_kernel = {verify.kernel_name(f): f for f in everything}
        styles = list(verify.STYLES)  # a form's jobs: one a style, in order
        return [verify_device.run_job(job, lambda plan, arrays, s=styles[i % 3]: self.gpu(by_kernel[plan["kernel"]],
                                                                                           arrays, s))
                for i, job in enumerate(jobs)]


def same(form, arrays, style=None):
    out = verify.FAMILIES[form.family].reference(form, arrays)
    if form.family == "wgmma":  # the image's shared address, as the kernel reports it
        out["smem_base"] = np.full(len(arrays["scale_d"]), 1024, np.uint32)
    return out


def wrong(form, arrays, style):
    """fastmma's outputs with the lowest bit of the first D word flipped in every spread case."""
    out = {k: v.copy() for k, v in same(form, arrays).items()}
    key = "d_frag" if form.family == "wmma" else "d_regs"
    if style == "spread":
        out[key][:, 0, 0] ^= np.uint32(1)
    return out


def args(tmp_path, **kw):
    return argparse.Namespace(quick=True, full=False, seed=kw.get("seed", 5), report=str(tmp_path / "rep"),
                              failures=None, only=None, jobs=1, export=None, import_=None)


def test_bit_style_reaches_specials_and_subnormals():
    x = verify.elements(np.random.default_rng(1), "f16", 20000, "bits").view(np.float16)
    exp = (x.view(np.uint16) >> 10) & 0x1F
    assert np.isnan(x).any() and np.isinf(x).any()
    assert ((exp == 0) & (x != 0)).any()


@pytest.mark.parametrize("t", ["f16", "bf16", "tf32", "e4m3", "e5m2", "f64"])
def test_spread_style_is_normal_numbers_over_many_binades(t):
    raw = verify.elements(np.random.default_rng(2), t, 4000, "spread")
    fmt = verify.get_format(t)
    bits = raw.view(fmt.storage).astype(np.uint64) >> np.uint64(fmt.ignored_low_bits + fmt.man_bits)
    exp = (bits & np.uint64((1 << fmt.exp_bits) - 1)).astype(np.int64) - fmt.bias
    assert exp.min() > -fmt.bias and np.ptp(exp) >= min(14, (1 << fmt.exp_bits) - 4)
    if t == "e4m3":
        assert not np.isnan(raw.view(ml_dtypes.float8_e4m3fn).astype(np.float32)).any()


def test_negated_flips_the_sign_and_at_most_the_last_bit():
    d = np.random.default_rng(3).integers(0, 1 << 32, (4, 32, 6), dtype=np.uint64).astype(np.uint32)
    n = verify_device.negated(d, verify.format_fields("f32"), 4)
    assert ((n ^ d) & ~np.uint32(1) == np.uint32(0x80000000)).all() and ((n ^ d) & 1).any()
    n64 = verify_device.negated(d, verify.format_fields("f64"), 4)
    assert ((n64 ^ d)[..., 1::2] == np.uint32(0x80000000)).all() and ((n64 ^ d)[..., 0::2] <= 1).all()
    n16 = verify_device.negated(d, verify.format_fields("f16"), 4)
    assert ((n16 ^ d) & ~np.uint32(0x00010001) == np.uint32(0x80008000)).all()
    s = verify_device.negated(d, verify.format_fields("s32"), 4).view(np.int32).astype(np.int64)
    assert (np.abs(s + d.view(np.int32)) <= 2).all()


def test_relaid_transposes_a_column_major_image():
    mem = np.arange(2 * 4 * 8 * 4, dtype=np.uint8).reshape(2, -1)
    col = verify_device.relaid(mem, 4, 8, 32, "row", "col")
    assert (verify_device.relaid(col, 4, 8, 32, "col", "row") == mem).all()
    rows = mem.view(np.uint32).reshape(2, 4, 8)
    assert (col.view(np.uint32).reshape(2, 8, 4) == rows.transpose(0, 2, 1)).all()


@pytest.mark.parametrize("form", [FORMS[0], FORMS[2], FORMS[4]], ids=lambda f: f.family)
def test_cancellation_leaves_small_results(form):
    job = verify.FAMILIES[form.family].job(form, [1, 2, 3], 4, "cancel")
    done = verify_device.run_job(job, lambda plan, arrays: same(form, arrays))
    key, ckey = ("d_frag", "c_frag") if form.family == "wmma" else ("d_regs", "c_regs")
    c = (done["outputs"][ckey] if form.family == "wmma" else done["inputs"][ckey]).view(np.float32)
    d = done["outputs"][key].view(np.float32)
    assert np.isfinite(c).all() and (np.abs(c) > 0).mean() > 0.9
    assert (np.abs(d) <= np.abs(c) * 2.0 ** -20).mean() > 0.9


def test_every_output_matches_when_the_gpu_is_fastmma(tmp_path, capsys):
    assert verify.main(args(tmp_path), sections=[FakeSection(same)]) == 0
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert [f["form"] for f in rep["forms"]] == [f.name for f in FORMS]
    per_style = verify.LEVELS["quick"][0]
    assert all(f["cases"] == 3 * per_style and f["mismatches"] == 0 and f["outputs"] > 0 for f in rep["forms"])
    assert rep["totals"]["mismatches"] == 0 and rep["failures"] is None
    assert not (tmp_path / "rep-failures").exists()
    for key in ("fastmma", "python", "numpy"):
        assert rep["environment"][key]


def test_a_wrong_gpu_is_caught_and_its_cases_replay(tmp_path, capsys):
    assert verify.main(args(tmp_path), sections=[FakeSection(wrong)]) == 1
    rep = json.loads((tmp_path / "rep.json").read_text())
    per_style = verify.LEVELS["quick"][0]
    for f in rep["forms"]:
        assert f["mismatches"] == per_style and f["failed_cases"] == per_style
        assert all(ex["style"] == "spread" for ex in f["examples"])
        out = f["examples"][0]["outputs"][0]
        assert int(out["gpu"], 16) ^ int(out["fastmma"], 16) == 1 and out["index"] == [0, 0]
        assert f["examples"][0]["inputs"]
        res = conform.check_file(f["failure_file"])
        assert res.error is None and res.cases == per_style and len(res.failed_cases) == per_style
    text = (tmp_path / "rep.txt").read_text()
    assert "FAIL" in text and "gpu" in text
    assert conform.run([tmp_path / "rep-failures"], out=open(tmp_path / "log", "w"))[1] == per_style * len(FORMS)


def test_export_run_elsewhere_and_import(tmp_path, capsys):
    folder = tmp_path / "battery"
    only = ["wgmma.m64n8k16.f32.f16.f16.adesc.ta0.tb0.sa-1.sb1"]  # one form: its kernel and its inputs' recipes
    assert cli.main(["verify", "--export", str(folder), "--only", *only, "--seed", "3"]) == 0
    spec = json.loads((folder / "jobs.json").read_text())
    assert spec["forms"] == only and len(spec["jobs"]) == len(verify.STYLES) and "m64n8k16.f32.f16.f16" in spec["sources"][0]
    fake = FakeSection(wrong)
    done = fake.device(spec["sources"], spec["jobs"], None)  # as verify_device.main on a GPU machine
    verify_device.write_results(folder, done, {"gpu": "fake"})
    report = tmp_path / "imported"
    assert cli.main(["verify", "--import", str(folder), "--report", str(report), "--jobs", "1"]) == 1
    rep = json.loads(report.with_suffix(".json").read_text())
    assert rep["environment"]["gpu"] == "fake" and rep["forms"][0]["mismatches"] == verify.LEVELS["quick"][0]


def test_seeds_draw_different_cases():
    def inputs(seed):
        return [{k: verify_device.make_array(r) for k, r in job["inputs"].items()}
                for job in FakeSection(same).jobs(FORMS[2], seed, 2)]
    a, b, c = inputs(1), inputs(2), inputs(1)
    assert (a[0]["smem"] != b[0]["smem"]).any() and (a[1]["c_regs"] != a[2]["c_regs"]).any()
    assert all((x[k] == y[k]).all() for x, y in zip(a, c) for k in x)


def test_kernel_sources_hold_each_instruction():
    for form in FORMS:
        src = verify.FAMILIES[form.family].kernel("k", form)
        insts = form.spec["texts"] if form.family == "wmma" else [form.spec["inst"]]
        assert all(text in src for text in insts)


def test_battery_covers_every_family_and_wgmma_type():
    forms = verify.InstructionSection().forms(full=True)
    assert {f.family for f in forms} == {"mma", "wgmma", "wmma"}
    wg = [f.spec["qualifiers"] for f in forms if f.family == "wgmma"]
    assert {(q["dtype"], q["atype"], q["btype"]) for q in wg} == {t[:3] for t in verify.WGMMA_TYPES}
    assert len({q["n"] for q in wg}) >= 8 and {q["a_source"] for q in wg} == {"desc", "reg"}


def test_import_without_results_is_an_error(tmp_path, capsys):
    assert cli.main(["verify", "--import", str(tmp_path)]) == 2
    assert "results" in capsys.readouterr().err


def test_no_gpu_exits_2_with_one_line(capsys):
    assert cli.main(["verify", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0]
