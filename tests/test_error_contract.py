"""The error contract of the public surface (issue 76), property-based.

Over the Python API, the command line (in process, through ``fastmma.cli.main``) and conform
on damaged recordings: any failure is a :class:`~fastmma.errors.FastmmaError` (on the command
line one ``fastmma: error:`` line, exit status 1 or 2) whose message is short, names the
argument at fault and quotes no long run of the input; a call that returns has written what it
says it wrote.  Examples per test: a tenth of ``FASTMMA_FUZZ_EXAMPLES`` (as tests/test_fuzz.py
reads it; 150 by default), at least 10.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fastmma
from fastmma import ldmatrix, ptx, validate, wmma
from fastmma.cli import main
from fastmma.conform import run as conform_run
from fastmma.errors import FastmmaError
from fastmma.layout.descriptor import MatrixDescriptor

EXAMPLES = max(10, int(os.environ.get("FASTMMA_FUZZ_EXAMPLES", "150")) // 10)
CONTRACT = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
LIMIT = 300  # the "about 300 characters", restated: the contract, not the code, sets it
ECHO = 100  # no message quotes this many characters of an argument in a row
GOLDEN = Path(__file__).parent / "golden"
MOVMATRIX = GOLDEN / "probes" / "q13_movmatrix" / "movmatrix.m8n8.trans.b16.npz"


def refused(call, *names, given=()):
    """Run ``call``; None if it returned, else its FastmmaError, checked to be short, to
    name one of ``names`` (the argument at fault) and to quote no long run of ``given``."""
    try:
        call()
    except FastmmaError as exc:
        message = str(exc)
        assert len(message) <= LIMIT, (len(message), message[:400])
        for text in given:
            if isinstance(text, str) and len(text) > ECHO:
                assert not any(text[i:i + ECHO] in message for i in range(0, len(text) - ECHO + 1, ECHO // 2)), \
                    message[:400]
        assert not names or any(n in message for n in names), message
        return exc
    return None


# anything a caller might pass where a number or a string is expected
HOSTILE = st.one_of(
    st.integers(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True),
    st.none(), st.booleans(), st.text(max_size=40), st.binary(max_size=8),
    st.sampled_from(["abc", "1.7", "9" * 5000, "x" * 100_000, (), [], {}, 2**5000, 1e300, 2.9]),
)


# ---------------------------------------------------------------- descriptors


@CONTRACT
@given(start=HOSTILE, lbo=HOSTILE, sbo=HOSTILE, base=HOSTILE, swizzle=HOSTILE)
def test_matrix_descriptor_fields(start, lbo, sbo, base, swizzle):
    fields = dict(start_address=start, leading_byte_offset=lbo, stride_byte_offset=sbo, base_offset=base,
                  swizzle=swizzle)
    made = []
    err = refused(lambda: made.append(MatrixDescriptor(**fields)), *fields)
    if err is None:  # accepted: every field an integer (or swizzle name) the encoding holds exactly
        value = made[0].encode()
        back = MatrixDescriptor.decode(value)
        assert back == made[0]
        assert all(type(getattr(back, f)) is int for f in fields if f != "swizzle")


@CONTRACT
@given(value=HOSTILE)
def test_matrix_descriptor_decode(value):
    out = []
    if refused(lambda: out.append(MatrixDescriptor.decode(value)), "descriptor") is None:
        assert isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64
        reserved = ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (0x7 << 49) | (0x3 << 62)) & (2**64 - 1)
        assert out[0].encode() == value & ~reserved


# ---------------------------------------------------------------- instruction text


DIGITS = st.text("0123456789", min_size=1, max_size=6000)


@CONTRACT
@given(st.one_of(st.text(max_size=200), HOSTILE,
                 st.builds("wgmma.mma_async.sync.aligned.m{}n8k16.f32.f16.f16".format, DIGITS),
                 st.builds("m64n{}k16.f32.f16.f16".format, DIGITS)))
def test_instruction_text_to_parse_and_matmul(text):
    refused(lambda: fastmma.parse(text), given=[text])
    one = np.ones((1, 1), np.float16)
    refused(lambda: fastmma.matmul(one, one, instruction=text), given=[text])


@CONTRACT
@given(shape=st.sampled_from(["m64n8k32.f32.f16.f16", "m64n16k32.f32.bf16.bf16", "m16n8k32.f32.f16.f16.f32",
                              "m64n8k32.f32.f16.f16.sp"]))
def test_matmul_given_a_sparse_shape_points_to_matmul_sp(shape):
    one = np.ones((64, 32), np.float16)
    assert refused(lambda: fastmma.matmul(one, one.T, instruction=shape), "matmul_sp") is not None


@CONTRACT
@given(rows=st.integers(2**20, 2**24), cols=st.integers(2**20, 2**24), which=st.sampled_from("AB"))
def test_an_operand_too_big_to_decode_is_refused_before_allocating(rows, cols, which):
    """A broadcast view of 2^40 elements and more: the refusal names the operand and the GiB."""
    big = np.broadcast_to(np.float16(1), (rows, cols))
    small = np.broadcast_to(np.float16(1), (cols, 8) if which == "A" else (8, rows))  # needs MiB, never made
    A, B = (big, small) if which == "A" else (small, big)
    err = refused(lambda: fastmma.matmul(A, B, instruction="m64n8k16.f32.f16.f16"), which)
    assert err is not None and "GiB" in str(err)


@CONTRACT
@given(rows=st.integers(2**20, 2**24), quarter=st.integers(2**19, 2**22), n=st.integers(2**19, 2**24),
       which=st.sampled_from(["A", "B"]))
def test_a_sparse_operand_too_big_to_decode_is_refused_before_allocating(rows, quarter, n, which):
    """matmul_sp on broadcast views of 2^39 elements and more: refused with the GiB it needs."""
    shape_a, n = ((rows, 2 * quarter), 8) if which == "A" else ((64, 2 * quarter), n)  # K = 4 * quarter
    A = np.broadcast_to(np.float16(1), shape_a)
    columns = np.broadcast_to(np.arange(2 * quarter) // 2 * 4, shape_a)  # never read
    B = np.broadcast_to(np.float16(1), (4 * quarter, n))
    err = refused(lambda: fastmma.matmul_sp(A, columns, B, instruction="m64n8k32.f32.f16.f16"), which)
    assert err is not None and "GiB" in str(err)


@pytest.mark.parametrize("api", ["matmul", "matmul_sp"])
def test_a_product_whose_working_set_does_not_fit_is_refused(monkeypatch, api):
    """Contiguous operands of at most 32 MiB fit in 64 MiB, but the product's decoding does not:
    refused with what it needs; given 1 GiB it runs."""
    A, B = np.ones((64, 8192), np.float16), np.ones((8192, 2048), np.float16)
    kept = A[:, :4096]
    columns = np.broadcast_to(np.arange(4096) // 2 * 4 + np.arange(4096) % 2, kept.shape)
    call = (lambda: fastmma.matmul(A, B, instruction="m64n8k16.f32.f16.f16")) if api == "matmul" else \
        (lambda: fastmma.matmul_sp(kept, columns, B, instruction="m64n8k32.f32.f16.f16"))
    monkeypatch.setattr(validate, "available_memory", lambda: 64 << 20)
    err = refused(call, "A, columns and B" if api == "matmul_sp" else "A and B")
    assert err is not None and "of memory for decoding a 64 x 8192 by 8192 x 2048 product" in str(err)
    assert "64.0 MiB available" in str(err)
    monkeypatch.setattr(validate, "available_memory", lambda: 1 << 30)
    assert refused(call) is None


# ---------------------------------------------------------------- fastmma.dask and the MMA-Sim drop-in


SMALL_A, SMALL_B = np.ones((4, 16), np.float16), np.ones((16, 4), np.float16)
GOOD_OPTIONS = {"instruction": "m64n8k16.f32.f16.f16", "scale_d": None, "block": None, "threads": None}
BLOCKS = st.one_of(HOSTILE, st.tuples(HOSTILE, HOSTILE), st.lists(st.integers(-2, 5), max_size=3), st.integers(1, 9))


@CONTRACT
@given(which=st.sampled_from(sorted(GOOD_OPTIONS)), value=st.one_of(HOSTILE, BLOCKS))
def test_dask_matmul_options(which, value):
    """One option hostile, the others good: refused naming it, or a graph that computes the
    numbers of fastmma.matmul."""
    pytest.importorskip("dask.array")
    import fastmma.dask

    options = dict(GOOD_OPTIONS, **{which: value})
    made = []
    err = refused(lambda: made.append(fastmma.dask.matmul(SMALL_A, SMALL_B, **options)),
                  *([] if which == "instruction" else [which]), given=[value])
    if err is None:
        local = fastmma.matmul(SMALL_A, SMALL_B, instruction=options["instruction"], scale_d=options["scale_d"])
        np.testing.assert_array_equal(made[0].compute(), local)


OPERANDS = st.sampled_from(["ok", "broadcast", "float32", "3-D", "objects", "text", "K", "list"])


def _operand(kind: str, name: str):
    """A (4 x 16) or B (16 x 4) of ``kind``: good, a broadcast view of 2^40 elements, the wrong
    dtype, a stack, objects, a string, the wrong K, or nested lists (of Python floats: no dtype)."""
    good = SMALL_A if name == "A" else SMALL_B
    return {"ok": good, "broadcast": np.broadcast_to(np.float16(1), (2**20, 2**20)),
            "float32": good.astype(np.float32), "3-D": good[None], "objects": good.astype(object),
            "text": "x" * 200, "K": good[:13] if name == "B" else good[:, :15], "list": good.tolist()}[kind]


@CONTRACT
@given(a=OPERANDS, b=OPERANDS)
def test_dask_matmul_operands(a, b):
    pytest.importorskip("dask.array")
    import fastmma.dask

    A, B = _operand(a, "A"), _operand(b, "B")
    made = []
    err = refused(lambda: made.append(fastmma.dask.matmul(A, B, instruction="m64n8k16.f32.f16.f16")), "A", "B")
    assert (err is None) == (a == b == "ok"), err
    if err is None:
        np.testing.assert_array_equal(made[0].compute(), SMALL_A.astype(np.float32) @ SMALL_B.astype(np.float32))


def test_dask_matmul_refuses_a_block_task_too_big_and_takes_a_smaller_block(monkeypatch):
    """A 2048 x 512 by 512 x 2048 GEMM: a default block task decodes about 12 MiB, a 128 one 0.6 MiB."""
    pytest.importorskip("dask.array")
    import fastmma.dask

    A, B = np.ones((2048, 512), np.float16), np.ones((512, 2048), np.float16)
    monkeypatch.setattr(validate, "available_memory", lambda: 4 << 20)
    err = refused(lambda: fastmma.dask.matmul(A, B, instruction="m64n8k16.f32.f16.f16"), "A and B")
    assert err is not None and "block task's 1024 x 512 by 512 x 1024 product" in str(err) and "block" in str(err)
    assert refused(lambda: fastmma.dask.matmul(A, B, instruction="m64n8k16.f32.f16.f16", block=128)) is None


@CONTRACT
@given(scheduler=st.one_of(HOSTILE, st.just("tcp://127.0.0.1:1")), timeout=st.one_of(HOSTILE, st.just(0.05)))
def test_dask_cluster_arguments(scheduler, timeout):
    """No scheduler listens anywhere here: every call is refused, as an argument or a ClusterError
    (a valid timeout is cut to 0.05 s, which the call waits out)."""
    pytest.importorskip("distributed")
    import fastmma.dask

    if type(timeout) in (int, float) and timeout > 0.05:
        timeout = 0.05

    assert refused(lambda: fastmma.dask.run_gemm_on_cluster(SMALL_A, SMALL_B, instruction="m64n8k16.f32.f16.f16",
                                                            scheduler=scheduler, timeout=timeout),
                   "scheduler", "timeout", given=[scheduler]) is not None


@CONTRACT
@given(cls=st.sampled_from(["WGMMA", "MMA"]), arch=st.one_of(HOSTILE, st.sampled_from(["Hopper", "Volta"])),
       shape_and_type=st.one_of(HOSTILE, st.sampled_from(["m64n8k16.f32.f16.f16", "m16n8k16.f32.f16.f16.f32"])))
def test_mmasim_construction(cls, arch, shape_and_type):
    from fastmma.compat import mmasim

    made = []
    err = refused(lambda: made.append(getattr(mmasim, cls)(arch, shape_and_type)), "architecture", "shape_and_type",
                  given=[arch, shape_and_type])
    if err is None:
        table = mmasim.HOPPER_WGMMA_SHAPE_AND_TYPE if cls == "WGMMA" else mmasim.HOPPER_MMA_SHAPE_AND_TYPE
        assert arch == "Hopper" and shape_and_type in table
    else:
        assert isinstance(err, AssertionError)  # what MMA-Sim raises, caught by callers' except AssertionError


@CONTRACT
@given(a=OPERANDS, b=OPERANDS, c=st.sampled_from(["ok", "broadcast", "float16", "shape"]), dpa=st.booleans())
def test_mmasim_operands(a, b, c, dpa):
    """WGMMA m64n8k16 on A, B (as for dask.matmul, with M = 4) and C, or its dpa on their rows
    and columns: refused naming the operand, or the product."""
    from fastmma.compat import mmasim

    op = mmasim.WGMMA("Hopper", "m64n8k16.f32.f16.f16")
    A, B = _operand(a, "A"), _operand(b, "B")
    C = {"ok": np.zeros((4, 4), np.float32), "broadcast": np.broadcast_to(np.float32(0), (2**20, 2**20)),
         "float16": np.zeros((4, 4), np.float16), "shape": np.zeros((4, 5), np.float32)}[c]
    if dpa:  # row i of A and column j of B meet at c[i, j]
        A, B = (np.asarray(A)[..., :, None, :] if a != "text" else A), (np.swapaxes(np.asarray(B), -1, -2)
                                                                      if b != "text" else B)
    made = []
    err = refused(lambda: made.append(op.dpa(A, B, C) if dpa else op(A, B, C)), "A", "B", "C", "a", "b", "c")
    accepted = a == b == c == "ok"
    assert (err is None) == accepted or dpa, err  # dpa broadcasts a stack of one against c's shape
    if err is None:
        np.testing.assert_array_equal(made[0], SMALL_A.astype(np.float32) @ SMALL_B.astype(np.float32))


# ---------------------------------------------------------------- writes into the caller's array


def _views(draw, size: int):
    """(the caller's base array, the view passed, whether a refusal is due): contiguous, strided,
    Fortran-ordered, read-only, zero-strided or of the wrong dtype."""
    kind = draw(st.sampled_from(["plain", "columns", "step", "fortran", "readonly", "broadcast", "dtype", "list"]))
    warps = draw(st.integers(1, 3))
    if kind == "columns":
        base = np.zeros((warps, size + draw(st.integers(1, 64))), np.uint8)
        return base, base[:, :size], False
    if kind == "step":
        base = np.zeros((warps, 2 * size), np.uint8)
        return base, base[:, ::2], False
    if kind == "fortran":
        base = np.zeros((warps, size), np.uint8, order="F")
        return base, base, False
    base = np.zeros((warps, size), np.uint16 if kind == "dtype" else np.uint8)
    if kind == "readonly":
        base.flags.writeable = False
    if kind == "broadcast":
        return base, np.broadcast_to(base[:1], base.shape), True
    if kind == "list":
        return base, base.tolist(), True
    return base, base, kind in ("readonly", "dtype")


def stmatrix_reference(image, addresses, regs, num):
    """Non-transposed stmatrix, from the ISA's fragment rule (9.7.14.5.16): row r of matrix i
    (8 b16 elements, 16 bytes) goes to lane 8i+r's address; element (r, c) is the c%2 half of
    register i of lane 4r + c//2."""
    out = image.copy()
    for w in range(out.shape[0]):
        for i in range(num):
            for r in range(8):
                for c in range(8):
                    half = (int(regs[w, 4 * r + c // 2, i]) >> (16 * (c % 2))) & 0xFFFF
                    at = int(addresses[w, 8 * i + r]) + 2 * c
                    out[w, at:at + 2] = (half & 0xFF, half >> 8)
    return out


@CONTRACT
@given(st.data())
def test_stmatrix_writes_the_callers_array_or_refuses_it(data):
    num = data.draw(st.sampled_from([1, 2, 4]))
    base, smem, due = _views(data.draw, 256)
    warps = base.shape[0]
    before, view_before = np.array(base, copy=True), np.array(smem, copy=True)
    rows = data.draw(st.lists(st.integers(0, 15), min_size=8 * num, max_size=8 * num))  # repeats: later lanes win
    addresses = np.zeros((warps, 32), np.int64)
    addresses[:, :8 * num] = np.array(rows) * 16
    regs = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).integers(
        0, 2**32, (warps, 32, num), dtype=np.uint32)
    err = refused(lambda: ldmatrix.stmatrix(f"stmatrix.sync.aligned.m8n8.x{num}.shared.b16", smem, addresses, regs),
                  "smem")
    assert (err is not None) == due
    if err is None:
        np.testing.assert_array_equal(smem, stmatrix_reference(view_before, addresses, regs, num))
        assert (base != before).sum() == (smem != view_before).sum()  # nothing outside the view changed
    else:
        np.testing.assert_array_equal(base, before)


@CONTRACT
@given(st.data())
def test_wmma_store_stack_writes_the_callers_array_or_refuses_it(data):
    """What a store lands in the caller's view is what the same store lands in a fresh
    contiguous image, whatever the view's strides; refused views are left as they were."""
    base, mem, due = _views(data.draw, 2048)
    before, view_before = np.array(base, copy=True), np.array(mem, copy=True)
    d = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).integers(
        0, 2**32, (base.shape[0], 32, 8), dtype=np.uint32)
    offset = data.draw(st.sampled_from([0, 32, 1024]))
    text = "wmma.store.d.sync.aligned.row.m16n16k16.f32"
    err = refused(lambda: wmma.store_stack(text, mem, offset, d), "mem")
    assert (err is not None) == due
    if err is None:
        fresh = np.array(view_before, copy=True)  # C-contiguous, and not the caller's
        wmma.store_stack(text, fresh, offset, d)
        np.testing.assert_array_equal(mem, fresh)
        assert (base != before).sum() == (mem != view_before).sum()  # nothing outside the view changed
        assert (base != before).any() or not d.any()
    else:
        np.testing.assert_array_equal(base, before)


# ---------------------------------------------------------------- registers


def assert_holds(held, value, bits: int, *, floats: bool) -> None:
    """A register of ``bits`` holding ``held`` (raw bits) was given ``value``: an integer in
    range (two's complement), a bool, or (where ``floats``) a float rounded to the width."""
    held = int(held)
    if isinstance(value, float):
        assert floats and bits in (16, 32, 64), (value, bits)
        back = np.array(held, f"u{bits // 8}").view(f"f{bits // 8}")
        with np.errstate(over="ignore"):  # a double past the width's range rounds to infinity
            assert np.isnan(back) if np.isnan(value) else back == np.array(value).astype(f"f{bits // 8}")
        return
    assert isinstance(value, int), value  # bools included
    assert -(2 ** (bits - 1)) <= value < 2**bits, (value, bits)
    assert held == int(value) % 2**bits


PTX_TYPES = ["u8", "s8", "b8", "u16", "s16", "b16", "u32", "s32", "b32", "u64", "s64", "b64"]


@CONTRACT
@given(declared=st.sampled_from([None] + PTX_TYPES), given_type=st.sampled_from([None, "x7"] + PTX_TYPES),
       value=st.one_of(st.integers(-(2**70), 2**70), st.integers(-(2**16), 2**17), HOSTILE))
def test_ptx_register_values_are_stored_as_typed_or_refused(declared, given_type, value):
    source = (f".reg .{declared} r;\n" if declared else "") + ".reg .u32 q;\nmov.u32 q, 1;"
    given_value = value if given_type is None else (given_type, value)
    out = []
    err = refused(lambda: out.append(ptx.run(source, {"r": given_value})), "r", "register", "threads")
    if err is not None:
        return
    assert given_type is None or declared in (None, given_type)  # a disagreeing type is never ignored
    t = declared or given_type
    if t is None:  # neither declared nor named: only a Python bool says its type, a predicate
        assert isinstance(value, bool) and bool(out[0].peek("r")[0]) == value
        return
    assert_holds(out[0].peek("r")[0], value, int(t[1:]), floats=t[0] == "b")


@CONTRACT
@given(names=st.lists(st.sampled_from(["r1", "r2", "r3", "%f1"]), min_size=1, max_size=4),
       value=st.one_of(st.integers(-(2**70), 2**70), HOSTILE), bits=st.sampled_from([32, 64]))
def test_warpgroup_write_sets_each_register_once_and_reads_back(names, value, bits):
    wg = fastmma.Warpgroup(64)
    err = refused(lambda: wg.write(names, value, bits=bits), "register", "values", "names")
    if err is None:
        assert len(set(names)) == len(names)
        for held in np.asarray(wg.peek(names)).reshape(-1)[::97]:
            assert_holds(held, value, bits, floats=True)
    else:
        assert not any(name in wg for name in names)


@CONTRACT
@given(prefix=st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=40), n=st.sampled_from([8, 64, 256]),
       hazard=st.sampled_from(["chain", "read", "write", "smem", "unfenced"]))
def test_hazard_messages_are_short(prefix, n, hazard):
    """Each wgmma hazard of a Warpgroup, with register names up to 41 characters: the message
    names the register or the byte and cites the ISA's rule within the limit."""
    from fastmma.warpgroup import register_names

    wg = fastmma.Warpgroup(np.zeros(1 << 16, np.uint8))
    d = register_names(f"%{prefix}", n // 2)
    wg.write(d, np.uint32(0))
    wg.write(["%da", "%db"], np.uint64(MatrixDescriptor(start_address=0, leading_byte_offset=16,
                                                          stride_byte_offset=128).encode()))
    inst = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16"
    if hazard != "unfenced":
        wg.fence()
        wg.mma_async(inst, d=d, a="%da", b_desc="%db")
    other = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f16.f16.f16"
    call = {"chain": lambda: wg.mma_async(other, d=d[:n // 4], a="%da", b_desc="%db"),
            "read": lambda: wg.read(d[-1]), "write": lambda: wg.write(d[-1], np.uint32(0)),
            "smem": lambda: wg.write_smem(0, np.ones(16, np.uint8)),
            "unfenced": lambda: wg.mma_async(inst, d=d, a="%da", b_desc="%db")}[hazard]
    assert refused(call, "9.7.15") is not None


# ---------------------------------------------------------------- the command line


def cli(argv):
    """(exit status, stderr lines) of ``fastmma argv`` run in this process."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        status = main([str(a) for a in argv])
    return status, err.getvalue().splitlines()


def check_cli(argv):
    status, lines = cli(argv)
    assert status in (0, 1, 2)
    if status == 2 or lines:
        assert len(lines) == 1 and lines[0].startswith("fastmma: error: "), lines[:5]
        assert len(lines[0]) <= LIMIT + len("fastmma: error: "), lines[0][:400]
        for text in argv:
            if len(text) > ECHO:
                assert text[:ECHO] not in lines[0] and text[-ECHO:] not in lines[0], lines[0][:400]
    return status, lines


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory):
    """Files a hostile command line names: damaged arrays, archives and PTX text."""
    d = tmp_path_factory.mktemp("hostile")
    files = {}
    (d / "latin1.ptx").write_bytes(b".reg .u32 r;\nmov.u32 r, 1; // caf\xe9\n")
    (d / "ok.ptx").write_text(".reg .u32 r;\nmov.u32 r, 1;\n")
    np.savez(d / "arrays.npz", a=np.zeros((2, 2), np.float16))
    (d / "corrupt.npz").write_bytes(b"PK\x03\x04" + bytes(range(200)))
    (d / "truncated.npy").write_bytes(_npy_bytes((64, 64), "<f2", b"\0" * 10))
    (d / "huge.npy").write_bytes(_npy_bytes((400000, 32768), "<f2", b"\0" * 64))
    (d / "objects.npy").write_bytes(_npy_bytes((2,), "|O", b"\0" * 16))
    with zipfile.ZipFile(d / "huge.npz", "w") as z:
        z.writestr("r.npy", _npy_bytes((1 << 40,), "<u4", b"\0" * 16))
    (d / "text.npy").write_text("not numpy")
    for p in d.iterdir():
        files[p.name] = str(p)
    files["missing"] = str(d / "missing.npy")
    return files


def _npy_bytes(shape, descr: str, data: bytes) -> bytes:
    """A .npy file whose header claims ``shape`` of ``descr``, followed by ``data``."""
    header = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode()
    header += b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


TOKENS = st.one_of(
    st.sampled_from(["--size", "--m", "--k", "--seed", "--threads", "--max-steps", "--show", "--reg", "--bogus",
                     "-i", "--instruction", "--sparse", "--with-c", "--no-check", "--progress", "--block"]),
    st.sampled_from(["0", "-1", "1e3", "9" * 5000, "x" * 5000, "r=1", "r:u16=70000", "r:x9=1", "r=" + "9" * 5000,
                     "m64n8k32.f32.f16.f16", "wgmma.mma_async.sync.aligned.m" + "9" * 5000 + "n8k16.f32.f16.f16",
                     "\udcff", "always"]),
    st.text(max_size=20),
)


@CONTRACT
@given(data=st.data())
def test_command_line_errors_are_one_line(hostile_files, data):
    files = st.sampled_from(sorted(hostile_files.values()))
    command = data.draw(st.sampled_from(["gemm", "ptx", "explain", "conform", "info", "nothing"]))
    if command == "gemm":  # operand files always given and always damaged: no GEMM runs
        argv = ["gemm", "--a", data.draw(files), "--b", hostile_files["huge.npy"]]
    elif command == "ptx":
        argv = ["ptx", data.draw(files), "--regs", data.draw(files)]
    elif command == "explain":
        argv = ["explain", data.draw(TOKENS)]
    elif command in ("conform", "info"):
        argv = [command, data.draw(files)] if command == "conform" else ["info", "--recordings", data.draw(files)]
    else:
        argv = []
    argv += data.draw(st.lists(TOKENS, max_size=4))
    if command == "gemm" and "--sparse" not in argv:
        argv += ["--size", "0"]
    check_cli([a for a in argv if a not in ("-h", "--help")])


@pytest.mark.parametrize("name,needle", [
    ("latin1.ptx", "UTF-8"), ("arrays.npz", "--a"), ("truncated.npy", "--a"), ("huge.npy", "--a"),
    ("objects.npy", "--a"), ("text.npy", "--a"), ("missing", "--a")])
def test_gemm_and_ptx_name_the_damaged_file(hostile_files, name, needle):
    argv = ["ptx", hostile_files[name]] if name.endswith(".ptx") else \
        ["gemm", "--a", hostile_files[name], "--b", hostile_files["huge.npy"]]
    status, lines = check_cli(argv)
    assert status == 2 and needle in lines[0]


@pytest.mark.parametrize("regs", ["corrupt.npz", "huge.npz"])
def test_ptx_regs_archive_damage_is_one_line(hostile_files, regs):
    status, lines = check_cli(["ptx", hostile_files["ok.ptx"], "--regs", hostile_files[regs]])
    assert status == 2 and "--regs" in lines[0] or "array r" in lines[0]


@pytest.mark.parametrize("argv", [["conform", "9" * 5000], ["info", "--recordings", "d" * 300 + "/" + "x" * 300],
                                  ["gemm", "--out", "d" * 300 + "/D.npy", "--size", "1"]])
def test_paths_too_long_to_look_up_are_one_line(argv):
    status, lines = check_cli(argv)
    assert status == 2 and "too long" in lines[0] or "does not exist" in lines[0]


def test_argparse_errors_are_one_line():
    for argv in ([], ["gemm", "--size", "x"], ["frobnicate"], ["gemm", "--progress", "sometimes"]):
        status, lines = check_cli(argv)
        assert status == 2 and len(lines) == 1


# ---------------------------------------------------------------- conform on damaged recordings


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def _write(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, raw in members.items():
            z.writestr(name, raw)


def _header_claim(raw: bytes, shape) -> bytes:
    """``raw`` (a .npy member) with its header claiming ``shape`` instead."""
    f = io.BytesIO(raw)
    np.lib.format.read_magic(f)
    dtype = np.lib.format.read_array_header_1_0(f)[2]
    return _npy_bytes(shape, dtype.str, raw[f.tell():])


DAMAGE = st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(["a_regs", "d_regs", "mode"]),
              st.sampled_from([(1 << 40,), (400000, 32768, 2), (16, 32, 1 << 30), (0,), (17, 32, 1)])),
    st.tuples(st.just("shape"), st.just("a_regs"), st.sampled_from([(16, 32, 2), (16, 16, 1), (16, 32), (15, 32, 1)])),
    st.tuples(st.just("drop"), st.sampled_from(["a_regs", "d_regs", "mode", "meta"]), st.none()),
    st.tuples(st.just("garbage"), st.sampled_from(["a_regs", "d_regs", "meta"]), st.binary(max_size=64)),
    st.tuples(st.just("meta"), st.just("meta"), st.sampled_from(
        ["[" * 50000 + "]" * 50000, '{"format_version": 1, "family": "movmatrix", "qualifiers": ' + "[" * 40000
         + "]" * 40000 + "}", "\udcff", '{"format_version": 1}', "null", '{"format_version": 1, "family": '
         '"movmatrix", "qualifiers": {}, "ptx": ["' + "x" * 100000 + '"]}'])),
    st.tuples(st.just("truncate"), st.none(), st.integers(0, 5000)),
)


@CONTRACT
@given(damage=DAMAGE)
def test_conform_counts_a_damaged_recording_as_failed_and_goes_on(tmp_path_factory, damage):
    d = tmp_path_factory.mktemp("conform")
    shutil.copy(MOVMATRIX, d / "b_intact.npz")
    members = _members(MOVMATRIX)
    how, key, arg = damage
    target = d / "a_damaged.npz"
    if how == "truncate":
        target.write_bytes(MOVMATRIX.read_bytes()[:arg])
    else:
        member = f"{key}.npy"
        if how == "claim":
            members[member] = _header_claim(members[member], arg)
        elif how == "shape":  # a well-formed array of the wrong shape
            buffer = io.BytesIO()
            np.save(buffer, np.zeros(arg, np.uint32))
            members[member] = buffer.getvalue()
        elif how == "drop":
            del members[member]
        elif how == "garbage":
            members[member] = bytes(arg)
        else:
            members[member] = _npy_bytes((len(arg.encode("utf-8", "surrogateescape")),), "|u1",
                                         arg.encode("utf-8", "surrogateescape"))
        _write(target, members)
    out = io.StringIO()
    passed, failed = conform_run([d], out=out)
    lines = out.getvalue().splitlines()
    assert lines[-1] == f"{passed} passed, {failed} failed"
    assert any(line.startswith("pass b_intact.npz: 16 cases") for line in lines)
    damaged = [line for line in lines if "a_damaged.npz" in line]
    assert len(damaged) == 1 and damaged[0].startswith("FAIL") and failed >= 1, damaged
    assert len(damaged[0]) <= 2 * LIMIT
    if how in ("claim", "shape", "drop", "garbage"):
        assert repr(key) in damaged[0] or f"array {key}" in damaged[0], damaged[0]


@pytest.mark.parametrize("stem", ["mma", "wgmma", "wmma", "mma.sp", "x", "wgmma_sp.m64"])
def test_info_on_recordings_of_any_file_name(tmp_path, stem):
    """A file name outside the recorder's scheme is a family of its own, not an IndexError."""
    shutil.copy(MOVMATRIX, tmp_path / f"{stem}.npz")
    status, lines = check_cli(["info", "--recordings", tmp_path])
    assert status == 0 and not lines


def test_info_and_conform_on_deeply_nested_meta(tmp_path):
    members = _members(MOVMATRIX)
    nested = ("[" * 100_000 + "]" * 100_000).encode()
    members["meta.npy"] = _npy_bytes((len(nested),), "|u1", nested)
    _write(tmp_path / "movmatrix.m8n8.trans.b16.npz", members)
    assert check_cli(["info", "--recordings", tmp_path]) == (0, [])
    status, lines = check_cli(["conform", tmp_path])
    assert status == 1 and not lines
