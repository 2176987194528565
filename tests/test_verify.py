"""``fastmma verify`` without a GPU: the cases it draws, the comparison, the report and the
failure files, with the GPU replaced by fastmma itself and by a deliberately wrong one."""

import argparse
import json

import ml_dtypes
import numpy as np
import pytest

from fastmma import cli, conform, verify

#: small forms of each family (kernels the conformance tests compile anyway)
FORMS = [verify.mma_form("m16n8k16", "f32", "f16", "f16", "f32"),
         verify.mma_form("m16n8k32", "s32", "s8", "u8", "s32", "satfinite"),
         verify.wgmma_form(8, "f32", "bf16", "bf16", 16, a_source="desc", sa=-1),
         verify.wgmma_form(16, "f16", "f16", "f16", 16, a_source="reg"),
         verify.wmma_form("m16n16k16", "row", "col", "col", "row", "f32", "f32", "f16")]


class FakeSection(verify.Section):
    """The instruction section's cases and replay, with ``gpu(form, arrays, styles)`` for the device."""
    name = "fake"

    def __init__(self, gpu):
        self.gpu = gpu

    def missing(self):
        return None

    def forms(self, full):
        return FORMS

    def device(self, jobs, log):
        return [self.gpu(form, arrays) for form, arrays in jobs]


def same(form, arrays):
    return verify.FAMILIES[form.family].reference(form, arrays)


def wrong(form, arrays):
    """fastmma's outputs with the lowest bit of the first D word flipped in every spread case."""
    out = {k: v.copy() for k, v in same(form, arrays).items()}
    key = "d_frag" if form.family == "wmma" else "d_regs"
    spread = arrays["mode"] == verify.STYLES["spread"][0]
    out[key][spread, 0, 0] ^= np.uint32(1)
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
    n = verify.negated(d, "f32", np.random.default_rng(4))
    assert ((n ^ d) & ~np.uint32(1) == np.uint32(0x80000000)).all() and ((n ^ d) & 1).any()
    n64 = verify.negated(d, "f64", np.random.default_rng(4))
    assert ((n64 ^ d)[..., 1::2] == np.uint32(0x80000000)).all() and ((n64 ^ d)[..., 0::2] <= 1).all()
    s = verify.negated(d, "s32", np.random.default_rng(4)).view(np.int32).astype(np.int64)
    assert (np.abs(s + d.view(np.int32)) <= 2).all()


def test_cancellation_leaves_small_results():
    form = FORMS[0]
    arrays = verify.FAMILIES["mma"].cases(form, np.random.default_rng(6), 4, "cancel")
    c = arrays["c_regs"].view(np.float32)
    d = same(form, arrays)["d_regs"].view(np.float32)
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


def test_seeds_draw_different_cases():
    a, _ = verify.make_inputs(FakeSection(same), FORMS[0], 1, 2)
    b, _ = verify.make_inputs(FakeSection(same), FORMS[0], 2, 2)
    c, _ = verify.make_inputs(FakeSection(same), FORMS[0], 1, 2)
    assert (a["a_regs"] != b["a_regs"]).any() and all((a[k] == c[k]).all() for k in a)


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


def test_no_gpu_exits_2_with_one_line(capsys):
    assert cli.main(["verify", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0]
