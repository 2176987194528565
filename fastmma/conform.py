"""Replay of hardware recordings (golden-vector format v1) through fastmma's public API.

Every recorded case is executed as a user would: wmma cases through
:func:`fastmma.wmma.load` / :func:`~fastmma.wmma.mma` / :func:`~fastmma.wmma.store` (each
fragment and the stored memory compared; a chain's k-steps in turn, each D the next C),
wgmma cases through :func:`fastmma.wgmma.mma_async` (a chain's instructions in sequence,
scale-d on the first).
Every output bit is compared; a case passes only if all of them match.  The format is
described in tests/golden/FORMAT.md.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import wgmma, wmma
from .errors import ConformanceError, FastmmaError
from .formats import get_format
from .isa import parse

FAMILIES = ("wmma", "wgmma")
WMMA_PREFILL = 0xA5


@dataclass
class Mismatch:
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
    path: Path
    family: str
    cases: int = 0
    failed_cases: set = field(default_factory=set)
    mismatches: list = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> int:
        return self.cases - len(self.failed_cases)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failed_cases


def load_recording(path) -> tuple[dict, dict]:
    """``(arrays, meta)`` of one recording file."""
    try:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(bytes(arrays.pop("meta")).decode())
    except (OSError, ValueError, KeyError) as exc:
        raise ConformanceError(f"{path}: not a golden-vector file ({exc})") from exc
    if meta.get("format_version") != 1:
        raise ConformanceError(f"{path}: format_version {meta.get('format_version')!r}, expected 1")
    return arrays, meta


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


def replay_wmma(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    """Load, mma and store each case.  A chain (``qualifiers.chain`` > 1, a k-loop) loads A
    and B once per step, :func:`wmma_step_offset` bytes further along K, and feeds each D to
    the next step as C; ``a_frag``/``b_frag`` are step 0's."""
    load_a, load_b, load_c, mma_text, store_text = (parse(t) for t in meta["ptx"])
    chain = int(meta["qualifiers"].get("chain") or 1)
    n = len(arrays["mode"])
    result.cases = n
    for i in range(n):
        ld = {key: int(arrays[f"ld{key}"][i]) for key in "abc"}
        c = wmma.load(load_c, arrays["c_mem"][i], 0, ld["c"])
        _compare(result, i, "c_frag", arrays["c_frag"][i], c, limit)
        for step in range(chain):
            frags = {key: wmma.load(inst, arrays[f"{key}_mem"][i], wmma_step_offset(inst, step, ld[key]), ld[key])
                     for key, inst in (("a", load_a), ("b", load_b))}
            if step == 0:
                for key in "ab":
                    _compare(result, i, f"{key}_frag", arrays[f"{key}_frag"][i], frags[key], limit)
            c = d = wmma.mma(mma_text, frags["a"], frags["b"], c)
        _compare(result, i, "d_frag", arrays["d_frag"][i], d, limit)
        expected = arrays["d_mem"][i]
        mem = np.full(expected.shape, WMMA_PREFILL, dtype=np.uint8)
        wmma.store(store_text, mem, 0, d, int(arrays["ldd"][i]))
        _compare(result, i, "d_mem", expected, mem, limit)


def wmma_step_offset(load, step: int, ld: int) -> int:
    """Byte offset of k-step ``step``'s tile for a chain's ``wmma.load.a``/``.b`` (FORMAT.md,
    "Chains"): ``step * k`` elements along K, which is the contiguous direction of a row-major
    A and a column-major B and ``ld`` elements a line otherwise."""
    along = "row" if load.matrix == "a" else "col"
    elements = step * load.shape.k * (1 if load.layout == along else ld)
    return elements * get_format(load.type).bits // 8


def replay_wgmma(arrays: dict, meta: dict, result: FileResult, limit: int = 8) -> None:
    insts = [parse(t) for t in meta["ptx"] if t.startswith("wgmma")]
    chain = int(meta["qualifiers"].get("chain") or 1)
    if len(insts) != chain:
        raise ConformanceError(f"meta.ptx holds {len(insts)} wgmma instructions, chain says {chain}")
    n = len(arrays["mode"])
    result.cases = n
    a_desc = arrays["a_desc"].reshape(n, -1)
    b_desc = arrays["b_desc"].reshape(n, -1)
    bases = image_bases(meta, n)
    for i in range(n):
        regs = arrays["c_regs"][i]
        for j, inst in enumerate(insts):
            source = {"a_regs": arrays["a_regs"][i]} if inst.a_source == "reg" else {"a_desc": int(a_desc[i, j])}
            regs = wgmma.mma_async(inst, regs, b_desc=int(b_desc[i, j]), smem=arrays["smem"][i],
                                   scale_d=bool(arrays["scale_d"][i]) if j == 0 else True,
                                   image_address=bases[i], **source)
        _compare(result, i, "d_regs", arrays["d_regs"][i], regs, limit)


def image_bases(meta: dict, n: int) -> list[int]:
    """Shared address of each case's image, modulo 1024 (all the swizzles see): from
    ``smem_base_observed``, one value for the file or one per case; 0 when absent."""
    observed = meta.get("smem_base_observed") or [0]
    if len(observed) not in (1, n):
        raise ConformanceError(f"smem_base_observed holds {len(observed)} values for {n} cases")
    return [int(observed[0 if len(observed) == 1 else i]) % 1024 for i in range(n)]


def check_file(path, limit: int = 8) -> FileResult:
    """Replay every case of one recording; never raises for a bad file (the result says why)."""
    path = Path(path)
    result = FileResult(path, family="?")
    try:
        arrays, meta = load_recording(path)
        result.family = meta.get("family", "?")
        result.cases = len(arrays.get("mode", ()))
        replay = {"wmma": replay_wmma, "wgmma": replay_wgmma}.get(result.family)
        if replay is None:
            raise ConformanceError(f"family {result.family!r} is not one fastmma replays ({', '.join(FAMILIES)})")
        replay(arrays, meta, result, limit)
    except FastmmaError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def recording_files(paths) -> list[Path]:
    """The ``.npz`` files named by ``paths`` (files, or directories searched recursively).  A
    directory with none is an error: a run that checks nothing must not read as a pass."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("*.npz"))
            if not found:
                raise ConformanceError(f"{p}: no recordings (.npz files) in this directory or below it")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise ConformanceError(f"{p}: no such file or directory")
    return files


def run(paths, out=None, limit: int = 8, progress=None) -> tuple[int, int]:
    """Check every recording under ``paths``; print a line per file and a summary.

    Returns ``(cases passed, cases failed)``.  A file that cannot be replayed counts all its
    cases (at least one) as failed.
    """
    out = out or sys.stdout
    passed = failed = 0
    for path in recording_files(paths):
        res = check_file(path, limit)
        if res.error is not None:
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
    print(f"{passed} passed, {failed} failed", file=out)
    return passed, failed
