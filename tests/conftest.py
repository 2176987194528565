from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


def golden_files(family: str) -> list[Path]:
    return sorted((GOLDEN / family).glob("*.npz"))


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return GOLDEN
