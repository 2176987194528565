"""The kernels take A, B and C in one array type, whether the caller's arrays are writeable
or not (fastmma/kernels/operands.py): numba would compile each kernel once more for each."""

import inspect

import numpy as np
import pytest
from numba.core.dispatcher import Dispatcher

import fastmma
from fastmma.kernels.operands import read_only


def compiled_signatures() -> int:
    """How many compiled signatures the numba functions of fastmma's kernel modules hold."""
    import sys

    count = 0
    for name, module in list(sys.modules.items()):
        if name.startswith("fastmma.kernels") and module is not None:
            for _, fn in inspect.getmembers(module, lambda x: isinstance(x, Dispatcher)):
                count += len(fn.signatures)
    return count


def frozen(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.flags.writeable = False
    return x


@pytest.mark.parametrize("instruction", ["m64n64k16.f32.f16.f16", "m64n32k32.s32.s8.s8"])
def test_read_only_operands_compile_nothing_new(instruction):
    rng = np.random.default_rng(5)
    if ".f16" in instruction:
        a = rng.standard_normal((128, 64)).astype(np.float16)
        b = rng.standard_normal((64, 256)).astype(np.float16)
        c = rng.standard_normal((128, 256)).astype(np.float32)
        a[3, 5] = np.inf  # the special-value kernels as well
    else:
        a = rng.integers(-128, 128, (128, 64), dtype=np.int8)
        b = rng.integers(-128, 128, (64, 256), dtype=np.int8)
        c = rng.integers(-1000, 1000, (128, 256), dtype=np.int32)
    writeable = fastmma.matmul(a, b, c, instruction=instruction)
    before = compiled_signatures()
    again = fastmma.matmul(frozen(a), frozen(b), frozen(c), instruction=instruction)
    assert compiled_signatures() == before
    assert np.array_equal(again.view(np.uint8), writeable.view(np.uint8))
    assert again.flags.writeable


def test_read_only_is_a_view_and_leaves_the_callers_array_writeable():
    x = np.arange(6, dtype=np.uint16).reshape(2, 3)
    view = read_only(x)
    assert not view.flags.writeable and np.shares_memory(view, x) and x.flags.writeable
    assert read_only(view) is view and read_only(None) is None
    with pytest.raises(ValueError):
        view[0, 0] = 1
