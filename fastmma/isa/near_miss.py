"""Near misses: the qualifier of the ISA's tables that a mistyped one was most likely meant to be.

Only words of fixed spelling are suggested (types, layouts, roundings, ``.sync``,
``.satfinite`` ...): shapes are checked against their own tables, whose errors list the valid
ones.  The match is ``difflib``'s ratio, at least :data:`CUTOFF`.
"""

from __future__ import annotations

import difflib
import re

from . import tables

CUTOFF = 0.6

#: The qualifiers of fixed spelling, by the kind the parser sorts them into.
QUALIFIERS = {
    "sync": ("sync",), "aligned": ("aligned",), "trans": ("trans",), "satfinite": ("satfinite",), "popc": ("popc",),
    "num": tables.MATRIX_MOVE.nums, "layout": tables.LAYOUTS,
    "type": tables.TYPES + tables.MATRIX_MOVE.types, "rounding": tables.ROUNDINGS, "op": tables.BIT_OPS,
    "ss": tables.STATE_SPACES, "spvariant": tables.MMA_SP_VARIANTS,
}

_SHAPE = re.compile(r"m\d+n\d+(k\d+)?")


def is_qualifier(token: str) -> bool:
    """Whether ``token`` (without its dot) is spelled as a qualifier of some matrix instruction:
    one of :data:`QUALIFIERS`, a type named only to be refused, or a shape."""
    return (any(token in values for values in QUALIFIERS.values()) or token in tables.MATRIX_MOVE_OTHER_TYPES
            or bool(_SHAPE.fullmatch(token)))


def did_you_mean(token: str, kinds=None) -> str | None:
    """The qualifier (without its dot) closest to ``token`` among those of ``kinds`` (keys of
    :data:`QUALIFIERS`; default all), or None where none is close.

    Example: ``did_you_mean("f17") == "f16"``.
    """
    words = [w for kind, values in QUALIFIERS.items() if kinds is None or kind in kinds for w in values]
    found = difflib.get_close_matches(token.lstrip("."), dict.fromkeys(words), n=1, cutoff=CUTOFF)
    return found[0] if found else None
