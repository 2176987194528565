"""fastmma: NVIDIA Hopper (sm_90a) PTX matrix instructions, bit for bit, on the CPU.

Entry points:

* :func:`fastmma.matmul` - a whole GEMM with the numbers of a k-loop of one instruction;
* :func:`fastmma.matmul_sp` - the same for a structured-sparse A and ``mma.sp`` / ``wgmma.mma_async.sp``;
* :func:`fastmma.mma` - one wgmma, wmma or mma instruction on logical matrices;
* :func:`fastmma.mma_sp` - one sparse ``mma.sp`` or ``wgmma.mma_async.sp`` on logical matrices (the kept elements and their columns);
* :mod:`fastmma.wmma` - ``wmma.load`` / ``wmma.mma`` / ``wmma.store`` on warp fragments;
* :mod:`fastmma.mma_sync` - ``mma.sync`` and ``mma.sp`` on warp fragments;
* :mod:`fastmma.ldmatrix` - ``ldmatrix`` / ``stmatrix`` between a shared-memory image and warp registers;
* :mod:`fastmma.wgmma` - one ``wgmma.mma_async`` on warpgroup registers and shared memory;
* ``fastmma.wgmma.prepare``, ``fastmma.mma_sync.prepare``, ``fastmma.wmma.prepare`` - one instruction
  parsed and checked once, then called on registers (and images) for each issue, as a simulator does;
* :class:`fastmma.Warpgroup` - a warpgroup's registers, shared memory and async groups;
* :func:`fastmma.parse` - PTX instruction text into an instruction object.
"""

from . import kernel_cache
from .codegen import prefer_full_width

prefer_full_width()  # before any kernel is defined: numba builds its code generator then
kernel_cache.install()  # before any kernel is defined: numba picks each one's cache locator then

from . import errors, formats, isa, ldmatrix, mma_sync, wgmma, wmma  # noqa: E402
from .errors import FastmmaError  # noqa: E402
from .gemm import matmul  # noqa: E402
from .isa import parse  # noqa: E402
from .mma import mma, mma_sp  # noqa: E402
from .sparse_gemm import matmul_sp  # noqa: E402
from .warpgroup import Warpgroup  # noqa: E402

__version__ = "0.1.0"

__all__ = ["matmul", "matmul_sp", "mma", "mma_sp", "parse", "Warpgroup", "wmma", "mma_sync", "ldmatrix", "wgmma", "isa", "formats", "errors", "FastmmaError", "__version__"]
