"""Replay of hardware recordings (golden-vector format v1) through fastmma's public API.

Every recorded case is executed as a user would: wmma cases through
:func:`fastmma.wmma.load` / :func:`~fastmma.wmma.mma` / :func:`~fastmma.wmma.store` (each
fragment and the stored memory compared; a chain's k-steps in turn, each D the next C),
wgmma cases through :func:`fastmma.wgmma.mma_async` (a chain's instructions in sequence,
scale-d on the first), wgmma.mma_async.sp cases through :func:`fastmma.wgmma.mma_async_sp_stack`
(a file's cases in one call a step), mma cases through :func:`fastmma.mma_sync.mma` on the
recorded registers, mma.sp cases through :func:`fastmma.mma_sync.mma_sp` on the recorded
registers and metadata (a chain's steps in turn, each D the next C), ldmatrix and stmatrix
cases through :mod:`fastmma.ldmatrix` on the recorded image and addresses, movmatrix cases
through :func:`fastmma.ldmatrix.movmatrix` on the recorded registers.
Every output bit is compared; a case passes only if all of them match.  The format is
described in tests/golden/FORMAT.md.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import ldmatrix, mma_sync, wgmma, wmma
from .errors import ConformanceError, FastmmaError
from .formats import get_format
from .validate import excerpt, read_npz, shorten
from .isa import (Ldmatrix, MmaSp, MmaSync, Movmatrix, Stmatrix, WgmmaMmaAsync, WgmmaMmaAsyncSp, WmmaLoad, WmmaMma,
                  WmmaStore, parse)

FAMILIES = ("wmma", "wgmma", "wgmma_sp", "mma", "mma_sp", "ldmatrix", "stmatrix", "movmatrix")
WMMA_PREFILL = 0xA5

#: The arrays each family's files hold (FORMAT.md): name -> (dtype kinds, dimensions with
#: the case axis first; a chain's descriptors have a second axis).  ``a_regs`` is needed
#: only where an instruction takes A from registers.
ARRAYS = {
    "wmma": {"a_mem": ("u", 2), "b_mem": ("u", 2), "c_mem": ("u", 2), "d_mem": ("u", 2),
             "lda": ("iu", 1), "ldb": ("iu", 1), "ldc": ("iu", 1), "ldd": ("iu", 1),
             "a_frag": ("u", 3), "b_frag": ("u", 3), "c_frag": ("u", 3), "d_frag": ("u", 3),
             "mode": ("iub", 1)},
    "wgmma": {"smem": ("u", 2), "a_desc": ("iu", (1, 2)), "b_desc": ("iu", (1, 2)), "c_regs": ("u", 3),
              "d_regs": ("u", 3), "scale_d": ("iub", 1), "mode": ("iub", 1), "a_regs": ("u", 3)},
    "wgmma_sp": {"smem": ("u", 2), "a_desc": ("iu", (1, 2)), "b_desc": ("iu", (1, 2)), "c_regs": ("u", 3),
                 "e_regs": ("u", (3, 4)), "d_regs": ("u", 3), "scale_d": ("iub", 1), "mode": ("iub", 1),
                 "a_regs": ("u", 3)},
    "mma": {"a_regs": ("u", (3, 4)), "b_regs": ("u", (3, 4)), "c_regs": ("u", 3), "d_regs": ("u", 3),
            "mode": ("iub", 1)},
    "mma_sp": {"a_regs": ("u", (3, 4)), "b_regs": ("u", (3, 4)), "c_regs": ("u", 3), "e_regs": ("u", (3, 4)),
               "d_regs": ("u", 3), "mode": ("iub", 1)},
    "ldmatrix": {"smem": ("u", 2), "addresses": ("iu", 2), "regs": ("u", 3), "mode": ("iub", 1)},
    "stmatrix": {"smem": ("u", 2), "addresses": ("iu", 2), "regs": ("u", 3), "smem_after": ("u", 2),
                 "mode": ("iub", 1)},
    "movmatrix": {"a_regs": ("u", 3), "d_regs": ("u", 3), "mode": ("iub", 1)},
}
#: The register arrays that hold one register file a step in a chain's files (FORMAT.md):
#: ``(cases, chain, threads, words)``, where a single instruction's hold ``(cases, threads, words)``
STEP_REGISTERS = {"mma": ("a_regs", "b_regs"), "mma_sp": ("a_regs", "b_regs", "e_regs"), "wgmma_sp": ("e_regs",)}
#: meta.ptx of a wmma file, line by line: the instruction's class, its name in the ISA and
#: the matrix it loads
WMMA_PTX = [(WmmaLoad, "wmma.load.a", "a"), (WmmaLoad, "wmma.load.b", "b"), (WmmaLoad, "wmma.load.c", "c"),
            (WmmaMma, "wmma.mma", None), (WmmaStore, "wmma.store.d", None)]


@dataclass
class Mismatch:
    """One output element of a recorded case whose bits differ from fastmma's: the case, which
    output, the element's index, and the recorded and computed bits."""
    case: int
    what: str
    index: tuple
    expected: int
    got: int

    def __str__(self) -> str:
        width = max(len(f"{self.expected:x}"), len(f"{self.got:x}"))
        idx = ", ".join(map(str, self.index))
        return (f"case {self.case}: {self.what}[{idx}] expected 0x{self.expected:0{width}x} "
                f"got 0x{self.got:0{width}x}")


@dataclass
class FileResult:
    """What replaying one recording file gave: its cases, those that failed, the first
    mismatches, and ``error`` where the file could not be replayed at all."""
    path: Path
    family: str
    cases: int = 0
    failed_cases: set = field(default_factory=set)
    mismatches: list = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None

    @property
    def passed(self) -> int:
        """Cases whose every output bit matched."""
        return self.cases - len(self.failed_cases)

    @property
    def ok(self) -> bool:
        """Whether the file was replayed and every case matched."""
        return self.error is None and not self.failed_cases


def load_recording(path) -> tuple[dict, dict]:
    """``(arrays, meta)`` of one recording file."""
    arrays = read_npz(path, f"{Path(path).name}: not a golden-vector file", ConformanceError)
    if "meta" not in arrays:
        raise ConformanceError(f"{Path(path).name}: array 'meta' is missing (FORMAT.md: the JSON meta as uint8)")
    try:
        meta = json.loads(bytes(arrays.pop("meta")).decode())
    except (ValueError, TypeError, RecursionError) as exc:
        raise ConformanceError(f"{Path(path).name}: array 'meta' is not JSON text ({type(exc).__name__}: "
                               f"{excerpt(str(exc), 80)})") from None
    if not isinstance(meta, dict):
        raise ConformanceError(f"{path}: meta must be a JSON object, got {type(meta).__name__}")
    if meta.get("format_version") != 1:
        raise ConformanceError(f"{path}: format_version {meta.get('format_version')!r}, expected 1")
    return arrays, meta


def chain_length(meta: dict) -> int:
    """``qualifiers.chain`` (instructions per case, 1 when absent), checked to be a count."""
    chain = meta["qualifiers"].get("chain") or 1
    if not isinstance(chain, int) or isinstance(chain, bool) or chain < 1:
        raise ConformanceError(f"meta.qualifiers.chain must be a positive integer, got {chain!r}")
    return chain


def check_recording(arrays: dict, meta: dict) -> None:
    """What the replay reads, checked against FORMAT.md before any case runs: meta's
    ``qualifiers`` and ``ptx``, and each array's presence, dtype and shape (one entry per case
    along the first axis, ``n`` = the length of ``mode``).  A file that fails is a
    :class:`ConformanceError` naming the key, not an exception from deep in the replay."""
    family = meta["family"]
    if not isinstance(meta.get("qualifiers"), dict):
        raise ConformanceError("meta.qualifiers must be an object (FORMAT.md), got "
                               f"{type(meta.get('qualifiers')).__name__}")
    chain = chain_length(meta)
    ptx = meta.get("ptx")
    if not isinstance(ptx, list) or not all(isinstance(t, str) for t in ptx):
        raise ConformanceError(f"meta.ptx must be a list of instruction strings, got {ptx!r:.80}")
    if family in ("mma", "mma_sp", "ldmatrix", "stmatrix", "movmatrix") and len(ptx) != 1:
        raise ConformanceError(f"meta.ptx of an {family} file holds its one instruction, got {len(ptx)} lines")
    if family == "wmma" and len(ptx) != len(WMMA_PTX):
        raise ConformanceError(f"meta.ptx of a wmma file holds load a, load b, load c, mma and store "
                               f"({len(WMMA_PTX)} lines), got {len(ptx)}")
    mode = arrays.get("mode")
    n = len(mode) if isinstance(mode, np.ndarray) and mode.ndim == 1 else None
    if n == 0:
        raise ConformanceError("the file holds no cases ('mode' is empty): a replay of nothing is not a pass")
    for name, (kinds, ndims) in ARRAYS[family].items():
        x = arrays.get(name)
        if x is None:
            if name == "a_regs" and family in ("wgmma", "wgmma_sp"):
                continue  # its instructions' A source decides (replay_wgmma, replay_wgmma_sp)
            raise ConformanceError(f"array {name!r} is missing; a {family} file holds {', '.join(ARRAYS[family])}")
        ndims = ndims if isinstance(ndims, tuple) else (ndims,)
        if n is not None and x.ndim in ndims and x.dtype.kind in kinds and x.shape[0] != n:
            raise ConformanceError(f"array {name!r} holds {x.shape[0]} cases along its first axis, but array 'mode' "
                                   f"holds {n}: each array has one entry per case")
        if x.dtype.kind not in kinds or x.ndim not in ndims or (n is not None and x.shape[0] != n):
            allowed = {"u": "unsigned", "iu": "integer", "iub": "integer or bool"}[kinds]
            raise ConformanceError(
                f"array {name!r} must be {allowed} with {' or '.join(map(str, ndims))} dimensions and "
                f"{'one entry per case (' + str(n) + ')' if n is not None else 'mode 1-D'} along the first, "
                f"got dtype {x.dtype}, shape {x.shape}")
    for name in STEP_REGISTERS.get(family, ()):  # a chain's registers of each step along the second axis
        want = 4 if chain > 1 else 3
        if arrays[name].ndim != want or (chain > 1 and arrays[name].shape[1] != chain):
            raise ConformanceError(f"array {name!r} must have {want} dimensions"
                                   + (f", a chain of {chain} along the second" if chain > 1 else "")
                                   + f", got shape {arrays[name].shape}")
    if family in ("wgmma", "wgmma_sp"):
        for name in ("a_desc", "b_desc"):
            if arrays[name].shape[1:] not in ((), (chain,)):
                raise ConformanceError(f"array {name!r} must have shape ({n},) or ({n}, {chain}) for a chain of "
                                       f"{chain}, got {arrays[name].shape}")


def _compare(result: FileResult, case: int, what: str, expected, got, limit: int) -> None:
    expected = np.asarray(expected)
    got = np.asarray(got)
    bad = np.argwhere(expected != got) if expected.shape == got.shape else None
    if bad is None:
        result.failed_cases.add(case)
        result.mismatches.append(f"case {case}: {what} has shape {got.shape}, expected {expected.shape}")
        return
    if len(bad):
        result.failed_cases.add(case)
        for idx in bad[: max(0, limit - len(result.mismatches))]:
            idx = tuple(int(x) for x in idx)
            result.mismatches.append(Mismatch(case, what, idx, int(expected[idx]), int(got[idx])))


def _instruction(text: str, cls, name: str, matrix: str | None = None):
    """``text`` parsed, checked to be the instruction its place in meta.ptx says it is: a
    ``name`` (of class ``cls``; a load of ``matrix``)."""
    inst = parse(text)
    if not isinstance(inst, cls) or (matrix and inst.matrix != matrix):
        raise ConformanceError(f"meta.ptx holds {text!r:.80} where the format puts a {name}")
    return inst


def replay_wmma(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """Load, mma and store each case.  A chain (``qualifiers.chain`` > 1, a k-loop) loads A
    and B once per step, :func:`wmma_step_offset` bytes further along K, and feeds each D to
    the next step as C; ``a_frag``/``b_frag`` are step 0's."""
    load_a, load_b, load_c, mma_text, store_text = (
        _instruction(text, *row) for text, row in zip(meta["ptx"], WMMA_PTX))
    chain = chain_length(meta)
    for i in range(len(arrays["mode"])):
        frags = {key: wmma.load(inst, arrays[f"{key}_mem"][i], 0, int(arrays[f"ld{key}"][i]))
                 for key, inst in (("a", load_a), ("b", load_b), ("c", load_c))}
        for key in "abc":
            _compare(result, i, f"{key}_frag", arrays[f"{key}_frag"][i], frags[key], limit)
        d = wmma_k_loop(mma_text, load_a, load_b, arrays["a_mem"][i], arrays["b_mem"][i], int(arrays["lda"][i]),
                        int(arrays["ldb"][i]), frags["a"], frags["b"], frags["c"], chain)
        _compare(result, i, "d_frag", arrays["d_frag"][i], d, limit)
        expected = arrays["d_mem"][i]
        mem = np.full(expected.shape, WMMA_PREFILL, dtype=np.uint8)
        wmma.store(store_text, mem, 0, d, int(arrays["ldd"][i]))
        _compare(result, i, "d_mem", expected, mem, limit)


def wmma_k_loop(mma, load_a, load_b, a_mem, b_mem, lda: int, ldb: int, a, b, c, chain: int):
    """D of a case's ``chain`` k-steps: step 0 on the fragments ``a`` and ``b`` given, each
    later one on A and B loaded :func:`wmma_step_offset` further along K; each D is the next
    step's C."""
    d = c
    for step in range(chain):
        if step:
            a = wmma.load(load_a, a_mem, wmma_step_offset(load_a, step, lda), lda)
            b = wmma.load(load_b, b_mem, wmma_step_offset(load_b, step, ldb), ldb)
        d = wmma.mma(mma, a, b, d)
    return d


def wgmma_chain(insts, c_regs, smem, a_desc, b_desc, a_regs, scale_d: bool, image_address: int):
    """D registers of one case: the chain's instructions in turn on the same registers, the
    run-time ``scale_d`` on the first and the immediate 1 on the others; instruction ``j`` on
    ``a_desc[j]`` (or ``a_regs``) and ``b_desc[j]``."""
    regs = c_regs
    for j, inst in enumerate(insts):
        source = {"a_regs": a_regs} if inst.a_source == "reg" else {"a_desc": int(a_desc[j])}
        regs = wgmma.mma_async(inst, regs, b_desc=int(b_desc[j]), smem=smem, scale_d=scale_d if j == 0 else True,
                               image_address=image_address, **source)
    return regs


def wmma_step_offset(load, step: int, ld: int) -> int:
    """Byte offset of k-step ``step``'s tile for a chain's ``wmma.load.a``/``.b`` (FORMAT.md,
    "Chains"): ``step * k`` elements along K, which is the contiguous direction of a row-major
    A and a column-major B and ``ld`` elements a line otherwise."""
    along = "row" if load.matrix == "a" else "col"
    elements = step * load.shape.k * (1 if load.layout == along else ld)
    return elements * get_format(load.type).bits // 8


def replay_wgmma(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """Every case's ``wgmma.mma_async`` (or chain of them, meta.ptx) on the recorded images,
    descriptors and registers, compared with the recorded D; mismatches go into ``result``."""
    insts = [_instruction(t, WgmmaMmaAsync, "wgmma.mma_async") for t in meta["ptx"] if t.startswith("wgmma")]
    chain = chain_length(meta)
    if len(insts) != chain:
        raise ConformanceError(f"meta.ptx holds {len(insts)} wgmma instructions, chain says {chain}")
    if "a_regs" not in arrays and any(inst.a_source == "reg" for inst in insts):
        raise ConformanceError("array 'a_regs' is missing; its instructions take A from registers")
    n = len(arrays["mode"])
    a_desc = arrays["a_desc"].reshape(n, -1)
    b_desc = arrays["b_desc"].reshape(n, -1)
    bases = image_bases(meta, n)
    for i in range(n):
        regs = wgmma_chain(insts, arrays["c_regs"][i], arrays["smem"][i], a_desc[i], b_desc[i],
                           arrays["a_regs"][i] if "a_regs" in arrays else None, bool(arrays["scale_d"][i]), bases[i])
        _compare(result, i, "d_regs", arrays["d_regs"][i], regs, limit)


def wgmma_sp_chain(insts, arrays: dict, image_address) -> np.ndarray:
    """D registers of every case (one :func:`fastmma.wgmma.mma_async_sp_stack` call a step): a
    chain's instructions in turn on the same registers, the run-time ``scale_d`` on the first
    and the immediate 1 on the others; instruction ``j`` on ``a_desc[:, j]`` (or ``a_regs``),
    ``b_desc[:, j]`` and ``e_regs[:, j]`` (a chain's) or ``e_regs``."""
    n, chain = len(arrays["mode"]), len(insts)
    a_desc, b_desc = arrays["a_desc"].reshape(n, -1), arrays["b_desc"].reshape(n, -1)
    regs = arrays["c_regs"]
    for j, inst in enumerate(insts):
        source = {"a_regs": arrays["a_regs"]} if inst.a_source == "reg" else {"a_desc": a_desc[:, j]}
        regs = wgmma.mma_async_sp_stack(inst, regs, e_regs=arrays["e_regs"][:, j] if chain > 1 else arrays["e_regs"],
                                        b_desc=b_desc[:, j], smem=arrays["smem"],
                                        scale_d=arrays["scale_d"].astype(bool) if j == 0 else True,
                                        image_address=image_address, **source)
    return regs


def replay_wgmma_sp(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """Every case's ``wgmma.mma_async.sp`` (meta.ptx: the predicate's ``setp`` and the
    instruction, or a chain's instructions) on the recorded images, descriptors, registers and
    metadata, with the selector of the recorded operands (:func:`wgmma_sp_chain`)."""
    texts = [t for t in meta["ptx"] if t.startswith("wgmma")]
    chain = chain_length(meta)
    if len(texts) != chain:
        raise ConformanceError(f"meta.ptx holds {len(texts)} wgmma.mma_async.sp instructions, chain says {chain}")
    insts = [_instruction(t, WgmmaMmaAsyncSp, "wgmma.mma_async.sp") for t in texts]
    if any(inst.a_source == "reg" for inst in insts) and "a_regs" not in arrays:
        raise ConformanceError("array 'a_regs' is missing; its instructions take A from registers")
    d = wgmma_sp_chain(insts, arrays, np.array(image_bases(meta, len(arrays["mode"]))))
    for i in range(len(arrays["mode"])):
        _compare(result, i, "d_regs", arrays["d_regs"][i], d[i], limit)


def replay_mma(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """One ``mma.sync`` per case, on the recorded A, B and C registers; a chain (a warp's
    k-loop) issues it once per step on that step's A and B, each D the next step's C."""
    inst = _instruction(meta["ptx"][0], MmaSync, "mma.sync")
    chain = chain_length(meta)
    for i in range(len(arrays["mode"])):
        d = arrays["c_regs"][i]
        for a, b in _register_steps(arrays, i, "ab", chain):
            d = mma_sync.mma(inst, a, b, d)
        _compare(result, i, "d_regs", arrays["d_regs"][i], d, limit)


def _register_steps(arrays: dict, case: int, names: str, chain: int):
    """Case ``case``'s registers ``names`` (``"abe"``: a_regs, b_regs, e_regs) step by step: a
    chain's hold a step axis after the case axis (:data:`STEP_REGISTERS`)."""
    regs = [arrays[f"{x}_regs"][case] for x in names]
    return zip(*regs) if chain > 1 else [tuple(regs)]


def replay_mma_sp(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """One ``mma.sp`` per case, on the recorded A, B, C and metadata registers, with the
    sparsity selector of the recorded instruction's operands; a chain (a warp's k-loop)
    issues it once per step on that step's A, B and metadata, each D the next step's C."""
    inst = _instruction(meta["ptx"][0], MmaSp, "mma.sp")
    chain = chain_length(meta)
    for i in range(len(arrays["mode"])):
        d = arrays["c_regs"][i]
        for a, b, e in _register_steps(arrays, i, "abe", chain):
            d = mma_sync.mma_sp(inst, a, b, d, e)
        _compare(result, i, "d_regs", arrays["d_regs"][i], d, limit)


def replay_ldmatrix(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """Each case's ``ldmatrix`` on its image and lane addresses, against the registers."""
    inst = _instruction(meta["ptx"][0], Ldmatrix, "ldmatrix")
    for i in range(len(arrays["mode"])):
        regs = ldmatrix.ldmatrix(inst, arrays["smem"][i], arrays["addresses"][i])
        _compare(result, i, "regs", arrays["regs"][i], regs, limit)


def replay_stmatrix(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """Each case's ``stmatrix`` of its registers into a copy of its image, against the image after."""
    inst = _instruction(meta["ptx"][0], Stmatrix, "stmatrix")
    for i in range(len(arrays["mode"])):
        smem = arrays["smem"][i].copy()
        ldmatrix.stmatrix(inst, smem, arrays["addresses"][i], arrays["regs"][i])
        _compare(result, i, "smem_after", arrays["smem_after"][i], smem, limit)


def replay_movmatrix(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """Each case's ``movmatrix`` of its source registers, against the destination registers."""
    inst = _instruction(meta["ptx"][0], Movmatrix, "movmatrix")
    for i in range(len(arrays["mode"])):
        _compare(result, i, "d_regs", arrays["d_regs"][i], ldmatrix.movmatrix(inst, arrays["a_regs"][i]), limit)


def image_bases(meta: dict, n: int) -> list[int]:
    """Shared address of each case's image, modulo 1024 (all the swizzles see): from
    ``smem_base_observed``, one value for the file or one per case; 0 when absent."""
    observed = meta.get("smem_base_observed") or [0]
    if not isinstance(observed, list) or not all(isinstance(b, int) and b >= 0 for b in observed):
        raise ConformanceError(f"smem_base_observed must be a list of shared addresses, got {observed!r:.80}")
    if len(observed) not in (1, n):
        raise ConformanceError(f"smem_base_observed holds {len(observed)} values for {n} cases")
    return [int(observed[0 if len(observed) == 1 else i]) % 1024 for i in range(n)]


def check_file(path, limit: int = 8) -> FileResult:
    """Replay every case of one recording; never raises for a bad file (the result says why)."""
    path = Path(path)
    result = FileResult(path, family="?")
    try:
        arrays, meta = load_recording(path)
        mode = arrays.get("mode")
        result.cases = mode.shape[0] if isinstance(mode, np.ndarray) and mode.ndim else 0
        family = meta.get("family")
        if family == "triton":
            result.family, result.cases = family, 0
            result.skipped = "a Triton kernel's recording: tests/test_triton.py replays it under fastmma.triton.emulate()"
            return result
        if family not in FAMILIES:
            raise ConformanceError(f"family {family!r:.40} is not one fastmma replays ({', '.join(FAMILIES)})")
        result.family = family
        check_recording(arrays, meta)
        _replay(family, arrays, meta, result, limit)
    except FastmmaError as exc:
        result.error = f"{type(exc).__name__}: {shorten(str(exc))}"
    except RecursionError:  # meta nested past what the checks can walk
        result.error = "ConformanceError: meta nests too deeply to be a golden-vector file's"
    return result


#: the array each API argument of a replay is read from, where the two names differ
_ARG_KEYS = {"movmatrix": {"regs": "a_regs"}, "mma": {"a": "a_regs", "b": "b_regs", "c": "c_regs"},
             "mma_sp": {"a": "a_regs", "b": "b_regs", "c": "c_regs", "e": "e_regs"},
             "wgmma": {"d_regs": "c_regs"}, "wgmma_sp": {"d_regs": "c_regs"}}


def _replay(family: str, arrays: dict, meta: dict, result: FileResult, limit: int) -> None:
    """Replay a checked recording; an error about an API argument names the array it came from."""
    try:
        replay = {"wmma": replay_wmma, "wgmma": replay_wgmma, "wgmma_sp": replay_wgmma_sp, "mma": replay_mma,
                  "mma_sp": replay_mma_sp, "ldmatrix": replay_ldmatrix, "stmatrix": replay_stmatrix,
                  "movmatrix": replay_movmatrix}
        replay[family](arrays, meta, result, limit)
    except FastmmaError as exc:
        argument = str(exc).split(" ", 1)[0]
        key = _ARG_KEYS.get(family, {}).get(argument, argument if argument in ARRAYS[family] else None)
        if key is None:
            raise
        raise ConformanceError(f"array {key!r}: {exc}") from exc


def recording_files(paths) -> list[Path]:
    """The ``.npz`` files named by ``paths`` (files, or directories searched recursively).  A
    directory with none is an error: a run that checks nothing must not read as a pass."""
    files = []
    for p in map(Path, paths):
        try:
            found = sorted(p.rglob("*.npz")) if p.is_dir() else None
            exists = found is not None or p.exists()
        except OSError as exc:  # a name too long, a folder that cannot be read
            raise ConformanceError(f"{excerpt(str(p))}: cannot be read ({exc.strerror})") from None
        if found is not None:
            if not found:
                raise ConformanceError(f"{excerpt(str(p))}: no recordings (.npz files) in this directory or below it")
            files.extend(found)
        elif exists:
            files.append(p)
        else:
            raise ConformanceError(f"{excerpt(str(p))}: no such file or directory")
    return files


def run(paths, out=None, limit: int = 8, progress=None) -> tuple[int, int]:
    """Check every recording under ``paths``; print a line per file and a summary.

    Returns ``(cases passed, cases failed)``.  A file that cannot be replayed counts all its
    cases (at least one) as failed.
    """
    out = out or sys.stdout
    passed = failed = skipped = 0
    for path in recording_files(paths):
        res = check_file(path, limit)
        if res.skipped is not None:
            skipped += 1
            print(f"skip {path.name}: {res.skipped}", file=out)
        elif res.error is not None:
            lost = max(res.cases, 1)
            failed += lost
            print(f"FAIL {path.name}: cannot run ({res.error}); {lost} case(s) counted as failed", file=out)
        elif res.ok:
            passed += res.cases
            print(f"pass {path.name}: {res.cases} cases", file=out)
        else:
            passed += res.passed
            failed += len(res.failed_cases)
            print(f"FAIL {path.name}: {len(res.failed_cases)} of {res.cases} cases differ", file=out)
            for m in res.mismatches:
                print(f"    {m}", file=out)
        if progress is not None:
            progress()
    if skipped:
        print(f"{skipped} Triton kernel recording(s) not replayed here (tests/test_triton.py replays them)", file=out)
    print(f"{passed} passed, {failed} failed", file=out)
    return passed, failed
