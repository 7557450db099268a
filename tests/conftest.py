from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Standalone


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the heavier suites (crash loops, soak)")
    parser.addoption("--run-spark", action="store_true",
                     help="also run the PySpark connector suite (needs the 'spark' extra and Java 17)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_slow = pytest.mark.skip(reason="slow suite: run with --run-slow")
    skip_spark = pytest.mark.skip(reason="PySpark suite: run with --run-spark (pip install -e '.[spark]')")
    run_slow = config.getoption("--run-slow")
    run_spark = config.getoption("--run-spark")
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        if item.get_closest_marker("spark") is not None and not run_spark:
            item.add_marker(skip_spark)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A running ``tidalmq standalone`` on free loopback ports, small files for speed."""
    with Standalone(tmp_path / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}) as s:  # stopped (SIGTERM) on exit
        yield s


@pytest.fixture(scope="module")
def shared_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One broker for a module's tests that do not restart or kill it (each uses its own topics)."""
    with Standalone(tmp_path_factory.mktemp("shared") / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}) as s:  # stopped (SIGTERM) on exit
        yield s
