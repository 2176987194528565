"""The README's examples run as written."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def run_python_blocks(code):
    namespace = {}
    for block in code:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - the README's own code


def needs_dask(block):
    return "fastmma.dask" in block


def test_python_examples_run():
    code = [b for b in blocks("python") if not needs_dask(b)]
    assert code, "README has python examples"
    run_python_blocks(code)


def test_dask_example_runs():
    pytest.importorskip("dask.array", reason='the dask example needs pip install "fastmma[dask]"')
    code = blocks("python")
    assert any(needs_dask(b) for b in code), "README shows fastmma.dask"
    run_python_blocks(code)


def test_quick_start_and_cli_commands_run(tmp_path):
    commands = []
    for block in blocks("bash"):
        for line in block.splitlines():
            line, _, comment = line.partition("#")
            if "python -m fastmma" in line:
                commands.append((line.split("&&")[-1].strip(), comment))
    assert any(c.startswith("python -m fastmma gemm") for c, _ in commands)
    for command, comment in commands:
        argv = shlex.split(command)
        argv[0] = sys.executable
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=README.parent)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        if " conform " in command:  # the count README states ("# ... 3901 passed, 0 failed") is the count
            stated = re.search(r"(\d+ passed, 0 failed)", comment)
            assert stated and proc.stdout.strip().splitlines()[-1] == stated.group(1), (comment, proc.stdout[-300:])
