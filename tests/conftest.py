from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Standalone


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the heavier suites (crash loops, soak)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow suite: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A running ``tidalmq standalone`` on free loopback ports, small files for speed."""
    s = Standalone(tmp_path / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
    s.start()
    try:
        yield s
    finally:
        try:
            s.stop()
        except RuntimeError:
            pass


@pytest.fixture(scope="module")
def shared_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One broker for a module's tests that do not restart or kill it (each uses its own topics)."""
    s = Standalone(tmp_path_factory.mktemp("shared") / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
    s.start()
    try:
        yield s
    finally:
        try:
            s.stop()
        except RuntimeError:
            pass
