import os
import zlib
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


class OfflineSection:
    """A ``fastmma verify`` section's stand-in parts for a machine without a GPU: nothing is
    missing, and the forms are the test module's ``FORMS`` (set on the subclass)."""
    FORMS = ()

    def missing(self):
        return None

    def forms(self, full):
        return self.FORMS


def seed(*key) -> int:
    """A random generator's seed from ``key`` (strings, numbers, tuples of them), the same in
    every process: Python's ``hash`` of a string changes from run to run, so a failure on
    data seeded by it could not be run again."""
    return zlib.crc32(repr(key).encode())


def golden_files(family: str) -> list[Path]:
    return sorted((GOLDEN / family).glob("*.npz"))


def recordings(family: str, keep=lambda meta: True) -> list[Path]:
    """Every recording of ``family`` under golden/, the probes' included, whose meta ``keep``
    accepts."""
    from fastmma.conform import load_recording

    found = []
    for path in sorted(GOLDEN.rglob("*.npz")):
        meta = load_recording(path)[1]
        if meta.get("family") == family and keep(meta):
            found.append(path)
    return found


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return GOLDEN


def pytest_configure(config):
    """Before pytest-xdist starts its workers, compile every kernel once (``fastmma warmup``),
    so that no two workers compile the same one; ``FASTMMA_WARMUP=0`` skips it."""
    workers = config.getoption("numprocesses", None)
    if hasattr(config, "workerinput") or not workers or os.environ.get("FASTMMA_WARMUP") == "0":
        return
    import warnings

    from fastmma.warmup import warmup

    try:
        report = warmup()
    except Exception as exc:  # the tests compile what they need themselves; the failure is reported
        warnings.warn(f"fastmma warmup failed, the workers compile the kernels themselves: {exc!r}")
        return
    print(f"fastmma warmup: {len(report.types)} types, {report.calls} calls, {report.compiled} compiled, "
          f"{report.loaded} loaded from the cache, {report.seconds:.0f} s")


def pytest_sessionfinish(session):
    from fastmma.warmup import log_counts

    log_counts("pytest " + getattr(session.config, "workerinput", {}).get("workerid", "main"))
