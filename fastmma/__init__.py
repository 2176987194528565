"""fastmma: NVIDIA Hopper (sm_90a) PTX matrix instructions, bit for bit, on the CPU.

Entry points:

* :func:`fastmma.mma` - one wgmma or wmma instruction on logical matrices;
* :mod:`fastmma.wmma` - ``wmma.load`` / ``wmma.mma`` / ``wmma.store`` on warp fragments;
* :mod:`fastmma.wgmma` - one ``wgmma.mma_async`` on warpgroup registers and shared memory;
* :func:`fastmma.parse` - PTX instruction text into an instruction object.
"""

from . import errors, formats, isa, wgmma, wmma
from .errors import FastmmaError
from .isa import parse
from .mma import mma

__version__ = "0.1.0"

__all__ = ["mma", "parse", "wmma", "wgmma", "isa", "formats", "errors", "FastmmaError", "__version__"]
