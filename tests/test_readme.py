"""The README's examples run as written."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_python_examples_run():
    namespace = {}
    code = blocks("python")
    assert code, "README has python examples"
    for block in code:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - the README's own code


def test_quick_start_and_cli_commands_run(tmp_path):
    commands = []
    for block in blocks("bash"):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if "python -m fastmma" in line:
                commands.append(line.split("&&")[-1].strip())
    assert any(c.startswith("python -m fastmma gemm") for c in commands)
    for command in commands:
        argv = shlex.split(command)
        argv[0] = sys.executable
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=README.parent)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        if " conform " in command:
            assert proc.stdout.strip().endswith(" 0 failed")
