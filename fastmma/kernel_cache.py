"""When numba's on-disk copies of fastmma's kernels are stale: after a change to what they are built from.

numba's cache (``cache=True``) stamps a function's compiled code with a hash of the one
source file that defines it.  A fastmma kernel is made of more than its own file:
``fused_gemm``'s per-row kernels inline the LLVM blocks of ``register_blocks`` and the
intrinsics of ``vector_ops``, and freeze constants of other modules (the rounding codes, the
formats' parameters) into their code, so numba's stamp would keep old machine code in use
after a change to one of those modules alone.

So every function that fastmma defines is stamped with :func:`stamp_for` its file: a hash of
the code (comments and docstrings left out, :func:`code_of`) of the modules every kernel may be
built from (:data:`KERNEL_SOURCES`) and of the function's own file.  A change to one of them compiles the affected kernels afresh when next called; a change
anywhere else (the command line, the docs, the PTX interpreter) compiles nothing.
:func:`install` puts locators with this stamp ahead of numba's own, one for each of the places
numba would keep the cache (``$NUMBA_CACHE_DIR``, ``__pycache__`` beside the source, the
user's cache directory).  Under ``$NUMBA_CACHE_DIR`` the cache of a fastmma file lies at its
path inside the package, so checkouts of the same sources share one cache.  Functions outside
the package keep numba's stamp.  Where numba's caching module lacks the classes this extends
(a numba unlike those tested), :data:`state` says so and numba's own stamp applies.
"""

from __future__ import annotations

import ast
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


#: What every kernel may be built from, relative to the package: the kernels themselves, the
#: formats and numerics rules whose constants they freeze, and how numba compiles them.
KERNEL_SOURCES = ("kernels", "formats.py", "errors.py", "isa/numerics.py", "codegen.py", "kernel_cache.py")


def code_of(path: Path) -> bytes:
    """What a Python file computes, without its comments and docstrings: the dump of its
    syntax tree (no line numbers) with each module's, class's and function's docstring
    removed, so that rewording a comment or a docstring leaves every kernel's cache valid.
    A file that does not parse is taken byte for byte."""
    source = path.read_bytes()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def source_stamp(root: Path, names=None) -> str:
    """A SHA-256 of the relative paths and the code (:func:`code_of`) of every ``.py`` file
    under ``root`` (only those under ``names``, files or folders relative to ``root``, where
    given)."""
    paths = root.rglob("*.py") if names is None else (
        p for name in names for p in ((root / name).rglob("*.py") if (root / name).is_dir() else [root / name]))
    digest = hashlib.sha256()
    for path in sorted(set(paths)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(code_of(path) + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def kernel_stamp() -> str:
    """:func:`source_stamp` of :data:`KERNEL_SOURCES`, read once per process."""
    return source_stamp(PACKAGE, KERNEL_SOURCES)


@functools.lru_cache(maxsize=None)
def stamp_for(py_file: str) -> str:
    """The stamp of a function defined in ``py_file``: :func:`kernel_stamp`, and the file's
    own contents where it lies outside :data:`KERNEL_SOURCES`."""
    relative = Path(py_file).resolve().relative_to(PACKAGE).as_posix()
    if any(relative == name or relative.startswith(name + "/") for name in KERNEL_SOURCES):
        return kernel_stamp()
    return hashlib.sha256((kernel_stamp() + relative).encode() + code_of(Path(py_file))).hexdigest()


def _in_package(py_file: str) -> bool:
    try:
        return Path(py_file).resolve().is_relative_to(PACKAGE)
    except OSError:
        return False


def _stamped(base: type) -> type:
    """``base`` (one of numba's locators) for fastmma's functions, with :func:`stamp_for`
    their file; under ``$NUMBA_CACHE_DIR``, at the file's path inside the package."""

    class Locator(base):
        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            if base.__name__.lstrip("_") == "UserProvidedCacheLocator":
                self._cache_path = str(Path(config.CACHE_DIR) / Path(py_file).resolve().parent.relative_to(PACKAGE.parent))

        def get_source_stamp(self):
            return stamp_for(self._py_file)

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
