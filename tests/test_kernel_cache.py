"""fastmma's kernels are compiled afresh after a change to what they are built from, and only then (kernel_cache)."""

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys

from numba.core.caching import FunctionCache

import fastmma
from fastmma import kernel_cache


def _cached_dispatchers():
    for info in pkgutil.walk_packages(fastmma.__path__, "fastmma."):
        if info.name.endswith("__main__"):  # importing it runs the command line
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra (dask) that is not installed
            continue
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) == info.name and isinstance(getattr(obj, "_cache", None), FunctionCache):
                yield f"{info.name}.{name}", obj


def test_every_cached_kernel_of_the_package_takes_the_stamp_of_its_file():
    assert kernel_cache.state == "package stamp"
    found = dict(_cached_dispatchers())
    assert len(found) > 50  # fused_gemm, int_gemm, fused_dot, fma64, decode, compat ...
    for name, dispatcher in found.items():
        locator = dispatcher._cache._impl.locator
        assert type(locator).__name__.startswith("Package"), name
        assert locator.get_source_stamp() == kernel_cache.stamp_for(dispatcher.py_func.__code__.co_filename), name


def test_source_stamp_follows_every_file_and_its_path(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not a source\n")
    first = kernel_cache.source_stamp(tmp_path)
    (tmp_path / "notes.txt").write_text("changed, still not a source\n")
    assert kernel_cache.source_stamp(tmp_path) == first
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert kernel_cache.source_stamp(tmp_path) != first
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    assert kernel_cache.source_stamp(tmp_path) == first
    (tmp_path / "sub" / "b.py").rename(tmp_path / "sub" / "c.py")
    assert kernel_cache.source_stamp(tmp_path) != first


def test_source_stamp_ignores_comments_and_docstrings_but_not_code(tmp_path):
    """Rewording a comment or a docstring keeps the stamp (no kernel compiles again); a
    changed string that is not a docstring, or a changed statement, changes it."""
    path = tmp_path / "k.py"
    path.write_text('"""Module."""\n\ndef f(x):\n    """Doc."""\n    return x + 1  # why\n\nS = "text"\n')
    first = kernel_cache.source_stamp(tmp_path)
    path.write_text('"""Module, reworded."""\n\n\ndef f(x):\n    """Other doc."""\n    # a new comment\n'
                    '    return x + 1\n\nS = "text"\n')
    assert kernel_cache.source_stamp(tmp_path) == first
    path.write_text('"""Module."""\n\ndef f(x):\n    """Doc."""\n    return x + 2  # why\n\nS = "text"\n')
    assert kernel_cache.source_stamp(tmp_path) != first
    path.write_text('"""Module."""\n\ndef f(x):\n    """Doc."""\n    return x + 1  # why\n\nS = "other"\n')
    assert kernel_cache.source_stamp(tmp_path) != first
    path.write_text('"""Module."""\n\ndef f(x):\n    return x + 1\n\nS = "text"\n')
    assert kernel_cache.source_stamp(tmp_path) == first


CALL = """
import json, fastmma
from fastmma.kernels.fused_dot import round_to_format
bits = int(round_to_format(0, 12345, -10, 8, 23, 127, 23, 0))
stats = round_to_format.stats
print(json.dumps({"file": fastmma.__file__, "bits": bits,
                  "hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values())}))
"""


def test_a_change_to_another_module_compiles_the_kernel_afresh(tmp_path):
    """``fused_dot.round_to_format`` calls ``decode.decode_float``: a change to decode.py's
    code alone must not load the code compiled before it, a new comment there must (numba's own stamp hashes fused_dot.py
    only).  A copy of the package, its own cache, three fresh processes."""
    shutil.copytree(os.path.dirname(fastmma.__file__), tmp_path / "fastmma",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))

    def run():
        out = subprocess.run([sys.executable, "-c", CALL], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["file"].startswith(str(tmp_path))
        return result

    first = run()
    assert (first["hits"], first["misses"]) == (0, 1)
    again = run()
    assert (again["hits"], again["misses"]) == (1, 0) and again["bits"] == first["bits"]
    with open(tmp_path / "fastmma" / "kernels" / "decode.py", "a") as f:
        f.write("\n# a comment changes no kernel\n")
    commented = run()
    assert (commented["hits"], commented["misses"]) == (1, 0) and commented["bits"] == first["bits"]
    with open(tmp_path / "fastmma" / "kernels" / "decode.py", "a") as f:
        f.write("\n_EDITED = 1\n")
    edited = run()
    assert (edited["hits"], edited["misses"]) == (0, 1) and edited["bits"] == first["bits"]
    with open(tmp_path / "fastmma" / "cli.py", "a") as f:
        f.write("\n# edited: the command line is no kernel's source\n")
    elsewhere = run()
    assert (elsewhere["hits"], elsewhere["misses"]) == (1, 0) and elsewhere["bits"] == first["bits"]


def test_stamp_covers_the_kernel_sources_and_a_file_of_its_own():
    package = kernel_cache.PACKAGE
    kernel = kernel_cache.stamp_for(str(package / "kernels" / "fused_dot.py"))
    assert kernel == kernel_cache.stamp_for(str(package / "formats.py")) == kernel_cache.kernel_stamp()
    layout = kernel_cache.stamp_for(str(package / "layout" / "wmma_memory.py"))
    assert layout != kernel and layout != kernel_cache.stamp_for(str(package / "layout" / "wgmma_fragments.py"))
