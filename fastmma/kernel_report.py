"""Which of fastmma's numba kernels have compiled code in the on-disk cache, read from the
cache's index files alone: nothing is compiled or loaded (``fastmma info``)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import NamedTuple


class ModuleCache(NamedTuple):
    """The cache of one module of ``fastmma.kernels``.

    ``kernels``: its cached (``cache=True``) functions; ``compiled``: those with code for the
    current sources; ``signatures``: their compiled type signatures in all; ``stale``: those
    whose cache files exist but were built from other sources or another numba;
    ``where``: the folders of its cache files.
    """

    module: str
    kernels: int
    compiled: int
    signatures: int
    stale: int
    where: tuple[str, ...]


def kernels_of(module):
    """The cached numba kernels ``module`` defines: its own names, and the variants in its
    tables (dicts of kernels made by :mod:`fastmma.kernels.variants`)."""
    for value in vars(module).values():
        for obj in value.values() if isinstance(value, dict) else (value,):
            if hasattr(obj, "py_func") and obj.py_func.__module__ == module.__name__ and \
                    hasattr(getattr(obj, "_cache", None), "_cache_file"):
                yield obj


def _modules(info, parent):
    """The module ``info`` of ``parent``, and every module below it where it is a package."""
    module = importlib.import_module(f"{parent.__name__}.{info.name}")
    yield module
    if info.ispkg:
        for sub in pkgutil.walk_packages(module.__path__, module.__name__ + "."):
            yield importlib.import_module(sub.name)


def _entries(cache) -> tuple[int, bool]:
    """``(signatures with code for these sources, whether an index file exists)``.  numba's
    index reader returns nothing for an index of other sources or another numba version."""
    index = cache._cache_file
    return len(index._load_index()), Path(index._index_path).exists()


def cached_kernels() -> list[ModuleCache]:
    """A :class:`ModuleCache` for every module of ``fastmma.kernels`` (a package's modules
    counted together), in name order.

    Importing a module defines its kernels without compiling them.  Raises ``AttributeError``
    where numba's cache objects lack the attributes read here (a numba unlike those tested).
    Example: ``sum(m.compiled for m in cached_kernels())``.
    """
    from . import kernels

    report = []
    for info in sorted(pkgutil.iter_modules(kernels.__path__), key=lambda i: i.name):
        caches = list({id(k): k._cache for m in _modules(info, kernels) for k in kernels_of(m)}.values())
        if not caches:
            continue
        counts = [_entries(c) for c in caches]
        report.append(ModuleCache(
            module=info.name, kernels=len(caches), compiled=sum(1 for n, _ in counts if n),
            signatures=sum(n for n, _ in counts), stale=sum(1 for n, exists in counts if exists and not n),
            where=tuple(sorted({str(c._cache_path) for c in caches}))))
    return report
