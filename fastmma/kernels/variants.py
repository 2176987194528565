"""Compiled variants of one kernel from a table of the literals that tell them apart.

Some numbers must be literals in the code that numba compiles: a group size that LLVM
unrolls, or which row function a parallel kernel calls (numba passes a function that it
receives as an argument, or finds in a closure, as a pointer, and will not cache the
kernel that calls it).  :func:`variant` compiles one copy of a template per row of a table:
the literals are the template's closure cells, which numba freezes as constants and hashes
into the key of its on-disk cache, and the functions it calls are names in the copy's own
globals, which numba calls directly.  Each copy gets its own name, so that each has its own
file in the cache.
"""

from __future__ import annotations

import types

from numba import njit


def variant(template, name: str, calls=None, **options):
    """``njit(**options)`` of a copy of ``template`` named ``name``, whose global names
    ``calls`` (a dict) maps to the jitted functions that this copy calls.

    ``template`` is a closure over plain numbers and booleans (they must pickle alike in
    every process: numba keys its cache by their pickle)."""
    scope = dict(template.__globals__)
    scope.update(calls or {})
    copy = types.FunctionType(template.__code__, scope, name, template.__defaults__, template.__closure__)
    copy.__qualname__ = name
    copy.__doc__ = template.__doc__
    copy.__module__ = template.__module__
    return njit(**options)(copy)
