"""The ISA layer: which wgmma / wmma instructions exist, parsed into immutable objects."""

from .instruction import (
    Instruction,
    Operand,
    Shape,
    WgmmaCommitGroup,
    WgmmaFence,
    WgmmaMmaAsync,
    WgmmaWaitGroup,
    WmmaLoad,
    WmmaMma,
    WmmaStore,
)
from .numerics import FmaChainRule, FusedDotRule, IntDotRule, PopcRule
from .parser import parse

__all__ = [
    "parse", "Instruction", "Operand", "Shape", "WgmmaMmaAsync", "WgmmaFence", "WgmmaCommitGroup",
    "WgmmaWaitGroup", "WmmaLoad", "WmmaMma", "WmmaStore", "FusedDotRule", "IntDotRule", "PopcRule",
    "FmaChainRule",
]
