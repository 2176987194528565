"""fastmma.ptx control flow and integer arithmetic: labels, ``bra``, ``add``, ``sub``, ``mul``,
``mad``, shifts and logic.

The loops are checked against the H100: the recorded GEMM k-loops (tests/golden/probes q8:
16 wgmma steps whose descriptors advance by 2 and, every fourth step, by 512; q9: 16 wmma
steps along K), each written as a PTX loop that steps its descriptors or addresses with
``add`` and branches back with ``bra``, must leave the recorded bits.  ``add`` and ``sub``
and the other integer instructions are checked against Python's integers.
"""

import zlib

import numpy as np
import pytest

from conftest import GOLDEN
from fastmma import ptx
from fastmma.conform import load_recording, wmma_step_offset
from fastmma.errors import (
    ExecutionLimitError,
    InvalidInstructionError,
    OperandError,
    PTXSyntaxError,
    UnsupportedInstructionError,
)
from fastmma.isa import parse
from test_ptx import COMPLETE, _declarations, columns, fragment, gather

Q8 = sorted((GOLDEN / "probes" / "q8_gemm_k_loop").glob("*.npz"))
Q9 = sorted((GOLDEN / "probes" / "q9_wmma_k_loop").glob("*.npz"))


def test_the_k_loop_recordings_are_found():
    assert len(Q8) >= 9 and len(Q9) >= 10


def _wgmma_loop(first: str, setp: str) -> str:
    """The recorded chain as two nested loops: 4 steps of +2 on both descriptors (32 bytes
    along K inside a swizzle atom), then +512 on their bases; scale-d is the recorded
    predicate on the first step and true after it."""
    inst = parse(first)
    a, b = inst.operands[1].name, inst.operands[2].name
    step = first.replace(f"}}, {a}, {b}, ", "}, da, db, ", 1)
    assert step != first
    return "\n".join(_declarations([first, setp]) + [
        ".reg .pred p, more;", ".reg .b64 da, db;", ".reg .s32 i, j;",
        setp,
        "wgmma.fence.sync.aligned;",
        "mov.s32 i, 0;",
        "OUTER:",
        f"mov.b64 da, {a};", f"mov.b64 db, {b};",
        "mov.s32 j, 0;",
        "INNER:",
        step,
        "setp.ne.b32 p, 1, 0;",
        "add.s64 da, da, 2;", "add.s64 db, db, 2;",
        "add.s32 j, j, 1;", "setp.lt.s32 more, j, 4;", "@more bra INNER;",
        f"add.s64 {a}, {a}, 512;", f"add.s64 {b}, {b}, 512;",
        "add.s32 i, i, 1;", "setp.lt.s32 more, i, 4;", "@more bra OUTER;",
    ]) + "\n" + COMPLETE


@pytest.mark.parametrize("path", Q8, ids=lambda p: p.stem)
def test_a_recorded_wgmma_k_loop_runs_as_a_ptx_loop(path):
    arrays, meta = load_recording(path)
    first = next(t for t in meta["ptx"] if t.startswith("wgmma"))
    setp = next(t for t in meta["ptx"] if t.startswith("setp"))
    inst = parse(first)
    source = _wgmma_loop(first, setp)
    n = len(arrays["mode"])
    a_desc, b_desc = arrays["a_desc"].reshape(n, -1), arrays["b_desc"].reshape(n, -1)
    d = list(inst.operands[0].regs)
    for i in range(n):
        regs = {setp.split(",")[1].strip(): np.uint32(arrays["scale_d"][i]),
                inst.operands[1].name: np.uint64(a_desc[i, 0]), inst.operands[2].name: np.uint64(b_desc[i, 0])}
        regs.update(columns(d, arrays["c_regs"][i]))
        m = ptx.run(source, regs, smem=arrays["smem"][i])
        np.testing.assert_array_equal(gather(m, d), arrays["d_regs"][i], err_msg=f"case {i}")


def _wmma_loop(meta: dict, steps: tuple[int, int], chain: int) -> str:
    """Load C and copy it into D; then ``chain`` times: load A and B, D += A B, step both
    addresses along K; store D."""
    load_a, load_b, load_c, mma, store = (parse(t) for t in meta["ptx"])
    d, a, b, c = (list(op.regs) for op in mma.operands)
    move = "mov.f64" if d[0].startswith("%fd") else "mov.b32"
    opcode = meta["ptx"][3].split(" ")[0]
    store_op = meta["ptx"][4].split(" ")[0]
    body = [
        meta["ptx"][2],
        *(f"{move} {x}, {y};" for x, y in zip(d, c)),
        "mov.s32 k, 0;",
        "LOOP:",
        meta["ptx"][0], meta["ptx"][1],
        f"{opcode} {{{', '.join(d)}}}, {{{', '.join(a)}}}, {{{', '.join(b)}}}, {{{', '.join(d)}}};",
        f"add.u64 {load_a.operands[1].name}, {load_a.operands[1].name}, {steps[0]};",
        f"add.u64 {load_b.operands[1].name}, {load_b.operands[1].name}, {steps[1]};",
        "add.s32 k, k, 1;", f"setp.lt.s32 more, k, {chain};", "@more bra LOOP;",
        f"{store_op} [{store.operands[0].name}], {{{', '.join(d)}}}, {store.operands[2].name};",
    ]
    return "\n".join(_declarations(meta["ptx"]) + [".reg .s32 k;", ".reg .pred more;"] + body)


@pytest.mark.parametrize("path", Q9, ids=lambda p: p.stem)
def test_a_recorded_wmma_k_loop_runs_as_a_ptx_loop(path):
    arrays, meta = load_recording(path)
    i = zlib.crc32(path.stem.encode()) % len(arrays["a_mem"])
    load_a, load_b, load_c, mma, store = (parse(t) for t in meta["ptx"])
    lda, ldb = int(arrays["lda"][i]), int(arrays["ldb"][i])
    source = _wmma_loop(meta, (wmma_step_offset(load_a, 1, lda), wmma_step_offset(load_b, 1, ldb)),
                        meta["qualifiers"]["chain"])
    region = max(arrays[f"{key}_mem"].shape[1] for key in "abcd")
    mem = np.zeros(4 * region, np.uint8)
    regs = {}
    for k, (key, inst, addr) in enumerate((("a", load_a, 1), ("b", load_b, 1), ("c", load_c, 1), ("d", store, 0))):
        data = arrays[f"{key}_mem"][i]
        mem[region * k:region * k + data.size] = data if key != "d" else 0xA5
        regs[inst.operands[addr].name] = np.uint64(region * k)
        regs[inst.operands[2].name] = np.int32(arrays[f"ld{key}"][i])
    m = ptx.run(source, regs, global_mem=mem)
    np.testing.assert_array_equal(fragment(m, list(mma.operands[0].regs)), arrays["d_frag"][i])
    d_mem = arrays["d_mem"][i]
    np.testing.assert_array_equal(m.global_mem[3 * region:3 * region + d_mem.size], d_mem)


# ---------------------------------------------------------------------- add, sub


@pytest.mark.parametrize("typ", ["u16", "u32", "u64", "s16", "s32", "s64"])
@pytest.mark.parametrize("op", ["add", "sub"])
def test_add_and_sub_wrap_modulo_their_width(op, typ):
    bits = int(typ[1:])
    rng = np.random.default_rng(bits + len(op))
    storage = np.dtype(f"uint{bits}")
    extremes = np.array([0, 1, 2**(bits - 1) - 1, 2**(bits - 1), 2**bits - 1], dtype=np.uint64)
    a = np.concatenate([extremes.repeat(5), rng.integers(0, 2**bits, 7, dtype=np.uint64)]).astype(storage)
    b = np.concatenate([np.tile(extremes, 5), rng.integers(0, 2**bits, 7, dtype=np.uint64)]).astype(storage)
    m = ptx.run(f".reg .{typ} d, a, b;\n{op}.{typ} d, a, b;", {"a": a, "b": b})
    sign = 1 if op == "add" else -1
    expected = [(int(x) + sign * int(y)) % 2**bits for x, y in zip(a, b)]
    got = m["d"]
    assert got.dtype.itemsize * 8 == bits and [int(v) for v in got.view(storage)] == expected


@pytest.mark.parametrize("op", ["add", "sub"])
def test_sat_s32_clamps_to_the_int32_range(op):
    values = [0, 1, -1, 2**31 - 1, -2**31, 2**30, -2**30 - 7]
    a = np.repeat(np.array(values, np.int64), len(values)).tolist() + [0] * 15  # 64 threads
    a, b = np.array(a), np.array(np.tile(values, len(values)).tolist() + [0] * 15)
    m = ptx.run(f".reg .s32 d, a, b;\n{op}.sat.s32 d, a, b;",
                {"a": a.astype(np.int32).view(np.uint32), "b": b.astype(np.int32).view(np.uint32)}, threads=64)
    exact = a + b if op == "add" else a - b
    got = m.peek("d")[:a.size].view(np.int32).astype(np.int64)
    assert got.tolist() == np.clip(exact, -2**31, 2**31 - 1).tolist()


def test_add_with_literals_and_a_guard_writes_only_the_threads_it_guards():
    m = ptx.run("""
        .reg .u32 lane, x;
        .reg .pred odd;
        mov.u32 lane, %laneid;
        mov.u32 x, 1000;
        setp.ne.u32 odd, 0, 0;
        setp.hi.u32 odd, lane, 15;
        @odd add.u32 x, lane, 0xFFFFFFF0;
        @!odd sub.u32 x, x, lane;
    """)
    lane = np.arange(32)
    expected = np.where(lane > 15, lane - 16, 1000 - lane)
    assert m["x"].tolist() == expected.tolist()


def _random_operands(rng, bits: int, count: int = 64) -> np.ndarray:
    """Bit patterns of ``bits`` bits: the extremes, then random ones."""
    extremes = [0, 1, 2, 2**(bits - 1) - 1, 2**(bits - 1), 2**bits - 1, 2**bits - 2]
    return np.array(extremes + [int(x) for x in rng.integers(0, 2**bits, count - len(extremes), dtype=np.uint64)],
                    dtype=np.uint64)


def _signed(bits: int, x: int, typ: str) -> int:
    return x - (1 << bits) if typ[0] == "s" and x >> (bits - 1) else x


@pytest.mark.parametrize("typ,mode", [(t, m) for t in ("u16", "s16", "u32", "s32", "u64", "s64")
                                      for m in ("lo", "hi", "wide") if not (m == "wide" and t[1:] == "64")])
@pytest.mark.parametrize("op", ["mul", "mad"])
def test_mul_and_mad_give_the_exact_products_bits(op, typ, mode):
    bits = int(typ[1:])
    rng = np.random.default_rng(bits * 7 + len(mode) + len(op))
    a, b = _random_operands(rng, bits), rng.permutation(_random_operands(rng, bits))
    dbits = 2 * bits if mode == "wide" else bits
    c = _random_operands(rng, dbits)
    dtyp = f"{typ[0]}{dbits}"
    storage = lambda x, n: x.astype(f"uint{n}")  # noqa: E731
    regs = {"a": storage(a, bits), "b": storage(b, bits), "c": storage(c, dbits)}
    operands = "d, a, b, c" if op == "mad" else "d, a, b"
    m = ptx.run(f".reg .{typ} a, b;\n.reg .{dtyp} c, d;\n{op}.{mode}.{typ} {operands};", regs, threads=64)
    expected = []
    for x, y, z in zip(a, b, c):
        p = _signed(bits, int(x), typ) * _signed(bits, int(y), typ)
        p = p >> bits if mode == "hi" else p
        p = p + _signed(dbits, int(z), dtyp) if op == "mad" else p
        expected.append(p % 2**dbits)
    assert [int(v) for v in m["d"].view(f"uint{dbits}")[:len(a)]] == expected


@pytest.mark.parametrize("typ", ["b16", "b32", "b64", "u32", "s16", "s32", "s64"])
def test_shifts_by_every_amount(typ):
    bits = int(typ[1:])
    rng = np.random.default_rng(bits)
    amounts = np.array(list(range(bits + 2)) + [2**31, 2**32 - 1] + [0] * (128 - bits - 4), np.uint32)
    a = rng.permutation(np.resize(_random_operands(rng, bits), 128)).astype(f"uint{bits}")
    shl = typ.startswith("b")
    m = ptx.run(f".reg .{typ} a, d, e;\n.reg .u32 s;\nshr.{typ} d, a, s;" + (f"\nshl.{typ} e, a, s;" if shl else ""),
                {"a": a, "s": amounts})
    for i, (x, s) in enumerate(zip(a, amounts)):
        assert int(m["d"].view(f"uint{bits}")[i]) == (_signed(bits, int(x), typ) >> int(s)) % 2**bits, (x, s)
        if shl:
            assert int(m["e"].view(f"uint{bits}")[i]) == (int(x) << min(int(s), bits)) % 2**bits, (x, s)


@pytest.mark.parametrize("typ", ["pred", "b16", "b32", "b64"])
def test_logic(typ):
    bits = 1 if typ == "pred" else int(typ[1:])
    rng = np.random.default_rng(bits + 1)
    a = rng.integers(0, 2**bits, 32, dtype=np.uint64)
    b = rng.integers(0, 2**bits, 32, dtype=np.uint64)
    cast = (lambda x: x.astype(bool)) if typ == "pred" else (lambda x: x.astype(f"uint{bits}"))  # noqa: E731
    m = ptx.run(f".reg .{typ} a, b, x, y, z, w;\nand.{typ} x, a, b;\nor.{typ} y, a, b;\nxor.{typ} z, a, b;\n"
                f"not.{typ} w, a;", {"a": cast(a), "b": cast(b)})
    for name, rule in (("x", lambda p, q: p & q), ("y", lambda p, q: p | q), ("z", lambda p, q: p ^ q),
                       ("w", lambda p, q: ~p)):
        got = [int(v) for v in m.peek(name).astype(np.uint64)]
        assert got == [rule(int(p), int(q)) % 2**bits for p, q in zip(a, b)], name


def test_a_thread_computes_its_own_address():
    m = ptx.run("""
        .reg .u32 tid, off;
        .reg .u64 addr, base;
        mov.u32 tid, %tid.x;
        mov.u64 base, 4096;
        mul.lo.u32 off, tid, 24;
        mad.wide.u32 addr, tid, 24, base;
        shr.u32 off, off, 3;
    """)
    assert m["addr"].tolist() == [4096 + 24 * t for t in range(32)]
    assert m["off"].tolist() == [3 * t for t in range(32)]


# ---------------------------------------------------------------------- labels and bra


def test_a_forward_branch_skips_and_a_backward_one_loops():
    m = ptx.run("""
        .reg .u32 n, skipped;
        .reg .pred p;
        mov.u32 n, 0;
        mov.u32 skipped, 0;
    AGAIN:
        add.u32 n, n, 3;
        setp.lt.u32 p, n, 30;
        @p bra AGAIN;
        bra.uni DONE;
        mov.u32 skipped, 1;
    DONE:
    """)
    assert m["n"].tolist() == [30] * 32 and m["skipped"].tolist() == [0] * 32


@pytest.mark.parametrize("source,error,line,column,needle", [
    ("bra NOWHERE;", PTXSyntaxError, 1, 5, "the branch target NOWHERE is not a label"),
    ("L: bra L;\nL: bra L;", PTXSyntaxError, 2, 1, r"the label L is already declared \(line 1, column 1\)"),
    (".reg .u32 x;\nbra x + 4;", InvalidInstructionError, 2, 5, "a branch target is a label, got x\\+4"),
    (".reg .b64 x;\nbra [x];", InvalidInstructionError, 2, 5, r"a branch target is a label, got \[x\]"),
    ("L:\nbra.div L;", InvalidInstructionError, 2, 1, "expected bra or bra.uni"),
    ("a.b: bra a.b;", PTXSyntaxError, 1, 1, "a label is an identifier"),
    (".reg .f32 x;\nadd.f32 x, x, x;", UnsupportedInstructionError, 2, 1, "integer add only"),
    (".reg .u32 x;\nadd.cc.u32 x, x, x;", UnsupportedInstructionError, 2, 1, "no .cc"),
    (".reg .u32 x;\nadd.sat.u32 x, x, 1;", InvalidInstructionError, 2, 1, ".sat with .s32 only"),
    (".reg .u32 x;\nadd.u64 x, x, 1;", InvalidInstructionError, 2, 9, "does not agree with .u64"),
    (".reg .u32 x;\nsub.u32 x, x;", InvalidInstructionError, 2, 1, r"takes 3 operands \(d, a, b\)"),
    (".reg .u32 x;\nmul.u32 x, x, x;", InvalidInstructionError, 2, 1, r"expected mul.mode.type with .mode one of"),
    (".reg .u64 x;\nmul.wide.u64 x, x, x;", InvalidInstructionError, 2, 1, ".wide with 16- and 32-bit types"),
    (".reg .u32 x;\n.reg .u32 w;\nmul.wide.u32 w, x, x;", InvalidInstructionError, 3, 14, "does not agree with .u64"),
    (".reg .u32 x;\nand.u32 x, x, x;", InvalidInstructionError, 2, 1, "must be one of .pred, .b16, .b32, .b64"),
    (".reg .b32 x;\n.reg .u64 s;\nshl.b32 x, x, s;", InvalidInstructionError, 3, 15, "does not agree with .u32"),
    (".reg .u32 x;\nmad.lo.u32 x, x, x;", InvalidInstructionError, 2, 1, r"takes 4 operands \(d, a, b, c\)"),
])
def test_bad_branches_and_arithmetic_are_refused_before_anything_runs(source, error, line, column, needle):
    with pytest.raises(error, match=needle) as info:
        ptx.run(source)
    assert (info.value.line, info.value.column) == (line, column)


def test_a_divergent_branch_is_refused_where_it_runs():
    source = ".reg .pred p;\nsetp.lt.u32 p, %laneid, 5;\n@p bra SKIP;\nSKIP:\n"
    with pytest.raises(UnsupportedInstructionError, match="a divergent branch: 5 of 32 threads") as info:
        ptx.run(source)
    assert (info.value.line, info.value.column) == (3, 4) and info.value.machine is not None
    with pytest.raises(UnsupportedInstructionError, match="divergent"):
        ptx.run(source, strict=False)  # lockstep cannot model it in either mode


def test_a_loop_that_does_not_end_stops_at_max_steps():
    with pytest.raises(ExecutionLimitError, match="ran 500 statements") as info:
        ptx.run(".reg .u32 x;\nSPIN: add.u32 x, x, 1;\nbra SPIN;", max_steps=500)
    assert info.value.line == 2 and info.value.machine["x"][0] == 250
    m = ptx.run(".reg .u32 x;\nmov.u32 x, 0;\nL: add.u32 x, x, 1;\n.reg .pred p;\nsetp.lt.u32 p, x, 10;\n"
                "@p bra L;", max_steps=31)  # 1 + 10 * 3 statements: just enough
    assert m["x"][0] == 10
    for bad in (0, -1, 2.5, True, None):
        with pytest.raises(OperandError, match="max_steps must be a positive integer"):
            ptx.run("mov.u32 %r1, 0;", max_steps=bad)
