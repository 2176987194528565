"""The command line: each command's output, and one-line errors with exit status 2."""

import re
import subprocess
import sys

import numpy as np
import pytest

from fastmma.cli import main


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "fastmma", *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout, proc.stderr


def test_gemm_random_inputs_reports_time_and_error(capsys):
    assert main(["gemm", "-i", "m64n64k16.f32.f16.f16", "--m", "70", "--n", "40", "--k", "50"]) == 0
    out = capsys.readouterr().out
    assert "instruction: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in out
    assert "shape: M=70 N=40 K=50" in out
    assert "G multiply-adds/s" in out
    assert "vs float64 reference: max abs error" in out


def test_gemm_times_the_product_after_loading_the_kernels(capsys):
    assert main(["gemm", "-i", "m64n64k16.f32.bf16.bf16", "--m", "128", "--n", "64", "--k", "64"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    kernels = next(i for i, line in enumerate(lines) if line.startswith("kernels for .bf16 x .bf16 -> .f32: "))
    timed = next(i for i, line in enumerate(lines) if line.startswith("time: "))
    assert kernels < timed
    assert "max error relative to |A|.|B| + |C|" in out


def test_gemm_files_in_and_out_match_the_library(tmp_path, capsys):
    import fastmma

    rng = np.random.default_rng(0)
    A = rng.integers(-128, 128, (33, 64)).astype(np.int8)
    B = rng.integers(-128, 128, (64, 17)).astype(np.int8)
    C = rng.integers(-2**31, 2**31, (33, 17)).astype(np.int32)
    for name, x in (("a", A), ("b", B), ("c", C)):
        np.save(tmp_path / f"{name}.npy", x)
    out_path = tmp_path / "d.npy"
    argv = ["gemm", "-i", "m64n16k32.s32.s8.s8.satfinite", "--a", str(tmp_path / "a.npy"), "--b",
            str(tmp_path / "b.npy"), "--c", str(tmp_path / "c.npy"), "-o", str(out_path)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"written to {out_path}" in text and "vs the exact integer product" in text
    expected = fastmma.matmul(A, B, C, instruction="m64n16k32.s32.s8.s8.satfinite")
    assert np.array_equal(np.load(out_path), expected)


def test_gemm_sparse_random_inputs_are_pruned_and_compressed(tmp_path, capsys):
    """A short form that names only a sparse instruction runs as ``matmul_sp``: the random A is
    pruned 2:4 at random, and D is ``matmul_sp`` of its compression with the same seed's B."""
    import fastmma
    from fastmma.layout.sparse_metadata import compress

    out_path = tmp_path / "d.npy"
    assert main(["gemm", "-i", "m64n32k32.f32.f16.f16", "--m", "70", "--n", "24", "--k", "96", "--seed", "3",
                 "-o", str(out_path)]) == 0
    text = capsys.readouterr().out
    assert "instruction: wgmma.mma_async.sp.sync.aligned.m64n32k32.f32.f16.f16" in text
    assert "pruned at random to f16's sparsity" in text and "vs float64 reference: max abs error" in text
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((70, 96)).astype(np.float16), rng.standard_normal((96, 24)).astype(np.float16)
    keep = rng.random((70, 24, 4)).argsort(axis=-1) < 2  # two places a chunk, drawn after B as the CLI does
    A = np.where(keep.reshape(70, 96), A, np.float16(0))
    D = np.load(out_path)
    assert D.shape == (70, 24) and np.array_equal(D, fastmma.matmul_sp(*compress(A, "f16"), B,
                                                                      instruction="m64n32k32.f32.f16.f16"))


def test_gemm_sparse_files_dense_or_compressed_with_columns(tmp_path, capsys):
    """``--sparse`` reads a warp shape as ``mma.sp``; ``--a`` is a pruned dense A, or with
    ``--columns`` the compressed one; both give ``matmul_sp``'s bits."""
    import fastmma
    from fastmma.layout.sparse_metadata import compress

    rng = np.random.default_rng(1)
    dense = rng.integers(-128, 128, (20, 64)).astype(np.int8)
    dense[:, 1::4] = dense[:, 2::4] = 0
    B = rng.integers(0, 256, (64, 9)).astype(np.uint8)
    kept, columns = compress(dense, "s8")
    files = {}
    for name, x in (("dense", dense), ("kept", kept), ("columns", columns), ("b", B)):
        files[name] = tmp_path / f"{name}.npy"
        np.save(files[name], x)
    short = "m16n8k64.s32.s8.u8.s32"  # mma.sp: no wgmma.mma_async.sp has this shape
    expected = fastmma.matmul_sp(kept, columns, B, instruction=short)
    for a_args in ([str(files["dense"])], [str(files["kept"]), "--columns", str(files["columns"])]):
        out_path = tmp_path / "d.npy"
        assert main(["gemm", "--sparse", "-i", short, "--a", *a_args, "--b", str(files["b"]), "-o",
                     str(out_path)]) == 0
        text = capsys.readouterr().out
        assert "instruction: mma.sp." in text and ".m16n8k64." in text, text
        assert "shape: M=20 N=9 K=64" in text and "0 of 180 entries differ" in text
        assert np.array_equal(np.load(out_path), expected)


def test_gemm_on_stacks_of_matrices(tmp_path, capsys):
    """.npy stacks (batch dimensions first) multiply as matmul's stacks do; the b1 report's
    exact product broadcasts too (0 entries differ: no s32 wraps)."""
    import fastmma

    rng = np.random.default_rng(1)
    A = rng.integers(0, 2, (3, 8, 256)).astype(np.uint8)
    B = rng.integers(0, 2, (256, 40)).astype(np.uint8)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    text = "wmma.mma.and.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32"
    assert main(["gemm", "-i", text, "--a", str(tmp_path / "a.npy"), "--b", str(tmp_path / "b.npy"),
                 "-o", str(tmp_path / "d.npy")]) == 0
    out = capsys.readouterr().out
    assert "shape: M=8 N=40 K=256, a stack of (3,)" in out
    assert "0 of 960 entries differ" in out
    D = np.load(tmp_path / "d.npy")
    assert D.shape == (3, 8, 40)
    assert np.array_equal(D, fastmma.matmul(A, B, instruction=text))


def test_gemm_progress_bar_goes_to_stderr_as_lines_in_a_pipe(capsys):
    """``--progress always`` into a pipe (capsys is no terminal): whole lines, never a ``\r`` redraw."""
    assert main(["gemm", "-i", "m64n8k16.f32.f16.f16", "--m", "8", "--n", "1100", "--k", "16",
                 "--progress", "always", "--no-check"]) == 0
    captured = capsys.readouterr()
    assert "100%" in captured.err and "1100/1100" in captured.err and "\r" not in captured.err
    assert "100%" not in captured.out


def test_gemm_progress_auto_is_quiet_in_a_pipe(capsys):
    assert main(["gemm", "-i", "m64n8k16.f32.f16.f16", "--m", "8", "--n", "1100", "--k", "16", "--no-check"]) == 0
    assert "%" not in capsys.readouterr().err


def test_gemm_progress_bar_starts_after_the_warm_up(monkeypatch, capsys):
    """The bar's clock starts once the kernels are compiled (the quick start's first call
    compiles for half a minute; its bar had shown that time beside a GEMM of 0.2 s)."""
    import fastmma.cli as cli

    order = []
    warm_up, bar = cli._warm_up, cli.make_bar
    monkeypatch.setattr(cli, "_warm_up", lambda *args, **kw: order.append("warm-up") or warm_up(*args, **kw))
    monkeypatch.setattr(cli, "make_bar", lambda *args, **kw: order.append("bar") or bar(*args, **kw))
    assert main(["gemm", "-i", "m64n8k16.f32.f16.f16", "--m", "8", "--n", "64", "--k", "16",
                 "--progress", "always", "--no-check"]) == 0
    assert order == ["warm-up", "bar"] and "100%" in capsys.readouterr().err


def test_a_long_step_says_what_runs_while_it_runs():
    """What ``gemm`` shows while numba compiles: the step's name in a line of its own as soon
    as it has run ``after`` seconds (not only once it is over), and a final line."""
    import io
    import threading

    from fastmma.progress import while_running

    stream, seen = io.StringIO(), threading.Event()
    with while_running("kernels for .f16 x .f16 -> .f32: compiling", show="always", stream=stream, after=0.05):
        for _ in range(200):
            if "compiling" in stream.getvalue():
                seen.set()
                break
            threading.Event().wait(0.01)
    assert seen.is_set()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("kernels for .f16 x .f16 -> .f32") for line in lines)
    assert "\r" not in stream.getvalue()


def test_conform_with_a_progress_bar_into_a_pipe(golden_dir):
    code, out, err = run("conform", str(golden_dir / "probes" / "q13_movmatrix"), "--progress", "always")
    assert code == 0 and out.strip().endswith("16 passed, 0 failed")
    assert "conform" in err and "1/1" in err and "\r" not in err


def test_conform_prints_per_file_and_a_summary(golden_dir):
    code, out, _ = run("conform", str(golden_dir / "wmma" / "wmma.m8n8k32.row.col.s32.s32.s4.crow.drow.npz"))
    assert code == 0
    assert out.startswith("pass wmma.m8n8k32.row.col.s32.s32.s4.crow.drow.npz: 16 cases")
    assert out.strip().endswith("16 passed, 0 failed")


def test_conform_exits_1_on_failures(tmp_path):
    bad = tmp_path / "junk.npz"
    bad.write_bytes(b"junk")
    code, out, _ = run("conform", str(bad))
    assert code == 1 and out.strip().endswith("0 passed, 1 failed")


def test_info_lists_versions_threads_and_recorded_cases(capsys, golden_dir):
    assert main(["info", "--verify", str(golden_dir / "wmma")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fastmma ")
    assert "numba" in out and "threads:" in out
    assert "wmma m8n8k4 f64.f64" in out and "256 / 256" in out


def test_info_answers_without_replaying_or_compiling(capsys, monkeypatch):
    """``info`` reads the kernel cache's index files and replays nothing."""
    import fastmma.conform

    monkeypatch.setattr(fastmma.conform, "check_file", lambda *a, **kw: pytest.fail("info replayed a recording"))
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"kernel cache: \d+ of \d+ kernels compiled", out)
    assert re.search(r"^  fused_gemm +\d+ of \d+ +compiled, \d+ signatures", out, re.M)
    assert "info --verify" in out


def test_info_names_the_integer_form_this_cpu_takes(capsys, monkeypatch):
    """The form of word_gemm's table that the CPU's features select, and the .satfinite one where
    it differs."""
    from fastmma.kernels import word_gemm

    monkeypatch.setattr(word_gemm, "codegen_features", lambda: "+avx2,+avx512f,+avx512bw,+avx512vnni")
    assert main(["info"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("integer GEMMs: "))
    assert line == ("integer GEMMs: vnni (llvm.x86.avx512.vpdpbusd.512); "
                    ".satfinite: pairs-512 (llvm.x86.avx512.pmaddw.d.512)")
    monkeypatch.setattr(word_gemm, "codegen_features", lambda: "+sse2")
    assert main(["info"]) == 0
    assert "integer GEMMs: pairs-ir (portable vector code)\n" in capsys.readouterr().out


def test_info_counts_a_kernel_once_it_is_in_the_cache():
    """After a small f16 GEMM the blocked float kernels' index files hold code for these sources."""
    import fastmma
    from fastmma.kernel_report import cached_kernels

    A = np.ones((64, 64), np.float16)
    fastmma.matmul(A, A, instruction="m64n64k16.f32.f16.f16")
    report = {m.module: m for m in cached_kernels()}
    assert report["fused_gemm"].compiled > 0 and report["fused_gemm"].signatures >= report["fused_gemm"].compiled
    assert all(0 <= m.compiled <= m.kernels for m in report.values())


@pytest.mark.parametrize("text, meant", [
    ("m64n8k16.f32.f17.f16", ".f16"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f17.f16", ".f16"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf17.bf16.f32", ".bf16"),
    ("wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8.satfinte", ".satfinite"),
    ("wmma.mma.sync.aligned.row.cl.m16n16k16.f32.f32", ".col"),
])
def test_a_near_miss_qualifier_says_which_was_meant(capsys, text, meant):
    assert main(["explain", text]) == 2
    err = capsys.readouterr().err
    assert f"did you mean {meant}?" in err
    assert err.startswith("fastmma: error: ") and err.count("\n") == 1


def test_a_far_miss_suggests_nothing(capsys):
    assert main(["gemm", "-i", "m64n8k16.f32.f16.bogus", "--size", "8"]) == 2
    assert "did you mean" not in capsys.readouterr().err


def test_explain_states_the_rule(capsys):
    assert main(["explain", "wgmma.mma_async.sync.aligned.m64n24k8.f32.tf32.tf32"]) == 0
    out = capsys.readouterr().out
    assert "M=64 N=24 K=8" in out
    assert "D 12 registers" in out
    assert "truncated to 25 fraction bits" in out and "toward zero" in out
    assert "applied" not in out  # wgmma fuses all its k terms


def test_explain_reads_a_short_form_that_names_only_a_sparse_instruction(capsys):
    assert main(["explain", "m64n256k32.f32.f16.f16"]) == 0  # no dense f16 wgmma has k32
    out = capsys.readouterr().out
    assert "instruction: wgmma.mma_async.sp.sync.aligned.m64n256k32.f32.f16.f16" in out
    assert "A 64x16 (compressed: a row keeps 16 of its 32)" in out


def test_explain_counts_the_groups_of_a_wmma_tf32():
    code, out, _ = run("explain", "wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32")
    assert code == 0
    assert "plus 4 products" in out and "applied 2 times in increasing k (K=8)" in out


@pytest.mark.parametrize("args, needle", [
    (("explain", "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8"), "m64n256k32"),
    (("gemm", "-i", "m64n8k16.f32.f16.bogus", "--size", "8"), "bogus"),
    (("gemm", "--a", "missing.npy", "--b", "missing.npy"), "missing.npy"),
    (("gemm", "--m", "3", "--n", "0", "--k", "5"), "N=0"),  # 0 is a size, not "use --size"
    (("gemm", "--size", "100000000"), "GiB of memory"),
    (("gemm", "--size", "16", "--seed", "-1"), "--seed"),
    (("gemm", "--size", "16", "--out", "no/such/folder/d.npy"), "no/such/folder/d.npy"),
    (("gemm", "--size", "16", "--block", "0", "--scheduler", "tcp://127.0.0.1:1"),
     "block must be an integer in"),  # before any attempt to connect
    (("gemm", "-i", "m64n8k32.f32.f16.f16", "--size", "16", "--scheduler", "tcp://127.0.0.1:1"),
     "--scheduler runs dense GEMMs"),
    (("gemm", "--size", "16", "--columns", "c.npy"), "--columns gives the columns of a compressed --a"),
    (("gemm", "--sparse", "-i", "m64n8k32.f32.f16.f16", "--m", "4", "--n", "4", "--k", "6"),
     "K must be a whole number of f16's chunks of 4, got K=6"),
    (("ptx", "no/such/snippet.ptx"), "cannot read no/such/snippet.ptx"),
    (("ptx", "-", "--reg", "descA"), "--reg takes NAME[:TYPE]=VALUE"),
    (("ptx", "-", "--reg", "x=twelve"), "'twelve' is not an integer"),
    (("ptx", "-", "--smem", "no/such/image.bin"), "--smem: cannot read no/such/image.bin"),
    (("ptx", "-", "--save", "no/such/folder/out.npz"), "--save: cannot write no/such/folder/out.npz"),
])
def test_errors_are_one_line_with_status_2(args, needle):
    code, out, err = run(*args)
    assert code == 2
    assert err.startswith("fastmma: error: ")
    assert needle in err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


def test_gemm_on_a_dask_cluster_gives_the_local_bits(tmp_path):
    distributed = pytest.importorskip("distributed", reason="the Dask extra: pip install 'fastmma[dask]'")
    import fastmma

    rng = np.random.default_rng(3)
    A = rng.standard_normal((70, 48)).astype(np.float16)
    B = rng.standard_normal((48, 90)).astype(np.float16)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster:
        code, out, err = run("gemm", "-i", "m64n64k16.f32.f16.f16", "--a", str(tmp_path / "a.npy"), "--b",
                             str(tmp_path / "b.npy"), "-o", str(tmp_path / "d.npy"), "--scheduler",
                             cluster.scheduler_address, "--block", "32", "--progress", "always")
    assert code == 0, err
    assert "100%" in err and "\r" not in err  # a pipe: a line at a time
    expected = fastmma.matmul(A, B, instruction="m64n64k16.f32.f16.f16")
    assert np.array_equal(np.load(tmp_path / "d.npy").view(np.uint32), expected.view(np.uint32))


def test_gemm_with_an_unreachable_scheduler_is_a_one_line_error():
    code, _, err = run("gemm", "--size", "8", "--scheduler", "tcp://127.0.0.1:9")
    assert code == 2
    assert err.startswith("fastmma: error: ") and err.count("\n") == 1


# ---------------------------------------------------------------- ptx

SNIPPET = """\
.reg .u32 tid, off;
.reg .pred low;
mov.u32 tid, %tid.x;
shl.b32 off, tid, 2;
setp.lt.u32 low, tid, k;
@low st.global.u32 [off+64], off;
"""


def test_ptx_runs_a_snippet_prints_its_registers_and_saves_them(tmp_path):
    path = tmp_path / "snippet.ptx"
    path.write_text(SNIPPET)
    code, out, err = run("ptx", str(path), "--reg", "k:u32=3", "--save", str(tmp_path / "out.npz"))
    assert code == 0, err
    assert "off .u32: [0, 4, 8, 12, 16, 20, 24, 28, ...] (32 threads)" in out
    assert "k .u32: 3 (every thread)" in out
    saved = np.load(tmp_path / "out.npz")
    assert saved["off"].tolist() == [4 * t for t in range(32)]
    assert saved["%global"][64:76].view(np.uint32).tolist() == [0, 4, 8]   # threads 0-2 stored
    assert not saved["%global"][76:256].any()


def test_ptx_reads_standard_input_and_shows_the_registers_asked_for():
    proc = subprocess.run([sys.executable, "-m", "fastmma", "ptx", "-", "--reg", "k:u32=1", "--show", "low"],
                          input=SNIPPET, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "low .pred: [True, False, False, False, False, False, False, False, ...] (32 threads)"


def test_ptx_wgmma_on_a_shared_memory_file_gives_mma_async_bits(tmp_path):
    from fastmma import wgmma
    from fastmma.layout.descriptor import MatrixDescriptor

    rng = np.random.default_rng(5)
    smem = (rng.integers(0, 0x3C, 32768) | (rng.integers(0, 2, 32768) << 7)).astype(np.uint8)  # moderate f16s
    smem.tofile(tmp_path / "smem.bin")
    a_desc, b_desc = MatrixDescriptor(0, 128, 256).encode(), MatrixDescriptor(16384, 128, 256).encode()
    text = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, descA, descB, 0, 1, 1, 0, 0;"
    (tmp_path / "mma.ptx").write_text(".reg .f32 d<4>;\nwgmma.fence.sync.aligned;\n" + text +
                                      "\nwgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n")
    code, out, err = run("ptx", str(tmp_path / "mma.ptx"), "--smem", str(tmp_path / "smem.bin"),
                         "--reg", f"descA:b64={a_desc:#x}", "--reg", f"descB:b64={b_desc:#x}",
                         "--save", str(tmp_path / "d.npz"))
    assert code == 0, err
    saved = np.load(tmp_path / "d.npz")
    expected = wgmma.mma_async(text, np.zeros((128, 4), np.uint32), a_desc=a_desc, b_desc=b_desc, smem=smem)
    np.testing.assert_array_equal(np.stack([saved[f"d{i}"] for i in range(4)], axis=1), expected)


def test_ptx_errors_name_the_line_and_column(tmp_path):
    (tmp_path / "bad.ptx").write_text("mov.u32 %r1, 0;\n")
    code, out, err = run("ptx", str(tmp_path / "bad.ptx"))
    assert code == 2 and err == "fastmma: error: line 1, column 9: register %r1 is not declared (.reg) and was " \
                                "not given in registers=\n"


def test_explain_mma_sync():
    code, out, _ = run("explain", "m16n8k8.f32.tf32.tf32.f32")
    assert code == 0
    assert "MmaSync" in out and "registers: A 4, B 2, C 4, D 4" in out
    assert "plus 8 products" in out and "applied" not in out  # one fused step of 8, unlike wmma's
    code, out, _ = run("explain", "mma.sync.aligned.m16n8k16.row.col.f16.e4m3.e5m2.f16")
    assert code == 0
    assert "converted to f16" in out and "k % 4 in {0, 1}" in out and "to nearest even" in out


def test_gemm_of_an_mma_sync_short_form():
    code, out, err = run("gemm", "--instruction", "m16n8k32.f32.e4m3.e4m3.f32", "--size", "64")
    assert code == 0, err
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in out  # the ISA's order: shape, then layouts


def test_info_counts_mma_sync_recordings(capsys, golden_dir):
    assert main(["info", "--verify", str(golden_dir / "probes" / "q11_mma_sync_k_loop")]) == 0
    out = capsys.readouterr().out
    assert "mma.sync (f16 with m8n8k4, bf16, tf32, e4m3/e5m2, f64" in out
    assert re.search(r"mma m16n8k32 f32\.e4m3\.e4m3 chain16 +12 / 12", out)


def test_info_counts_ldmatrix_recordings(capsys, golden_dir):
    assert main(["info", "--verify", str(golden_dir / "probes" / "q12_ldmatrix_stmatrix")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"stmatrix m8n8\.x4\.trans\.b16 +8 / 8", out)
    assert re.search(r"ldmatrix m8n8\.x4\.trans\.generic\.b16 +8 / 8", out)


def test_info_counts_m8n8k4_recordings_by_layout_and_c(capsys, golden_dir):
    assert main(["info", "--verify", str(golden_dir / "probes" / "q14_mma_m8n8k4")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"mma m8n8k4 col\.row f32\.f16\.f16\.f16 +12 / 12", out)
    assert re.search(r"mma m8n8k4 f32\.f16\.f16 +12 / 12", out)  # .row.col, C = D's type


def test_explain_m8n8k4_names_the_quad_pairs(capsys):
    assert main(["explain", "mma.sync.aligned.m8n8k4.col.row.f16.f16.f16.f16"]) == 0
    out = capsys.readouterr().out
    assert "registers: A 2, B 2, C 4, D 4" in out and "quad pair" in out and "fma(a1, b1, a0 * b0)" in out


def test_info_counts_movmatrix_recordings(capsys, golden_dir):
    assert main(["info", "--verify", str(golden_dir / "probes" / "q13_movmatrix")]) == 0
    out = capsys.readouterr().out
    assert "movmatrix (.m8n8.trans .b16)" in out
    assert re.search(r"movmatrix m8n8\.trans\.b16 +16 / 16", out)


@pytest.mark.parametrize("text, words", [
    ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", ["Ldmatrix", "loads 4 matrices", "transposed", ".shared",
                                                       "4 registers per lane"]),
    ("stmatrix.sync.aligned.m8n8.x2.b16", ["Stmatrix", "stores 2 matrices", "generic", "2 registers per lane"]),
    ("movmatrix.sync.aligned.m8n8.trans.b16", ["Movmatrix", "transposes one 8x8 .b16", "1 register per lane"]),
])
def test_explain_matrix_moves(capsys, text, words):
    assert main(["explain", text]) == 0
    out = capsys.readouterr().out
    for word in words:
        assert word in out


def test_the_dask_module_does_not_import_the_command_line():
    """``fastmma.dask`` sits below the CLI: the CLI imports it, never the other way round."""
    import ast
    from pathlib import Path

    import fastmma

    tree = ast.parse((Path(fastmma.__file__).parent / "dask.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported and not {"cli", "fastmma.cli"} & imported
