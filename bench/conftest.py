"""Collect the ratios each benchmark records and print them as one table at the end.

``--ratio-table PATH`` also writes the table as Markdown (README's performance section is
made from it).
"""

import platform

import numpy as np
import pytest

ROWS = []
SPEEDUPS = []
MEMORY = []
INSTRUCTIONS = []


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Run the benchmarks in this one process: the test suite's ``-n auto`` (pyproject's
    addopts) would start pytest-xdist's workers, under which pytest-benchmark times nothing,
    and two processes would share the cores being measured."""
    if hasattr(config.option, "numprocesses"):
        config.option.numprocesses = 0


def pytest_addoption(parser):
    parser.addoption("--ratio-table", default=None, metavar="PATH",
                     help="write the fastmma/baseline ratio table (Markdown) to PATH")


@pytest.fixture
def record_ratio():
    """record_ratio(case, size, seconds, baseline_name, baseline_seconds, **extra)."""
    def record(case, size, seconds, baseline, baseline_seconds, **extra):
        ROWS.append(dict(case=case, size=size, seconds=seconds, baseline=baseline,
                         baseline_seconds=baseline_seconds, ratio=seconds / baseline_seconds, **extra))
    return record


@pytest.fixture
def record_speedup():
    """record_speedup(case, size, seconds, mmasim_seconds, mmasim_tuned_seconds): MMA-Sim with
    glibc's default allocator and with one tuned to reuse freed memory."""
    def record(case, size, seconds, mmasim_seconds, mmasim_tuned_seconds):
        SPEEDUPS.append(dict(case=case, size=size, seconds=seconds, mmasim=mmasim_seconds,
                             tuned=mmasim_tuned_seconds))
    return record


@pytest.fixture
def record_memory():
    """record_memory(case, grown_bytes, inputs_plus_output_bytes)."""
    def record(case, grown, base):
        MEMORY.append(dict(case=case, grown=grown, base=base))
    return record


@pytest.fixture
def record_instruction():
    """record_instruction(short_form, path, seconds, numpy_seconds, mmasim_seconds or None):
    one call of one instruction (bench_instruction.py)."""
    def record(short, path, seconds, numpy_seconds, mmasim_seconds):
        INSTRUCTIONS.append(dict(short=short, path=path, seconds=seconds, numpy=numpy_seconds, mmasim=mmasim_seconds))
    return record


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    except OSError:
        model = platform.processor() or "?"
    import os

    return f"{model}, {os.cpu_count()} cores, numpy {np.__version__}"


def duration(seconds: float) -> str:
    """``seconds`` to three significant digits in us, ms or s (at 256^3 a call takes some
    hundreds of microseconds, which four decimals of a second rounded to 0.0003 s)."""
    for unit, scale in (("us", 1e-6), ("ms", 1e-3)):
        if seconds < 1000 * scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"


def table() -> str:
    lines = [f"Measured on: {machine()}"]
    if ROWS:
        lines += ["", "| case | size | fastmma | baseline | baseline time | fastmma / baseline |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in ROWS:
            lines.append(f"| {r['case']} | {r['size']} | {duration(r['seconds'])} | {r['baseline']} | "
                         f"{duration(r['baseline_seconds'])} | {r['ratio']:.2f}x |")
    if SPEEDUPS:
        lines += ["", "| case | size | fastmma | MMA-Sim | speed-up | MMA-Sim, allocator tuned | speed-up |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in SPEEDUPS:
            lines.append(f"| {r['case']} | {r['size']} | {duration(r['seconds'])} | {duration(r['mmasim'])} | "
                         f"{r['mmasim'] / r['seconds']:.0f}x | {duration(r['tuned'])} | {r['tuned'] / r['seconds']:.0f}x |")
    if MEMORY:
        lines += ["", "| case | memory added | inputs + output | ratio |", "| --- | --- | --- | --- |"]
        for r in MEMORY:
            lines.append(f"| {r['case']} | {r['grown'] / 2**20:.1f} MiB | {r['base'] / 2**20:.1f} MiB | "
                         f"{r['grown'] / r['base']:.2f}x |")
    if INSTRUCTIONS:
        lines += ["", "| instruction | path | fastmma per call | numpy float32, same tile | ratio | "
                      "MMA-Sim per call | speed-up |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in INSTRUCTIONS:
            sim = (f"{r['mmasim'] * 1e6:.0f} us | {r['mmasim'] / r['seconds']:.1f}x" if r["mmasim"] is not None
                   else "- | -")
            lines.append(f"| {r['short']} | {r['path']} | {r['seconds'] * 1e6:.0f} us | {r['numpy'] * 1e6:.1f} us | "
                         f"{r['seconds'] / r['numpy']:.0f}x | {sim} |")
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not (ROWS or SPEEDUPS or MEMORY or INSTRUCTIONS):
        return
    text = table()
    terminalreporter.write_sep("=", "fastmma / baseline, measured side by side in this run")
    terminalreporter.write_line(text)
    path = config.getoption("--ratio-table")
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
