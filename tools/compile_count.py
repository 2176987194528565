"""How many functions numba compiles for a command, from an empty cache.

    python tools/compile_count.py                                  # the test suite (python -m pytest)
    python tools/compile_count.py -- python -m fastmma gemm --size 2048

The command runs with ``NUMBA_CACHE_DIR`` set to a new empty folder.  *Distinct* is the number
of compiled functions numba saved there (one ``.nbc`` file each); *compiles* adds up the
compiles that each process counted (``$FASTMMA_COMPILE_LOG``, written by the test session's
processes and by ``fastmma warmup``'s), so a kernel compiled by two workers counts twice.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs="*", help="the command (default: python -m pytest)")
    parser.add_argument("--json", help="also write the counts to this file")
    args = parser.parse_args(argv)
    command = args.command or [sys.executable, "-m", "pytest"]
    with tempfile.TemporaryDirectory(prefix="fastmma-count-") as tmp:
        cache, log = Path(tmp) / "cache", Path(tmp) / "counts.jsonl"
        env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), FASTMMA_COMPILE_LOG=str(log))
        start = time.perf_counter()
        rc = subprocess.call(command, env=env)
        seconds = time.perf_counter() - start
        lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        # a process's counts are running totals (a warmup process logs once per family): keep its last
        processes = list({p["pid"]: p for p in lines}.values())
        counts = {"command": command, "returncode": rc, "seconds": round(seconds, 1),
                  "distinct": sum(1 for _ in cache.rglob("*.nbc")),
                  "compiles": sum(p["compiled"] for p in processes) if processes else None,
                  "processes": processes}
    print(f"compile_count: {counts['distinct']} distinct functions compiled, "
          f"{counts['compiles']} compiles in {len(processes)} counted processes, {seconds:.0f} s, rc {rc}")
    if args.json:
        Path(args.json).write_text(json.dumps(counts, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
