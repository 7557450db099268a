"""Every example in examples/ runs by itself against a standalone on free ports and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import Standalone

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The Spark pipelines (spark_*.py) need the 'spark' extra; tests/spark/test_demo.py runs them.
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith(("_", "spark_")))


@pytest.fixture(scope="module")
def example_results(shared_standalone: Standalone) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run all examples at once (they use their own topics and groups) to keep the suite fast."""
    env = {**os.environ, "NAMESRV_ADDR": shared_standalone.namesrv_addr, "EXAMPLE_TIMEOUT": "40",
           "PYTHONPATH": str(EXAMPLES.parent / "src")}

    def one(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, env=env,
                              timeout=60, cwd=EXAMPLES)

    with ThreadPoolExecutor(len(SCRIPTS)) as pool:
        return dict(zip(SCRIPTS, pool.map(one, SCRIPTS), strict=True))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", SCRIPTS)
def test_example(name: str, example_results: dict[str, subprocess.CompletedProcess[str]]) -> None:
    r = example_results[name]
    assert r.returncode == 0, f"{name} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}"
