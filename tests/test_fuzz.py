"""Hostile input: every public entry point either works or raises a fastmma error.

Bounded example counts keep CI fast; the long run (>= 100,000 examples per fuzzer) is

    FASTMMA_FUZZ_EXAMPLES=100000 python -m pytest tests/test_fuzz.py -p no:randomly -q

and the kernels' own bounds are checked by test_kernels_under_numba_boundscheck, which reruns a
sample of these fuzzers in a fresh process with NUMBA_BOUNDSCHECK=1.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fastmma
from fastmma import wgmma, wmma
from fastmma.errors import FastmmaError, OperandError
from fastmma.isa import tables

EXAMPLES = int(os.environ.get("FASTMMA_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
GOLDEN = Path(__file__).parent / "golden"


PARSED = ("wgmma", "wmma", "mma.", "ldmatrix", "stmatrix", "movmatrix")


def recorded_texts():
    texts = set()
    paths = (sorted(GOLDEN.glob("*/*.npz"))[::7] + sorted(GOLDEN.glob("probes/q1[02]_*/*.npz"))[::4]
             + sorted(GOLDEN.glob("probes/q13_*/*.npz"))
             + sorted(GOLDEN.glob("probes/q15_*/*.npz"))[::5])
    for path in paths:
        with np.load(path) as d:
            meta = json.loads(bytes(d["meta"]).decode())
        texts.update(t for t in meta.get("ptx", ()) if t.startswith(PARSED))  # Triton files keep a kernel
    return sorted(texts) + ["wgmma.fence.sync.aligned;", "wgmma.commit_group.sync.aligned;",
                            "wgmma.wait_group.sync.aligned 1;"]


VALID_TEXTS = recorded_texts()
VOCAB = (list(tables.TYPES) + list(tables.LAYOUTS) + list(tables.ROUNDINGS) + list(tables.BIT_OPS)
         + ["sync", "aligned", "satfinite", "popc", "global", "shared", "shared::cta", "m64n8k16", "m16n16k16",
            "m64n256k32", "m8n8k4", "m0n0k0", "m99999999999n1k1", "a", "b", "c", "d", "sp", "sp::ordered_metadata", "",
            "m16n8k16", "m16n8k32", "m8n8", "m16n16", "x1", "x2", "x4", "trans", "b16", "b8", "kind::f8f6f4", "rn"])
NOISE = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def _is_ours(exc: BaseException) -> bool:
    return isinstance(exc, FastmmaError)


@st.composite
def mutated_text(draw):
    text = draw(st.sampled_from(VALID_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "qualifier", "token", "truncate"]))
        pos = draw(st.integers(0, len(text)))
        if kind == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 6)):]
        elif kind == "insert":
            text = text[:pos] + draw(NOISE) + text[pos:]
        elif kind == "replace":
            text = text[:pos] + draw(st.sampled_from(list(",;{}[]%.-+!@ 0x1"))) + text[pos + 1:]
        elif kind == "qualifier":
            head, _, rest = text.partition(" ")
            parts = head.split(".")
            i = draw(st.integers(0, len(parts)))
            parts.insert(i, draw(st.sampled_from(VOCAB)))
            text = ".".join(parts) + (" " + rest if rest else "")
        elif kind == "token":
            head, _, rest = text.partition(" ")
            parts = head.split(".")
            if len(parts) > 2:
                parts.pop(draw(st.integers(2, len(parts) - 1)))
            text = ".".join(parts) + (" " + rest if rest else "")
        else:
            text = text[:pos]
    return text


@FUZZ
@given(text=mutated_text())
def test_parser_accepts_or_raises_its_own_errors(text):
    try:
        inst = fastmma.parse(text)
    except Exception as exc:  # noqa: BLE001 - the point of the test
        assert _is_ours(exc), f"{type(exc).__name__}: {exc} for {text!r}"
        assert str(exc)
    else:
        assert inst.opcode.split(".")[0] in ("wgmma", "wmma", "mma", "ldmatrix", "stmatrix", "movmatrix")


@FUZZ
@given(text=st.text(max_size=80))
def test_parser_on_arbitrary_text(text):
    try:
        fastmma.parse(text)
    except Exception as exc:  # noqa: BLE001
        assert _is_ours(exc), f"{type(exc).__name__}: {exc} for {text!r}"


WGMMA_TEXTS = [
    "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", "wgmma.mma_async.sync.aligned.m64n16k16.f16.f16.f16",
    "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32", "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2",
    "wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8.satfinite", "wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1.and.popc",
    "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {a,b,c,d}, x, y, p, -1, 1, 1, 1;",
]


@FUZZ
@given(text=st.sampled_from(WGMMA_TEXTS), a_desc=st.integers(0, 2**64 - 1), b_desc=st.integers(0, 2**64 - 1),
       size=st.integers(0, 4096), seed=st.integers(0, 2**32 - 1), use_regs=st.booleans(),
       image_address=st.sampled_from([0, 16, 1024, 7, -16]))
def test_random_descriptors_against_small_images(text, a_desc, b_desc, size, seed, use_regs, image_address):
    rng = np.random.default_rng(seed)
    inst = fastmma.parse(text)
    smem = rng.integers(0, 256, size, dtype=np.uint8)
    d = rng.integers(0, 2**32, (128, inst.d_regs), dtype=np.uint32)
    src = {"a_regs": rng.integers(0, 2**32, (128, 4), dtype=np.uint32)} if use_regs else {"a_desc": a_desc}
    try:
        out = wgmma.mma_async(inst, d, b_desc=b_desc, smem=smem, image_address=image_address, **src)
    except Exception as exc:  # noqa: BLE001
        assert _is_ours(exc), f"{type(exc).__name__}: {exc}"
    else:
        assert out.shape == d.shape and out.dtype == np.uint32


def _arrays():
    dtypes = st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.uint32,
                              np.bool_, np.complex64, np.int64, object])
    shapes = st.lists(st.integers(0, 70), min_size=0, max_size=3).map(tuple)
    return st.tuples(dtypes, shapes)


def _make(spec, rng):
    dtype, shape = spec
    if dtype is object:
        return np.empty(shape, dtype=object)
    return rng.integers(0, 3, shape).astype(dtype)


MMA_TEXTS = ["wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32",
             "wmma.mma.sync.aligned.row.col.m8n8k32.s32.s4.s4.s32", "m64n8k32.s32.s8.s8",
             "wmma.mma.xor.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32",
             "wmma.mma.sync.aligned.row.col.m8n8k4.rz.f64.f64.f64.f64"]


@FUZZ
@given(text=st.sampled_from(MMA_TEXTS), a=_arrays(), b=_arrays(), c=st.one_of(st.none(), _arrays()),
       seed=st.integers(0, 2**32 - 1), whole=st.booleans())
def test_wrong_arrays_to_mma_and_matmul(text, a, b, c, seed, whole):
    rng = np.random.default_rng(seed)
    args = (_make(a, rng), _make(b, rng), None if c is None else _make(c, rng))
    try:
        if whole:
            fastmma.matmul(*args, instruction=text)
        else:
            fastmma.mma(text if text.startswith("w") else "wgmma.mma_async." + text, *args)
    except Exception as exc:  # noqa: BLE001
        assert _is_ours(exc), f"{type(exc).__name__}: {exc}"


def _fragment_codecs():
    """``(pack, unpack, element tail, register tail)`` of each fragment packing: wmma's
    fragments of several shapes and element widths, wgmma's A and D registers."""
    from fastmma.layout.wgmma_fragments import d_regs, pack_a, pack_d, unpack_a, unpack_d
    from fastmma.layout.wmma_fragments import fragment_layout, pack_fragment, unpack_fragment

    codecs = []
    for matrix, shape, etype in [("a", "m16n16k16", "f16"), ("b", "m8n8k32", "s4"), ("a", "m8n8k128", "b1"),
                                 ("c", "m8n8k4", "f64"), ("d", "m16n16k8", "f32")]:
        lay = fragment_layout(matrix, shape, etype, "row")
        codecs.append((lambda x, lay=lay: pack_fragment(x, lay), lambda w, lay=lay: unpack_fragment(w, lay),
                       (lay.rows, lay.cols), (32, lay.words)))
    for atype, k in [("f16", 16), ("tf32", 8), ("e4m3", 32), ("b1", 256)]:
        codecs.append((lambda x, t=atype: pack_a(x, t), lambda r, t=atype: unpack_a(r, t), (64, k), (128, 4)))
    for dtype, n in [("f32", 8), ("f16", 24), ("s32", 16)]:
        codecs.append((lambda x, t=dtype: pack_d(x, t), lambda r, t=dtype, n=n: unpack_d(r, t, n), (64, n),
                       (128, d_regs(n, dtype))))
    return codecs


FRAGMENT_CODECS = _fragment_codecs()


@FUZZ
@given(codec=st.integers(0, len(FRAGMENT_CODECS) - 1), batch=st.lists(st.integers(0, 3), max_size=2).map(tuple),
       tail=st.one_of(st.none(), st.lists(st.integers(0, 300), max_size=3).map(tuple)),
       dtype=st.sampled_from([np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int32, np.float16, np.float32,
                              np.float64, np.bool_, np.complex64, object]),
       seed=st.integers(0, 2**32 - 1), packing=st.booleans())
def test_wrong_arrays_to_fragment_packing(codec, batch, tail, dtype, seed, packing):
    """Packing and unpacking of fragments and wgmma registers, on stacks (empty ones too) of
    the right matrices (``tail`` None) or of any shape, in any dtype: a stack of the input's
    leading shape, or a fastmma error."""
    pack, unpack, elements, registers = FRAGMENT_CODECS[codec]
    shape = batch + (tail if tail is not None else (elements if packing else registers))
    rng = np.random.default_rng(seed)
    x = np.empty(shape, object) if dtype is object else rng.integers(0, 2, shape).astype(dtype)
    try:
        out = pack(x) if packing else unpack(x)
    except Exception as exc:  # noqa: BLE001
        assert _is_ours(exc), f"{type(exc).__name__}: {exc}"
    else:
        assert out.shape == x.shape[:-2] + (registers if packing else elements)


WMMA_LOADS = ["wmma.load.a.sync.aligned.row.m16n16k16.f16", "wmma.load.c.sync.aligned.col.m8n8k4.f64",
              "wmma.load.b.sync.aligned.col.m8n8k128.b1", "wmma.load.a.sync.aligned.row.m8n8k32.s4"]


@FUZZ
@given(text=st.sampled_from(WMMA_LOADS), size=st.integers(0, 4096), offset=st.integers(-5000, 5000),
       stride=st.one_of(st.none(), st.integers(-10, 5000)), mem_dtype=st.sampled_from([np.uint8, np.int8, np.uint16]),
       seed=st.integers(0, 2**32 - 1))
def test_random_wmma_loads_and_stores(text, size, offset, stride, mem_dtype, seed):
    rng = np.random.default_rng(seed)
    mem = rng.integers(0, 256, size).astype(mem_dtype)
    try:
        frag = wmma.load(text, mem, offset, stride)
    except Exception as exc:  # noqa: BLE001
        assert _is_ours(exc), f"{type(exc).__name__}: {exc}"
        return
    store = text.replace("load.a", "store.d").replace("load.b", "store.d").replace("load.c", "store.d")
    store = store.replace(".f16", ".f32").replace(".b1", ".s32").replace(".s4", ".s32")
    d = rng.integers(0, 2**32, (32, fastmma.parse(store).words), dtype=np.uint32)
    before = mem.copy()
    try:
        wmma.store(store, mem, offset, d, stride)
    except Exception as exc:  # noqa: BLE001
        assert _is_ours(exc), f"{type(exc).__name__}: {exc}"
        assert np.array_equal(mem, before)  # a failed store writes nothing
    assert frag.dtype == np.uint32


def test_kernels_under_numba_boundscheck(tmp_path):
    """Rerun a sample of the fuzzers with numba's bounds checking on, in a fresh process (and
    a fresh numba cache, so every kernel is compiled with the checks)."""
    # one process and no warmup: only the kernels these fuzzers reach compile, not all of them
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "numba"), FASTMMA_WARMUP="0",
               FASTMMA_FUZZ_EXAMPLES=os.environ.get("FASTMMA_BOUNDSCHECK_EXAMPLES", "25"))
    tests = ["test_random_descriptors_against_small_images", "test_wrong_arrays_to_mma_and_matmul",
             "test_random_wmma_loads_and_stores"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", str(Path(__file__)),
           "-k", " or ".join(tests)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


_REG_POOL = [f"%r{i}" for i in range(6)] + [f"%rd{i}" for i in range(3)] + ["p0", "p1"]
_REG_OPS = st.lists(st.tuples(st.sampled_from(["declare", "write", "write_inferred", "read"]),
                              st.lists(st.sampled_from(_REG_POOL), min_size=1, max_size=5),
                              st.sampled_from([1, 32, 64]), st.integers(0, 2**32 - 1)),
                    max_size=25)


@FUZZ
@given(_REG_OPS)
def test_warpgroup_registers_against_a_dict(ops):
    """Random declares, writes and reads (names repeated, widths mixed, registers created in
    any order) on a Warpgroup's register file and on a plain dict of per-register arrays:
    the same values come back, and the same operations fail, changing nothing (a write that
    names a register twice among them)."""
    wg = fastmma.Warpgroup(64)
    model = {}  # name -> (bits, values[128])
    dtypes = {1: np.bool_, 32: np.uint32, 64: np.uint64}
    for op, names, bits, seed in ops:
        rng = np.random.default_rng(seed)
        known = {model[n][0] for n in names if n in model}
        if op == "read":
            if any(n not in model for n in names) or len(known) > 1:
                with pytest.raises(OperandError):
                    wg.read(names)
            else:
                np.testing.assert_array_equal(wg.read(names), np.stack([model[n][1] for n in names], axis=1))
            continue
        if op.startswith("write") and len(set(names)) < len(names):  # a write sets a register once (issue 76)
            with pytest.raises(OperandError, match="named twice"):
                wg.write(names, np.zeros((128, len(names)), dtypes[bits]), bits=bits)
            continue
        if op == "write_inferred" and len(known) == 1:
            bits = known.pop()  # without bits=, the values take the registers' own width
        if known - {bits}:
            with pytest.raises(OperandError):
                if op == "declare":
                    wg.declare(names, bits)
                else:
                    wg.write(names, np.zeros((128, len(names)), dtypes[bits]), bits=None if op == "write_inferred" else bits)
        elif op == "declare":
            wg.declare(names, bits)
            for n in names:
                model.setdefault(n, (bits, np.zeros(128, dtypes[bits])))
        else:
            values = (rng.integers(0, 2, (128, len(names))) > 0 if bits == 1
                      else rng.integers(0, 2**bits, (128, len(names)), dtype=dtypes[bits]))
            wg.write(names, values, bits=None if op == "write_inferred" else bits)
            for j, n in enumerate(names):
                model[n] = (bits, values[:, j].copy())
    assert wg.registers == {n: b for n, (b, _) in model.items()}
    for n, (b, v) in model.items():
        np.testing.assert_array_equal(wg.read(n), v)


# Straight-line programs for the interpreter's fuzzer: each runs as it stands (the wgmma one
# against a 32 KiB shared-memory image, descriptors of MatrixDescriptor(0, 128, 256) and
# (16384, 128, 256); the wmma one on 8 KiB of global memory).
PTX_PROGRAMS = [
    """.reg .b64 %rd<2>;
.reg .f32 %f<4>;
.reg .pred %p<2>;
.reg .b32 %r<2>;
mov.b64 %rd0, 0x1000080000;
mov.b64 %rd1, 0x1000080400;
mov.f32 %f0, 0f3F800000;
mov.f32 %f1, -2.5;
mov.f32 %f2, 0.0;
mov.f32 %f3, 1e-3;
mov.u32 %r1, %tid.x;
setp.lt.u32 %p1, %r1, 64;
@%p1 mov.f32 %f2, 3.0;
mov.b32 %r0, 1;
setp.ne.b32 %p0, %r0, 0;
wgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %rd0, %rd1, %p0, 1, -1, 0, 1;
wgmma.commit_group.sync.aligned;
wgmma.wait_group.sync.aligned 0;
""",
    """.reg .b64 %rd<2>;
.reg .b32 %r<8>, %s<8>, %c<8>, %d<8>;
mov.u64 %rd0, 0;
wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7}, [%rd0];
wmma.load.b.sync.aligned.col.m16n16k16.global.f16 {%s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7}, [%rd0];
wmma.load.c.sync.aligned.row.m16n16k16.global.f32 {%c0, %c1, %c2, %c3, %c4, %c5, %c6, %c7}, [%rd0+1024];
wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {%d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7},
    {%r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7}, {%s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7},
    {%c0, %c1, %c2, %c3, %c4, %c5, %c6, %c7};
wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd0+4096], {%d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7}, 32;
""",
]
PTX_PIECES = ["%r0", "%rd0", "%f0", "%p0", "[", "]", "{", "}", ",", ";", ".f32", ".b64", ".reg", "0x", "-1", "1e400",
              "0f7FC00000", "0d", "@", "!", "%tid.x", "+", "4096", "-99999999999999999999", ".shared", ".global",
              "<0>", "<99999999>", "mov.b32", "setp.lt.u32", "wgmma.fence.sync.aligned", "\n", "//", "/*", "*/",
              "\x00", "é", "::", ".", "%", "1.5", "0b101"]


@FUZZ
@given(program=st.sampled_from(range(len(PTX_PROGRAMS))),
       edits=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["insert", "delete", "copy"]),
                                st.sampled_from(PTX_PIECES), st.integers(1, 30), st.floats(0, 1)),
                      min_size=1, max_size=4),
       memory=st.sampled_from(["none", "smem", "global0", "global16", "global8k"]))
def test_mutated_programs_to_the_interpreter(program, edits, memory):
    """The interpreter on its own programs with text inserted, deleted or copied elsewhere:
    it runs, or raises a fastmma error (syntax, declarations, operands, bounds, hazards)."""
    from fastmma import ptx

    src = PTX_PROGRAMS[program]
    for where, edit, piece, length, other in edits:
        pos = int(where * len(src))
        if edit == "insert":
            src = src[:pos] + piece + src[pos:]
        elif edit == "delete":
            src = src[:pos] + src[pos + length:]
        else:
            q = int(other * len(src))
            src = src[:pos] + src[q:q + length] + src[pos:]
    kw = {"none": {}, "smem": {"smem": np.zeros(32768, np.uint8)}, "global0": {"global_mem": np.zeros(0, np.uint8)},
          "global16": {"global_mem": np.zeros(16, np.uint8)}, "global8k": {"global_mem": np.zeros(8192, np.uint8)}}
    try:
        ptx.run(src, **kw[memory])
    except Exception as exc:  # noqa: BLE001
        assert _is_ours(exc), f"{type(exc).__name__}: {exc} in {src!r}"


def _one_case(path):
    """A recording cut to its first case (arrays and meta as conform reads them)."""
    with np.load(path) as d:
        arrays = {k: d[k] for k in d.files}
    meta = json.loads(bytes(arrays.pop("meta")).decode())
    n = len(arrays["mode"])
    return {k: v[:1] if v.ndim and v.shape[0] == n else v for k, v in arrays.items()}, meta


RECORDINGS = [_one_case(p) for p in (
    GOLDEN / "probes" / "q9_wmma_k_loop" / "wmma.chain16.m8n8k4.row.col.f64.f64.f64.rm.crow.drow.npz",
    GOLDEN / "wgmma" / "wgmma.chain4.m64n32k16.f32.f16.f16.adesc.ta0.tb0.sa1.sb1.npz",
    sorted((GOLDEN / "wgmma").glob("wgmma.m64n8k16.f32.f16.f16.areg.*"))[0],
    sorted((GOLDEN / "wmma").glob("wmma.m16n16k16.row.col.f32.f32.f16.*"))[0])]
JUNK = [None, "x", -1, 0, 3, 10 ** 9, 2 ** 70, 1.5, True, [], [1, "a"], {}, {"chain": "x"}, "wgmma.fence.sync.aligned;"]
RECORDING_EDITS = st.lists(st.tuples(
    st.sampled_from(["drop", "dtype", "shape", "meta", "qualifier", "ptx"]), st.integers(0, 10 ** 6),
    st.sampled_from(JUNK), st.sampled_from([np.uint8, np.uint16, np.int32, np.uint32, np.uint64, np.float64,
                                            np.bool_, np.int8])),
    min_size=1, max_size=3)


@FUZZ
@given(which=st.sampled_from(range(len(RECORDINGS))), edits=RECORDING_EDITS, cut=st.sampled_from([None, 0, 30, 500]))
def test_damaged_recordings_to_conform(tmp_path_factory, which, edits, cut):
    """conform.check_file on a recording with arrays dropped, retyped or reshaped, meta keys
    and qualifiers replaced by junk, instructions removed or garbled, or the file cut short:
    it returns a result, never raises, and passes only where it replayed at least one case."""
    from fastmma import conform

    arrays, meta = RECORDINGS[which]
    arrays, meta = dict(arrays), json.loads(json.dumps(meta))
    for edit, pick, junk, dtype in edits:
        junk = json.loads(json.dumps(junk))  # a copy: a later edit may change what this one put in
        name = sorted(arrays)[pick % len(arrays)]
        if edit == "drop":
            arrays.pop(name)
        elif edit == "dtype":
            with np.errstate(invalid="ignore"):  # a float NaN or inf cast to an integer
                arrays[name] = arrays[name].astype(dtype)
        elif edit == "shape":
            x = arrays[name]
            arrays[name] = [x[:0], x[None], x.reshape(-1), np.concatenate([x, x]), x[..., :1]][pick % 5]
        elif edit == "meta":
            meta[sorted(meta)[pick % len(meta)]] = junk
        elif edit == "qualifier" and isinstance(meta.get("qualifiers"), dict) and meta["qualifiers"]:
            meta["qualifiers"][sorted(meta["qualifiers"])[pick % len(meta["qualifiers"])]] = junk
        elif edit == "ptx" and isinstance(meta.get("ptx"), list) and meta["ptx"]:
            i = pick % len(meta["ptx"])
            line = meta["ptx"][i]
            cut_line = line[: pick % 40] if isinstance(line, str) else line
            meta["ptx"][i:i + 1] = [[], [junk if isinstance(junk, str) else cut_line], [line] * 2][pick % 3]
        if not arrays:
            break
    path = tmp_path_factory.mktemp("damaged") / "recording.npz"
    np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
    if cut is not None:
        path.write_bytes(path.read_bytes()[:cut])
    result = conform.check_file(path)
    assert not result.ok or result.cases >= 1, "a file that replayed nothing passed"
