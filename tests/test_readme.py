"""The examples of README.md and of every page under docs/ run as written.

Each page's python blocks run in order in one namespace (a page's later examples use its
earlier ones' names); its bash lines that call ``python -m fastmma`` run as commands.
"""

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README] + sorted((ROOT / "docs").rglob("*.md"))


def blocks(page, lang):
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(), flags=re.S)


#: A block that imports one of these fastmma modules runs only where its extra's package is installed.
EXTRAS = {"fastmma.dask": "dask", "fastmma.torch": "torch", "fastmma.triton": "triton"}


def missing_extra(block):
    return any(module in block and importlib.util.find_spec(package) is None for module, package in EXTRAS.items())


def page_id(page):
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=page_id)
def test_python_examples_run(page):
    """Every python block runs; one that uses fastmma.dask, .torch or .triton only where that
    extra is installed."""
    code = blocks(page, "python")
    namespace = {}
    for block in code:
        if missing_extra(block):
            continue
        exec(compile(block, str(page), "exec"), namespace)  # noqa: S102 - the page's own code


def test_readme_shows_a_gemm_and_a_register_level_instruction():
    code = "".join(blocks(README, "python"))
    assert "fastmma.matmul(" in code and "mma_sync.mma(" in code


def fastmma_commands(page):
    commands = []
    for block in blocks(page, "bash"):
        for line in block.splitlines():
            line, _, comment = line.partition("#")
            if "python -m fastmma" in line:
                commands.append((line.split("&&")[-1].strip(), comment))
    return commands


def test_quick_start_runs_a_gemm():
    assert any(c.startswith("python -m fastmma gemm") for c, _ in fastmma_commands(README))


@pytest.mark.parametrize("page", [p for p in PAGES if fastmma_commands(p)], ids=page_id)
def test_cli_commands_run(page):
    for command, comment in fastmma_commands(page):
        argv = shlex.split(command)
        argv[0] = sys.executable
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=ROOT)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        if " conform " in command:  # the count the page states ("# ... 3901 passed, 0 failed") is the count
            stated = re.search(r"(\d+ passed, 0 failed)", comment)
            assert stated and proc.stdout.strip().splitlines()[-1] == stated.group(1), (comment, proc.stdout[-300:])
