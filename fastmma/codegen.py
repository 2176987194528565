"""How numba compiles fastmma's kernels: full-width vectors on CPUs with AVX-512.

LLVM tunes code for Intel's AVX-512 server cores (Skylake-X to Sapphire and Emerald Rapids)
with the flag ``prefer-256-bit``: its loop vectoriser then builds 256-bit vectors although
the CPU has 512-bit ones.  fastmma's kernels are bound by vector arithmetic (pass 2 of
``kernels.fused_gemm`` costs four vector operations per vector of products), so half-width
vectors cost them up to half their speed (measurements: docs/performance.md, "Full-width
vectors").  Clearing the flag is what clang's ``-mprefer-vector-width=512`` does.

numba builds one code generator per process, with the target machine's features, when the
first jitted function is created, and keys its on-disk cache by those features.  So
:func:`prefer_full_width` runs when ``fastmma`` is imported, before any of its kernels is
defined, and sets numba's CPU features to the host's (as numba would find them) less
``prefer-256-bit``.  It changes no instruction set, only which vector width LLVM prefers,
and so also applies to other numba code of the process compiled after it.  It leaves the
features alone where the user has set them (``NUMBA_CPU_FEATURES``: the way to opt out),
where the CPU has no AVX-512, and where numba's code generator already exists (numba code
ran before ``fastmma`` was imported: the kernels then keep LLVM's choice, and
:data:`state` says so; if that choice is 256-bit vectors on a CPU with 512-bit ones, found by
compiling a small loop, a :class:`~fastmma.errors.HalfWidthVectorsWarning` says how to
avoid it).
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
from numba.core import codegen, registry

from .errors import HalfWidthVectorsWarning

#: The LLVM target feature that clears the preference for 256-bit vectors.
FULL_WIDTH_FEATURE = "-prefer-256-bit"

#: What :func:`prefer_full_width` found: ``"full width"`` (set here), ``"user features"``
#: (``NUMBA_CPU_FEATURES`` was set), ``"no avx-512"``, ``"too late"`` (numba's code
#: generator existed already; ``"too late: half width"`` where it makes 256-bit vectors)
#: or ``"not run"``.
state = "not run"


def _codegen_exists() -> bool:
    """Whether numba has built its CPU code generator in this process (it does so with its
    first target context, when the first jitted function is created)."""
    return "_toplevel_target_context" in registry.cpu_target.__dict__


def _builds_full_width() -> bool:
    """Whether numba's existing code generator vectorises a float32 loop with 512-bit
    registers."""
    @numba.njit(cache=False)
    def triple(x, y):
        for i in range(x.size):
            y[i] = x[i] * np.float32(3)

    triple.compile("void(float32[::1], float32[::1])")
    return "zmm" in triple.inspect_asm(triple.signatures[0])


def prefer_full_width() -> str:
    """Let LLVM vectorise numba code with the CPU's full 512-bit vectors where it has
    AVX-512, if numba's code generator is not built yet and the user has not chosen the
    CPU features; returns (and stores in :data:`state`) what it did."""
    global state
    if numba.config.CPU_FEATURES is not None:
        state = "user features"
    else:
        features = codegen.get_host_cpu_features()
        if "+avx512f" not in features.split(","):
            state = "no avx-512"
        elif _codegen_exists():
            full = _builds_full_width()
            state = "too late" if full else "too late: half width"
            if not full:
                warnings.warn("numba code was defined before fastmma was imported, and numba's code generator makes "
                              "256-bit vectors on this CPU, which has 512-bit ones: fastmma's kernels will run up "
                              "to 1.5x slower. Import fastmma before other numba code, or set NUMBA_CPU_FEATURES "
                              "(the host's features followed by ',-prefer-256-bit').", HalfWidthVectorsWarning,
                              stacklevel=3)
        else:
            numba.config.CPU_FEATURES = f"{features},{FULL_WIDTH_FEATURE}"
            state = "full width"
    return state
