from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ModuleTmp, Standalone

LOW_DISK_GIB = 2  # a default suite run peaks at ~1 GB of temp dirs


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the heavier suites (crash loops, soak)")
    parser.addoption("--run-spark", action="store_true",
                     help="also run the PySpark connector suite (needs the 'spark' extra and Java 17)")
    parser.addoption("--run-reference", action="store_true",
                     help="also run tests/reference: Apache RocketMQ and the official Java/Go clients (Java 17, Maven)")


def pytest_report_header(config: pytest.Config) -> str:
    """Free space where the brokers' temp dirs go: a suite run on a nearly full disk fails half-way with
    errors that do not say why (each broker preallocates its CommitLog files)."""
    where = Path(tempfile.gettempdir()) if config.option.basetemp is None else Path(config.option.basetemp).parent
    free = shutil.disk_usage(where).free / 2**30
    low = f"  LOW: under {LOW_DISK_GIB} GiB, brokers may fail to make their files" if free < LOW_DISK_GIB else ""
    return f"disk: {free:.1f} GiB free at {where}{low}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_slow = pytest.mark.skip(reason="slow suite: run with --run-slow")
    skip_spark = pytest.mark.skip(reason="PySpark suite: run with --run-spark (pip install -e '.[spark]')")
    run_slow = config.getoption("--run-slow")
    run_spark = config.getoption("--run-spark")
    skip_reference = pytest.mark.skip(reason="reference suite (Apache RocketMQ, Java and Go clients): run with --run-reference")
    run_reference = config.getoption("--run-reference")
    reference_dir = Path(__file__).parent / "reference"
    for item in items:
        if reference_dir in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.reference)
        if item.get_closest_marker("reference") is not None and not run_reference:
            item.add_marker(skip_reference)
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
def module_tmp(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ModuleTmp]:
    """``tmp_path_factory.mktemp`` for module-scoped fixtures, whose dirs pytest's retention policy (kept
    for failed tests only) does not cover: they are removed at the module's end, after the fixtures that
    use them (a broker is stopped first), unless one of the module's tests failed (kept for their logs).
    Every broker preallocates its CommitLog files: kept, a suite run's dirs took ~22 GB."""
    made: list[Path] = []
    failed_before = request.session.testsfailed

    def mktemp(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield mktemp
    if request.session.testsfailed == failed_before:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_standalone(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    """One broker for a module's tests that do not restart or kill it (each uses its own topics)."""
    with Standalone(module_tmp("shared") / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}) as s:  # stopped (SIGTERM) on exit
        yield s
