"""fastmma warmup: compiles the kernels of the types asked into numba's cache, each family once."""

import pytest

from fastmma import FastmmaError
from fastmma.cli import main
from fastmma.warmup import FAMILIES, PLAN, TYPES, families, warmup


def test_every_type_is_planned_in_exactly_one_family():
    listed = [t for family in FAMILIES for t in family]
    assert sorted(listed) == sorted(TYPES) == sorted(PLAN)
    assert len(set(listed)) == len(listed)


def test_families_keep_only_the_types_asked_largest_first():
    assert families(["bf16", "b1", "u4"]) == [("bf16",), ("u4",), ("b1",)]
    assert families() == [tuple(f) for f in FAMILIES]


@pytest.mark.parametrize("types, processes", [(["f17"], None), (["f16", "nope"], None), (["b1"], 0), (["b1"], 1.5)])
def test_bad_arguments_are_fastmma_errors_that_say_what_is_allowed(types, processes):
    with pytest.raises(FastmmaError, match="warmup: .*(allowed: f16, bf16, tf32|positive integer)"):
        warmup(types, processes=processes, progress=False)


def test_a_second_warmup_loads_every_kernel_from_the_cache(capsys):
    first = warmup(["b1"], processes=1, progress=False)
    assert first.types == ("b1",) and first.calls == len(PLAN["b1"]) * 12
    assert first.compiled + first.loaded > 0
    assert main(["warmup", "b1", "-j", "1", "--progress", "never"]) == 0
    out = capsys.readouterr().out
    # a kernel loaded from the cache needs none of the functions it was compiled with, so the
    # second run loads fewer than the first compiled where the cache started empty
    loaded = int(out.split("compiled, ")[1].split(" loaded")[0])
    assert out.startswith("warmup: b1: 0 functions compiled, ") and 1 <= loaded <= first.compiled + first.loaded
