"""The ISA layer: which wgmma / wmma / mma / ldmatrix / stmatrix / movmatrix instructions exist, parsed into
immutable objects."""

from .instruction import (
    Instruction,
    Ldmatrix,
    MmaSp,
    MmaSync,
    Movmatrix,
    Operand,
    Shape,
    Stmatrix,
    WgmmaCommitGroup,
    WgmmaFence,
    WgmmaMmaAsync,
    WgmmaMmaAsyncSp,
    WgmmaWaitGroup,
    WmmaLoad,
    WmmaMma,
    WmmaStore,
)
from .numerics import (ConvertedF16Rule, FfmaExpansionRule, FmaChainRule, FusedDotRule, IntDotRule, PopcRule,
                       SparseConvertedF16Rule, SpreadConvertedF16Rule)
from .parser import parse

__all__ = [
    "parse", "Instruction", "Operand", "Shape", "WgmmaMmaAsync", "WgmmaMmaAsyncSp", "WgmmaFence", "WgmmaCommitGroup",
    "WgmmaWaitGroup", "WmmaLoad", "WmmaMma", "WmmaStore", "MmaSync", "MmaSp", "FusedDotRule", "IntDotRule", "PopcRule",
    "FmaChainRule", "ConvertedF16Rule", "FfmaExpansionRule", "SparseConvertedF16Rule",
    "SpreadConvertedF16Rule", "Ldmatrix", "Stmatrix", "Movmatrix",
]
