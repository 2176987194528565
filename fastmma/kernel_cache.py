"""When numba's on-disk copies of fastmma's kernels are stale: after any change to fastmma.

numba's cache (``cache=True``) stamps a function's compiled code with a hash of the one
source file that defines it, and loads that code again while the file is unchanged.  A
fastmma kernel is made of more than its own file: ``fused_gemm``'s per-row kernels inline
the LLVM blocks of ``register_blocks`` and the intrinsics of ``vector_ops``, and freeze
constants of other modules (``ROWS``, the rounding codes) into their code.  With numba's
stamp, a change to one of those modules alone (a ``git pull`` into an editable install, a
patch while developing) left the old machine code in use: changing the compare of
``register_blocks``' count left an e4m3 GEMM's bits exactly as before, until the cache was
deleted by hand.

So every function that fastmma's package defines is stamped with a hash of all of the
package's Python sources (:func:`package_stamp`): a change to any of them compiles each
kernel afresh when it is next called, and an unchanged package loads every kernel from the
cache.  :func:`install` puts locators with this stamp ahead of numba's own, one for each of
the places numba would keep the cache (``$NUMBA_CACHE_DIR``, ``__pycache__`` beside the
source, the user's cache directory), so the cache stays where numba would put it.  Functions
outside the package keep numba's stamp.  Where numba's caching module lacks the classes this
extends (a numba unlike those tested), :data:`state` says so and numba's own stamp applies.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from numba.core import caching, config

PACKAGE = Path(__file__).resolve().parent

#: What :func:`install` did: ``"package stamp"``, ``"numba's own: <why>"`` (the user chose
#: numba's locators, or numba lacks the classes extended here) or ``"not run"``.
state = "not run"

# numba's locators, in its own order of preference (older numba names them with a leading underscore)
_NUMBA_LOCATORS = ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")


def source_stamp(root: Path) -> str:
    """A SHA-256 of the relative paths and contents of every ``.py`` file under ``root``."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def package_stamp() -> str:
    """:func:`source_stamp` of fastmma's package, read once per process (numba reads a
    function's stamp when the function is defined, at import; about 3 ms)."""
    return source_stamp(PACKAGE)


def _in_package(py_file: str) -> bool:
    try:
        return Path(py_file).resolve().is_relative_to(PACKAGE)
    except OSError:
        return False


def _stamped(base: type) -> type:
    """``base`` (one of numba's locators) for fastmma's functions, with the package's stamp."""

    class Locator(base):
        def get_source_stamp(self):
            return package_stamp()

        @classmethod
        def from_function(cls, py_func, py_file):
            return super().from_function(py_func, py_file) if _in_package(py_file) else None

    Locator.__name__ = Locator.__qualname__ = "Package" + base.__name__.lstrip("_")
    return Locator


def install() -> None:
    """Put the package-stamped locators first in numba's list (once).  Run by ``fastmma``'s
    ``__init__`` before any of its kernels is defined."""
    global state
    if state == "package stamp":
        return
    if getattr(config, "CACHE_LOCATOR_CLASSES", None):
        state = "numba's own: NUMBA_CACHE_LOCATOR_CLASSES chooses the locators"
        return
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    bases = [getattr(caching, name, None) or getattr(caching, "_" + name, None) for name in _NUMBA_LOCATORS]
    if impl is None or not isinstance(getattr(impl, "_locator_classes", None), list) or None in bases:
        state = "numba's own: its caching module has no CacheImpl._locator_classes or locators to extend"
        return
    impl._locator_classes[:0] = [_stamped(base) for base in bases]
    state = "package stamp"
