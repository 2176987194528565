"""The ISA layer: which wgmma / wmma / mma / ldmatrix / stmatrix / movmatrix instructions exist, parsed into
immutable objects."""

from .instruction import (
    Instruction,
    Ldmatrix,
    MmaSync,
    Movmatrix,
    Operand,
    Shape,
    Stmatrix,
    WgmmaCommitGroup,
    WgmmaFence,
    WgmmaMmaAsync,
    WgmmaWaitGroup,
    WmmaLoad,
    WmmaMma,
    WmmaStore,
)
from .numerics import ConvertedF16Rule, FfmaExpansionRule, FmaChainRule, FusedDotRule, IntDotRule, PopcRule
from .parser import parse

__all__ = [
    "parse", "Instruction", "Operand", "Shape", "WgmmaMmaAsync", "WgmmaFence", "WgmmaCommitGroup",
    "WgmmaWaitGroup", "WmmaLoad", "WmmaMma", "WmmaStore", "MmaSync", "FusedDotRule", "IntDotRule", "PopcRule",
    "FmaChainRule", "ConvertedF16Rule", "FfmaExpansionRule", "Ldmatrix", "Stmatrix", "Movmatrix",
]
