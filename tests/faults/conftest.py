from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.harness import PowerCutFs, unavailable


@pytest.fixture
def power_fs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PowerCutFs]:
    """A mounted lazyfs (unsynced writes are lost at ``cut()``); skips, saying why, where FUSE is refused."""
    why = unavailable(str(tmp_path_factory.getbasetemp() / "fuse-probe"))
    if why is not None:
        # Loud: a warning in the summary as well as the skip reason, so a machine without FUSE is noticed.
        warnings.warn(f"power-cut tests NOT RUN: {why}", stacklevel=1)
        pytest.skip(f"power-cut harness unavailable: {why}")
    fs = PowerCutFs(tmp_path / "lazy")
    fs.mount()
    try:
        yield fs
    finally:
        fs.unmount()
