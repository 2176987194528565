"""Drop-in replacements for other simulators' Python APIs, computed with fastmma's kernels.

* :mod:`fastmma.compat.mmasim` - MMA-Sim's Hopper ``WGMMA`` and ``MMA`` classes (MMA-Sim,
  PyPI ``mmasim``, arXiv 2511.10909): same constructor arguments, call signatures and
  results, bit for bit; torch tensors in and out where torch is installed, numpy always.
"""

from .mmasim import MMA, WGMMA, UnsupportedOperationError

__all__ = ["MMA", "WGMMA", "UnsupportedOperationError"]
