"""Where a GEMM kernel spends its time, instruction by instruction (Linux, x86).

    python bench/profile_kernel.py m64n256k16.f32.f16.f16 --size 2048 --calls 5

runs ``fastmma.matmul`` on random normal data in a child process under ``perf record -e
cpu-clock`` (a software clock, which also works in virtual machines without hardware
counters), single-threaded, then prints the share of samples in each 256-byte stretch of the
per-row kernel (the ``_rows*`` function that holds the passes) and writes its annotated
disassembly (samples per instruction, ``objdump``) to ``--out``.  Needs ``perf`` and
``objdump``.

perf sees numba's compiled code only as addresses; the child compiles the kernels afresh
(into a temporary cache: a kernel loaded from the cache is linked into its caller and has no
address of its own to look up), looks up where the kernel starts and copies its machine code
to a file before it exits, for ``objdump``.  (``NUMBA_ENABLE_PROFILING=1`` would name the functions for perf
too, but it switches on debug information, which made the kernels 30 times slower.)
Leaving a step out of the kernel to time it (ablation) changes the bits and the code around
it; this attributes the time of the real kernel.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

CODE_BYTES = 0x10000  # copied from the start of the kernel (more than any _rows function's length),
# or up to the end of its memory mapping where that comes first

CHILD = r"""
import ctypes, sys, time
import ml_dtypes, numba, numpy as np
numba.set_num_threads(1)
import fastmma
from fastmma.kernels import fused_gemm
instruction, n, calls, dump = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32, "e4m3": ml_dtypes.float8_e4m3fn,
         "e5m2": ml_dtypes.float8_e5m2}[instruction.split(".")[-1]]
rng = np.random.default_rng(0)
a = rng.standard_normal((n, n)).astype(dtype)
b = rng.standard_normal((n, n)).astype(dtype)
fastmma.matmul(a[:256, :256], b[:256, :256], instruction=instruction)  # compile
for _ in range(calls):
    t = time.perf_counter()
    fastmma.matmul(a, b, instruction=instruction)
    print(f"{time.perf_counter() - t:.4f} s", file=sys.stderr)
for name in dir(fused_gemm):
    if name.startswith("_rows"):
        for cres in getattr(fused_gemm, name).overloads.values():
            address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
            # no further than the end of the kernel's mapping: the next page may be unmapped
            end = next(int(hi, 16) for lo, hi in (line.split()[0].split("-") for line in open("/proc/self/maps"))
                       if int(lo, 16) <= address < int(hi, 16))
            with open(dump, "wb") as f:
                f.write(ctypes.string_at(address, min(CODE_BYTES, end - address)))
            print(name, hex(address))
"""


def _profile(instruction, size, calls, work):
    dump = os.path.join(work, "code.bin")
    env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(work, "cache"))
    data = os.path.join(work, "perf.data")
    child = CHILD.replace("CODE_BYTES", str(CODE_BYTES))
    out = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", data, sys.executable, "-c", child,
                          instruction, str(size), str(calls), dump], env=env, capture_output=True, text=True)
    if out.returncode or not out.stdout.strip():
        sys.exit(f"the profiled run failed or found no kernel:\n{out.stderr[-3000:]}")
    print(out.stderr.strip())
    name, address = out.stdout.split()[-2:]
    ips = subprocess.run(["perf", "script", "-i", data, "-F", "ip"], capture_output=True, text=True).stdout.split()
    return name, int(address, 16), dump, [int(x, 16) for x in ips]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("instruction", help="as fastmma.matmul takes it, e.g. m64n256k32.f32.e4m3.e4m3")
    parser.add_argument("--size", type=int, default=2048, help="M = N = K")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out", default="kernel_profile.txt", help="the annotated disassembly")
    args = parser.parse_args(argv)
    missing = [tool for tool in ("perf", "objdump") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"needs {' and '.join(missing)} on the PATH")
    with tempfile.TemporaryDirectory() as work:
        name, address, dump, ips = _profile(args.instruction, args.size, args.calls, work)
        counts = collections.Counter(ip - address for ip in ips if 0 <= ip - address < CODE_BYTES)
        asm = subprocess.run(["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", dump],
                             capture_output=True, text=True).stdout
    total = sum(counts.values())
    print(f"{name}: {total} of {len(ips)} samples ({100 * total / max(1, len(ips)):.0f}%; the rest: compiling, "
          f"decoding, numpy, Python)")
    stretches = collections.Counter()
    for offset, n in counts.items():
        stretches[offset // 256 * 256] += n
    for offset in sorted(stretches):
        if stretches[offset] >= 0.005 * total:
            print(f"  {offset:#07x}  {100 * stretches[offset] / total:5.1f}%")
    with open(args.out, "w") as f:
        for line in asm.splitlines():
            m = re.match(r"\s+([0-9a-f]+):", line)
            if m:
                f.write(f"{counts.get(int(m.group(1), 16), 0):6d} {line}\n")
    print(f"annotated disassembly (samples, offset, instruction): {args.out}")


if __name__ == "__main__":
    main()
