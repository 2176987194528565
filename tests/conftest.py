import zlib
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


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
