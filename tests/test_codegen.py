"""fastmma.codegen: the kernels use the CPU's 512-bit vectors where it has AVX-512, and the
user's own numba settings win."""

import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit
from numba.core import codegen as numba_codegen

import fastmma
from fastmma import codegen, kernels

HAS_AVX512 = "+avx512f" in numba_codegen.get_host_cpu_features().split(",")


def _state_in_fresh_process(prologue="", env=None):
    """(fastmma.codegen.state, stderr) in a new interpreter after ``prologue`` ran."""
    script = f"{prologue}\nimport fastmma\nprint(fastmma.codegen.state)"
    out = subprocess.run([sys.executable, "-W", "always", "-c", script], capture_output=True, text=True,
                         timeout=300, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), out.stderr


def _asm_of_a_vector_loop():
    """Assembly of a float32 loop that LLVM vectorises, compiled now (numba cannot show the
    assembly of a kernel it loaded from its cache); fastmma's kernels share its code
    generator, one per process."""
    @njit(cache=False)
    def scale_and_truncate(p, s, out):
        for j in range(p.size):
            out[j] = np.int32(p[j] * s[j])

    p = np.ones(256, np.float32)
    scale_and_truncate(p, p, np.empty(256, np.int32))
    return next(iter(scale_and_truncate.inspect_asm().values()))


@pytest.mark.skipif(not HAS_AVX512, reason="the CPU has no AVX-512")
def test_kernels_use_512_bit_vectors_where_the_cpu_has_them():
    if os.environ.get("NUMBA_CPU_FEATURES"):
        pytest.skip("the user chose numba's CPU features")
    assert codegen.state == "full width"
    assert "zmm" in _asm_of_a_vector_loop()


@pytest.mark.skipif(HAS_AVX512, reason="the CPU has AVX-512")
def test_without_avx512_the_features_are_left_alone():
    assert codegen.state in ("no avx-512", "user features")


def test_numba_cpu_features_set_by_the_user_are_kept():
    features = numba_codegen.get_host_cpu_features()
    state, err = _state_in_fresh_process(env={"NUMBA_CPU_FEATURES": features})
    assert state == "user features" and "Warning" not in err


@pytest.mark.skipif(not HAS_AVX512, reason="the CPU has no AVX-512")
def test_numba_code_compiled_before_the_import_is_reported():
    """The kernels keep numba's code generator as it was built; where it makes half-width
    vectors (LLVM's tuning for Intel's AVX-512 server cores) a warning says how to avoid it."""
    if os.environ.get("NUMBA_CPU_FEATURES"):
        pytest.skip("the user chose numba's CPU features")
    state, err = _state_in_fresh_process("from numba import njit\nnjit(lambda x: x + 1)(1)")
    assert state in ("too late", "too late: half width")
    assert ("HalfWidthVectorsWarning" in err) == (state == "too late: half width")
    assert ("HalfWidthVectorsWarning" in err) == ("zmm" not in _asm_in_fresh_process())


def _asm_in_fresh_process():
    """Assembly of a float32 loop compiled by numba's own code generator (no fastmma)."""
    script = ("import numpy as np, numba, sys\n"
              "@numba.njit\n"
              "def g(x, y):\n"
              "    for i in range(x.size):\n"
              "        y[i] = x[i] * np.float32(3)\n"
              "g.compile('void(float32[::1], float32[::1])')\n"
              "sys.stdout.write(g.inspect_asm(g.signatures[0]))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CPU_FEATURES"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_results_do_not_depend_on_the_vector_width(tmp_path, monkeypatch):
    """The same GEMM compiled with LLVM's own preference (256-bit vectors on Intel's AVX-512
    cores), in another process, gives the same bits as this process's kernels (both on the
    blocked kernels: no size threshold)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((96, 160)).astype(np.float16)
    b = rng.standard_normal((160, 80)).astype(np.float16)
    path = str(tmp_path / "operands.npz")
    np.savez(path, a=a, b=b)
    script = ("import numpy as np, fastmma, sys\n"
              f"z = np.load({path!r})\n"
              "fastmma.kernels.FAST_KERNEL_MIN_MACS = 0\n"
              "d = fastmma.matmul(z['a'], z['b'], instruction='m64n16k16.f32.f16.f16')\n"
              "sys.stdout.write(d.view(np.uint32).tobytes().hex())")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "NUMBA_CPU_FEATURES": numba_codegen.get_host_cpu_features()})
    assert out.returncode == 0, out.stderr
    monkeypatch.setattr(kernels, "FAST_KERNEL_MIN_MACS", 0)
    ours = fastmma.matmul(a, b, instruction="m64n16k16.f32.f16.f16")
    assert bytes.fromhex(out.stdout) == ours.view(np.uint32).tobytes()
